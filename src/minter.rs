//! The minter: the one task that owns the generator.
//!
//! Calls send a [`Request`] over a bounded mpsc channel and wait on a oneshot for the reply.
//! The task takes in every request waiting on its channel at each wake-up and serves them in
//! order, so load batches itself and the hot path takes no lock. Before minting it reads the
//! wall clock once per pass and checks the worker state the source publishes: the lease
//! deadline against the monotonic clock at that moment, and the reservation. What the
//! generator cannot do now becomes a bounded wait (an exhausted sequence, a small step back)
//! or an immediate, retriable refusal ([`MintError`]). No request waits past its deadline.
//!
//! The minter also owns readiness: it publishes [`Readiness`] whenever minting would start or
//! stop refusing, and wakes by itself to notice a clock that came back or a lease that ran out.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::generator::{Blocked, Generator, RefuseReason, WaitReason};
use crate::layout::{Layout, rfc3339_ms};
use crate::metrics::Metrics;
use crate::worker::{Grant, WorkerState};

/// Why IDs could not be minted. Every variant is retriable: another instance, or this one a
/// little later, can mint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MintError {
    #[error("the wall clock is {behind_ms} ms behind the last time used; minting resumes at {resume_at}")]
    ClockBehind { behind_ms: u64, resume_at: String },
    #[error(
        "the wall clock has not passed the reservation a previous holder of worker {worker_id} saved ({floor}); {behind_ms} ms to go"
    )]
    BelowFloor { worker_id: u32, floor: String, behind_ms: u64 },
    #[error("no worker ID is held: {0}")]
    NoWorker(String),
    #[error("the lease on worker {0} may have expired; minting is fenced until it is renewed or re-claimed")]
    LeaseExpired(u32),
    #[error("the reservation for worker {worker_id} ends at {reserved_until} and has not been extended")]
    ReservationBehind { worker_id: u32, reserved_until: String },
    #[error("the wall clock ({now}) is before the layout's epoch")]
    BeforeEpoch { now: String },
    #[error("the layout ran out at {expiry}")]
    LayoutExhausted { expiry: String },
    #[error("could not mint before the call's deadline: {0}")]
    Deadline(String),
    #[error("the server is shutting down")]
    ShuttingDown,
}

/// Whether minting would succeed now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Serving,
    NotServing(MintError),
}

/// What a request asks for.
#[derive(Debug)]
enum Ask {
    One,
    Many(usize),
}

/// What a request gets back.
#[derive(Debug)]
enum Minted {
    One(u64),
    Many(Vec<u64>),
}

/// One caller waiting for IDs.
#[derive(Debug)]
pub struct Request {
    ask: Ask,
    deadline: Instant,
    /// A batch's IDs so far, while it spans several ticks.
    filled: Vec<u64>,
    reply: oneshot::Sender<Result<Minted, MintError>>,
}

/// Settings of the minter.
#[derive(Debug, Clone)]
pub struct MinterConfig {
    pub layout: Layout,
    /// Steps back of the wall clock up to this are waited out; larger ones are refused.
    pub max_clock_back: Duration,
    /// The longest any call waits for IDs, whatever its own deadline.
    pub max_wait: Duration,
    /// Forward jumps of the wall clock above this are logged and counted.
    pub forward_jump_threshold: Duration,
}

/// A cheap, cloneable way to ask the minter for IDs.
#[derive(Debug, Clone)]
pub struct MintHandle {
    tx: mpsc::Sender<Request>,
    max_wait: Duration,
}

impl MintHandle {
    /// One ID, waiting at most until `deadline` (capped by the configured maximum wait).
    pub async fn next_id(&self, deadline: Option<Instant>) -> Result<u64, MintError> {
        match self.ask(Ask::One, deadline).await? {
            Minted::One(id) => Ok(id),
            Minted::Many(_) => unreachable!("a single ask gets a single ID"),
        }
    }

    /// `count` strictly increasing IDs.
    pub async fn batch(&self, count: usize, deadline: Option<Instant>) -> Result<Vec<u64>, MintError> {
        match self.ask(Ask::Many(count), deadline).await? {
            Minted::Many(ids) => Ok(ids),
            Minted::One(_) => unreachable!("a batch ask gets a batch"),
        }
    }

    async fn ask(&self, ask: Ask, deadline: Option<Instant>) -> Result<Minted, MintError> {
        let cap = Instant::now() + self.max_wait;
        let deadline = deadline.map_or(cap, |d| d.min(cap));
        let filled = match ask {
            Ask::Many(n) => Vec::with_capacity(n),
            Ask::One => Vec::new(),
        };
        let (reply, rx) = oneshot::channel();
        self.tx.send(Request { ask, deadline, filled, reply }).await.map_err(|_| MintError::ShuttingDown)?;
        rx.await.map_err(|_| MintError::ShuttingDown)?
    }
}

/// Starts the minter task. It ends when every [`MintHandle`] is dropped and the requests
/// already sent are answered, or at once when `stop` is cancelled (answering what is still
/// pending with [`MintError::ShuttingDown`]). It returns the Unix ms at the end of the last
/// tick it minted.
pub fn spawn(
    config: MinterConfig,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    worker: watch::Receiver<WorkerState>,
    extend_now: Arc<Notify>,
    stop: CancellationToken,
) -> (MintHandle, watch::Receiver<Readiness>, tokio::task::JoinHandle<Option<i64>>) {
    let (tx, rx) = mpsc::channel(8192);
    let initial = Readiness::NotServing(MintError::NoWorker("starting".into()));
    let (readiness_tx, readiness) = watch::channel(initial);
    let handle = MintHandle { tx, max_wait: config.max_wait };
    let minter = Minter {
        max_back_ticks: (config.max_clock_back.as_millis() as u64) / config.layout.tick_ms,
        config,
        clock,
        metrics,
        rx,
        worker,
        extend_now,
        readiness: readiness_tx,
        generator: None,
        generation: 0,
        pending: VecDeque::new(),
        last_reading: None,
        counted_back: None,
        exhausted_since: None,
        last_minted_ms: None,
    };
    (handle, readiness, tokio::spawn(minter.run(stop)))
}

struct Minter {
    config: MinterConfig,
    max_back_ticks: u64,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    rx: mpsc::Receiver<Request>,
    worker: watch::Receiver<WorkerState>,
    extend_now: Arc<Notify>,
    readiness: watch::Sender<Readiness>,
    generator: Option<Generator>,
    /// The generation of the grant the generator was made for.
    generation: u64,
    pending: VecDeque<Request>,
    /// The previous clock reading (wall ms, monotonic), to notice forward jumps.
    last_reading: Option<(i64, Duration)>,
    /// The last tick and action a clock step back was counted for, so one step counts once.
    counted_back: Option<(u64, &'static str)>,
    /// When the sequence last ran out, to add the wait to its counter once it is over.
    exhausted_since: Option<Instant>,
    /// The end of the last tick minted by any generator of this minter.
    last_minted_ms: Option<i64>,
}

/// Waits shorter than this are slept precisely on a blocking thread rather than on tokio's
/// millisecond timer.
const PRECISE: Duration = Duration::from_micros(2_500);

/// The last stretch of a precise wait, spent yielding rather than sleeping, since waking a
/// sleeping thread takes tens of microseconds.
const SPIN: Duration = Duration::from_micros(150);

/// How often a refusing minter looks at the clock again while nothing else wakes it.
const RECHECK: Duration = Duration::from_millis(250);

/// What a pass over the pending requests ended with.
enum Next {
    /// Nothing to do until a request or a worker state change arrives.
    Idle,
    /// Try again at this instant (or earlier, if something arrives).
    At(Instant),
}

impl Minter {
    async fn run(mut self, stop: CancellationToken) -> Option<i64> {
        let mut open = true;
        let mut worker_open = true;
        loop {
            if open {
                loop {
                    match self.rx.try_recv() {
                        Ok(request) => self.pending.push_back(request),
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => {
                            open = false;
                            break;
                        }
                    }
                }
            }
            if !open && self.pending.is_empty() {
                break;
            }
            let next = self.pass();
            let wake = match next {
                Next::At(at) if at <= Instant::now() + PRECISE && !self.pending.is_empty() => {
                    // Less than a couple of timer granules away (the sequence ran out, or the
                    // clock is a hair behind): tokio's 1 ms timer would overshoot the tick
                    // boundary. Sleep most of the wait on a blocking thread (spinning all of
                    // it took more than a core at full load), and yield through the last
                    // stretch, to mint the moment the tick begins.
                    let wait = at.saturating_duration_since(Instant::now());
                    if wait > SPIN {
                        let sleep = wait - SPIN;
                        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(sleep)).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                    continue;
                }
                Next::At(at) => Some(at),
                Next::Idle => None,
            };
            tokio::select! {
                request = self.rx.recv(), if open => match request {
                    Some(request) => self.pending.push_back(request),
                    None => open = false,
                },
                changed = self.worker.changed(), if worker_open => {
                    if changed.is_err() {
                        worker_open = false;
                    }
                }
                _ = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {}
                () = stop.cancelled() => {
                    self.refuse_all(MintError::ShuttingDown);
                    break;
                }
            }
        }
        self.last_minted_ms
    }

    fn set_readiness(&self, readiness: Readiness) {
        self.readiness.send_if_modified(|current| {
            if *current == readiness {
                return false;
            }
            match &readiness {
                Readiness::Serving => tracing::info!("minting"),
                Readiness::NotServing(why) => tracing::warn!(reason = %why, "minting refused"),
            }
            self.metrics.minting.set(i64::from(readiness == Readiness::Serving));
            *current = readiness;
            true
        });
    }

    /// Answers every pending request with `error`.
    fn refuse_all(&mut self, error: MintError) {
        for request in self.pending.drain(..) {
            let _ = request.reply.send(Err(error.clone()));
        }
        self.set_readiness(Readiness::NotServing(error));
    }

    /// The instant at which the wall clock reaches `tick`, measured from the reading
    /// `now_us` taken at `now`.
    fn instant_of_tick(&self, tick: u64, now_us: i64, now: Instant) -> Instant {
        let start_us = self.config.layout.tick_start_ms(tick).saturating_mul(1000);
        now + Duration::from_micros(start_us.saturating_sub(now_us).max(0) as u64)
    }

    fn notice_forward_jump(&mut self, now_ms: i64, mono: Duration) {
        if let Some((last_ms, last_mono)) = self.last_reading {
            let wall = now_ms - last_ms;
            let real = mono.saturating_sub(last_mono).as_millis() as i64;
            if wall - real > self.config.forward_jump_threshold.as_millis() as i64 {
                self.metrics.clock_forward_jumps.inc();
                tracing::warn!(
                    jump_ms = wall - real,
                    now = %rfc3339_ms(now_ms),
                    "the wall clock jumped forward; IDs now carry the later time, and a correction back will be refused until the clock passes it again"
                );
            }
        }
        self.last_reading = Some((now_ms, mono));
    }

    /// Brings the generator in line with the worker state; `Err` when minting must refuse.
    fn sync_worker(&mut self, mono: Duration) -> Result<(), MintError> {
        let grant: Grant = match &*self.worker.borrow_and_update() {
            WorkerState::Unheld { reason } => return Err(MintError::NoWorker(reason.clone())),
            WorkerState::Held(grant) => grant.clone(),
        };
        // Invariant 4: the lease deadline is checked against the monotonic clock now, on
        // every pass, not trusted from a flag another task may not have updated after a pause.
        if grant.lease_deadline.is_some_and(|deadline| mono >= deadline) {
            return Err(MintError::LeaseExpired(grant.worker_id));
        }
        let layout = &self.config.layout;
        // The last tick wholly covered by the reservation; none when it ends before the
        // epoch's first tick (nothing may be minted yet).
        let Some(reserved_tick) = layout.tick_at(grant.reserved_ms.saturating_add(1)).and_then(|t| t.checked_sub(1))
        else {
            return Err(MintError::ReservationBehind {
                worker_id: grant.worker_id,
                reserved_until: rfc3339_ms(grant.reserved_ms),
            });
        };
        match &mut self.generator {
            Some(generator) if self.generation == grant.generation => generator.extend_reservation(reserved_tick),
            _ => {
                // A floor before the epoch cannot have been minted at: no floor then.
                let floor = grant.floor_ms.and_then(|ms| layout.tick_at(ms));
                self.generator = Some(Generator::new(
                    layout.clone(),
                    grant.worker_id.into(),
                    floor,
                    reserved_tick,
                    self.max_back_ticks,
                ));
                self.generation = grant.generation;
                tracing::info!(worker_id = grant.worker_id, generation = grant.generation, "minting for worker");
            }
        }
        Ok(())
    }

    /// Serves what can be served now, and says when to try again.
    fn pass(&mut self) -> Next {
        let now = Instant::now();
        let now_us = self.clock.wall_us();
        let now_ms = now_us.div_euclid(1000);
        let mono = self.clock.monotonic();
        self.notice_forward_jump(now_ms, mono);
        if let Err(error) = self.sync_worker(mono) {
            self.refuse_all(error);
            return Next::Idle;
        }
        let layout = &self.config.layout;
        let tick = match layout.tick_at(now_ms) {
            Some(tick) if tick <= layout.max_tick() => tick,
            Some(_) => {
                let error = MintError::LayoutExhausted { expiry: rfc3339_ms(layout.expiry_ms()) };
                self.refuse_all(error);
                return Next::Idle;
            }
            None => {
                self.refuse_all(MintError::BeforeEpoch { now: rfc3339_ms(now_ms) });
                return Next::At(now + RECHECK);
            }
        };

        let Self { generator, pending, metrics, .. } = self;
        let generator = generator.as_mut().expect("sync_worker made a generator");
        let mut blocked = None;
        while let Some(request) = pending.front_mut() {
            if request.reply.is_closed() {
                pending.pop_front();
                continue;
            }
            let result = match &request.ask {
                Ask::One => generator.next_id(tick).map(Minted::One),
                Ask::Many(want) => generator
                    .fill(tick, &mut request.filled, *want)
                    .map(|()| Minted::Many(std::mem::take(&mut request.filled))),
            };
            match result {
                Ok(minted) => {
                    let request = pending.pop_front().expect("front exists");
                    let count = match &minted {
                        Minted::One(_) => 1,
                        Minted::Many(ids) => ids.len() as u64,
                    };
                    if request.reply.send(Ok(minted)).is_ok() {
                        metrics.ids_issued.inc_by(count);
                    }
                }
                Err(why) => {
                    blocked = Some(why);
                    break;
                }
            }
        }
        if let Some(last) = generator.last_minted_tick() {
            self.last_minted_ms = Some(self.config.layout.tick_end_ms(last));
        }
        if self.exhausted_since.is_some()
            && !matches!(blocked, Some(Blocked::WaitUntil { reason: WaitReason::SequenceExhausted, .. }))
        {
            let since = self.exhausted_since.take().expect("checked");
            self.metrics.sequence_wait_seconds.inc_by(since.elapsed().as_secs_f64());
        }
        // With nothing pending, ask the generator whether a request would be refused now.
        let generator = self.generator.as_ref().expect("made above");
        let blocked = blocked.or_else(|| generator.probe(tick));
        let worker_id = generator.worker() as u32;
        let last_tick = generator.last_tick();
        let reserved = generator.reserved();
        match blocked {
            None => {
                self.set_readiness(Readiness::Serving);
                self.lease_wake(mono, now)
            }
            Some(Blocked::WaitUntil { tick: until, reason }) => {
                match reason {
                    WaitReason::SequenceExhausted if !self.pending.is_empty() && self.exhausted_since.is_none() => {
                        self.metrics.sequence_exhausted.inc();
                        self.exhausted_since = Some(now);
                    }
                    WaitReason::ClockBehind { behind } if !self.pending.is_empty() => {
                        self.count_step_back(last_tick, behind, "waited")
                    }
                    _ => {}
                }
                self.set_readiness(Readiness::Serving);
                let at = self.instant_of_tick(until, now_us, now);
                self.expire_before(at, || MintError::Deadline(format!("waiting for tick {until}")));
                Next::At(at)
            }
            Some(Blocked::Refuse { behind, last_tick, reason }) => {
                let behind_ms = behind * self.config.layout.tick_ms;
                let error = match reason {
                    RefuseReason::ClockStepBack => {
                        self.count_step_back(last_tick, behind, "refused");
                        MintError::ClockBehind {
                            behind_ms,
                            resume_at: rfc3339_ms(self.config.layout.tick_start_ms(last_tick + 1)),
                        }
                    }
                    RefuseReason::BelowFloor => MintError::BelowFloor {
                        worker_id,
                        floor: rfc3339_ms(self.config.layout.tick_end_ms(last_tick)),
                        behind_ms,
                    },
                };
                self.refuse_all(error);
                // Wake when the clock should have come back, to report ready again; look
                // sooner too, in case the clock is corrected forward in the meantime.
                Next::At(self.instant_of_tick(last_tick + 1, now_us, now).min(now + RECHECK))
            }
            Some(Blocked::Fenced { .. }) => {
                self.extend_now.notify_one();
                let error = MintError::ReservationBehind {
                    worker_id,
                    reserved_until: rfc3339_ms(self.config.layout.tick_end_ms(reserved)),
                };
                if self.pending.is_empty() {
                    self.set_readiness(Readiness::NotServing(error));
                    return Next::Idle;
                }
                // A reservation write is under way: wait for it (the worker state changes),
                // but no longer than the callers' deadlines.
                let at = now + Duration::from_millis(20);
                self.expire_before(at, || error.clone());
                Next::At(at)
            }
        }
    }

    /// Counts a clock step back once per last tick and action.
    fn count_step_back(&mut self, last_tick: u64, behind: u64, action: &'static str) {
        if self.counted_back == Some((last_tick, action)) {
            return;
        }
        self.counted_back = Some((last_tick, action));
        let behind_s = (behind * self.config.layout.tick_ms) as f64 / 1000.0;
        self.metrics.clock_backward.with_label_values(&[action]).inc();
        self.metrics.clock_backward_seconds.observe(behind_s);
        if action == "refused" {
            tracing::warn!(
                behind_ms = behind * self.config.layout.tick_ms,
                "the wall clock stepped back past the wait threshold; refusing to mint"
            );
        } else {
            tracing::info!(
                behind_ms = behind * self.config.layout.tick_ms,
                "the wall clock stepped back; waiting it out"
            );
        }
    }

    /// Answers the pending requests whose deadline comes before `at` with an error: they
    /// would otherwise wait past it.
    fn expire_before(&mut self, at: Instant, error: impl Fn() -> MintError) {
        self.pending.retain_mut(|request| {
            if request.deadline >= at {
                return true;
            }
            let reply = std::mem::replace(&mut request.reply, oneshot::channel().0);
            let _ = reply.send(Err(error()));
            false
        });
    }

    /// When idle and minting, wake at the lease deadline to report not ready.
    fn lease_wake(&self, mono: Duration, now: Instant) -> Next {
        match &*self.worker.borrow() {
            WorkerState::Held(Grant { lease_deadline: Some(deadline), .. }) => {
                Next::At(now + deadline.saturating_sub(mono))
            }
            _ => Next::Idle,
        }
    }
}
