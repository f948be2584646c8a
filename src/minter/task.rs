//! The minter task: the one tokio task that owns the [`MinterCore`], and the handle callers
//! use to reach it.
//!
//! Calls send a request over a bounded mpsc channel and wait on a oneshot for the reply. The
//! task takes in every request waiting on its channel at each wake-up and passes them to the
//! core at once, so load batches itself and the hot path takes no lock. It wakes when a
//! request arrives, when the keeper's holding changes, or when the core asked to look again;
//! a request arriving during a precise wait for the next tick is passed to the core at once
//! too (the core may serve it from the tick's reserve for small asks).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::core::{Ask, ConnectionKey, Ids, MinterConfig, MinterCore, Next, Pending, Reading, Responder};
use super::error::{MintError, Readiness};
use crate::clock::Clock;
use crate::grant::{Holding, Minted};
use crate::keeper::driver::Progress;
use crate::layout::LayoutError;
use crate::metrics::Metrics;

type Reply = oneshot::Sender<Result<Ids, MintError>>;

impl Responder for Reply {
    fn is_closed(&self) -> bool {
        oneshot::Sender::is_closed(self)
    }

    fn send(self, result: Result<Ids, MintError>) -> bool {
        oneshot::Sender::send(self, result).is_ok()
    }
}

/// A cheap, cloneable way to ask the minter for IDs.
#[derive(Clone)]
pub struct MintHandle {
    tx: mpsc::Sender<Pending<Reply>>,
    clock: Arc<dyn Clock>,
    max_wait: Duration,
    /// IDs asked for and not yet answered, server-wide, and the most allowed: every queued
    /// batch holds room for its full count.
    outstanding: Arc<AtomicUsize>,
    max_outstanding: usize,
}

/// Gives back a request's share of the outstanding IDs when it is answered or abandoned.
struct Outstanding<'a> {
    count: &'a AtomicUsize,
    ids: usize,
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(self.ids, Ordering::Relaxed);
    }
}

impl MintHandle {
    /// One ID for a caller on `connection` (whose requests share in turn with other
    /// connections'), waiting at most `timeout` (capped by the configured maximum wait).
    pub async fn next_id(&self, connection: ConnectionKey, timeout: Option<Duration>) -> Result<u64, MintError> {
        match self.ask(Ask::One, connection, timeout).await? {
            Ids::One(id) => Ok(id),
            Ids::Many(mut ids) => ids.pop().ok_or(MintError::ShuttingDown),
        }
    }

    /// `count` strictly increasing IDs, for a caller on `connection`.
    pub async fn batch(
        &self,
        count: usize,
        connection: ConnectionKey,
        timeout: Option<Duration>,
    ) -> Result<Vec<u64>, MintError> {
        match self.ask(Ask::Many(count), connection, timeout).await? {
            Ids::Many(ids) => Ok(ids),
            Ids::One(id) => Ok(vec![id]),
        }
    }

    async fn ask(&self, ask: Ask, connection: ConnectionKey, timeout: Option<Duration>) -> Result<Ids, MintError> {
        let ids = match ask {
            Ask::One => 1,
            Ask::Many(n) => n,
        };
        let before = self.outstanding.fetch_add(ids, Ordering::Relaxed);
        let _held = Outstanding { count: &self.outstanding, ids };
        if before + ids > self.max_outstanding {
            return Err(MintError::Overloaded { outstanding: before, limit: self.max_outstanding });
        }
        let wait = timeout.map_or(self.max_wait, |t| t.min(self.max_wait));
        let asked = self.clock.monotonic();
        let (reply, rx) = oneshot::channel();
        let request = Pending::new(ask, connection, asked, asked + wait, reply);
        self.tx.send(request).await.map_err(|_| MintError::ShuttingDown)?;
        rx.await.map_err(|_| MintError::ShuttingDown)?
    }
}

/// Waits shorter than this are slept precisely on a blocking thread rather than on tokio's
/// millisecond timer.
const PRECISE: Duration = Duration::from_micros(2_500);

/// The last stretch of a precise wait, spent yielding rather than sleeping, since waking a
/// sleeping thread takes tens of microseconds.
const SPIN: Duration = Duration::from_micros(150);

/// How far the minting time moves before the keeper hears of it again.
pub(crate) const PROGRESS_EVERY_MS: i64 = 100;

/// What the minter task is connected to.
pub struct MinterLinks {
    pub holding: watch::Receiver<Holding>,
    pub extend_now: Arc<Notify>,
    pub progress: watch::Sender<Progress>,
}

/// Starts the minter task. It ends when every [`MintHandle`] is dropped and the requests
/// already sent are answered, or at once when `stop` is cancelled (answering what is still
/// pending with [`MintError::ShuttingDown`]). It returns what it minted.
#[allow(clippy::type_complexity)]
pub fn spawn(
    config: MinterConfig,
    max_outstanding: usize,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    links: MinterLinks,
    stop: CancellationToken,
) -> Result<(MintHandle, watch::Receiver<Readiness>, tokio::task::JoinHandle<Minted>), LayoutError> {
    let (tx, rx) = mpsc::channel(8192);
    let core = MinterCore::new(config.clone(), metrics)?;
    let initial = Readiness::NotServing(MintError::NoWorker("starting".into()));
    let (readiness_tx, readiness) = watch::channel(initial);
    let handle = MintHandle {
        tx,
        clock: clock.clone(),
        max_wait: config.max_wait,
        outstanding: Arc::new(AtomicUsize::new(0)),
        max_outstanding,
    };
    let minter = Minter { core, clock, rx, links, readiness: readiness_tx, progress_sent: None, epoch_seen: None };
    Ok((handle, readiness, tokio::spawn(minter.run(stop))))
}

struct Minter {
    core: MinterCore<Reply>,
    clock: Arc<dyn Clock>,
    rx: mpsc::Receiver<Pending<Reply>>,
    links: MinterLinks,
    readiness: watch::Sender<Readiness>,
    /// The minting time last reported to the keeper.
    progress_sent: Option<i64>,
    /// The epoch of the last holding passed to the core.
    epoch_seen: Option<u64>,
}

impl Minter {
    fn reading(&self) -> Reading {
        Reading { wall_us: self.clock.wall_us(), boot: self.clock.monotonic(), awake: self.clock.awake() }
    }

    fn pass(&mut self) -> Next {
        let now = self.reading();
        let holding = self.links.holding.borrow_and_update().clone();
        let epoch = holding.grant().map(|g| g.epoch);
        if epoch != self.epoch_seen {
            // The claims change: say how far each slot got before the generator takes the new
            // windows, so the history marks where one claim of a slot ends and the next one
            // of this process begins (a resumed claim) at the last ID minted, not 100 ms off.
            self.epoch_seen = epoch;
            self.report_progress(true);
        }
        let next = self.core.pass(now, &holding);
        if let Some(readiness) = self.core.poll_readiness() {
            self.readiness.send_replace(readiness);
        }
        if self.core.take_extension_wish() {
            self.links.extend_now.notify_one();
        }
        self.report_progress(false);
        next
    }

    /// Tells the keeper how far minting got: every [`PROGRESS_EVERY_MS`] of minting time, or
    /// now when `now`.
    fn report_progress(&mut self, now: bool) {
        if let Some(mint_ms) = self.core.mint_ms()
            && (now || self.progress_sent.is_none_or(|sent| mint_ms - sent >= PROGRESS_EVERY_MS))
        {
            self.progress_sent = Some(mint_ms);
            if let Minted::UpTo(slots) = self.core.minted() {
                self.links.progress.send_replace(Progress { mint_ms: Some(mint_ms), slots });
            }
        }
    }

    async fn run(mut self, stop: CancellationToken) -> Minted {
        let mut open = true;
        let mut holding_open = true;
        // The blocking thread sleeping towards an instant, kept while requests arrive in the
        // meantime: each is served at once when it can be (a small ask beside bulk callers,
        // from the reserve), and the wait goes on with the same thread.
        let mut sleeper: Option<(Duration, tokio::task::JoinHandle<()>)> = None;
        loop {
            if open {
                loop {
                    match self.rx.try_recv() {
                        Ok(request) => self.core.push(request),
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => {
                            open = false;
                            break;
                        }
                    }
                }
            }
            if !open && !self.core.has_pending() {
                break;
            }
            let wake = match self.pass() {
                Next::At(at) if self.core.has_pending() && at <= self.clock.monotonic() + PRECISE => {
                    // Less than a couple of timer granules away (the sequence ran out, or the
                    // clock is a hair behind): tokio's 1 ms timer would overshoot the tick
                    // boundary. Sleep most of the wait on a blocking thread (spinning all of
                    // it took more than a core at full load), and yield through the last
                    // stretch, to mint the moment the tick begins.
                    let wait = at.saturating_sub(self.clock.monotonic());
                    if wait > SPIN {
                        if sleeper.as_ref().is_none_or(|(until, _)| *until != at) {
                            let sleep = wait - SPIN;
                            sleeper = Some((at, tokio::task::spawn_blocking(move || std::thread::sleep(sleep))));
                        }
                        let (_, thread) = sleeper.as_mut().expect("just set");
                        tokio::select! {
                            _ = thread => sleeper = None,
                            request = self.rx.recv(), if open => match request {
                                Some(request) => self.core.push(request),
                                None => open = false,
                            },
                        }
                    } else {
                        tokio::task::yield_now().await;
                    }
                    continue;
                }
                Next::At(at) => Some(at.saturating_sub(self.clock.monotonic())),
                Next::Idle => None,
            };
            tokio::select! {
                request = self.rx.recv(), if open => match request {
                    Some(request) => self.core.push(request),
                    None => open = false,
                },
                changed = self.links.holding.changed(), if holding_open => {
                    if changed.is_err() {
                        holding_open = false;
                    }
                }
                _ = tokio::time::sleep(wake.unwrap_or_default()), if wake.is_some() => {}
                () = stop.cancelled() => {
                    self.core.refuse_all(MintError::ShuttingDown);
                    break;
                }
            }
        }
        if let Some(readiness) = self.core.poll_readiness() {
            self.readiness.send_replace(readiness);
        }
        self.core.minted()
    }
}
