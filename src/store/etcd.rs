//! The etcd store: slots leased from an etcd cluster, reservations kept in etcd.
//!
//! Keys under the prefix (default `/snowmint`):
//!
//! - `layout`: the ID layout, recorded by the first instance; a different one refuses to start.
//! - `workers/<id>`: who holds slot `<id>` (JSON: host, pid, start time, version), attached
//!   to the holder's lease, so it disappears when the lease expires or is revoked.
//! - `reservations/<id>`: the time up to which slot `<id>` may have minted. No lease: it
//!   outlives its writer, and the next holder mints only past it.
//! - `history/<id>/<claim>`: the slot's history ([`crate::history::etcd`]), not written here;
//!   read to tell a reservation deleted (or lost to a restore) from a slot never used.
//! - `fence`: set when an instance found etcd gone back in time (a restored snapshot), or by
//!   `snowmint fence` after a restore: every floor read below it is raised to it
//!   ([`super::Fence`]).
//!
//! Every answer's header is watched: a revision lower than one etcd gave before, or another
//! cluster's ID, means etcd's state went back in time, and the reply says so
//! ([`Reply::WentBack`]).
//!
//! Each request is one etcd call (a transaction where it must be atomic) on one endpoint;
//! a failure moves the next call to the next endpoint, and the keeper decides whether and
//! when to retry. Writes compare the worker key's lease and the reservation's mod_revision,
//! so they apply only while the claim holds and only over the version they replace.
//!
//! Every transaction is built as a [`TxnPlan`] and counted before it is sent: etcd refuses
//! one of more than 128 operations ("too many operations in txn request"), and the keeper
//! names few enough slots per request ([`super::MAX_READS`], [`super::MAX_WRITES`]) that
//! none comes near it, whatever `--slots` is.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::alarm::{Alarm, AlarmWatch};
use super::{
    Fence, MAX_READS, MAX_WRITES, Outcome, PeerClock, Reply, Request, SessionId, SlotRead, Store, StoreError, Stored,
    Version, Write,
};
use crate::layout::{Layout, Slot, rfc3339_ms};

/// TLS files for the etcd connection.
#[derive(Debug, Clone, Default)]
pub struct EtcdTls {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// Settings of etcd mode.
#[derive(Clone)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    /// Key prefix, without a trailing `/`.
    pub prefix: String,
    pub lease_ttl: Duration,
    /// The slot to try first: the flag, or the StatefulSet ordinal of the hostname (times
    /// `slots`); with several slots, the ones after it too.
    pub preferred_worker_id: Option<Slot>,
    /// How many slots to hold at once, under one lease.
    pub slots: usize,
    /// This host's name, recorded in the worker key.
    pub hostname: String,
    pub tls: Option<EtcdTls>,
    /// User and password for etcd authentication.
    pub user: Option<(String, String)>,
    /// How long the start may take to reach etcd before giving up.
    pub start_timeout: Duration,
    /// How often the fleet compacts etcd's history ([`crate::upkeep`]); `None`: never (the
    /// operator compacts).
    pub compaction_interval: Option<Duration>,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("lease_ttl", &self.lease_ttl)
            .field("preferred_worker_id", &self.preferred_worker_id)
            .field("slots", &self.slots)
            .field("compaction_interval", &self.compaction_interval)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .finish_non_exhaustive()
    }
}

impl EtcdConfig {
    /// The slots to try first: the preferred one and the `slots - 1` after it.
    pub fn preferred(&self) -> Vec<Slot> {
        self.preferred_worker_id.map_or_else(Vec::new, |p| (p..).take(self.slots).collect())
    }

    /// The timeout of one etcd call: a fifth of the TTL, between 0.3 and 2 s.
    pub fn call_timeout(&self) -> Duration {
        (self.lease_ttl / 5).clamp(Duration::from_millis(300), Duration::from_secs(2))
    }
}

/// The StatefulSet ordinal in a hostname such as `snowmint-3`.
pub fn ordinal_of(hostname: &str) -> Option<u32> {
    let (_, digits) = hostname.trim().rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// This host's name, from the kernel (as a pod's hostname) or `HOSTNAME`.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// What the worker key holds.
#[derive(Debug, Serialize, Deserialize)]
struct Owner {
    host: String,
    pid: u32,
    started_at: String,
    version: String,
}

/// What a reservation key holds.
#[derive(Debug, Serialize, Deserialize)]
struct Reservation {
    reserved_until_ms: i64,
    reserved_until: String,
    /// The writer's wall clock when it wrote, for the fleet's clock check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    written_at_ms: Option<i64>,
    /// The writer extends it only when its minter asks: `written_at_ms` grows stale, and
    /// the fleet's clock check leaves it out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    idle: bool,
}

/// One connection per endpoint; a call goes to the current one, and a failure moves the
/// next call to the next endpoint. (etcd-client's own balanced channel keeps routing some
/// calls to a dead member.)
pub(crate) struct Endpoints {
    clients: Vec<(String, Client)>,
    current: usize,
    call_timeout: Duration,
    /// Where the alarms that failed calls name are reported, if anywhere.
    alarms: Option<AlarmWatch>,
}

impl Endpoints {
    pub(crate) async fn connect(config: &EtcdConfig) -> Result<Endpoints, StoreError> {
        let call_timeout = config.call_timeout();
        let mut options = ConnectOptions::new()
            .with_connect_timeout(call_timeout)
            .with_timeout(call_timeout)
            .with_keep_alive(Duration::from_secs(2), call_timeout);
        if let Some((user, password)) = &config.user {
            options = options.with_user(user.clone(), password.clone()).with_auto_token_refresh(true);
        }
        if let Some(tls) = &config.tls {
            options = options.with_tls(tls_options(tls)?);
        }
        let mut clients = Vec::new();
        for endpoint in &config.endpoints {
            let client = Client::connect([endpoint.as_str()], Some(options.clone()))
                .await
                .map_err(|e| StoreError::Etcd(format!("cannot set up the etcd client for {endpoint}: {e}")))?;
            clients.push((endpoint.clone(), client));
        }
        Ok(Endpoints { clients, current: 0, call_timeout, alarms: None })
    }

    /// From now on, a failed call that names an etcd alarm raises it in `alarms`.
    pub(crate) fn report_alarms(&mut self, alarms: AlarmWatch) {
        self.alarms = Some(alarms);
    }

    /// etcd applied a write of ours: no alarm stops writes now.
    pub(crate) fn write_applied(&self) {
        if let Some(alarms) = &self.alarms {
            alarms.saw_write();
        }
    }

    /// One attempt on the current endpoint; on failure the next call goes to the next one.
    pub(crate) async fn attempt<T, F, Fut>(&mut self, what: &str, call: F) -> Result<T, String>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let (endpoint, client) = &self.clients[self.current];
        let error = match tokio::time::timeout(self.call_timeout, call(client.clone())).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => format!("etcd {what} at {endpoint}: {e}"),
            Err(_) => format!("etcd {what} at {endpoint}: no answer within {:?}", self.call_timeout),
        };
        if let Some(alarms) = &self.alarms {
            alarms.saw_error(&error);
        }
        self.current = (self.current + 1) % self.clients.len();
        Err(error)
    }
}

fn tls_options(tls: &EtcdTls) -> Result<etcd_client::TlsOptions, StoreError> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| StoreError::Etcd(format!("cannot read {}: {e}", path.display())))
    };
    let mut options = etcd_client::TlsOptions::new();
    if let Some(ca) = &tls.ca {
        options = options.ca_certificate(etcd_client::Certificate::from_pem(read(ca)?));
    }
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            options = options.identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?));
        }
        (None, None) => {}
        _ => return Err(StoreError::Etcd("--etcd-cert and --etcd-key go together".into())),
    }
    Ok(options)
}

/// What a fence key holds.
#[derive(Debug, Serialize, Deserialize)]
struct FenceRecord {
    until_ms: i64,
    until: String,
    reason: String,
}

/// The latest state of etcd this store has seen: the cluster, and the highest revision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Horizon {
    cluster_id: Option<u64>,
    revision: i64,
}

impl Horizon {
    /// Takes in an answer's header: what went back, if it did (a revision lower than one
    /// seen before, or another cluster). Only linearizable answers are taken in: their
    /// revision is at least that of every answer before them, from whichever member.
    pub(crate) fn saw(&mut self, cluster_id: u64, revision: i64) -> Option<String> {
        let went_back = match self.cluster_id {
            Some(known) if known != cluster_id => {
                Some(format!("etcd answers as cluster {cluster_id:x}, not cluster {known:x} as before"))
            }
            Some(_) if revision < self.revision => Some(format!(
                "etcd's revision is {revision}, below {} seen before (restored from an older snapshot?)",
                self.revision
            )),
            _ => None,
        };
        if went_back.is_some() {
            // From here on, the store as it is now is the one to compare with.
            *self = Horizon { cluster_id: Some(cluster_id), revision };
        } else {
            self.cluster_id = Some(cluster_id);
            self.revision = self.revision.max(revision);
        }
        went_back
    }
}

/// The etcd store.
pub struct EtcdStore {
    prefix: String,
    etcd: Endpoints,
    /// The latest state of etcd seen; what went back since the last reply, if it did.
    horizon: Horizon,
    went_back: Option<String>,
    /// The worker key's value for this instance.
    owner: String,
    /// The TTL granted per session, to report on renewal.
    ttl: Duration,
}

impl EtcdStore {
    /// Connects and checks the layout recorded in etcd (recording it on the first start),
    /// retrying while etcd is unreachable, up to the start timeout.
    pub async fn connect(config: &EtcdConfig, layout: &Layout, started_at_ms: i64) -> Result<EtcdStore, StoreError> {
        let etcd = Endpoints::connect(config).await?;
        let owner = serde_json::to_string(&Owner {
            host: config.hostname.clone(),
            pid: std::process::id(),
            started_at: rfc3339_ms(started_at_ms),
            version: env!("CARGO_PKG_VERSION").to_string(),
        })
        .expect("owner serializes");
        let mut store = EtcdStore {
            prefix: config.prefix.clone(),
            etcd,
            horizon: Horizon::default(),
            went_back: None,
            owner,
            ttl: config.lease_ttl,
        };
        store.check_layout(layout, Instant::now() + config.start_timeout).await?;
        Ok(store)
    }

    /// Reports the etcd alarms its calls meet (and clears them when a write applies) to
    /// `alarms`.
    pub fn report_alarms(mut self, alarms: AlarmWatch) -> EtcdStore {
        self.etcd.report_alarms(alarms);
        self
    }

    fn key(&self, kind: &str, id: Slot) -> String {
        key(&self.prefix, kind, id)
    }

    /// Takes in the header of a linearizable answer.
    fn saw(&mut self, header: Option<&etcd_client::ResponseHeader>) {
        if let Some(header) = header
            && let Some(detail) = self.horizon.saw(header.cluster_id(), header.revision())
        {
            self.went_back = Some(detail);
        }
    }

    /// Records the layout on the first start, or checks it against the recorded one.
    async fn check_layout(&mut self, layout: &Layout, until: Instant) -> Result<(), StoreError> {
        let key = format!("{}/layout", self.prefix);
        let value = serde_json::to_string(layout).expect("layout serializes");
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), value, None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let mut backoff = Duration::from_millis(50);
        let response = loop {
            let txn = txn.clone();
            match self.etcd.attempt("record layout", |mut c| async move { c.txn(txn).await }).await {
                Ok(response) => break response,
                Err(error) if Instant::now() >= until => {
                    return Err(StoreError::Etcd(match Alarm::in_error(&error) {
                        // Reached, and refused: the layout check is a transaction that may
                        // write, which etcd refuses under NOSPACE.
                        Some(alarm) => {
                            format!("etcd refuses to start an instance: {}; last error: {error}", alarm.explain())
                        }
                        None => format!("cannot reach etcd: {error}"),
                    }));
                }
                Err(error) => tracing::debug!(%error, "etcd not reachable yet; retrying"),
            }
            tokio::time::sleep(backoff.min(until.saturating_duration_since(Instant::now()))).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        };
        if response.succeeded() {
            tracing::info!(key, %layout, "recorded the layout");
            return Ok(());
        }
        let saved = kv_of(&response.op_responses(), 0).map(|kv| kv.value().to_vec()).unwrap_or_default();
        let configured = layout.to_string();
        match serde_json::from_slice::<Layout>(&saved) {
            Ok(saved) if saved == *layout => Ok(()),
            Ok(saved) => Err(StoreError::LayoutMismatch { saved_at: key, saved: saved.to_string(), configured }),
            Err(e) => Err(StoreError::LayoutMismatch {
                saved_at: key,
                saved: format!("unreadable ({e}): {}", String::from_utf8_lossy(&saved)),
                configured,
            }),
        }
    }

    fn parse_reservation(&self, slot: Slot, kv: Option<etcd_client::KeyValue>) -> SlotRead {
        let location = self.key("reservations", slot);
        let stored = match kv {
            None => Stored::Absent,
            Some(kv) => match serde_json::from_slice::<Reservation>(kv.value()) {
                Ok(r) => Stored::Reserved { until_ms: r.reserved_until_ms, version: Version::At(kv.mod_revision()) },
                Err(e) => Stored::Corrupt {
                    reason: format!("{:?}, not a reservation ({e})", String::from_utf8_lossy(kv.value())),
                },
            },
        };
        SlotRead { slot, location, stored, claim_version: None }
    }

    async fn list(&mut self, session: SessionId) -> Result<Reply, String> {
        let prefix = format!("{}/workers/", self.prefix);
        let options = GetOptions::new().with_prefix().with_keys_only();
        let listed = {
            let prefix = prefix.clone();
            self.etcd.attempt("list slots", |mut c| async move { c.get(prefix, Some(options)).await }).await?
        };
        self.saw(listed.header());
        let mut taken = Vec::new();
        let mut ours = Vec::new();
        for kv in listed.kvs() {
            let Some(id) = slot_of(&prefix, kv.key()) else { continue };
            taken.push(id);
            if kv.lease() == session {
                ours.push(id);
            }
        }
        Ok(Reply::Slots { taken, ours })
    }

    /// Up to `limit` other holders' clocks, one slot each: the holders found from slot
    /// `from` on in key order (then from the start), then one read of those slots'
    /// reservations.
    async fn sample_clocks(&mut self, session: SessionId, from: Slot, limit: u32) -> Result<Reply, String> {
        let holders = self.sample_holders(session, from, (limit as usize).min(MAX_READS)).await?;
        if holders.is_empty() {
            return Ok(Reply::PeerClocks(Vec::new()));
        }
        let slots: Vec<Slot> = holders.iter().map(|&(_, slot)| slot).collect();
        let txn = match read_plan(&self.prefix, &slots).txn("sample clocks") {
            Ok(txn) => txn,
            Err(refused) => return Ok(refused),
        };
        let response = self.etcd.attempt("sample clocks", |mut c| async move { c.txn(txn).await }).await?;
        let responses = response.op_responses();
        let clocks = holders
            .iter()
            .enumerate()
            .filter_map(|(i, &(holder, slot))| {
                let wall_ms = published_clock(kv_of(&responses, i)?.value())?;
                Some(PeerClock { slot, holder, wall_ms })
            })
            .collect();
        Ok(Reply::PeerClocks(clocks))
    }

    /// Up to `limit` holders (leases) other than `session`, each with the first of its slots
    /// met, from slot `from` on in key order and then from the start. Keys-only reads, the
    /// first of `limit + 1` keys and each next one twice as many (up to [`SAMPLE_PAGE_MAX`]),
    /// until as many holders are found or every key was seen: an instance of many slots is
    /// one holder, passed over at the cost of reading its keys.
    async fn sample_holders(
        &mut self,
        session: SessionId,
        from: Slot,
        limit: usize,
    ) -> Result<Vec<(SessionId, Slot)>, String> {
        let prefix = format!("{}/workers/", self.prefix);
        let first = self.key("workers", from);
        // The end of the prefix's range: '/' + 1.
        let end = format!("{}/workers0", self.prefix);
        let mut holders: Vec<(SessionId, Slot)> = Vec::new();
        let mut page = limit as i64 + 1;
        for (start, until) in [(first.clone(), end), (prefix.clone(), first)] {
            let mut at = start.into_bytes();
            while holders.len() < limit {
                let options = GetOptions::new().with_range(until.clone()).with_keys_only().with_limit(page);
                let key = at.clone();
                let got =
                    self.etcd.attempt("sample clocks", |mut c| async move { c.get(key, Some(options)).await }).await?;
                for kv in got.kvs() {
                    let Some(slot) = slot_of(&prefix, kv.key()) else { continue };
                    let holder = kv.lease();
                    if holder != session && holders.len() < limit && !holders.iter().any(|&(h, _)| h == holder) {
                        holders.push((holder, slot));
                    }
                }
                let Some(last) = got.kvs().last().filter(|_| got.more()) else { break };
                // The next page starts just after the last key read.
                at = [last.key(), &[0]].concat();
                page = (page * 2).min(SAMPLE_PAGE_MAX);
            }
        }
        Ok(holders)
    }

    async fn claim(&mut self, session: SessionId, slot: Slot) -> Result<Reply, String> {
        let txn = match claim_plan(&self.prefix, &self.owner, session, slot).txn("claim slot") {
            Ok(txn) => txn,
            Err(refused) => return Ok(refused),
        };
        let response = self.etcd.attempt("claim slot", |mut c| async move { c.txn(txn).await }).await?;
        self.saw(response.header());
        // A slot already carrying this session's lease is this instance's own: a claim whose
        // reply was lost committed. Reporting it lost would leak it until the lease ends.
        let won = response.succeeded() || kv_of(&response.op_responses(), 0).is_some_and(|kv| kv.lease() == session);
        Ok(Reply::Claimed { slot, won })
    }

    async fn read(&mut self, slots: &[Slot], linearizable: bool) -> Result<Reply, String> {
        if !linearizable {
            // Served from whichever member answers, possibly behind the leader.
            let mut reads = Vec::new();
            for &slot in slots {
                let key = self.key("reservations", slot);
                let options = GetOptions::new().with_serializable();
                let got = self
                    .etcd
                    .attempt("read reservation", |mut c| async move { c.get(key, Some(options)).await })
                    .await?;
                reads.push(self.parse_reservation(slot, got.kvs().first().cloned()));
            }
            return Ok(Reply::reservations(reads));
        }
        // One transaction of reads: linearizable, and one consistent revision for all.
        let txn = match read_plan(&self.prefix, slots).txn("read reservations") {
            Ok(txn) => txn,
            Err(refused) => return Ok(refused),
        };
        let response = self.etcd.attempt("read reservations", |mut c| async move { c.txn(txn).await }).await?;
        self.saw(response.header());
        let responses = response.op_responses();
        let mut reads: Vec<SlotRead> =
            slots.iter().enumerate().map(|(i, &slot)| self.parse_reservation(slot, kv_of(&responses, i))).collect();
        let fence = kv_of(&responses, slots.len()).and_then(|kv| parse_fence(&kv));
        self.missing(&mut reads).await?;
        Ok(Reply::Reservations { reads, fence })
    }

    /// Tells, among `reads`, a reservation that is absent though its slot was used before
    /// (its history holds records: only a claim that wrote a reservation is recorded) from a
    /// slot never used: the key was deleted by hand, or lost to a restore.
    async fn missing(&mut self, reads: &mut [SlotRead]) -> Result<(), String> {
        let absent: Vec<usize> = (0..reads.len()).filter(|&i| reads[i].stored == Stored::Absent).collect();
        if absent.is_empty() {
            return Ok(());
        }
        let then = absent
            .iter()
            .map(|&i| {
                let options = GetOptions::new().with_prefix().with_count_only();
                TxnOp::get(format!("{}/history/{}/", self.prefix, reads[i].slot), Some(options))
            })
            .collect();
        let txn = match (TxnPlan { then, ..TxnPlan::default() }).txn("read slot history") {
            Ok(txn) => txn,
            Err(_) => return Ok(()),
        };
        let response = self.etcd.attempt("read slot history", |mut c| async move { c.txn(txn).await }).await?;
        self.saw(response.header());
        for (op, &i) in response.op_responses().iter().zip(&absent) {
            let TxnOpResponse::Get(got) = op else { continue };
            if got.count() > 0 {
                reads[i].stored = Stored::Missing {
                    reason: format!(
                        "no reservation, though the slot's history holds {} records of claims: the key was deleted by hand, or etcd was restored from an older snapshot",
                        got.count()
                    ),
                };
            }
        }
        Ok(())
    }

    /// Sets the fleet's fence, unless a higher one stands.
    async fn set_fence(&mut self, until_ms: i64, reason: &str) -> Result<Reply, String> {
        let key = fence_key(&self.prefix);
        let value =
            serde_json::to_string(&FenceRecord { until_ms, until: rfc3339_ms(until_ms), reason: reason.to_string() })
                .expect("fence serializes");
        // Put only over the version read, so a higher fence set meanwhile is never lowered.
        for _ in 0..3 {
            let got = {
                let key = key.clone();
                self.etcd.attempt("read fence", |mut c| async move { c.get(key, None).await }).await?
            };
            self.saw(got.header());
            let current = got.kvs().first().cloned();
            let standing = current.as_ref().and_then(|kv| serde_json::from_slice::<FenceRecord>(kv.value()).ok());
            if standing.is_some_and(|f| f.until_ms >= until_ms) {
                return Ok(Reply::FenceSet);
            }
            let revision = current.map_or(0, |kv| kv.mod_revision());
            let txn = Txn::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, revision)])
                .and_then([TxnOp::put(key.clone(), value.clone(), None)]);
            let response = self.etcd.attempt("set fence", |mut c| async move { c.txn(txn).await }).await?;
            self.saw(response.header());
            if response.succeeded() {
                return Ok(Reply::FenceSet);
            }
        }
        Err("set fence: the fence kept changing under this write".into())
    }

    async fn write(&mut self, session: SessionId, writes: &[Write], check_claim: bool) -> Result<Reply, String> {
        let txn = match write_plan(&self.prefix, session, writes, check_claim).txn("write reservations") {
            Ok(txn) => txn,
            Err(refused) => return Ok(refused),
        };
        let response = self.etcd.attempt("write reservations", |mut c| async move { c.txn(txn).await }).await?;
        self.saw(response.header());
        if response.succeeded() {
            self.etcd.write_applied();
            let revision = response.header().map_or(0, |h| h.revision());
            return Ok(Reply::Written(writes.iter().map(|w| (w.slot, Version::At(revision))).collect()));
        }
        let responses = response.op_responses();
        let mut not_ours = Vec::new();
        let mut current = Vec::new();
        for (i, write) in writes.iter().enumerate() {
            if kv_of(&responses, 2 * i).is_none_or(|kv| kv.lease() != session) {
                not_ours.push(write.slot);
            }
            let mut read = self.parse_reservation(write.slot, kv_of(&responses, 2 * i + 1));
            read.claim_version = kv_of(&responses, 2 * i).map(|kv| kv.version());
            current.push(read);
        }
        Ok(Reply::WriteRefused { not_ours, current })
    }

    async fn renew(&mut self, session: SessionId) -> Reply {
        let result = self
            .etcd
            .attempt("lease keep-alive", |mut c| async move {
                // etcd-client sends one keep-alive and reads its answer here; a lease the
                // server no longer has comes back as an error, not as a TTL of 0.
                c.lease_keep_alive(session).await.map(|_| ())
            })
            .await;
        let mut fence = None;
        if result.is_ok() {
            // The keep-alive's answer shows no header here: one read of the fence key (the
            // smallest linearizable request) looks at etcd's state, so that an instance that
            // mints nothing still finds a restored snapshot within one renewal, and a holder
            // learns a fence set since (after a restore, by another instance or by hand).
            let key = fence_key(&self.prefix);
            if let Ok(got) = self.etcd.attempt("read fence", |mut c| async move { c.get(key, None).await }).await {
                self.saw(got.header());
                fence = got.kvs().first().and_then(parse_fence);
            }
        }
        match result {
            Ok(()) => Reply::Renewed { ttl: self.ttl, fence },
            Err(error) if error.contains("lease not found") => Reply::SessionGone,
            Err(error) => Reply::Failed { error, outcome: Outcome::Unknown },
        }
    }

    async fn release(&mut self, session: SessionId, slot: Slot) -> Result<Reply, String> {
        let txn = match release_plan(&self.prefix, session, slot).txn("release slot") {
            Ok(txn) => txn,
            Err(refused) => return Ok(refused),
        };
        let response = self.etcd.attempt("release slot", |mut c| async move { c.txn(txn).await }).await?;
        self.saw(response.header());
        Ok(Reply::Released)
    }
}

/// The fence a fence key's value holds; `None` for one that cannot be read.
fn parse_fence(kv: &etcd_client::KeyValue) -> Option<Fence> {
    let record: FenceRecord = serde_json::from_slice(kv.value()).ok()?;
    Some(Fence { until_ms: record.until_ms, reason: record.reason })
}

/// What a reservation key holds once `write` applied.
fn reservation_value(write: &Write) -> String {
    serde_json::to_string(&Reservation {
        reserved_until_ms: write.until_ms,
        reserved_until: rfc3339_ms(write.until_ms),
        written_at_ms: Some(write.wall_ms),
        idle: write.idle,
    })
    .expect("reservation serializes")
}

/// The writer's clock a stored reservation publishes for the fleet's clock check: none when
/// it carries none, or was written idle (a clock that old says nothing of the writer's now).
fn published_clock(value: &[u8]) -> Option<i64> {
    let reservation = serde_json::from_slice::<Reservation>(value).ok()?;
    reservation.written_at_ms.filter(|_| !reservation.idle)
}

/// Sets the fleet's fence in the etcd that `config` names (`snowmint fence`, after a restore):
/// every claim of a slot floors at `until_ms`, whatever its reservation reads. A higher fence
/// already standing is left as it is.
pub async fn set_fence(config: &EtcdConfig, until_ms: i64, reason: &str) -> Result<(), StoreError> {
    let mut store = EtcdStore {
        prefix: config.prefix.clone(),
        etcd: Endpoints::connect(config).await?,
        horizon: Horizon::default(),
        went_back: None,
        owner: String::new(),
        ttl: config.lease_ttl,
    };
    store.set_fence(until_ms, reason).await.map(|_| ()).map_err(StoreError::Etcd)
}

/// The first key-value of the `i`th operation's response in a transaction.
fn kv_of(responses: &[TxnOpResponse], i: usize) -> Option<etcd_client::KeyValue> {
    match responses.get(i)? {
        TxnOpResponse::Get(get) => get.kvs().first().cloned(),
        _ => None,
    }
}

/// etcd's default limit on the operations of one transaction (`--max-txn-ops`, 128). etcd
/// 3.4 checks the compares, the success branch and the failure branch each against it; the
/// plans keep their sum within it, which holds however a version counts.
const MAX_TXN_OPS: usize = 128;

/// The most operations of one reservation write: compares of the worker key's lease and of
/// the reservation's mod_revision, the put, and the two gets that say why should it be
/// refused; onto an absent reservation, a compare of the worker key's version and its put too.
const OPS_PER_WRITE: usize = 7;

// The keeper's request sizes fit one transaction each.
const _: () = assert!(MAX_READS < MAX_TXN_OPS && MAX_WRITES * OPS_PER_WRITE <= MAX_TXN_OPS);

/// A transaction as built, before etcd-client's `Txn` (which does not show its size): so
/// that its size is checked before it is sent, and can be tested without an etcd.
#[derive(Default)]
struct TxnPlan {
    compares: Vec<Compare>,
    then: Vec<TxnOp>,
    otherwise: Vec<TxnOp>,
}

impl TxnPlan {
    fn ops(&self) -> usize {
        self.compares.len() + self.then.len() + self.otherwise.len()
    }

    /// The transaction to send, or why it is not sent: past etcd's limit it would be refused
    /// as a whole, so it never leaves (certainly not applied).
    fn txn(self, what: &str) -> Result<Txn, Reply> {
        let ops = self.ops();
        if ops > MAX_TXN_OPS {
            let error = format!("{what}: a transaction of {ops} operations, more than etcd's {MAX_TXN_OPS}; not sent");
            return Err(Reply::Failed { error, outcome: Outcome::NotApplied });
        }
        let mut txn = Txn::new();
        if !self.compares.is_empty() {
            txn = txn.when(self.compares);
        }
        if !self.then.is_empty() {
            txn = txn.and_then(self.then);
        }
        if !self.otherwise.is_empty() {
            txn = txn.or_else(self.otherwise);
        }
        Ok(txn)
    }
}

/// `<prefix>/<kind>/<id>`.
fn key(prefix: &str, kind: &str, id: Slot) -> String {
    format!("{prefix}/{kind}/{id}")
}

/// The slot a worker key names, given the workers' prefix (`<prefix>/workers/`).
fn slot_of(workers: &str, key: &[u8]) -> Option<Slot> {
    std::str::from_utf8(key).ok()?.strip_prefix(workers)?.parse().ok()
}

/// The most keys one page of the clock sample's key reads asks for (keys only: about 20 KB).
const SAMPLE_PAGE_MAX: i64 = 512;

/// The fleet's fence: a floor for every claim.
pub(crate) fn fence_key(prefix: &str) -> String {
    format!("{prefix}/fence")
}

/// One get of each slot's reservation, in the order of `slots`, then one of the fence.
fn read_plan(prefix: &str, slots: &[Slot]) -> TxnPlan {
    let mut then: Vec<TxnOp> = slots.iter().map(|&slot| TxnOp::get(key(prefix, "reservations", slot), None)).collect();
    then.push(TxnOp::get(fence_key(prefix), None));
    TxnPlan { then, ..TxnPlan::default() }
}

/// The conditional write of `writes`, all or none; refused, it gets each slot's worker key
/// and reservation (at `2 i` and `2 i + 1`), to say which slots are no longer the session's
/// and what is stored now.
fn write_plan(prefix: &str, session: SessionId, writes: &[Write], check_claim: bool) -> TxnPlan {
    let mut plan = TxnPlan::default();
    for write in writes {
        let worker = key(prefix, "workers", write.slot);
        let reservation = key(prefix, "reservations", write.slot);
        // Invariant 3: only while this session's lease holds the slot, and only over the
        // version read or written last (0 for a key that does not exist).
        if check_claim {
            plan.compares.push(Compare::lease(worker.clone(), CompareOp::Equal, session));
        }
        match write.expect {
            Some(Version::Absent) => {
                plan.compares.push(Compare::mod_revision(reservation.clone(), CompareOp::Equal, 0));
                // Absence comes back (a key deleted by hand): the claim's version, moved on
                // here (the worker key put again as it is), tells this write from a late copy
                // of an earlier one.
                if let Some(claim_version) = write.claim_version {
                    plan.compares.push(Compare::version(worker.clone(), CompareOp::Equal, claim_version));
                    let unchanged = PutOptions::new().with_ignore_value().with_ignore_lease();
                    plan.then.push(TxnOp::put(worker.clone(), "", Some(unchanged)));
                }
            }
            Some(Version::At(revision)) => {
                plan.compares.push(Compare::mod_revision(reservation.clone(), CompareOp::Equal, revision))
            }
            None => {}
        }
        plan.then.push(TxnOp::put(reservation.clone(), reservation_value(write), None));
        plan.otherwise.push(TxnOp::get(worker, None));
        plan.otherwise.push(TxnOp::get(reservation, None));
    }
    plan
}

/// Takes `slot` for `session` if its worker key does not exist; else gets it, to tell a claim
/// of this session that already committed from another holder's.
fn claim_plan(prefix: &str, owner: &str, session: SessionId, slot: Slot) -> TxnPlan {
    let worker = key(prefix, "workers", slot);
    TxnPlan {
        compares: vec![Compare::create_revision(worker.clone(), CompareOp::Equal, 0)],
        then: vec![TxnOp::put(worker.clone(), owner, Some(PutOptions::new().with_lease(session)))],
        otherwise: vec![TxnOp::get(worker, None)],
    }
}

/// Deletes `slot`'s worker key if `session` still holds it.
fn release_plan(prefix: &str, session: SessionId, slot: Slot) -> TxnPlan {
    let worker = key(prefix, "workers", slot);
    TxnPlan {
        compares: vec![Compare::lease(worker.clone(), CompareOp::Equal, session)],
        then: vec![TxnOp::delete(worker, None)],
        ..TxnPlan::default()
    }
}

impl Store for EtcdStore {
    async fn call(&mut self, request: Request) -> Reply {
        let result = match request {
            Request::OpenSession { ttl } => {
                let secs = ttl.as_secs().max(1) as i64;
                self.etcd.attempt("lease grant", |mut c| async move { c.lease_grant(secs, None).await }).await.map(
                    |granted| {
                        self.saw(granted.header());
                        self.ttl = Duration::from_secs(granted.ttl().max(1) as u64);
                        Reply::SessionOpened { session: granted.id(), ttl: Some(self.ttl) }
                    },
                )
            }
            Request::ListSlots { session } => self.list(session).await,
            Request::CountSlots => {
                let prefix = format!("{}/workers/", self.prefix);
                let options = GetOptions::new().with_prefix().with_count_only();
                self.etcd.attempt("count slots", |mut c| async move { c.get(prefix, Some(options)).await }).await.map(
                    |got| {
                        self.saw(got.header());
                        Reply::SlotCount { taken: got.count().max(0) as u64 }
                    },
                )
            }
            Request::SampleClocks { session, from, limit } => self.sample_clocks(session, from, limit).await,
            Request::Claim { session, slot } => self.claim(session, slot).await,
            Request::ReadReservations { slots, linearizable } => self.read(&slots, linearizable).await,
            Request::SetFence { until_ms, reason } => self.set_fence(until_ms, &reason).await,
            Request::WriteReservations { session, writes, check_claim } => {
                self.write(session, &writes, check_claim).await
            }
            Request::Renew { session } => Ok(self.renew(session).await),
            Request::Release { session, slot } => self.release(session, slot).await,
            Request::CloseSession { session } => {
                match self.etcd.attempt("lease revoke", |mut c| async move { c.lease_revoke(session).await }).await {
                    Ok(_) => Ok(Reply::SessionClosed),
                    // Already gone: closed all the same.
                    Err(error) if error.contains("lease not found") => Ok(Reply::SessionClosed),
                    Err(error) => Err(error),
                }
            }
        };
        let reply = result.unwrap_or_else(|error| {
            // etcd refuses a request under an alarm before applying anything (NOSPACE: the
            // quota check, or the capped applier): certainly not applied, so a write keeps its
            // version and its retry needs no read first.
            let outcome = if Alarm::in_error(&error).is_some() { Outcome::NotApplied } else { Outcome::Unknown };
            Reply::Failed { error, outcome }
        });
        match self.went_back.take() {
            Some(detail) => Reply::WentBack { detail, reply: Box::new(reply) },
            None => reply,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_come_from_statefulset_hostnames() {
        assert_eq!(ordinal_of("snowmint-3"), Some(3));
        assert_eq!(ordinal_of("snowmint-canary-12\n"), Some(12));
        assert_eq!(ordinal_of("snowmint"), None);
        assert_eq!(ordinal_of("snowmint-"), None);
        assert_eq!(ordinal_of("snowmint-3a"), None);
        assert_eq!(ordinal_of("host-+4"), None);
    }

    /// Issue 23: a holder that mints nothing writes no more; its last published clock grows
    /// stale, so a reservation written idle publishes none.
    #[test]
    fn an_idle_reservation_publishes_no_clock() {
        let stored = |write: &Write| reservation_value(write).into_bytes();
        let write = Write {
            slot: 3,
            until_ms: 1_800_000_003_000,
            expect: Some(Version::At(9)),
            wall_ms: 1_800_000_000_000,
            idle: false,
            claim_version: None,
        };
        assert_eq!(published_clock(&stored(&write)), Some(1_800_000_000_000));
        assert_eq!(published_clock(&stored(&Write { idle: true, ..write })), None);
        // Written before clocks were published, or before idleness was: read as they were.
        assert_eq!(published_clock(br#"{"reserved_until_ms":1,"reserved_until":"x"}"#), None);
        assert_eq!(published_clock(br#"{"reserved_until_ms":1,"reserved_until":"x","written_at_ms":5}"#), Some(5));
    }

    /// Writes onto absent reservations, the largest kind.
    fn writes(slots: &[Slot]) -> Vec<Write> {
        let write = |&slot| Write {
            slot,
            until_ms: 1_800_000_003_000,
            expect: Some(Version::Absent),
            wall_ms: 0,
            idle: false,
            claim_version: Some(1),
        };
        slots.iter().map(write).collect()
    }

    /// An instance holding any number of slots up to the 1,024 of ten
    /// worker bits, its requests cut as the keeper cuts them, never builds a transaction of
    /// more than etcd's default 128 operations; and one that would be larger is never sent.
    #[test]
    fn no_transaction_exceeds_etcds_limit_whatever_the_slots() {
        let most = |plans: Vec<TxnPlan>| plans.iter().map(TxnPlan::ops).max().unwrap_or(0);
        // A plan's size depends on how many slots it names, not which: the first and the last
        // of each cut stand for the rest.
        let ends = |chunks: std::slice::Chunks<'_, Slot>| -> Vec<Vec<Slot>> {
            let chunks: Vec<&[Slot]> = chunks.collect();
            vec![chunks[0].to_vec(), chunks[chunks.len() - 1].to_vec()]
        };
        for n in 1..=1024u32 {
            let slots: Vec<Slot> = (0..n).collect();
            let reads = most(ends(slots.chunks(MAX_READS)).iter().map(|chunk| read_plan("/p", chunk)).collect());
            assert!(reads <= MAX_TXN_OPS, "{n} slots: a read of {reads} operations");
            for check_claim in [true, false] {
                let chunks = ends(slots.chunks(MAX_WRITES));
                let writes =
                    most(chunks.iter().map(|chunk| write_plan("/p", 7, &writes(chunk), check_claim)).collect());
                assert!(writes <= MAX_TXN_OPS, "{n} slots: a write of {writes} operations");
            }
            let one = most(vec![claim_plan("/p", "{}", 7, n - 1), release_plan("/p", 7, n - 1)]);
            assert!(one <= MAX_TXN_OPS);
        }
        let full = write_plan("/p", 7, &writes(&(0..MAX_WRITES as Slot).collect::<Vec<_>>()), true);
        assert_eq!(full.ops(), MAX_WRITES * OPS_PER_WRITE);
        assert!(full.txn("write").is_ok());

        let too_many: Vec<Slot> = (0..=MAX_TXN_OPS as Slot / OPS_PER_WRITE as Slot).collect();
        match write_plan("/p", 7, &writes(&too_many), true).txn("write reservations") {
            Err(Reply::Failed { error, outcome: Outcome::NotApplied }) => {
                assert!(error.contains("133 operations") && error.contains("not sent"), "{error}")
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a transaction of {} writes would be sent", too_many.len()),
        }
        assert!(read_plan("/p", &(0..=MAX_TXN_OPS as Slot).collect::<Vec<_>>()).txn("read").is_err());
    }
}
