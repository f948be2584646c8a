//! The upkeep task: runs the [`Compactor`] against etcd and polls etcd's alarms, on etcd
//! connections of its own, until the server's shutdown token is cancelled.
//!
//! Each call is bounded by the etcd call timeout and abandoned at once on shutdown. Nothing
//! here is on the minting path: the keeper and the minter never wait for this task, and its
//! failures are logged and counted (`snowmint_etcd_compactions_total{result="failed"}`).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::compactor::{Compactor, Event, FenceKey, Reply, Request};
use crate::clock::Clock;
use crate::metrics::{ALREADY_COMPACTED, COMPACTED, Metrics, RESULT_FAILED};
use crate::store::alarm::{Alarm, AlarmWatch};
use crate::store::etcd::{Endpoints, EtcdConfig, Horizon, fence_key};

/// How often etcd's alarms are polled (the status of one member: a local read, no write).
const ALARM_POLL: Duration = Duration::from_secs(30);
/// ... and while one is raised, to notice soon that it is cleared.
const ALARM_POLL_RAISED: Duration = Duration::from_secs(5);

/// The shortest and the longest `--etcd-compaction-interval` accepted. Below a second the
/// rounds would be a load of their own; above an hour, a large fleet's history kept between
/// two compactions approaches etcd's default quota (the capacity figures
/// in docs/operations/fleets.md).
pub const MIN_COMPACTION_INTERVAL: Duration = Duration::from_secs(1);
pub const MAX_COMPACTION_INTERVAL: Duration = Duration::from_secs(3600);

/// The default `--etcd-compaction-interval`: the Kubernetes API server's.
pub const DEFAULT_COMPACTION_INTERVAL: Duration = Duration::from_secs(300);

/// Starts the upkeep of the etcd `config` names: compaction every `config.compaction_interval`
/// (if any) and the alarm polls, reported to `alarms`. `seed` spreads the first round and
/// poll over an interval, so instances started together do not come together. `None` when
/// its connections cannot be set up (logged): the server runs on without it.
pub async fn spawn(
    config: &EtcdConfig,
    seed: u64,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    alarms: AlarmWatch,
    shutdown: CancellationToken,
) -> Option<JoinHandle<()>> {
    let mut etcd = match Endpoints::connect(config).await {
        Ok(etcd) => etcd,
        Err(error) => {
            tracing::warn!(%error, "etcd upkeep unavailable: no compaction, no alarm polls; minting goes on");
            return None;
        }
    };
    etcd.report_alarms(alarms.clone());
    let now = clock.boot_time();
    let compactor = config.compaction_interval.map(|interval| {
        let first = now + interval.mul_f64(fraction(seed));
        tracing::info!(?interval, key = %compaction_key(&config.prefix), "compacting etcd's history, one instance a round");
        Compactor::new(interval, first, config.call_timeout())
    });
    if compactor.is_none() {
        tracing::info!("etcd compaction off (--etcd-compaction-interval off): etcd's operator compacts");
    }
    let upkeep = Upkeep {
        etcd,
        key: compaction_key(&config.prefix),
        fence_key: fence_key(&config.prefix),
        horizon: Horizon::default(),
        compactor,
        alarms,
        clock,
        metrics,
        next_poll: now + ALARM_POLL.mul_f64(fraction(seed.rotate_left(32))),
    };
    Some(tokio::spawn(upkeep.run(shutdown)))
}

/// The key whose version picks each round's compactor.
pub fn compaction_key(prefix: &str) -> String {
    format!("{prefix}/compaction")
}

/// A number in [0, 1) from `seed` (splitmix64's finalizer).
fn fraction(seed: u64) -> f64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as f64 / (u64::MAX as f64 + 1.0)
}

struct Upkeep {
    etcd: Endpoints,
    key: String,
    /// Read with each round: the restore procedure sets it (see [`Compactor`]).
    fence_key: String,
    /// The latest state of etcd the rounds saw: a header below it means etcd went back.
    horizon: Horizon,
    compactor: Option<Compactor>,
    alarms: AlarmWatch,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    /// The boot-time instant of the next alarm poll.
    next_poll: Duration,
}

impl Upkeep {
    async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let now = self.clock.boot_time();
            let due = self.compactor.as_mut().and_then(|c| c.poll_request(now));
            if let Some(request) = due {
                let reply = tokio::select! {
                    reply = self.carry_out(request) => reply,
                    () = shutdown.cancelled() => break,
                };
                if let Some(compactor) = &mut self.compactor {
                    compactor.handle_reply(self.clock.boot_time(), reply);
                }
                self.record();
                continue;
            }
            if now >= self.next_poll {
                tokio::select! {
                    () = self.poll_alarms() => {}
                    () = shutdown.cancelled() => break,
                }
                let every = if self.alarms.raised().is_empty() { ALARM_POLL } else { ALARM_POLL_RAISED };
                self.next_poll = self.clock.boot_time() + every;
                continue;
            }
            let wake = self
                .compactor
                .as_ref()
                .and_then(Compactor::poll_timeout)
                .map_or(self.next_poll, |at| at.min(self.next_poll));
            tokio::select! {
                () = tokio::time::sleep(wake.saturating_sub(now)) => {}
                () = shutdown.cancelled() => break,
            }
        }
    }

    /// One request of the compactor, carried out against etcd.
    async fn carry_out(&mut self, request: Request) -> Reply {
        match request {
            Request::Round { expect_version, compact_to } => {
                let key = self.key.clone();
                let fence = TxnOp::get(self.fence_key.clone(), None);
                let txn = Txn::new()
                    .when([Compare::version(key.clone(), CompareOp::Equal, expect_version)])
                    .and_then([TxnOp::put(key.clone(), compact_to.to_string(), None), fence.clone()])
                    .or_else([TxnOp::get(key, None), fence]);
                let answer = self.etcd.attempt("compaction round", |mut c| async move { c.txn(txn).await }).await;
                match answer {
                    Ok(response) => {
                        let revision = response.header().map_or(0, |h| h.revision());
                        if let Some(header) = response.header()
                            && let Some(detail) = self.horizon.saw(header.cluster_id(), header.revision())
                            && let Some(compactor) = &mut self.compactor
                        {
                            compactor.went_back(detail);
                        }
                        let got = |i: usize| match response.op_responses().get(i) {
                            Some(TxnOpResponse::Get(get)) => get.kvs().first().cloned(),
                            _ => None,
                        };
                        let fence =
                            got(1).map(|kv| FenceKey { mod_revision: kv.mod_revision(), value: kv.value().to_vec() });
                        if response.succeeded() {
                            self.etcd.write_applied();
                            return Reply::Won { revision, fence };
                        }
                        let kv = got(0);
                        let version = kv.as_ref().map_or(0, |kv| kv.version());
                        let compact_to = kv.and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok());
                        Reply::Lost { version, compact_to, revision, fence }
                    }
                    Err(error) => Reply::Failed { error },
                }
            }
            Request::Compact { revision } => {
                // Not physical: etcd answers once the compaction is recorded and removes the
                // old revisions in the background, as the Kubernetes API server asks it.
                let answer =
                    self.etcd.attempt("compaction", |mut c| async move { c.compact(revision, None).await }).await;
                match answer {
                    Ok(_) => Reply::Compacted,
                    Err(error) if error.contains("required revision has been compacted") => Reply::AlreadyCompacted,
                    Err(error) => Reply::Failed { error },
                }
            }
        }
    }

    /// Asks one member for its status, which lists the cluster's alarms.
    async fn poll_alarms(&mut self) {
        let status = self.etcd.attempt("status", |mut c| async move { c.status().await }).await;
        match status {
            Ok(status) => self.alarms.saw_status(Alarm::in_status(status.errors())),
            // A failure that names an alarm has raised it already (the endpoints report it).
            Err(error) => tracing::debug!(%error, "etcd alarm poll failed; polling again later"),
        }
    }

    fn record(&mut self) {
        let Some(compactor) = &mut self.compactor else { return };
        let m = &self.metrics;
        while let Some(event) = compactor.poll_event() {
            match event {
                Event::Compacted { revision } => {
                    m.etcd_compactions.with_label_values(&[COMPACTED]).inc();
                    m.etcd_compacted_revision.set(revision);
                    tracing::info!(revision, "compacted etcd's history");
                }
                Event::AlreadyCompacted { revision } => {
                    m.etcd_compactions.with_label_values(&[ALREADY_COMPACTED]).inc();
                    m.etcd_compacted_revision.set(m.etcd_compacted_revision.get().max(revision));
                    tracing::debug!(revision, "etcd's history was compacted already");
                }
                Event::WonFirstRound => tracing::debug!("this instance compacts from the next round"),
                Event::Lost { compact_to } => {
                    if let Some(revision) = compact_to.filter(|&r| r > 0) {
                        m.etcd_compacted_revision.set(revision);
                    }
                    tracing::debug!(?compact_to, "another instance compacts this round");
                }
                Event::Failed { what, error } => {
                    m.etcd_compactions.with_label_values(&[RESULT_FAILED]).inc();
                    tracing::warn!(what, %error, "etcd compaction failed; trying again next round");
                }
                Event::WentBack { detail } => {
                    tracing::warn!(%detail, "etcd went back in time: compacting only history seen after it")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_rounds_spread_over_the_interval() {
        let fractions: Vec<f64> = (0..1000u64).map(fraction).collect();
        assert!(fractions.iter().all(|f| (0.0..1.0).contains(f)));
        // Instances with seeds one apart start their rounds all over the interval.
        for decile in 0..10 {
            let (low, high) = (decile as f64 / 10.0, (decile + 1) as f64 / 10.0);
            let n = fractions.iter().filter(|f| (low..high).contains(*f)).count();
            assert!((50..150).contains(&n), "{n} of 1,000 first rounds in [{low}, {high})");
        }
    }
}
