//! The minter's decisions, with no I/O: the queue of waiting requests, the generator, and
//! the holding the keeper publishes, turned into replies and the instant to look again.
//!
//! [`MinterCore::pass`] takes one clock reading and serves what it can; what the generator
//! cannot do now becomes a bounded wait (an exhausted sequence, a small step back) or an
//! immediate, retriable refusal. The tokio task ([`super::task`]) and the simulator drive the
//! same core; tests drive it with hand-fed holdings and clock readings.
//!
//! # Who gets the sequence space: fair shares per connection
//!
//! A slot mints 2^sequence_bits IDs per tick (4,096 per ms by default), and a pass hands
//! them out until they run out. Served strictly in arrival order, one caller with 16 batches
//! of 65,536 queued takes every ID of the next 256 ticks, and a `NextId` behind them waits a
//! quarter of a second. So the queue ([`super::fair`]) is **deficit round robin across
//! tenants, then across each tenant's connections, first come first served within one**:
//!
//! - Each tenant ([`Share`]: of the server's policy; every call of a server without one is
//!   of one tenant) with requests waiting takes turns of its weight times the quantum, spent
//!   on its connections in turn as below: a tenant's many connections together get what
//!   another's one gets at the same weight.
//! - Each connection (the peer address of the gRPC call, [`ConnectionKey`]) with requests
//!   waiting takes turns; a turn may take up to a quantum of IDs (`--fair-quantum`, 256 by
//!   default), spent on the connection's requests in arrival order, the last one partly.
//!   A batch that does not fit fills over several turns and ticks.
//! - A turn the tick ends (the sequence ran out) keeps its unspent credit and goes on first
//!   at the next tick: the tick boundary takes nobody's share.
//! - A connection with nothing left to ask leaves the round and keeps no credit, so one that
//!   was quiet cannot come back with a burst of saved-up share.
//!
//! - **A reserve for small asks.** While small asks come (one was served within the last
//!   second), asks larger than a 64th of a tick's IDs take at most the other 63 64ths of
//!   each tick; the rest is kept for small asks (`NextId`, batches of at most that many)
//!   that arrive later in the tick. Without it a saturating bulk client spends every tick's
//!   sequence the moment the tick begins, and a `NextId` arriving at any other moment
//!   waits for the next tick: one caller asking in a loop locks onto the tick and waits a
//!   whole one every call (p50 1.0 ms instead of 0.2 ms: docs/performance.md has the run
//!   with it, CHANGELOG.md's performance history the run without). The reserve left unused
//!   at the end of a tick is not minted: while small callers are about, bulk callers get at
//!   most 63 64ths of the ceiling. It applies only while minting at the clock's tick: on
//!   borrowed time, ahead of a clock that is behind, ticks are not paced by the clock.
//!
//! # Who gets into the queue: answered within its deadline, or refused at once
//!
//! Round robin advances every bulk request together: N connections asking 65,536 IDs each
//! all finish at about 16·N ms. Once that is past their deadline (from 63 connections with
//! 1 s deadlines, from 13 with 200 ms), every batch would be refused at its deadline after
//! most of its IDs were minted and thrown away, asked again, and refused again: no goodput at
//! all. So the first pass that sees a request admits it into the queue, or answers it at
//! once, with nothing minted for it (`admit`):
//!
//! - A request whose deadline has passed (it waited to be handed over, or the minter was
//!   late) is refused (`Deadline`); so is a queued one once its deadline passes: nothing is
//!   minted for a request past its deadline.
//! - A large ask (more IDs than the reserve) is admitted only if the IDs still owed to every
//!   large ask queued, and its own, would all be minted before the earliest of their deadlines,
//!   at the rate ticks give large asks (the sequence space times the slots, less the reserve),
//!   within 3/4 of the time left (`ADMIT_WITHIN`, for ticks lost on a loaded machine and
//!   small asks beyond the reserve). Otherwise it is refused `Saturated`, a retriable
//!   `UNAVAILABLE` that gives the wait it would need and the time left. The queue is
//!   work-conserving (each tick's IDs go to whoever waits, in whatever order), so once every
//!   ID owed is minted every admitted ask is done: each is answered in time whatever the
//!   round robin's order among them.
//! - Small asks are admitted whatever waits: the reserve serves them, and large asks never
//!   take it.
//!
//! Goodput stays at the ceiling with any number of bulk connections: the minter mints only
//! for requests it will answer, and is never idle while an admitted one waits; those refused
//! cost a round trip each and ask again (here shortly, or elsewhere). Earliest deadline first
//! would admit more, since it finishes each request as early as it can, but it orders by
//! deadline rather than by connection: a caller with short deadlines would take the ticks of
//! the others, and the shares per connection above would be gone. Admission keeps the round
//! robin and bounds the work where it comes in. Its price is caution: it asks that the whole
//! large backlog fit before the earliest deadline, so a batch the round robin would have
//! finished in time can be refused while one near its deadline waits.
//!
//! What the fair queue gives, and why this policy rather than another:
//!
//! - A small ask is answered at once while the tick's reserve lasts, and otherwise waits for
//!   at most one round, which is at most a quantum per other waiting connection: a `NextId`
//!   beside a saturating bulk client is answered in the same tick, not after the bulk
//!   client's queue. Shortest-first would do as well for the `NextId`, but starves a
//!   mid-sized batch behind a stream of small ones; DRR starves nobody.
//! - A lone connection gets every ID of every tick, at no cost: with one flow the round
//!   is that flow, and its turns follow one another within the same pass (and with no
//!   small asks about, no reserve is kept).
//! - Between bulk callers, the share is per connection and counted in IDs, not in requests:
//!   a caller asking 65,536 at a time gets the same IDs per tick as one asking 4,096, and
//!   more requests in flight buy no more share. Per request (or first come first served) a
//!   caller would buy share with concurrency.
//! - Within a connection the order is arrival order: a caller that mixes bulk batches and
//!   single IDs on one connection waits for its own batches (give the bulk work its own
//!   channel). It keeps each connection's requests answered in the order sent.
//! - The quantum: small enough that a round over a handful of connections fits in one tick
//!   (with 256, sixteen bulk connections are each served every tick; with a tick's worth,
//!   the tick goes to one connection at a time), large enough that a round is not mostly
//!   bookkeeping (a turn costs one generator fill). Measured with 16, 256 and 4,096, the
//!   differences in latency and throughput were within the machine's drift
//!   (docs/performance.md), so the choice rests on that reasoning; small asks do not depend
//!   on it, they are served from the reserve.
//!
//! Uniqueness and order do not depend on the policy: every ID comes from the one generator,
//! whose cursor only moves up, so whichever request takes the next IDs, each response is
//! strictly increasing and no two share an ID. Only the order in which requests leave
//! changes.

use std::time::Duration;

use super::error::{MintError, Readiness};
use super::event::{ArrivalRefusal, ClockBackAction, Event, Method, Tally};
pub use super::fair::{ConnectionKey, Share};
use super::fair::{FairQueue, Round, Turn};
use crate::generator::{Blocked, Generator, RefuseReason, WaitReason, Window};
use crate::grant::{Grant, Holding, Minted};
use crate::layout::{Layout, LayoutError, Slot, rfc3339_ms};

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
    /// Whose turn it waits for.
    connection: ConnectionKey,
    /// Its tenant's share, beside its connection's.
    share: Share,
    /// Boot-time instant at which it was asked for, to measure its wait.
    asked: Duration,
    /// Boot-time instant by which it must be answered.
    deadline: Duration,
    /// A batch's IDs so far, while it spans several ticks.
    filled: Vec<u64>,
    /// A single ID, once minted.
    one: Option<u64>,
    /// The grant generation `filled` was minted under.
    generation: u64,
    reply: R,
}

impl<R> Pending<R> {
    /// A request from `connection`, asked at boot-time instant `asked`, to be answered by
    /// `deadline`.
    pub fn new(ask: Ask, connection: ConnectionKey, asked: Duration, deadline: Duration, reply: R) -> Pending<R> {
        let filled = match ask {
            Ask::Many(n) => Vec::with_capacity(n),
            Ask::One => Vec::new(),
        };
        Pending { ask, connection, share: Share::NONE, asked, deadline, filled, one: None, generation: 0, reply }
    }

    pub fn connection(&self) -> ConnectionKey {
        self.connection
    }

    /// The request as its tenant's, sharing a busy minter by `share`.
    pub fn with_share(self, share: Share) -> Pending<R> {
        Pending { share, ..self }
    }

    pub fn share(&self) -> Share {
        self.share
    }

    /// Whether it holds every ID it asked for.
    pub fn is_complete(&self) -> bool {
        match self.ask {
            Ask::One => self.one.is_some(),
            Ask::Many(want) => self.filled.len() >= want,
        }
    }

    /// IDs minted for it so far.
    fn minted(&self) -> u64 {
        self.filled.len() as u64 + u64::from(self.one.is_some())
    }

    /// IDs it still waits for.
    fn owed(&self) -> u64 {
        match self.ask {
            Ask::One => u64::from(self.one.is_none()),
            Ask::Many(want) => want.saturating_sub(self.filled.len()) as u64,
        }
    }

    /// The method it answers, for its queue wait.
    fn method(&self) -> Method {
        match self.ask {
            Ask::One => Method::NextId,
            Ask::Many(_) => Method::BatchIds,
        }
    }
}

impl<R: Responder> Pending<R> {
    pub(super) fn reply_closed(&self) -> bool {
        self.reply.is_closed()
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
    /// IDs a connection takes per turn while several wait (see the module doc).
    pub fair_quantum: usize,
}

/// The default of [`MinterConfig::fair_quantum`] (`--fair-quantum`).
pub const FAIR_QUANTUM: usize = 256;

/// The share of each tick's IDs kept for small asks while any are about: a 64th (64 of
/// 4,096 by default). Asks of at most this many IDs are small.
const RESERVE_SHARE: u64 = 64;

/// How long, in ticks, a small ask keeps the reserve in place after it was served.
const SMALL_ASKS_LINGER: u64 = 1_000;

/// Whether `ask` is small: served from the tick's reserve, and admitted whatever the large
/// asks queued.
fn is_small(ask: Ask, reserve: u64) -> bool {
    match ask {
        Ask::One => true,
        Ask::Many(want) => want as u64 <= reserve,
    }
}

/// The margin of admission, as a fraction: the large asks queued must be minted within this
/// share of the time to the earliest of their deadlines, at the rate a tick allows them. It
/// absorbs ticks the minter is not scheduled for on a loaded machine (each one lost), and
/// small asks beyond the reserve.
const ADMIT_WITHIN: (u64, u64) = (3, 4);

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
    generator: Generator,
    /// The generation of the grant the generator's windows come from.
    generation: Option<u64>,
    pending: FairQueue<R>,
    /// Requests pushed since the last pass, which admits them into `pending` or refuses them
    /// with its clock reading.
    arrived: Vec<Pending<R>>,
    /// No request in `pending` has a deadline before this instant: a pass looks for those
    /// whose deadline has passed only once it is later.
    deadlines_from: Duration,
    replies: Replies,
    /// Changes of state not yet polled.
    events: std::collections::VecDeque<Event>,
    /// The boot-time instant of the last pass, to measure the waits of requests answered
    /// between passes (at shutdown).
    last_boot: Duration,
    readiness: Readiness,
    readiness_changed: bool,
    /// Whether the minting time is ahead of the wall clock (borrowing), to log the start
    /// and the end of it once each.
    borrowing: bool,
    /// How far the minting time is ahead of the wall clock, ms, as of the last pass.
    drift_ms: i64,
    /// The last tick and action a clock step back was counted for, so one step counts once.
    counted_back: Option<(u64, ClockBackAction)>,
    /// When the sequence last ran out, to add the wait to its counter once it is over.
    exhausted_since: Option<Duration>,
    /// The minter is past its reservation and asks the keeper to extend it now.
    wants_extension: bool,
    /// Requests were refused in this pass because their deadlines had passed: at the
    /// reservation's end, they were callers refused for it, and readiness says so.
    expired_in_pass: bool,
    /// The tick minted at last, and how many IDs large asks took in it.
    tick_taken: (u64, u64),
    /// The last tick a small ask was served in: the reserve stays while they come.
    small_served: Option<u64>,
    /// Why the store refuses this instance's writes, while it says so (an etcd alarm): given
    /// with the refusals the store causes.
    store_trouble: Option<String>,
}

impl<R: Responder> MinterCore<R> {
    /// A core whose hot-path counts go to `tally`.
    pub fn new(config: MinterConfig, tally: Box<dyn Tally>) -> Result<MinterCore<R>, LayoutError> {
        let ticks = |d: Duration| (d.as_millis() as u64) / config.layout.tick_ms;
        let generator =
            Generator::new(config.layout.clone(), ticks(config.max_clock_back), ticks(config.max_clock_drift))?;
        Ok(MinterCore {
            pending: FairQueue::new(config.fair_quantum),
            config,
            generator,
            generation: None,
            arrived: Vec::new(),
            deadlines_from: Duration::MAX,
            replies: Replies { tally },
            events: std::collections::VecDeque::new(),
            last_boot: Duration::ZERO,
            readiness: Readiness::NotServing(MintError::NoWorker("starting".into())),
            readiness_changed: false,
            borrowing: false,
            drift_ms: 0,
            counted_back: None,
            exhausted_since: None,
            wants_extension: false,
            expired_in_pass: false,
            tick_taken: (0, 0),
            small_served: None,
            store_trouble: None,
        })
    }

    /// Hands a request to the minter; the next pass admits it, or refuses it at once.
    pub fn push(&mut self, pending: Pending<R>) {
        self.arrived.push(pending);
    }

    /// Requests waiting.
    pub fn queue_length(&self) -> usize {
        self.pending.len() + self.arrived.len()
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty() || !self.arrived.is_empty()
    }

    /// Why the store refuses writes, as it says (an etcd alarm explained), or `None`.
    pub fn set_store_trouble(&mut self, why: Option<String>) {
        self.store_trouble = why;
    }

    /// `error`, with the store's own word on why, when it is a refusal the store causes and
    /// the store says why it refuses.
    fn blame_store(&self, error: MintError) -> MintError {
        match (&self.store_trouble, &error) {
            (Some(why), MintError::NoWorker(_) | MintError::LeaseExpired(_) | MintError::ReservationBehind { .. }) => {
                MintError::StoreRefuses { refusal: Box::new(error), why: why.clone() }
            }
            _ => error,
        }
    }

    /// The next change of state, in order.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether minting serves now (as of the last pass).
    pub fn serving(&self) -> bool {
        self.readiness == Readiness::Serving
    }

    /// How far the minting time is ahead of the wall clock, as of the last pass, in ms.
    pub fn drift_ms(&self) -> i64 {
        self.drift_ms
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
        Minted::UpTo(self.generator.last_ticks().map(|(slot, tick)| (slot, layout.tick_end_ms(tick))).collect())
    }

    /// The minting time: the end of the last tick minted, Unix ms.
    pub fn mint_ms(&self) -> Option<i64> {
        self.generator.last().map(|last| self.config.layout.tick_end_ms(last.tick))
    }

    /// Answers every pending request with `error`.
    pub fn refuse_all(&mut self, error: MintError) {
        let now = self.last_boot;
        for request in self.pending.drain().chain(self.arrived.drain(..)) {
            self.replies.send(now, request, Err(error.clone()));
        }
        self.deadlines_from = Duration::MAX;
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
            self.events.push_back(match &readiness {
                Readiness::Serving => Event::Minting,
                Readiness::NotServing(why) => Event::Refusing { why: why.clone() },
            });
        }
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
        self.drift_ms = drift_ms;
        let borrowing = drift_ms > 0 && (self.borrowing || (minted && !self.config.max_clock_drift.is_zero()));
        if borrowing != self.borrowing {
            self.borrowing = borrowing;
            self.events.push_back(if borrowing {
                Event::BorrowingStarted { drift_ms, bound_ms: self.config.max_clock_drift.as_millis() as u64 }
            } else {
                Event::BorrowingEnded
            });
        }
    }

    /// Brings the generator in line with the holding; `Err` when minting must refuse.
    fn sync_holding(&mut self, holding: &Holding, now: Reading) -> Result<(), MintError> {
        let grant: &Grant = match holding {
            Holding::Unheld { reason } => return Err(MintError::NoWorker(reason.clone())),
            Holding::Held(grant) => grant,
        };
        let first = grant.slots.first().map_or(0, |s| s.slot);
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
                    slot: slot.slot,
                    reserved_until: rfc3339_ms(slot.reserved_ms),
                });
            };
            // Invariant 2: only ticks above the floor the keeper gives are minted, for a claim
            // that resumes too (its floor is that of the claim it continues, which the keeper
            // knows and this minter may never have seen). This process's own IDs need no
            // floor: the generator's cursor only moves up. A floor before the epoch cannot
            // have been minted at: no floor then.
            let floor = slot.floor_ms.and_then(|ms| layout.tick_at(ms));
            windows.push(Window { slot: slot.slot, floor, reserved });
        }
        if self.generation == Some(grant.generation) {
            for window in &windows {
                self.generator.extend_reservation(window.slot, window.reserved);
            }
            return Ok(());
        }
        self.generator.set_windows(&windows);
        self.generation = Some(grant.generation);
        // Invariant 8: a batch half filled under the old claims is dropped, never continued.
        for request in self.pending.iter_mut() {
            if request.generation != grant.generation {
                request.filled.clear();
                request.one = None;
                request.generation = grant.generation;
            }
        }
        let slots: Vec<Slot> = grant.slots.iter().map(|s| s.slot).collect();
        self.events.push_back(Event::MintingFor { slots, generation: grant.generation });
        Ok(())
    }

    /// Serves what can be served at `now`, and says when to look again.
    pub fn pass(&mut self, now: Reading, holding: &Holding) -> Next {
        self.last_boot = now.boot;
        self.serve(now, holding)
    }

    fn serve(&mut self, now: Reading, holding: &Holding) -> Next {
        self.expired_in_pass = false;
        let now_ms = now.wall_us.div_euclid(1000);
        if let Err(error) = self.sync_holding(holding, now) {
            self.refuse_all(self.blame_store(error));
            return Next::Idle;
        }
        let tick = match self.tick_at(now, now_ms) {
            Ok(tick) => tick,
            Err(next) => return next,
        };
        let (round, minted) = self.mint_round(now, holding, tick);
        let (blocked, held) = match round {
            Round::Empty => (None, false),
            Round::Held => (None, true),
            Round::Blocked(why) => (Some(why), false),
        };
        self.note_drift(now_ms, minted);
        if self.exhausted_since.is_some()
            && !matches!(blocked, Some(Blocked::WaitUntil { reason: WaitReason::SequenceExhausted, .. }))
        {
            let since = self.exhausted_since.take().expect("checked");
            self.events.push_back(Event::SequenceWaited { waited: now.boot.saturating_sub(since) });
        }
        // With nothing pending, ask the generator whether a request would be refused now.
        let blocked = blocked.or_else(|| self.generator.probe(tick));
        match blocked {
            None if held => {
                // Large asks wait for the next tick; the rest of this one is for small asks.
                self.set_readiness(Readiness::Serving);
                let at = self.instant_of_tick(tick + 1, now);
                self.expire_before(at, || MintError::Deadline(format!("waiting for tick {}", tick + 1)));
                Next::At(at)
            }
            None => {
                self.set_readiness(Readiness::Serving);
                self.deadline_wake(holding, now)
            }
            Some(Blocked::WaitUntil { tick: until, reason }) => self.wait_until(now, until, reason),
            Some(Blocked::Refuse { behind, resume, reason }) => {
                self.refuse_behind(now, holding, behind, resume, reason)
            }
            Some(Blocked::Fenced { reserved, .. }) => self.wait_for_reservation(now, holding, reserved),
            Some(Blocked::NoSlot) => {
                self.refuse_all(MintError::NoWorker("no slot is held".into()));
                Next::Idle
            }
        }
    }

    /// The layout's tick at `now`, or what to do when there is none to mint at: before the
    /// epoch (look again later) or past the layout's last tick (refuse for good).
    fn tick_at(&mut self, now: Reading, now_ms: i64) -> Result<u64, Next> {
        let layout = &self.config.layout;
        match layout.tick_at(now_ms) {
            Some(tick) if tick <= layout.max_tick() => Ok(tick),
            Some(_) => {
                let error = MintError::LayoutExhausted { expiry: rfc3339_ms(layout.expiry_ms()) };
                self.refuse_all(error);
                Err(Next::Idle)
            }
            None => {
                self.refuse_all(MintError::BeforeEpoch { now: rfc3339_ms(now_ms) });
                Err(Next::At(now.boot + RECHECK))
            }
        }
    }

    /// One round of the fair queue at `tick`: admits what arrived, mints for each request
    /// its turn's share, and answers the complete ones. Says how the round ended and whether
    /// anything was issued.
    fn mint_round(&mut self, now: Reading, holding: &Holding, tick: u64) -> (Round<Blocked>, bool) {
        let generation = self.generation.unwrap_or(0);
        let mut minted = false;
        // Of each tick's IDs, a reserve is kept from large asks while small ones come, so a
        // small ask arriving after a bulk caller took its share of the tick is served at once.
        let slots = holding.grant().map_or(1, |grant| grant.slots.len().max(1)) as u64;
        let capacity = (self.config.layout.max_sequence() + 1).saturating_mul(slots);
        let reserve = capacity / RESERVE_SHARE;
        // Nothing is minted for a request whose deadline has passed.
        if self.deadlines_from < now.boot {
            self.expire_before(now.boot, || MintError::Deadline("it passed before its batch was full".into()));
        }
        self.admit(now.boot, capacity - reserve, reserve);
        if self.tick_taken.0 != tick {
            self.tick_taken = (tick, 0);
        }
        let large_room = capacity.saturating_sub(reserve);
        let (taken, small_served) = (&mut self.tick_taken.1, &mut self.small_served);
        let generator = &mut self.generator;
        let replies = &self.replies;
        let round = self.pending.serve(
            |request, budget| {
                request.generation = generation;
                match request.ask {
                    Ask::One => match generator.next_id(tick) {
                        Ok(id) => {
                            request.one = Some(id);
                            *small_served = Some(tick);
                            Turn::Gave(1)
                        }
                        Err(why) => Turn::Blocked(0, why),
                    },
                    Ask::Many(want) => {
                        let small = is_small(request.ask, reserve);
                        let mut budget = budget;
                        // From the first small ask served on, in this pass too; and only
                        // while minting at the clock's tick: ahead of a clock that is behind
                        // (borrowed time) ticks are not paced by the clock, and a cap per
                        // clock tick would hold large asks until the clock moves.
                        let reserving = small_served.is_some_and(|t| tick.saturating_sub(t) <= SMALL_ASKS_LINGER);
                        let ahead = generator.last().is_some_and(|last| last.tick > tick);
                        if !small && reserve > 0 && reserving && !ahead {
                            let room = large_room.saturating_sub(*taken) as usize;
                            if room == 0 {
                                return Turn::Held;
                            }
                            budget = budget.min(room);
                        }
                        let before = request.filled.len();
                        let upto = want.min(before.saturating_add(budget));
                        let result = generator.fill(tick, &mut request.filled, upto);
                        let gave = request.filled.len() - before;
                        if small {
                            *small_served = Some(tick);
                        } else {
                            *taken += gave as u64;
                        }
                        match result {
                            Ok(()) => Turn::Gave(gave),
                            Err(why) => Turn::Blocked(gave, why),
                        }
                    }
                }
            },
            |mut request| {
                if !request.is_complete() {
                    // Its caller has gone: what was minted for it is never issued.
                    replies.discard(&request);
                    return;
                }
                let ids = match request.ask {
                    Ask::One => Ids::One(request.one.take().expect("a complete NextId holds its ID")),
                    Ask::Many(_) => Ids::Many(std::mem::take(&mut request.filled)),
                };
                let count = match &ids {
                    Ids::One(_) => 1,
                    Ids::Many(ids) => ids.len() as u64,
                };
                if replies.send(now.boot, request, Ok(ids)) {
                    replies.tally.issued(count);
                }
                minted = true;
            },
        );
        (round, minted)
    }

    /// The generator waits for `until`: for the sequence to roll over or a small step back
    /// of the clock to pass. Callers whose deadlines come first are refused now.
    fn wait_until(&mut self, now: Reading, until: u64, reason: WaitReason) -> Next {
        match reason {
            WaitReason::SequenceExhausted if self.has_pending() && self.exhausted_since.is_none() => {
                self.events.push_back(Event::SequenceExhausted);
                self.exhausted_since = Some(now.boot);
            }
            WaitReason::ClockBehind { behind } if self.has_pending() => {
                let last_tick = self.generator.last().map_or(0, |l| l.tick);
                self.count_step_back(last_tick, behind, ClockBackAction::Waited)
            }
            _ => {}
        }
        self.set_readiness(Readiness::Serving);
        let at = self.instant_of_tick(until, now);
        self.expire_before(at, || MintError::Deadline(format!("waiting for tick {until}")));
        Next::At(at)
    }

    /// The clock is behind what was minted or below the floor by more than the generator may
    /// wait: every caller is refused, with the reason and when minting should resume.
    fn refuse_behind(
        &mut self,
        now: Reading,
        holding: &Holding,
        behind: u64,
        resume: u64,
        reason: RefuseReason,
    ) -> Next {
        let layout = self.config.layout.clone();
        let behind_ms = behind * layout.tick_ms;
        let error = match reason {
            RefuseReason::ClockStepBack { last_tick } => {
                self.count_step_back(last_tick, behind, ClockBackAction::Refused);
                MintError::ClockBehind { behind_ms, resume_at: rfc3339_ms(layout.tick_start_ms(resume)) }
            }
            RefuseReason::BelowFloor { floor } => {
                let fenced = holding.grant().and_then(|g| g.slots.iter().find(|s| s.fenced.is_some()));
                match fenced {
                    Some(slot) => MintError::Fenced {
                        slot: slot.slot,
                        until: rfc3339_ms(layout.tick_end_ms(floor)),
                        behind_ms,
                        reason: slot.fenced.clone().unwrap_or_default(),
                    },
                    None => MintError::BelowFloor {
                        slot: self.first_slot(holding),
                        floor: rfc3339_ms(layout.tick_end_ms(floor)),
                        behind_ms,
                    },
                }
            }
        };
        self.refuse_all(error);
        // Wake when the clock should have come back, to report ready again; look
        // sooner too, in case the clock is corrected forward in the meantime.
        Next::At(self.instant_of_tick(resume, now).min(now.boot + RECHECK))
    }

    /// The reservation does not reach the tick: minting waits for the keeper's write, asks for
    /// it, and refuses callers who cannot wait (or nothing, when idle on demand).
    fn wait_for_reservation(&mut self, now: Reading, holding: &Holding, reserved: u64) -> Next {
        let on_demand = holding.grant().is_some_and(|g| g.on_demand);
        if self.pending.is_empty() && on_demand && !self.expired_in_pass {
            // Idle: the keeper left the reservations to lapse, and extends them when
            // a request comes. Nothing is wrong, and nothing to ask for yet.
            self.set_readiness(Readiness::Serving);
            return Next::Idle;
        }
        self.wants_extension = true;
        let error = self.blame_store(MintError::ReservationBehind {
            slot: self.first_slot(holding),
            reserved_until: rfc3339_ms(self.config.layout.tick_end_ms(reserved)),
        });
        if self.pending.is_empty() {
            self.set_readiness(Readiness::NotServing(error));
            return Next::Idle;
        }
        // A reservation write is under way: wait for it (the holding changes), but
        // no longer than the callers' deadlines.
        let at = now.boot + FENCE_WAIT;
        let waiting = self.pending.len();
        self.expire_before(at, || error.clone());
        if self.pending.len() < waiting {
            // A caller was refused for it: minting refuses, say so (health, the
            // gauge, /readyz), however many others still wait for the write.
            self.set_readiness(Readiness::NotServing(error));
        }
        Next::At(at)
    }

    fn first_slot(&self, holding: &Holding) -> Slot {
        holding.grant().and_then(|g| g.slots.first()).map_or(0, |s| s.slot)
    }

    /// Counts a clock step back once per last tick and action.
    fn count_step_back(&mut self, last_tick: u64, behind: u64, action: ClockBackAction) {
        if self.counted_back == Some((last_tick, action)) {
            return;
        }
        self.counted_back = Some((last_tick, action));
        let behind_ms = behind * self.config.layout.tick_ms;
        self.events.push_back(Event::ClockBack { behind_ms, action });
    }

    /// Answers the pending requests whose deadline comes before `at` with an error: they
    /// would otherwise wait past it.
    fn expire_before(&mut self, at: Duration, error: impl Fn() -> MintError) {
        let (replies, now) = (&self.replies, self.last_boot);
        let waiting = self.pending.len();
        self.pending.retain(
            |request| request.deadline >= at,
            |request| {
                replies.send(now, request, Err(error()));
            },
        );
        self.expired_in_pass |= self.pending.len() < waiting;
        self.deadlines_from = self.deadlines_from.max(at);
    }

    /// Takes the requests that arrived since the last pass into the queue, or answers them at
    /// once, with nothing minted for them: one whose deadline has passed, and a large ask that
    /// could not be minted, with the large asks queued before it, by the earliest of their
    /// deadlines (the module doc says why). Large asks may take `per_tick` IDs a tick; asks of
    /// at most `reserve` IDs are small.
    fn admit(&mut self, now: Duration, per_tick: u64, reserve: u64) {
        if self.arrived.is_empty() {
            return;
        }
        let tick = Duration::from_millis(self.config.layout.tick_ms);
        let mut arrived = std::mem::take(&mut self.arrived);
        // Read off the queue once, at the first large ask.
        let mut backlog: Option<Backlog> = None;
        for request in arrived.drain(..) {
            let refused = if request.deadline < now {
                Some((
                    ArrivalRefusal::Deadline,
                    MintError::Deadline("it had passed when the minter reached the call".into()),
                ))
            } else if is_small(request.ask, reserve) {
                None
            } else {
                let backlog = backlog.get_or_insert_with(|| Backlog::of(&self.pending, reserve));
                backlog
                    .admit(request.owed(), request.deadline, now, per_tick, tick)
                    .err()
                    .map(|error| (ArrivalRefusal::Saturated, error))
            };
            match refused {
                Some((reason, error)) => {
                    self.replies.tally.refused_on_arrival(reason);
                    self.replies.send(now, request, Err(error));
                }
                None => {
                    self.deadlines_from = self.deadlines_from.min(request.deadline);
                    self.pending.push(request);
                }
            }
        }
        // The allocation is kept for the next arrivals.
        self.arrived = arrived;
    }

    /// When idle and minting, wake at the claim's deadline to report not ready.
    fn deadline_wake(&self, holding: &Holding, now: Reading) -> Next {
        match holding.grant().and_then(|g| g.deadline) {
            Some(deadline) if deadline > now.boot => Next::At(deadline),
            _ => Next::Idle,
        }
    }
}

/// Where answers go out, and what is counted of each.
struct Replies {
    tally: Box<dyn Tally>,
}

impl Replies {
    /// Sends `request` its answer and records how long it waited, from its asking to `now`;
    /// `false` when the caller has gone. What was minted for it and not sent is counted as
    /// discarded.
    fn send<R: Responder>(&self, now: Duration, request: Pending<R>, result: Result<Ids, MintError>) -> bool {
        self.tally.answered(request.method(), now.saturating_sub(request.asked));
        let sending = match &result {
            Ok(Ids::One(_)) => 1,
            Ok(Ids::Many(ids)) => ids.len() as u64,
            Err(_) => 0,
        };
        let kept = request.minted();
        let sent = request.reply.send(result);
        let discarded = kept + if sent { 0 } else { sending };
        if discarded > 0 {
            self.tally.discarded(discarded);
        }
        sent
    }

    /// Counts what was minted for `request`, whose caller has gone, as discarded.
    fn discard<R>(&self, request: &Pending<R>) {
        self.tally.discarded(request.minted());
    }
}

/// The large asks queued: the IDs still owed to them, and the earliest of their deadlines.
///
/// Admission keeps the promise "answered within its deadline, or refused at once": the queue
/// is work-conserving (a tick's IDs go to whoever waits), so every queued large ask is done
/// once all their IDs are minted, whatever the order among connections. A large ask is
/// admitted only if the IDs owed to every large ask queued, and its own, would be minted
/// within [`ADMIT_WITHIN`] of the time to the earliest of their deadlines.
struct Backlog {
    owed: u64,
    earliest: Option<Duration>,
}

impl Backlog {
    /// The large asks of `queue` (those of more than `reserve` IDs).
    fn of<R: Responder>(queue: &FairQueue<R>, reserve: u64) -> Backlog {
        let mut backlog = Backlog { owed: 0, earliest: None };
        for request in queue.iter().filter(|request| !is_small(request.ask, reserve)) {
            backlog.owed += request.owed();
            backlog.earliest = Some(backlog.earliest.map_or(request.deadline, |e| e.min(request.deadline)));
        }
        backlog
    }

    /// Adds a large ask of `ids` IDs due by `deadline`, if it and every one already in would
    /// be minted in time at `per_tick` IDs a `tick` from `now`; otherwise why not.
    fn admit(
        &mut self,
        ids: u64,
        deadline: Duration,
        now: Duration,
        per_tick: u64,
        tick: Duration,
    ) -> Result<(), MintError> {
        let earliest = self.earliest.map_or(deadline, |e| e.min(deadline));
        let owed = self.owed.saturating_add(ids);
        // One tick more: the one under way may be spent already.
        let ticks = owed.div_ceil(per_tick.max(1)).saturating_add(1);
        let (share, of) = ADMIT_WITHIN;
        let wait_ns = (tick.as_nanos() as u64).saturating_mul(ticks).saturating_mul(of) / share;
        let wait = Duration::from_nanos(wait_ns);
        if now.saturating_add(wait) > earliest {
            return Err(MintError::Saturated {
                ids,
                queued: self.owed,
                wait_ms: wait.as_millis() as u64,
                within_ms: earliest.saturating_sub(now).as_millis() as u64,
            });
        }
        self.owed = owed;
        self.earliest = Some(earliest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::SlotGrant;
    use crate::minter::event::NoTally;
    use std::cell::RefCell;
    use std::collections::BTreeMap;
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
            fair_quantum: FAIR_QUANTUM,
        };
        MinterCore::new(config, Box::new(NoTally)).unwrap()
    }

    /// A request from connection 1, asked at boot time 0.
    fn ask(ask: Ask, deadline: Duration, log: &Log) -> Pending<Reply> {
        Pending::new(ask, ConnectionKey(1), Duration::ZERO, deadline, Reply(log.clone()))
    }

    fn reading(wall_ms: i64, boot_ms: u64) -> Reading {
        let boot = Duration::from_millis(boot_ms);
        Reading { wall_us: wall_ms * 1000, boot, awake: boot }
    }

    fn holding(generation: u64, slot: Slot, floor_ms: Option<i64>, reserved_ms: i64, deadline_ms: u64) -> Holding {
        Holding::Held(Grant {
            slots: vec![SlotGrant { slot, claim: generation, floor_ms, reserved_ms, resumes: false, fenced: None }],
            generation,
            deadline: Some(Duration::from_millis(deadline_ms)),
            session: None,
            on_demand: false,
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
        core.push(ask(Ask::One, Duration::from_secs(1), &log));
        core.push(ask(Ask::Many(3), Duration::from_secs(1), &log));
        assert!(matches!(core.pass(reading(EPOCH + 100, 0), &held), Next::At(_)));
        let minted = ids(&log);
        assert_eq!(minted.len(), 4);
        assert!(minted.windows(2).all(|w| w[0] < w[1]));
        assert!(minted.iter().all(|&id| Layout::default_snowmint().unpack(id).worker == 7));
        // Past the deadline on the boot-time clock: refused, whatever the wall clock says.
        core.push(ask(Ask::One, Duration::from_secs(9), &log));
        core.pass(reading(EPOCH + 200, 5_000), &held);
        assert_eq!(log.0.borrow().last(), Some(&Err(MintError::LeaseExpired(7))));
        assert_eq!(core.poll_readiness().map(|r| r == Readiness::Serving), Some(false));
    }

    /// Issue 23: an idle instance's reservation lapses. Past it with nothing to mint, the
    /// minter stays ready and asks for nothing (asking would end the idleness); a request
    /// asks for one extension, waits for it, and is answered once it comes.
    #[test]
    fn past_a_lapsed_reservation_an_idle_minter_stays_ready_and_asks_when_a_request_comes() {
        let log = Log::default();
        let mut core = core();
        let lapsed = match holding(1, 7, None, EPOCH + 1_000, 60_000) {
            Holding::Held(grant) => Holding::Held(Grant { on_demand: true, ..grant }),
            unheld => unheld,
        };
        assert!(matches!(core.pass(reading(EPOCH + 5_000, 0), &lapsed), Next::Idle));
        assert!(!core.take_extension_wish(), "an idle minter asked for an extension");
        assert_eq!(core.poll_readiness(), Some(Readiness::Serving), "an idle instance is not ready");

        core.push(ask(Ask::One, Duration::from_secs(1), &log));
        assert!(matches!(core.pass(reading(EPOCH + 5_000, 10), &lapsed), Next::At(_)));
        assert!(core.take_extension_wish(), "a request past the lapsed reservation asks for none");
        assert!(ids(&log).is_empty(), "minted past the reservation");
        // The keeper extends it: the request is answered.
        let extended = holding(1, 7, None, EPOCH + 8_000, 60_000);
        core.pass(reading(EPOCH + 5_000, 15), &extended);
        assert_eq!(ids(&log).len(), 1);

        // Not idle (the keeper should have extended it): past it, the minter is not ready.
        let mut core = self::core();
        core.pass(reading(EPOCH + 5_000, 0), &holding(1, 7, None, EPOCH + 1_000, 60_000));
        assert!(core.take_extension_wish());
        assert!(matches!(core.poll_readiness(), Some(Readiness::NotServing(MintError::ReservationBehind { .. }))));
    }

    /// A caller waiting past an idle instance's lapsed reservation, whose deadline passes
    /// before the minter's next pass (a loaded machine), is refused for its deadline in that
    /// pass; the instance, left with nothing pending, is then not ready, as it is when a
    /// caller is refused for the reservation itself.
    #[test]
    fn a_caller_whose_deadline_passed_waiting_for_the_reservation_leaves_the_minter_not_ready() {
        let log = Log::default();
        let mut core = core();
        let lapsed = match holding(1, 7, None, EPOCH + 1_000, 60_000) {
            Holding::Held(grant) => Holding::Held(Grant { on_demand: true, ..grant }),
            unheld => unheld,
        };
        core.pass(reading(EPOCH + 5_000, 0), &lapsed);
        assert_eq!(core.poll_readiness(), Some(Readiness::Serving));
        core.push(ask(Ask::One, Duration::from_millis(100), &log));
        assert!(matches!(core.pass(reading(EPOCH + 5_000, 10), &lapsed), Next::At(_)));
        // The next pass comes late, past the caller's deadline.
        core.pass(reading(EPOCH + 5_500, 500), &lapsed);
        assert!(matches!(log.0.borrow().last(), Some(Err(MintError::Deadline(_)))), "{:?}", log.0.borrow());
        assert!(matches!(core.poll_readiness(), Some(Readiness::NotServing(MintError::ReservationBehind { .. }))));
    }

    /// A claim that resumes is minted above the floor the
    /// keeper gives with it (the floor of the claim whose reservation it continues), never
    /// above the floor of an older claim this minter happened to see. Here the minter saw
    /// claim 1 (no floor) and missed claim 2, whose floor was the end of B's range (9,000);
    /// claim 3 resumes claim 2's write. With A's clock at 6,000, below B's range, nothing at
    /// or below 9,000 may be minted.
    #[test]
    fn a_resumed_claim_is_minted_above_the_floor_it_is_given() {
        let log = Log::default();
        let mut core = core();
        let layout = Layout::default_snowmint();
        core.push(ask(Ask::One, Duration::from_secs(1), &log));
        core.pass(reading(EPOCH + 1_000, 0), &holding(1, 7, None, EPOCH + 2_000, 5_000));
        assert_eq!(ids(&log).len(), 1, "claim 1 mints");
        // B minted on slot 7 up to EPOCH + 9,000; A re-claimed it (claim 2, floor 9,000, unseen
        // here), wrote EPOCH + 12,000, lost it, and re-claims it: claim 3 resumes.
        let resumed = Holding::Held(Grant {
            slots: vec![SlotGrant {
                slot: 7,
                claim: 3,
                floor_ms: Some(EPOCH + 9_000),
                reserved_ms: EPOCH + 12_000,
                resumes: true,
                fenced: None,
            }],
            generation: 3,
            deadline: Some(Duration::from_millis(20_000)),
            session: None,
            on_demand: false,
        });
        for step in 0..4 {
            core.push(ask(Ask::Many(8), Duration::from_secs(19), &log));
            core.pass(reading(EPOCH + 6_000 + step, 10_000 + step as u64), &resumed);
        }
        for id in ids(&log).into_iter().skip(1) {
            let tick = layout.unpack(id).tick;
            assert!(tick > 9_000, "minted at tick {tick}, inside the range another holder minted");
        }
    }

    /// What the minter reports at a stop covers every slot it ever minted on in this
    /// process, also one it lost and holds again under a resumed claim without having
    /// minted under it yet: the final shrink of that slot's reservation (never below what is
    /// reported) must not drop below IDs minted under the claim it continues, since a
    /// resumed claim's floor is that claim's floor (found by the sweep, seed 809).
    #[test]
    fn what_was_minted_on_a_slot_is_kept_while_the_slot_is_away() {
        let log = Log::default();
        let mut core = core();
        core.push(ask(Ask::One, Duration::from_secs(1), &log));
        core.pass(reading(EPOCH + 1_000, 0), &holding(1, 7, None, EPOCH + 5_000, 5_000));
        assert_eq!(ids(&log).len(), 1);
        // Slot 7 is lost (another slot held meanwhile), then resumed.
        core.pass(reading(EPOCH + 1_100, 100), &holding(2, 8, None, EPOCH + 5_000, 5_000));
        let resumed = Holding::Held(Grant {
            slots: vec![SlotGrant {
                slot: 7,
                claim: 3,
                floor_ms: None,
                reserved_ms: EPOCH + 5_000,
                resumes: true,
                fenced: None,
            }],
            generation: 3,
            deadline: Some(Duration::from_millis(5_000)),
            session: None,
            on_demand: false,
        });
        core.pass(reading(EPOCH + 1_200, 200), &resumed);
        let last = core.minted().last_ms(7);
        assert_eq!(last, Some(Some(EPOCH + 1_000)), "slot 7's last minted time is forgotten");
    }

    #[test]
    fn a_batch_half_filled_under_one_claim_is_not_continued_under_the_next() {
        let log = Log::default();
        let mut core = core();
        // 4,096 IDs a tick: a batch of 6,000 fills one tick and waits for the next.
        core.push(ask(Ask::Many(6_000), Duration::from_secs(1), &log));
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
        core.push(ask(Ask::One, Duration::from_secs(1), &log));
        core.pass(reading(EPOCH, 0), &held);
        assert!(matches!(log.0.borrow()[0], Err(MintError::ReservationBehind { .. })));
    }

    /// Issue 23: a reservation that etcd does not extend because of an alarm is refused with
    /// the alarm's own explanation, readiness too; refusals of other causes are not blamed on
    /// the store, and once the store has nothing to say the refusal is the plain one.
    #[test]
    fn refusals_the_store_causes_carry_its_reason_while_it_gives_one() {
        let why = "etcd raised its NOSPACE alarm: run `etcdctl alarm disarm`";
        let log = Log::default();
        let mut core = core();
        core.set_store_trouble(Some(why.into()));
        // Past the reservation (it ended at EPOCH + 1,000), with a request waiting.
        let held = holding(1, 7, None, EPOCH + 1_000, 60_000);
        // Its deadline comes before the wait for a reservation write would end.
        core.push(ask(Ask::One, Duration::from_millis(10), &log));
        core.pass(reading(EPOCH + 2_000, 0), &held);
        core.pass(reading(EPOCH + 2_005, 5), &held);
        let refused = log.0.borrow()[0].clone().unwrap_err();
        match &refused {
            MintError::StoreRefuses { refusal, why: given } => {
                assert!(matches!(**refusal, MintError::ReservationBehind { slot: 7, .. }), "{refusal:?}");
                assert_eq!(given, why);
            }
            other => panic!("{other:?}"),
        }
        let text = refused.to_string();
        assert!(text.contains("has not been extended") && text.contains("NOSPACE"), "{text}");
        match core.poll_readiness() {
            Some(Readiness::NotServing(MintError::StoreRefuses { .. })) => {}
            other => panic!("{other:?}"),
        }

        // A clock before the epoch is not the store's doing.
        core.push(ask(Ask::One, Duration::from_secs(1), &log));
        core.pass(reading(EPOCH - 10, 700), &held);
        assert!(matches!(log.0.borrow()[1], Err(MintError::BeforeEpoch { .. })));

        // The alarm is gone, the reservation not yet extended: the plain refusal.
        core.set_store_trouble(None);
        core.push(ask(Ask::One, Duration::from_millis(810), &log));
        core.pass(reading(EPOCH + 3_000, 800), &held);
        assert!(matches!(log.0.borrow()[2], Err(MintError::ReservationBehind { .. })), "{:?}", log.0.borrow()[2]);
    }

    /// Callers refused at the fence make readiness say so even while others still wait for
    /// the reservation write: under steady load the queue is never empty, and readiness (the
    /// health service, `snowmint_minting`, `/readyz`) stayed "serving" while every call was
    /// refused.
    #[test]
    fn a_refusal_at_the_fence_is_reported_while_others_still_wait() {
        let log = Log::default();
        let mut core = core();
        let held = holding(1, 7, None, EPOCH + 1_000, 60_000);
        core.push(ask(Ask::One, Duration::from_secs(1), &log));
        core.pass(reading(EPOCH + 500, 0), &held);
        assert_eq!(core.poll_readiness(), Some(Readiness::Serving));
        // Past the reservation: one caller's deadline comes before the write could, the
        // other's later.
        core.push(ask(Ask::One, Duration::from_millis(1_510), &log));
        core.push(ask(Ask::One, Duration::from_secs(3), &log));
        core.pass(reading(EPOCH + 2_000, 1_500), &held);
        assert!(matches!(log.0.borrow()[1], Err(MintError::ReservationBehind { .. })), "{:?}", log.0.borrow());
        assert_eq!(core.queue_length(), 1, "the other caller still waits");
        match core.poll_readiness() {
            Some(Readiness::NotServing(MintError::ReservationBehind { slot: 7, .. })) => {}
            other => panic!("readiness {other:?} after a caller was refused at the fence"),
        }
    }

    /// A reply and the connection it was for.
    type TaggedResult = (u64, Result<Ids, MintError>);

    /// Replies, in the order they were sent.
    #[derive(Clone, Default)]
    struct Tagged(Rc<RefCell<Vec<TaggedResult>>>);

    struct TaggedReply(Tagged, u64);

    impl Responder for TaggedReply {
        fn is_closed(&self) -> bool {
            false
        }
        fn send(self, result: Result<Ids, MintError>) -> bool {
            self.0.0.borrow_mut().push((self.1, result));
            true
        }
    }

    fn from(connection: u64, ask: Ask, log: &Tagged) -> Pending<TaggedReply> {
        Pending::new(
            ask,
            ConnectionKey(connection),
            Duration::ZERO,
            Duration::from_secs(60),
            TaggedReply(log.clone(), connection),
        )
    }

    fn tagged_core(quantum: usize) -> MinterCore<TaggedReply> {
        let config = MinterConfig {
            layout: Layout::default_snowmint(),
            max_clock_back: Duration::from_millis(5),
            max_clock_drift: Duration::ZERO,
            max_wait: Duration::from_secs(60),
            fair_quantum: quantum,
        };
        MinterCore::new(config, Box::new(NoTally)).unwrap()
    }

    /// A grant that covers the whole test, whatever its length.
    fn long_holding() -> Holding {
        let mut held = holding(1, 7, None, EPOCH + 10_000_000, 0);
        if let Holding::Held(grant) = &mut held {
            grant.deadline = None;
        }
        held
    }

    /// IDs answered per connection.
    fn answered(log: &Tagged, connection: u64) -> usize {
        log.0
            .borrow()
            .iter()
            .filter(|(c, _)| *c == connection)
            .map(|(_, r)| match r {
                Ok(Ids::One(_)) => 1,
                Ok(Ids::Many(ids)) => ids.len(),
                Err(_) => 0,
            })
            .sum()
    }

    #[test]
    fn a_next_id_behind_sixteen_queued_batches_of_65536_is_answered_in_the_first_tick() {
        let log = Tagged::default();
        let mut core = tagged_core(FAIR_QUANTUM);
        let held = long_holding();
        for _ in 0..16 {
            core.push(from(1, Ask::Many(65_536), &log));
        }
        core.push(from(2, Ask::One, &log));
        core.pass(reading(EPOCH + 100, 100), &held);
        assert_eq!(answered(&log, 2), 1, "the NextId waited behind the batches");
        // Once a small ask was served, the batches leave a 64th of each tick for the next
        // ones: a NextId arriving after the batches took their share is answered at once.
        core.push(from(3, Ask::One, &log));
        core.pass(reading(EPOCH + 100, 100), &held);
        assert_eq!(answered(&log, 3), 1, "the second NextId waited for the next tick");
        assert_eq!(core.queue_length(), 16);
        // The batches still take all but the reserve of every tick.
        for tick in 101..=116 {
            core.pass(reading(EPOCH + tick, tick as u64), &held);
        }
        assert_eq!(answered(&log, 1), 65_536, "17 ticks of 4,032 IDs fill a batch");
    }

    #[test]
    fn the_reserve_for_small_asks_does_not_hold_a_batch_minting_on_borrowed_time() {
        let log = Tagged::default();
        let config = MinterConfig {
            layout: Layout::default_snowmint(),
            max_clock_back: Duration::from_millis(5),
            max_clock_drift: Duration::from_secs(10),
            max_wait: Duration::from_secs(60),
            fair_quantum: FAIR_QUANTUM,
        };
        let mut core: MinterCore<TaggedReply> = MinterCore::new(config, Box::new(NoTally)).unwrap();
        let held = long_holding();
        core.push(from(2, Ask::One, &log));
        core.pass(reading(EPOCH + 5_000, 5_000), &held);
        // The clock steps back 4 s and stands still: the batch borrows three ticks ahead of
        // the last one used, in one pass, as it would with no small ask about.
        core.push(from(1, Ask::Many(10_000), &log));
        core.pass(reading(EPOCH + 1_000, 5_001), &held);
        assert_eq!(answered(&log, 1), 10_000);
    }

    #[test]
    fn a_lone_bulk_connection_takes_every_id_of_every_tick() {
        let log = Tagged::default();
        let mut core = tagged_core(FAIR_QUANTUM);
        let held = long_holding();
        for _ in 0..2 {
            core.push(from(1, Ask::Many(65_536), &log));
        }
        // 131,072 IDs at 4,096 a tick: 32 ticks, not one more.
        for tick in 0..32 {
            core.pass(reading(EPOCH + 100 + tick, 100 + tick as u64), &held);
        }
        assert_eq!(answered(&log, 1), 131_072);
        assert!(!core.has_pending());
    }

    #[test]
    fn two_bulk_connections_of_different_sizes_get_equal_shares() {
        let log = Tagged::default();
        let mut core = tagged_core(FAIR_QUANTUM);
        let held = long_holding();
        // Connection 1 asks 65,536 at a time, connection 2 4,096 at a time with 16 in
        // flight; each keeps asking as its calls are answered.
        for _ in 0..16 {
            core.push(from(1, Ask::Many(65_536), &log));
            core.push(from(2, Ask::Many(4_096), &log));
        }
        let ticks = 512;
        for tick in 0..ticks {
            let before = log.0.borrow().len();
            core.pass(reading(EPOCH + 100 + tick, 100 + tick as u64), &held);
            let replies: Vec<u64> = log.0.borrow()[before..].iter().map(|(c, _)| *c).collect();
            for connection in replies {
                let size = if connection == 1 { 65_536 } else { 4_096 };
                core.push(from(connection, Ask::Many(size), &log));
            }
        }
        let total = ticks as usize * 4_096;
        let (big, small) = (answered(&log, 1), answered(&log, 2));
        // Connection 1's share is counted in whole batches of 65,536, so it lags by up to one.
        assert!(big + small > total - 2 * 65_536, "{big} + {small} of {total}: ticks went unused");
        for share in [big, small] {
            assert!(share.abs_diff(total / 2) <= 65_536, "shares {big} and {small} of {total}");
        }
    }

    /// Connections of tenants saturating the minter with `BatchIds(4096)`, each keeping 8 in
    /// flight, for `ticks` ticks: the IDs each connection got. `connections` are (connection,
    /// tenant, weight).
    fn saturate(connections: &[(u64, u64, u32)], ticks: u64) -> Vec<usize> {
        let log = Tagged::default();
        let mut core = tagged_core(FAIR_QUANTUM);
        let held = long_holding();
        let share = |connection: u64| {
            let &(_, tenant, weight) = connections.iter().find(|c| c.0 == connection).unwrap();
            Share { tenant, weight }
        };
        for &(connection, ..) in connections {
            for _ in 0..8 {
                core.push(from(connection, Ask::Many(4_096), &log).with_share(share(connection)));
            }
        }
        for tick in 0..ticks {
            let before = log.0.borrow().len();
            core.pass(reading(EPOCH + 100 + tick as i64, 100 + tick), &held);
            let replies: Vec<u64> = log.0.borrow()[before..].iter().map(|(c, _)| *c).collect();
            for connection in replies {
                core.push(from(connection, Ask::Many(4_096), &log).with_share(share(connection)));
            }
        }
        connections.iter().map(|&(connection, ..)| answered(&log, connection)).collect()
    }

    #[test]
    fn tenants_share_a_saturated_minter_by_weight() {
        let got = saturate(&[(1, 10, 1), (2, 20, 3)], 512);
        let ratio = got[1] as f64 / got[0] as f64;
        assert!((2.8..=3.2).contains(&ratio), "weights 1 and 3 got {got:?}: {ratio:.2}");
        // Without tenants (every call of one), the two connections share equally, as before.
        let got = saturate(&[(1, 0, 1), (2, 0, 1)], 512);
        assert!(got[0].abs_diff(got[1]) <= 4_096, "{got:?}");
    }

    #[test]
    fn a_tenants_many_connections_get_what_anothers_one_gets() {
        let mut connections: Vec<(u64, u64, u32)> = (1..=8).map(|c| (c, 10, 1)).collect();
        connections.push((9, 20, 1));
        let got = saturate(&connections, 512);
        let many: usize = got[..8].iter().sum();
        let ratio = many as f64 / got[8] as f64;
        assert!((0.9..=1.1).contains(&ratio), "8 connections got {many}, 1 got {}: {ratio:.2}", got[8]);
        // Within the tenant, its connections share equally.
        let (least, most) = (got[..8].iter().min().unwrap(), got[..8].iter().max().unwrap());
        assert!(most - least <= 2 * 4_096, "{got:?}");
    }

    #[test]
    fn a_connections_requests_are_answered_in_the_order_asked() {
        let log = Tagged::default();
        let mut core = tagged_core(16);
        let held = long_holding();
        core.push(from(1, Ask::Many(5_000), &log));
        core.push(from(1, Ask::One, &log));
        core.push(from(2, Ask::Many(100), &log));
        for tick in 0..3 {
            core.pass(reading(EPOCH + 100 + tick, 100 + tick as u64), &held);
        }
        let order: Vec<(u64, usize)> = log
            .0
            .borrow()
            .iter()
            .map(|(c, r)| {
                (
                    *c,
                    match r {
                        Ok(Ids::Many(ids)) => ids.len(),
                        _ => 1,
                    },
                )
            })
            .collect();
        // Connection 2's small batch overtakes connection 1's large one; connection 1's
        // NextId does not.
        assert_eq!(order, [(2, 100), (1, 5_000), (1, 1)]);
    }

    /// What a set of bulk callers got: each asked for its batches one at a time, asking again
    /// a tick after each answer or refusal.
    #[derive(Debug, Default)]
    struct Bulk {
        /// Ticks until every batch was answered (or the limit).
        ticks: u64,
        answered: usize,
        refused: usize,
        /// Answers and refusals that did not come as promised: an answer past its deadline,
        /// a refusal later than the pass that first saw the request.
        broken: Vec<String>,
    }

    /// `connections` callers, each wanting `batches` batches of `size` IDs, one in flight at
    /// a time, each with `deadline`; the clock ticks once a millisecond, with one pass per
    /// tick, for at most `limit` ticks.
    fn bulk_callers(connections: u64, batches: usize, size: usize, deadline: Duration, limit: u64) -> Bulk {
        let log = Tagged::default();
        let mut core = tagged_core(FAIR_QUANTUM);
        let held = long_holding();
        let mut left: BTreeMap<u64, usize> = (1..=connections).map(|c| (c, batches)).collect();
        let mut asked: BTreeMap<u64, Duration> = BTreeMap::new();
        let mut due: Vec<u64> = (1..=connections).collect();
        let mut bulk = Bulk { ticks: limit, ..Bulk::default() };
        for tick in 0..limit {
            let now = Duration::from_millis(tick);
            for connection in due.drain(..) {
                asked.insert(connection, now);
                let reply = TaggedReply(log.clone(), connection);
                core.push(Pending::new(Ask::Many(size), ConnectionKey(connection), now, now + deadline, reply));
            }
            core.pass(reading(EPOCH + 100 + tick as i64, tick), &held);
            for (connection, result) in log.0.borrow_mut().drain(..) {
                let at = asked[&connection];
                match result {
                    Ok(Ids::Many(ids)) => {
                        assert_eq!(ids.len(), size);
                        bulk.answered += 1;
                        *left.get_mut(&connection).expect("a caller") -= 1;
                        if now > at + deadline {
                            bulk.broken.push(format!("asked at {at:?}, answered at {now:?}"));
                        }
                    }
                    Err(e) => {
                        bulk.refused += 1;
                        if now != at {
                            bulk.broken.push(format!("asked at {at:?}, refused at {now:?}: {e}"));
                        }
                    }
                    Ok(Ids::One(_)) => unreachable!("no NextId was asked"),
                }
                if left[&connection] > 0 {
                    due.push(connection);
                }
            }
            if left.values().all(|&n| n == 0) {
                bulk.ticks = tick + 1;
                break;
            }
        }
        bulk
    }

    #[test]
    fn many_bulk_connections_with_deadlines_get_every_batch_near_the_ceiling() {
        // 64 connections of BatchIds(65536) with 1 s deadlines, and 16 with 200 ms: served
        // round robin alone, every batch would finish at 16 ms per connection, past its
        // deadline, refused after its IDs were minted, again and again.
        for (connections, deadline_ms) in [(64u64, 1_000u64), (16, 200)] {
            let batches = 4;
            let ideal = connections * batches as u64 * 65_536 / 4_096;
            let bulk = bulk_callers(connections, batches, 65_536, Duration::from_millis(deadline_ms), 3 * ideal);
            let want = connections as usize * batches;
            assert!(
                bulk.answered == want && bulk.broken.is_empty(),
                "{connections} connections, {deadline_ms} ms deadlines: {} of {want} batches answered in {} ticks \
                 ({ideal} at the ceiling), {} refusals, {} not as promised, the first: {:?}",
                bulk.answered,
                bulk.ticks,
                bulk.refused,
                bulk.broken.len(),
                bulk.broken.first(),
            );
            // Goodput: nearly every tick's IDs went to a batch that was answered.
            assert!(bulk.ticks <= ideal + ideal / 20 + 20, "{} ticks against {ideal} at the ceiling", bulk.ticks);
        }
    }

    #[test]
    fn a_request_whose_deadline_passed_before_its_pass_is_refused_with_nothing_minted() {
        let log = Tagged::default();
        let mut core = tagged_core(FAIR_QUANTUM);
        let held = long_holding();
        // Asked at 0 with 5 ms to go, first seen by a pass at 10 ms (the minter was busy, or
        // the request waited to be handed over).
        let late = |ask, connection| {
            Pending::new(
                ask,
                ConnectionKey(connection),
                Duration::ZERO,
                Duration::from_millis(5),
                TaggedReply(log.clone(), connection),
            )
        };
        core.push(late(Ask::Many(100), 1));
        core.push(late(Ask::One, 2));
        core.push(from(3, Ask::One, &log));
        core.pass(reading(EPOCH + 110, 10), &held);
        let replies = log.0.borrow();
        assert_eq!(replies.len(), 3, "{replies:?}");
        for (connection, result) in &replies[..2] {
            let got = result.as_ref().map(|_| "IDs");
            assert!(matches!(result, Err(MintError::Deadline(_))), "connection {connection}: {got:?}");
        }
        // Nothing was minted for them: the next ID is the tick's first.
        let Ok(Ids::One(id)) = replies[2].1 else { panic!("{:?}", replies[2]) };
        assert_eq!(Layout::default_snowmint().unpack(id).sequence, 0, "IDs were minted for the late requests");
    }

    mod fair_shares {
        use super::*;
        use proptest::prelude::*;

        fn asks() -> impl Strategy<Value = Vec<(u64, Option<usize>, u8)>> {
            // (connection, batch size or a NextId, ticks to advance before it)
            prop::collection::vec(
                (0u64..4, prop::option::of(prop_oneof![1usize..50, 1usize..10_000, Just(65_536)]), 0u8..3),
                1..60,
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// Whatever mix of sizes and connections waits, and however the clock moves on,
            /// no ID is given twice, every response strictly increases, every request is
            /// answered, and each connection's in the order it asked.
            #[test]
            fn ids_stay_unique_and_increasing_under_any_mix_of_asks(
                asks in asks(),
                quantum in prop_oneof![Just(1usize), 1usize..5_000, Just(FAIR_QUANTUM)],
            ) {
                let log = Tagged::default();
                let mut core = tagged_core(quantum);
                let held = long_holding();
                let mut asked: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
                let mut ms = 0i64;
                for (connection, size, advance) in asks {
                    let ask = size.map_or(Ask::One, Ask::Many);
                    asked.entry(connection).or_default().push(size.unwrap_or(1));
                    core.push(from(connection, ask, &log));
                    ms += i64::from(advance);
                    core.pass(reading(EPOCH + 100 + ms, 100 + ms as u64), &held);
                }
                while core.has_pending() {
                    ms += 1;
                    core.pass(reading(EPOCH + 100 + ms, 100 + ms as u64), &held);
                }
                let mut all = Vec::new();
                let mut got: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
                for (connection, result) in log.0.borrow().iter() {
                    let ids = match result {
                        Ok(Ids::One(id)) => vec![*id],
                        Ok(Ids::Many(ids)) => ids.clone(),
                        Err(e) => panic!("refused: {e}"),
                    };
                    prop_assert!(ids.windows(2).all(|w| w[0] < w[1]), "a response is not strictly increasing");
                    got.entry(*connection).or_default().push(ids.len());
                    all.extend(ids);
                }
                prop_assert_eq!(&got, &asked, "answers per connection, in order");
                let count = all.len();
                all.sort_unstable();
                all.dedup();
                prop_assert_eq!(all.len(), count, "an ID was given twice");
            }
        }
    }
}
