//! The slot keeper's state machine: the rules that keep the promise, with no I/O of its own.
//!
//! Inputs: the time ([`Now`]: wall ms and the boot-time instant), the store's reply to the
//! one request in flight, a timer firing, the minter's progress, and the order to stop.
//! Outputs: the next store request ([`Keeper::poll_request`]), the holding for the minter
//! ([`Keeper::poll_holding`]), the instant it wants to be woken ([`Keeper::poll_timeout`]),
//! and events for logs and metrics ([`Keeper::poll_event`]).
//!
//! At most one request is in flight: the keeper decides the next one from its state once the
//! reply to the last one is in, renewals first. A reply of unknown outcome is taken at its
//! worst: a write may have landed (so its version is unknown until read again), a lease may
//! be gone (so the deadline stays where the last confirmed renewal put it).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use crate::defects::{self, Defect};
use crate::grant::{Grant, Holding, Minted, SlotGrant};
use crate::layout::{Layout, Slot, rfc3339_ms};
use crate::store::{
    Fence, MAX_READS, MAX_WRITES, Outcome, PeerClock, Reply, Request, SessionId, SlotRead, Stored, Version, Write,
};

/// A reading of the clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Wall time, Unix ms. May step back and forth.
    pub wall_ms: i64,
    /// Time since boot, counting suspend (CLOCK_BOOTTIME). Never goes back.
    pub boot: Duration,
}

/// Which slots to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotPolicy {
    /// Exactly these worker IDs (standalone mode: a static ID and its state file).
    Fixed(Vec<Slot>),
    /// `count` free slots of the layout, the `preferred` ones first when free.
    Leased { count: usize, preferred: Vec<Slot> },
}

/// The keeper's settings.
#[derive(Debug, Clone)]
pub struct KeeperConfig {
    pub policy: SlotPolicy,
    /// The session TTL asked for (the store may grant more, or say it never expires).
    pub ttl: Duration,
    /// How far ahead of the minting time reservations reach, ms.
    pub window_ms: i64,
    pub layout: Layout,
    /// Seeds the choice among free slots and the retry jitter.
    pub seed: u64,
    /// The fleet's clock check (leased slots only): beyond this many ms from the median of
    /// other instances' clocks (each counted once, whatever slots it holds), the start stops,
    /// or a running instance stops minting until its clock agrees again. `None`: no check.
    pub max_fleet_skew_ms: Option<i64>,
    /// How far past the wall clock a fence reaches (see [`fence_window_ms`]): when the
    /// store is found to have gone back in time, or a slot's reservation to be missing, no
    /// floor is trusted, and minting waits until past anything anyone could have minted.
    pub fence_window_ms: i64,
    /// How far the minting time may run ahead of the clock (`--max-clock-drift-ms`; 0 under
    /// the strict policy): a floor further ahead than this (and than a window) cannot be
    /// minted at yet, and is reserved as it is ([`Keeper::target_ms`]).
    pub max_clock_drift_ms: i64,
}

/// How far past "now" anyone may have minted on a slot whose stored reservation is lost (the
/// store went back in time, the key was deleted): a holder whose claim was lost with it mints
/// on until its lease deadline (`ttl`), its minting time runs up to `max_clock_drift` ahead of
/// its clock, its reservation reaches a `window` past that, and its clock may stand
/// `max_fleet_skew` from this one (30 s where the check is off).
pub fn fence_window_ms(
    ttl: Duration,
    max_clock_drift: Duration,
    window_ms: i64,
    max_fleet_skew_ms: Option<i64>,
) -> i64 {
    let ttl_ms = if ttl == Duration::MAX { 0 } else { ttl.as_millis().min(i64::MAX as u128) as i64 };
    let skew = max_fleet_skew_ms.unwrap_or(30_000);
    ttl_ms.saturating_add(max_clock_drift.as_millis() as i64).saturating_add(window_ms).saturating_add(skew)
}

/// Why the keeper cannot hold what it was asked to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeeperError {
    #[error("every slot is taken ({slots} slots; this instance holds {held} of the {wanted} it needs)")]
    AllTaken { slots: u64, held: usize, wanted: usize },
    #[error(
        "{location} holds {reason}; it is never overwritten: fix or remove it by hand once no instance minted for slot {slot} past the time it meant"
    )]
    Corrupt { slot: Slot, location: String, reason: String },
    #[error("{0}")]
    FleetSkew(String),
}

/// Why a slot was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// The store says the session (lease) is gone.
    SessionGone,
    /// A write found the slot's key no longer this session's.
    NotOurs,
    /// The slot's reservation is corrupt; it was given back.
    Corrupt,
}

/// What happened, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    SessionOpened {
        session: SessionId,
        ttl: Option<Duration>,
    },
    /// This instance's wall clock minus the median of `peers` other instances' clocks.
    FleetClock {
        skew_ms: i64,
        peers: usize,
    },
    /// The clock is beyond --max-fleet-skew-ms of the fleet's: minting stops (once started).
    FleetClockBeyond {
        reason: String,
    },
    /// The clock agrees with the fleet's again: minting goes on.
    FleetClockWithin,
    /// The fleet's slots in use, from a listing.
    SlotsListed {
        taken: usize,
        slots: u64,
    },
    SlotTaken {
        slot: Slot,
        claim: u64,
        floor_ms: Option<i64>,
        reserved_ms: i64,
        resumed: bool,
        /// The wall ms at which the grant was made, on the clock the minter reads: nothing is
        /// minted under the claim before it is published.
        at_ms: i64,
        /// For a claim that resumes: the last Unix ms this process reported minting on the
        /// slot, where the claim it continues ends and this one begins.
        minted_ms: Option<i64>,
    },
    SlotLost {
        slot: Slot,
        reason: LossReason,
    },
    /// No free slot was found; the keeper retries.
    NoFreeSlot {
        slots: u64,
    },
    Renewed,
    RenewFailed {
        error: String,
    },
    /// The boot-time deadline passed with no renewal: minting is fenced.
    DeadlinePassed,
    /// Each slot written, with its new reservation (Unix ms).
    ReservationsWritten {
        slots: Vec<(Slot, i64)>,
    },
    ReservationWriteFailed {
        error: String,
    },
    /// A request failed (other than renewals and reservation writes).
    RequestFailed {
        request: &'static str,
        error: String,
    },
    Corrupt {
        slot: Slot,
        location: String,
        reason: String,
    },
    /// The store went back in time (a restored snapshot): what was written since its state
    /// is lost. Every floor read before the fence is raised to it; this instance's own slots
    /// are written again over what the store holds now.
    StoreWentBack {
        detail: String,
        fence_until_ms: i64,
    },
    /// A fence (this instance's or the fleet's) raised the floor of `slot`.
    SlotFenced {
        slot: Slot,
        until_ms: i64,
        reason: String,
    },
    /// The fleet's fence was written to the store, for every other instance's claims.
    FenceSet {
        until_ms: i64,
    },
    /// The final (shrunk) reservation of each slot written, Unix ms.
    FinalSaved {
        slots: Vec<(Slot, i64)>,
    },
    /// The final reservation was left as it is, and why.
    FinalKept {
        why: &'static str,
    },
    Closed,
}

/// The state of one claimed slot (its number is `id`).
#[derive(Debug, Clone)]
struct Claimed {
    id: Slot,
    claim: u64,
    phase: Phase,
    /// The stored reservation's version as last known; `None` while a write of unknown
    /// outcome may have changed it.
    version: Option<Version>,
    /// The previous holder's reservation, read after the claim.
    floor_ms: Option<i64>,
    /// The highest reservation this instance wrote durably for the slot under this claim.
    confirmed_ms: Option<i64>,
    resumes: bool,
    /// The last confirmed write marked the slot idle ([`Write::idle`]): it is extended again
    /// only when the minter asks.
    idle_marked: bool,
    /// The store lost what this instance wrote (it went back in time): write the slot again,
    /// never below what was confirmed, once its version is read.
    repair: bool,
    /// Why the floor was raised past the stored reservation, if it was (a fence).
    fenced: Option<String>,
    /// The claim's version as last known ([`Write::claim_version`]): 1 as claimed, moved on
    /// by each confirmed write onto an absent reservation, learned again from a refusal. A
    /// write of unknown outcome leaves it: sent again at the same version, only one of the
    /// two can land.
    claim_version: i64,
}

impl Claimed {
    /// The claim version a write expecting `expect` carries: only a write onto an absent
    /// reservation needs one.
    fn claim_version_for(&self, expect: Option<Version>) -> Option<i64> {
        (expect == Some(Version::Absent)).then_some(self.claim_version)
    }
}

/// A fence as this instance knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KnownFence {
    until_ms: i64,
    reason: String,
}

/// A reservation this instance wrote and saw confirmed, and the claim it wrote it under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OwnWrite {
    version: Version,
    /// What it wrote: the store never holds less for the slot unless it went back in time.
    until_ms: i64,
    /// The floor of the claim it was written under: every other holder's minting on the slot
    /// before that claim lies at or below it.
    floor_ms: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Claimed; the floor is not read yet.
    NeedFloor,
    /// The floor is read; the first reservation is not written yet.
    NeedFirstWrite,
    /// Published to the minter.
    Granted,
}

#[derive(Debug, Clone)]
struct Session {
    id: SessionId,
    /// `None`: never expires.
    ttl: Option<Duration>,
    deadline: Option<Duration>,
    next_renew: Option<Duration>,
    /// Whether the passing of the current deadline has been reported.
    deadline_reported: bool,
    renew_failing: bool,
}

#[derive(Debug, Clone)]
struct InFlight {
    id: u64,
    request: Request,
    sent: Duration,
}

/// The free slots as the last listing showed them.
#[derive(Debug, Clone, Default)]
struct Listing {
    taken: BTreeSet<Slot>,
}

#[derive(Debug, Clone)]
struct Stopping {
    minted: Minted,
    /// The final shrink: `None` until it is planned (or ruled out), then the writes not sent
    /// yet, at most [`MAX_WRITES`] to a request.
    shrink: Option<Vec<Write>>,
}

/// The slot keeper.
#[derive(Debug)]
pub struct Keeper {
    config: KeeperConfig,
    rng: u64,
    session: Option<Session>,
    slots: Vec<Claimed>,
    /// Per slot ID, this instance's last confirmed reservation write: a re-claim that finds
    /// it unchanged resumes instead of waiting out its own reservation.
    own_writes: BTreeMap<Slot, OwnWrite>,
    /// Slots held before and lost: tried first when claiming again.
    lost: Vec<Slot>,
    /// Slots found corrupt: never claimed again by this instance.
    excluded: BTreeSet<Slot>,
    /// Slots bound to this session that it does not use: given back.
    to_release: Vec<Slot>,
    listing: Option<Listing>,
    in_flight: Option<InFlight>,
    next_request_id: u64,
    /// No request (other than a due renewal) before this instant.
    retry_at: Option<Duration>,
    backoff: Duration,
    claims: u64,
    generation: u64,
    published: Holding,
    holding_changed: bool,
    events: VecDeque<Event>,
    /// The latest minting time the minter reported, Unix ms.
    mint_ms: Option<i64>,
    /// The last per-slot progress the minter reported.
    progress: Vec<(Slot, i64)>,
    /// Per slot, the latest minting time the minter ever reported on it in this process.
    minted_on: BTreeMap<Slot, i64>,
    /// The minter found itself past the reservation: extend as soon as possible.
    extend_asap: bool,
    /// When the fleet's slots are next counted (etcd mode, once started).
    next_count: Option<Duration>,
    /// When this session last did something that may leave a slot bound to it unseen: a
    /// claim of unknown outcome (it may commit late, even as a delayed copy), or a slot lost
    /// while the session lives. Until `UNSETTLED_FOR` TTLs after it, the slots are listed
    /// every TTL and any bound to the session and not used are adopted or given back, so
    /// that no other instance is kept out of a slot this one does not mint on.
    unsettled_since: Option<Duration>,
    next_reconcile: Option<Duration>,
    /// When other holders' clocks are next sampled (the fleet's clock check).
    next_sample: Option<Duration>,
    /// Why minting is stopped while the clock disagrees with the fleet's.
    skew_refusal: Option<String>,
    /// No free slot was found: claim again no sooner than this (the slots held meanwhile
    /// are read, written and minted on as usual).
    next_claim_at: Option<Duration>,
    stopping: Option<Stopping>,
    /// The highest fence known: floors read below it are raised to it.
    fence: Option<KnownFence>,
    /// A fence to set in the store for the rest of the fleet, once this instance found the
    /// store gone back in time.
    fence_to_set: Option<(i64, String)>,
    /// The fence known when the answer in hand arrived, before anything it brought.
    fence_before_reply: Option<i64>,
    done: bool,
    fatal: Option<KeeperError>,
    /// True once every wanted slot was granted at least once: before that, failures that
    /// would only be retried later stop the start instead.
    started: bool,
}

/// The median of `values` (not empty): the middle one, or halfway between the two middle ones.
fn median(values: &mut [i64]) -> i64 {
    values.sort_unstable();
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { values[n / 2 - 1] / 2 + values[n / 2] / 2 }
}

/// The first retry delay after a failed request; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How soon a failed renewal is tried again.
const RENEW_RETRY: Duration = Duration::from_millis(200);
/// The most a lost claim waits before listing again: a lost claim is a race with another
/// instance, not a failing store, so it waits a little and at random, not a backoff.
const CLAIM_JITTER_MS: u64 = 50;
/// How often the fleet's slots in use are counted (a count-only read: cheap even for a
/// fleet of a thousand instances, about 30 reads a second in all).
const COUNT_EVERY: Duration = Duration::from_secs(30);
/// How often other instances' clocks are sampled, and how many instances: bounded reads of
/// keys (more of them where instances hold many slots) and one of as many reservations.
const SAMPLE_EVERY: Duration = Duration::from_secs(15);
const SAMPLE_PEERS: u32 = 9;
/// How long the minter may mint nothing before the reservations are left to lapse: an idle
/// instance writes nothing (issue 23: at rest, a fleet's writes are what fills etcd), and its
/// next request waits for one write. Long enough that a caller asking every few seconds
/// never waits for it.
pub const IDLE_AFTER_MS: i64 = 10_000;
/// How many TTLs after a claim of unknown outcome (or a loss) the session keeps checking
/// for slots bound to it that it does not use. A request outlives its call timeout (a fifth
/// of the TTL at most) only as a rare late copy.
const UNSETTLED_FOR: u32 = 5;

impl Keeper {
    pub fn new(config: KeeperConfig) -> Keeper {
        let rng = config.seed | 1;
        Keeper {
            config,
            rng,
            session: None,
            slots: Vec::new(),
            own_writes: BTreeMap::new(),
            lost: Vec::new(),
            excluded: BTreeSet::new(),
            to_release: Vec::new(),
            listing: None,
            in_flight: None,
            next_request_id: 0,
            retry_at: None,
            backoff: FIRST_BACKOFF,
            claims: 0,
            generation: 0,
            published: Holding::Unheld { reason: "no slot claimed yet".into() },
            holding_changed: false,
            events: VecDeque::new(),
            mint_ms: None,
            progress: Vec::new(),
            minted_on: BTreeMap::new(),
            extend_asap: false,
            next_count: None,
            unsettled_since: None,
            next_reconcile: None,
            next_sample: None,
            skew_refusal: None,
            next_claim_at: None,
            stopping: None,
            fence: None,
            fence_to_set: None,
            fence_before_reply: None,
            done: false,
            fatal: None,
            started: false,
        }
    }

    // ---- Outputs ----

    /// The next request to send, if one is due now. The keeper records `now` as the
    /// instant it was sent: call this right before sending.
    pub fn poll_request(&mut self, now: Now) -> Option<(u64, Request)> {
        // After a fatal error only the stop goes on: a failed start gives back what it claimed.
        if self.in_flight.is_some() || self.done || (self.fatal.is_some() && self.stopping.is_none()) {
            return None;
        }
        let request = self.next_request(now)?;
        self.next_request_id += 1;
        let id = self.next_request_id;
        self.in_flight = Some(InFlight { id, request: request.clone(), sent: now.boot });
        Some((id, request))
    }

    /// The holding for the minter, when it changed since the last call.
    pub fn poll_holding(&mut self) -> Option<Holding> {
        std::mem::take(&mut self.holding_changed).then(|| self.published.clone())
    }

    /// The holding as last published.
    pub fn holding(&self) -> &Holding {
        &self.published
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The boot-time instant at which the keeper wants to run again, if nothing else
    /// happens first. `None`: only a reply or an input can give it work.
    pub fn poll_timeout(&self, now: Now) -> Option<Duration> {
        if self.done || (self.fatal.is_some() && self.stopping.is_none()) {
            return None;
        }
        let mut at: Option<Duration> = None;
        let mut consider = |t: Option<Duration>| {
            if let Some(t) = t {
                at = Some(at.map_or(t, |a| a.min(t)));
            }
        };
        if let Some(session) = &self.session
            && !session.deadline_reported
        {
            consider(session.deadline);
        }
        // While a request is in flight, only its reply (or its timeout) moves things on.
        if self.in_flight.is_none() {
            consider(self.session.as_ref().and_then(|s| s.next_renew));
            consider(self.retry_at);
            // Nothing but a renewal goes out before a retry is due.
            let not_before = self.retry_at.unwrap_or_default();
            consider(self.next_reconcile.map(|t| t.max(not_before)));
            consider(self.next_count.map(|t| t.max(not_before)));
            if self.wants_more_slots() {
                consider(self.next_claim_at.map(|t| t.max(not_before)));
            }
            consider(self.next_extension_at(now).map(|t| t.max(not_before)));
        }
        at
    }

    /// The error that stops the keeper, if any: the start fails with it.
    pub fn fatal(&self) -> Option<&KeeperError> {
        self.fatal.as_ref()
    }

    /// Whether every wanted slot has been granted at least once.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Whether the keeper has finished stopping.
    pub fn is_done(&self) -> bool {
        self.done
    }

    // ---- Inputs ----

    /// A timer fired (or any other reason to look at the clock).
    pub fn handle_timeout(&mut self, now: Now) {
        if let Some(session) = &mut self.session
            && let Some(deadline) = session.deadline
            && now.boot >= deadline
            && !session.deadline_reported
        {
            session.deadline_reported = true;
            if !self.slots.is_empty() {
                self.events.push_back(Event::DeadlinePassed);
            }
        }
    }

    /// The minter reports how far minting has got: its minting time, and per slot the last
    /// Unix ms minted. Reservations reach ahead of the minting time.
    pub fn handle_progress(&mut self, mint_ms: i64, slots: Vec<(Slot, i64)>) {
        self.mint_ms = Some(self.mint_ms.map_or(mint_ms, |m| m.max(mint_ms)));
        for &(slot, ms) in &slots {
            let last = self.minted_on.entry(slot).or_insert(ms);
            *last = (*last).max(ms);
        }
        self.progress = slots;
    }

    /// The minter found itself past its reservation: extend as soon as a request may go. A
    /// retry after a failure keeps its backoff: the minter asks on every pass that callers
    /// wait at the fence, and a store refusing every write (etcd's NOSPACE alarm) would be
    /// asked again at each one, dozens of times a second (issue 23).
    pub fn extend_now(&mut self) {
        self.extend_asap = true;
    }

    /// Starts stopping: shrink the reservations to what was minted (only when that is
    /// known), then end the session.
    pub fn finish(&mut self, minted: Minted) {
        if self.stopping.is_none() {
            self.stopping = Some(Stopping { minted, shrink: None });
            self.retry_at = None;
        }
        self.publish_unheld("the server is stopping");
    }

    /// The reply to request `id`.
    pub fn handle_reply(&mut self, now: Now, id: u64, reply: Reply) {
        let Some(in_flight) = self.in_flight.take_if(|f| f.id == id) else {
            return;
        };
        let InFlight { request, sent, .. } = in_flight;
        self.fence_before_reply = self.fence.as_ref().map(|f| f.until_ms);
        let reply = match reply {
            Reply::WentBack { detail, reply } => {
                self.went_back(now, detail);
                *reply
            }
            reply => reply,
        };
        if let Reply::Failed { error, outcome } = &reply {
            self.failed(now, &request, error.clone(), *outcome);
            return;
        }
        // A renewal goes out whatever the backoff, and its success says nothing of the other
        // requests (etcd takes keep-alives while its NOSPACE alarm refuses every write).
        if !matches!(request, Request::Renew { .. }) {
            self.backoff = FIRST_BACKOFF;
        }
        match (request, reply) {
            (Request::OpenSession { .. }, Reply::SessionOpened { session, ttl }) => {
                self.opened(now, sent, session, ttl)
            }
            (Request::ListSlots { .. }, Reply::Slots { taken, ours }) => self.listed(now, taken, ours),
            (Request::CountSlots, Reply::SlotCount { taken }) => {
                self.events.push_back(Event::SlotsListed { taken: taken as usize, slots: self.slot_count() });
            }
            (Request::SampleClocks { .. }, Reply::PeerClocks(clocks)) => self.sampled(now, clocks),
            (Request::Claim { slot, session }, Reply::Claimed { won, .. }) => self.claimed(now, session, slot, won),
            (Request::ReadReservations { .. }, Reply::Reservations { reads, fence }) => self.read(now, reads, fence),
            (Request::SetFence { until_ms, .. }, Reply::FenceSet) => {
                if self.fence_to_set.as_ref().is_some_and(|(u, _)| *u <= until_ms) {
                    self.fence_to_set = None;
                }
                self.events.push_back(Event::FenceSet { until_ms });
            }
            (Request::WriteReservations { writes, .. }, Reply::Written(versions)) => {
                self.written(now, writes, versions)
            }
            (Request::WriteReservations { writes, .. }, Reply::WriteRefused { not_ours, current }) => {
                self.write_refused(now, writes, not_ours, current)
            }
            (Request::Renew { session }, Reply::Renewed { ttl, fence }) => {
                if let Some(fence) = fence {
                    self.learn_fence(fence);
                }
                self.renewed(now, sent, session, ttl)
            }
            (Request::Renew { session }, Reply::SessionGone) => self.session_gone(session),
            (Request::Release { slot, .. }, Reply::Released) => {
                self.to_release.retain(|&s| s != slot);
            }
            (Request::CloseSession { .. }, Reply::SessionClosed) => {
                self.session = None;
                self.slots.clear();
                self.events.push_back(Event::Closed);
                if self.stopping.is_some() {
                    self.done = true;
                }
            }
            (request, reply) => {
                // A store answering out of protocol: treat it as a failure of unknown outcome.
                let error = format!("unexpected reply {reply:?} to {}", request.name());
                self.failed(now, &request, error, Outcome::Unknown);
            }
        }
    }

    // ---- Deciding what to do next ----

    fn next_request(&mut self, now: Now) -> Option<Request> {
        if self.stopping.is_some() {
            return self.next_stop_request(now);
        }
        // A due renewal goes first, whatever else waits: it is what keeps the claim.
        if let Some(session) = &self.session
            && session.next_renew.is_some_and(|at| now.boot >= at)
        {
            return Some(Request::Renew { session: session.id });
        }
        if self.retry_at.is_some_and(|at| now.boot < at) {
            return None;
        }
        self.retry_at = None;
        let Some(session) = self.session.as_ref().map(|s| s.id) else {
            return Some(Request::OpenSession { ttl: self.config.ttl });
        };
        // The fleet hears of a store gone back before anything else is written to it.
        if let Some((until_ms, reason)) = self.fence_to_set.clone() {
            return Some(Request::SetFence { until_ms, reason });
        }
        if let Some(&slot) = self.to_release.first() {
            return Some(Request::Release { session, slot });
        }
        // The fleet's clock check comes before the first claim: a clock far from the fleet's
        // stops the start before it takes anything.
        if !self.started && self.next_sample.is_some_and(|at| now.boot >= at) {
            return Some(self.sample_request(session));
        }
        if self.wants_more_slots() && self.next_claim_at.is_none_or(|at| now.boot >= at) {
            self.next_claim_at = None;
            return Some(self.next_claim_request(session));
        }
        if let Some(read) = self.next_read_request() {
            return Some(read);
        }
        if let Some(write) = self.next_write_request(session, now) {
            return Some(write);
        }
        if self.next_reconcile.is_some_and(|at| now.boot >= at) {
            let ttl = self.config.ttl;
            let settled = self.unsettled_since.is_none_or(|since| now.boot >= since + ttl * UNSETTLED_FOR);
            self.next_reconcile = (!settled).then(|| now.boot + ttl);
            return Some(Request::ListSlots { session });
        }
        if self.next_count.is_some_and(|at| now.boot >= at) {
            self.next_count = Some(now.boot + COUNT_EVERY);
            return Some(Request::CountSlots);
        }
        if self.next_sample.is_some_and(|at| now.boot >= at) {
            return Some(self.sample_request(session));
        }
        None
    }

    fn sample_request(&mut self, session: SessionId) -> Request {
        let from = (self.random() % self.slot_count()) as Slot;
        Request::SampleClocks { session, from, limit: SAMPLE_PEERS }
    }

    /// The fleet's clock check: this clock against the median of the others' published
    /// clocks. Each was published with a reservation write, and a minting holder writes each
    /// time its minting time gains two thirds of a window, so a write is on average a third
    /// of a window old: the correction added to each, with an error of at most that much
    /// either way. A holder minting nothing stops writing and says so; its clock is left out.
    fn sampled(&mut self, now: Now, clocks: Vec<PeerClock>) {
        self.next_sample = Some(now.boot + SAMPLE_EVERY);
        let Some(max) = self.config.max_fleet_skew_ms else { return };
        let mut peers = self.votes(clocks);
        if peers.is_empty() {
            // No one to compare with: a refusal stands on nothing.
            if self.skew_refusal.take().is_some() {
                self.events.push_back(Event::FleetClockWithin);
                self.publish();
            }
            return;
        }
        let n = peers.len();
        let skew_ms = now.wall_ms.saturating_sub(median(&mut peers));
        self.events.push_back(Event::FleetClock { skew_ms, peers: n });
        if skew_ms.saturating_abs() > max {
            let reason = format!(
                "this instance's clock is {} ms {} the median of {n} other instances' clocks, beyond --max-fleet-skew-ms {max}",
                skew_ms.saturating_abs(),
                if skew_ms > 0 { "ahead of" } else { "behind" },
            );
            if !self.started {
                self.fatal = Some(KeeperError::FleetSkew(reason));
                return;
            }
            if self.skew_refusal.is_none() {
                self.events.push_back(Event::FleetClockBeyond { reason: reason.clone() });
            }
            self.skew_refusal = Some(reason);
        } else if self.skew_refusal.take().is_some() {
            self.events.push_back(Event::FleetClockWithin);
        }
        self.publish();
    }

    /// One clock per other instance: the median of its slots' clocks sampled, corrected for
    /// the age of a write. Counted by slot, an instance of many slots would outvote the rest
    /// of the fleet: one with a bad clock could stop the healthy ones, or, beside the slots of
    /// its own earlier run (under another session), pass itself.
    fn votes(&self, clocks: Vec<PeerClock>) -> Vec<i64> {
        let own: BTreeSet<Slot> = self.slots.iter().map(|s| s.id).collect();
        let session = self.session.as_ref().map(|s| s.id);
        let mut by_holder: BTreeMap<SessionId, Vec<i64>> = BTreeMap::new();
        for clock in clocks.into_iter().filter(|c| !own.contains(&c.slot) && Some(c.holder) != session) {
            by_holder.entry(clock.holder).or_default().push(clock.wall_ms.saturating_add(self.config.window_ms / 3));
        }
        by_holder.into_values().map(|mut walls| median(&mut walls)).collect()
    }

    fn wanted(&self) -> usize {
        match &self.config.policy {
            SlotPolicy::Fixed(ids) => ids.len(),
            SlotPolicy::Leased { count, .. } => *count,
        }
    }

    fn wants_more_slots(&self) -> bool {
        self.stopping.is_none() && self.session.is_some() && self.slots.len() < self.wanted()
    }

    fn slot_count(&self) -> u64 {
        self.config.layout.max_worker() + 1
    }

    fn next_claim_request(&mut self, session: SessionId) -> Request {
        let held: BTreeSet<Slot> = self.slots.iter().map(|s| s.id).collect();
        if let SlotPolicy::Fixed(ids) = &self.config.policy {
            let slot = *ids.iter().find(|id| !held.contains(id)).expect("wants more slots");
            return Request::Claim { session, slot };
        }
        let Some(listing) = &self.listing else {
            return Request::ListSlots { session };
        };
        let free = |id: &Slot| !listing.taken.contains(id) && !held.contains(id) && !self.excluded.contains(id);
        let SlotPolicy::Leased { preferred, .. } = &self.config.policy else { unreachable!() };
        let slots = self.slot_count();
        // The slots lost before come first (a re-claim gets its slot back when it can), then
        // the configured preference (a StatefulSet ordinal), then any free one at random, so
        // that instances starting together rarely race for the same slot.
        let first = self.lost.iter().chain(preferred).copied().find(|id| u64::from(*id) < slots && free(id));
        let candidates: Vec<Slot> = match first {
            Some(slot) => vec![slot],
            None => (0..slots as Slot).filter(free).collect(),
        };
        if candidates.is_empty() {
            // The listing shows nothing free: list again to see whether slots were freed.
            self.listing = None;
            return Request::ListSlots { session };
        }
        let slot = candidates[(self.random() % candidates.len() as u64) as usize];
        Request::Claim { session, slot }
    }

    fn next_read_request(&self) -> Option<Request> {
        // At most one transaction's worth; the rest go in the next requests.
        let slots: Vec<Slot> = self
            .slots
            .iter()
            .filter(|s| s.phase == Phase::NeedFloor || s.version.is_none())
            .map(|s| s.id)
            .take(MAX_READS)
            .collect();
        let linearizable = !defects::active(Defect::StaleFloorRead);
        (!slots.is_empty()).then_some(Request::ReadReservations { slots, linearizable })
    }

    /// The minting time reservations are measured from: the wall clock, or the minter's
    /// time when that is ahead.
    fn base_ms(&self, now: Now) -> i64 {
        self.mint_ms.map_or(now.wall_ms, |m| m.max(now.wall_ms))
    }

    /// The largest reservation the layout can hold: its last millisecond.
    fn ceiling_ms(&self) -> i64 {
        self.config.layout.expiry_ms().saturating_sub(1)
    }

    /// What a slot's reservation is measured from: the minting time, never below its floor.
    fn extension_base(&self, now: Now, slot: &Claimed) -> i64 {
        self.base_ms(now).max(slot.floor_ms.unwrap_or(i64::MIN))
    }

    /// How far `slot`'s reservation is written: a window past where minting stands. A floor
    /// further ahead of the clock than minting may run (the drift bound, and at least a
    /// window) is written as it is: nothing is minted at it yet, and a window past it would
    /// reach further ahead of the clock than any fence counts on, compounding at each fenced
    /// claim (a fence window past now covers every reservation within the drift bound and a
    /// window of a clock; simulator seed 179620463618 lost such a reservation to a restore).
    fn target_ms(&self, now: Now, slot: &Claimed) -> i64 {
        let reach = self.config.max_clock_drift_ms.max(self.config.window_ms);
        // Never below where this process's own minting stands (a resumed claim's floor can
        // be below it: simulator seed 179620722983).
        let minting = self.base_ms(now);
        if let Some(floor) = slot.floor_ms
            && floor > minting.max(now.wall_ms.saturating_add(reach))
        {
            return floor.min(self.ceiling_ms());
        }
        self.extension_base(now, slot).saturating_add(self.config.window_ms).min(self.ceiling_ms())
    }

    /// Whether `slot` needs a reservation write now.
    fn needs_write(&self, now: Now, slot: &Claimed) -> bool {
        if slot.version.is_none() {
            return false;
        }
        match slot.phase {
            Phase::NeedFloor => false,
            Phase::NeedFirstWrite => true,
            Phase::Granted if slot.repair => true,
            Phase::Granted => {
                let target = self.target_ms(now, slot);
                let confirmed = slot.confirmed_ms.unwrap_or(i64::MIN);
                if self.extend_asap {
                    return target > confirmed;
                }
                if !self.minting_lately(now) {
                    // Nothing minted lately: no extension until the minter asks. One write
                    // says so, for the fleet's clock check, which must not take this
                    // instance's last published clock for its clock now.
                    return !slot.idle_marked;
                }
                // Extended when a third of a window is left, to a whole window: once every
                // two thirds of a window, and the hot path never waits.
                target > confirmed
                    && confirmed.saturating_sub(self.extension_base(now, slot)) <= self.config.window_ms / 3
            }
        }
    }

    /// Whether the minter minted lately: its minting time is within [`IDLE_AFTER_MS`] of the
    /// wall clock (or ahead of it). A process that never minted has not.
    fn minting_lately(&self, now: Now) -> bool {
        self.mint_ms.is_some_and(|m| m >= now.wall_ms.saturating_sub(IDLE_AFTER_MS))
    }

    /// Whether `slot`'s next write only marks it idle: the minter minted nothing lately and
    /// has not asked for more.
    fn idle_write(&self, now: Now, slot: &Claimed) -> bool {
        slot.phase == Phase::Granted && !slot.repair && !self.extend_asap && !self.minting_lately(now)
    }

    fn next_write_request(&mut self, session: SessionId, now: Now) -> Option<Request> {
        let mut due: Vec<&Claimed> = self.slots.iter().filter(|slot| self.needs_write(now, slot)).collect();
        if due.is_empty() {
            return None;
        }
        // At most one transaction's worth, the slots minting on the shortest reservation
        // first (a first write adds a slot; an extension keeps one minting). Each request is
        // all or none on its own slots only: its refusal or unknown outcome touches no other.
        due.sort_by_key(|slot| (slot.phase != Phase::Granted, slot.confirmed_ms));
        let writes: Vec<Write> = due
            .into_iter()
            .take(MAX_WRITES)
            .map(|slot| {
                let idle = self.idle_write(now, slot);
                Write {
                    slot: slot.id,
                    // An idle mark leaves the reservation where it is; a first write marks a
                    // slot idle too when nothing was minted lately (a new process).
                    // Never below what was confirmed: a repair writes back at least that.
                    until_ms: match (idle, slot.confirmed_ms) {
                        (true, Some(confirmed)) => confirmed,
                        (_, confirmed) => self.target_ms(now, slot).max(confirmed.unwrap_or(i64::MIN)),
                    },
                    expect: Some(slot.version.expect("needs_write checked it")),
                    wall_ms: now.wall_ms,
                    idle: idle || (slot.phase == Phase::NeedFirstWrite && !self.minting_lately(now)),
                    claim_version: slot.claim_version_for(slot.version),
                }
            })
            .collect();
        // Invariant 3: the write applies only while this session holds each slot, and only
        // over the exact version it replaces, so a late write never lowers the reservation.
        let check_claim = !defects::active(Defect::WriteWithoutClaimCheck);
        let writes = if defects::active(Defect::WriteWithoutVersionCheck) {
            writes.into_iter().map(|w| Write { expect: None, claim_version: None, ..w }).collect()
        } else {
            writes
        };
        Some(Request::WriteReservations { session, writes, check_claim })
    }

    /// When the next extension (or idle mark) falls due, if nothing else prompts it.
    fn next_extension_at(&self, now: Now) -> Option<Duration> {
        let granted = self.slots.iter().filter(|s| s.phase == Phase::Granted && s.version.is_some());
        if granted.clone().any(|s| self.needs_write(now, s)) {
            return Some(now.boot);
        }
        if !self.minting_lately(now) {
            // Idle and marked so: only the minter's wish wakes the keeper.
            return None;
        }
        let after = |wait_ms: i64| (wait_ms > 0).then(|| now.boot + Duration::from_millis(wait_ms as u64));
        // The instant the minter has minted nothing for IDLE_AFTER_MS: then the idle mark.
        let idle_at = self.mint_ms.and_then(|m| after(m + IDLE_AFTER_MS + 1 - now.wall_ms));
        granted
            .filter_map(|s| s.confirmed_ms)
            .filter_map(|confirmed| {
                // Due when a third of a window is left; a reservation already at the
                // layout's ceiling never falls due.
                after((confirmed - self.config.window_ms / 3).saturating_sub(self.base_ms(now)))
            })
            .chain(idle_at)
            .min()
    }

    fn next_stop_request(&mut self, now: Now) -> Option<Request> {
        let Some(session) = self.session.as_ref().map(|s| s.id) else {
            // Nothing claimed (or the claim is gone): nothing to save or release.
            self.done = true;
            return None;
        };
        if self.stopping.as_ref().expect("stopping").shrink.is_none() {
            let planned = self.plan_shrink().unwrap_or_default();
            self.stopping.as_mut().expect("stopping").shrink = Some(planned);
        }
        let left = self.stopping.as_mut().and_then(|s| s.shrink.as_mut()).expect("planned");
        if !left.is_empty() {
            // A request's worth at a time, each all or none on its own slots: a slot's final
            // reservation covers what that slot minted, whatever became of the others'.
            let writes: Vec<Write> =
                left.drain(..left.len().min(MAX_WRITES)).map(|w| Write { wall_ms: now.wall_ms, ..w }).collect();
            let check_claim = !defects::active(Defect::WriteWithoutClaimCheck);
            return Some(Request::WriteReservations { session, writes, check_claim });
        }
        Some(Request::CloseSession { session })
    }

    /// The final writes: each granted slot's reservation shrunk to the last millisecond
    /// minted on it (never below the floor it inherited), so the next start mints at once.
    /// Only when what was minted is known, and every version is known.
    fn plan_shrink(&mut self) -> Option<Vec<Write>> {
        let minted = self.stopping.as_ref().expect("stopping").minted.clone();
        let minted = match minted {
            Minted::UpTo(_) => minted,
            Minted::Unknown if defects::active(Defect::ShrinkOnUnknown) => Minted::UpTo(self.progress.clone()),
            Minted::Unknown => {
                self.events.push_back(Event::FinalKept { why: "what the minter minted is unknown" });
                return None;
            }
        };
        let mut writes = Vec::new();
        for slot in self.slots.iter().filter(|s| s.phase == Phase::Granted) {
            let Some(version) = slot.version else {
                self.events.push_back(Event::FinalKept { why: "a reservation write's outcome is unknown" });
                return None;
            };
            let last = minted.last_ms(slot.id)?;
            let epoch = self.config.layout.epoch_ms;
            let until_ms = last.max(slot.floor_ms).unwrap_or(epoch).max(epoch);
            if slot.confirmed_ms.is_some_and(|c| until_ms < c) {
                // The writer's clock is stamped as each request goes out.
                writes.push(Write {
                    slot: slot.id,
                    until_ms,
                    expect: Some(version),
                    wall_ms: 0,
                    idle: true,
                    claim_version: slot.claim_version_for(Some(version)),
                });
            }
        }
        Some(writes)
    }

    // ---- Handling replies ----

    fn failed(&mut self, now: Now, request: &Request, error: String, outcome: Outcome) {
        match request {
            Request::Renew { .. } => {
                self.events.push_back(Event::RenewFailed { error });
                if let Some(session) = &mut self.session {
                    session.renew_failing = true;
                    session.next_renew = Some(now.boot + RENEW_RETRY);
                }
                return;
            }
            Request::WriteReservations { writes, .. } => {
                self.events.push_back(Event::ReservationWriteFailed { error });
                if outcome == Outcome::Unknown {
                    // The write may have landed: its version is unknown until read again.
                    for write in writes {
                        if let Some(slot) = self.slots.iter_mut().find(|s| s.id == write.slot) {
                            slot.version = None;
                        }
                    }
                }
            }
            Request::CloseSession { .. } if self.stopping.is_some() => {
                // The lease expires by itself; nothing more to do.
                self.events.push_back(Event::RequestFailed { request: request.name(), error });
                self.session = None;
                self.done = true;
                return;
            }
            Request::Claim { .. } => {
                // The claim may have committed with its reply lost: list again, and a slot
                // that carries this session is adopted as this instance's own. It may also
                // commit later still, even one refused for certain: a copy of it retried by
                // a proxy, or held by a member, can land after the refusal (simulator seed
                // 96265459142: copies of claims refused under NOSPACE landed once the alarm
                // was cleared, and the slot stayed bound to a lease that never used it).
                // Keep checking for a while after any failed claim.
                self.listing = None;
                self.unsettled(now);
                self.events.push_back(Event::RequestFailed { request: request.name(), error });
            }
            _ => self.events.push_back(Event::RequestFailed { request: request.name(), error }),
        }
        if self.stopping.is_some() {
            // Stopping: a failed final write leaves the saved reservation as it is.
            return;
        }
        self.retry_at = Some(now.boot + self.jittered(self.backoff));
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    fn margin(ttl: Duration) -> Duration {
        (ttl / 10).max(Duration::from_millis(500)).min(ttl / 2)
    }

    /// The local deadline of a claim confirmed by a request sent at `sent`.
    fn deadline(&self, now: Now, sent: Duration, ttl: Duration) -> Duration {
        // Invariant 4's other half: the deadline counts from when the request was *sent*
        // (the store may have started the TTL any time after that), never from the reply.
        let from = if defects::active(Defect::DeadlineFromReply) { now.boot } else { sent };
        from + ttl - Self::margin(ttl)
    }

    fn opened(&mut self, now: Now, sent: Duration, session: SessionId, ttl: Option<Duration>) {
        // The first renewal is timed from the grant, not from the end of the claim.
        let (deadline, next_renew) = match ttl {
            Some(ttl) => (Some(self.deadline(now, sent, ttl)), Some(sent + ttl / 3)),
            None => (None, None),
        };
        self.session =
            Some(Session { id: session, ttl, deadline, next_renew, deadline_reported: false, renew_failing: false });
        self.listing = None;
        // Whatever the old session may have left bound to it goes with its lease.
        self.unsettled_since = None;
        self.next_reconcile = None;
        if self.next_sample.is_none()
            && self.config.max_fleet_skew_ms.is_some()
            && matches!(self.config.policy, SlotPolicy::Leased { .. })
        {
            self.next_sample = Some(now.boot);
        }
        self.events.push_back(Event::SessionOpened { session, ttl });
    }

    fn listed(&mut self, now: Now, taken: Vec<Slot>, ours: Vec<Slot>) {
        let slots = self.slot_count();
        self.events.push_back(Event::SlotsListed { taken: taken.len(), slots });
        // A slot that already carries this session is this instance's: a claim whose reply
        // was lost committed. Adopt it rather than leaving it bound to the lease.
        for slot in ours {
            if self.slots.iter().any(|s| s.id == slot) {
                continue;
            }
            if self.slots.len() < self.wanted() && !self.excluded.contains(&slot) {
                self.adopt(slot);
            } else if !self.to_release.contains(&slot) {
                self.to_release.push(slot);
            }
        }
        let held: BTreeSet<Slot> = self.slots.iter().map(|s| s.id).collect();
        let taken: BTreeSet<Slot> = taken.into_iter().collect();
        let free =
            (0..slots as Slot).filter(|id| !taken.contains(id) && !held.contains(id) && !self.excluded.contains(id));
        if self.wants_more_slots() && free.count() == 0 {
            self.no_free_slot(now);
            return;
        }
        self.listing = Some(Listing { taken });
    }

    fn no_free_slot(&mut self, now: Now) {
        let slots = self.slot_count();
        if !self.started {
            self.fatal = Some(KeeperError::AllTaken { slots, held: self.slots.len(), wanted: self.wanted() });
            return;
        }
        // Running: slots may free up (an instance stops, a lease expires); look again later,
        // minting on the slots held meanwhile.
        self.events.push_back(Event::NoFreeSlot { slots });
        self.listing = None;
        self.next_claim_at = Some(now.boot + self.jittered(MAX_BACKOFF));
    }

    fn adopt(&mut self, slot: Slot) {
        self.claims += 1;
        self.slots.push(Claimed {
            id: slot,
            claim: self.claims,
            phase: Phase::NeedFloor,
            version: Some(Version::Absent),
            floor_ms: None,
            confirmed_ms: None,
            resumes: false,
            idle_marked: false,
            repair: false,
            fenced: None,
            claim_version: 1,
        });
        self.slots.sort_by_key(|s| s.id);
    }

    fn claimed(&mut self, now: Now, session: SessionId, slot: Slot, won: bool) {
        if self.session.as_ref().is_none_or(|s| s.id != session) {
            return;
        }
        let won = won && !defects::active(Defect::ClaimNotIdempotent);
        if won {
            if !self.slots.iter().any(|s| s.id == slot) {
                self.adopt(slot);
            }
        } else {
            // Someone else was faster. The listing is as old as this instance's start, and
            // instances starting together took many slots since: picking again from it, a
            // late starter of a full fleet tries hundreds of taken slots one by one. List
            // again (one keys-only read) and pick among the slots free now, after a short
            // random pause so that the losers of one race do not meet again in the next.
            self.listing = None;
            self.retry_at = Some(now.boot + Duration::from_millis(self.random() % (CLAIM_JITTER_MS + 1)));
        }
    }

    /// Checks a stored reservation: `Ok(None)` when absent, the value and version when it
    /// is a time the layout can hold, and an error naming where it lives otherwise.
    fn check_stored(&self, read: &SlotRead) -> Result<(Option<i64>, Version), KeeperError> {
        let corrupt =
            |reason: String| KeeperError::Corrupt { slot: read.slot, location: read.location.clone(), reason };
        match &read.stored {
            Stored::Absent | Stored::Missing { .. } => Ok((None, Version::Absent)),
            Stored::Corrupt { reason } => Err(corrupt(reason.clone())),
            Stored::Reserved { until_ms, version } => {
                let layout = &self.config.layout;
                // A reservation outside the layout's time range is corrupt: trusting it could
                // overflow, or read as "no floor" (a silent reset).
                if *until_ms < layout.epoch_ms || *until_ms >= layout.expiry_ms() {
                    return Err(corrupt(format!(
                        "the reservation {until_ms} ({}), outside the layout's time range {} to {}",
                        rfc3339_ms(*until_ms),
                        rfc3339_ms(layout.epoch_ms),
                        rfc3339_ms(layout.expiry_ms())
                    )));
                }
                Ok((Some(*until_ms), *version))
            }
        }
    }

    fn read(&mut self, now: Now, reads: Vec<SlotRead>, fence: Option<Fence>) {
        if let Some(fence) = fence {
            self.learn_fence(fence);
        }
        for read in reads {
            let Some(index) = self.slots.iter().position(|s| s.id == read.slot) else { continue };
            let checked = self.check_stored(&read);
            match checked {
                Err(error) => {
                    let KeeperError::Corrupt { slot: id, location, reason } = &error else { unreachable!() };
                    self.events.push_back(Event::Corrupt {
                        slot: *id,
                        location: location.clone(),
                        reason: reason.clone(),
                    });
                    if !self.started || matches!(self.config.policy, SlotPolicy::Fixed(_)) {
                        self.fatal = Some(error);
                        return;
                    }
                    // Running: give the slot back untouched and take another.
                    let id = *id;
                    self.excluded.insert(id);
                    self.lose(id, LossReason::Corrupt);
                    self.to_release.push(id);
                }
                Ok((value, version)) if self.slots[index].phase == Phase::NeedFloor => {
                    self.floor_read(now, index, &read, value, version)
                }
                Ok((value, version)) => {
                    // Re-read after a write of unknown outcome: learn the version to write
                    // over, nothing more. The value may be another holder's (the slot's key
                    // may be gone, deleted by hand): only a write of this session, confirmed,
                    // extends what may be minted (invariant 1), and the next write's claim
                    // check finds out whether the slot is still this one's.
                    let slot = &mut self.slots[index];
                    slot.version = Some(version);
                    if slot.confirmed_ms.is_some_and(|c| value.is_none_or(|v| v < c)) && !slot.repair {
                        let detail = format!(
                            "the reservation of slot {} reads {}, below {} that this instance wrote and saw confirmed",
                            slot.id,
                            value.map_or("nothing".into(), rfc3339_ms),
                            rfc3339_ms(slot.confirmed_ms.expect("checked"))
                        );
                        self.went_back(now, detail);
                    }
                }
            }
        }
        self.publish();
    }

    /// The floor of a new claim of `self.slots[index]`, read after the claim (invariant 2):
    /// the stored reservation, or the claim it continues, raised to a fence where one stands.
    fn floor_read(&mut self, now: Now, index: usize, read: &SlotRead, value: Option<i64>, version: Version) {
        let id = self.slots[index].id;
        let own = self.own_writes.get(&id).copied();
        // The stored reservation never goes down, nor its version back: below this instance's
        // own confirmed write, the store lost what was written since (a restored snapshot).
        // Nor does one revision hold two values: the same version with another value is a
        // write of another history (a restore hands revisions out again).
        if let Some(own) = own
            && (version < own.version
                || value.is_none_or(|v| v < own.until_ms)
                || (version == own.version && value != Some(own.until_ms)))
        {
            let detail = format!(
                "the reservation of slot {id} reads {} (version {version:?}), below {} (version {:?}) that this instance wrote and saw confirmed",
                value.map_or("nothing".into(), rfc3339_ms),
                rfc3339_ms(own.until_ms),
                own.version
            );
            self.went_back(now, detail);
        }
        let own = self.own_writes.get(&id).copied();
        let missing_fence = self.fence_from(now, self.fence.as_ref().map(|f| f.until_ms));
        let slot = &mut self.slots[index];
        // Invariant 2: the floor is read after the claim succeeded, with a linearizable
        // read; only later ticks are minted.
        slot.version = Some(version);
        // Nobody wrote the reservation since this instance's own last write: nobody else
        // minted on the slot since the claim that wrote it, so this claim continues that one,
        // above that claim's floor (which covers every other holder before it). Not the floor
        // of some older claim the minter saw: between the two, another holder may have minted
        //. This process's own IDs are kept apart by the
        // generator's cursor, which only moves up.
        match own {
            Some(own) if own.version == version && version != Version::Absent => {
                slot.floor_ms = own.floor_ms;
                slot.resumes = true;
            }
            _ => {
                slot.floor_ms = value;
                slot.resumes = false;
            }
        }
        slot.fenced = None;
        if defects::active(Defect::FenceIgnored) {
            slot.phase = Phase::NeedFirstWrite;
            return;
        }
        // Nothing is known of how far a missing slot was minted: wait out anything anyone
        // could, counted from the fleet's fence where it stands ahead (its holders reserved
        // past it, in the reservation now missing).
        let missing = match &read.stored {
            Stored::Missing { reason } => Some((missing_fence, format!("{}: {reason}", read.location))),
            _ => None,
        };
        // The fleet's fence floors every claim, whatever the reservation's version: a restore
        // hands the same revisions out again, so a reservation that reads as written after the
        // fence may be an older write landing late (a copy held up in a proxy, seed
        // 96273628996 of the simulator), lower than what its holder minted.
        let fleet = self.fence.as_ref().map(|f| (f.until_ms, f.reason.clone()));
        let raised = missing.into_iter().chain(fleet).max_by_key(|(until_ms, _)| *until_ms);
        if let Some((until_ms, reason)) = raised
            && slot.floor_ms.is_none_or(|floor| floor < until_ms)
        {
            slot.floor_ms = Some(until_ms);
            slot.resumes = false;
            slot.fenced = Some(reason.clone());
            self.events.push_back(Event::SlotFenced { slot: id, until_ms, reason });
        }
        slot.phase = Phase::NeedFirstWrite;
    }

    /// The store went back in time: what was written since its state (claims, reservations,
    /// this instance's own writes) is lost. A fence (here at once, and in the store for the
    /// rest of the fleet) raises every floor read before it past anything minted under the
    /// lost state, this instance's own slots' floors too; they are written again, never below
    /// what it had confirmed; and no version remembered from before is trusted (the store
    /// hands the same revisions out again).
    fn went_back(&mut self, now: Now, detail: String) {
        // Counted from the fence known before the answer that showed it: one that answer
        // brought was set since the store went back (by an instance that found it first), and
        // nothing written under it is lost; counting from it would push the fence a window
        // further at each instance that finds the same restore.
        let until_ms = self.fence_from(now, self.fence_before_reply);
        self.events.push_back(Event::StoreWentBack { detail: detail.clone(), fence_until_ms: until_ms });
        let reason = format!("the store went back in time ({detail})");
        self.raise_fence(KnownFence { until_ms, reason: reason.clone() });
        if matches!(self.config.policy, SlotPolicy::Leased { .. }) {
            self.fence_to_set = Some((until_ms, reason.clone()));
        }
        self.own_writes.clear();
        for slot in &mut self.slots {
            if slot.phase == Phase::Granted {
                slot.repair = true;
                slot.version = None;
            }
        }
        // This instance's own slots are fenced too: in the history the restore threw away,
        // it may have lost one (its key deleted by hand, its lease run out unseen) to another
        // instance that minted above its reservation, and the restore brought back its key,
        // its lease and its old reservation. Nothing in the restored store tells.
        self.fence_held(until_ms, &reason);
    }

    /// How far a new fence reaches: a fence window past now, and a reservation window past
    /// `standing` (a fence known to stand). Holders fenced at a fence ahead of their clocks
    /// wrote reservations a window past it; a fence counted from now alone could stop short
    /// of those, once they are lost (deleted by hand, or gone with a restore).
    fn fence_from(&self, now: Now, standing: Option<i64>) -> i64 {
        let from_now = now.wall_ms.saturating_add(self.config.fence_window_ms);
        standing.map_or(from_now, |f| from_now.max(f.saturating_add(self.config.window_ms)))
    }

    /// A fence read from the store. One higher than any known is applied to the slots held
    /// too: a fence is set when etcd went back in time (or by hand after a restore), and a
    /// holder cannot tell whether its claim lasted through the history thrown away (its lease
    /// restored with the snapshot, another instance having held its slot meanwhile).
    fn learn_fence(&mut self, fence: Fence) {
        let known = self.fence.as_ref().map(|f| f.until_ms);
        let reason = fence.reason.clone();
        self.raise_fence(KnownFence { until_ms: fence.until_ms, reason: fence.reason });
        if known.is_none_or(|k| fence.until_ms > k) {
            self.fence_held(fence.until_ms, &reason);
        }
    }

    /// Raises the floor of every slot held (or about to be) to `until_ms`, under a new generation
    /// so that the minter takes it.
    fn fence_held(&mut self, until_ms: i64, reason: &str) {
        let mut regranted = false;
        for slot in &mut self.slots {
            if slot.phase == Phase::NeedFloor || slot.floor_ms.is_some_and(|floor| floor >= until_ms) {
                continue;
            }
            slot.floor_ms = Some(until_ms);
            slot.resumes = false;
            slot.fenced = Some(reason.to_string());
            regranted |= slot.phase == Phase::Granted;
            self.events.push_back(Event::SlotFenced { slot: slot.id, until_ms, reason: reason.to_string() });
        }
        if regranted {
            self.generation += 1;
            self.publish();
        }
    }

    /// Keeps the higher of the fence known and `fence`.
    fn raise_fence(&mut self, fence: KnownFence) {
        if self.fence.as_ref().is_none_or(|known| known.until_ms < fence.until_ms) {
            self.fence = Some(fence);
        }
    }

    fn written(&mut self, now: Now, writes: Vec<Write>, versions: Vec<(Slot, Version)>) {
        let stopping = self.stopping.is_some();
        let mut newly = Vec::new();
        for write in &writes {
            let Some(slot) = self.slots.iter_mut().find(|s| s.id == write.slot) else { continue };
            let version = versions.iter().find(|(id, _)| *id == write.slot).map(|(_, v)| *v);
            slot.version = version;
            if let Some(claim_version) = write.claim_version {
                slot.claim_version = claim_version + 1;
            }
            if let Some(version) = version {
                let older = self.own_writes.get(&slot.id).map(|own| own.floor_ms);
                let floor_ms = match older {
                    Some(older) if crate::defects::active(crate::defects::Defect::ResumeWithOlderFloor) => older,
                    _ => slot.floor_ms,
                };
                self.own_writes.insert(slot.id, OwnWrite { version, until_ms: write.until_ms, floor_ms });
            }
            if stopping {
                continue;
            }
            slot.confirmed_ms = Some(slot.confirmed_ms.map_or(write.until_ms, |c| c.max(write.until_ms)));
            slot.idle_marked = write.idle;
            slot.repair = false;
            if slot.phase == Phase::NeedFirstWrite {
                slot.phase = Phase::Granted;
                newly.push(slot.id);
            }
        }
        if !writes.is_empty() {
            let slots = writes.iter().map(|w| (w.slot, w.until_ms)).collect();
            let event = if stopping { Event::FinalSaved { slots } } else { Event::ReservationsWritten { slots } };
            self.events.push_back(event);
        }
        if stopping {
            return;
        }
        self.extend_asap = false;
        for id in newly {
            let slot = self.slots.iter().find(|s| s.id == id).expect("just granted");
            self.events.push_back(Event::SlotTaken {
                slot: id,
                claim: slot.claim,
                floor_ms: slot.floor_ms,
                reserved_ms: slot.confirmed_ms.expect("just written"),
                resumed: slot.resumes,
                at_ms: now.wall_ms,
                minted_ms: if slot.resumes { self.minted_on.get(&id).copied() } else { None },
            });
            self.generation += 1;
        }
        self.publish();
    }

    fn write_refused(&mut self, now: Now, writes: Vec<Write>, not_ours: Vec<Slot>, current: Vec<SlotRead>) {
        if self.stopping.is_some() {
            self.events.push_back(Event::FinalKept { why: "the reservation changed or the slot was lost" });
            return;
        }
        let mut went_back = None;
        for read in current {
            if let Some(slot) = self.slots.iter_mut().find(|s| s.id == read.slot)
                && !not_ours.contains(&read.slot)
            {
                // The version moved: this session's own write of unknown outcome landed. Learn
                // the version; the value is re-checked by the read it prompts if needed.
                slot.version = read.stored.version();
                if let Some(claim_version) = read.claim_version {
                    slot.claim_version = claim_version;
                }
                // Below what this instance wrote and saw confirmed: the store lost it (went
                // back in time). Gone altogether, it was deleted by hand (or lost to a
                // restore, which the answer's revision tells): written again, no lower.
                match (&read.stored, slot.confirmed_ms) {
                    (Stored::Reserved { until_ms, .. }, Some(confirmed)) if *until_ms < confirmed => {
                        went_back = Some(format!(
                            "the reservation of slot {} reads {}, below {} that this instance wrote and saw confirmed",
                            slot.id,
                            rfc3339_ms(*until_ms),
                            rfc3339_ms(confirmed)
                        ));
                    }
                    (Stored::Absent | Stored::Missing { .. }, Some(_)) => slot.repair = true,
                    _ => {}
                }
            }
        }
        if let Some(detail) = went_back {
            self.went_back(now, detail);
        }
        for slot in not_ours {
            self.lose(slot, LossReason::NotOurs);
            // The key went (deleted by hand) while the lease lives: a late copy of a claim
            // could bind a slot to it again.
            self.unsettled(now);
        }
        let _ = writes;
        self.publish();
    }

    fn renewed(&mut self, now: Now, sent: Duration, session: SessionId, ttl: Duration) {
        let deadline = self.deadline(now, sent, ttl);
        let Some(current) = self.session.as_mut().filter(|s| s.id == session) else { return };
        current.ttl = Some(ttl);
        current.deadline = Some(current.deadline.map_or(deadline, |d| d.max(deadline)));
        current.next_renew = Some(sent + ttl / 3);
        if current.deadline.is_some_and(|d| d > now.boot) {
            current.deadline_reported = false;
        }
        current.renew_failing = false;
        self.events.push_back(Event::Renewed);
        self.publish();
    }

    /// The store says the session is gone: every slot with it. Open a new one and claim again.
    fn session_gone(&mut self, session: SessionId) {
        if self.session.as_ref().is_none_or(|s| s.id != session) {
            return;
        }
        self.session = None;
        let ids: Vec<Slot> = self.slots.iter().map(|s| s.id).collect();
        for id in ids {
            self.lose(id, LossReason::SessionGone);
        }
        self.publish();
    }

    /// Something may leave a slot bound to this session unseen: check for a while.
    fn unsettled(&mut self, now: Now) {
        if !matches!(self.config.policy, SlotPolicy::Leased { .. }) {
            return;
        }
        self.unsettled_since = Some(now.boot);
        let first = now.boot + self.config.ttl;
        self.next_reconcile = Some(self.next_reconcile.map_or(first, |at| at.min(first)));
    }

    fn lose(&mut self, id: Slot, reason: LossReason) {
        let Some(index) = self.slots.iter().position(|s| s.id == id) else { return };
        let slot = self.slots.remove(index);
        if slot.phase == Phase::Granted {
            self.generation += 1;
        }
        if reason != LossReason::Corrupt && !self.lost.contains(&id) {
            self.lost.push(id);
        }
        self.listing = None;
        self.events.push_back(Event::SlotLost { slot: id, reason });
    }

    // ---- Publishing ----

    fn publish(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        let granted: Vec<SlotGrant> = self
            .slots
            .iter()
            .filter(|s| s.phase == Phase::Granted)
            .map(|s| SlotGrant {
                slot: s.id,
                claim: s.claim,
                floor_ms: s.floor_ms,
                reserved_ms: s.confirmed_ms.expect("granted slots have a reservation"),
                resumes: s.resumes,
                fenced: s.fenced.clone(),
            })
            .collect();
        if granted.len() == self.wanted() && !self.started {
            self.started = true;
            if matches!(self.config.policy, SlotPolicy::Leased { .. }) {
                self.next_count = Some(Duration::ZERO);
            }
        }
        let holding = if let Some(reason) = self.skew_refusal.clone().filter(|_| !granted.is_empty()) {
            Holding::Unheld { reason }
        } else if granted.is_empty() {
            let reason = match self.session {
                None => "the claim on the store was lost; claiming again".to_string(),
                Some(_) => "claiming a slot".to_string(),
            };
            Holding::Unheld { reason }
        } else {
            let deadline = self.session.as_ref().and_then(|s| s.deadline);
            let on_demand = self.slots.iter().filter(|s| s.phase == Phase::Granted).all(|s| s.idle_marked);
            let session = self.session.as_ref().map(|s| s.id);
            Holding::Held(Grant { slots: granted, generation: self.generation, deadline, session, on_demand })
        };
        if holding != self.published {
            self.published = holding;
            self.holding_changed = true;
        }
    }

    fn publish_unheld(&mut self, reason: &str) {
        let holding = Holding::Unheld { reason: reason.to_string() };
        if holding != self.published {
            self.published = holding;
            self.holding_changed = true;
        }
    }

    // ---- Randomness ----

    /// xorshift64*: enough to spread slot choices and jitter, and reproducible from the seed.
    fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn jittered(&mut self, base: Duration) -> Duration {
        let ms = base.as_millis() as u64;
        base + Duration::from_millis(self.random() % (ms / 2 + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Write;

    const WALL: i64 = 1_800_000_000_000;

    fn keeper(policy: SlotPolicy, window_ms: i64) -> Keeper {
        Keeper::new(KeeperConfig {
            policy,
            ttl: Duration::from_secs(3),
            window_ms,
            layout: Layout::default_snowmint(),
            seed: 1,
            max_fleet_skew_ms: None,
            fence_window_ms: 53_000,
            max_clock_drift_ms: 10_000,
        })
    }

    fn at(ms: u64) -> Now {
        Now { wall_ms: WALL + ms as i64, boot: Duration::from_millis(ms) }
    }

    /// Sends the next request at `now` and answers it with `reply`; returns the request.
    fn exchange(k: &mut Keeper, now: Now, reply: impl FnOnce(&Request) -> Reply) -> Request {
        let (id, request) = k.poll_request(now).expect("a request is due");
        let answer = reply(&request);
        k.handle_reply(now, id, answer);
        request
    }

    /// Takes slot 4 with a fresh lease: open, list, claim, read, write.
    fn take_slot(k: &mut Keeper, now: Now, floor: Stored) {
        exchange(k, now, |_| Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(3)) });
        exchange(k, now, |_| Reply::Slots { taken: (0..1024).filter(|&s| s != 4).collect(), ours: vec![] });
        exchange(k, now, |r| {
            assert_eq!(r, &Request::Claim { session: 77, slot: 4 });
            Reply::Claimed { slot: 4, won: true }
        });
        exchange(k, now, |_| {
            Reply::reservations(vec![SlotRead {
                slot: 4,
                location: "/p/reservations/4".into(),
                stored: floor,
                claim_version: None,
            }])
        });
        exchange(k, now, |r| match r {
            Request::WriteReservations { writes, .. } => {
                // Onto an absent reservation, at the new claim's version.
                assert_eq!(writes[0].claim_version, (writes[0].expect == Some(Version::Absent)).then_some(1));
                Reply::Written(vec![(writes[0].slot, Version::At(10))])
            }
            other => panic!("expected the first write, got {other:?}"),
        });
        assert!(k.started());
    }

    fn granted(k: &mut Keeper) -> Grant {
        k.poll_holding();
        k.holding().grant().cloned().expect("held")
    }

    /// Issue 23: reservations are extended as far as minting needs. A process that mints
    /// nothing marks its slot idle with its first write and then writes nothing at all, and
    /// asks for no timer; the minter's wish brings one write at once; while minting goes on,
    /// one write every two thirds of a window; when it stops, one more write marks the slot
    /// idle, leaving the reservation where it was, and nothing after.
    #[test]
    fn reservations_are_extended_only_as_far_as_minting_needs() {
        let mut k = keeper(SlotPolicy::Fixed(vec![4]), 3_000);
        exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 1, ttl: None });
        exchange(&mut k, at(0), |_| Reply::Claimed { slot: 4, won: true });
        exchange(&mut k, at(0), |_| {
            Reply::reservations(vec![SlotRead {
                slot: 4,
                location: "state/4".into(),
                stored: Stored::Absent,
                claim_version: None,
            }])
        });
        let mut version = 10;
        let mut writes: Vec<Write> = Vec::new();
        let mut answer = |k: &mut Keeper, now: Now, writes: &mut Vec<Write>| {
            while let Some((id, request)) = k.poll_request(now) {
                let Request::WriteReservations { writes: w, .. } = request else { panic!("{request:?}") };
                version += 1;
                k.handle_reply(now, id, Reply::Written(w.iter().map(|w| (w.slot, Version::At(version))).collect()));
                writes.extend(w);
            }
        };
        answer(&mut k, at(0), &mut writes);
        assert!(matches!(writes.as_slice(), [Write { idle: true, until_ms, .. }] if *until_ms == WALL + 3_000));
        assert!(granted(&mut k).on_demand);

        // A minute with nothing minted: no write, and no timer asked for.
        for ms in (100..60_000).step_by(100) {
            k.handle_timeout(at(ms));
            answer(&mut k, at(ms), &mut writes);
        }
        assert_eq!(writes.len(), 1, "an idle instance wrote: {writes:?}");
        assert_eq!(k.poll_timeout(at(60_000)), None);

        // A request: the minter is past the lapsed reservation and asks.
        k.handle_progress(WALL + 60_000, vec![(4, WALL + 59_000)]);
        k.extend_now();
        answer(&mut k, at(60_000), &mut writes);
        assert_eq!(writes.len(), 2);
        assert_eq!((writes[1].until_ms, writes[1].idle), (WALL + 63_000, false));
        let grant = granted(&mut k);
        assert!(!grant.on_demand);
        assert_eq!(grant.slots[0].reserved_ms, WALL + 63_000);

        // Ten seconds of minting: a write each two seconds.
        for ms in (60_100..70_000).step_by(100) {
            k.handle_progress(WALL + ms as i64, vec![(4, WALL + ms as i64)]);
            k.handle_timeout(at(ms));
            answer(&mut k, at(ms), &mut writes);
            assert!(granted(&mut k).slots[0].reserved_ms >= WALL + ms as i64 + 1_000, "the hot path would wait");
        }
        let extensions = writes.len() - 2;
        assert!((4..=5).contains(&extensions), "{extensions} extensions in 10 s of minting");

        // Minting stops. For IDLE_AFTER_MS the reservation is kept ahead still (a caller
        // that asks every few seconds never waits); then one write marks the slot idle,
        // leaving the reservation where it was, and nothing is written after it.
        let before = writes.len();
        for ms in (70_000..130_000).step_by(100) {
            k.handle_timeout(at(ms));
            answer(&mut k, at(ms), &mut writes);
        }
        let after = &writes[before..];
        assert!(after.len() <= 6, "{} writes in the minute after minting stopped: {after:?}", after.len());
        let (mark, kept) = (after.last().unwrap(), &writes[writes.len() - 2]);
        assert!(mark.idle && !kept.idle && mark.until_ms == kept.until_ms, "{after:?}");
        assert!(mark.wall_ms >= WALL + 70_000 + IDLE_AFTER_MS && mark.wall_ms < WALL + 70_000 + IDLE_AFTER_MS + 200);
        assert!(granted(&mut k).on_demand);
        assert_eq!(k.poll_timeout(at(130_000)), None);
    }

    /// A keep-alive answered "lease not found" ends the session at once; the
    /// slot is re-claimed without waiting for a reservation write to fail.
    #[test]
    fn a_renewal_that_finds_the_lease_gone_loses_the_slot_at_once() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 60_000);
        take_slot(&mut k, at(0), Stored::Absent);
        // With a 60 s window no write is due for 20 s; the renewal at a third of the TTL is.
        let renew_at = at(1_000);
        let request = exchange(&mut k, renew_at, |_| Reply::SessionGone);
        assert_eq!(request, Request::Renew { session: 77 });
        assert!(matches!(k.poll_holding(), Some(Holding::Unheld { .. })));
        let lost = std::iter::from_fn(|| k.poll_event()).any(|e| matches!(e, Event::SlotLost { slot: 4, .. }));
        assert!(lost, "the loss was not reported");
        let (_, next) = k.poll_request(renew_at).expect("claims again at once");
        assert!(matches!(next, Request::OpenSession { .. }), "{next:?}");
    }

    /// A claim that committed with its reply lost is recognised by its lease on
    /// the next listing and adopted, never leaked.
    #[test]
    fn a_claim_whose_reply_was_lost_is_adopted_not_leaked() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![9] }, 3_000);
        exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(3)) });
        exchange(&mut k, at(0), |_| Reply::Slots { taken: vec![], ours: vec![] });
        let claim = exchange(&mut k, at(0), |_| Reply::Failed { error: "timeout".into(), outcome: Outcome::Unknown });
        assert_eq!(claim, Request::Claim { session: 77, slot: 9 });
        // The claim committed: the next listing shows slot 9 under this lease.
        let later = at(500);
        let list = exchange(&mut k, later, |_| Reply::Slots { taken: vec![9], ours: vec![9] });
        assert_eq!(list, Request::ListSlots { session: 77 });
        let (_, next) = k.poll_request(later).unwrap();
        assert_eq!(next, Request::ReadReservations { slots: vec![9], linearizable: true });
    }

    /// A start that fails after claiming part of what it needs (every other slot taken)
    /// gives back what it claimed when stopped, instead of leaving it bound to its lease
    /// until the TTL: restarted sooner than that, it would find its own old claim in the way
    /// (found by the long sweep, seed 117883).
    #[test]
    fn a_failed_start_gives_back_what_it_claimed() {
        let mut k = keeper(SlotPolicy::Leased { count: 2, preferred: vec![] }, 3_000);
        exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(5)) });
        let all_but_2: Vec<Slot> = (0..1024).filter(|&s| s != 2).collect();
        exchange(&mut k, at(0), |_| Reply::Slots { taken: all_but_2, ours: vec![] });
        let claim = exchange(&mut k, at(0), |_| Reply::Claimed { slot: 2, won: true });
        assert_eq!(claim, Request::Claim { session: 77, slot: 2 });
        // For the second slot it lists again: every slot is taken, the one claimed included.
        let mut guard = 0;
        while k.fatal().is_none() {
            guard += 1;
            assert!(guard < 10, "the start never failed");
            exchange(&mut k, at(0), |request| match request {
                Request::ListSlots { .. } => Reply::Slots { taken: (0..1024).collect(), ours: vec![2] },
                Request::ReadReservations { .. } => Reply::reservations(vec![SlotRead {
                    slot: 2,
                    location: "/p/reservations/2".into(),
                    stored: Stored::Absent,
                    claim_version: None,
                }]),
                Request::WriteReservations { .. } => Reply::Written(vec![(2, Version::At(3))]),
                other => panic!("unexpected {other:?}"),
            });
        }
        assert!(matches!(k.fatal(), Some(KeeperError::AllTaken { held: 1, .. })), "{:?}", k.fatal());
        assert_eq!(k.poll_request(at(10)), None, "nothing more while the start has failed");
        k.finish(Minted::Unknown);
        let (_, request) = k.poll_request(at(10)).expect("the stop goes on after the fatal error");
        assert_eq!(request, Request::CloseSession { session: 77 });
    }

    /// A claim whose reply was lost may commit later (a delayed copy): the slot it binds to
    /// the lease, unused, would keep every other instance out of it for as long as this one
    /// lives. For a while after such a claim the keeper lists its own slots and gives back
    /// any it does not use (found by the simulator, seed 320391).
    #[test]
    fn a_claim_that_commits_after_its_failure_is_given_back() {
        a_claim_that_commits_after_it_failed_is_given_back(Outcome::Unknown, "no answer in time");
    }

    /// The same, for claims refused for certain: a copy of one (a proxy's retry) can still
    /// land after the refusal (simulator seed 96265459142, under etcd's NOSPACE alarm).
    #[test]
    fn a_copy_of_a_refused_claim_that_lands_later_is_given_back() {
        a_claim_that_commits_after_it_failed_is_given_back(
            Outcome::NotApplied,
            "etcdserver: mvcc: database space exceeded",
        );
    }

    fn a_claim_that_commits_after_it_failed_is_given_back(outcome: Outcome, error: &str) {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(3)) });
        let taken: Vec<Slot> = (0..1024).filter(|&s| s != 4 && s != 5).collect();
        exchange(&mut k, at(0), |_| Reply::Slots { taken: taken.clone(), ours: vec![] });
        let claim = exchange(&mut k, at(0), |_| Reply::Failed { error: error.into(), outcome });
        let Request::Claim { slot: tried, .. } = claim else { panic!("{claim:?}") };
        let other = if tried == 4 { 5 } else { 4 };
        // Listed again after a backoff: the claim has not landed yet.
        let mut now = 0;
        let mut released = None;
        let mut guard = 0;
        while released.is_none() {
            guard += 1;
            assert!(guard < 200, "the late claim's slot was never given back");
            now += 100;
            let Some((id, request)) = k.poll_request(at(now)) else { continue };
            let landed = now >= 2_000;
            let reply = match &request {
                Request::ListSlots { .. } if !landed => Reply::Slots { taken: taken.clone(), ours: vec![] },
                // The claim landed late: both slots carry the lease, one is in use.
                Request::ListSlots { .. } => {
                    let mut all = taken.clone();
                    all.extend([4, 5]);
                    Reply::Slots { taken: all, ours: vec![4, 5] }
                }
                // Claims of that slot keep failing (they too may land late); the other is won.
                Request::Claim { slot, .. } if *slot == tried => Reply::Failed { error: error.into(), outcome },
                Request::Claim { slot, .. } => Reply::Claimed { slot: *slot, won: true },
                Request::ReadReservations { slots, .. } => Reply::reservations(
                    slots
                        .iter()
                        .map(|&slot| SlotRead {
                            slot,
                            location: format!("/p/reservations/{slot}"),
                            stored: Stored::Absent,
                            claim_version: None,
                        })
                        .collect(),
                ),
                Request::WriteReservations { writes, .. } => {
                    Reply::Written(writes.iter().map(|w| (w.slot, Version::At(now as i64))).collect())
                }
                Request::Renew { .. } => Reply::Renewed { ttl: Duration::from_secs(3), fence: None },
                Request::CountSlots => Reply::SlotCount { taken: 1023 },
                Request::Release { slot, .. } => {
                    released = Some(*slot);
                    Reply::Released
                }
                other => panic!("unexpected {other:?}"),
            };
            k.handle_reply(at(now), id, reply);
        }
        assert_eq!(released, Some(tried), "the slot claimed late is given back, the one in use kept");
        assert_eq!(granted(&mut k).slots.iter().map(|s| s.slot).collect::<Vec<_>>(), [other]);
        assert!(now <= 2_000 + 3_000 + 500, "given back within a TTL of landing, at {now} ms");
    }

    /// A stored reservation outside the layout's time range stops the start,
    /// naming where it lives, and nothing is written over it.
    #[test]
    fn an_absurd_stored_reservation_stops_the_start_and_is_never_written_over() {
        for absurd in [i64::MAX - 5, -1, Layout::default_snowmint().expiry_ms()] {
            let mut k = keeper(SlotPolicy::Fixed(vec![4]), 3_000);
            exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 1, ttl: None });
            exchange(&mut k, at(0), |_| Reply::Claimed { slot: 4, won: true });
            exchange(&mut k, at(0), |_| {
                Reply::reservations(vec![SlotRead {
                    slot: 4,
                    location: "state/worker-4.json".into(),
                    stored: Stored::Reserved { until_ms: absurd, version: Version::At(3) },
                    claim_version: None,
                }])
            });
            let error = k.fatal().expect("the start stops").to_string();
            assert!(error.contains("state/worker-4.json") && error.contains("outside"), "{error}");
            assert_eq!(k.poll_request(at(0)), None, "wrote after finding {absurd} corrupt");
        }
    }

    /// The first renewal is timed from the lease grant, not from the end of a
    /// slow claim.
    #[test]
    fn the_first_renewal_is_timed_from_the_grant() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(3)) });
        // The listing takes 1.5 s to answer.
        let (id, _) = k.poll_request(at(0)).unwrap();
        k.handle_reply(at(1_500), id, Reply::Slots { taken: vec![], ours: vec![] });
        // A third of the TTL after the grant, the renewal comes before the claim goes on.
        let (_, next) = k.poll_request(at(1_500)).unwrap();
        assert_eq!(next, Request::Renew { session: 77 });
    }

    /// Re-claiming the slot it just lost, finding its own last write untouched,
    /// the keeper grants it as resuming: the minter goes on from its own last ID instead of
    /// waiting out its own reservation.
    #[test]
    fn a_reclaim_that_finds_its_own_last_write_resumes_at_once() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 60_000);
        take_slot(&mut k, at(0), Stored::Absent);
        assert!(!granted(&mut k).slots[0].resumes);
        exchange(&mut k, at(1_000), |_| Reply::SessionGone);
        exchange(&mut k, at(1_000), |_| Reply::SessionOpened { session: 78, ttl: Some(Duration::from_secs(3)) });
        exchange(&mut k, at(1_000), |_| Reply::Slots { taken: vec![], ours: vec![] });
        let claim = exchange(&mut k, at(1_000), |_| Reply::Claimed { slot: 4, won: true });
        assert_eq!(claim, Request::Claim { session: 78, slot: 4 }, "the lost slot is tried first");
        let own = Stored::Reserved { until_ms: WALL + 60_000, version: Version::At(10) };
        exchange(&mut k, at(1_000), |_| {
            Reply::reservations(vec![SlotRead {
                slot: 4,
                location: "/p/reservations/4".into(),
                stored: own,
                claim_version: None,
            }])
        });
        exchange(&mut k, at(1_000), |_| Reply::Written(vec![(4, Version::At(12))]));
        assert!(granted(&mut k).slots[0].resumes);

        // Had anyone else written the reservation meanwhile, it would not resume.
        exchange(&mut k, at(2_000), |_| Reply::SessionGone);
        exchange(&mut k, at(2_000), |_| Reply::SessionOpened { session: 79, ttl: Some(Duration::from_secs(3)) });
        exchange(&mut k, at(2_000), |_| Reply::Slots { taken: vec![], ours: vec![] });
        exchange(&mut k, at(2_000), |_| Reply::Claimed { slot: 4, won: true });
        let theirs = Stored::Reserved { until_ms: WALL + 70_000, version: Version::At(15) };
        exchange(&mut k, at(2_000), |_| {
            Reply::reservations(vec![SlotRead {
                slot: 4,
                location: "/p/reservations/4".into(),
                stored: theirs,
                claim_version: None,
            }])
        });
        exchange(&mut k, at(2_000), |_| Reply::Written(vec![(4, Version::At(16))]));
        let grant = granted(&mut k);
        assert!(!grant.slots[0].resumes);
        assert_eq!(grant.slots[0].floor_ms, Some(WALL + 70_000));
    }

    /// Issue 23: etcd restored from an older snapshot. The first answer that shows it (a
    /// revision below one seen before) fences the fleet: the fence goes to the store before
    /// anything else, and this instance's own slot is read and written again, never below
    /// what it had confirmed. A later claim takes the fence as its floor, whatever version
    /// the reservation reads: a restore hands revisions out again, and one that reads as
    /// written after the fence may be a copy of an older write held up somewhere and landing
    /// late (simulator seed 96273628996: it lowered three reservations below what their
    /// holder had minted, and a successor would have taken that as its floor).
    #[test]
    fn a_store_gone_back_fences_every_floor_read_before_the_fence() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        take_slot(&mut k, at(0), Stored::Absent);
        let confirmed = granted(&mut k).slots[0].reserved_ms;
        let renew = exchange(&mut k, at(1_000), |_| Reply::WentBack {
            detail: "etcd's revision is 7, below 12 seen before".into(),
            reply: Box::new(Reply::Renewed { ttl: Duration::from_secs(3), fence: None }),
        });
        assert_eq!(renew, Request::Renew { session: 77 });
        let events: Vec<Event> = std::iter::from_fn(|| k.poll_event()).collect();
        assert!(
            events.iter().any(
                |e| matches!(e, Event::StoreWentBack { fence_until_ms, .. } if *fence_until_ms == WALL + 1_000 + 53_000)
            ),
            "{events:?}"
        );
        let fence = exchange(&mut k, at(1_000), |_| Reply::FenceSet);
        assert!(matches!(fence, Request::SetFence { until_ms, .. } if until_ms == WALL + 54_000), "{fence:?}");
        // The store holds what it held at the snapshot: read, then written back over it.
        let restored = Stored::Reserved { until_ms: WALL + 500, version: Version::At(6) };
        let read = exchange(&mut k, at(1_000), |_| {
            Reply::reservations(vec![SlotRead {
                slot: 4,
                location: "/p/reservations/4".into(),
                stored: restored,
                claim_version: None,
            }])
        });
        assert!(matches!(read, Request::ReadReservations { .. }), "{read:?}");
        let repair = exchange(&mut k, at(1_000), |_| Reply::Written(vec![(4, Version::At(8))]));
        let Request::WriteReservations { writes, .. } = repair else { panic!("{repair:?}") };
        assert_eq!(writes[0].expect, Some(Version::At(6)));
        assert!(writes[0].until_ms >= confirmed, "written back below what was confirmed");

        // Another instance claims slots after the fence was set (at version 20).
        let fence = Fence { until_ms: WALL + 54_000, reason: "etcd went back".into() };
        for (stored, fenced) in [
            (Stored::Reserved { until_ms: WALL + 500, version: Version::At(6) }, true),
            (Stored::Absent, true),
            (Stored::Reserved { until_ms: WALL + 4_000, version: Version::At(25) }, true),
            (Stored::Reserved { until_ms: WALL + 60_000, version: Version::At(25) }, false),
        ] {
            let mut other = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
            exchange(&mut other, at(2_000), |_| Reply::SessionOpened {
                session: 90,
                ttl: Some(Duration::from_secs(3)),
            });
            exchange(&mut other, at(2_000), |_| Reply::Slots {
                taken: (0..1024).filter(|&s| s != 4).collect(),
                ours: vec![],
            });
            exchange(&mut other, at(2_000), |_| Reply::Claimed { slot: 4, won: true });
            let fence = Some(fence.clone());
            exchange(&mut other, at(2_000), |_| Reply::Reservations {
                reads: vec![SlotRead {
                    slot: 4,
                    location: "/p/reservations/4".into(),
                    stored: stored.clone(),
                    claim_version: None,
                }],
                fence,
            });
            exchange(&mut other, at(2_000), |_| Reply::Written(vec![(4, Version::At(30))]));
            let slot = granted(&mut other).slots[0].clone();
            if fenced {
                assert_eq!(slot.floor_ms, Some(WALL + 54_000), "{stored:?}");
                assert!(slot.fenced.as_deref().is_some_and(|r| r.contains("went back")), "{slot:?}");
            } else {
                assert_eq!(slot.floor_ms, Some(WALL + 60_000), "{stored:?}");
                assert_eq!(slot.fenced, None);
            }
        }
    }

    /// A held slot's reservation key deleted by hand: the refused extension shows it gone;
    /// it is written again, never below what was confirmed (the successor of a crash would
    /// take nothing as its floor otherwise). The fleet is not fenced for it: etcd did not go
    /// back, one key went.
    #[test]
    fn a_held_reservation_deleted_by_hand_is_written_again_no_lower() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        take_slot(&mut k, at(0), Stored::Absent);
        let confirmed = granted(&mut k).slots[0].reserved_ms;
        k.handle_progress(WALL + 2_000, vec![(4, WALL + 2_000)]);
        let mut writes_seen = Vec::new();
        while let Some((id, request)) = k.poll_request(at(2_000)) {
            let reply = match &request {
                Request::Renew { .. } => Reply::Renewed { ttl: Duration::from_secs(3), fence: None },
                Request::CountSlots => Reply::SlotCount { taken: 1 },
                Request::WriteReservations { writes, .. } if writes_seen.is_empty() => {
                    let gone = SlotRead {
                        slot: 4,
                        location: "/p/reservations/4".into(),
                        stored: Stored::Absent,
                        claim_version: None,
                    };
                    writes_seen.push(writes.clone());
                    Reply::WriteRefused { not_ours: vec![], current: vec![gone] }
                }
                Request::WriteReservations { writes, .. } => {
                    writes_seen.push(writes.clone());
                    Reply::Written(vec![(4, Version::At(12))])
                }
                other => panic!("{other:?}"),
            };
            k.handle_reply(at(2_000), id, reply);
        }
        assert_eq!(writes_seen.len(), 2, "{writes_seen:?}");
        let writes = &writes_seen[1];
        assert_eq!(writes[0].expect, Some(Version::Absent));
        assert!(writes[0].until_ms >= confirmed);
        let events: Vec<Event> = std::iter::from_fn(|| k.poll_event()).collect();
        assert!(!events.iter().any(|e| matches!(e, Event::StoreWentBack { .. })), "{events:?}");
    }

    /// A write onto an absent reservation carries the claim's version as the keeper knows it:
    /// 1 for the first write of a claim, moved on by each confirmed one, learned from a
    /// refusal, and kept through a write of unknown outcome (sent again at the same version,
    /// only one of the two can land). etcd compares it, so a late copy of the first write,
    /// landing after the key was deleted by hand, cannot put back a reservation below what
    /// was minted since (simulator seed 680721844248).
    #[test]
    fn a_write_onto_an_absent_reservation_carries_the_claims_version() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        take_slot(&mut k, at(0), Stored::Absent);
        k.handle_progress(WALL + 2_000, vec![(4, WALL + 2_000)]);
        let gone = |claim_version| SlotRead {
            slot: 4,
            location: "/p/reservations/4".into(),
            stored: Stored::Absent,
            claim_version,
        };
        let mut writes_seen: Vec<Write> = Vec::new();
        for step in 0..40 {
            let now = at(2_000 + step * 25);
            let Some((id, request)) = k.poll_request(now) else { continue };
            let reply = match &request {
                Request::Renew { .. } => Reply::Renewed { ttl: Duration::from_secs(3), fence: None },
                Request::CountSlots => Reply::SlotCount { taken: 1 },
                Request::ReadReservations { .. } => Reply::reservations(vec![gone(None)]),
                Request::WriteReservations { writes, .. } => {
                    writes_seen.push(writes[0].clone());
                    match writes_seen.len() {
                        // The extension finds the key deleted, the claim moved on once.
                        1 => Reply::WriteRefused { not_ours: vec![], current: vec![gone(Some(2))] },
                        2 => Reply::Failed { error: "no answer in time".into(), outcome: Outcome::Unknown },
                        _ => Reply::Written(vec![(4, Version::At(20 + writes_seen.len() as i64))]),
                    }
                }
                other => panic!("{other:?}"),
            };
            k.handle_reply(now, id, reply);
        }
        let seen: Vec<(Option<Version>, Option<i64>)> =
            writes_seen.iter().map(|w| (w.expect, w.claim_version)).collect();
        assert_eq!(
            seen,
            [(Some(Version::At(10)), None), (Some(Version::Absent), Some(2)), (Some(Version::Absent), Some(2))]
        );
        // Deleted again: the repair goes at the version its confirmed write moved it to.
        k.handle_progress(WALL + 3_000, vec![(4, WALL + 3_000)]);
        let mut later: Vec<Write> = Vec::new();
        for step in 0..200 {
            let now = at(3_000 + step * 25);
            let Some((id, request)) = k.poll_request(now) else { continue };
            let reply = match &request {
                Request::Renew { .. } => Reply::Renewed { ttl: Duration::from_secs(3), fence: None },
                Request::CountSlots => Reply::SlotCount { taken: 1 },
                Request::WriteReservations { writes, .. } if later.is_empty() => {
                    later.push(writes[0].clone());
                    Reply::WriteRefused { not_ours: vec![], current: vec![gone(None)] }
                }
                Request::WriteReservations { writes, .. } => {
                    later.push(writes[0].clone());
                    Reply::Written(vec![(4, Version::At(40))])
                }
                other => panic!("{other:?}"),
            };
            k.handle_reply(now, id, reply);
        }
        let seen: Vec<(Option<Version>, Option<i64>)> = later.iter().map(|w| (w.expect, w.claim_version)).collect();
        assert_eq!(seen[..2], [(Some(Version::At(23)), None), (Some(Version::Absent), Some(3))]);
    }

    /// A keeper that took slot 4 (its first write WALL + 3,000 at version 10), lost its
    /// session, claimed the slot again at 1 s and read `stored` as its floor.
    fn reclaim_reading(stored: Stored) -> Keeper {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        take_slot(&mut k, at(0), Stored::Absent);
        exchange(&mut k, at(1_000), |_| Reply::SessionGone);
        exchange(&mut k, at(1_000), |_| Reply::SessionOpened { session: 78, ttl: Some(Duration::from_secs(3)) });
        exchange(&mut k, at(1_000), |_| Reply::Slots { taken: vec![], ours: vec![] });
        exchange(&mut k, at(1_000), |_| Reply::Claimed { slot: 4, won: true });
        exchange(&mut k, at(1_000), |_| {
            Reply::reservations(vec![SlotRead {
                slot: 4,
                location: "/p/reservations/4".into(),
                stored,
                claim_version: None,
            }])
        });
        k
    }

    /// Issue 23: a re-claim that reads less than this instance's own confirmed write (the
    /// store went back) is fenced, and tells the fleet; a reservation missing though the
    /// slot was used before is waited out.
    #[test]
    fn a_floor_below_the_instances_own_write_or_missing_is_fenced() {
        // Below the first write (WALL + 3,000 at version 10): the store lost it.
        let mut k = reclaim_reading(Stored::Reserved { until_ms: WALL + 1_000, version: Version::At(9) });
        let set = exchange(&mut k, at(1_000), |_| Reply::FenceSet);
        assert!(matches!(set, Request::SetFence { .. }), "{set:?}");
        exchange(&mut k, at(1_000), |_| Reply::Written(vec![(4, Version::At(11))]));
        let slot = granted(&mut k).slots[0].clone();
        assert_eq!(slot.floor_ms, Some(WALL + 1_000 + 53_000));
        assert!(!slot.resumes);

        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        let missing = Stored::Missing { reason: "no reservation, though the slot's history holds 3 records".into() };
        take_slot(&mut k, at(0), missing);
        let slot = granted(&mut k).slots[0].clone();
        assert_eq!(slot.floor_ms, Some(WALL + 53_000));
        assert!(slot.fenced.as_deref().is_some_and(|r| r.contains("history holds 3")), "{slot:?}");
    }

    /// A restore hands revisions out again: a re-claim that reads its own last write's
    /// version holding another value (another instance's write, made after the restore) is
    /// not that write. The store went back: the claim is fenced, never resumed (simulator
    /// seed 96223646376 resumed with the old claim's floor, below the other's fenced floor).
    #[test]
    fn a_reclaim_reading_its_own_version_with_another_value_is_a_store_gone_back() {
        // The first write stored WALL + 3,000 at version 10; this is another one at 10.
        let mut k = reclaim_reading(Stored::Reserved { until_ms: WALL + 40_000, version: Version::At(10) });
        let events: Vec<Event> = std::iter::from_fn(|| k.poll_event()).collect();
        assert!(events.iter().any(|e| matches!(e, Event::StoreWentBack { .. })), "{events:?}");
        let set = exchange(&mut k, at(1_000), |_| Reply::FenceSet);
        assert!(matches!(set, Request::SetFence { .. }), "{set:?}");
        exchange(&mut k, at(1_000), |_| Reply::Written(vec![(4, Version::At(11))]));
        let slot = granted(&mut k).slots[0].clone();
        assert!(!slot.resumes, "{slot:?}");
        assert_eq!(slot.floor_ms, Some(WALL + 1_000 + 53_000));
    }

    /// A missing reservation's own fence (now plus the fence window) can fall short of the
    /// fleet's fence when this instance's clock reads behind the one that set it; and a
    /// holder fenced at the fleet's fence reserved a window past it, in the reservation now
    /// missing (seed 494673513292 of the simulator: a floor of the fleet's fence, below that
    /// reservation). The floor is a fence window past now, and a reservation window past the
    /// fleet's fence.
    #[test]
    fn a_missing_reservation_never_floors_below_the_fleets_fence() {
        let fence = Fence { until_ms: WALL + 80_000, reason: "etcd went back".into() };
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 90, ttl: Some(Duration::from_secs(3)) });
        exchange(&mut k, at(0), |_| Reply::Slots { taken: (0..1024).filter(|&s| s != 4).collect(), ours: vec![] });
        exchange(&mut k, at(0), |_| Reply::Claimed { slot: 4, won: true });
        let missing = Stored::Missing { reason: "no reservation, though the slot's history holds 2 records".into() };
        exchange(&mut k, at(0), |_| Reply::Reservations {
            reads: vec![SlotRead {
                slot: 4,
                location: "/p/reservations/4".into(),
                stored: missing,
                claim_version: None,
            }],
            fence: Some(fence),
        });
        exchange(&mut k, at(0), |_| Reply::Written(vec![(4, Version::At(30))]));
        let slot = granted(&mut k).slots[0].clone();
        assert_eq!(slot.floor_ms, Some(WALL + 80_000 + 3_000), "{slot:?}");
        assert!(slot.fenced.as_deref().is_some_and(|r| r.contains("no reservation")), "{slot:?}");
    }

    /// A restore can hand this instance back a claim it had lost in the history the restore
    /// threw away: its key deleted by hand or its lease run out unseen, another instance
    /// took the slot and minted above this one's reservation, and the restore brought back
    /// the key, the lease and the old reservation (simulator seed 179619964557). Nothing in
    /// the restored store tells the two apart: the instance's own slots wait the fence out
    /// too, under a new generation so that the minter takes the raised floor.
    #[test]
    fn a_store_gone_back_fences_the_instances_own_slots() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        take_slot(&mut k, at(0), Stored::Absent);
        let before = granted(&mut k);
        exchange(&mut k, at(1_000), |_| Reply::WentBack {
            detail: "etcd's revision is 7, below 12 seen before".into(),
            reply: Box::new(Reply::Renewed { ttl: Duration::from_secs(3), fence: None }),
        });
        let after = granted(&mut k);
        assert_ne!(after.generation, before.generation, "the minter must take the new floor");
        assert_eq!(after.slots[0].floor_ms, Some(WALL + 1_000 + 53_000), "{after:?}");
        assert!(!after.slots[0].resumes);
        assert!(after.slots[0].fenced.as_deref().is_some_and(|r| r.contains("went back")), "{after:?}");
    }

    /// A holder that did not see etcd go back (away since before the snapshot, its lease
    /// restored with it) learns the fence another instance, or the runbook, set: with its
    /// renewal, and applies it to the slot it holds, which another instance may have held in
    /// the history thrown away (simulator seed 179620328927). The same fence read again
    /// changes nothing.
    #[test]
    fn a_holder_applies_a_new_fence_to_the_slots_it_holds() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        take_slot(&mut k, at(0), Stored::Absent);
        let before = granted(&mut k);
        let fence = Fence { until_ms: WALL + 30_000, reason: "etcd went back".into() };
        let renewed = |fence: &Fence| Reply::Renewed { ttl: Duration::from_secs(3), fence: Some(fence.clone()) };
        exchange(&mut k, at(1_000), |_| renewed(&fence));
        let after = granted(&mut k);
        assert_ne!(after.generation, before.generation, "the minter must take the new floor");
        assert_eq!(after.slots[0].floor_ms, Some(WALL + 30_000), "{after:?}");
        assert!(after.slots[0].fenced.as_deref().is_some_and(|r| r.contains("went back")), "{after:?}");
        // The raised floor's reservation is written (and the slots counted).
        for _ in 0..4 {
            let Some((id, request)) = k.poll_request(at(1_000)) else { break };
            let reply = match request {
                Request::WriteReservations { writes, .. } => {
                    Reply::Written(writes.iter().map(|w| (w.slot, Version::At(10))).collect())
                }
                Request::CountSlots => Reply::SlotCount { taken: 1 },
                other => panic!("{other:?}"),
            };
            k.handle_reply(at(1_000), id, reply);
        }
        let settled = granted(&mut k);
        exchange(&mut k, at(2_500), |_| renewed(&fence));
        assert_eq!(granted(&mut k).generation, settled.generation, "a fence known already is no news");
    }

    /// A claim whose floor stands far ahead of its clock (a fence) writes the floor as its
    /// reservation, not a window past it, and extends a window past it once minting nears
    /// it: a reservation never reaches more than a window past where minting stands, which
    /// every fence counts on (simulator seed 179620463618: a fenced claim's reservation, a
    /// window past a fence, lost to a restore and past the next fence).
    #[test]
    fn a_floor_far_ahead_is_reserved_as_it_is_until_minting_nears_it() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(3)) });
        exchange(&mut k, at(0), |_| Reply::Slots { taken: (0..1024).filter(|&s| s != 4).collect(), ours: vec![] });
        exchange(&mut k, at(0), |_| Reply::Claimed { slot: 4, won: true });
        let ahead = Stored::Reserved { until_ms: WALL + 60_000, version: Version::At(5) };
        exchange(&mut k, at(0), |_| {
            Reply::reservations(vec![SlotRead {
                slot: 4,
                location: "/p/reservations/4".into(),
                stored: ahead,
                claim_version: None,
            }])
        });
        let first = exchange(&mut k, at(0), |_| Reply::Written(vec![(4, Version::At(6))]));
        let Request::WriteReservations { writes, .. } = first else { panic!("{first:?}") };
        assert_eq!(writes[0].until_ms, WALL + 60_000, "{writes:?}");
        // The clock within a window of the floor: a window past the floor.
        let at_floor = Now { wall_ms: WALL + 58_000, boot: Duration::from_millis(58_000) };
        k.extend_now();
        let mut written = None;
        for _ in 0..8 {
            let Some((id, request)) = k.poll_request(at_floor) else { break };
            let reply = match &request {
                Request::WriteReservations { writes, .. } => {
                    written = Some(writes[0].until_ms);
                    Reply::Written(vec![(4, Version::At(7))])
                }
                Request::Renew { .. } => Reply::Renewed { ttl: Duration::from_secs(3), fence: None },
                Request::CountSlots => Reply::SlotCount { taken: 1 },
                other => panic!("{other:?}"),
            };
            k.handle_reply(at_floor, id, reply);
        }
        assert_eq!(written, Some(WALL + 63_000));
    }

    /// A floor far ahead of a clock that was stepped back can still be below where this
    /// process's own minting stands (a resumed claim's floor: simulator seed 179620722983).
    /// Written as it is, it would lower the reservation below IDs already minted; it is
    /// reserved a window past the minting instead.
    #[test]
    fn a_floor_below_the_processs_own_minting_is_not_reserved_as_it_is() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        // Minting stands 30 s ahead of this clock: the clock was stepped back.
        k.handle_progress(WALL + 30_000, vec![]);
        exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(3)) });
        exchange(&mut k, at(0), |_| Reply::Slots { taken: (0..1024).filter(|&s| s != 4).collect(), ours: vec![] });
        exchange(&mut k, at(0), |_| Reply::Claimed { slot: 4, won: true });
        // The floor is beyond the drift bound from the clock, and below the minting.
        let floor = Stored::Reserved { until_ms: WALL + 20_000, version: Version::At(5) };
        exchange(&mut k, at(0), |_| {
            Reply::reservations(vec![SlotRead {
                slot: 4,
                location: "/p/reservations/4".into(),
                stored: floor,
                claim_version: None,
            }])
        });
        let first = exchange(&mut k, at(0), |_| Reply::Written(vec![(4, Version::At(6))]));
        let Request::WriteReservations { writes, .. } = first else { panic!("{first:?}") };
        assert_eq!(writes[0].until_ms, WALL + 33_000, "{writes:?}");
    }

    /// The store goes back while a fleet's fence still stands ahead of the clock: holders
    /// fenced at it reserved a window past it, and the restore may have lost those writes.
    /// The new fence reaches a reservation window past the old one, or a floor read later
    /// stops short of what they reserved.
    #[test]
    fn a_store_gone_back_under_a_standing_fence_fences_past_it() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        take_slot(&mut k, at(0), Stored::Absent);
        // A fence read from the store, set by another instance, ahead of this clock.
        k.raise_fence(KnownFence { until_ms: WALL + 80_000, reason: "etcd went back".into() });
        exchange(&mut k, at(1_000), |_| Reply::WentBack {
            detail: "etcd's revision is 7, below 21 seen before".into(),
            reply: Box::new(Reply::Renewed { ttl: Duration::from_secs(3), fence: None }),
        });
        let events: Vec<Event> = std::iter::from_fn(|| k.poll_event()).collect();
        assert!(
            events.iter().any(
                |e| matches!(e, Event::StoreWentBack { fence_until_ms, .. } if *fence_until_ms == WALL + 80_000 + 3_000)
            ),
            "{events:?}"
        );
        let fence = exchange(&mut k, at(1_000), |_| Reply::FenceSet);
        assert!(matches!(fence, Request::SetFence { until_ms, .. } if until_ms == WALL + 83_000), "{fence:?}");
    }

    /// Every instance that finds the same restore sets a fence; one that learns the first
    /// instance's fence in the very answer that shows it the restore does not count from
    /// that fence (nothing written under it is lost), or each instance would push the
    /// fleet's fence a window further.
    #[test]
    fn a_fence_set_since_the_store_went_back_is_not_counted_from() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        take_slot(&mut k, at(0), Stored::Absent);
        exchange(&mut k, at(1_000), |_| Reply::SessionGone);
        exchange(&mut k, at(1_000), |_| Reply::SessionOpened { session: 78, ttl: Some(Duration::from_secs(3)) });
        exchange(&mut k, at(1_000), |_| Reply::Slots { taken: vec![], ours: vec![] });
        exchange(&mut k, at(1_000), |_| Reply::Claimed { slot: 4, won: true });
        // The reservation this instance wrote (version 2 or later) is gone: the store went
        // back. Another instance found it first and fenced the fleet until +60 s.
        let first = Fence { until_ms: WALL + 60_000, reason: "etcd went back".into() };
        exchange(&mut k, at(1_000), |_| Reply::Reservations {
            reads: vec![SlotRead {
                slot: 4,
                location: "/p/reservations/4".into(),
                stored: Stored::Absent,
                claim_version: None,
            }],
            fence: Some(first),
        });
        let events: Vec<Event> = std::iter::from_fn(|| k.poll_event()).collect();
        assert!(
            events.iter().any(
                |e| matches!(e, Event::StoreWentBack { fence_until_ms, .. } if *fence_until_ms == WALL + 1_000 + 53_000)
            ),
            "{events:?}"
        );
    }

    /// A claim that resumes carries the floor of the claim
    /// whose write it found (claim 2's, above the other holder's range), not the reservation
    /// it wrote itself, and not the floor of an older claim.
    #[test]
    fn a_resumed_claim_carries_the_floor_of_the_claim_it_continues() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 60_000);
        take_slot(&mut k, at(0), Stored::Absent);
        assert_eq!(granted(&mut k).slots[0].floor_ms, None, "claim 1: a fresh slot");
        let reclaim = |k: &mut Keeper, ms: u64, session: SessionId, stored: Stored, wrote: i64| {
            exchange(k, at(ms), |_| Reply::SessionGone);
            exchange(k, at(ms), |_| Reply::SessionOpened { session, ttl: Some(Duration::from_secs(3)) });
            exchange(k, at(ms), |_| Reply::Slots { taken: vec![], ours: vec![] });
            exchange(k, at(ms), |_| Reply::Claimed { slot: 4, won: true });
            exchange(k, at(ms), |_| {
                Reply::reservations(vec![SlotRead {
                    slot: 4,
                    location: "/p/reservations/4".into(),
                    stored,
                    claim_version: None,
                }])
            });
            exchange(k, at(ms), |_| Reply::Written(vec![(4, Version::At(wrote))]));
            granted(k).slots[0].clone()
        };
        // Claim 2: another holder wrote up to +70 s meanwhile; this claim writes version 16.
        let theirs = Stored::Reserved { until_ms: WALL + 70_000, version: Version::At(15) };
        let claim2 = reclaim(&mut k, 1_000, 78, theirs, 16);
        assert!(!claim2.resumes);
        assert_eq!(claim2.floor_ms, Some(WALL + 70_000));
        // Claim 3 finds claim 2's own write (its floor, written as it is): it resumes, above
        // claim 2's floor.
        assert_eq!(claim2.reserved_ms, WALL + 70_000);
        let own = Stored::Reserved { until_ms: WALL + 70_000, version: Version::At(16) };
        let claim3 = reclaim(&mut k, 2_000, 79, own, 17);
        assert!(claim3.resumes);
        assert_eq!(claim3.floor_ms, Some(WALL + 70_000), "the floor of the claim it continues");
    }

    fn skew_checked(max_ms: i64) -> Keeper {
        Keeper::new(KeeperConfig {
            policy: SlotPolicy::Leased { count: 1, preferred: vec![4] },
            ttl: Duration::from_secs(60),
            window_ms: 3_000,
            layout: Layout::default_snowmint(),
            seed: 1,
            max_fleet_skew_ms: Some(max_ms),
            fence_window_ms: 53_000,
            max_clock_drift_ms: 10_000,
        })
    }

    /// Peers' published clocks, each `offsets[i]` ms from `now` and corrected for the
    /// average age of a write (a third of the 3 s window).
    fn peer_clocks(now: Now, offsets: &[i64]) -> Reply {
        let holders: Vec<SessionId> = (0..offsets.len() as i64).map(|i| 100 + i).collect();
        clocks_of(now, &holders, offsets)
    }

    /// Per slot (10 on), its holder and its clock `offsets[i]` ms from `now`, corrected as
    /// in [`peer_clocks`].
    fn clocks_of(now: Now, holders: &[SessionId], offsets: &[i64]) -> Reply {
        let clock = |(i, (&holder, o)): (usize, (&SessionId, &i64))| PeerClock {
            slot: 10 + i as Slot,
            holder,
            wall_ms: now.wall_ms + o - 1_000,
        };
        Reply::PeerClocks(holders.iter().zip(offsets).enumerate().map(clock).collect())
    }

    /// The fleet's clock check at the start: before any claim, the others' clocks are
    /// sampled; a clock beyond the bound from their median stops the start, naming by how
    /// much and which way, having claimed nothing.
    #[test]
    fn a_clock_far_from_the_fleets_stops_the_start_before_any_claim() {
        let mut k = skew_checked(30_000);
        exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(60)) });
        // One peer agrees with this clock, two are an hour behind it: the median is behind.
        let sample = exchange(&mut k, at(0), |_| peer_clocks(at(0), &[0, -3_600_000, -3_600_000]));
        assert!(matches!(sample, Request::SampleClocks { session: 77, limit: SAMPLE_PEERS, .. }), "{sample:?}");
        let error = k.fatal().expect("the start stops").to_string();
        assert!(error.contains("3600000 ms ahead of the median of 3 other instances"), "{error}");
        assert!(error.contains("--max-fleet-skew-ms 30000"), "{error}");
        assert_eq!(k.poll_request(at(0)), None, "claimed after the check failed");

        // One outlier does not move the median: this clock agrees with the other two.
        let mut k = skew_checked(30_000);
        exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(60)) });
        exchange(&mut k, at(0), |_| peer_clocks(at(0), &[200, -3_600_000, -100]));
        assert!(k.fatal().is_none());
        let events: Vec<Event> = std::iter::from_fn(|| k.poll_event()).collect();
        assert!(events.contains(&Event::FleetClock { skew_ms: 100, peers: 3 }), "{events:?}");
        let (_, next) = k.poll_request(at(0)).unwrap();
        assert_eq!(next, Request::ListSlots { session: 77 });
    }

    /// The fleet's clock check counts each instance once, however many
    /// slots it holds. One instance an hour off holding 20 slots beside three instances of
    /// one slot each: a healthy instance starts (the one far off is one voice of four), and
    /// one an hour off (here: beside the 20 slots of its own earlier run, under another
    /// lease) does not pass itself.
    #[test]
    fn the_fleet_clock_check_counts_each_instance_once() {
        // Holder 50 holds 20 slots; 51, 52 and 53 one each.
        let mut holders = vec![50; 20];
        holders.extend([51, 52, 53]);
        let sample = |now: Now, offsets: Vec<i64>| clocks_of(now, &holders, &offsets);
        let mut healthy = skew_checked(30_000);
        exchange(&mut healthy, at(0), |_| Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(60)) });
        let mut offsets = vec![-3_600_000; 20];
        offsets.extend([0, 200, -300]);
        exchange(&mut healthy, at(0), |_| sample(at(0), offsets.clone()));
        assert!(healthy.fatal().is_none(), "a healthy instance stopped: {:?}", healthy.fatal());
        let events: Vec<Event> = std::iter::from_fn(|| healthy.poll_event()).collect();
        let counted =
            events.iter().any(|e| matches!(e, Event::FleetClock { skew_ms, peers: 4 } if skew_ms.abs() <= 300));
        assert!(counted, "not four instances within 300 ms: {events:?}");

        // This clock an hour ahead of the three; its earlier run's 20 slots agree with it.
        let mut skewed = skew_checked(30_000);
        exchange(&mut skewed, at(0), |_| Reply::SessionOpened { session: 78, ttl: Some(Duration::from_secs(60)) });
        let mut offsets = vec![0; 20];
        offsets.extend([-3_600_000, -3_600_200, -3_599_700]);
        exchange(&mut skewed, at(0), |_| sample(at(0), offsets.clone()));
        let error = skewed.fatal().map(ToString::to_string).unwrap_or_default();
        assert!(error.contains("ahead of the median of 4 other instances"), "passed itself: {error:?}");
    }

    /// Answers due renewals and reservation writes at `now` until the clock sample is
    /// asked for; returns its request ID.
    fn answer_until_sample(k: &mut Keeper, now: Now) -> u64 {
        for version in 100.. {
            let (id, request) = k.poll_request(now).expect("the sample is due");
            let reply = match request {
                Request::SampleClocks { .. } => return id,
                Request::Renew { .. } => Reply::Renewed { ttl: Duration::from_secs(60), fence: None },
                Request::CountSlots => Reply::SlotCount { taken: 3 },
                Request::WriteReservations { .. } => Reply::Written(vec![(4, Version::At(version))]),
                other => panic!("unexpected {other:?}"),
            };
            k.handle_reply(now, id, reply);
            assert!(version < 110, "no sample");
        }
        unreachable!()
    }

    /// Once running, a clock that drifts beyond the bound stops minting (the holding is
    /// withdrawn with the reason, the slot kept and renewed), and minting resumes, on the
    /// same claim, once a later sample agrees.
    #[test]
    fn a_running_instance_stops_minting_while_its_clock_disagrees_and_resumes_after() {
        let mut k = skew_checked(30_000);
        exchange(&mut k, at(0), |_| Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(60)) });
        // Alone in the fleet: nothing to compare with, the start goes on.
        exchange(&mut k, at(0), |_| Reply::PeerClocks(vec![]));
        exchange(&mut k, at(0), |_| Reply::Slots { taken: vec![], ours: vec![] });
        exchange(&mut k, at(0), |_| Reply::Claimed { slot: 4, won: true });
        exchange(&mut k, at(0), |_| {
            Reply::reservations(vec![SlotRead {
                slot: 4,
                location: "/p/reservations/4".into(),
                stored: Stored::Absent,
                claim_version: None,
            }])
        });
        exchange(&mut k, at(0), |_| Reply::Written(vec![(4, Version::At(5))]));
        let claim = granted(&mut k).slots[0].claim;
        // The first count is due at once, the next sample 15 s after the first.
        assert_eq!(exchange(&mut k, at(0), |_| Reply::SlotCount { taken: 3 }), Request::CountSlots);
        // Minting goes on: the reservation is extended as it goes.
        k.handle_progress(WALL + 14_000, Vec::new());
        let (id, early) = k.poll_request(at(14_000)).expect("a reservation write is due");
        assert!(matches!(early, Request::WriteReservations { .. }), "sampled before 15 s: {early:?}");
        k.handle_reply(at(14_000), id, Reply::Written(vec![(4, Version::At(6))]));
        assert_eq!(k.poll_request(at(14_000)), None);

        let now = at(15_000);
        let id = answer_until_sample(&mut k, now);
        k.handle_reply(now, id, peer_clocks(now, &[-45_000, -40_000]));
        match k.poll_holding() {
            Some(Holding::Unheld { reason }) => {
                assert!(reason.contains("42500 ms ahead of the median of 2"), "{reason}")
            }
            other => panic!("minting goes on with a clock 42.5 s ahead of the fleet: {other:?}"),
        }
        assert!(k.fatal().is_none(), "a running instance keeps its slot");

        let now = at(30_000);
        let id = answer_until_sample(&mut k, now);
        k.handle_reply(now, id, peer_clocks(now, &[-1_000, 2_000]));
        let grant = granted(&mut k);
        assert_eq!(grant.slots[0].claim, claim, "the same claim, never re-taken");
        let events: Vec<Event> = std::iter::from_fn(|| k.poll_event()).collect();
        assert!(events.iter().any(|e| matches!(e, Event::FleetClockBeyond { .. })), "{events:?}");
        assert!(events.contains(&Event::FleetClockWithin), "{events:?}");
    }

    /// Invariant 7: no shrink when what was minted is unknown; a known shrink names the
    /// version it replaces and never goes below the floor.
    #[test]
    fn the_final_shrink_needs_a_known_last_tick() {
        let floor = Stored::Reserved { until_ms: WALL - 500, version: Version::At(3) };
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        take_slot(&mut k, at(0), floor.clone());
        k.finish(Minted::Unknown);
        let close = exchange(&mut k, at(10), |_| Reply::SessionClosed);
        assert_eq!(close, Request::CloseSession { session: 77 });
        assert!(k.is_done());

        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        take_slot(&mut k, at(0), floor);
        k.finish(Minted::UpTo(vec![(4, WALL + 7)]));
        let shrink = exchange(&mut k, at(10), |_| Reply::Written(vec![(4, Version::At(11))]));
        let Request::WriteReservations { writes, check_claim: true, .. } = shrink else { panic!("{shrink:?}") };
        assert_eq!(
            writes,
            vec![Write {
                slot: 4,
                until_ms: WALL + 7,
                expect: Some(Version::At(10)),
                wall_ms: WALL + 10,
                idle: true,
                claim_version: None
            }]
        );
    }

    /// A write of unknown outcome is followed by a read before the next write, and the
    /// value read (perhaps another holder's) never widens what may be minted.
    #[test]
    fn after_a_write_of_unknown_outcome_the_version_is_read_before_writing_again() {
        let mut k = keeper(SlotPolicy::Leased { count: 1, preferred: vec![] }, 3_000);
        take_slot(&mut k, at(0), Stored::Absent);
        let reserved = granted(&mut k).slots[0].reserved_ms;
        k.extend_now();
        let write = exchange(&mut k, at(900), |_| Reply::Failed { error: "timeout".into(), outcome: Outcome::Unknown });
        assert!(matches!(write, Request::WriteReservations { .. }), "{write:?}");
        // After the retry pause, the renewal (due at 1 s) and then the read.
        exchange(&mut k, at(1_300), |_| Reply::Renewed { ttl: Duration::from_secs(3), fence: None });
        let read = exchange(&mut k, at(1_300), |_| {
            Reply::reservations(vec![SlotRead {
                slot: 4,
                location: "/p/reservations/4".into(),
                stored: Stored::Reserved { until_ms: WALL + 99_000, version: Version::At(20) },
                claim_version: None,
            }])
        });
        assert_eq!(read, Request::ReadReservations { slots: vec![4], linearizable: true });
        assert_eq!(granted(&mut k).slots[0].reserved_ms, reserved, "a value read widened the grant");
        let (_, next) = k.poll_request(at(1_300)).unwrap();
        let Request::WriteReservations { writes, .. } = next else { panic!("{next:?}") };
        assert_eq!(writes[0].expect, Some(Version::At(20)));
    }

    /// A store that grants everything asked of it, and records the largest read and write.
    #[derive(Default)]
    struct Granting {
        version: i64,
        largest_read: usize,
        largest_write: usize,
        /// Per slot, the reservation it holds.
        stored: BTreeMap<Slot, i64>,
        closed: bool,
    }

    impl Granting {
        fn answer(&mut self, request: &Request) -> Reply {
            match request {
                Request::OpenSession { .. } => Reply::SessionOpened { session: 77, ttl: Some(Duration::from_secs(3)) },
                Request::ListSlots { .. } => Reply::Slots { taken: vec![], ours: vec![] },
                Request::CountSlots => Reply::SlotCount { taken: 0 },
                Request::Claim { slot, .. } => Reply::Claimed { slot: *slot, won: true },
                Request::Renew { .. } => Reply::Renewed { ttl: Duration::from_secs(3), fence: None },
                Request::ReadReservations { slots, .. } => {
                    self.largest_read = self.largest_read.max(slots.len());
                    let read = |&slot| SlotRead {
                        slot,
                        location: format!("/p/reservations/{slot}"),
                        stored: Stored::Absent,
                        claim_version: None,
                    };
                    Reply::reservations(slots.iter().map(read).collect())
                }
                Request::WriteReservations { writes, .. } => {
                    self.largest_write = self.largest_write.max(writes.len());
                    self.version += 1;
                    for write in writes {
                        self.stored.insert(write.slot, write.until_ms);
                    }
                    Reply::Written(writes.iter().map(|w| (w.slot, Version::At(self.version))).collect())
                }
                Request::CloseSession { .. } => {
                    self.closed = true;
                    Reply::SessionClosed
                }
                other => panic!("unexpected {other:?}"),
            }
        }

        /// Answers every request due at `now`; how many there were.
        fn answer_all(&mut self, k: &mut Keeper, now: Now) -> usize {
            let mut answered = 0;
            while let Some((id, request)) = k.poll_request(now) {
                let reply = self.answer(&request);
                k.handle_reply(now, id, reply);
                answered += 1;
                assert!(answered < 5_000, "no end of requests at {now:?}");
            }
            answered
        }
    }

    /// However many slots an instance holds (up to the 1,024 of ten
    /// worker bits), no request names more slots than one etcd transaction carries (128
    /// operations: a read takes one per slot, a write five), so the start, each extension and
    /// the final shrink go out as several requests, and every slot gets its turn in each.
    #[test]
    fn no_request_names_more_slots_than_one_transaction_carries() {
        for count in [1, 2, 25, 26, 64, 65, 128, 129, 1024] {
            let all: Vec<Slot> = (0..count as Slot).collect();
            let mut k = keeper(SlotPolicy::Leased { count, preferred: all.clone() }, 3_000);
            let mut store = Granting::default();
            store.answer_all(&mut k, at(0));
            assert!(k.started(), "{count} slots: not started");
            assert_eq!(granted(&mut k).slots.len(), count);
            let first = store.stored.clone();
            assert_eq!(first.len(), count, "{count} slots: not every first reservation written");

            // Two thirds of the window later, with minting going on, every reservation is
            // extended.
            k.handle_progress(WALL + 2_100, Vec::new());
            store.answer_all(&mut k, at(2_100));
            assert!(store.stored.iter().all(|(slot, until)| *until > first[slot]), "{count} slots: not all extended");
            assert_eq!(granted(&mut k).slots.iter().map(|s| s.reserved_ms).min(), Some(WALL + 2_100 + 3_000));

            // The final shrink covers every slot, then the session ends.
            k.finish(Minted::UpTo(all.iter().map(|&slot| (slot, WALL + 2_200)).collect()));
            store.answer_all(&mut k, at(2_200));
            assert!(k.is_done() && store.closed, "{count} slots: the stop did not end");
            assert!(store.stored.values().all(|&until| until == WALL + 2_200), "{count} slots: not every slot shrunk");

            assert!(store.largest_read <= MAX_READS, "{count} slots: a read of {} slots", store.largest_read);
            assert!(store.largest_write <= MAX_WRITES, "{count} slots: a write of {} slots", store.largest_write);
        }
    }
}
