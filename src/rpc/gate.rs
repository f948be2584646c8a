//! The tenants' gate: who a caller is, and whether each call of theirs goes through.
//!
//! With a policy (`--policy-file`), the front door ([`super::dispatch`]) asks the gate who a
//! call's caller is, from its bearer token or its connection's client certificate, and
//! refuses a caller it does not know (`UNAUTHENTICATED`) before any path runs. A known one is
//! carried in the call's context as [`Admitted`]; each call of the service then asks it for
//! what the call needs ([`Admitted::admit`]): its permissions, its `max_batch`, and its quota.
//!
//! The rules ([`Rules`]) are swapped whole on a reload, each tenant's state beside them
//! ([`TenantState`]: its series, looked up once per policy rather than on every call, and its
//! quota's bucket, one per tenant name, shared by the policies before and after a reload so
//! that a reload neither refills nor splits it); a call keeps the rules it was identified
//! under. Refusals are counted by tenant and reason, and logged with the tenant: a kind of
//! refusal at most once every [`LOG_EVERY`], with the count it stands for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use http::HeaderValue;
use prometheus::{IntCounter, IntCounterVec, IntGauge};

use crate::metrics::{CODES, Metrics, TENANT_REFUSALS};
use crate::minter::Share;
use crate::tenant::{AuthError, Bucket, Credentials, Need, Refusal, Rules, Short, Tenant, bearer};

/// The most often one kind of refusal (a tenant's, for one reason; a caller's unknown, for
/// one reason) is logged: a tenant refused a thousand times a second makes one line in this
/// long, which counts the refusals it stands for.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The gate of a server with a policy.
pub struct Gate {
    in_force: RwLock<Arc<InForce>>,
    /// The origin of the buckets' time.
    epoch: Instant,
    metrics: Metrics,
    refusals: RefusalLog,
}

/// The rules in force, and each of their tenants' state, by the same index.
struct InForce {
    rules: Arc<Rules>,
    tenants: Vec<Arc<TenantState>>,
}

/// What the calls of one tenant touch, made once per policy.
pub struct TenantState {
    ids: IntCounter,
    /// By reason, in the order of [`TENANT_REFUSALS`].
    refusals: [IntCounter; TENANT_REFUSALS.len()],
    quota_available: IntGauge,
    /// Calls by code (of [`CODES`]), each series made at the tenant's first call with that
    /// code, so a tenant shows the codes its calls got.
    calls: [OnceLock<IntCounter>; CODES.len()],
    calls_by_code: IntCounterVec,
    name: String,
    /// With a quota: its bucket, shared with the policies before by the tenant's name.
    bucket: Option<Arc<Mutex<Bucket>>>,
}

impl TenantState {
    /// Counts one call of the tenant answered with `code`.
    pub fn answered(&self, code: tonic::Code) {
        // Codes are numbered 0 to 16, as `CODES` is indexed (tonic reads any other as Unknown).
        let code = code as usize;
        self.calls[code].get_or_init(|| self.calls_by_code.with_label_values(&[&self.name, CODES[code]])).inc();
    }
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
        let none = InForce { rules: Arc::new(Rules::default()), tenants: Vec::new() };
        let gate = Gate {
            in_force: RwLock::new(Arc::new(none)),
            epoch: Instant::now(),
            metrics,
            refusals: RefusalLog::default(),
        };
        gate.replace(rules);
        Arc::new(gate)
    }

    fn in_force(&self) -> Arc<InForce> {
        self.in_force.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<Rules> {
        self.in_force().rules.clone()
    }

    /// Puts `rules` in force, for calls identified from now on: each tenant keeps its bucket
    /// (and what it holds) under a changed quota, and every tenant's series are shown from now
    /// on.
    pub fn replace(&self, rules: Rules) {
        let now = self.epoch.elapsed();
        let before = self.in_force();
        let buckets: HashMap<&str, &Arc<Mutex<Bucket>>> =
            before.tenants.iter().filter_map(|t| Some((t.name.as_str(), t.bucket.as_ref()?))).collect();
        let metrics = &self.metrics;
        let tenants = rules
            .policy()
            .tenants()
            .iter()
            .map(|tenant| {
                let name = tenant.name.as_str();
                let bucket = tenant.quota.map(|quota| match buckets.get(name) {
                    Some(&bucket) => {
                        bucket.lock().unwrap_or_else(PoisonError::into_inner).requota(quota, now);
                        bucket.clone()
                    }
                    None => Arc::new(Mutex::new(Bucket::new(quota, now))),
                });
                let state = TenantState {
                    ids: metrics.tenant_ids.with_label_values(&[name]),
                    refusals: TENANT_REFUSALS.map(|reason| metrics.tenant_refusals.with_label_values(&[name, reason])),
                    quota_available: metrics.tenant_quota_available.with_label_values(&[name]),
                    calls: Default::default(),
                    calls_by_code: metrics.tenant_calls.clone(),
                    name: tenant.name.clone(),
                    bucket,
                };
                // Shown from the start: a tenant's OK calls, and its quota's level.
                state.calls[0].get_or_init(|| metrics.tenant_calls.with_label_values(&[name, CODES[0]]));
                if let Some(bucket) = &state.bucket {
                    let available = bucket.lock().unwrap_or_else(PoisonError::into_inner).available(now);
                    state.quota_available.set(available as i64);
                }
                Arc::new(state)
            })
            .collect();
        let in_force = InForce { rules: Arc::new(rules), tenants };
        *self.in_force.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(in_force);
    }

    /// Who sent a call with this `authorization` header (if any) on a connection whose client
    /// certificate has these names, or why no tenant: counted by reason.
    pub fn identify(
        self: &Arc<Self>,
        authorization: Option<HeaderValue>,
        certificate: &[String],
    ) -> Result<Admitted, AuthError> {
        let in_force = self.in_force();
        let credentials = Credentials { bearer: authorization.as_ref().map(|v| bearer(v.as_bytes())), certificate };
        match in_force.rules.identify(credentials) {
            Ok(tenant) => Ok(Admitted { gate: self.clone(), in_force, tenant, authorization }),
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
    in_force: Arc<InForce>,
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
        &self.in_force.rules.policy().tenants()[self.tenant]
    }

    /// The tenant's state: what its calls are counted in.
    pub fn state(&self) -> &Arc<TenantState> {
        &self.in_force.tenants[self.tenant]
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
        let result = self.in_force.rules.check(self.tenant, needs, count).and_then(|()| self.take(count));
        let state = self.state();
        match &result {
            Ok(()) => state.ids.inc_by(count),
            Err(refusal) => {
                let reason = match refusal {
                    Refusal::Denied { .. } => "permission",
                    Refusal::OverMaxBatch { .. } => "max_batch",
                    Refusal::OverBurst { .. } => "burst",
                    Refusal::OverQuota { .. } => "quota",
                };
                if let Some(i) = TENANT_REFUSALS.iter().position(|r| *r == reason) {
                    state.refusals[i].inc();
                }
                let name = state.name.as_str();
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

    /// Takes `count` from the tenant's bucket, if it has a quota.
    fn take(&self, count: u64) -> Result<(), Refusal> {
        let state = self.state();
        let (Some(bucket), Some(quota)) = (&state.bucket, self.tenant().quota) else { return Ok(()) };
        if count == 0 {
            return Ok(());
        }
        let now = self.gate.epoch.elapsed();
        let mut held = bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = held.take(count, now);
        let available = held.available(now);
        drop(held);
        state.quota_available.set(available as i64);
        let tenant = &state.name;
        taken.map_err(|short| match short {
            Short::Wait(wait) => Refusal::OverQuota { tenant: tenant.clone(), rate: quota.rate, wait },
            Short::OverBurst { burst } => Refusal::OverBurst { tenant: tenant.clone(), asked: count, burst },
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
    fn calls_identified_before_and_after_a_reload_take_from_one_bucket() {
        let policy = "[tenant.a]\ntokens = [\"ta\"]\nallow = [\"ids\"]\nrate = 1\nburst = 10\n";
        let gate = gate(policy, &[("ta", "smt_a")]);
        let before = gate.identify(Some(bearer("smt_a")), &[]).unwrap();
        let text = token::line("ta", "smt_a");
        gate.replace(Rules::new(Policy::parse(policy).unwrap(), TokenFile::parse(&text).unwrap()).unwrap());
        let after = gate.identify(Some(bearer("smt_a")), &[]).unwrap();
        assert_eq!(before.admit(&[Need::Ids], 6), Ok(()));
        assert!(matches!(after.admit(&[Need::Ids], 6), Err(Refusal::OverQuota { .. })));
        assert_eq!(after.admit(&[Need::Ids], 4), Ok(()));
        assert!(matches!(before.admit(&[Need::Ids], 1), Err(Refusal::OverQuota { .. })));
        // Each counted in the one tenant's series.
        assert_eq!(gate.metrics.tenant_ids.with_label_values(&["a"]).get(), 10);
        before.state().answered(tonic::Code::Ok);
        after.state().answered(tonic::Code::ResourceExhausted);
        let calls = |code| gate.metrics.tenant_calls.with_label_values(&["a", code]).get();
        assert_eq!((calls("OK"), calls("ResourceExhausted")), (1, 1));
    }

    #[test]
    fn a_quota_is_kept_across_calls_and_reloads_and_counted() {
        let policy = "[tenant.a]\ntokens = [\"ta\"]\nallow = [\"ids\"]\nrate = 1\nburst = 10\n";
        let gate = gate(policy, &[("ta", "smt_a")]);
        let a = gate.identify(Some(bearer("smt_a")), &[]).unwrap();
        assert_eq!(a.admit(&[Need::Ids], 10), Ok(()));
        assert!(matches!(a.admit(&[Need::Ids], 1), Err(Refusal::OverQuota { .. })));
        assert!(matches!(a.admit(&[Need::Ids], 11), Err(Refusal::OverBurst { burst: 10, .. })));
        assert!(matches!(a.admit(&[Need::Uuids], 1), Err(Refusal::Denied { .. })));
        // A reload that raises the burst does not refill the bucket.
        let text = token::line("ta", "smt_a");
        let raised = policy.replace("burst = 10", "burst = 20");
        gate.replace(Rules::new(Policy::parse(&raised).unwrap(), TokenFile::parse(&text).unwrap()).unwrap());
        let again = gate.identify(Some(bearer("smt_a")), &[]).unwrap();
        assert!(matches!(again.admit(&[Need::Ids], 5), Err(Refusal::OverQuota { .. })));
        let metrics = &gate.metrics;
        assert_eq!(metrics.tenant_ids.with_label_values(&["a"]).get(), 10);
        assert_eq!(metrics.tenant_refusals.with_label_values(&["a", "quota"]).get(), 2);
        assert_eq!(metrics.tenant_refusals.with_label_values(&["a", "permission"]).get(), 1);
        assert!(gate.identify(Some(bearer("smt_b")), &[]).is_err());
        assert_eq!(metrics.unauthenticated_calls.with_label_values(&["unknown_token"]).get(), 1);
    }
}
