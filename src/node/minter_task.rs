//! The minter task: the one tokio task that owns the [`MinterCore`], and the handle callers
//! use to reach it. It tells the keeper of its progress by the rules of [`super::link`], and
//! hands the core's events to [`super::report`].
//!
//! Calls send a request over a bounded mpsc channel and wait on a oneshot for the reply. The
//! task takes in every request waiting on its channel at each wake-up and passes them to the
//! core at once, so load batches itself and the hot path takes no lock. It wakes when a
//! request arrives, when the keeper's holding changes, or when the core asked to look again;
//! a request arriving during a precise wait for the next tick is passed to the core at once
//! too (the core may serve it from the tick's reserve for small asks). A precise wait sleeps
//! on one blocking thread, kept for every request that arrives during it, and ends early for a
//! stop or a change of the holding as any other wait does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::link::MinterSide;
use super::report::MinterReport;
use crate::clock::Clock;
use crate::grant::{Holding, Minted, Progress};
use crate::layout::LayoutError;
use crate::metrics::Metrics;
use crate::minter::{
    Ask, ConnectionKey, Ids, MintError, MinterConfig, MinterCore, Next, Pending, Readiness, Reading, Responder, Share,
};

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
    /// Blocking sleepers the minter task started for precise waits, for tests to read.
    #[cfg_attr(not(test), allow(dead_code))]
    sleepers: Arc<AtomicU64>,
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
    /// One ID for a caller on `connection` of the tenant of `share` (whose requests share in
    /// turn with other tenants' by weight, and with the tenant's other connections), waiting
    /// at most `timeout` (capped by the configured maximum wait).
    pub async fn next_id(
        &self,
        connection: ConnectionKey,
        share: Share,
        timeout: Option<Duration>,
    ) -> Result<u64, MintError> {
        match self.ask(Ask::One, connection, share, timeout).await? {
            Ids::One(id) => Ok(id),
            Ids::Many(mut ids) => ids.pop().ok_or(MintError::ShuttingDown),
        }
    }

    /// `count` strictly increasing IDs, for a caller on `connection` of the tenant of `share`.
    pub async fn batch(
        &self,
        count: usize,
        connection: ConnectionKey,
        share: Share,
        timeout: Option<Duration>,
    ) -> Result<Vec<u64>, MintError> {
        match self.ask(Ask::Many(count), connection, share, timeout).await? {
            Ids::Many(ids) => Ok(ids),
            Ids::One(id) => Ok(vec![id]),
        }
    }

    /// How many blocking sleepers the minter task started for precise tick waits.
    #[cfg(test)]
    pub(crate) fn sleepers_started(&self) -> u64 {
        self.sleepers.load(Ordering::Relaxed)
    }

    async fn ask(
        &self,
        ask: Ask,
        connection: ConnectionKey,
        share: Share,
        timeout: Option<Duration>,
    ) -> Result<Ids, MintError> {
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
        let asked = self.clock.boot_time();
        let (reply, rx) = oneshot::channel();
        let request = Pending::new(ask, connection, asked, asked + wait, reply).with_share(share);
        self.hand_over(request, wait).await?;
        rx.await.map_err(|_| MintError::ShuttingDown)?
    }

    /// Puts `request` on the minter's channel, waiting for room at most `wait`: a caller whose
    /// deadline comes while the channel is full is refused, and the minter never sees it.
    async fn hand_over(&self, request: Pending<Reply>, wait: Duration) -> Result<(), MintError> {
        let request = match self.tx.try_send(request) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(MintError::ShuttingDown),
            Err(mpsc::error::TrySendError::Full(request)) => request,
        };
        match tokio::time::timeout(wait, self.tx.send(request)).await {
            Ok(sent) => sent.map_err(|_| MintError::ShuttingDown),
            Err(_) => Err(MintError::Deadline(format!("the minter's queue stayed full ({QUEUE} requests)"))),
        }
    }
}

/// The requests the channel to the minter task holds; beyond them, a caller waits to hand its
/// request over, within its deadline.
pub const QUEUE: usize = 8192;

/// Waits shorter than this are slept precisely on a blocking thread rather than on tokio's
/// millisecond timer.
const PRECISE: Duration = Duration::from_micros(2_500);

/// The last stretch of a precise wait, spent yielding rather than sleeping, since waking a
/// sleeping thread takes tens of microseconds.
const SPIN: Duration = Duration::from_micros(150);

/// What the minter task is connected to.
pub struct MinterLinks {
    pub holding: watch::Receiver<Holding>,
    pub extend_now: Arc<Notify>,
    pub progress: watch::Sender<Progress>,
    /// Why the store refuses writes, while it says so (an etcd alarm, explained): given with
    /// the refusals it causes.
    pub store_trouble: watch::Receiver<Option<String>>,
}

/// Starts the minter task. It ends when every [`MintHandle`] is dropped and the requests
/// already sent are answered, or at once when `stop` is cancelled (answering what is still
/// pending with [`MintError::ShuttingDown`]). It returns what it minted.
#[allow(clippy::type_complexity)]
pub fn spawn_minter(
    config: MinterConfig,
    max_outstanding: usize,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    links: MinterLinks,
    stop: CancellationToken,
) -> Result<(MintHandle, watch::Receiver<Readiness>, tokio::task::JoinHandle<Minted>), LayoutError> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let report = MinterReport::new(metrics, &config);
    let mut core = MinterCore::new(config.clone(), report.tally())?;
    core.set_store_trouble(links.store_trouble.borrow().clone());
    let initial = Readiness::NotServing(MintError::NoWorker("starting".into()));
    let (readiness_tx, readiness) = watch::channel(initial);
    let handle = MintHandle {
        tx,
        clock: clock.clone(),
        max_wait: config.max_wait,
        outstanding: Arc::new(AtomicUsize::new(0)),
        max_outstanding,
        sleepers: Arc::default(),
    };
    let sleepers = handle.sleepers.clone();
    let minter = Minter {
        core,
        clock,
        rx,
        links,
        readiness: readiness_tx,
        side: MinterSide::default(),
        report,
        sleepers,
        requests_open: true,
        holding_open: true,
    };
    Ok((handle, readiness, tokio::spawn(minter.run(stop))))
}

struct Minter {
    core: MinterCore<Reply>,
    clock: Arc<dyn Clock>,
    rx: mpsc::Receiver<Pending<Reply>>,
    links: MinterLinks,
    readiness: watch::Sender<Readiness>,
    /// When the keeper hears of the progress.
    side: MinterSide,
    report: MinterReport,
    /// Blocking sleepers started (see [`MintHandle::sleepers_started`]).
    sleepers: Arc<AtomicU64>,
    /// Whether a [`MintHandle`] is left to send requests.
    requests_open: bool,
    /// Whether the keeper is left to change the holding.
    holding_open: bool,
}

impl Minter {
    fn reading(&self) -> Reading {
        Reading { wall_us: self.clock.wall_us(), boot: self.clock.boot_time(), awake: self.clock.awake() }
    }

    fn pass(&mut self) -> Next {
        let now = self.reading();
        let holding = self.links.holding.borrow_and_update().clone();
        if self.links.store_trouble.has_changed().unwrap_or(false) {
            let why = self.links.store_trouble.borrow_and_update().clone();
            self.core.set_store_trouble(why);
        }
        if let Some(progress) = self.side.before_pass(&self.core, &holding) {
            self.links.progress.send_replace(progress);
        }
        let (next, to_keeper) = self.side.pass(&mut self.core, now, &holding);
        self.report.after_pass(&mut self.core);
        if let Some(readiness) = self.core.poll_readiness() {
            self.readiness.send_replace(readiness);
        }
        if to_keeper.extend_now {
            self.links.extend_now.notify_one();
        }
        if let Some(progress) = to_keeper.progress {
            self.links.progress.send_replace(progress);
        }
        next
    }

    async fn run(mut self, stop: CancellationToken) -> Minted {
        let mut sleeper: Option<Sleeper> = None;
        loop {
            self.take_waiting();
            if !self.requests_open && !self.core.has_pending() {
                break;
            }
            // Looked at on every turn, so that no run of short waits keeps a stop out.
            if stop.is_cancelled() {
                self.core.refuse_all(MintError::ShuttingDown);
                break;
            }
            let woken = match self.pass() {
                Next::At(at) if self.core.has_pending() && at <= self.clock.boot_time() + PRECISE => {
                    // Less than a couple of timer granules away (the sequence ran out, or the
                    // clock is a hair behind): tokio's 1 ms timer would overshoot the tick
                    // boundary. Sleep most of the wait on a blocking thread (spinning all of
                    // it took more than a core at full load), and yield through the last
                    // stretch, to mint the moment the tick begins.
                    let wait = at.saturating_sub(self.clock.boot_time());
                    if wait <= SPIN {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    let thread = self.sleeper_towards(&mut sleeper, at, wait);
                    tokio::select! {
                        _ = thread => {
                            sleeper = None;
                            Woken::Timer
                        }
                        request = self.rx.recv(), if self.requests_open => Woken::Request(request),
                        changed = self.links.holding.changed(), if self.holding_open => Woken::Holding(changed.is_ok()),
                        () = stop.cancelled() => Woken::Stop,
                    }
                }
                Next::At(at) => self.wait(Some(at), &stop).await,
                Next::Idle => self.wait(None, &stop).await,
            };
            match woken {
                Woken::Request(Some(request)) => self.core.push(request),
                Woken::Request(None) => self.requests_open = false,
                Woken::Holding(open) => self.holding_open = open,
                Woken::Timer => {}
                Woken::Stop => {
                    self.core.refuse_all(MintError::ShuttingDown);
                    break;
                }
            }
        }
        self.report.after_pass(&mut self.core);
        if let Some(readiness) = self.core.poll_readiness() {
            self.readiness.send_replace(readiness);
        }
        self.core.minted()
    }

    /// Passes every request waiting on the channel to the core.
    fn take_waiting(&mut self) {
        while self.requests_open {
            match self.rx.try_recv() {
                Ok(request) => self.core.push(request),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => self.requests_open = false,
            }
        }
    }

    /// The blocking thread that sleeps until `wait - SPIN` from now, towards `at`: the one
    /// under way when its instant is within [`SAME_INSTANT`] of `at`, else a new one.
    ///
    /// Each pass computes the instant afresh from its own clock reading, so between the
    /// requests that arrive during one wait it moves by nanoseconds: one sleeper serves them
    /// all, and a new one starts only when the instant really moved (a new tick). A sleeper
    /// left behind ends on its own within [`PRECISE`].
    fn sleeper_towards<'s>(
        &self,
        sleeper: &'s mut Option<Sleeper>,
        at: Duration,
        wait: Duration,
    ) -> &'s mut tokio::task::JoinHandle<()> {
        if sleeper.as_ref().is_none_or(|s| s.until.abs_diff(at) > SAME_INSTANT) {
            self.sleepers.fetch_add(1, Ordering::Relaxed);
            let sleep = wait - SPIN;
            let thread = tokio::task::spawn_blocking(move || std::thread::sleep(sleep));
            *sleeper = Some(Sleeper { until: at, thread });
        }
        &mut sleeper.as_mut().expect("just set").thread
    }

    /// Waits on tokio's timer until `at` (or without end), a request, a change of the
    /// holding, or the stop.
    async fn wait(&mut self, at: Option<Duration>, stop: &CancellationToken) -> Woken {
        let sleep = at.map(|at| at.saturating_sub(self.clock.boot_time()));
        tokio::select! {
            request = self.rx.recv(), if self.requests_open => Woken::Request(request),
            changed = self.links.holding.changed(), if self.holding_open => Woken::Holding(changed.is_ok()),
            _ = tokio::time::sleep(sleep.unwrap_or_default()), if sleep.is_some() => Woken::Timer,
            () = stop.cancelled() => Woken::Stop,
        }
    }
}

/// A blocking thread sleeping towards a boot-time instant, for a precise wait.
struct Sleeper {
    until: Duration,
    thread: tokio::task::JoinHandle<()>,
}

/// How far a precise wait's instant may move with the sleeper under way still serving it.
const SAME_INSTANT: Duration = Duration::from_micros(50);

/// What woke the minter task.
enum Woken {
    /// A request, or `None`: every handle is gone.
    Request(Option<Pending<Reply>>),
    /// The holding changed; `false`: its sender is gone.
    Holding(bool),
    /// The instant the core asked for.
    Timer,
    Stop,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::grant::{Grant, SlotGrant};
    use crate::layout::Layout;

    /// A minter on the system clock holding slot 7 for the whole test, and the token that
    /// stops it.
    fn start() -> (MintHandle, tokio::task::JoinHandle<Minted>, CancellationToken) {
        let clock = Arc::new(SystemClock::new());
        let holding = Holding::Held(Grant {
            slots: vec![SlotGrant {
                slot: 7,
                claim: 1,
                floor_ms: None,
                reserved_ms: clock.wall_ms() + 3_600_000,
                resumes: false,
                fenced: None,
            }],
            generation: 1,
            deadline: None,
            session: None,
            on_demand: false,
        });
        // Senders dropped here: the minter sees a holding that never changes.
        let links = MinterLinks {
            holding: watch::channel(holding).1,
            extend_now: Arc::new(Notify::new()),
            progress: watch::channel(Progress::default()).0,
            store_trouble: watch::channel(None).1,
        };
        let config = MinterConfig {
            layout: Layout::default_snowmint(),
            max_clock_back: Duration::from_millis(5),
            max_clock_drift: Duration::ZERO,
            max_wait: Duration::from_secs(60),
            fair_quantum: crate::minter::FAIR_QUANTUM,
        };
        let stop = CancellationToken::new();
        let (handle, _, task) = spawn_minter(config, usize::MAX, clock, Metrics::new(), links, stop.clone()).unwrap();
        (handle, task, stop)
    }

    /// `count` batches of 65,536 IDs, each from its own connection, all in flight.
    fn batches(handle: &MintHandle, count: u64) -> Vec<tokio::task::JoinHandle<Result<Vec<u64>, MintError>>> {
        (0..count)
            .map(|connection| {
                let handle = handle.clone();
                tokio::spawn(async move { handle.batch(65_536, ConnectionKey(connection), Share::NONE, None).await })
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stop_ends_the_task_during_tick_waits_and_answers_what_waits() {
        let (handle, task, stop) = start();
        // 64 batches of 65,536 are a second of minting, shared round robin: every one of
        // them still waits when the stop comes, with the minter waiting for each next tick.
        let waiting = batches(&handle, 64);
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("the task ends").unwrap();
        let mut shut = 0;
        for batch in waiting {
            let answer = tokio::time::timeout(Duration::from_secs(5), batch).await.expect("answered").unwrap();
            shut += usize::from(answer == Err(MintError::ShuttingDown));
        }
        assert_eq!(shut, 64, "only {shut} of the 64 batches waiting at the stop were answered ShuttingDown");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn single_ids_asked_during_tick_waits_start_no_sleeper_of_their_own() {
        let (handle, task, stop) = start();
        // Batches keep the minter waiting for tick after tick; NextIds come one after the
        // other meanwhile, each served from the tick's reserve.
        let started = std::time::Instant::now();
        let waiting = batches(&handle, 4);
        let mut singles = 0u64;
        while !waiting.iter().all(|b| b.is_finished()) && started.elapsed() < Duration::from_secs(5) {
            handle.next_id(ConnectionKey(99), Share::NONE, None).await.unwrap();
            singles += 1;
        }
        for batch in waiting {
            assert_eq!(batch.await.unwrap().unwrap().len(), 65_536);
        }
        let ticks = started.elapsed().as_millis() as u64;
        let sleepers = handle.sleepers_started();
        assert!(
            sleepers <= 2 * ticks + 10,
            "{sleepers} sleepers for {singles} NextIds over {ticks} ms: one per request rather than per tick"
        );
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("the task ends").unwrap();
    }
}
