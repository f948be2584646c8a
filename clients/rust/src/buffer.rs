//! The optional local buffer: `next_id()` pops a prefetched ID and costs no round trip.
//!
//! Refill tasks (up to `max_refills`) fetch one `BatchIds` each when the buffered IDs plus
//! the refills under way fall to `low_water`. A batch older than `max_age` (counted from its
//! arrival) is dropped unused, so the IDs handed out stay close to their time of use. An ID
//! leaves the buffer once, under its lock; a dropped one is never handed out. A refill that
//! failed on every endpoint fails the callers waiting for it, and no refill starts again for
//! 100 ms, so a fleet that is down is not hammered.
//!
//! Ages are read on Linux's coarse monotonic clock while a batch is well within `max_age`,
//! and on the precise one (tokio's `Instant`) near it: with tokio's clock paused, as in a
//! test, a batch expires only once the system's clock has come within 50 ms of `max_age`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::endpoints::Endpoints;
use crate::error::ClientError;

/// The pause after a refill that failed on every endpoint.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How far inside `max_age` a batch's age must be on the coarse clock to be taken as within
/// it without reading the precise clock: far more than the coarse clock lags (one kernel
/// tick, 1 to 10 ms).
const COARSE_MARGIN: Duration = Duration::from_millis(50);

/// IDs a caller takes from the buffer between two yields of its thread (see
/// [`Buffer::next_id`]).
const POPS_PER_YIELD: u32 = 1024;

/// The local buffer's settings.
#[derive(Debug, Clone)]
pub struct BufferConfig {
    /// IDs per refill (one `BatchIds` call).
    pub batch: u32,
    /// A refill starts when the buffered IDs plus the refills under way (`refilling × batch`)
    /// are at or below this.
    pub low_water: usize,
    /// Refills in flight at once, to keep up with heavy use.
    pub max_refills: usize,
    /// A buffered batch older than this (from its arrival) is dropped unused.
    pub max_age: Duration,
}

impl Default for BufferConfig {
    fn default() -> BufferConfig {
        BufferConfig { batch: 4096, low_water: 8192, max_refills: 3, max_age: Duration::from_secs(1) }
    }
}

/// A batch of prefetched IDs.
struct Fetched {
    ids: VecDeque<u64>,
    /// When it arrived, on the precise clock and on the coarse one.
    at: Instant,
    at_coarse: Option<Duration>,
}

impl Fetched {
    /// Whether the batch is within `max_age` of its arrival. Read on the precise clock, this
    /// costs tens of nanoseconds on some machines (virtual ones): as much as the rest of a
    /// pop. So the coarse clock answers while the batch is well inside the bound, and the
    /// precise one (`now`, read at most once per pop) only near it.
    fn fresh(&self, max_age: Duration, coarse: Option<Duration>, now: &mut Option<Instant>) -> bool {
        if let (Some(coarse), Some(at)) = (coarse, self.at_coarse)
            && coarse.saturating_sub(at) + COARSE_MARGIN <= max_age
        {
            return true;
        }
        now.get_or_insert_with(Instant::now).duration_since(self.at) <= max_age
    }
}

/// The monotonic clock as of the last kernel tick (Linux's `CLOCK_MONOTONIC_COARSE`): a few
/// nanoseconds to read, and behind the precise clock by at most a tick.
#[cfg(target_os = "linux")]
fn coarse_now() -> Option<Duration> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec for the call to write, and the clock is one Linux has.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) } == 0;
    read.then(|| Duration::new(now.tv_sec as u64, now.tv_nsec as u32))
}

/// Elsewhere, every age is read on the precise clock.
#[cfg(not(target_os = "linux"))]
fn coarse_now() -> Option<Duration> {
    None
}

#[derive(Default)]
struct State {
    batches: VecDeque<Fetched>,
    /// IDs in `batches`.
    buffered: usize,
    /// Refills under way.
    refilling: usize,
    /// Refill tasks waiting to be woken.
    idle: usize,
    /// IDs taken from the buffer, counted to `POPS_PER_YIELD`.
    pops: u32,
    /// Refills that failed so far; a caller waiting on an empty buffer fails when this moves.
    failures: u64,
    /// The error of the last failed refill.
    last_error: Option<ClientError>,
    /// No refill starts before this, after a failed one.
    retry_at: Option<Instant>,
}

/// The buffer shared by a client and its refill tasks.
pub(crate) struct Buffer {
    config: BufferConfig,
    state: Mutex<State>,
    /// Wakes a refill task. Shared with the tasks, which hold the buffer only weakly, so
    /// they end once the client is dropped.
    refill: Arc<Notify>,
    /// Wakes callers waiting on an empty buffer.
    filled: Notify,
}

impl Buffer {
    /// The buffer, with its refill tasks started.
    pub(crate) fn start(config: BufferConfig, endpoints: &Arc<Endpoints>, closed: &Arc<AtomicBool>) -> Arc<Buffer> {
        let buffer = Arc::new(Buffer {
            config,
            state: Mutex::new(State::default()),
            refill: Arc::new(Notify::new()),
            filled: Notify::new(),
        });
        for _ in 0..buffer.config.max_refills.max(1) {
            let task = refill(endpoints.clone(), Arc::downgrade(&buffer), buffer.refill.clone(), closed.clone());
            tokio::spawn(task);
        }
        buffer
    }

    /// Wakes the refill tasks, so they notice the client closed.
    pub(crate) fn wake_refills(&self) {
        self.refill.notify_waiters();
    }

    /// Pops one ID, dropping batches past their age.
    fn pop(&self) -> Popped {
        let mut state = self.state.lock().expect("buffer lock");
        let (coarse, mut now) = (coarse_now(), None);
        while let Some(front) = state.batches.front() {
            if !front.ids.is_empty() && front.fresh(self.config.max_age, coarse, &mut now) {
                break;
            }
            let dropped = state.batches.pop_front().expect("front exists");
            state.buffered -= dropped.ids.len();
        }
        let id = state.batches.front_mut().and_then(|b| b.ids.pop_front());
        let mut pause = false;
        if id.is_some() {
            state.buffered -= 1;
            state.pops += 1;
            if state.pops == POPS_PER_YIELD {
                state.pops = 0;
                pause = true;
            }
        }
        // Refill tasks that are fetching look again when their batch arrives; only an idle
        // one needs waking.
        let wake = state.idle > 0 && self.is_low(&state);
        Popped { id, wake, pause }
    }

    fn is_low(&self, state: &State) -> bool {
        state.buffered + state.refilling * self.config.batch as usize <= self.config.low_water
    }

    /// One ID from the buffer, waiting for a refill when it is empty: until `deadline`, or
    /// the attempts' worth of timeouts without one.
    pub(crate) async fn next_id(&self, endpoints: &Endpoints, deadline: Option<Instant>) -> Result<u64, ClientError> {
        let popped = self.pop();
        // A pop never waits, so a caller looping on next_id() would not give its thread back
        // until the buffer is empty, and a refill task it wakes, queued on the same thread (in
        // the slot other threads do not steal from), would not run before then. So the caller
        // yields once after waking a refill, and once every POPS_PER_YIELD IDs for the other
        // tasks of its thread. Not on tokio's cooperative budget: it yields every 128 pops,
        // a few microseconds apart, and each of those yields woke another thread of the
        // runtime, which cost more than the pops.
        if popped.wake {
            self.refill.notify_one();
        }
        if popped.wake || popped.pause {
            tokio::task::yield_now().await;
        }
        match popped.id {
            Some(id) => Ok(id),
            None => self.wait(endpoints, deadline).await,
        }
    }

    /// Waits on an empty buffer for a refill.
    async fn wait(&self, endpoints: &Endpoints, deadline: Option<Instant>) -> Result<u64, ClientError> {
        let failures = self.state.lock().expect("buffer lock").failures;
        let limit = deadline.unwrap_or_else(|| Instant::now() + endpoints.timeout * endpoints.attempts as u32);
        loop {
            // Registered before looking again, so no refill is missed.
            let filled = self.filled.notified();
            let Popped { id, wake, .. } = self.pop();
            if wake {
                self.refill.notify_one();
            }
            if let Some(id) = id {
                return Ok(id);
            }
            {
                let state = self.state.lock().expect("buffer lock");
                if state.failures != failures {
                    return Err(state.last_error.clone().expect("a failed refill leaves its error"));
                }
            }
            if tokio::time::timeout_at(limit, filled).await.is_err() {
                return Err(match deadline {
                    Some(_) => ClientError::DeadlineExceeded,
                    None => ClientError::Unavailable(tonic::Status::unavailable("no IDs arrived in time")),
                });
            }
        }
    }
}

/// What a pop got, and what the caller does next.
struct Popped {
    id: Option<u64>,
    /// The buffer is low and a refill task is idle: wake one.
    wake: bool,
    /// The caller has taken `POPS_PER_YIELD` IDs since it last yielded.
    pause: bool,
}

/// What a refill task does next.
enum Turn {
    /// The buffer is not low: sleep until woken.
    Idle,
    /// A refill failed a moment ago: not before this.
    Pause(Instant),
    /// Fetch a batch (counted in `refilling`).
    Fetch,
}

/// One refill task: fetches batches while the buffer is low, then waits to be woken.
async fn refill(endpoints: Arc<Endpoints>, buffer: Weak<Buffer>, signal: Arc<Notify>, closed: Arc<AtomicBool>) {
    loop {
        let woken = signal.notified();
        let Some(strong) = buffer.upgrade() else { return };
        if closed.load(Ordering::Relaxed) {
            return;
        }
        let turn = {
            let mut state = strong.state.lock().expect("buffer lock");
            if !strong.is_low(&state) {
                state.idle += 1;
                Turn::Idle
            } else if let Some(at) = state.retry_at.filter(|at| *at > Instant::now()) {
                Turn::Pause(at)
            } else {
                state.refilling += 1;
                Turn::Fetch
            }
        };
        match turn {
            Turn::Idle => {
                drop(strong);
                // Wake now and then to end once the client is dropped.
                let _ = tokio::time::timeout(Duration::from_secs(1), woken).await;
                let Some(strong) = buffer.upgrade() else { return };
                strong.state.lock().expect("buffer lock").idle -= 1;
                continue;
            }
            Turn::Pause(at) => {
                drop(strong);
                tokio::time::sleep_until(at).await;
                continue;
            }
            Turn::Fetch => {}
        }
        let result = endpoints.batch(strong.config.batch, None).await;
        {
            let mut state = strong.state.lock().expect("buffer lock");
            state.refilling -= 1;
            match result {
                Ok(ids) => {
                    state.buffered += ids.len();
                    state.batches.push_back(Fetched { ids: ids.into(), at: Instant::now(), at_coarse: coarse_now() });
                }
                Err(error) => {
                    state.failures += 1;
                    state.last_error = Some(error);
                    state.retry_at = Some(Instant::now() + RETRY_PAUSE);
                }
            }
        }
        strong.filled.notify_waiters();
    }
}
