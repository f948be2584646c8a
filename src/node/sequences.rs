//! The named sequences of one instance: one tokio task that holds every sequence's segment
//! machine ([`crate::sequence::Segments`]), carries their operations to the sequence store,
//! and answers callers from the values the machines hand out.
//!
//! An ordered sequence is served by one instance at a time, the one whose lease holds its
//! holder key ([`SequenceStore::hold`]): only the holder claims and hands out its values, and
//! only while its lease's deadline (the keeper's, [`crate::grant::Grant::deadline`]) is ahead;
//! its writes also compare that the key is still its own. Another instance answers its callers
//! with where it is held ([`SequenceCallError::HeldElsewhere`]), for the front door to forward
//! them. When the holder's lease lapses its machine is dropped with what it held (a gap), so
//! values handed out stay in the order calls were answered, fleet-wide.
//!
//! Callers of one sequence are answered in the order they asked, each with all its values at
//! once; a caller that gave up (its deadline) before its turn takes nothing. Values taken for a
//! caller that is gone by the time they are sent are not issued again (a gap). A store
//! operation of unknown outcome is retried after a backoff (50 ms, doubling to 1 s), so a
//! store that is down is not hammered. At the shutdown every machine closes and gives back
//! what it can within [`CLOSE_TIMEOUT`].

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::grant::Holding;
use crate::history::segment_recorder::SegmentTap;
use crate::store::SessionId;

use crate::metrics::{Metrics, SEGMENT_CLAIMED, SEGMENT_GIVEN_BACK, SEGMENT_LOST};
use crate::sequence::{
    Answer, Created, Event, HeldBy, Op, Record, RecordError, SegmentConfig, Segments, SequenceError, SequenceStore,
    check_name,
};

/// How long the shutdown waits for the sequences' give-backs.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);

/// The callers' queue: asks beyond it are refused as the minter's are.
const ASKS: usize = 4096;

/// How long an instance takes another's word that it holds an ordered sequence before it
/// asks the store again.
const HELD_ELSEWHERE_FOR: Duration = Duration::from_secs(1);

/// The settings of the sequences of one instance.
#[derive(Debug, Clone)]
pub struct SequencesConfig {
    pub segments: SegmentConfig,
    /// A name with no sequence creates it (from 1, unordered) instead of answering
    /// [`SequenceCallError::NotFound`].
    pub create_on_use: bool,
    /// This instance's session: what its claims are named by (its etcd lease, or a random
    /// number in standalone mode), unique among the instances that share the store.
    pub session: i64,
    /// How this instance holds ordered sequences in a fleet; `None` when it is alone on its
    /// store (a state dir), and so holds every one.
    pub fleet: Option<Fleet>,
    /// Where the segments held go on record (the history), if anywhere.
    pub history: Option<SegmentTap>,
}

/// What holding an ordered sequence in a fleet takes: the keeper's holding (its lease and the
/// deadline past which it may be gone), the clock that deadline is on, and the address the
/// other instances forward to.
#[derive(Clone)]
pub struct Fleet {
    pub holding: watch::Receiver<Holding>,
    pub clock: Arc<dyn Clock>,
    pub address: String,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").field("address", &self.address).finish_non_exhaustive()
    }
}

impl Fleet {
    /// The lease this instance holds now, while its deadline is ahead.
    fn lease(&self) -> Option<SessionId> {
        lease_of(&self.holding.borrow(), self.clock.boot_time())
    }
}

/// The lease an instance whose keeper published `holding` may serve ordered sequences under
/// at boot time `boot`: its grant's session, while the grant's deadline is ahead.
///
/// The planted defect [`Defect::OrderedPastLease`](crate::defects::Defect::OrderedPastLease)
/// skips the deadline.
pub(crate) fn lease_of(holding: &Holding, boot: Duration) -> Option<SessionId> {
    let past_lease = crate::defects::active(crate::defects::Defect::OrderedPastLease);
    match holding {
        Holding::Held(grant) if past_lease || grant.deadline.is_none_or(|d| boot < d) => grant.session,
        _ => None,
    }
}

/// Why a call got no values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceCallError {
    #[error("{0}")]
    Name(#[from] RecordError),
    #[error("sequence {0:?} does not exist: create it with `snowmint sequence create {0}`")]
    NotFound(String),
    #[error("sequence {name:?} has {left} values left before its maximum, {max}; the call asked for {asked}")]
    Exhausted { name: String, left: u64, max: u64, asked: u64 },
    #[error("{0}")]
    Stopped(SequenceError),
    #[error(
        "sequence {name:?} has no values ready within the call's deadline: its store is slow or unreachable ({last})"
    )]
    Deadline { name: String, last: String },
    #[error("the sequences' queue is full ({ASKS} calls waiting)")]
    Saturated,
    /// An ordered sequence served by another instance, at `address`: forwarded there.
    #[error("ordered sequence {name:?} is served by the instance at {address}")]
    HeldElsewhere { name: String, address: String },
    #[error("ordered sequence {name:?} cannot be served by this instance now: {reason}")]
    NotHolding { name: String, reason: String },
    #[error("the server is shutting down")]
    ShuttingDown,
}

/// The values one call took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// In increasing order, as ranges.
    pub values: Vec<Range<u64>>,
    /// The sequence was created ordered (its values increase fleet-wide in answer order).
    pub ordered: bool,
}

/// One caller's ask.
struct Ask {
    name: String,
    count: u64,
    reply: oneshot::Sender<Result<Taken, SequenceCallError>>,
}

/// How callers reach the sequences' task.
#[derive(Clone)]
pub struct SequencesHandle {
    asks: mpsc::Sender<Ask>,
    /// The last store error per sequence, for the refusals of callers whose deadline passed.
    last_error: Arc<std::sync::Mutex<BTreeMap<String, String>>>,
}

impl SequencesHandle {
    /// `count` values of sequence `name`, in increasing order; within `timeout` if one is
    /// given.
    pub async fn take(&self, name: &str, count: u64, timeout: Option<Duration>) -> Result<Taken, SequenceCallError> {
        check_name(name)?;
        let (reply, answer) = oneshot::channel();
        let ask = Ask { name: name.to_string(), count, reply };
        self.asks.try_send(ask).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SequenceCallError::Saturated,
            mpsc::error::TrySendError::Closed(_) => SequenceCallError::ShuttingDown,
        })?;
        let answered = match timeout {
            Some(timeout) => match tokio::time::timeout(timeout, answer).await {
                Ok(answered) => answered,
                Err(_) => {
                    let last = self.last_error.lock().unwrap().get(name).cloned();
                    return Err(SequenceCallError::Deadline {
                        name: name.to_string(),
                        last: last.unwrap_or_else(|| "no error seen".into()),
                    });
                }
            },
            None => answer.await,
        };
        answered.unwrap_or(Err(SequenceCallError::ShuttingDown))
    }
}

/// The first `count` values of `ranges` (which hold at least that many), taken out of them.
pub(crate) fn split_off_front(ranges: &mut Vec<Range<u64>>, count: u64) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut left = count;
    let mut rest = Vec::new();
    for range in ranges.drain(..) {
        if left == 0 {
            rest.push(range);
            continue;
        }
        let n = left.min(range.end - range.start);
        out.push(range.start..range.start + n);
        left -= n;
        if range.start + n < range.end {
            rest.push(range.start + n..range.end);
        }
    }
    *ranges = rest;
    out
}

/// Whether a caller wanting `wanted` more values of `segments`' sequence is refused before
/// anything is taken for it, as too few are left before the maximum: (values left, maximum).
pub(crate) fn exhausted(segments: &Segments, wanted: u64) -> Option<(u64, u64)> {
    let left = segments.known().map(|r| (r.left() + segments.available(), r.max));
    match (segments.error(), left) {
        (Some(SequenceError::Exhausted { max, .. }), _) => Some((0, max)),
        (None, Some((left, max))) if left < wanted => Some((left, max)),
        _ => None,
    }
}

/// The wait before a sequence's next store read after `answer`: an operation of unknown
/// outcome doubles it (from 50 ms, to 1 s), any other answer clears it.
pub(crate) fn backoff_after(backoff: Duration, answer: &Answer) -> Duration {
    match answer {
        Answer::Unknown(_) => (backoff * 2).clamp(Duration::from_millis(50), Duration::from_secs(1)),
        _ => Duration::ZERO,
    }
}

/// One sequence on this instance: its machine, its callers, the backoff of its store calls.
struct Entry {
    segments: Segments,
    /// Which machine of the task's this is: a machine made anew (its predecessor dropped)
    /// numbers its operations from 0 again, so an answer is taken only by the machine whose
    /// operation it answers.
    machine: u64,
    asks: VecDeque<Ask>,
    /// Values taken for the callers at the front so far, in order: a caller gone before its
    /// turn leaves them to the next.
    gathered: Vec<Range<u64>>,
    gathered_count: u64,
    backoff: Duration,
    /// Who serves it, if it is ordered.
    holder: Holder,
}

/// Who serves an ordered sequence, as this instance knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    Unknown,
    /// The store is asked.
    Asking,
    /// This instance, under this lease.
    Mine(SessionId),
    Elsewhere {
        address: String,
        until: Instant,
    },
}

impl Entry {
    fn new(name: &str, config: &SequencesConfig, machine: u64) -> Entry {
        Entry {
            segments: Segments::new(name, config.session, config.segments).claims_from(machine << 32),
            machine,
            asks: VecDeque::new(),
            gathered: Vec::new(),
            gathered_count: 0,
            backoff: Duration::ZERO,
            holder: Holder::Unknown,
        }
    }

    /// Answers every caller waiting with `error`.
    fn refuse_all(&mut self, error: SequenceCallError) {
        for ask in self.asks.drain(..) {
            let _ = ask.reply.send(Err(error.clone()));
        }
    }
}

/// What the store said, for sequence `name`: an answer to operation `id` of its machine
/// `machine`, or who holds it.
enum Answered {
    Op { name: String, machine: u64, id: u64, answer: Answer },
    Held { name: String, held: Result<HeldBy, String> },
}

/// Starts the sequences' task over `store`; it ends at `shutdown`, after the give-backs.
pub fn spawn_sequences<S: SequenceStore>(
    store: S,
    config: SequencesConfig,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> (SequencesHandle, tokio::task::JoinHandle<()>) {
    let (asks_tx, asks) = mpsc::channel(ASKS);
    let last_error = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let handle = SequencesHandle { asks: asks_tx, last_error: last_error.clone() };
    let (answers_tx, answers) = mpsc::unbounded_channel::<Answered>();
    let task = Task {
        store: Arc::new(store),
        config,
        metrics,
        entries: BTreeMap::new(),
        last_error,
        started: Instant::now(),
        answers: answers_tx,
        machines: 0,
    };
    (handle, tokio::spawn(task.run(asks, answers, shutdown)))
}

struct Task<S> {
    store: Arc<S>,
    config: SequencesConfig,
    metrics: Metrics,
    entries: BTreeMap<String, Entry>,
    last_error: Arc<std::sync::Mutex<BTreeMap<String, String>>>,
    started: Instant,
    /// Where the store's answers come back to the task.
    answers: mpsc::UnboundedSender<Answered>,
    /// How many machines the task made: each entry's is numbered.
    machines: u64,
}

impl<S: SequenceStore> Task<S> {
    async fn run(
        mut self,
        mut asks: mpsc::Receiver<Ask>,
        mut answers: mpsc::UnboundedReceiver<Answered>,
        shutdown: CancellationToken,
    ) {
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                Some(answered) = answers.recv() => {
                    self.answered(answered).await;
                    self.drive();
                }
                Some(ask) = asks.recv() => {
                    self.ask(ask).await;
                    self.drive();
                }
            }
        }
        asks.close();
        while let Ok(ask) = asks.try_recv() {
            let _ = ask.reply.send(Err(SequenceCallError::ShuttingDown));
        }
        for entry in self.entries.values_mut() {
            entry.segments.close();
            for ask in entry.asks.drain(..) {
                let _ = ask.reply.send(Err(SequenceCallError::ShuttingDown));
            }
        }
        let until = Instant::now() + CLOSE_TIMEOUT;
        self.drive();
        while self.entries.values().any(|e| !e.segments.is_done()) {
            match tokio::time::timeout_at(until, answers.recv()).await {
                Ok(Some(answered)) => {
                    self.answered(answered).await;
                    self.drive();
                }
                _ => {
                    tracing::warn!(
                        "sequences: the give-backs did not finish within {CLOSE_TIMEOUT:?}; the values not given back are a gap"
                    );
                    break;
                }
            }
        }
    }

    /// Takes in a caller's ask: its sequence's machine is made on the first ask for it.
    async fn ask(&mut self, ask: Ask) {
        let name = ask.name.clone();
        if !self.entries.contains_key(&name) {
            self.machines += 1;
            self.entries.insert(name.clone(), Entry::new(&name, &self.config, self.machines));
        }
        self.entries.get_mut(&name).unwrap().asks.push_back(ask);
        self.serve(&name).await;
    }

    async fn answered(&mut self, answered: Answered) {
        let (name, machine, id, answer) = match answered {
            Answered::Op { name, machine, id, answer } => (name, machine, id, answer),
            Answered::Held { name, held } => return self.held(name, held).await,
        };
        // An answer to a machine since dropped is no answer to its successor's operation.
        let Some(entry) = self.entries.get_mut(&name).filter(|entry| entry.machine == machine) else { return };
        entry.backoff = backoff_after(entry.backoff, &answer);
        if let Answer::Unknown(error) = &answer {
            tracing::warn!(sequence = %name, %error, "sequence store call failed; retrying");
            self.last_error.lock().unwrap().insert(name.clone(), error.clone());
        }
        entry.segments.handle_answer(id, answer);
        self.serve(&name).await;
    }

    /// Takes in who holds ordered sequence `name`.
    async fn held(&mut self, name: String, held: Result<HeldBy, String>) {
        let Some(entry) = self.entries.get_mut(&name) else { return };
        if entry.holder != Holder::Asking {
            return;
        }
        let lease = self.config.fleet.as_ref().and_then(Fleet::lease);
        entry.holder = match held {
            Ok(held) if Some(held.session) == lease => {
                tracing::info!(sequence = %name, session = held.session, "this instance serves the ordered sequence");
                entry.segments.hold();
                Holder::Mine(held.session)
            }
            Ok(held) => Holder::Elsewhere { address: held.address, until: Instant::now() + HELD_ELSEWHERE_FOR },
            Err(error) => {
                tracing::warn!(sequence = %name, %error, "who serves the ordered sequence is not known");
                entry.refuse_all(SequenceCallError::NotHolding { name: name.clone(), reason: error });
                Holder::Unknown
            }
        };
        self.serve(&name).await;
    }

    /// Whether this instance serves ordered sequence `name` now (always, for one that is not
    /// ordered). If not: the store is asked who holds it (the callers wait), or the callers
    /// are told where it is held, or refused; a holder whose lease lapsed drops its machine and
    /// what it held and gathered (a gap), so nothing it held is handed out after another
    /// instance may have served the sequence.
    fn serves(&mut self, name: &str) -> bool {
        let entry = self.entries.get_mut(name).expect("an entry");
        if !entry.segments.is_ordered() {
            return true;
        }
        let Some(fleet) = &self.config.fleet else {
            entry.segments.hold();
            return true;
        };
        let lease = fleet.lease();
        match &entry.holder {
            Holder::Mine(session) if Some(*session) == lease => return true,
            Holder::Mine(session) => {
                tracing::warn!(sequence = %name, session, "the lease this instance served the ordered sequence under lapsed: the values it held are a gap");
                self.machines += 1;
                *entry =
                    Entry { asks: std::mem::take(&mut entry.asks), ..Entry::new(name, &self.config, self.machines) };
                let reason = "the lease it was served under lapsed; ask again".to_string();
                entry.refuse_all(SequenceCallError::NotHolding { name: name.into(), reason });
            }
            Holder::Asking => {}
            Holder::Elsewhere { address, until } if Instant::now() < *until => {
                let error = SequenceCallError::HeldElsewhere { name: name.into(), address: address.clone() };
                entry.refuse_all(error);
            }
            Holder::Unknown | Holder::Elsewhere { .. } => match lease {
                None => {
                    let reason = "this instance holds no lease now".to_string();
                    entry.refuse_all(SequenceCallError::NotHolding { name: name.into(), reason });
                }
                Some(session) if !entry.asks.is_empty() => {
                    entry.holder = Holder::Asking;
                    let (store, name, address) = (self.store.clone(), name.to_string(), fleet.address.clone());
                    let answers = self.answers.clone();
                    tokio::spawn(async move {
                        let held = store.hold(&name, session, &address).await;
                        let _ = answers.send(Answered::Held { name, held });
                    });
                }
                Some(_) => {}
            },
        }
        false
    }

    /// Answers the callers of `name` that its values cover, in order, and reports its events.
    async fn serve(&mut self, name: &str) {
        if !self.entries.contains_key(name) {
            return;
        }
        self.report(name);
        if !self.serves(name) {
            return;
        }
        let entry = self.entries.get_mut(name).unwrap();
        while let Some(front) = entry.asks.front() {
            if front.reply.is_closed() {
                // Gone (its deadline passed): what was gathered for it goes to the next in line.
                entry.asks.pop_front();
                continue;
            }
            let wanted = front.count.saturating_sub(entry.gathered_count);
            if wanted > 0 {
                // Too few left before the maximum: refused before anything is taken for it.
                if let Some((left, max)) = exhausted(&entry.segments, wanted) {
                    let ask = entry.asks.pop_front().unwrap();
                    let (name, asked) = (name.to_string(), ask.count);
                    let _ = ask.reply.send(Err(SequenceCallError::Exhausted { name, left, max, asked }));
                    continue;
                }
                if let Some(error) = entry.segments.error() {
                    // A store gone back is read again now and then while asked: a fence lifts it.
                    entry.segments.recheck();
                    let error = match error {
                        SequenceError::NotFound(_) if self.config.create_on_use => {
                            let record = Record::new(1, crate::sequence::MAX_VALUE, false).expect("a valid record");
                            match self.store.create(name, &record).await {
                                Ok(Created::New(_)) => {
                                    tracing::info!(sequence = %name, "sequence created on first use")
                                }
                                Ok(Created::Exists(_)) => {}
                                Err(error) => {
                                    tracing::warn!(sequence = %name, %error, "sequence not created on first use")
                                }
                            }
                            // A new machine reads it afresh; the callers stay in line.
                            self.machines += 1;
                            entry.segments = Segments::new(name, self.config.session, self.config.segments)
                                .claims_from(self.machines << 32);
                            entry.machine = self.machines;
                            break;
                        }
                        SequenceError::NotFound(name) => SequenceCallError::NotFound(name),
                        SequenceError::NotHolder(name) => {
                            // Another instance took it: asked again, who serves it is asked anew.
                            let reason = "another instance serves it now; ask again".to_string();
                            entry.refuse_all(SequenceCallError::NotHolding { name: name.clone(), reason });
                            self.machines += 1;
                            *entry = Entry::new(&name, &self.config, self.machines);
                            return;
                        }
                        other => SequenceCallError::Stopped(other),
                    };
                    for ask in entry.asks.drain(..) {
                        let _ = ask.reply.send(Err(error.clone()));
                    }
                    if matches!(error, SequenceCallError::NotFound(_)) {
                        // Asked again, it is read again: it may be created meanwhile.
                        self.entries.remove(name);
                    }
                    return;
                }
                let taken = entry.segments.take(wanted);
                let got: u64 = taken.iter().map(|r| r.end - r.start).sum();
                entry.gathered.extend(taken);
                entry.gathered_count += got;
                if got < wanted {
                    break;
                }
            }
            let ask = entry.asks.pop_front().unwrap();
            let values = split_off_front(&mut entry.gathered, ask.count);
            entry.gathered_count -= ask.count;
            let count = ask.count;
            let ordered = entry.segments.known().is_some_and(|record| record.ordered);
            if ask.reply.send(Ok(Taken { values, ordered })).is_ok() {
                self.metrics.named_sequence_values.with_label_values(&[name]).inc_by(count);
            }
        }
    }

    /// Turns the events of `name`'s machine into metrics and log lines, and hands them to the
    /// history.
    fn report(&mut self, name: &str) {
        let Some(entry) = self.entries.get_mut(name) else { return };
        while let Some(event) = entry.segments.poll_event() {
            if let Some(history) = &self.config.history {
                history.observe(name, &event);
            }
            match event {
                Event::Claimed { claim, values } => {
                    self.metrics.named_sequence_segments.with_label_values(&[name, SEGMENT_CLAIMED]).inc();
                    self.metrics
                        .named_sequence_segment_size
                        .with_label_values(&[name])
                        .set((values.end - values.start) as i64);
                    // At info: the log's record of which instance (its session) held which values.
                    tracing::info!(sequence = %name, session = claim.session, claim = claim.number, from = values.start, to = values.end - 1, "segment claimed");
                }
                Event::ClaimLost { claim, values } => {
                    self.metrics.named_sequence_segments.with_label_values(&[name, SEGMENT_LOST]).inc();
                    tracing::warn!(sequence = %name, session = claim.session, claim = claim.number, from = values.start, to = values.end - 1, "a segment claim of unknown outcome was given up: its values are a gap");
                }
                Event::GaveBack { values } => {
                    self.metrics.named_sequence_segments.with_label_values(&[name, SEGMENT_GIVEN_BACK]).inc();
                    tracing::info!(sequence = %name, from = values.start, to = values.end - 1, "unused values given back");
                }
                Event::Fenced { fenced, next } => {
                    tracing::warn!(sequence = %name, fenced, next, "the sequence was fenced after a restore of its store: values held from before are a gap, claims go on from its next value");
                }
                Event::Stopped(error) => tracing::error!(sequence = %name, %error, "sequence stopped on this instance"),
            }
        }
        if let Some(record) = entry.segments.known() {
            self.metrics
                .named_sequence_values_left
                .with_label_values(&[name])
                .set(record.left().min(i64::MAX as u64) as i64);
        }
    }

    /// Sends every machine's next store operation, each to run on its own.
    fn drive(&mut self) {
        let now = self.started.elapsed();
        for (name, entry) in &mut self.entries {
            let Some((id, op)) = entry.segments.poll_op(now) else { continue };
            let (store, name, answers, backoff, machine) =
                (self.store.clone(), name.clone(), self.answers.clone(), entry.backoff, entry.machine);
            // The holder's writes of an ordered sequence hold only while its key is its own.
            let holder = match entry.holder {
                Holder::Mine(session) if self.config.fleet.is_some() => Some(session),
                _ => None,
            };
            tokio::spawn(async move {
                if !backoff.is_zero() && matches!(op, Op::Read) {
                    tokio::time::sleep(backoff).await;
                }
                let answer = store.call(&name, op, holder).await;
                let _ = answers.send(Answered::Op { name, machine, id, answer });
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::sync::RwLock;

    use super::*;
    use crate::sequence::{Listed, MAX_VALUE};
    use crate::store::Version;

    /// One sequence in memory, shared by the instances of a test, with the holder of an
    /// ordered one (its key gone with the lease when the test revokes it); its calls wait
    /// while the test holds `gate` for writing.
    /// The record's version, the record, and its holder.
    type Stored = (i64, Option<Record>, Option<HeldBy>);

    #[derive(Clone)]
    struct Memory {
        state: Arc<Mutex<Stored>>,
        gate: Arc<RwLock<()>>,
    }

    impl Memory {
        fn new(record: Record) -> Memory {
            Memory { state: Arc::new(Mutex::new((1, Some(record), None))), gate: Arc::new(RwLock::new(())) }
        }

        /// The lease `session` expired: the holder key bound to it goes.
        fn revoke(&self, session: SessionId) {
            self.state.lock().unwrap().2.take_if(|held| held.session == session);
        }
    }

    impl SequenceStore for Memory {
        async fn call(&self, _name: &str, op: Op, holder: Option<SessionId>) -> Answer {
            let _open = self.gate.read().await;
            let mut state = self.state.lock().unwrap();
            let current = state.1.clone().map(|record| (Version::At(state.0), record));
            let holds = holder.is_none_or(|session| state.2.as_ref().is_some_and(|held| held.session == session));
            match op {
                Op::Read => Answer::Read(current),
                Op::Write { .. } if !holds => Answer::NotHolder,
                Op::Write { expect, ref over, record }
                    if current.as_ref().is_some_and(|c| (c.0, &c.1) == (expect, over)) =>
                {
                    state.0 += 1;
                    state.1 = Some(record);
                    Answer::Written(Version::At(state.0))
                }
                Op::Write { .. } => Answer::Refused(current),
            }
        }

        async fn hold(&self, _name: &str, session: SessionId, address: &str) -> Result<HeldBy, String> {
            let mut state = self.state.lock().unwrap();
            Ok(state.2.get_or_insert_with(|| HeldBy { session, address: address.into() }).clone())
        }

        async fn create(&self, _name: &str, record: &Record) -> Result<Created, String> {
            let mut state = self.state.lock().unwrap();
            match &state.1 {
                Some(existing) => Ok(Created::Exists(existing.clone())),
                None => {
                    state.1 = Some(record.clone());
                    Ok(Created::New(Version::At(state.0)))
                }
            }
        }

        async fn list(&self) -> Result<Vec<Listed>, String> {
            Ok(Vec::new())
        }
    }

    fn values(taken: &Taken) -> Vec<u64> {
        taken.values.iter().flat_map(|r| r.clone()).collect()
    }

    /// A batch that gathered part of its values and then gave up (its deadline, the store
    /// held up) leaves what it gathered to the next caller in line: the next gets them at
    /// once, in order, and nothing is handed out twice or skipped.
    #[tokio::test]
    async fn a_caller_gone_mid_batch_leaves_its_values_to_the_next() {
        let store = Memory::new(Record::new(1, MAX_VALUE, false).unwrap());
        let gate = store.gate.clone();
        let segments = SegmentConfig { min_size: 10, max_size: 10, target_interval: Duration::from_secs(3) };
        let config = SequencesConfig { segments, create_on_use: false, session: 7, fleet: None, history: None };
        let shutdown = CancellationToken::new();
        let (handle, task) = spawn_sequences(store, config, Metrics::new(), shutdown.clone());
        let short = Some(Duration::from_millis(200));
        assert_eq!(values(&handle.take("s", 5, short).await.unwrap()), vec![1, 2, 3, 4, 5]);
        let held = gate.write().await;
        let refused = handle.take("s", 8, short).await.unwrap_err();
        assert!(matches!(refused, SequenceCallError::Deadline { .. }), "{refused:?}");
        assert_eq!(values(&handle.take("s", 2, short).await.unwrap()), vec![6, 7]);
        drop(held);
        let after = values(&handle.take("s", 10, Some(Duration::from_secs(5))).await.unwrap());
        assert_eq!(after, (8..18).collect::<Vec<_>>());
        shutdown.cancel();
        task.await.unwrap();
    }

    /// An instance of the fleet with its lease: what its keeper would publish.
    fn instance(
        store: &Memory,
        lease: SessionId,
        shutdown: &CancellationToken,
    ) -> (SequencesHandle, watch::Sender<Holding>) {
        let held = |session| {
            Holding::Held(crate::grant::Grant {
                slots: Vec::new(),
                generation: 1,
                deadline: None,
                session: Some(session),
                on_demand: false,
            })
        };
        let (holding_tx, holding) = watch::channel(held(lease));
        let clock: Arc<dyn Clock> = Arc::new(crate::clock::ManualClock::new(0));
        let fleet = Fleet { holding, clock, address: format!("instance-{lease}:50051") };
        let segments = SegmentConfig { min_size: 10, max_size: 10, target_interval: Duration::from_secs(3) };
        let config =
            SequencesConfig { segments, create_on_use: false, session: lease, fleet: Some(fleet), history: None };
        let (handle, _task) = spawn_sequences(store.clone(), config, Metrics::new(), shutdown.clone());
        (handle, holding_tx)
    }

    /// An ordered sequence is served by the instance whose lease holds it; the other is told
    /// where. When the holder's lease lapses it drops the values it held, and the next holder
    /// goes on above them: every value answered is above every value answered before it.
    #[tokio::test]
    async fn an_ordered_sequence_is_served_by_one_holder_at_a_time_in_answer_order() {
        let store = Memory::new(Record::new(1, MAX_VALUE, true).unwrap());
        let shutdown = CancellationToken::new();
        let ((a, a_lease), (b, _)) = (instance(&store, 1, &shutdown), instance(&store, 2, &shutdown));
        let wait = Some(Duration::from_secs(5));
        let mut answered = values(&a.take("o", 3, wait).await.unwrap());
        assert_eq!(answered, vec![1, 2, 3]);
        assert!(a.take("o", 1, wait).await.unwrap().ordered);
        answered.push(4);
        let elsewhere = b.take("o", 1, wait).await.unwrap_err();
        assert_eq!(
            elsewhere,
            SequenceCallError::HeldElsewhere { name: "o".into(), address: "instance-1:50051".into() }
        );

        // A's lease lapses (its keeper publishes no lease; etcd drops the key with it).
        a_lease.send_replace(Holding::Unheld { reason: "lost".into() });
        store.revoke(1);
        let refused = a.take("o", 1, wait).await.unwrap_err();
        assert!(matches!(refused, SequenceCallError::NotHolding { .. }), "{refused:?}");
        // B believes A a second, then asks again and serves it, above what A held.
        tokio::time::sleep(HELD_ELSEWHERE_FOR).await;
        let from_b = values(&b.take("o", 4, wait).await.unwrap());
        assert!(from_b[0] > *answered.last().unwrap(), "{from_b:?} after {answered:?}");
        assert!(from_b[0] > 10, "B took values A held: {from_b:?}");
        answered.extend(from_b);
        // A back with a new lease: B serves it now.
        a_lease.send_replace(Holding::Held(crate::grant::Grant {
            slots: Vec::new(),
            generation: 2,
            deadline: None,
            session: Some(3),
            on_demand: false,
        }));
        let refused = a.take("o", 1, wait).await.unwrap_err();
        assert!(matches!(refused, SequenceCallError::HeldElsewhere { .. }), "{refused:?}");
        answered.extend(values(&b.take("o", 2, wait).await.unwrap()));
        assert!(answered.windows(2).all(|w| w[0] < w[1]), "not in answer order: {answered:?}");
        shutdown.cancel();
    }

    /// A machine made anew numbers its operations from 0 again: an answer to its dropped
    /// predecessor's operation, arriving late, must not be taken as the answer to the new
    /// machine's operation of the same number.
    #[tokio::test]
    async fn an_answer_to_a_dropped_machine_is_not_taken_by_its_successor() {
        let store = Memory::new(Record::new(1, MAX_VALUE, false).unwrap());
        let segments = SegmentConfig { min_size: 10, max_size: 10, target_interval: Duration::from_secs(3) };
        let config = SequencesConfig { segments, create_on_use: false, session: 7, fleet: None, history: None };
        let (answers, _unread) = mpsc::unbounded_channel();
        let mut task = Task {
            store: Arc::new(store),
            config: config.clone(),
            metrics: Metrics::new(),
            entries: BTreeMap::new(),
            last_error: Arc::new(std::sync::Mutex::new(BTreeMap::new())),
            started: Instant::now(),
            answers,
            machines: 1,
        };
        task.entries.insert("s".into(), Entry::new("s", &config, 1));
        let (old, _) = task.entries.get_mut("s").unwrap().segments.poll_op(Duration::ZERO).unwrap();
        // The machine is dropped (its lease lapsed) and made anew.
        task.machines = 2;
        task.entries.insert("s".into(), Entry::new("s", &config, 2));
        let (new, op) = task.entries.get_mut("s").unwrap().segments.poll_op(Duration::ZERO).unwrap();
        assert_eq!((old, &op), (new, &Op::Read), "both machines number their first operation alike");
        let stale = Record { next: 500, ..Record::new(1, MAX_VALUE, false).unwrap() };
        let answer = Answer::Read(Some((Version::At(40), stale)));
        task.answered(Answered::Op { name: "s".into(), machine: 1, id: old, answer }).await;
        assert_eq!(task.entries["s"].segments.known(), None, "the successor took its predecessor's answer");
    }
}
