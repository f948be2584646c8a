//! Tenants: who calls, what each may call, and how much. Pure, with no I/O: the files are
//! read and watched by the server, and the time of a quota given by its caller.
//!
//! - [`token`]: bearer tokens and the token file of their hashes;
//! - [`policy`]: the policy file, its tenants and their settings;
//! - [`permission`]: the permissions, and what each call needs;
//! - [`quota`]: a tenant's bucket of IDs a second;
//! - [`Rules`] (here): a policy and a token file that agree, answering who a caller is and
//!   whether a call of theirs is allowed.

pub mod permission;
pub mod policy;
pub mod quota;
pub mod token;

pub use permission::{Need, Permission};
pub use policy::{Policy, PolicyError, Tenant};
pub use quota::{Bucket, Quota, Short};
pub use token::{TokenFile, TokenFileError};

/// What a caller presented: the `authorization` header's bearer token (or what was wrong
/// with the header), and the names of its client certificate under mutual TLS.
#[derive(Debug, Clone, Copy, Default)]
pub struct Credentials<'a> {
    pub bearer: Option<Result<&'a str, BadHeader>>,
    pub certificate: &'a [String],
}

/// An `authorization` header that is not `Bearer <token>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadHeader;

/// Reads an `authorization` header's value: `Bearer <token>` (the scheme in any case).
pub fn bearer(value: &[u8]) -> Result<&str, BadHeader> {
    let text = std::str::from_utf8(value).map_err(|_| BadHeader)?;
    let (scheme, token) = text.split_once(' ').ok_or(BadHeader)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.contains(char::is_whitespace) {
        return Err(BadHeader);
    }
    Ok(token)
}

/// Why a caller is not known: what `UNAUTHENTICATED` says (never a token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error(
        "no credentials: this server admits callers named in its policy, by a bearer token (authorization: Bearer <token>) or a client certificate"
    )]
    Missing,
    #[error("the authorization header is not `Bearer <token>`")]
    BadHeader,
    #[error("the bearer token is not one this server knows (never issued, or removed from its token file)")]
    UnknownToken,
    #[error("the client certificate ({names}) belongs to no tenant of this server's policy")]
    NoTenant { names: String },
    #[error("the client certificate's names belong to two tenants ({first} and {second}): the policy must give one")]
    TwoTenants { first: String, second: String },
}

/// Why a known caller's call is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "tenant {tenant:?} may not make this call: it needs the permission {needs:?}, which its policy does not give"
    )]
    Denied { tenant: String, needs: String },
    #[error(
        "tenant {tenant:?} may ask for at most {max} at once (its policy's max_batch); this call asked for {asked}"
    )]
    OverMaxBatch { tenant: String, asked: u64, max: u32 },
    #[error("tenant {tenant:?} may take at most {burst} at once (its policy's burst); this call asked for {asked}")]
    OverBurst { tenant: String, asked: u64, burst: u64 },
    #[error("tenant {tenant:?} is over its quota of {rate} a second; retry in {} ms", wait.as_millis())]
    OverQuota { tenant: String, rate: f64, wait: std::time::Duration },
}

/// A policy and the token file it names tokens in, checked to agree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rules {
    policy: Policy,
    tokens: TokenFile,
}

impl Rules {
    /// The rules of `policy` over `tokens`: every token the policy names must be in the file.
    pub fn new(policy: Policy, tokens: TokenFile) -> Result<Rules, String> {
        for tenant in policy.tenants() {
            if let Some(missing) = tenant.tokens.iter().find(|name| !tokens.has_name(name)) {
                return Err(format!(
                    "tenant {:?} names token {missing:?}, which the token file does not have",
                    tenant.name
                ));
            }
        }
        Ok(Rules { policy, tokens })
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Which tenant (its index in the policy) the caller is: by its token when it sent one
    /// (a bad or unknown token is refused, whatever its certificate), else by its certificate.
    pub fn identify(&self, credentials: Credentials<'_>) -> Result<usize, AuthError> {
        match credentials.bearer {
            Some(Err(BadHeader)) => Err(AuthError::BadHeader),
            Some(Ok(token)) => {
                self.tokens.name_of(token).and_then(|name| self.policy.by_token(name)).ok_or(AuthError::UnknownToken)
            }
            None if credentials.certificate.is_empty() => Err(AuthError::Missing),
            None => {
                let found = self.policy.by_certificate(credentials.certificate.iter().map(String::as_str));
                match found[..] {
                    [one] => Ok(one),
                    [] => Err(AuthError::NoTenant { names: credentials.certificate.join(", ") }),
                    [first, second, ..] => Err(AuthError::TwoTenants {
                        first: self.policy.tenants()[first].name.clone(),
                        second: self.policy.tenants()[second].name.clone(),
                    }),
                }
            }
        }
    }

    /// Whether tenant `tenant` may make a call that needs `needs` and asks for `count` (IDs,
    /// UUIDs or values; 0 for calls that take none): its permissions, then its max_batch.
    pub fn check(&self, tenant: usize, needs: &[Need<'_>], count: u64) -> Result<(), Refusal> {
        let t = &self.policy.tenants()[tenant];
        if let Some(need) = needs.iter().find(|need| !t.may(**need)) {
            return Err(Refusal::Denied { tenant: t.name.clone(), needs: need.to_string() });
        }
        match t.max_batch {
            Some(max) if count > u64::from(max) => {
                Err(Refusal::OverMaxBatch { tenant: t.name.clone(), asked: count, max })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> (Rules, String, String) {
        let (billing, reports) = (token::new_token(), token::new_token());
        let tokens = TokenFile::parse(&format!("{}\n{}\n", token::line("b1", &billing), token::line("r1", &reports)));
        let policy = Policy::parse(
            r#"
[tenant.billing]
tokens = ["b1"]
certificates = ["CN=billing", "DNS:shared"]
allow = ["ids", "sequences:invoice-*"]
max_batch = 100
[tenant.reports]
tokens = ["r1"]
certificates = ["DNS:reports", "URI:shared"]
allow = ["decode", "provenance"]
"#,
        );
        (Rules::new(policy.unwrap(), tokens.unwrap()).unwrap(), billing, reports)
    }

    #[test]
    fn a_caller_is_its_token_s_tenant_or_its_certificate_s() {
        let (rules, billing, reports) = rules();
        let with = |bearer, certificate: &[String]| rules.identify(Credentials { bearer, certificate });
        assert_eq!(with(Some(Ok(&billing)), &[]), Ok(0));
        assert_eq!(with(Some(Ok(&reports)), &["CN=billing".into()]), Ok(1), "the token decides");
        assert_eq!(with(Some(Ok("smt_nope")), &["CN=billing".into()]), Err(AuthError::UnknownToken));
        assert_eq!(with(Some(Err(BadHeader)), &[]), Err(AuthError::BadHeader));
        assert_eq!(with(None, &[]), Err(AuthError::Missing));
        assert_eq!(with(None, &["DNS:x".into(), "DNS:reports".into()]), Ok(1));
        let names = ["DNS:x".to_string(), "CN=y".to_string()];
        assert_eq!(with(None, &names), Err(AuthError::NoTenant { names: "DNS:x, CN=y".into() }));
        let both = ["DNS:shared".to_string(), "URI:shared".to_string()];
        let two = AuthError::TwoTenants { first: "billing".into(), second: "reports".into() };
        assert_eq!(with(None, &both), Err(two));
        for error in [with(Some(Ok(&billing[..10])), &[]).unwrap_err(), AuthError::Missing] {
            assert!(!error.to_string().contains(&billing[4..10]), "{error}");
        }
    }

    #[test]
    fn a_call_needs_each_permission_and_a_batch_within_max_batch() {
        let (rules, ..) = rules();
        assert_eq!(rules.check(0, &[Need::Ids], 100), Ok(()));
        assert_eq!(rules.check(0, &[Need::Sequence("invoice-eu")], 1), Ok(()));
        let refused = rules.check(0, &[Need::Decode, Need::Provenance], 0).unwrap_err();
        assert_eq!(refused, Refusal::Denied { tenant: "billing".into(), needs: "decode".into() });
        assert!(refused.to_string().contains("\"decode\""), "{refused}");
        assert_eq!(rules.check(1, &[Need::Decode, Need::Provenance], 0), Ok(()));
        assert_eq!(
            rules.check(0, &[Need::Ids], 101),
            Err(Refusal::OverMaxBatch { tenant: "billing".into(), asked: 101, max: 100 })
        );
        assert_eq!(rules.check(1, &[Need::Decode], u64::MAX), Ok(()), "no max_batch: the server's");
    }

    #[test]
    fn a_policy_naming_a_token_the_file_lacks_is_refused() {
        let policy = Policy::parse("[tenant.a]\ntokens = [\"gone\"]").unwrap();
        let error = Rules::new(policy, TokenFile::default()).unwrap_err();
        assert!(error.contains("\"gone\""), "{error}");
    }

    #[test]
    fn only_a_bearer_header_gives_a_token() {
        assert_eq!(bearer(b"Bearer smt_abc"), Ok("smt_abc"));
        assert_eq!(bearer(b"bearer smt_abc "), Ok("smt_abc"));
        for bad in [&b"smt_abc"[..], b"Basic dXNlcg==", b"Bearer ", b"Bearer a b", b"Bearer \xff"] {
            assert_eq!(bearer(bad), Err(BadHeader), "{bad:?}");
        }
    }
}
