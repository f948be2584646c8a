//! Certificates made at test time: a CA, and certificates it signs for loopback servers and
//! clients, written as PEM files into a temp dir.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A test CA.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
    /// The CA certificate, PEM.
    pub ca: PathBuf,
}

impl TestCa {
    /// A new CA whose files go to `dir`.
    pub fn new(dir: &Path, name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let ca = dir.join(format!("{name}.pem"));
        std::fs::write(&ca, issuer.pem()).unwrap();
        TestCa { issuer, dir: dir.to_path_buf(), ca }
    }

    /// A certificate for `name`, valid for 127.0.0.1 and localhost, usable by servers and
    /// clients alike.
    pub fn issue(&self, name: &str) -> CertFiles {
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(name, params)
    }

    /// A client certificate for `name` (its common name) with the DNS names `dns` and the URI
    /// `uri` beside it; with `expired`, one whose validity ended in 2020.
    pub fn issue_client(&self, name: &str, dns: &[&str], uri: Option<&str>, expired: bool) -> CertFiles {
        let mut params = CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        if let Some(uri) = uri {
            params.subject_alt_names.push(SanType::URI(uri.try_into().unwrap()));
        }
        if expired {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(name, params)
    }

    /// A leaf of `params` (with a new key) signed by this CA, written as `name.pem` and
    /// `name-key.pem`.
    fn sign(&self, name: &str, mut params: CertificateParams) -> CertFiles {
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let files =
            CertFiles { cert: self.dir.join(format!("{name}.pem")), key: self.dir.join(format!("{name}-key.pem")) };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }
}
