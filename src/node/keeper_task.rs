//! Runs the keeper state machine under tokio: feeds it the clock, the store's replies, its
//! timers and the minter's reports (by the rules of [`super::link`]), publishes its holding
//! to the minter, and hands its events to the history and to [`super::report`].
//!
//! The store runs in a task of its own, one request at a time, each bounded by a call
//! timeout (a call that does not answer in time is a failure of unknown outcome). The start
//! ([`start_keeper`]) returns once every wanted slot is granted, or with the reason it cannot be.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::link::KeeperSide;
use super::report::KeeperReport;
use crate::clock::Clock;
use crate::grant::{Holding, Minted, Progress};
use crate::keeper::{Keeper, KeeperConfig, KeeperError, Now, Observe};
use crate::metrics::Metrics;
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
    side: KeeperSide,
    clock: Arc<dyn Clock>,
    report: KeeperReport,
    calls: mpsc::Sender<Call>,
    replies: mpsc::Receiver<(u64, Reply)>,
    store_task: JoinHandle<()>,
    holding: watch::Sender<Holding>,
    in_flight: bool,
    /// Who else sees the keeper's events (the slot history), if anyone.
    observer: Option<Arc<dyn Observe>>,
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

/// Starts the keeper over `store` and waits until every wanted slot is granted, at most
/// `start_timeout`.
pub async fn start_keeper<S: Store>(
    store: S,
    config: KeeperConfig,
    driver: DriverConfig,
) -> Result<KeeperHandle, StartError> {
    let DriverConfig { call_timeout, start_timeout, clock, metrics, observer } = driver;
    let (calls, replies, store_task) = spawn_store(store, call_timeout);
    let keeper = Keeper::new(config);
    let (holding, holding_rx) = watch::channel(keeper.holding().clone());
    let mut driver = Driver {
        side: KeeperSide::new(keeper),
        clock,
        report: KeeperReport::new(metrics),
        calls,
        replies,
        store_task,
        holding,
        in_flight: false,
        observer,
    };
    let extend_now = Arc::new(Notify::new());
    let (progress, progress_rx) = watch::channel(Progress::default());
    let started = tokio::time::timeout(start_timeout, async {
        while !driver.side.keeper().started() && driver.side.keeper().fatal().is_none() {
            driver.step().await;
        }
    })
    .await;
    if let Some(error) = driver.side.keeper().fatal().cloned() {
        driver.abandon().await;
        return Err(error.into());
    }
    if started.is_err() {
        let last = driver.report.last_error.clone().unwrap_or_else(|| "no answer from the store".into());
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
        self.side.finish(Minted::Unknown);
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while !self.side.keeper().is_done() {
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
        while !self.side.keeper().is_done() {
            let sleep = tokio::time::sleep(self.send_due().await);
            let finishing = self.side.finishing();
            tokio::select! {
                biased;
                // Dropped without a word: the server failed; what was minted is unknown.
                minted = &mut finish, if !finishing => self.side.finish(minted.unwrap_or(Minted::Unknown)),
                reply = self.replies.recv(), if self.in_flight => self.handle(reply),
                _ = extend_now.notified(), if !finishing => self.side.extend_now(),
                changed = progress.changed(), if !finishing => {
                    if changed.is_ok() {
                        let p = progress.borrow_and_update().clone();
                        self.side.progress(&p);
                    }
                }
                () = sleep => self.side.keeper_mut().handle_timeout(now(&*self.clock)),
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
            () = sleep => self.side.keeper_mut().handle_timeout(now(&*self.clock)),
        }
        self.flush();
    }

    /// Sends the request that is due, if any; how long until the keeper's next timer.
    async fn send_due(&mut self) -> Duration {
        self.flush();
        if let Some((id, request)) = self.side.poll_request(now(&*self.clock), self.in_flight) {
            self.in_flight = true;
            if self.calls.send((id, request)).await.is_err() {
                // The store task is gone (it panicked): every request fails from now on.
                self.in_flight = false;
                let failed = Reply::Failed { error: "the store task ended".into(), outcome: Outcome::Unknown };
                self.side.keeper_mut().handle_reply(now(&*self.clock), id, failed);
            }
        }
        self.flush();
        let at = self.side.keeper().poll_timeout(now(&*self.clock));
        // With nothing to wait for, look again now and then anyway.
        at.map_or(Duration::from_secs(1), |at| at.saturating_sub(self.clock.boot_time()))
    }

    fn handle(&mut self, reply: Option<(u64, Reply)>) {
        self.in_flight = false;
        if let Some((id, reply)) = reply {
            self.side.keeper_mut().handle_reply(now(&*self.clock), id, reply);
        }
        self.flush();
    }

    /// Publishes the holding and records the events.
    fn flush(&mut self) {
        let (observer, report) = (&self.observer, &mut self.report);
        let changed = self.side.drain(|event| {
            if let Some(observer) = observer {
                observer.observe(&event);
            }
            report.record(event);
        });
        if let Some(holding) = changed {
            self.holding.send_replace(holding);
        }
        self.report.holding(&self.holding.borrow(), self.clock.wall_ms());
    }
}
