//! The tenants' gate: who a caller is, and whether each call of theirs goes through.
//!
//! With a policy (`--policy-file`), the front door ([`super::dispatch`]) asks the gate who a
//! call's caller is, from its bearer token or its connection's client certificate, and
//! refuses a caller it does not know (`UNAUTHENTICATED`) before any path runs. A known one is
//! carried in the call's context as [`Admitted`]; each call of the service then asks it for
//! what the call needs ([`Admitted::admit`]): its permissions, its `max_batch`, and its quota,
//! whose buckets live here, one per tenant, carried across reloads.
//!
//! The rules ([`Rules`]) are swapped whole on a reload; a call keeps the rules it was
//! identified under. Refusals are counted by tenant and reason, and logged with the tenant:
//! a kind of refusal at most once every [`LOG_EVERY`], with the count it stands for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use http::HeaderValue;

use crate::metrics::{CODES, Metrics, TENANT_REFUSALS};
use crate::minter::Share;
use crate::tenant::{AuthError, Bucket, Credentials, Need, Refusal, Rules, Short, Tenant, bearer};

/// The most often one kind of refusal (a tenant's, for one reason; a caller's unknown, for
/// one reason) is logged: a tenant refused a thousand times a second makes one line in this
/// long, which counts the refusals it stands for.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The gate of a server with a policy.
pub struct Gate {
    rules: RwLock<Arc<Rules>>,
    /// Each tenant's quota bucket, by name, made at its first call.
    buckets: Mutex<HashMap<String, Bucket>>,
    /// The origin of the buckets' time.
    epoch: Instant,
    metrics: Metrics,
    refusals: RefusalLog,
}

/// When each kind of refusal was last logged, and the refusals since: by tenant (`""` for
/// callers the gate does not know), then by reason. Bounded by the policy's tenants.
#[derive(Default)]
struct RefusalLog(Mutex<HashMap<String, HashMap<&'static str, Logged>>>);

/// When a kind of refusal was last logged, and the refusals of it since.
type Logged = (Instant, u64);

impl RefusalLog {
    /// Counts a refusal of `who` for `reason` at `now`; `Some(refusals)` when it is to be
    /// logged (the first of its kind, or the first after [`LOG_EVERY`]), with the refusals
    /// the line stands for, itself included.
    fn due(&self, who: &str, reason: &'static str, now: Instant) -> Option<u64> {
        let mut log = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let reasons = match log.get_mut(who) {
            Some(reasons) => reasons,
            None => log.entry(who.to_string()).or_default(),
        };
        match reasons.get_mut(reason) {
            Some((last, count)) if now.duration_since(*last) < LOG_EVERY => {
                *count += 1;
                None
            }
            Some((last, count)) => {
                let refusals = *count + 1;
                (*last, *count) = (now, 0);
                Some(refusals)
            }
            None => {
                reasons.insert(reason, (now, 0));
                Some(1)
            }
        }
    }
}

impl Gate {
    pub fn new(rules: Rules, metrics: Metrics) -> Arc<Gate> {
        let gate = Gate {
            rules: RwLock::new(Arc::new(Rules::default())),
            buckets: Mutex::default(),
            epoch: Instant::now(),
            metrics,
            refusals: RefusalLog::default(),
        };
        gate.replace(rules);
        Arc::new(gate)
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Puts `rules` in force, for calls identified from now on: buckets keep what they hold
    /// under a changed quota, and every tenant's series are shown from now on.
    pub fn replace(&self, rules: Rules) {
        let now = self.epoch.elapsed();
        {
            let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
            for tenant in rules.policy().tenants() {
                let name = tenant.name.as_str();
                self.metrics.tenant_ids.with_label_values(&[name]);
                self.metrics.tenant_calls.with_label_values(&[name, CODES[0]]);
                for reason in TENANT_REFUSALS {
                    self.metrics.tenant_refusals.with_label_values(&[name, reason]);
                }
                match (tenant.quota, buckets.get_mut(name)) {
                    (Some(quota), Some(bucket)) => bucket.requota(quota, now),
                    (Some(quota), None) => {
                        buckets.insert(tenant.name.clone(), Bucket::new(quota, now));
                    }
                    (None, _) => {
                        buckets.remove(name);
                    }
                }
                if let Some(quota) = tenant.quota {
                    let available = buckets.get_mut(name).map_or(quota.burst, |b| b.available(now));
                    self.metrics.tenant_quota_available.with_label_values(&[name]).set(available as i64);
                }
            }
        }
        *self.rules.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(rules);
    }

    /// Who sent a call with this `authorization` header (if any) on a connection whose client
    /// certificate has these names, or why no tenant: counted by reason.
    pub fn identify(
        self: &Arc<Self>,
        authorization: Option<&HeaderValue>,
        certificate: &[String],
    ) -> Result<Admitted, AuthError> {
        let rules = self.rules();
        let credentials = Credentials { bearer: authorization.map(|v| bearer(v.as_bytes())), certificate };
        match rules.identify(credentials) {
            Ok(tenant) => Ok(Admitted { gate: self.clone(), rules, tenant, authorization: authorization.cloned() }),
            Err(error) => {
                let reason = match error {
                    AuthError::Missing => "missing",
                    AuthError::BadHeader => "bad_header",
                    AuthError::UnknownToken => "unknown_token",
                    AuthError::NoTenant { .. } => "no_tenant",
                    AuthError::TwoTenants { .. } => "two_tenants",
                };
                self.metrics.unauthenticated_calls.with_label_values(&[reason]).inc();
                if let Some(refusals) = self.refusals.due("", reason, Instant::now()) {
                    tracing::warn!(reason, refusals, %error, "calls refused UNAUTHENTICATED");
                }
                Err(error)
            }
        }
    }
}

/// A caller the gate knows: its tenant, under the rules it was identified by.
#[derive(Clone)]
pub struct Admitted {
    gate: Arc<Gate>,
    rules: Arc<Rules>,
    tenant: usize,
    /// The header the caller was known by, for a call forwarded to another instance.
    authorization: Option<HeaderValue>,
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted").field("tenant", &self.tenant().name).finish()
    }
}

impl Admitted {
    pub fn tenant(&self) -> &Tenant {
        &self.rules.policy().tenants()[self.tenant]
    }

    /// The tenant's share of a busy minter: its name, hashed (the same across reloads), and
    /// its weight.
    pub fn share(&self) -> Share {
        use std::hash::{Hash, Hasher};
        let tenant = self.tenant();
        let mut hasher = std::hash::DefaultHasher::new();
        tenant.name.hash(&mut hasher);
        // Never 0, the share of calls without a policy.
        Share { tenant: hasher.finish() | 1, weight: tenant.weight }
    }

    /// The `authorization` header the caller sent, if it was known by a token: an ordered
    /// sequence's call forwarded to the instance that serves it carries it there.
    pub fn authorization(&self) -> Option<&HeaderValue> {
        self.authorization.as_ref()
    }

    /// Lets a call through that needs `needs` and takes `count` IDs (UUIDs, values; 0 for a
    /// call that takes none), or says why not: permissions, then `max_batch`, then the quota.
    pub fn admit(&self, needs: &[Need<'_>], count: u64) -> Result<(), Refusal> {
        let result = self.rules.check(self.tenant, needs, count).and_then(|()| self.take(count));
        let name = self.tenant().name.as_str();
        match &result {
            Ok(()) => self.gate.metrics.tenant_ids.with_label_values(&[name]).inc_by(count),
            Err(refusal) => {
                let reason = match refusal {
                    Refusal::Denied { .. } => "permission",
                    Refusal::OverMaxBatch { .. } => "max_batch",
                    Refusal::OverBurst { .. } => "burst",
                    Refusal::OverQuota { .. } => "quota",
                };
                self.gate.metrics.tenant_refusals.with_label_values(&[name, reason]).inc();
                if let Some(refusals) = self.gate.refusals.due(name, reason, Instant::now()) {
                    if reason == "permission" {
                        tracing::warn!(tenant = name, reason, refusals, error = %refusal, "a tenant's calls refused");
                    } else {
                        tracing::info!(tenant = name, reason, refusals, error = %refusal, "a tenant's calls refused");
                    }
                }
            }
        }
        result
    }

    /// Counts one call of the tenant answered with `code`.
    pub fn answered(&self, code: tonic::Code) {
        // Codes are numbered 0 to 16, as `CODES` is indexed (tonic reads any other as Unknown).
        let code = CODES[code as usize];
        self.gate.metrics.tenant_calls.with_label_values(&[self.tenant().name.as_str(), code]).inc();
    }

    /// Takes `count` from the tenant's bucket, if it has a quota.
    fn take(&self, count: u64) -> Result<(), Refusal> {
        let tenant = self.tenant();
        let Some(quota) = tenant.quota else { return Ok(()) };
        if count == 0 {
            return Ok(());
        }
        let now = self.gate.epoch.elapsed();
        let mut buckets = self.gate.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = buckets.entry(tenant.name.clone()).or_insert_with(|| Bucket::new(quota, now));
        let taken = bucket.take(count, now);
        let available = bucket.available(now);
        drop(buckets);
        self.gate.metrics.tenant_quota_available.with_label_values(&[tenant.name.as_str()]).set(available as i64);
        taken.map_err(|short| match short {
            Short::Wait(wait) => Refusal::OverQuota { tenant: tenant.name.clone(), rate: quota.rate, wait },
            Short::OverBurst { burst } => Refusal::OverBurst { tenant: tenant.name.clone(), asked: count, burst },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::{Policy, TokenFile, token};

    fn gate(policy: &str, tokens: &[(&str, &str)]) -> Arc<Gate> {
        let text: String = tokens.iter().map(|(name, token)| token::line(name, token) + "\n").collect();
        let rules = Rules::new(Policy::parse(policy).unwrap(), TokenFile::parse(&text).unwrap()).unwrap();
        Gate::new(rules, Metrics::new())
    }

    fn bearer(token: &str) -> HeaderValue {
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap()
    }

    #[test]
    fn each_kind_of_refusal_is_logged_at_most_once_a_period_with_the_count_it_stands_for() {
        let log = RefusalLog::default();
        let start = Instant::now();
        assert_eq!(log.due("a", "quota", start), Some(1));
        assert_eq!(log.due("a", "quota", start + Duration::from_secs(1)), None);
        assert_eq!(log.due("a", "quota", start + Duration::from_secs(2)), None);
        // Another reason, another tenant, the unknown callers: kinds of their own.
        assert_eq!(log.due("a", "permission", start), Some(1));
        assert_eq!(log.due("b", "quota", start), Some(1));
        assert_eq!(log.due("", "missing", start), Some(1));
        // After the period: one line for the three refusals since the last.
        assert_eq!(log.due("a", "quota", start + LOG_EVERY), Some(3));
        assert_eq!(log.due("a", "quota", start + LOG_EVERY + Duration::from_secs(1)), None);
        assert_eq!(log.due("a", "quota", start + 2 * LOG_EVERY), Some(2));
    }

    #[test]
    fn a_quota_is_kept_across_calls_and_reloads_and_counted() {
        let policy = "[tenant.a]\ntokens = [\"ta\"]\nallow = [\"ids\"]\nrate = 1\nburst = 10\n";
        let gate = gate(policy, &[("ta", "smt_a")]);
        let a = gate.identify(Some(&bearer("smt_a")), &[]).unwrap();
        assert_eq!(a.admit(&[Need::Ids], 10), Ok(()));
        assert!(matches!(a.admit(&[Need::Ids], 1), Err(Refusal::OverQuota { .. })));
        assert!(matches!(a.admit(&[Need::Ids], 11), Err(Refusal::OverBurst { burst: 10, .. })));
        assert!(matches!(a.admit(&[Need::Uuids], 1), Err(Refusal::Denied { .. })));
        // A reload that raises the burst does not refill the bucket.
        let text = token::line("ta", "smt_a");
        let raised = policy.replace("burst = 10", "burst = 20");
        gate.replace(Rules::new(Policy::parse(&raised).unwrap(), TokenFile::parse(&text).unwrap()).unwrap());
        let again = gate.identify(Some(&bearer("smt_a")), &[]).unwrap();
        assert!(matches!(again.admit(&[Need::Ids], 5), Err(Refusal::OverQuota { .. })));
        let metrics = &gate.metrics;
        assert_eq!(metrics.tenant_ids.with_label_values(&["a"]).get(), 10);
        assert_eq!(metrics.tenant_refusals.with_label_values(&["a", "quota"]).get(), 2);
        assert_eq!(metrics.tenant_refusals.with_label_values(&["a", "permission"]).get(), 1);
        assert!(gate.identify(Some(&bearer("smt_b")), &[]).is_err());
        assert_eq!(metrics.unauthenticated_calls.with_label_values(&["unknown_token"]).get(), 1);
    }
}
