//! The minter's decisions, with no I/O: the queue of waiting requests, the generator, and
//! the holding the keeper publishes, turned into replies and the instant to look again.
//!
//! [`MinterCore::pass`] takes one clock reading and serves what it can; what the generator
//! cannot do now becomes a bounded wait (an exhausted sequence, a small step back) or an
//! immediate, retriable refusal. The tokio task ([`super::task`]) and the simulator drive the
//! same core; tests drive it with hand-fed holdings and clock readings.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::error::{MintError, Readiness};
use crate::generator::{Blocked, Generator, RefuseReason, WaitReason, Window};
use crate::grant::{Grant, Holding, Minted};
use crate::layout::{Layout, LayoutError, rfc3339_ms};
use crate::metrics::{ACTION_BORROWED, ACTION_REFUSED, ACTION_WAITED, Metrics};

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    One,
    Many(usize),
}

/// What a request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ids {
    One(u64),
    Many(Vec<u64>),
}

/// Where a reply goes: a oneshot in production, a log in the simulator.
pub trait Responder {
    /// Whether the caller has gone (its reply would be dropped).
    fn is_closed(&self) -> bool;
    /// Sends the reply; `false` when the caller has gone.
    fn send(self, result: Result<Ids, MintError>) -> bool;
}

/// One caller waiting for IDs.
#[derive(Debug)]
pub struct Pending<R> {
    ask: Ask,
    /// Boot-time instant by which it must be answered.
    deadline: Duration,
    /// A batch's IDs so far, while it spans several ticks.
    filled: Vec<u64>,
    /// The grant epoch `filled` was minted under.
    epoch: u64,
    reply: R,
}

impl<R> Pending<R> {
    pub fn new(ask: Ask, deadline: Duration, reply: R) -> Pending<R> {
        let filled = match ask {
            Ask::Many(n) => Vec::with_capacity(n),
            Ask::One => Vec::new(),
        };
        Pending { ask, deadline, filled, epoch: 0, reply }
    }
}

/// One reading of the clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// Wall time, µs since the Unix epoch.
    pub wall_us: i64,
    /// Time since boot, counting suspend: what lease deadlines are measured on.
    pub boot: Duration,
    /// Time since boot, not counting suspend (only a planted defect measures deadlines on it).
    pub awake: Duration,
}

/// Settings of the minter.
#[derive(Debug, Clone)]
pub struct MinterConfig {
    pub layout: Layout,
    /// Strict policy (`max_clock_drift` 0): steps back of the wall clock up to this are
    /// waited out; larger ones are refused.
    pub max_clock_back: Duration,
    /// Hybrid policy: while the wall clock is behind the minting time, minting goes on ahead
    /// of it by at most this much; beyond it, refused. Zero: the strict policy.
    pub max_clock_drift: Duration,
    /// The longest any call waits for IDs, whatever its own deadline.
    pub max_wait: Duration,
}

/// What a pass ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing to do until a request or a holding change arrives.
    Idle,
    /// Look again at this boot-time instant (or earlier, if something arrives).
    At(Duration),
}

/// How often a refusing minter looks at the clock again while nothing else wakes it.
const RECHECK: Duration = Duration::from_millis(250);

/// How long a call waits for a reservation write under way before it is answered.
const FENCE_WAIT: Duration = Duration::from_millis(20);

/// The minter's state.
pub struct MinterCore<R> {
    config: MinterConfig,
    metrics: Metrics,
    generator: Generator,
    /// The epoch of the grant the generator's windows come from.
    epoch: Option<u64>,
    /// Per worker, the floor tick of its first claim in this process: a claim that resumes
    /// keeps it.
    floors: BTreeMap<u32, Option<u64>>,
    pending: VecDeque<Pending<R>>,
    readiness: Readiness,
    readiness_changed: bool,
    /// Whether the minting time is ahead of the wall clock (borrowing), to log the start
    /// and the end of it once each.
    borrowing: bool,
    /// The last tick and action a clock step back was counted for, so one step counts once.
    counted_back: Option<(u64, &'static str)>,
    /// When the sequence last ran out, to add the wait to its counter once it is over.
    exhausted_since: Option<Duration>,
    /// The minter is past its reservation and asks the keeper to extend it now.
    wants_extension: bool,
}

impl<R: Responder> MinterCore<R> {
    pub fn new(config: MinterConfig, metrics: Metrics) -> Result<MinterCore<R>, LayoutError> {
        let ticks = |d: Duration| (d.as_millis() as u64) / config.layout.tick_ms;
        let generator =
            Generator::new(config.layout.clone(), ticks(config.max_clock_back), ticks(config.max_clock_drift))?;
        metrics.clock_drift_bound_seconds.set(config.max_clock_drift.as_secs_f64());
        Ok(MinterCore {
            config,
            metrics,
            generator,
            epoch: None,
            floors: BTreeMap::new(),
            pending: VecDeque::new(),
            readiness: Readiness::NotServing(MintError::NoWorker("starting".into())),
            readiness_changed: false,
            borrowing: false,
            counted_back: None,
            exhausted_since: None,
            wants_extension: false,
        })
    }

    pub fn push(&mut self, pending: Pending<R>) {
        self.pending.push_back(pending);
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Readiness, when it changed since the last call.
    pub fn poll_readiness(&mut self) -> Option<Readiness> {
        std::mem::take(&mut self.readiness_changed).then(|| self.readiness.clone())
    }

    /// Whether the minter found itself past its reservation since the last call.
    pub fn take_extension_wish(&mut self) -> bool {
        std::mem::take(&mut self.wants_extension)
    }

    /// What was minted, per slot: the Unix ms at the end of the last tick minted on each.
    pub fn minted(&self) -> Minted {
        let layout = &self.config.layout;
        Minted::UpTo(self.generator.last_ticks().map(|(w, tick)| (w as u32, layout.tick_end_ms(tick))).collect())
    }

    /// The minting time: the end of the last tick minted, Unix ms.
    pub fn mint_ms(&self) -> Option<i64> {
        self.generator.last().map(|last| self.config.layout.tick_end_ms(last.tick))
    }

    /// Answers every pending request with `error`.
    pub fn refuse_all(&mut self, error: MintError) {
        for request in self.pending.drain(..) {
            request.reply.send(Err(error.clone()));
        }
        self.set_readiness(Readiness::NotServing(error));
    }

    fn set_readiness(&mut self, readiness: Readiness) {
        if self.readiness == readiness {
            return;
        }
        // One line per change of state: a refusal whose figures move on (milliseconds to go)
        // is the same refusal.
        let kind = |r: &Readiness| match r {
            Readiness::Serving => None,
            Readiness::NotServing(why) => Some(std::mem::discriminant(why)),
        };
        if kind(&self.readiness) != kind(&readiness) {
            match &readiness {
                Readiness::Serving => tracing::info!("minting"),
                Readiness::NotServing(why) => tracing::warn!(reason = %why, "minting refused"),
            }
        }
        self.metrics.minting.set(i64::from(readiness == Readiness::Serving));
        self.readiness = readiness;
        self.readiness_changed = true;
    }

    /// The boot-time instant at which the wall clock reaches `tick`, from `now`.
    fn instant_of_tick(&self, tick: u64, now: Reading) -> Duration {
        let start_us = self.config.layout.tick_start_ms(tick).saturating_mul(1000);
        now.boot + Duration::from_micros(start_us.saturating_sub(now.wall_us).max(0) as u64)
    }

    /// The minting time against the wall clock: the drift gauge, and one log line when
    /// minting starts going on ahead of a clock that is behind, and one when that ends.
    /// Borrowing starts only with an ID minted ahead of the clock (`minted`) under the hybrid
    /// policy: a refusal, or the strict policy's wait, borrows nothing.
    fn note_drift(&mut self, now_ms: i64, minted: bool) {
        let layout = &self.config.layout;
        let mint_ms = self.generator.last().map_or(i64::MIN, |l| layout.tick_start_ms(l.tick));
        let drift_ms = mint_ms.saturating_sub(now_ms).max(0);
        self.metrics.clock_drift_seconds.set(drift_ms as f64 / 1000.0);
        let borrowing = drift_ms > 0 && (self.borrowing || (minted && !self.config.max_clock_drift.is_zero()));
        if borrowing != self.borrowing {
            self.borrowing = borrowing;
            if borrowing {
                self.metrics.clock_backward.with_label_values(&[ACTION_BORROWED]).inc();
                self.metrics.clock_backward_seconds.observe(drift_ms as f64 / 1000.0);
                tracing::warn!(
                    drift_ms,
                    bound_ms = self.config.max_clock_drift.as_millis() as u64,
                    "the wall clock is behind the minting time; minting goes on ahead of it, within the drift bound"
                );
            } else {
                tracing::info!("the wall clock has caught up with the minting time");
            }
        }
    }

    /// Brings the generator in line with the holding; `Err` when minting must refuse.
    fn sync_holding(&mut self, holding: &Holding, now: Reading) -> Result<(), MintError> {
        let grant: &Grant = match holding {
            Holding::Unheld { reason } => return Err(MintError::NoWorker(reason.clone())),
            Holding::Held(grant) => grant,
        };
        let first = grant.slots.first().map_or(0, |s| s.worker_id);
        // Invariant 4: the deadline is checked against the boot-time clock now, on every
        // pass, not trusted from a flag another task may not have updated after a pause.
        let clock = if crate::defects::active(crate::defects::Defect::DeadlineOnSuspendingClock) {
            now.awake
        } else {
            now.boot
        };
        if grant.deadline.is_some_and(|deadline| clock >= deadline) {
            return Err(MintError::LeaseExpired(first));
        }
        let layout = &self.config.layout;
        let mut windows = Vec::with_capacity(grant.slots.len());
        for slot in &grant.slots {
            // The last tick wholly covered by the reservation; none when it ends before the
            // epoch's first tick (nothing may be minted yet).
            let Some(reserved) = layout.tick_at(slot.reserved_ms.saturating_add(1)).and_then(|t| t.checked_sub(1))
            else {
                return Err(MintError::ReservationBehind {
                    worker_id: slot.worker_id,
                    reserved_until: rfc3339_ms(slot.reserved_ms),
                });
            };
            // A floor before the epoch cannot have been minted at: no floor then.
            let floor = slot.floor_ms.and_then(|ms| layout.tick_at(ms));
            // A claim that resumes keeps the floor of the claim it continues; the generator's
            // cursor is above everything this process minted since.
            let floor = match self.floors.get(&slot.worker_id) {
                Some(&kept) if slot.resumes => kept,
                _ => floor,
            };
            windows.push(Window { worker: slot.worker_id.into(), floor, reserved });
        }
        if self.epoch == Some(grant.epoch) {
            for window in &windows {
                self.generator.extend_reservation(window.worker, window.reserved);
            }
            return Ok(());
        }
        for (slot, window) in grant.slots.iter().zip(&windows) {
            self.floors.insert(slot.worker_id, window.floor);
        }
        self.generator.set_windows(&windows);
        self.epoch = Some(grant.epoch);
        // Invariant 8: a batch half filled under the old claims is dropped, never continued.
        for request in &mut self.pending {
            if request.epoch != grant.epoch {
                request.filled.clear();
                request.epoch = grant.epoch;
            }
        }
        let workers: Vec<u32> = grant.slots.iter().map(|s| s.worker_id).collect();
        tracing::info!(?workers, epoch = grant.epoch, "minting for workers");
        Ok(())
    }

    /// Serves what can be served at `now`, and says when to look again.
    pub fn pass(&mut self, now: Reading, holding: &Holding) -> Next {
        let now_ms = now.wall_us.div_euclid(1000);
        if let Err(error) = self.sync_holding(holding, now) {
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
                return Next::At(now.boot + RECHECK);
            }
        };

        let epoch = self.epoch.unwrap_or(0);
        let mut blocked = None;
        let mut minted = false;
        while let Some(request) = self.pending.front_mut() {
            if request.reply.is_closed() {
                self.pending.pop_front();
                continue;
            }
            request.epoch = epoch;
            let result = match request.ask {
                Ask::One => self.generator.next_id(tick).map(Ids::One),
                Ask::Many(want) => self
                    .generator
                    .fill(tick, &mut request.filled, want)
                    .map(|()| Ids::Many(std::mem::take(&mut request.filled))),
            };
            match result {
                Ok(ids) => {
                    let request = self.pending.pop_front().expect("front exists");
                    let count = match &ids {
                        Ids::One(_) => 1,
                        Ids::Many(ids) => ids.len() as u64,
                    };
                    if request.reply.send(Ok(ids)) {
                        self.metrics.ids_issued.inc_by(count);
                    }
                    minted = true;
                }
                Err(why) => {
                    blocked = Some(why);
                    break;
                }
            }
        }
        self.note_drift(now_ms, minted);
        if self.exhausted_since.is_some()
            && !matches!(blocked, Some(Blocked::WaitUntil { reason: WaitReason::SequenceExhausted, .. }))
        {
            let since = self.exhausted_since.take().expect("checked");
            self.metrics.sequence_wait_seconds.inc_by(now.boot.saturating_sub(since).as_secs_f64());
        }
        // With nothing pending, ask the generator whether a request would be refused now.
        let blocked = blocked.or_else(|| self.generator.probe(tick));
        match blocked {
            None => {
                self.set_readiness(Readiness::Serving);
                self.deadline_wake(holding, now)
            }
            Some(Blocked::WaitUntil { tick: until, reason }) => {
                match reason {
                    WaitReason::SequenceExhausted if self.has_pending() && self.exhausted_since.is_none() => {
                        self.metrics.sequence_exhausted.inc();
                        self.exhausted_since = Some(now.boot);
                    }
                    WaitReason::ClockBehind { behind } if self.has_pending() => {
                        let last_tick = self.generator.last().map_or(0, |l| l.tick);
                        self.count_step_back(last_tick, behind, ACTION_WAITED)
                    }
                    _ => {}
                }
                self.set_readiness(Readiness::Serving);
                let at = self.instant_of_tick(until, now);
                self.expire_before(at, || MintError::Deadline(format!("waiting for tick {until}")));
                Next::At(at)
            }
            Some(Blocked::Refuse { behind, resume, reason }) => {
                let layout = self.config.layout.clone();
                let behind_ms = behind * layout.tick_ms;
                let error = match reason {
                    RefuseReason::ClockStepBack { last_tick } => {
                        self.count_step_back(last_tick, behind, ACTION_REFUSED);
                        MintError::ClockBehind { behind_ms, resume_at: rfc3339_ms(layout.tick_start_ms(resume)) }
                    }
                    RefuseReason::BelowFloor { floor } => MintError::BelowFloor {
                        worker_id: self.first_worker(holding),
                        floor: rfc3339_ms(layout.tick_end_ms(floor)),
                        behind_ms,
                    },
                };
                self.refuse_all(error);
                // Wake when the clock should have come back, to report ready again; look
                // sooner too, in case the clock is corrected forward in the meantime.
                Next::At(self.instant_of_tick(resume, now).min(now.boot + RECHECK))
            }
            Some(Blocked::Fenced { reserved, .. }) => {
                self.wants_extension = true;
                let error = MintError::ReservationBehind {
                    worker_id: self.first_worker(holding),
                    reserved_until: rfc3339_ms(self.config.layout.tick_end_ms(reserved)),
                };
                if self.pending.is_empty() {
                    self.set_readiness(Readiness::NotServing(error));
                    return Next::Idle;
                }
                // A reservation write is under way: wait for it (the holding changes), but
                // no longer than the callers' deadlines.
                let at = now.boot + FENCE_WAIT;
                self.expire_before(at, || error.clone());
                Next::At(at)
            }
            Some(Blocked::NoSlot) => {
                self.refuse_all(MintError::NoWorker("no slot is held".into()));
                Next::Idle
            }
        }
    }

    fn first_worker(&self, holding: &Holding) -> u32 {
        holding.grant().and_then(|g| g.slots.first()).map_or(0, |s| s.worker_id)
    }

    /// Counts a clock step back once per last tick and action.
    fn count_step_back(&mut self, last_tick: u64, behind: u64, action: &'static str) {
        if self.counted_back == Some((last_tick, action)) {
            return;
        }
        self.counted_back = Some((last_tick, action));
        let behind_ms = behind * self.config.layout.tick_ms;
        self.metrics.clock_backward.with_label_values(&[action]).inc();
        self.metrics.clock_backward_seconds.observe(behind_ms as f64 / 1000.0);
        if action == ACTION_REFUSED {
            tracing::warn!(behind_ms, "the wall clock stepped back past the wait threshold; refusing to mint");
        } else {
            tracing::info!(behind_ms, "the wall clock stepped back; waiting it out");
        }
    }

    /// Answers the pending requests whose deadline comes before `at` with an error: they
    /// would otherwise wait past it.
    fn expire_before(&mut self, at: Duration, error: impl Fn() -> MintError) {
        let mut kept = VecDeque::with_capacity(self.pending.len());
        for request in self.pending.drain(..) {
            if request.deadline >= at {
                kept.push_back(request);
            } else {
                request.reply.send(Err(error()));
            }
        }
        self.pending = kept;
    }

    /// When idle and minting, wake at the claim's deadline to report not ready.
    fn deadline_wake(&self, holding: &Holding, now: Reading) -> Next {
        match holding.grant().and_then(|g| g.deadline) {
            Some(deadline) if deadline > now.boot => Next::At(deadline),
            _ => Next::Idle,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::SlotGrant;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Replies land in a shared log.
    #[derive(Clone, Default)]
    struct Log(Rc<RefCell<Vec<Result<Ids, MintError>>>>);

    struct Reply(Log);

    impl Responder for Reply {
        fn is_closed(&self) -> bool {
            false
        }
        fn send(self, result: Result<Ids, MintError>) -> bool {
            self.0.0.borrow_mut().push(result);
            true
        }
    }

    const EPOCH: i64 = 1_767_225_600_000;

    fn core() -> MinterCore<Reply> {
        let config = MinterConfig {
            layout: Layout::default_snowmint(),
            max_clock_back: Duration::from_millis(5),
            max_clock_drift: Duration::ZERO,
            max_wait: Duration::from_secs(1),
        };
        MinterCore::new(config, Metrics::new()).unwrap()
    }

    fn reading(wall_ms: i64, boot_ms: u64) -> Reading {
        let boot = Duration::from_millis(boot_ms);
        Reading { wall_us: wall_ms * 1000, boot, awake: boot }
    }

    fn holding(epoch: u64, worker_id: u32, floor_ms: Option<i64>, reserved_ms: i64, deadline_ms: u64) -> Holding {
        Holding::Held(Grant {
            slots: vec![SlotGrant { worker_id, claim: epoch, floor_ms, reserved_ms, resumes: false }],
            epoch,
            deadline: Some(Duration::from_millis(deadline_ms)),
        })
    }

    fn ids(log: &Log) -> Vec<u64> {
        log.0
            .borrow()
            .iter()
            .flat_map(|r| match r {
                Ok(Ids::One(id)) => vec![*id],
                Ok(Ids::Many(ids)) => ids.clone(),
                Err(_) => vec![],
            })
            .collect()
    }

    #[test]
    fn mints_within_the_grant_and_refuses_past_the_deadline() {
        let log = Log::default();
        let mut core = core();
        let held = holding(1, 7, None, EPOCH + 10_000, 5_000);
        core.push(Pending::new(Ask::One, Duration::from_secs(1), Reply(log.clone())));
        core.push(Pending::new(Ask::Many(3), Duration::from_secs(1), Reply(log.clone())));
        assert!(matches!(core.pass(reading(EPOCH + 100, 0), &held), Next::At(_)));
        let minted = ids(&log);
        assert_eq!(minted.len(), 4);
        assert!(minted.windows(2).all(|w| w[0] < w[1]));
        assert!(minted.iter().all(|&id| Layout::default_snowmint().unpack(id).worker == 7));
        // Past the deadline on the boot-time clock: refused, whatever the wall clock says.
        core.push(Pending::new(Ask::One, Duration::from_secs(9), Reply(log.clone())));
        core.pass(reading(EPOCH + 200, 5_000), &held);
        assert_eq!(log.0.borrow().last(), Some(&Err(MintError::LeaseExpired(7))));
        assert_eq!(core.poll_readiness().map(|r| r == Readiness::Serving), Some(false));
    }

    #[test]
    fn a_batch_half_filled_under_one_claim_is_not_continued_under_the_next() {
        let log = Log::default();
        let mut core = core();
        // 4,096 IDs a tick: a batch of 6,000 fills one tick and waits for the next.
        core.push(Pending::new(Ask::Many(6_000), Duration::from_secs(1), Reply(log.clone())));
        core.pass(reading(EPOCH + 100, 0), &holding(1, 7, None, EPOCH + 10_000, 5_000));
        assert!(log.0.borrow().is_empty());
        // The claim changes (slot 7 lost, slot 9 taken) before the next tick.
        core.pass(reading(EPOCH + 101, 1), &holding(2, 9, None, EPOCH + 10_000, 5_000));
        core.pass(reading(EPOCH + 102, 2), &holding(2, 9, None, EPOCH + 10_000, 5_000));
        let minted = ids(&log);
        assert_eq!(minted.len(), 6_000);
        let layout = Layout::default_snowmint();
        assert!(minted.iter().all(|&id| layout.unpack(id).worker == 9), "a response mixed two claims");
        assert!(minted.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_reservation_ending_before_the_epoch_allows_nothing() {
        let log = Log::default();
        let mut core = core();
        let mut held = holding(1, 7, None, EPOCH - 1, 5_000);
        if let Holding::Held(grant) = &mut held {
            grant.deadline = None;
        }
        core.push(Pending::new(Ask::One, Duration::from_secs(1), Reply(log.clone())));
        core.pass(reading(EPOCH, 0), &held);
        assert!(matches!(log.0.borrow()[0], Err(MintError::ReservationBehind { .. })));
    }
}
