//! The optional local buffer: `next_id()` pops a prefetched ID and costs no round trip.
//!
//! It refills at the rate IDs are used, as `clients/README.md` says, the same in every client
//! (`L = max_age / 4`, the lead):
//!
//! - the rate `r` is the IDs handed out per second, in windows of at least `L`;
//! - a refill is sent when, after dropping the stale batches, the IDs still fresh in `L` plus
//!   those asked for by refills in flight are at most `W = min(low_water, ⌊r × L⌋)` (or fewer
//!   than the callers waiting), fewer than `max_refills` are in flight, none failed in the last
//!   100 ms, and a caller waits or `W ≥ 1`; it asks for
//!   `min(batch, max(⌈r × max_age⌉, W + 1, callers waiting))` IDs;
//! - the decision is made when a caller finds the buffer empty, when a pop leaves `W` or fewer
//!   buffered and on their way, when a refill ends, and `L` before the oldest batch goes stale.
//!
//! One refill task per buffer makes the decisions ([`State::decide`], pure: the time is an
//! argument) and runs the refills. A batch's age counts from when its refill was sent; a batch
//! `max_age` old is dropped unused. An ID leaves the buffer once, under its lock; a dropped
//! one is never handed out. A refill the server refuses with `INVALID_ARGUMENT` is sent again
//! for half as many. A refill that failed otherwise fails the callers waiting for it.
//!
//! Ages are read on Linux's coarse monotonic clock while a batch is well within `max_age`,
//! and on the precise one (tokio's `Instant`) near it: with tokio's clock paused, as in a
//! test, a batch expires only once the system's clock has come within 50 ms of `max_age`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::closer::Closer;
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
    /// The most IDs one refill asks for (one `BatchIds` call).
    pub batch: u32,
    /// The most IDs the buffer keeps ahead of use: buffered, and asked for by refills in
    /// flight.
    pub low_water: usize,
    /// Refills in flight at once, to keep up with heavy use.
    pub max_refills: usize,
    /// A batch this old, counted from when its refill was sent, is dropped unused.
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
    /// When its refill was sent, on the precise clock and on the coarse one.
    sent: Instant,
    sent_coarse: Option<Duration>,
}

impl Fetched {
    /// Whether the batch is younger than `max_age`. Read on the precise clock, this costs
    /// tens of nanoseconds on some machines (virtual ones): as much as the rest of a pop. So
    /// the coarse clock answers while the batch is well inside the bound, and the precise one
    /// (`now`, read at most once per pop) only near it.
    fn fresh(&self, max_age: Duration, coarse: Option<Duration>, now: &mut Option<Instant>) -> bool {
        if let (Some(coarse), Some(sent)) = (coarse, self.sent_coarse)
            && coarse.saturating_sub(sent) + COARSE_MARGIN < max_age
        {
            return true;
        }
        now.get_or_insert_with(Instant::now).saturating_duration_since(self.sent) < max_age
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

/// The buffer's bookkeeping, under the buffer's lock. [`State::decide`] and the other methods
/// that take `now` read no clock, so tests drive them through simulated time.
struct State {
    config: BufferConfig,
    /// `max_age / 4`: how long before a batch goes stale its successor is asked for.
    lead: Duration,
    /// By when their refills were sent, oldest first.
    batches: VecDeque<Fetched>,
    /// IDs in `batches`.
    buffered: usize,
    /// Refills in flight, and the IDs they asked for.
    refilling: usize,
    asked: usize,
    /// IDs handed out so far.
    taken: u64,
    /// The current rate window: when it began, and `taken` then.
    window_start: Instant,
    window_taken: u64,
    /// IDs handed out per second, as of the last decision.
    rate: f64,
    /// `W` of the last decision.
    mark: usize,
    /// Pops before the next decision: until `buffered + asked` reaches the mark; none while
    /// every refill is in flight (the next to end decides).
    countdown: usize,
    /// Whether the refill task was woken and has not decided since.
    nudged: bool,
    /// Callers waiting on an empty buffer.
    waiting: usize,
    /// The most IDs a refill asks for: `batch`, halved for each `INVALID_ARGUMENT`.
    cap: u32,
    /// IDs taken from the buffer, counted to `POPS_PER_YIELD`.
    pops: u32,
    /// Refills that failed so far; a caller waiting on an empty buffer fails when this moves.
    failures: u64,
    /// The error of the last failed refill.
    last_error: Option<ClientError>,
    /// No refill starts before this, after a failed one.
    retry_at: Option<Instant>,
}

/// What a decision asks of the refill task.
#[derive(Debug, PartialEq)]
struct Decision {
    /// The sizes of the refills to send now (already counted in flight).
    refills: Vec<u32>,
    /// When to decide again unless something happens first.
    wake_at: Option<Instant>,
}

impl State {
    fn new(config: BufferConfig, now: Instant) -> State {
        State {
            lead: config.max_age / 4,
            cap: config.batch.max(1),
            config,
            batches: VecDeque::new(),
            buffered: 0,
            refilling: 0,
            asked: 0,
            taken: 0,
            window_start: now,
            window_taken: 0,
            rate: 0.0,
            mark: 0,
            countdown: 0,
            nudged: false,
            waiting: 0,
            pops: 0,
            failures: 0,
            last_error: None,
            retry_at: None,
        }
    }

    /// Drops the batches that are `max_age` old at `now`.
    fn drop_stale(&mut self, now: Instant) {
        while let Some(front) = self.batches.front() {
            if now.saturating_duration_since(front.sent) < self.config.max_age {
                break;
            }
            self.buffered -= front.ids.len();
            self.batches.pop_front();
        }
    }

    /// The rate rule: windows of at least `lead`; a window still under way raises the rate
    /// once its own count says more.
    fn measure(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.window_start);
        let taken = (self.taken - self.window_taken) as f64;
        if elapsed >= self.lead {
            self.rate = taken / elapsed.as_secs_f64();
            self.window_start = now;
            self.window_taken = self.taken;
        } else {
            self.rate = self.rate.max(taken / self.lead.as_secs_f64());
        }
    }

    /// The refills to send at `now`, and when to decide again.
    fn decide(&mut self, now: Instant) -> Decision {
        self.nudged = false;
        self.drop_stale(now);
        self.measure(now);
        let (max_age, lead) = (self.config.max_age, self.lead);
        self.mark = self.config.low_water.min((self.rate * lead.as_secs_f64()) as usize);
        let fresh_later = |b: &&Fetched| b.sent + max_age > now + lead;
        let mut ahead = self.asked + self.batches.iter().filter(fresh_later).map(|b| b.ids.len()).sum::<usize>();
        // Fetch ahead only when an ID will be used within the lead; else a prefetched ID would
        // mostly go stale unused.
        let wanted = self.waiting > 0 || self.mark >= 1;
        let paused = self.retry_at.is_some_and(|at| at > now);
        let mut refills = Vec::new();
        while wanted
            && !paused
            && self.refilling < self.config.max_refills.max(1)
            && (ahead <= self.mark || ahead < self.waiting)
        {
            let by_rate = (self.rate * max_age.as_secs_f64()).ceil() as usize;
            let n = by_rate.max(self.mark + 1).max(self.waiting.saturating_sub(ahead)).min(self.cap as usize).max(1);
            refills.push(n as u32);
            self.refilling += 1;
            self.asked += n;
            ahead += n;
        }
        self.countdown = if self.refilling >= self.config.max_refills.max(1) {
            usize::MAX
        } else {
            (self.buffered + self.asked).saturating_sub(self.mark).max(1)
        };
        let expiry = self.batches.iter().map(|b| b.sent + max_age - lead).find(|at| *at > now);
        let retry = self.retry_at.filter(|at| *at > now && self.waiting > 0);
        Decision { refills, wake_at: expiry.into_iter().chain(retry).min() }
    }

    /// A refill of `asked` IDs, sent at `sent`, ended with `result` at `now` (`coarse`: the
    /// coarse clock then). Whether callers waiting on the buffer may look again (IDs came, or
    /// the refill failed for good).
    fn ended(
        &mut self,
        asked: u32,
        sent: Instant,
        result: Result<Vec<u64>, ClientError>,
        now: Instant,
        coarse: Option<Duration>,
    ) -> bool {
        self.refilling -= 1;
        self.asked -= asked as usize;
        match result {
            Ok(ids) => {
                self.buffered += ids.len();
                let at = self.batches.iter().rposition(|b| b.sent <= sent).map_or(0, |i| i + 1);
                let sent_coarse = coarse.map(|coarse| coarse.saturating_sub(now.saturating_duration_since(sent)));
                self.batches.insert(at, Fetched { ids: ids.into(), sent, sent_coarse });
                true
            }
            Err(ClientError::Rejected(status)) if status.code() == tonic::Code::InvalidArgument && asked > 1 => {
                // Above the server's --max-batch: ask for half as many from now on.
                self.cap = self.cap.min(asked / 2).max(1);
                false
            }
            Err(error) => {
                self.failures += 1;
                self.last_error = Some(error);
                self.retry_at = Some(now + RETRY_PAUSE);
                true
            }
        }
    }
}

/// The buffer shared by a client and its refill task.
pub(crate) struct Buffer {
    max_age: Duration,
    state: Mutex<State>,
    /// Wakes the refill task. Shared with it; the task holds the buffer only weakly.
    wake: Arc<Notify>,
    /// Wakes callers waiting on an empty buffer.
    filled: Notify,
    closer: Arc<Closer>,
}

impl Buffer {
    /// The buffer, with its refill task started (it sends nothing before the first use).
    pub(crate) fn start(config: BufferConfig, endpoints: &Arc<Endpoints>, closer: &Arc<Closer>) -> Arc<Buffer> {
        let buffer = Arc::new(Buffer {
            max_age: config.max_age,
            state: Mutex::new(State::new(config, Instant::now())),
            wake: Arc::new(Notify::new()),
            filled: Notify::new(),
            closer: closer.clone(),
        });
        tokio::spawn(refill(endpoints.clone(), Arc::downgrade(&buffer), buffer.wake.clone(), closer.clone()));
        buffer
    }

    /// Pops one ID, dropping batches past their age.
    fn pop(&self) -> Popped {
        let mut state = self.state.lock().expect("buffer lock");
        let (coarse, mut now) = (coarse_now(), None);
        while let Some(front) = state.batches.front() {
            if !front.ids.is_empty() && front.fresh(self.max_age, coarse, &mut now) {
                break;
            }
            let dropped = state.batches.pop_front().expect("front exists");
            state.buffered -= dropped.ids.len();
        }
        let id = state.batches.front_mut().and_then(|b| b.ids.pop_front());
        let mut pause = false;
        if id.is_some() {
            state.buffered -= 1;
            state.taken += 1;
            state.pops += 1;
            if state.pops == POPS_PER_YIELD {
                state.pops = 0;
                pause = true;
            }
        }
        if id.is_some() {
            state.countdown = state.countdown.saturating_sub(1);
        }
        let wake = !state.nudged && state.countdown == 0;
        state.nudged |= wake;
        Popped { id, wake, pause }
    }

    /// One ID from the buffer, waiting for a refill when it is empty: until `deadline`, or
    /// the attempts' worth of timeouts without one.
    pub(crate) async fn next_id(&self, endpoints: &Endpoints, deadline: Option<Instant>) -> Result<u64, ClientError> {
        let popped = self.pop();
        // A pop never waits, so a caller looping on next_id() would not give its thread back
        // until the buffer is empty, and the refill task it wakes, queued on the same thread
        // (in the slot other threads do not steal from), would not run before then. So the
        // caller yields once after waking it, and once every POPS_PER_YIELD IDs for the other
        // tasks of its thread. Not on tokio's cooperative budget: it yields every 128 pops,
        // a few microseconds apart, and each of those yields woke another thread of the
        // runtime, which cost more than the pops.
        if popped.wake {
            self.wake.notify_one();
        }
        if popped.wake || popped.pause {
            tokio::task::yield_now().await;
        }
        match popped.id {
            Some(id) => Ok(id),
            None => self.closer.or_closed(self.wait(endpoints, deadline)).await,
        }
    }

    /// Waits on an empty buffer for a refill, counted among the callers waiting meanwhile.
    async fn wait(&self, endpoints: &Endpoints, deadline: Option<Instant>) -> Result<u64, ClientError> {
        let failures = {
            let mut state = self.state.lock().expect("buffer lock");
            state.waiting += 1;
            state.failures
        };
        let _waiting = Waiting(self);
        self.wake.notify_one();
        let limit = deadline.unwrap_or_else(|| Instant::now() + endpoints.timeout * endpoints.attempts as u32);
        loop {
            // Registered before looking again, so no refill is missed.
            let filled = self.filled.notified();
            let Popped { id, wake, .. } = self.pop();
            if wake {
                self.wake.notify_one();
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

/// A caller counted as waiting on the buffer, until it is dropped.
struct Waiting<'a>(&'a Buffer);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.state.lock().expect("buffer lock").waiting -= 1;
    }
}

/// What a pop got, and what the caller does next.
struct Popped {
    id: Option<u64>,
    /// The buffer is at its mark: wake the refill task.
    wake: bool,
    /// The caller has taken `POPS_PER_YIELD` IDs since it last yielded.
    pause: bool,
}

/// What a refill in flight gives back: what it asked for, when it was sent, what came.
type Ended = (u32, Instant, Result<Vec<u64>, ClientError>);

/// The refill task: decides, sends the refills, and waits for one to end, for a pop or a
/// waiting caller to wake it, or for its next decision's time. It ends when the client is
/// closed or dropped; the refills in flight end with it.
async fn refill(endpoints: Arc<Endpoints>, buffer: Weak<Buffer>, wake: Arc<Notify>, closer: Arc<Closer>) {
    let mut fetches: JoinSet<Ended> = JoinSet::new();
    loop {
        let woken = wake.notified();
        let Some(strong) = buffer.upgrade() else { return };
        if closer.is_closed() {
            return;
        }
        let now = Instant::now();
        let decision = strong.state.lock().expect("buffer lock").decide(now);
        for asked in decision.refills {
            let endpoints = endpoints.clone();
            fetches.spawn(async move { (asked, now, endpoints.batch(asked, None).await) });
        }
        drop(strong);
        let timer = decision.wake_at.unwrap_or_else(|| now + Duration::from_secs(3600));
        tokio::select! {
            () = closer.closed() => return,
            () = woken => {}
            () = tokio::time::sleep_until(timer) => {}
            Some(ended) = fetches.join_next(), if !fetches.is_empty() => {
                let Ok((asked, sent, result)) = ended else { continue };
                let Some(strong) = buffer.upgrade() else { return };
                let (now, coarse) = (Instant::now(), coarse_now());
                let look = strong.state.lock().expect("buffer lock").ended(asked, sent, result, now, coarse);
                if look {
                    strong.filled.notify_waiters();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller at `per_second` for `seconds` of simulated time, with refills answered after
    /// `round_trip`: the IDs minted, and the calls that found the buffer empty after the first
    /// second.
    fn simulate(config: BufferConfig, per_second: u64, seconds: u64, round_trip: Duration) -> (usize, usize, usize) {
        let start = Instant::now();
        let mut state = State::new(config, start);
        let mut in_flight: Vec<(Instant, u32, Instant)> = Vec::new(); // (arrives, asked, sent)
        let mut wake_at: Option<Instant> = None;
        let (mut minted, mut used, mut empty) = (0, 0, 0);
        let mut next_id = 0u64;
        let step = Duration::from_millis(1);
        let mut now = start;
        let mut next_call = start;
        let mut waiting = false;
        while now < start + Duration::from_secs(seconds) {
            let mut decide = wake_at.is_some_and(|at| at <= now);
            in_flight.retain(|&(arrives, asked, sent)| {
                if arrives > now {
                    return true;
                }
                let ids: Vec<u64> = (next_id..next_id + u64::from(asked)).collect();
                next_id += u64::from(asked);
                state.ended(asked, sent, Ok(ids), now, None);
                decide = true;
                false
            });
            if now >= next_call || waiting {
                state.drop_stale(now);
                let id = state.batches.front_mut().and_then(|b| b.ids.pop_front());
                if let Some(front) = state.batches.front()
                    && front.ids.is_empty()
                {
                    state.batches.pop_front();
                }
                match id {
                    Some(_) => {
                        state.buffered -= 1;
                        state.taken += 1;
                        used += 1;
                        if waiting {
                            state.waiting -= 1;
                            waiting = false;
                        }
                        next_call += Duration::from_secs(1) / per_second as u32;
                        state.countdown = state.countdown.saturating_sub(1);
                        decide |= state.countdown == 0;
                    }
                    None if !waiting => {
                        waiting = true;
                        state.waiting += 1;
                        decide = true;
                        if now >= start + Duration::from_secs(1) {
                            empty += 1;
                        }
                    }
                    None => {}
                }
            }
            if decide {
                let decision = state.decide(now);
                for asked in decision.refills {
                    minted += asked as usize;
                    in_flight.push((now + round_trip, asked, now));
                }
                wake_at = decision.wake_at;
            }
            now += step;
        }
        (minted, used, empty)
    }

    #[test]
    fn ten_a_second_mints_about_a_third_more_and_never_waits_at_an_expiry() {
        let (minted, used, empty) = simulate(BufferConfig::default(), 10, 60, Duration::from_millis(100));
        assert!(used >= 595, "{used} used");
        assert_eq!(empty, 0, "calls found the buffer empty after the first second");
        assert!(minted <= used * 3 / 2 + 20, "{minted} minted for {used} used");
    }

    #[test]
    fn heavy_use_refills_whole_batches_ahead() {
        let config = BufferConfig::default();
        let (minted, used, empty) = simulate(config, 500, 5, Duration::from_millis(5));
        assert_eq!(empty, 0, "calls found the buffer empty after the first second");
        assert!(minted <= used * 3 / 2 + 200, "{minted} minted for {used} used");
    }

    #[test]
    fn a_client_used_once_then_left_alone_stops_refilling() {
        let start = Instant::now();
        let mut state = State::new(BufferConfig::default(), start);
        assert_eq!(state.decide(start), Decision { refills: vec![], wake_at: None }, "nothing before first use");
        state.waiting = 1;
        let first = state.decide(start);
        assert_eq!(first.refills, vec![1]);
        state.waiting = 0;
        state.ended(1, start, Ok(vec![7]), start + Duration::from_millis(1), None);
        state.batches.front_mut().unwrap().ids.pop_front();
        state.taken += 1;
        state.buffered -= 1;
        for seconds in 1..10 {
            let later = start + Duration::from_secs(seconds);
            assert!(state.decide(later).refills.is_empty(), "a refill {seconds} s after the only use");
        }
    }

    #[test]
    fn stale_batches_do_not_count_as_ahead() {
        let start = Instant::now();
        let config = BufferConfig { low_water: 8192, ..BufferConfig::default() };
        let mut state = State::new(config, start);
        state.refilling = 1;
        state.asked = 100;
        state.ended(100, start, Ok((0..100).collect()), start, None);
        // 40 IDs a second for 0.9 s: the batch is 0.1 s from stale, with 64 IDs left in it.
        state.taken = 12;
        state.measure(start + Duration::from_millis(300));
        state.taken = 36;
        let decision = state.decide(start + Duration::from_millis(900));
        assert_eq!(decision.refills.len(), 1, "{decision:?}: the stale-soon batch counted as ahead");
    }

    #[test]
    fn an_invalid_argument_halves_the_refills() {
        let start = Instant::now();
        let mut state = State::new(BufferConfig::default(), start);
        state.waiting = 1;
        state.refilling = 1;
        state.asked = 4096;
        let refused = ClientError::Rejected(tonic::Status::invalid_argument("count above --max-batch"));
        assert!(!state.ended(4096, start, Err(refused), start, None));
        assert_eq!((state.cap, state.failures), (2048, 0));
    }
}
