//! gRPC and the Connect protocol over TLS on one port: the server's rustls configuration and
//! the stream of connections that finished their handshake.
//!
//! tonic's own TLS offers only `h2` by ALPN, so an HTTP/1.1 client (a Connect call from `curl
//! --http1.1`, a browser) could not agree on a protocol. Here the server offers `h2` and
//! `http/1.1`, and the connection serves whichever the client picked (the server tells them
//! apart by the HTTP/2 preface). Handshakes run concurrently, each bounded by the
//! connection's handshake bound (`--handshake-timeout-ms` from its accept, the same bound the
//! HTTP/2 preface must then arrive within), so a slow or silent client holds no other
//! connection up, nor its own place under the caps for long.

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::server::TlsStream;
use tokio_rustls::{TlsAcceptor, rustls};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

use super::connections::Accepted;

/// A TLS session's handshake bound counts from the accept of the connection beneath it.
impl<C: Accepted> Accepted for TlsStream<C> {
    fn accepted_at(&self) -> tokio::time::Instant {
        self.get_ref().0.accepted_at()
    }
}

/// The server's TLS configuration from PEM: its certificate chain and key, and with
/// `client_ca` the CA that client certificates must chain to (mutual TLS). ALPN offers HTTP/2
/// and HTTP/1.1.
pub fn server_config(cert: &[u8], key: &[u8], client_ca: Option<&[u8]>) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca) {
                roots.add(cert.map_err(|e| format!("client CA: {e}"))?).map_err(|e| format!("client CA: {e}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .map_err(|e| format!("client CA: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let chain =
        CertificateDer::pem_slice_iter(cert).collect::<Result<Vec<_>, _>>().map_err(|e| format!("certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("key: {e}"))?;
    let mut config = builder.with_single_cert(chain, key).map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The connections accepted on `tcp` that completed a TLS handshake with `config` within
/// `bound` of their accept; the others are closed, and those that ran out of time counted in
/// `timed_out`. Accepting stops, and the listener closes, once the stream is dropped.
pub fn incoming<S, C>(
    tcp: S,
    config: Arc<ServerConfig>,
    bound: Duration,
    timed_out: IntCounter,
) -> ReceiverStream<Result<TlsStream<C>, std::io::Error>>
where
    S: Stream<Item = std::io::Result<C>> + Send + 'static,
    C: AsyncRead + AsyncWrite + Accepted + Unpin + Send + 'static,
{
    let mut tcp = Box::pin(tcp);
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let acceptor = TlsAcceptor::from(config);
        loop {
            let stream = tokio::select! {
                next = tcp.next() => match next {
                    Some(Ok(stream)) => stream,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "accept failed");
                        continue;
                    }
                    None => break,
                },
                () = tx.closed() => break,
            };
            let (acceptor, tx, timed_out) = (acceptor.clone(), tx.clone(), timed_out.clone());
            let by = stream.accepted_at() + bound;
            tokio::spawn(async move {
                match tokio::time::timeout_at(by, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                    Err(_) => {
                        timed_out.inc();
                        tracing::debug!("TLS handshake not done within --handshake-timeout-ms");
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// The names a client certificate (DER) goes by, as a policy names them: its subject's common
/// names (`CN=…`), and its DNS and URI subject alternative names (`DNS:…`, `URI:…`). None for
/// a certificate that cannot be read (the handshake checked it already).
pub fn certificate_names(der: &[u8]) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, certificate)) = x509_parser::parse_x509_certificate(der) else { return Vec::new() };
    let mut names: Vec<String> = certificate
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .map(|cn| format!("CN={cn}"))
        .collect();
    if let Ok(Some(san)) = certificate.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(dns) => names.push(format!("DNS:{dns}")),
                GeneralName::URI(uri) => names.push(format!("URI:{uri}")),
                _ => {}
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_goes_by_its_common_name_and_its_dns_and_uri_names() {
        let mut params = rcgen::CertificateParams::new(vec!["billing.svc".to_string()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "billing");
        params.subject_alt_names.push(rcgen::SanType::URI("spiffe://corp/billing".try_into().unwrap()));
        params.subject_alt_names.push(rcgen::SanType::IpAddress([127, 0, 0, 1].into()));
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        assert_eq!(
            certificate_names(certificate.der()),
            vec!["CN=billing", "DNS:billing.svc", "URI:spiffe://corp/billing"]
        );
        assert!(certificate_names(b"not a certificate").is_empty());
    }
}
