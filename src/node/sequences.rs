//! The named sequences of one instance: one tokio task that holds every sequence's segment
//! machine ([`crate::sequence::Segments`]), carries their operations to the sequence store,
//! and answers callers from the values the machines hand out.
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

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, SEGMENT_CLAIMED, SEGMENT_GIVEN_BACK, SEGMENT_LOST};
use crate::sequence::{
    Answer, Created, Event, Op, Record, RecordError, SegmentConfig, Segments, SequenceError, SequenceStore, check_name,
};

/// How long the shutdown waits for the sequences' give-backs.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);

/// The callers' queue: asks beyond it are refused as the minter's are.
const ASKS: usize = 4096;

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
    #[error("the server is shutting down")]
    ShuttingDown,
}

/// One caller's ask.
struct Ask {
    name: String,
    count: u64,
    reply: oneshot::Sender<Result<Vec<Range<u64>>, SequenceCallError>>,
}

/// How callers reach the sequences' task.
#[derive(Clone)]
pub struct SequencesHandle {
    asks: mpsc::Sender<Ask>,
    /// The last store error per sequence, for the refusals of callers whose deadline passed.
    last_error: Arc<std::sync::Mutex<BTreeMap<String, String>>>,
}

impl SequencesHandle {
    /// `count` values of sequence `name`, in increasing order, as ranges; within `timeout` if
    /// one is given.
    pub async fn take(
        &self,
        name: &str,
        count: u64,
        timeout: Option<Duration>,
    ) -> Result<Vec<Range<u64>>, SequenceCallError> {
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
fn split_off_front(ranges: &mut Vec<Range<u64>>, count: u64) -> Vec<Range<u64>> {
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

/// One sequence on this instance: its machine, its callers, the backoff of its store calls.
struct Entry {
    segments: Segments,
    asks: VecDeque<Ask>,
    /// Values taken for the callers at the front so far, in order: a caller gone before its
    /// turn leaves them to the next.
    gathered: Vec<Range<u64>>,
    gathered_count: u64,
    backoff: Duration,
}

/// An answer from the store, for the machine of `name`.
struct Answered {
    name: String,
    id: u64,
    answer: Answer,
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
    let task =
        Task { store: Arc::new(store), config, metrics, entries: BTreeMap::new(), last_error, started: Instant::now() };
    (handle, tokio::spawn(task.run(asks, shutdown)))
}

struct Task<S> {
    store: Arc<S>,
    config: SequencesConfig,
    metrics: Metrics,
    entries: BTreeMap<String, Entry>,
    last_error: Arc<std::sync::Mutex<BTreeMap<String, String>>>,
    started: Instant,
}

impl<S: SequenceStore> Task<S> {
    async fn run(mut self, mut asks: mpsc::Receiver<Ask>, shutdown: CancellationToken) {
        let (answers_tx, mut answers) = mpsc::unbounded_channel::<Answered>();
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                Some(answered) = answers.recv() => {
                    self.answered(answered).await;
                    self.drive(&answers_tx);
                }
                Some(ask) = asks.recv() => {
                    self.ask(ask).await;
                    self.drive(&answers_tx);
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
        self.drive(&answers_tx);
        while self.entries.values().any(|e| !e.segments.is_done()) {
            match tokio::time::timeout_at(until, answers.recv()).await {
                Ok(Some(answered)) => {
                    self.answered(answered).await;
                    self.drive(&answers_tx);
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
            let segments = Segments::new(&name, self.config.session, self.config.segments);
            let entry = Entry {
                segments,
                asks: VecDeque::new(),
                gathered: Vec::new(),
                gathered_count: 0,
                backoff: Duration::ZERO,
            };
            self.entries.insert(name.clone(), entry);
        }
        self.entries.get_mut(&name).unwrap().asks.push_back(ask);
        self.serve(&name).await;
    }

    async fn answered(&mut self, Answered { name, id, answer }: Answered) {
        let Some(entry) = self.entries.get_mut(&name) else { return };
        match &answer {
            Answer::Unknown(error) => {
                entry.backoff = (entry.backoff * 2).clamp(Duration::from_millis(50), Duration::from_secs(1));
                tracing::warn!(sequence = %name, %error, "sequence store call failed; retrying");
                self.last_error.lock().unwrap().insert(name.clone(), error.clone());
            }
            _ => entry.backoff = Duration::ZERO,
        }
        entry.segments.handle_answer(id, answer);
        self.serve(&name).await;
    }

    /// Answers the callers of `name` that its values cover, in order, and reports its events.
    async fn serve(&mut self, name: &str) {
        if !self.entries.contains_key(name) {
            return;
        }
        self.report(name);
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
                let left = entry.segments.known().map(|r| (r.left() + entry.segments.available(), r.max));
                let exhausted = match (entry.segments.error(), left) {
                    (Some(SequenceError::Exhausted { max, .. }), _) => Some((0, max)),
                    (None, Some((left, max))) if left < wanted => Some((left, max)),
                    _ => None,
                };
                if let Some((left, max)) = exhausted {
                    let ask = entry.asks.pop_front().unwrap();
                    let (name, asked) = (name.to_string(), ask.count);
                    let _ = ask.reply.send(Err(SequenceCallError::Exhausted { name, left, max, asked }));
                    continue;
                }
                if let Some(error) = entry.segments.error() {
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
                            entry.segments = Segments::new(name, self.config.session, self.config.segments);
                            break;
                        }
                        SequenceError::NotFound(name) => SequenceCallError::NotFound(name),
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
            if ask.reply.send(Ok(values)).is_ok() {
                self.metrics.named_sequence_values.with_label_values(&[name]).inc_by(count);
            }
        }
    }

    /// Turns the events of `name`'s machine into metrics and log lines.
    fn report(&mut self, name: &str) {
        let Some(entry) = self.entries.get_mut(name) else { return };
        while let Some(event) = entry.segments.poll_event() {
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
    fn drive(&mut self, answers: &mpsc::UnboundedSender<Answered>) {
        let now = self.started.elapsed();
        for (name, entry) in &mut self.entries {
            let Some((id, op)) = entry.segments.poll_op(now) else { continue };
            let (store, name, answers, backoff) = (self.store.clone(), name.clone(), answers.clone(), entry.backoff);
            tokio::spawn(async move {
                if !backoff.is_zero() && matches!(op, Op::Read) {
                    tokio::time::sleep(backoff).await;
                }
                let answer = store.call(&name, op).await;
                let _ = answers.send(Answered { name, id, answer });
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

    /// One sequence in memory; its calls wait while the test holds `gate` for writing.
    struct Memory {
        state: Mutex<(i64, Option<Record>)>,
        gate: Arc<RwLock<()>>,
    }

    impl SequenceStore for Memory {
        async fn call(&self, _name: &str, op: Op) -> Answer {
            let _open = self.gate.read().await;
            let mut state = self.state.lock().unwrap();
            let current = state.1.clone().map(|record| (Version::At(state.0), record));
            match op {
                Op::Read => Answer::Read(current),
                Op::Write { expect, record } if current.as_ref().map(|c| c.0) == Some(expect) => {
                    state.0 += 1;
                    state.1 = Some(record);
                    Answer::Written(Version::At(state.0))
                }
                Op::Write { .. } => Answer::Refused(current),
            }
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

    fn values(ranges: &[Range<u64>]) -> Vec<u64> {
        ranges.iter().flat_map(|r| r.clone()).collect()
    }

    /// A batch that gathered part of its values and then gave up (its deadline, the store
    /// held up) leaves what it gathered to the next caller in line: the next gets them at
    /// once, in order, and nothing is handed out twice or skipped.
    #[tokio::test]
    async fn a_caller_gone_mid_batch_leaves_its_values_to_the_next() {
        let gate = Arc::new(RwLock::new(()));
        let record = Record::new(1, MAX_VALUE, false).unwrap();
        let store = Memory { state: Mutex::new((1, Some(record))), gate: gate.clone() };
        let segments = SegmentConfig { min_size: 10, max_size: 10, target_interval: Duration::from_secs(3) };
        let config = SequencesConfig { segments, create_on_use: false, session: 7 };
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
}
