//! One instance's segments of one named sequence: the rules that keep its values unique, with
//! no I/O of its own.
//!
//! Inputs: callers' takes ([`Segments::take`]), the store's answer to the one operation in
//! flight ([`Segments::handle_answer`]), the order to close. Outputs: the next store
//! operation ([`Segments::poll_op`]) and events for metrics, logs and the audit
//! ([`Segments::poll_event`]).
//!
//! The rules, as the slot keeper's for reservations:
//! - **Write ahead.** A value is handed out only from a segment whose claim the store
//!   confirmed: a compare-and-set that moved the record's `next` past the segment, naming
//!   this claim.
//! - **Worst case for the unknown.** A claim whose outcome is unknown is read back: the record
//!   naming it means it landed and the segment is this instance's; anything else means it is
//!   given up (a gap, never a repeat), even if the write lands later, when its compare fails.
//! - **Never below.** A record below what this instance saw stored (a version, or a `next`
//!   under the end of a segment it took) is the store gone back (a restored snapshot): the
//!   sequence refuses on this instance rather than take the same values again, until the
//!   record shows `snowmint fence` moved it above every value this instance took (asked
//!   again, it reads the record at most once every [`RECHECK_INTERVAL`]).
//! - **Give back only what nobody could have.** At a clean close the unused values at the
//!   top of the sequence go back, by a compare-and-set on the version of this instance's own
//!   last claim, so only when nothing was taken after it.
//!
//! Demand sets the size: each claim aims to last [`SegmentConfig::target_interval`] at the
//! rate values were taken since the last one, within a minimum and a maximum, and the next
//! segment is claimed once what is left falls under half the last one, so callers do not wait
//! for the store in steady state.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

use super::record::{ClaimId, Record};
use crate::store::Version;

/// How often a sequence whose store went back reads the record again while callers ask, to
/// see whether a fence moved it past what this instance took.
pub const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How segments are sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentConfig {
    /// The fewest values a claim takes (unless fewer are left).
    pub min_size: u64,
    /// The most values a claim takes.
    pub max_size: u64,
    /// How long a segment should last at the current rate: about one store write per this.
    pub target_interval: Duration,
}

impl Default for SegmentConfig {
    fn default() -> Self {
        SegmentConfig { min_size: 100, max_size: 16_000_000, target_interval: Duration::from_secs(3) }
    }
}

/// What the machine asks of the store; one at a time, answered with an [`Answer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Read the record: its version and value, or that there is none.
    Read,
    /// Write `record` only if the stored one is still `over`, at version `expect`. Both are
    /// compared: after a restore of the store, versions are handed out again, so a write held
    /// up from before it could find its version again on another record; the record's content
    /// (a claim names its claimant, a fence counts itself) is not found again.
    Write { expect: Version, over: Record, record: Record },
}

/// The store's answer to an [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The record as read (`None`: no such sequence).
    Read(Option<(Version, Record)>),
    /// The write took effect; the record now stands at this version.
    Written(Version),
    /// The write was refused, untouched: the stored record is no longer at the version it
    /// named. What is stored now, when the store said (`None`: nothing).
    Refused(Option<(Version, Record)>),
    /// Nobody knows whether the operation took effect (a timeout, a lost connection).
    Unknown(String),
    /// The write was refused, untouched: this instance no longer holds the ordered sequence.
    NotHolder,
}

/// Why a sequence gives no more values on this instance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("sequence {0:?} does not exist")]
    NotFound(String),
    #[error("sequence {name:?} has issued every value up to its maximum, {max}")]
    Exhausted { name: String, max: u64 },
    #[error(
        "the store of sequence {name:?} went back ({found}): it was restored from a snapshot, or the record was changed by hand; this instance gives none of its values until `snowmint fence --sequence-skip` moves it past them, so none is issued twice"
    )]
    WentBack { name: String, found: String },
    #[error("sequence {0:?} is closed on this instance")]
    Closed(String),
    #[error("ordered sequence {0:?} is no longer served by this instance (its lease lapsed, or another took it)")]
    NotHolder(String),
}

/// What happened, for metrics, logs and the audit of segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A segment was confirmed this instance's.
    Claimed { claim: ClaimId, values: Range<u64> },
    /// A claim of unknown outcome turned out not to have landed (or landed after another):
    /// its values are given up.
    ClaimLost { claim: ClaimId, values: Range<u64> },
    /// Unused values went back to the sequence at a clean close.
    GaveBack { values: Range<u64> },
    /// `snowmint fence` moved the sequence up (its count now `fenced`) to `next`, above every
    /// value this instance took: values it held from before are dropped, claims go on above.
    Fenced { fenced: u64, next: u64 },
    /// The sequence stopped on this instance (a store gone back: until a fence moves it past
    /// what this instance took).
    Stopped(SequenceError),
}

/// A claim sent, not yet confirmed.
#[derive(Debug, Clone)]
struct Pending {
    claim: ClaimId,
    values: Range<u64>,
    /// Its outcome is unknown: the record is read to learn it.
    unknown: bool,
}

/// What the operation in flight is.
#[derive(Debug, Clone)]
enum InFlight {
    Read,
    Claim(Record),
    GiveBack(Record),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Running,
    /// Closing: the give-back is sent, or about to be.
    Closing,
    Done(SequenceError),
}

/// One instance's segments of one sequence.
#[derive(Debug)]
pub struct Segments {
    name: String,
    session: i64,
    config: SegmentConfig,
    /// The record as last known stored, at its version.
    known: Option<(Version, Record)>,
    /// Confirmed segments not yet used up, in order: the only values handed out.
    ready: VecDeque<Range<u64>>,
    pending: Option<Pending>,
    in_flight: Option<(u64, InFlight)>,
    next_op: u64,
    next_claim: u64,
    /// The highest version seen stored, and the end of the last segment confirmed ours.
    highest_version: Option<Version>,
    highest_end: u64,
    /// The highest fence count seen on the record.
    highest_fenced: u64,
    /// Whether this instance's own last claim is the record's latest write (nothing taken
    /// after it), as far as it knows: the give-back's condition.
    last_claim_is_top: bool,
    /// The size of the last claim, and the values taken since it, from when.
    last_size: u64,
    taken_since_claim: u64,
    last_claim_at: Option<Duration>,
    /// Values the last take could not give: a claim is due while fewer are here.
    wanted: u64,
    /// The store went back: nothing is handed out or claimed until a fence shows above what
    /// this instance took. When the record was last read for it, and whether a caller asked
    /// since.
    went_back: Option<SequenceError>,
    rechecked_at: Option<Duration>,
    recheck: bool,
    /// This instance serves the sequence if it is ordered (it holds it under its lease): an
    /// ordered sequence is neither claimed nor handed out otherwise.
    holds: bool,
    state: State,
    events: VecDeque<Event>,
}

impl Segments {
    /// The machine for sequence `name` on the instance whose session is `session`: claims it
    /// makes are `ClaimId { session, number }`, numbers never reused (numbered from 0; a
    /// machine made anew under the same session starts where [`Segments::claims_from`] says).
    pub fn new(name: &str, session: i64, config: SegmentConfig) -> Segments {
        assert!(config.min_size >= 1 && config.min_size <= config.max_size, "segment sizes {config:?}");
        Segments {
            name: name.into(),
            session,
            config,
            known: None,
            ready: VecDeque::new(),
            pending: None,
            in_flight: None,
            next_op: 0,
            next_claim: 0,
            highest_version: None,
            highest_end: 0,
            highest_fenced: 0,
            last_claim_is_top: false,
            last_size: 0,
            taken_since_claim: 0,
            last_claim_at: None,
            wanted: 0,
            went_back: None,
            rechecked_at: None,
            recheck: false,
            holds: false,
            state: State::Running,
            events: VecDeque::new(),
        }
    }

    /// Numbers this machine's claims from `first` on: an instance that makes a sequence's
    /// machine anew (an ordered sequence's lease lapsed, a sequence created on first use)
    /// gives each its own range, so no claim of a dropped machine landing late is read back
    /// as the new one's.
    pub fn claims_from(mut self, first: u64) -> Segments {
        self.next_claim = first;
        self
    }

    /// The sequence's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The record as last known stored.
    pub fn known(&self) -> Option<&Record> {
        self.known.as_ref().map(|(_, record)| record)
    }

    /// How many values are confirmed this instance's and not handed out yet.
    pub fn available(&self) -> u64 {
        self.ready.iter().map(|r| r.end - r.start).sum()
    }

    /// Why no value will come any more, once that is so: stopped, closed, or used up with
    /// nothing left here.
    pub fn error(&self) -> Option<SequenceError> {
        if let State::Done(error) = &self.state {
            return Some(error.clone());
        }
        if let Some(error) = &self.went_back {
            return Some(error.clone());
        }
        if self.ready.is_empty()
            && self.pending.is_none()
            && let Some((_, record)) = &self.known
            && record.left() == 0
        {
            return Some(SequenceError::Exhausted { name: self.name.clone(), max: record.max });
        }
        None
    }

    /// Hands out up to `want` values, in increasing order, as ranges; fewer (or none) when
    /// fewer are confirmed. A shortfall is remembered: the next claim covers it.
    pub fn take(&mut self, want: u64) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut left = want;
        if self.state != State::Running {
            return out;
        }
        if self.went_back.is_some() {
            self.recheck = true;
            return out;
        }
        if self.is_ordered() && !self.holds {
            self.wanted = want;
            return out;
        }
        while left > 0 {
            let Some(front) = self.ready.front_mut() else { break };
            let n = left.min(front.end - front.start);
            out.push(front.start..front.start + n);
            front.start += n;
            left -= n;
            if front.start == front.end {
                self.ready.pop_front();
            }
        }
        self.taken_since_claim += want - left;
        self.wanted = left;
        out
    }

    /// Whether the record read says the sequence is ordered.
    pub fn is_ordered(&self) -> bool {
        self.known().is_some_and(|record| record.ordered)
    }

    /// Tells the machine this instance holds the sequence (it serves it, if ordered). Set
    /// once: an instance that stops holding it drops this machine and what it held.
    pub fn hold(&mut self) {
        self.holds = true;
    }

    /// Asks for the record to be read again, when the store went back, to see whether a fence
    /// moved it past what this instance took: at most once every [`RECHECK_INTERVAL`]. A take
    /// asks the same.
    pub fn recheck(&mut self) {
        if self.went_back.is_some() {
            self.recheck = true;
        }
    }

    /// Stops taking segments; the next operation gives the unused values back when nothing
    /// was taken after this instance's last claim. Values not yet handed out are not handed
    /// out any more.
    pub fn close(&mut self) {
        if self.state == State::Running {
            self.state = State::Closing;
        }
    }

    /// Whether the machine has nothing more to do: closed (given back or not), or stopped.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done(_)) && self.in_flight.is_none()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next store operation, with the id its answer must carry; `None` while one is in
    /// flight or none is needed. `now` is a monotonic time (boot time), for the rate.
    pub fn poll_op(&mut self, now: Duration) -> Option<(u64, Op)> {
        if self.in_flight.is_some() {
            return None;
        }
        let (kind, op) = match self.state {
            State::Done(_) => return None,
            State::Closing => match self.give_back() {
                Some(((expect, over), record)) => {
                    (InFlight::GiveBack(record.clone()), Op::Write { expect, over, record })
                }
                None => {
                    self.stop(SequenceError::Closed(self.name.clone()));
                    return None;
                }
            },
            State::Running if self.went_back.is_some() => {
                let due = self.rechecked_at.is_none_or(|at| now >= at + RECHECK_INTERVAL);
                if !(self.recheck && due) {
                    return None;
                }
                self.recheck = false;
                self.rechecked_at = Some(now);
                (InFlight::Read, Op::Read)
            }
            State::Running => {
                if self.known.is_none() || self.pending.as_ref().is_some_and(|p| p.unknown) {
                    (InFlight::Read, Op::Read)
                } else if self.pending.is_none() && self.needs_claim() {
                    let ((expect, over), record) = self.claim(now)?;
                    (InFlight::Claim(record.clone()), Op::Write { expect, over, record })
                } else {
                    return None;
                }
            }
        };
        let id = self.next_op;
        self.next_op += 1;
        self.in_flight = Some((id, kind));
        Some((id, op))
    }

    /// Whether a claim is due: values are wanted that are not here, or what is left fell under
    /// half the last segment (and no second segment is waiting).
    fn needs_claim(&self) -> bool {
        let Some((_, record)) = &self.known else { return false };
        if record.left() == 0 || (record.ordered && !self.holds) {
            return false;
        }
        let available = self.available();
        self.wanted > available || (self.ready.len() <= 1 && available < self.last_size.div_ceil(2).max(1))
    }

    /// The next claim: values from the record's `next` on, as many as the rate asks for.
    fn claim(&mut self, now: Duration) -> Option<((Version, Record), Record)> {
        let (version, record) = self.known.clone()?;
        let rate_size = match self.last_claim_at {
            Some(at) if now > at => {
                let elapsed = (now - at).as_secs_f64();
                (self.taken_since_claim as f64 / elapsed * self.config.target_interval.as_secs_f64()) as u64
            }
            _ => 0,
        };
        let size = rate_size
            .max(self.wanted.saturating_sub(self.available()))
            .clamp(self.config.min_size, self.config.max_size)
            .min(record.left());
        let claim = ClaimId { session: self.session, number: self.next_claim };
        self.next_claim += 1;
        let values = record.next..record.next + size;
        if crate::defects::active(crate::defects::Defect::ValueBeforeDurable) {
            self.ready.push_back(values.clone());
        }
        self.pending = Some(Pending { claim, values: values.clone(), unknown: false });
        self.last_size = size;
        self.taken_since_claim = 0;
        self.last_claim_at = Some(now);
        let claimed = Record { next: values.end, claim: Some(claim), ..record.clone() };
        Some(((version, record), claimed))
    }

    /// At a close: the write that gives the unused top of the sequence back, when this
    /// instance's last claim is still the record's latest write and its unused values run
    /// unbroken up to the record's `next`.
    fn give_back(&mut self) -> Option<((Version, Record), Record)> {
        let (version, record) = self.known.clone()?;
        if !self.last_claim_is_top || self.pending.is_some() {
            return None;
        }
        // The unused values that run unbroken up to the top: the last ready segments, from
        // the top down, while each ends where the one above starts.
        let mut from = record.next;
        for segment in self.ready.iter().rev() {
            if segment.end != from {
                break;
            }
            from = segment.start;
        }
        self.ready.clear();
        if from == record.next {
            return None;
        }
        let given_back = Record { next: from, claim: None, ..record.clone() };
        Some(((version, record), given_back))
    }

    /// Takes in the answer to operation `id`; an answer to any other is ignored.
    pub fn handle_answer(&mut self, id: u64, answer: Answer) {
        let kind = match self.in_flight.take() {
            Some((in_flight, kind)) if in_flight == id => kind,
            other => {
                self.in_flight = other;
                return;
            }
        };
        match (kind, answer) {
            (_, Answer::Unknown(_)) | (InFlight::Read, Answer::Written(_) | Answer::Refused(_)) => {
                if let Some(pending) = &mut self.pending {
                    pending.unknown = true;
                }
                // A read of unknown outcome is simply asked again; a give-back of unknown
                // outcome leaves a gap or not, either way nothing is issued after it.
                if self.state == State::Closing {
                    self.stop(SequenceError::Closed(self.name.clone()));
                }
            }
            (InFlight::Read, Answer::Read(None)) | (InFlight::Claim(_), Answer::Refused(None)) => {
                self.stop(SequenceError::NotFound(self.name.clone()));
            }
            (InFlight::Read, Answer::Read(Some((version, record)))) => {
                if self.saw(version, &record) {
                    self.resolve_unknown(&record);
                    self.known = Some((version, record));
                }
            }
            (InFlight::Claim(_) | InFlight::GiveBack(_), Answer::Read(_)) => {
                // Not an answer to a write: its outcome is unknown.
                if let Some(pending) = &mut self.pending {
                    pending.unknown = true;
                }
                if self.state == State::Closing {
                    self.stop(SequenceError::Closed(self.name.clone()));
                }
            }
            (InFlight::Claim(record), Answer::Written(version)) => {
                if let Some(pending) = self.pending.take()
                    && self.saw(version, &record)
                {
                    self.confirm(pending);
                    self.known = Some((version, record));
                }
            }
            (InFlight::Claim(_), Answer::Refused(Some((version, record)))) => {
                self.pending = None;
                self.last_claim_is_top = false;
                if self.saw(version, &record) {
                    self.known = Some((version, record));
                }
            }
            (InFlight::GiveBack(record), Answer::Written(_)) => {
                self.events
                    .push_back(Event::GaveBack { values: record.next..self.known().map_or(record.next, |k| k.next) });
                self.stop(SequenceError::Closed(self.name.clone()));
            }
            (InFlight::GiveBack(_), Answer::Refused(_)) => self.stop(SequenceError::Closed(self.name.clone())),
            (InFlight::Read, Answer::NotHolder) => {}
            (InFlight::Claim(_) | InFlight::GiveBack(_), Answer::NotHolder) => {
                // Refused untouched: nothing of the claim landed.
                self.pending = None;
                self.stop(SequenceError::NotHolder(self.name.clone()));
            }
        }
    }

    /// A claim of unknown outcome, settled by the record as read: it landed if the record
    /// names it and stands at its end (nothing after it), else it is given up. A claim that
    /// landed and was then followed by another's is given up too: it cannot be told apart
    /// from one that never landed, and a gap is safe.
    fn resolve_unknown(&mut self, record: &Record) {
        let Some(pending) = self.pending.take_if(|p| p.unknown) else { return };
        if record.claim == Some(pending.claim) && record.next == pending.values.end {
            self.confirm(pending);
        } else {
            self.last_claim_is_top = false;
            self.events.push_back(Event::ClaimLost { claim: pending.claim, values: pending.values });
        }
    }

    fn confirm(&mut self, pending: Pending) {
        self.highest_end = self.highest_end.max(pending.values.end);
        self.last_claim_is_top = true;
        if !crate::defects::active(crate::defects::Defect::ValueBeforeDurable) {
            self.ready.push_back(pending.values.clone());
        }
        self.events.push_back(Event::Claimed { claim: pending.claim, values: pending.values });
    }

    /// Checks a record the store showed against what this instance knew: `false` (and the
    /// sequence stopped here) when the store went back. A record fenced more times than seen,
    /// its `next` above every value this instance took, is a fence after a restore: its
    /// version is the new baseline, and the values held from before it are dropped.
    fn saw(&mut self, version: Version, record: &Record) -> bool {
        if record.fenced > self.highest_fenced && record.next >= self.highest_end {
            self.highest_fenced = record.fenced;
            if self.highest_version.replace(version).is_some() {
                // Met while running (a first read just learns the count).
                self.ready.clear();
                self.last_claim_is_top = false;
                self.went_back = None;
                self.events.push_back(Event::Fenced { fenced: record.fenced, next: record.next });
            }
            return true;
        }
        if self.went_back.is_some() {
            return false;
        }
        let found = if self.highest_version.is_some_and(|highest| version < highest) {
            Some(format!("its record is at {version:?}, below {:?} seen before", self.highest_version.unwrap()))
        } else if record.next < self.highest_end {
            Some(format!("its next value is {}, below {} this instance took up to", record.next, self.highest_end))
        } else {
            None
        };
        if let Some(found) = found {
            self.ready.clear();
            self.pending = None;
            self.last_claim_is_top = false;
            let error = SequenceError::WentBack { name: self.name.clone(), found };
            self.events.push_back(Event::Stopped(error.clone()));
            self.went_back = Some(error);
            return false;
        }
        self.highest_version = Some(self.highest_version.map_or(version, |highest| highest.max(version)));
        true
    }

    fn stop(&mut self, error: SequenceError) {
        if !matches!(self.state, State::Done(_)) {
            self.ready.clear();
            if !matches!(error, SequenceError::Closed(_)) {
                self.events.push_back(Event::Stopped(error.clone()));
            }
            self.state = State::Done(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::sequence::record::MAX_VALUE;

    /// A store of one record: every write that takes effect moves the version up, and a
    /// write applies only at the version it names. It logs which claim took which values.
    struct Store {
        version: i64,
        record: Option<Record>,
        taken: Vec<(ClaimId, Range<u64>)>,
    }

    impl Store {
        fn new(start: u64, max: u64) -> Store {
            Store { version: 1, record: Some(Record::new(start, max, false).unwrap()), taken: Vec::new() }
        }

        fn current(&self) -> Option<(Version, Record)> {
            self.record.clone().map(|record| (Version::At(self.version), record))
        }

        fn apply(&mut self, op: &Op) -> Answer {
            match op {
                Op::Read => Answer::Read(self.current()),
                Op::Write { expect, over, record } => {
                    if self.current() != Some((*expect, over.clone())) {
                        return Answer::Refused(self.current());
                    }
                    if let Some(claim) = record.claim {
                        let from = self.record.as_ref().unwrap().next;
                        self.taken.push((claim, from..record.next));
                    }
                    self.version += 1;
                    self.record = Some(record.clone());
                    Answer::Written(Version::At(self.version))
                }
            }
        }

        fn next(&self) -> u64 {
            self.record.as_ref().unwrap().next
        }
    }

    const T0: Duration = Duration::from_secs(100);

    fn config() -> SegmentConfig {
        SegmentConfig { min_size: 10, max_size: 1000, target_interval: Duration::from_secs(1) }
    }

    /// Runs the machine's operations against the store until it asks for none.
    fn settle(segments: &mut Segments, store: &mut Store, now: Duration) {
        for _ in 0..100 {
            let Some((id, op)) = segments.poll_op(now) else { return };
            let answer = store.apply(&op);
            segments.handle_answer(id, answer);
        }
        panic!("the machine asked for 100 operations in a row");
    }

    fn values(ranges: &[Range<u64>]) -> Vec<u64> {
        ranges.iter().flat_map(|r| r.clone()).collect()
    }

    fn events(segments: &mut Segments) -> Vec<Event> {
        std::iter::from_fn(|| segments.poll_event()).collect()
    }

    #[test]
    fn no_value_is_handed_out_before_its_claim_is_written() {
        let mut store = Store::new(1, MAX_VALUE);
        let mut segments = Segments::new("orders", 7, config());
        assert!(segments.take(5).is_empty());
        let (read, op) = segments.poll_op(T0).unwrap();
        assert_eq!(op, Op::Read);
        assert_eq!(segments.poll_op(T0), None, "one operation at a time");
        segments.handle_answer(read, store.apply(&op));
        let (claim, op) = segments.poll_op(T0).unwrap();
        let Op::Write { expect, record, .. } = &op else { panic!("{op:?}") };
        assert_eq!((*expect, record.next, record.claim), (Version::At(1), 11, Some(ClaimId { session: 7, number: 0 })));
        assert!(segments.take(5).is_empty(), "the claim is not written yet");
        segments.handle_answer(claim + 1, Answer::Written(Version::At(2)));
        assert!(segments.take(5).is_empty(), "an answer to another operation is no answer");
        segments.handle_answer(claim, store.apply(&op));
        assert_eq!(values(&segments.take(5)), vec![1, 2, 3, 4, 5]);
        assert_eq!(
            events(&mut segments),
            vec![Event::Claimed { claim: ClaimId { session: 7, number: 0 }, values: 1..11 }]
        );
    }

    #[test]
    fn a_machine_made_anew_under_the_same_session_names_its_claims_apart() {
        let mut store = Store::new(1, MAX_VALUE);
        let mut first = Segments::new("orders", 7, config());
        first.take(1);
        settle(&mut first, &mut store, T0);
        let mut again = Segments::new("orders", 7, config()).claims_from(1 << 32);
        again.take(100);
        settle(&mut again, &mut store, T0);
        let claims: Vec<ClaimId> = store.taken.iter().map(|(claim, _)| *claim).collect();
        assert_eq!(claims[0], ClaimId { session: 7, number: 0 });
        assert!(claims[1..].iter().all(|c| c.session == 7 && c.number >= 1 << 32), "{claims:?}");
    }

    #[test]
    fn a_refused_claim_takes_its_values_from_the_record_it_met() {
        let mut store = Store::new(1, MAX_VALUE);
        let (mut a, mut b) = (Segments::new("orders", 1, config()), Segments::new("orders", 2, config()));
        let (read_a, op) = a.poll_op(T0).unwrap();
        a.handle_answer(read_a, store.apply(&op));
        let (read_b, op) = b.poll_op(T0).unwrap();
        b.handle_answer(read_b, store.apply(&op));
        settle(&mut a, &mut store, T0);
        let (claim_b, op) = b.poll_op(T0).unwrap();
        let answer = store.apply(&op);
        assert!(matches!(answer, Answer::Refused(Some(_))), "{answer:?}");
        b.handle_answer(claim_b, answer);
        settle(&mut b, &mut store, T0);
        assert_eq!(values(&a.take(10)), (1..11).collect::<Vec<_>>());
        assert_eq!(values(&b.take(10)), (11..21).collect::<Vec<_>>());
    }

    #[test]
    fn a_claim_of_unknown_outcome_is_read_back_and_kept_only_if_it_landed_last() {
        // It landed, its reply lost: the record names it, and its values are used.
        let mut store = Store::new(1, MAX_VALUE);
        let mut segments = Segments::new("orders", 7, config());
        let (read, op) = segments.poll_op(T0).unwrap();
        segments.handle_answer(read, store.apply(&op));
        let (claim, op) = segments.poll_op(T0).unwrap();
        store.apply(&op);
        segments.handle_answer(claim, Answer::Unknown("timed out".into()));
        assert!(segments.take(1).is_empty());
        assert_eq!(segments.poll_op(T0).map(|(_, op)| op), Some(Op::Read));
        segments.in_flight = None;
        settle(&mut segments, &mut store, T0);
        assert_eq!(values(&segments.take(3)), vec![1, 2, 3]);

        // Held up in the network: read back as not landed, given up, claimed again; the old
        // write landing later is refused by its compare, and nothing is handed out twice.
        let mut store = Store::new(1, MAX_VALUE);
        let mut segments = Segments::new("orders", 7, config());
        settle_read(&mut segments, &mut store);
        let (claim, held_up) = segments.poll_op(T0).unwrap();
        segments.handle_answer(claim, Answer::Unknown("connection reset".into()));
        settle(&mut segments, &mut store, T0);
        assert!(matches!(store.apply(&held_up), Answer::Refused(_)));
        let lost = ClaimId { session: 7, number: 0 };
        let got = events(&mut segments);
        assert_eq!(got[0], Event::ClaimLost { claim: lost, values: 1..11 });
        assert!(matches!(got[1], Event::Claimed { values: Range { start: 1, end: 11 }, .. }), "{got:?}");
        assert_eq!(store.taken.len(), 1);

        // Landed, then another instance claimed after it: it cannot be told from one that
        // never landed, and is given up (a gap).
        let mut store = Store::new(1, MAX_VALUE);
        let (mut a, mut b) = (Segments::new("orders", 1, config()), Segments::new("orders", 2, config()));
        settle_read(&mut a, &mut store);
        let (claim, op) = a.poll_op(T0).unwrap();
        store.apply(&op);
        a.handle_answer(claim, Answer::Unknown("timed out".into()));
        settle(&mut b, &mut store, T0);
        settle(&mut a, &mut store, T0);
        assert_eq!(values(&b.take(1)), vec![11]);
        assert_eq!(values(&a.take(1)), vec![21]);
        assert!(events(&mut a).contains(&Event::ClaimLost { claim: ClaimId { session: 1, number: 0 }, values: 1..11 }));
    }

    /// Reads the record once.
    fn settle_read(segments: &mut Segments, store: &mut Store) {
        let (read, op) = segments.poll_op(T0).unwrap();
        assert_eq!(op, Op::Read);
        segments.handle_answer(read, store.apply(&op));
    }

    #[test]
    fn the_next_segment_is_claimed_at_half_the_last_and_sized_by_the_rate() {
        let mut store = Store::new(1, MAX_VALUE);
        let mut segments = Segments::new("orders", 7, config());
        settle(&mut segments, &mut store, T0);
        assert_eq!(store.next(), 11, "the first claim is the minimum");
        segments.take(5);
        assert_eq!(segments.poll_op(T0), None, "half is left");
        // 6 values in half a second: 12 a second, a segment of a second.
        segments.take(1);
        settle(&mut segments, &mut store, T0 + Duration::from_millis(500));
        assert_eq!(store.next(), 23);
        assert_eq!(segments.available(), 4 + 12);
        // A batch far above the rate: claims of the maximum each until it is covered.
        segments.take(16);
        assert!(segments.take(5000).is_empty());
        let (claim, op) = segments.poll_op(T0 + Duration::from_millis(600)).unwrap();
        assert!(matches!(op, Op::Write { record: Record { next: 1023, .. }, .. }), "{op:?}");
        segments.handle_answer(claim, store.apply(&op));
        settle(&mut segments, &mut store, T0 + Duration::from_millis(600));
        assert_eq!(store.next(), 5023);
        assert_eq!(values(&segments.take(5000)), (23..5023).collect::<Vec<_>>());
        // A batch larger than what is here waits for a claim covering it.
        let mut store = Store::new(1, MAX_VALUE);
        let mut segments = Segments::new("orders", 7, config());
        settle_read(&mut segments, &mut store);
        assert!(segments.take(300).is_empty());
        settle(&mut segments, &mut store, T0);
        assert_eq!(values(&segments.take(300)), (1..301).collect::<Vec<_>>());
    }

    #[test]
    fn a_clean_close_gives_back_only_what_nobody_could_have_taken() {
        let mut store = Store::new(1, MAX_VALUE);
        let mut segments = Segments::new("orders", 7, config());
        settle(&mut segments, &mut store, T0);
        segments.take(3);
        segments.close();
        assert!(segments.take(1).is_empty(), "nothing is handed out once closing");
        settle(&mut segments, &mut store, T0);
        assert!(segments.is_done());
        assert_eq!(store.next(), 4, "a rolling restart leaves no gap");
        assert_eq!(events(&mut segments).last(), Some(&Event::GaveBack { values: 4..11 }));
        assert_eq!(segments.error(), Some(SequenceError::Closed("orders".into())));

        // Another instance claimed after it: nothing goes back, though it does not know.
        let mut store = Store::new(1, MAX_VALUE);
        let (mut a, mut b) = (Segments::new("orders", 1, config()), Segments::new("orders", 2, config()));
        settle(&mut a, &mut store, T0);
        settle(&mut b, &mut store, T0);
        a.close();
        settle(&mut a, &mut store, T0);
        assert_eq!(store.next(), 21);
        assert!(a.is_done());
        // The top instance gives back its own, not the other's.
        b.close();
        settle(&mut b, &mut store, T0);
        assert_eq!(store.next(), 11);
    }

    #[test]
    fn a_store_gone_back_stops_the_sequence_on_this_instance() {
        let mut store = Store::new(1, MAX_VALUE);
        let mut segments = Segments::new("orders", 7, config());
        settle(&mut segments, &mut store, T0);
        let _ = events(&mut segments);
        // Restored from a snapshot taken before the claim.
        store.version = 1;
        store.record = Some(Record::new(1, MAX_VALUE, false).unwrap());
        segments.take(10);
        settle(&mut segments, &mut store, T0);
        assert!(segments.take(1).is_empty());
        assert!(matches!(segments.error(), Some(SequenceError::WentBack { .. })), "{:?}", segments.error());
        assert!(matches!(events(&mut segments)[..], [Event::Stopped(SequenceError::WentBack { .. })]));
        assert_eq!(store.next(), 1, "no claim is made on a store gone back");
    }

    /// A restore followed by `snowmint fence`: the record went back in version, but a higher
    /// fence count with `next` above every value this instance took is the fence, not the
    /// store gone back; the values held from before it are dropped (a gap), and claims go on
    /// above. A fence that moved too little is still the store gone back.
    #[test]
    fn a_fence_above_what_was_taken_is_followed_and_one_below_it_stops_the_sequence() {
        let mut store = Store::new(1, MAX_VALUE);
        let mut segments = Segments::new("orders", 7, config());
        settle(&mut segments, &mut store, T0);
        assert_eq!(values(&segments.take(3)), vec![1, 2, 3]);
        settle(&mut segments, &mut store, T0);
        let _ = events(&mut segments);
        // Restored from a snapshot taken before the claim, then fenced 50 values on.
        store.version = 1;
        store.record = Some(Record::new(1, MAX_VALUE, false).unwrap().fence(50));
        segments.take(100);
        settle(&mut segments, &mut store, T0);
        let after = values(&segments.take(5));
        assert_eq!(after, vec![51, 52, 53, 54, 55], "claims go on above the fence");
        assert!(matches!(events(&mut segments)[..], [Event::Fenced { fenced: 1, next: 51 }, Event::Claimed { .. }]));

        // A fence that does not reach past what this instance took.
        let mut store = Store::new(1, MAX_VALUE);
        let mut segments = Segments::new("orders", 7, config());
        settle(&mut segments, &mut store, T0);
        segments.take(3);
        store.version = 1;
        store.record = Some(Record::new(1, MAX_VALUE, false).unwrap().fence(5));
        segments.take(100);
        settle(&mut segments, &mut store, T0);
        assert!(matches!(segments.error(), Some(SequenceError::WentBack { .. })), "{:?}", segments.error());
        assert_eq!(store.next(), 6, "no claim is made below what was taken");

        // Refused until a fence reaches past it: the record is read again when asked, at most
        // once a second, and the sequence goes on above the fence.
        let _ = events(&mut segments);
        segments.recheck();
        settle(&mut segments, &mut store, T0);
        assert!(matches!(segments.error(), Some(SequenceError::WentBack { .. })), "{:?}", segments.error());
        segments.recheck();
        assert_eq!(segments.poll_op(T0), None, "read again within a second");
        store.record = Some(store.record.clone().unwrap().fence(100));
        store.version += 1;
        segments.recheck();
        let later = T0 + RECHECK_INTERVAL;
        settle(&mut segments, &mut store, later);
        assert_eq!(segments.error(), None);
        settle(&mut segments, &mut store, later);
        assert_eq!(values(&segments.take(2)), vec![106, 107]);
        assert!(matches!(events(&mut segments)[..], [Event::Fenced { fenced: 2, next: 106 }, Event::Claimed { .. }]));
    }

    #[test]
    fn a_sequence_stops_at_its_maximum_and_a_missing_one_is_not_found() {
        let mut store = Store::new(1, 25);
        let mut segments = Segments::new("orders", 7, config());
        let mut got = Vec::new();
        for _ in 0..10 {
            settle(&mut segments, &mut store, T0);
            got.extend(values(&segments.take(7)));
        }
        assert_eq!(got, (1..26).collect::<Vec<_>>());
        assert_eq!(segments.error(), Some(SequenceError::Exhausted { name: "orders".into(), max: 25 }));

        let mut store = Store::new(1, 25);
        store.record = None;
        let mut segments = Segments::new("orders", 7, config());
        settle(&mut segments, &mut store, T0);
        assert_eq!(segments.error(), Some(SequenceError::NotFound("orders".into())));
    }

    /// One step of the model: what an instance does, or what the network does to its
    /// operation.
    #[derive(Debug, Clone)]
    enum Step {
        Take {
            instance: usize,
            count: u64,
        },
        /// The instance's next operation: answered, landed with its answer lost, lost before
        /// landing, or held up in the network (to land later, or never).
        Op {
            instance: usize,
            fate: u8,
        },
        /// A held-up write lands now (its answer long given up).
        Land {
            index: usize,
        },
        Close {
            instance: usize,
        },
        /// A crash: the instance's memory is gone; a new one takes its place.
        Crash {
            instance: usize,
        },
        Wait {
            ms: u64,
        },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (0..3usize, 1..40u64).prop_map(|(instance, count)| Step::Take { instance, count }),
            6 => (0..3usize, 0..4u8).prop_map(|(instance, fate)| Step::Op { instance, fate }),
            1 => (0..8usize).prop_map(|index| Step::Land { index }),
            1 => (0..3usize).prop_map(|instance| Step::Close { instance }),
            1 => (0..3usize).prop_map(|instance| Step::Crash { instance }),
            1 => (1..2000u64).prop_map(|ms| Step::Wait { ms }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Three instances over one store whose answers are lost and whose writes are held
        /// up and land late: no value is handed out twice, each instance's values increase,
        /// and every value lies in a segment its instance's claim moved the record past.
        #[test]
        fn no_value_twice_and_none_outside_a_durable_claim(steps in proptest::collection::vec(step(), 1..200)) {
            let mut store = Store::new(1, 5000);
            let mut sessions = [1i64, 2, 3];
            let mut instances: Vec<Segments> = sessions.iter().map(|&s| Segments::new("orders", s, config())).collect();
            let mut held: Vec<Op> = Vec::new();
            let mut issued: BTreeMap<u64, i64> = BTreeMap::new();
            let mut last: BTreeMap<i64, u64> = BTreeMap::new();
            let mut now = T0;
            for step in steps {
                match step {
                    Step::Take { instance, count } => {
                        let session = sessions[instance];
                        for value in values(&instances[instance].take(count)) {
                            prop_assert!(issued.insert(value, session).is_none(), "{value} issued twice");
                            prop_assert!(last.get(&session).is_none_or(|&l| l < value), "{value} not above {:?} on {session}", last.get(&session));
                            last.insert(session, value);
                            let covered = store.taken.iter().any(|(claim, values)| claim.session == session && values.contains(&value));
                            prop_assert!(covered, "{value} handed out by {session} outside its durable claims");
                        }
                    }
                    Step::Op { instance, fate } => {
                        let Some((id, op)) = instances[instance].poll_op(now) else { continue };
                        let answer = match fate {
                            0 | 1 => store.apply(&op),
                            2 => { store.apply(&op); Answer::Unknown("reply lost".into()) }
                            _ => { if matches!(op, Op::Write { .. }) { held.push(op) } Answer::Unknown("held up".into()) }
                        };
                        instances[instance].handle_answer(id, answer);
                    }
                    Step::Land { index } => {
                        if index < held.len() {
                            let op = held.remove(index);
                            store.apply(&op);
                        }
                    }
                    Step::Close { instance } => instances[instance].close(),
                    Step::Crash { instance } => {
                        sessions[instance] += 10;
                        instances[instance] = Segments::new("orders", sessions[instance], config());
                    }
                    Step::Wait { ms } => now += Duration::from_millis(ms),
                }
                for segments in &mut instances {
                    while let Some(event) = segments.poll_event() {
                        prop_assert!(!matches!(event, Event::Stopped(SequenceError::WentBack { .. })), "{event:?} with no restore");
                    }
                }
            }
            // Every instance still running, its operations answered, gives values again.
            for (instance, segments) in instances.iter_mut().enumerate() {
                if segments.state != State::Running {
                    continue;
                }
                settle(segments, &mut store, now);
                let got = values(&segments.take(1));
                let exhausted = store.next() > 5000 && segments.available() == 0;
                prop_assert!(!got.is_empty() || exhausted, "instance {instance} is stuck: {:?}", segments.error());
                for value in got {
                    prop_assert!(issued.insert(value, sessions[instance]).is_none(), "{value} issued twice");
                }
            }
        }
    }
}
