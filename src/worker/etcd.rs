//! etcd mode: a worker ID leased from an etcd cluster, with reservations kept in etcd.
//!
//! Keys under the prefix (default `/snowmint`):
//!
//! - `layout`: the ID layout, recorded by the first instance; a different one refuses to start.
//! - `workers/<id>`: who holds slot `<id>` (JSON: host, pid, start time, version), attached
//!   to the holder's lease, so it disappears when the lease expires or is revoked.
//! - `reservations/<id>`: the time up to which slot `<id>` may have minted. No lease: it
//!   outlives its writer, and the next holder mints only past it.
//!
//! One task keeps the slot: it renews the lease at a third of the TTL, extends the
//! reservation ahead of the clock, and re-claims a slot when the lease is lost, publishing
//! every change on the watch channel the minter reads. The minter fences itself at the local
//! lease deadline (the monotonic instant the last successful renewal was *sent*, plus the
//! TTL, minus a margin) whether or not any error came back.
//!
//! The client keeps one etcd connection per endpoint and sends each call to one of them,
//! moving to the next endpoint on failure, with a timeout on every call: a dead or paused
//! member costs one failed attempt, never a stuck call.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;

use super::{Grant, Minted, WorkerError, WorkerSource, WorkerState};
use crate::clock::Clock;
use crate::layout::{Layout, rfc3339_ms};
use crate::metrics::Metrics;

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
    /// The slot to try first: the flag, or the StatefulSet ordinal of the hostname.
    pub preferred_worker_id: Option<u32>,
    /// This host's name, recorded in the worker key.
    pub hostname: String,
    /// How far ahead of the clock reservations reach.
    pub window: Duration,
    pub layout: Layout,
    pub tls: Option<EtcdTls>,
    /// User and password for etcd authentication.
    pub user: Option<(String, String)>,
    /// How long the start may take to reach etcd before giving up.
    pub start_timeout: Duration,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("lease_ttl", &self.lease_ttl)
            .field("preferred_worker_id", &self.preferred_worker_id)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .finish_non_exhaustive()
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

/// Why an etcd call failed, after its retries.
#[derive(Debug, Clone, thiserror::Error)]
#[error("etcd {what}: {message}")]
struct CallError {
    what: &'static str,
    message: String,
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
}

/// One connection per endpoint; calls go to the current one and move on when it fails.
struct Etcd {
    clients: Vec<(String, Client)>,
    current: usize,
    /// Timeout of one attempt.
    call_timeout: Duration,
}

impl Etcd {
    async fn connect(config: &EtcdConfig, call_timeout: Duration) -> Result<Etcd, WorkerError> {
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
                .map_err(|e| WorkerError::Etcd(format!("cannot set up the etcd client for {endpoint}: {e}")))?;
            clients.push((endpoint.clone(), client));
        }
        Ok(Etcd { clients, current: 0, call_timeout })
    }

    /// Runs `call` against the endpoints in turn until one succeeds or `until` passes.
    async fn call<T, F, Fut>(&mut self, what: &'static str, until: Instant, mut call: F) -> Result<T, CallError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut backoff = Duration::from_millis(25);
        loop {
            let (endpoint, client) = &self.clients[self.current];
            let message = match tokio::time::timeout(self.call_timeout, call(client.clone())).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) => format!("{endpoint}: {e}"),
                Err(_) => format!("{endpoint}: no answer within {:?}", self.call_timeout),
            };
            tracing::debug!(what, error = %message, "etcd call failed; trying the next endpoint");
            self.current = (self.current + 1) % self.clients.len();
            if Instant::now() + backoff >= until {
                return Err(CallError { what, message });
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }
}

fn tls_options(tls: &EtcdTls) -> Result<etcd_client::TlsOptions, WorkerError> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| WorkerError::Etcd(format!("cannot read {}: {e}", path.display())))
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
        _ => return Err(WorkerError::Etcd("--etcd-cert and --etcd-key go together".into())),
    }
    Ok(options)
}

/// A slot held under a lease.
#[derive(Debug, Clone)]
struct Held {
    worker_id: u32,
    lease: i64,
    /// The reservation of the previous holder, read after the claim.
    floor_ms: Option<i64>,
    reserved_ms: i64,
    /// Monotonic instant past which the lease may be gone.
    deadline: Duration,
}

/// The state of etcd mode, owned by its task.
struct Keeper {
    config: EtcdConfig,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    etcd: Etcd,
    /// The TTL etcd granted (it may raise a too-small one).
    ttl: Duration,
    generation: u64,
    /// The slot held last, tried first when re-claiming.
    last_worker: Option<u32>,
    started_at: String,
}

impl Keeper {
    fn key(&self, kind: &str, id: u32) -> String {
        format!("{}/{kind}/{id}", self.config.prefix)
    }

    fn slots(&self) -> u64 {
        self.config.layout.max_worker() + 1
    }

    /// The safety margin taken off the lease deadline, for clock rate differences and
    /// the time a renewal takes to reach the leader.
    fn margin(&self) -> Duration {
        (self.ttl / 10).max(Duration::from_millis(500)).min(self.ttl / 2)
    }

    /// Records the layout on the first start, or checks it against the recorded one.
    async fn check_layout(&mut self, until: Instant) -> Result<(), WorkerError> {
        let key = format!("{}/layout", self.config.prefix);
        let value = serde_json::to_string(&self.config.layout).expect("layout serializes");
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), value, None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let response = self
            .etcd
            .call("record layout", until, |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await
            .map_err(etcd_unreachable)?;
        if response.succeeded() {
            tracing::info!(key, layout = %self.config.layout, "recorded the layout");
            return Ok(());
        }
        let saved = response
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                etcd_client::TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
                _ => None,
            })
            .unwrap_or_default();
        let configured = self.config.layout.to_string();
        match serde_json::from_slice::<Layout>(&saved) {
            Ok(layout) if layout == self.config.layout => Ok(()),
            Ok(layout) => Err(WorkerError::LayoutMismatch { saved_at: key, saved: layout.to_string(), configured }),
            Err(e) => Err(WorkerError::LayoutMismatch {
                saved_at: key,
                saved: format!("unreadable ({e}): {}", String::from_utf8_lossy(&saved)),
                configured,
            }),
        }
    }

    /// Grants a lease and takes a free slot (the preferred one first), then reads the
    /// slot's previous reservation and writes a new one.
    async fn claim(&mut self, until: Instant) -> Result<Held, ClaimError> {
        let ttl_secs = self.config.lease_ttl.as_secs().max(1) as i64;
        let sent = self.clock.monotonic();
        let grant =
            self.etcd.call("lease grant", until, |mut c| async move { c.lease_grant(ttl_secs, None).await }).await?;
        let lease = grant.id();
        self.ttl = Duration::from_secs(grant.ttl().max(1) as u64);
        let deadline = sent + self.ttl - self.margin();

        let prefix = format!("{}/workers/", self.config.prefix);
        let listed = self
            .etcd
            .call("list workers", until, |mut c| {
                let prefix = prefix.clone();
                async move { c.get(prefix, Some(GetOptions::new().with_prefix().with_keys_only())).await }
            })
            .await?;
        let taken: BTreeSet<u64> = listed
            .kvs()
            .iter()
            .filter_map(|kv| std::str::from_utf8(kv.key()).ok()?.strip_prefix(&prefix)?.parse().ok())
            .collect();
        let slots = self.slots();
        // A re-claim tries the slot it lost first, then the configured preference.
        let preferred = self.last_worker.into_iter().chain(self.config.preferred_worker_id).map(u64::from);
        let candidates = preferred.chain(0..slots).filter(|&id| id < slots && !taken.contains(&id));
        let owner = serde_json::to_string(&Owner {
            host: self.config.hostname.clone(),
            pid: std::process::id(),
            started_at: self.started_at.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        })
        .expect("owner serializes");
        let mut claimed = None;
        for id in candidates {
            let id = id as u32;
            let key = self.key("workers", id);
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, owner.clone(), Some(PutOptions::new().with_lease(lease)))]);
            if self
                .etcd
                .call("claim slot", until, |mut c| {
                    let txn = txn.clone();
                    async move { c.txn(txn).await }
                })
                .await?
                .succeeded()
            {
                claimed = Some(id);
                break;
            }
        }
        let Some(worker_id) = claimed else {
            self.revoke(lease).await;
            return Err(ClaimError::AllTaken);
        };

        // Invariant 2: the previous holder's reservation is read after the claim succeeded,
        // with a linearizable read (etcd's default), and only later ticks are minted.
        let reservation_key = self.key("reservations", worker_id);
        let previous = self
            .etcd
            .call("read reservation", until, |mut c| {
                let key = reservation_key.clone();
                async move { c.get(key, None).await }
            })
            .await?;
        let floor_ms = match previous.kvs().first() {
            None => None,
            Some(kv) => match serde_json::from_slice::<Reservation>(kv.value()) {
                Ok(r) => Some(r.reserved_until_ms),
                Err(e) => {
                    self.revoke(lease).await;
                    return Err(ClaimError::Corrupt(format!(
                        "{reservation_key} holds {:?}, not a reservation ({e}); fix or remove it by hand once no instance minted for slot {worker_id} past the time it meant",
                        String::from_utf8_lossy(kv.value())
                    )));
                }
            },
        };
        let now = self.clock.wall_ms();
        let reserved_ms = floor_ms.unwrap_or(now).max(now) + self.config.window.as_millis() as i64;
        let held = Held { worker_id, lease, floor_ms, reserved_ms: i64::MIN, deadline };
        match self.write_reservation(&held, reserved_ms, until).await {
            Ok(true) => {}
            Ok(false) => {
                self.revoke(lease).await;
                return Err(ClaimError::Lost);
            }
            Err(e) => {
                self.revoke(lease).await;
                return Err(e.into());
            }
        }
        self.generation += 1;
        self.last_worker = Some(worker_id);
        self.metrics.worker_id.set(worker_id.into());
        self.metrics.lease_valid.set(1);
        tracing::info!(
            worker_id,
            lease = format!("{lease:x}"),
            ttl = ?self.ttl,
            floor = floor_ms.map(rfc3339_ms),
            reserved_until = %rfc3339_ms(reserved_ms),
            "slot taken"
        );
        Ok(Held { reserved_ms, ..held })
    }

    /// Writes `reserved_ms` for the held slot. `Ok(false)` when the lease no longer owns the
    /// slot: the write did not happen and must not be retried as a plain put.
    async fn write_reservation(&mut self, held: &Held, reserved_ms: i64, until: Instant) -> Result<bool, CallError> {
        let value = serde_json::to_string(&Reservation {
            reserved_until_ms: reserved_ms,
            reserved_until: rfc3339_ms(reserved_ms),
        })
        .expect("reservation serializes");
        // Invariant 3: the reservation is extended only while this instance's lease owns
        // the slot's worker key.
        let txn = Txn::new()
            .when([Compare::lease(self.key("workers", held.worker_id), CompareOp::Equal, held.lease)])
            .and_then([TxnOp::put(self.key("reservations", held.worker_id), value, None)]);
        let result = self
            .etcd
            .call("write reservation", until, |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await;
        match &result {
            Ok(response) if response.succeeded() => self.metrics.reservation_writes.with_label_values(&["ok"]).inc(),
            _ => self.metrics.reservation_writes.with_label_values(&["failed"]).inc(),
        }
        Ok(result?.succeeded())
    }

    /// Renews the lease once. `Ok(Some(deadline))` on success, `Ok(None)` when the lease is
    /// gone.
    async fn renew(&mut self, held: &Held) -> Result<Option<Duration>, CallError> {
        let until = Instant::now() + self.ttl / 3;
        let lease = held.lease;
        let mut sent = self.clock.monotonic();
        let clock = self.clock.clone();
        let ttl = self
            .etcd
            .call("lease keep-alive", until, |mut c| {
                sent = clock.monotonic();
                async move {
                    let (mut keeper, mut stream) = c.lease_keep_alive(lease).await?;
                    keeper.keep_alive().await?;
                    match stream.message().await? {
                        Some(response) => Ok(response.ttl()),
                        None => Err(etcd_client::Error::InvalidArgs("keep-alive stream closed".into())),
                    }
                }
            })
            .await?;
        Ok((ttl > 0).then(|| sent + self.ttl - self.margin()))
    }

    async fn revoke(&mut self, lease: i64) {
        let until = Instant::now() + self.etcd.call_timeout;
        if let Err(e) = self.etcd.call("lease revoke", until, |mut c| async move { c.lease_revoke(lease).await }).await
        {
            tracing::warn!(error = %e, "could not revoke the lease; the slot frees itself when the lease expires");
        }
    }

    fn grant(&self, held: &Held) -> WorkerState {
        WorkerState::Held(Grant {
            worker_id: held.worker_id,
            generation: self.generation,
            floor_ms: held.floor_ms,
            reserved_ms: held.reserved_ms,
            lease_deadline: Some(held.deadline),
        })
    }
}

/// Why a claim did not succeed.
#[derive(Debug, thiserror::Error)]
enum ClaimError {
    #[error("every slot is taken")]
    AllTaken,
    #[error("the slot was lost while claiming it")]
    Lost,
    #[error("{0}")]
    Corrupt(String),
    #[error(transparent)]
    Call(#[from] CallError),
}

fn etcd_unreachable(e: CallError) -> WorkerError {
    WorkerError::Etcd(format!("cannot reach etcd: {e}"))
}

/// Connects, checks the layout and claims a slot (retrying while etcd is unreachable, up to
/// the start timeout), then starts the task that keeps the slot.
pub async fn start(config: EtcdConfig, clock: Arc<dyn Clock>, metrics: Metrics) -> Result<WorkerSource, WorkerError> {
    let until = Instant::now() + config.start_timeout;
    let call_timeout = (config.lease_ttl / 5).clamp(Duration::from_millis(300), Duration::from_secs(2));
    let etcd = Etcd::connect(&config, call_timeout).await?;
    let mut keeper = Keeper {
        ttl: config.lease_ttl,
        config,
        clock,
        metrics,
        etcd,
        generation: 0,
        last_worker: None,
        started_at: String::new(),
    };
    keeper.started_at = rfc3339_ms(keeper.clock.wall_ms());
    keeper.check_layout(until).await?;
    let held = loop {
        match keeper.claim(until).await {
            Ok(held) => break held,
            Err(ClaimError::AllTaken) => {
                return Err(WorkerError::AllSlotsTaken {
                    prefix: format!("{}/workers/", keeper.config.prefix),
                    slots: keeper.slots(),
                    worker_bits: keeper.config.layout.worker_bits,
                });
            }
            Err(ClaimError::Lost) if Instant::now() < until => continue,
            Err(ClaimError::Lost) => return Err(WorkerError::Etcd("lost every slot claimed".into())),
            Err(ClaimError::Corrupt(message)) => return Err(WorkerError::Etcd(message)),
            Err(ClaimError::Call(e)) => return Err(etcd_unreachable(e)),
        }
    };
    let (state_tx, state) = watch::channel(keeper.grant(&held));
    let extend_now = Arc::new(Notify::new());
    let (finish, finish_rx) = oneshot::channel();
    let task = tokio::spawn(keep(keeper, held, state_tx, extend_now.clone(), finish_rx));
    Ok(WorkerSource { state, extend_now, finish, task })
}

/// Keeps the slot: renews, extends, re-claims; on finish saves the final reservation and
/// revokes the lease.
async fn keep(
    mut keeper: Keeper,
    held: Held,
    state_tx: watch::Sender<WorkerState>,
    extend_now: Arc<Notify>,
    mut finish: oneshot::Receiver<Minted>,
) {
    let window_ms = keeper.config.window.as_millis() as i64;
    let extend_every = keeper.config.window / 3;
    let mut held = Some(held);
    let mut next_renew = Instant::now() + keeper.ttl / 3;
    let mut next_extend = Instant::now() + extend_every;
    let mut renew_failing = false;
    let mut fenced_logged = false;
    let mut backoff = Duration::from_millis(100);
    loop {
        let Some(current) = held.clone() else {
            // No slot: claim one, retrying with backoff until it works or the server stops.
            let until = Instant::now() + keeper.ttl;
            let claimed = tokio::select! {
                last = &mut finish => { let _ = last; return; }
                claimed = keeper.claim(until) => claimed,
            };
            match claimed {
                Ok(new) => {
                    state_tx.send_replace(keeper.grant(&new));
                    held = Some(new);
                    backoff = Duration::from_millis(100);
                    next_renew = Instant::now() + keeper.ttl / 3;
                    next_extend = Instant::now() + extend_every;
                    fenced_logged = false;
                }
                Err(e) => {
                    tracing::error!(error = %e, prefix = %keeper.config.prefix, "cannot claim a worker slot; minting stays refused");
                    tokio::select! {
                        _ = &mut finish => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(keeper.ttl);
                }
            }
            continue;
        };

        tokio::select! {
            minted = &mut finish => {
                // Unknown (the minter failed): the saved reservation stays, covering it all.
                let last = match minted {
                    Ok(Minted::UpTo(last)) => last.max(current.floor_ms),
                    _ => None,
                };
                if let Some(final_ms) = last {
                    // Nothing past the minter's last tick was minted: shrink the reservation
                    // to it (never below the inherited floor), so the next holder starts at once.
                    let until = Instant::now() + keeper.ttl;
                    match keeper.write_reservation(&current, final_ms, until).await {
                        Ok(true) => tracing::info!(reserved_until = %rfc3339_ms(final_ms), "final reservation saved"),
                        Ok(false) => tracing::warn!("the slot was lost before the final reservation; the one saved still covers every ID minted"),
                        Err(e) => tracing::warn!(error = %e, "could not save the final reservation; the one saved still covers every ID minted"),
                    }
                }
                // Then free the slot at once for the next instance.
                keeper.revoke(current.lease).await;
                keeper.metrics.lease_valid.set(0);
                tracing::info!(worker_id = current.worker_id, "slot released");
                return;
            }
            _ = tokio::time::sleep_until(next_renew) => {
                match keeper.renew(&current).await {
                    Ok(Some(deadline)) => {
                        keeper.metrics.lease_renewals.with_label_values(&["ok"]).inc();
                        keeper.metrics.lease_valid.set(1);
                        if renew_failing || fenced_logged {
                            tracing::info!(worker_id = current.worker_id, "lease renewals work again");
                        }
                        renew_failing = false;
                        fenced_logged = false;
                        let updated = Held { deadline, ..current };
                        state_tx.send_replace(keeper.grant(&updated));
                        held = Some(updated);
                        next_renew = Instant::now() + keeper.ttl / 3;
                    }
                    Ok(None) => {
                        keeper.metrics.lease_renewals.with_label_values(&["failed"]).inc();
                        lose(&keeper, &state_tx, current.worker_id, "the lease expired");
                        held = None;
                    }
                    Err(e) => {
                        keeper.metrics.lease_renewals.with_label_values(&["failed"]).inc();
                        if !renew_failing {
                            tracing::warn!(error = %e, worker_id = current.worker_id, "lease renewal failed; retrying");
                            renew_failing = true;
                        }
                        next_renew = Instant::now() + Duration::from_millis(200);
                    }
                }
            }
            _ = tokio::time::sleep_until(next_extend) => extend(&mut keeper, &state_tx, &mut held, window_ms, &mut next_extend, extend_every).await,
            _ = extend_now.notified() => extend(&mut keeper, &state_tx, &mut held, window_ms, &mut next_extend, extend_every).await,
        }
        if let Some(current) = &held
            && keeper.clock.monotonic() >= current.deadline
        {
            keeper.metrics.lease_valid.set(0);
            if !fenced_logged {
                tracing::warn!(
                    worker_id = current.worker_id,
                    "lease deadline passed without a renewal; minting is fenced"
                );
                fenced_logged = true;
            }
        }
        if let Some(current) = &held {
            let headroom = (current.reserved_ms - keeper.clock.wall_ms()) as f64 / 1000.0;
            keeper.metrics.reservation_headroom_seconds.set(headroom);
        }
    }
}

/// Publishes the loss of the slot.
fn lose(keeper: &Keeper, state_tx: &watch::Sender<WorkerState>, worker_id: u32, why: &str) {
    keeper.metrics.lease_lost.inc();
    keeper.metrics.lease_valid.set(0);
    keeper.metrics.worker_id.set(-1);
    tracing::warn!(worker_id, reason = why, "lease lost; re-claiming a slot");
    state_tx
        .send_replace(WorkerState::Unheld { reason: format!("lease on worker {worker_id} lost: {why}; re-claiming") });
}

async fn extend(
    keeper: &mut Keeper,
    state_tx: &watch::Sender<WorkerState>,
    held: &mut Option<Held>,
    window_ms: i64,
    next_extend: &mut Instant,
    every: Duration,
) {
    *next_extend = Instant::now() + every;
    let Some(current) = held.clone() else { return };
    let target = keeper.clock.wall_ms() + window_ms;
    if target - current.reserved_ms < every.as_millis() as i64 {
        return;
    }
    let until = Instant::now() + every;
    match keeper.write_reservation(&current, target, until).await {
        Ok(true) => {
            let updated = Held { reserved_ms: target, ..current };
            state_tx.send_replace(keeper.grant(&updated));
            *held = Some(updated);
        }
        Ok(false) => {
            lose(keeper, state_tx, current.worker_id, "the worker key is no longer this instance's");
            keeper.revoke(current.lease).await;
            *held = None;
        }
        Err(e) => {
            tracing::warn!(error = %e, worker_id = current.worker_id, "reservation write failed; minting stops when the current one runs out");
            *next_extend = Instant::now() + Duration::from_millis(200);
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
}
