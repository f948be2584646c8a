//! The policy file (`--policy-file`): the tenants, who belongs to each, what each may call,
//! and its quota. TOML, one table a tenant:
//!
//! ```toml
//! [tenant.billing]
//! tokens = ["billing-prod"]                     # names in the token file
//! certificates = ["URI:spiffe://corp/billing"]  # CN=…, DNS:… or URI:… of a client certificate
//! allow = ["ids", "uuids", "sequences:invoice-*", "decode"]
//! rate = 50000       # IDs (UUIDs, sequence values) a second; none: no limit
//! burst = 100000     # the most at once; default: one second's worth
//! max_batch = 10000  # the largest batch; default: the server's --max-batch
//! weight = 3         # its share of a busy minter against the others' (1 to 1000; default 1)
//! ```
//!
//! A file with anything wrong is refused whole, naming the line: an unknown key or
//! permission, a value out of range, an identity in two tenants, a tenant no one can be.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use toml::Spanned;

use super::permission::{Need, Permission};
use super::quota::Quota;
use super::token;

/// The highest weight.
pub const MAX_WEIGHT: u32 = 1000;

/// The highest rate a policy may state, IDs a second.
pub const MAX_RATE: f64 = 1e9;

/// Why a policy cannot be used: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct PolicyError {
    pub line: usize,
    pub reason: String,
}

/// One tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    pub name: String,
    /// Names of its tokens in the token file.
    pub tokens: Vec<String>,
    /// Its client certificates' names: `CN=…`, `DNS:…`, `URI:…`.
    pub certificates: Vec<String>,
    pub allow: Vec<Permission>,
    pub quota: Option<Quota>,
    pub max_batch: Option<u32>,
    pub weight: u32,
}

impl Tenant {
    /// Whether its permissions cover `need`.
    pub fn may(&self, need: Need<'_>) -> bool {
        self.allow.iter().any(|p| p.allows(need))
    }
}

/// A policy, read and checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    tenants: Vec<Tenant>,
    by_token: HashMap<String, usize>,
    by_certificate: HashMap<String, usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    tenant: BTreeMap<String, Spanned<TenantFile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantFile {
    #[serde(default)]
    tokens: Vec<Spanned<String>>,
    #[serde(default)]
    certificates: Vec<Spanned<String>>,
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    rate: Option<Spanned<f64>>,
    burst: Option<Spanned<i64>>,
    max_batch: Option<Spanned<i64>>,
    weight: Option<Spanned<i64>>,
}

/// The line (from 1) of byte `at` of `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// Checks a certificate identity as the policy names it.
fn check_certificate(name: &str) -> Result<(), String> {
    let rest = ["CN=", "DNS:", "URI:"].iter().find_map(|kind| name.strip_prefix(kind));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.chars().any(char::is_control) => Ok(()),
        _ => Err(format!(
            "certificate identity {name:?} is CN=<common name>, DNS:<DNS name> or URI:<URI> of a client certificate"
        )),
    }
}

impl Policy {
    /// Reads a policy file's text.
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        let file: PolicyFile = toml::from_str(text).map_err(|e| PolicyError {
            line: e.span().map_or(1, |span| line_of(text, span.start)),
            reason: e.message().trim().to_string(),
        })?;
        let mut policy = Policy::default();
        for (name, spanned) in file.tenant {
            let at = |span: std::ops::Range<usize>| line_of(text, span.start);
            let tenant_line = at(spanned.span());
            let error =
                |line: usize, reason: String| PolicyError { line, reason: format!("tenant {name:?}: {reason}") };
            token::check_name(&name).map_err(|e| error(tenant_line, e.replace("token name", "tenant name")))?;
            let t = spanned.into_inner();
            let index = policy.tenants.len();
            for spanned in &t.tokens {
                let token = spanned.get_ref();
                token::check_name(token).map_err(|e| error(at(spanned.span()), e))?;
                if let Some(other) = policy.by_token.insert(token.clone(), index) {
                    let owner = policy.tenants.get(other).map_or(name.as_str(), |o| o.name.as_str());
                    return Err(error(at(spanned.span()), format!("token {token:?} is tenant {owner:?}'s already")));
                }
            }
            for spanned in &t.certificates {
                let certificate = spanned.get_ref();
                check_certificate(certificate).map_err(|e| error(at(spanned.span()), e))?;
                if let Some(other) = policy.by_certificate.insert(certificate.clone(), index) {
                    let owner = policy.tenants.get(other).map_or(name.as_str(), |o| o.name.as_str());
                    return Err(error(
                        at(spanned.span()),
                        format!("certificate identity {certificate:?} is tenant {owner:?}'s already"),
                    ));
                }
            }
            if t.tokens.is_empty() && t.certificates.is_empty() {
                return Err(error(tenant_line, "no tokens and no certificates: no caller could be this tenant".into()));
            }
            let mut allow = Vec::new();
            for spanned in &t.allow {
                allow.push(Permission::parse(spanned.get_ref()).map_err(|e| error(at(spanned.span()), e))?);
            }
            let quota = match (&t.rate, &t.burst) {
                (None, None) => None,
                (None, Some(burst)) => {
                    return Err(error(at(burst.span()), "a burst without a rate: say the rate too".into()));
                }
                (Some(rate), burst) => {
                    let value = *rate.get_ref();
                    if !(value > 0.0 && value <= MAX_RATE) {
                        return Err(error(
                            at(rate.span()),
                            format!("rate {value} is out of range: more than 0 and at most {MAX_RATE} a second"),
                        ));
                    }
                    let burst = match burst {
                        None => value.ceil().max(1.0) as u64,
                        Some(burst) => match *burst.get_ref() {
                            b @ 1..=1_000_000_000_000 => b as u64,
                            b => {
                                return Err(error(
                                    at(burst.span()),
                                    format!("burst {b} is out of range: 1 to 1000000000000"),
                                ));
                            }
                        },
                    };
                    Some(Quota { rate: value, burst })
                }
            };
            let max_batch = match &t.max_batch {
                None => None,
                Some(spanned) => match *spanned.get_ref() {
                    n @ 1..=4_294_967_295 => Some(n as u32),
                    n => return Err(error(at(spanned.span()), format!("max_batch {n} is out of range: at least 1"))),
                },
            };
            let weight = match &t.weight {
                None => 1,
                Some(spanned) => match *spanned.get_ref() {
                    w @ 1..=1000 => w as u32,
                    w => {
                        return Err(error(
                            at(spanned.span()),
                            format!("weight {w} is out of range: 1 to {MAX_WEIGHT}"),
                        ));
                    }
                },
            };
            policy.tenants.push(Tenant {
                name: name.clone(),
                tokens: t.tokens.into_iter().map(Spanned::into_inner).collect(),
                certificates: t.certificates.into_iter().map(Spanned::into_inner).collect(),
                allow,
                quota,
                max_batch,
                weight,
            });
        }
        Ok(policy)
    }

    pub fn tenants(&self) -> &[Tenant] {
        &self.tenants
    }

    /// The tenant whose token is named `name`.
    pub fn by_token(&self, name: &str) -> Option<usize> {
        self.by_token.get(name).copied()
    }

    /// The tenants any of a certificate's `names` belong to, each once, in the policy's order.
    pub fn by_certificate<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<usize> {
        let mut found: Vec<usize> = names.into_iter().filter_map(|n| self.by_certificate.get(n).copied()).collect();
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Whether any tenant names a client certificate (the server then needs a client CA).
    pub fn names_certificates(&self) -> bool {
        !self.by_certificate.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::tenant::permission::Names;

    const GOOD: &str = r#"
# two tenants
[tenant.billing]
tokens = ["billing-prod", "billing-ci"]
certificates = ["URI:spiffe://corp/billing", "CN=billing"]
allow = ["ids", "uuids", "sequences:invoice-*", "decode"]
rate = 50000
burst = 100000
max_batch = 10000
weight = 3

[tenant.reports]
certificates = ["DNS:reports.svc"]
allow = ["decode", "provenance"]
rate = 0.5
"#;

    #[test]
    fn a_policy_is_read_with_every_setting_and_its_defaults() {
        let policy = Policy::parse(GOOD).unwrap();
        let [billing, reports] = policy.tenants() else { panic!("{policy:?}") };
        assert_eq!(billing.name, "billing");
        assert_eq!(billing.quota, Some(Quota { rate: 50000.0, burst: 100_000 }));
        assert_eq!((billing.max_batch, billing.weight), (Some(10_000), 3));
        assert_eq!(billing.allow[2], Permission::Sequences(Names::Prefix("invoice-".into())));
        assert!(billing.may(Need::Sequence("invoice-eu")) && !billing.may(Need::Sequence("orders")));
        assert!(!billing.may(Need::Reveal));
        assert_eq!(reports.quota, Some(Quota { rate: 0.5, burst: 1 }), "the burst defaults to a second's worth");
        assert_eq!((reports.max_batch, reports.weight), (None, 1));
        assert_eq!(policy.by_token("billing-ci"), Some(0));
        assert_eq!(policy.by_token("reports"), None);
        assert_eq!(policy.by_certificate(["DNS:other", "DNS:reports.svc"]), vec![1]);
        assert_eq!(policy.by_certificate(["CN=billing", "DNS:reports.svc", "URI:spiffe://corp/billing"]), vec![0, 1]);
        assert!(policy.names_certificates());
        assert_eq!(Policy::parse("").unwrap().tenants().len(), 0);
    }

    #[test]
    fn each_mistake_is_named_with_its_line() {
        let cases: [(&str, usize, &str); 14] = [
            ("[tenant.a]\ntokens = [\"t\"]\nallow = [\"ids\", \"mint\"]", 3, "unknown permission \"mint\""),
            ("[tenant.a]\ntokens = [\"t\"]\nrates = 5", 3, "unknown field `rates`"),
            ("[tenants.a]\ntokens = [\"t\"]", 1, "unknown field `tenants`"),
            ("[tenant.a]\nallow = [\"ids\"]", 1, "no tokens and no certificates"),
            ("[tenant.a]\ntokens = [\"t\"]\n\n[tenant.b]\ntokens = [\"t\"]", 5, "tenant \"a\"'s already"),
            (
                "[tenant.a]\ncertificates = [\"CN=x\"]\n[tenant.b]\ncertificates = [\"CN=x\"]",
                4,
                "tenant \"a\"'s already",
            ),
            ("[tenant.a]\ncertificates = [\"O=corp\"]", 2, "CN=<common name>"),
            ("[tenant.a]\ntokens = [\"t\"]\nrate = 0", 3, "rate 0 is out of range"),
            ("[tenant.a]\ntokens = [\"t\"]\nrate = -1", 3, "out of range"),
            ("[tenant.a]\ntokens = [\"t\"]\nburst = 5", 3, "a burst without a rate"),
            ("[tenant.a]\ntokens = [\"t\"]\nrate = 5\nburst = 0", 4, "burst 0 is out of range"),
            ("[tenant.a]\ntokens = [\"t\"]\nweight = 1001", 3, "weight 1001 is out of range"),
            ("[tenant.a]\ntokens = [\"t\"]\nmax_batch = 0", 3, "max_batch 0"),
            ("[tenant.a]\ntokens = [\"t\"\n", 2, ""),
        ];
        for (text, line, says) in cases {
            let error = Policy::parse(text).unwrap_err();
            assert_eq!(error.line, line, "{text:?}: {error}");
            assert!(error.reason.contains(says), "{text:?}: {error}");
        }
        let error = Policy::parse("[tenant.\"A b\"]\ntokens = [\"t\"]").unwrap_err();
        assert!(error.reason.contains("tenant name"), "{error}");
    }

    proptest! {
        /// Any text is read or refused, never half, and a refusal names a line of it.
        #[test]
        fn any_text_is_read_or_refused_with_its_line(
            lines in proptest::collection::vec(
                prop_oneof![
                    Just("[tenant.a]".to_string()),
                    Just("[tenant.b]".to_string()),
                    "(tokens|certificates|allow) = \\[(\"[a-zA-Z:=*.-]{0,8}\",? ?){0,3}\\]",
                    "(rate|burst|max_batch|weight) = -?[0-9]{1,4}(\\.[0-9])?",
                    "[a-z =\\[\\]\"#.]{0,16}",
                ],
                0..12,
            ),
        ) {
            let text = lines.join("\n");
            match Policy::parse(&text) {
                Ok(policy) => prop_assert!(policy.tenants().len() <= 2),
                Err(error) => prop_assert!(error.line >= 1 && error.line <= lines.len().max(1), "{error} in {text:?}"),
            }
        }
    }
}
