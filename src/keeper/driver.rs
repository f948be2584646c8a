//! Runs the keeper state machine under tokio: feeds it the clock, the store's replies and
//! its timers, publishes its holding to the minter, and turns its events into metrics and
//! log lines.
//!
//! The store runs in a task of its own, one request at a time, each bounded by a call
//! timeout (a call that does not answer in time is a failure of unknown outcome). The start
//! ([`start`]) returns once every wanted slot is granted, or with the reason it cannot be.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::machine::{Event, Keeper, KeeperConfig, KeeperError, LossReason, Now};
use crate::clock::Clock;
use crate::grant::Progress;
use crate::grant::{Holding, Minted};
use crate::layout::rfc3339_ms;
use crate::metrics::{Metrics, RESULT_FAILED, RESULT_OK};
use crate::store::{Outcome, Reply, Request, Store};

/// A running keeper, as the server sees it.
pub struct KeeperHandle {
    /// The holding the minter reads.
    pub holding: watch::Receiver<Holding>,
    /// Wakes the keeper to extend the reservation now (the minter found itself fenced).
    pub extend_now: Arc<Notify>,
    /// Where the minter reports its progress.
    pub progress: watch::Sender<Progress>,
    finish: oneshot::Sender<Minted>,
    task: JoinHandle<()>,
}

impl KeeperHandle {
    /// Ends the keeper after the minter stopped: the reservations shrink to what was minted
    /// (when that is known), then the claim is released. Waits at most `limit`.
    pub async fn finish(self, minted: Minted, limit: Duration) {
        // The task may already have ended (its receiver dropped): nothing left to do then.
        let _ = self.finish.send(minted);
        let abort = self.task.abort_handle();
        match tokio::time::timeout(limit, self.task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "slot keeper task failed"),
            Err(_) => {
                abort.abort();
                tracing::warn!(?limit, "the store did not confirm the release in time; the claim expires by itself");
            }
        }
    }
}

/// Why the start failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Keeper(#[from] KeeperError),
    #[error("gave up after {waited:?}: {last}")]
    Timeout { waited: Duration, last: String },
}

/// One request handed to the store task.
type Call = (u64, Request);

fn now(clock: &dyn Clock) -> Now {
    Now { wall_ms: clock.wall_ms(), boot: clock.boot_time() }
}

/// Runs `store` in a task of its own: each request gets at most `call_timeout`.
fn spawn_store<S: Store>(
    mut store: S,
    call_timeout: Duration,
) -> (mpsc::Sender<Call>, mpsc::Receiver<(u64, Reply)>, JoinHandle<()>) {
    let (call_tx, mut call_rx) = mpsc::channel::<Call>(1);
    let (reply_tx, reply_rx) = mpsc::channel(1);
    let task = tokio::spawn(async move {
        while let Some((id, request)) = call_rx.recv().await {
            let name = request.name();
            let reply = match tokio::time::timeout(call_timeout, store.call(request)).await {
                Ok(reply) => reply,
                Err(_) => Reply::Failed {
                    error: format!("{name}: no answer within {call_timeout:?}"),
                    outcome: Outcome::Unknown,
                },
            };
            if reply_tx.send((id, reply)).await.is_err() {
                break;
            }
        }
    });
    (call_tx, reply_rx, task)
}

/// The keeper with its store, before and after the start.
struct Driver {
    keeper: Keeper,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    calls: mpsc::Sender<Call>,
    replies: mpsc::Receiver<(u64, Reply)>,
    store_task: JoinHandle<()>,
    holding: watch::Sender<Holding>,
    /// The last failure, for the start's error line.
    last_error: Option<String>,
    in_flight: bool,
    /// Who else sees the keeper's events (the slot history), if anyone.
    observer: Option<Arc<dyn Observe>>,
    renew_failing: bool,
    write_failing: bool,
}

/// How the keeper's driver is run: the store's timeouts, and where its events go besides
/// the logs and metrics.
pub struct DriverConfig {
    /// The longest one store request may take.
    pub call_timeout: Duration,
    /// The longest the start may take.
    pub start_timeout: Duration,
    pub clock: Arc<dyn Clock>,
    pub metrics: Metrics,
    /// Who else sees the keeper's events (the slot history's recorder), if anyone.
    pub observer: Option<Arc<dyn Observe>>,
}

/// What sees the keeper's events besides the logs and metrics: the slot history. Called
/// before the holding an event comes with is published, so a claim is stamped no later than
/// the first ID minted under it; it must never wait.
pub trait Observe: Send + Sync {
    fn observe(&self, event: &Event);
}

/// Starts the keeper over `store` and waits until every wanted slot is granted, at most
/// `start_timeout`.
pub async fn start<S: Store>(store: S, config: KeeperConfig, driver: DriverConfig) -> Result<KeeperHandle, StartError> {
    let DriverConfig { call_timeout, start_timeout, clock, metrics, observer } = driver;
    let (calls, replies, store_task) = spawn_store(store, call_timeout);
    let keeper = Keeper::new(config);
    let (holding, holding_rx) = watch::channel(keeper.holding().clone());
    let mut driver = Driver {
        keeper,
        clock,
        metrics,
        calls,
        replies,
        store_task,
        holding,
        last_error: None,
        in_flight: false,
        observer,
        renew_failing: false,
        write_failing: false,
    };
    let extend_now = Arc::new(Notify::new());
    let (progress, progress_rx) = watch::channel(Progress::default());
    let started = tokio::time::timeout(start_timeout, async {
        while !driver.keeper.started() && driver.keeper.fatal().is_none() {
            driver.step().await;
        }
    })
    .await;
    if let Some(error) = driver.keeper.fatal().cloned() {
        driver.abandon().await;
        return Err(error.into());
    }
    if started.is_err() {
        let last = driver.last_error.clone().unwrap_or_else(|| "no answer from the store".into());
        driver.abandon().await;
        return Err(StartError::Timeout { waited: start_timeout, last });
    }
    let (finish, finish_rx) = oneshot::channel();
    let task = tokio::spawn(driver.run(extend_now.clone(), progress_rx, finish_rx));
    Ok(KeeperHandle { holding: holding_rx, extend_now, progress, finish, task })
}

impl Driver {
    /// After a failed start: release whatever was claimed, briefly, and stop the store.
    async fn abandon(mut self) {
        self.keeper.finish(Minted::Unknown);
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while !self.keeper.is_done() {
                self.step().await;
            }
        })
        .await;
        self.store_task.abort();
    }

    async fn run(
        mut self,
        extend_now: Arc<Notify>,
        mut progress: watch::Receiver<Progress>,
        mut finish: oneshot::Receiver<Minted>,
    ) {
        let mut finishing = false;
        while !self.keeper.is_done() {
            let sleep = tokio::time::sleep(self.send_due().await);
            tokio::select! {
                biased;
                minted = &mut finish, if !finishing => {
                    finishing = true;
                    // Dropped without a word: the server failed; what was minted is unknown.
                    self.keeper.finish(minted.unwrap_or(Minted::Unknown));
                }
                reply = self.replies.recv(), if self.in_flight => self.handle(reply),
                _ = extend_now.notified(), if !finishing => self.keeper.extend_now(),
                changed = progress.changed(), if !finishing => {
                    if changed.is_ok() {
                        let p = progress.borrow_and_update().clone();
                        if let Some(mint_ms) = p.mint_ms {
                            self.keeper.handle_progress(mint_ms, p.slots);
                        }
                    }
                }
                () = sleep => self.keeper.handle_timeout(now(&*self.clock)),
            }
        }
        self.flush();
        self.store_task.abort();
    }

    /// Runs until a reply or a timer, as the start needs.
    async fn step(&mut self) {
        let sleep = tokio::time::sleep(self.send_due().await);
        tokio::select! {
            reply = self.replies.recv(), if self.in_flight => self.handle(reply),
            () = sleep => self.keeper.handle_timeout(now(&*self.clock)),
        }
        self.flush();
    }

    /// Sends the request that is due, if any; how long until the keeper's next timer.
    async fn send_due(&mut self) -> Duration {
        self.flush();
        if !self.in_flight
            && let Some((id, request)) = self.keeper.poll_request(now(&*self.clock))
        {
            self.in_flight = true;
            if self.calls.send((id, request)).await.is_err() {
                // The store task is gone (it panicked): every request fails from now on.
                self.in_flight = false;
                let failed = Reply::Failed { error: "the store task ended".into(), outcome: Outcome::Unknown };
                self.keeper.handle_reply(now(&*self.clock), id, failed);
            }
        }
        self.flush();
        let at = self.keeper.poll_timeout(now(&*self.clock));
        // With nothing to wait for, look again now and then anyway.
        at.map_or(Duration::from_secs(1), |at| at.saturating_sub(self.clock.boot_time()))
    }

    fn handle(&mut self, reply: Option<(u64, Reply)>) {
        self.in_flight = false;
        if let Some((id, reply)) = reply {
            self.keeper.handle_reply(now(&*self.clock), id, reply);
        }
        self.flush();
    }

    /// Publishes the holding and records the events.
    fn flush(&mut self) {
        // Events first: the history stamps a claim before the minter can mint under it.
        while let Some(event) = self.keeper.poll_event() {
            self.record(event);
        }
        if let Some(holding) = self.keeper.poll_holding() {
            self.holding.send_replace(holding);
        }
        match &*self.holding.borrow() {
            Holding::Held(grant) => {
                let reserved = grant.slots.iter().map(|s| s.reserved_ms).min().unwrap_or(0);
                let headroom = (reserved - self.clock.wall_ms()) as f64 / 1000.0;
                self.metrics.reservation_headroom_seconds.set(headroom);
                self.metrics.slots_held.set(grant.slots.len() as i64);
                self.metrics.worker_id.set(grant.slots.first().map_or(-1, |s| s.worker_id.into()));
            }
            Holding::Unheld { .. } => {
                self.metrics.slots_held.set(0);
                self.metrics.worker_id.set(-1);
            }
        }
    }

    fn record(&mut self, event: Event) {
        if let Some(observer) = &self.observer {
            observer.observe(&event);
        }
        let m = &self.metrics;
        match event {
            Event::SessionOpened { session, ttl } => {
                tracing::debug!(session = format!("{session:x}"), ?ttl, "session opened")
            }
            Event::FleetClock { skew_ms, peers } => {
                m.fleet_clock_skew.set(skew_ms as f64 / 1000.0);
                tracing::debug!(skew_ms, peers, "clock compared with the fleet's");
            }
            Event::FleetClockBeyond { reason } => {
                tracing::error!(%reason, "minting stops until this clock agrees with the fleet's")
            }
            Event::FleetClockWithin => tracing::info!("the clock agrees with the fleet's again; minting goes on"),
            Event::SlotsListed { taken, slots } => {
                m.fleet_slots_in_use.set(taken as i64);
                m.fleet_slots.set(slots as i64);
            }
            Event::SlotTaken { slot, claim, floor_ms, reserved_ms, resumed, .. } => {
                m.lease_valid.set(1);
                tracing::info!(
                    worker_id = slot,
                    claim,
                    floor = floor_ms.map(rfc3339_ms),
                    reserved_until = %rfc3339_ms(reserved_ms),
                    resumed,
                    "slot taken"
                );
            }
            Event::SlotLost { slot, reason } => {
                m.lease_lost.inc();
                if reason == LossReason::SessionGone {
                    m.lease_valid.set(0);
                }
                let why = match reason {
                    LossReason::SessionGone => "the lease is gone on the store",
                    LossReason::NotOurs => "the slot's key is no longer this instance's",
                    LossReason::Corrupt => "its reservation is corrupt",
                };
                tracing::warn!(worker_id = slot, reason = why, "slot lost; claiming again");
            }
            Event::NoFreeSlot { slots } => {
                tracing::error!(slots, "every slot is taken; minting stays refused until one frees up")
            }
            Event::Renewed => {
                m.lease_renewals.with_label_values(&[RESULT_OK]).inc();
                m.lease_valid.set(1);
                if std::mem::take(&mut self.renew_failing) {
                    tracing::info!("lease renewals work again");
                }
            }
            Event::RenewFailed { error } => {
                m.lease_renewals.with_label_values(&[RESULT_FAILED]).inc();
                if !std::mem::replace(&mut self.renew_failing, true) {
                    tracing::warn!(%error, "lease renewal failed; retrying");
                }
                self.last_error = Some(error);
            }
            Event::DeadlinePassed => {
                m.lease_valid.set(0);
                tracing::warn!("lease deadline passed without a renewal; minting is fenced");
            }
            Event::ReservationsWritten { slots } => {
                let until_ms = slots.iter().map(|&(_, until)| until).max().unwrap_or(0);
                m.reservation_writes.with_label_values(&[RESULT_OK]).inc();
                if std::mem::take(&mut self.write_failing) {
                    tracing::info!(?slots, "reservation writes work again");
                }
                tracing::debug!(?slots, reserved_until = %rfc3339_ms(until_ms), "reservation extended");
            }
            Event::ReservationWriteFailed { error } => {
                m.reservation_writes.with_label_values(&[RESULT_FAILED]).inc();
                if !std::mem::replace(&mut self.write_failing, true) {
                    tracing::error!(%error, "reservation write failed; minting stops when the current reservation runs out");
                }
                self.last_error = Some(error);
            }
            Event::RequestFailed { request, error } => {
                tracing::debug!(request, %error, "store request failed; retrying");
                self.last_error = Some(error);
            }
            Event::Corrupt { slot, location, reason } => {
                tracing::error!(worker_id = slot, %location, %reason, "stored reservation is corrupt; never overwritten")
            }
            Event::StoreWentBack { detail, fence_until_ms } => {
                m.store_went_back.inc();
                tracing::error!(
                    %detail,
                    fence_until = %rfc3339_ms(fence_until_ms),
                    "etcd went back in time (a restored snapshot?): what was written since is lost; every claim's floor is fenced until past anything minted under the lost state, and this instance's own reservations are written again"
                );
            }
            Event::SlotFenced { slot, until_ms, reason } => {
                m.slots_fenced.inc();
                tracing::warn!(
                    worker_id = slot,
                    until = %rfc3339_ms(until_ms),
                    %reason,
                    "the floor of this claim is fenced: nothing is minted on it before then"
                );
            }
            Event::FenceSet { until_ms } => {
                tracing::warn!(until = %rfc3339_ms(until_ms), "fence set in etcd for the rest of the fleet")
            }
            Event::FinalSaved { slots } => {
                let until_ms = slots.iter().map(|&(_, until)| until).max().unwrap_or(0);
                tracing::info!(?slots, reserved_until = %rfc3339_ms(until_ms), "final reservation saved")
            }
            Event::FinalKept { why } => {
                tracing::warn!(why, "the saved reservation stays as it is; it covers every ID minted")
            }
            Event::Closed => {
                m.lease_valid.set(0);
                tracing::info!("slot released");
            }
        }
    }
}
