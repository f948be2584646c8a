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

/// One sequence on this instance: its machine, its callers, the backoff of its store calls.
struct Entry {
    segments: Segments,
    asks: VecDeque<Ask>,
    /// Values taken for the caller at the front so far.
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
                entry.asks.pop_front();
                continue;
            }
            let wanted = front.count - entry.gathered_count;
            if let Some(error) = entry.segments.error() {
                let error = match error {
                    SequenceError::NotFound(_) if self.config.create_on_use => {
                        let record = Record::new(1, crate::sequence::MAX_VALUE, false).expect("a valid record");
                        match self.store.create(name, &record).await {
                            Ok(Created::New(_)) => tracing::info!(sequence = %name, "sequence created on first use"),
                            Ok(Created::Exists(_)) => {}
                            Err(error) => tracing::warn!(sequence = %name, %error, "sequence not created on first use"),
                        }
                        // A new machine reads it afresh; the callers stay in line.
                        entry.segments = Segments::new(name, self.config.session, self.config.segments);
                        break;
                    }
                    SequenceError::NotFound(name) => SequenceCallError::NotFound(name),
                    SequenceError::Exhausted { name, max } => {
                        SequenceCallError::Exhausted { name, left: 0, max, asked: wanted }
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
            if let Some(record) = entry.segments.known()
                && record.left() + entry.segments.available() < wanted
            {
                let ask = entry.asks.pop_front().unwrap();
                let _ = ask.reply.send(Err(SequenceCallError::Exhausted {
                    name: name.to_string(),
                    left: record.left() + entry.segments.available(),
                    max: record.max,
                    asked: ask.count,
                }));
                continue;
            }
            let taken = entry.segments.take(wanted);
            let got: u64 = taken.iter().map(|r| r.end - r.start).sum();
            entry.gathered.extend(taken);
            entry.gathered_count += got;
            if got < wanted {
                break;
            }
            let ask = entry.asks.pop_front().unwrap();
            let values = std::mem::take(&mut entry.gathered);
            entry.gathered_count = 0;
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
                    tracing::debug!(sequence = %name, claim = claim.number, from = values.start, to = values.end - 1, "segment claimed");
                }
                Event::ClaimLost { claim, values } => {
                    self.metrics.named_sequence_segments.with_label_values(&[name, SEGMENT_LOST]).inc();
                    tracing::warn!(sequence = %name, claim = claim.number, from = values.start, to = values.end - 1, "a segment claim of unknown outcome was given up: its values are a gap");
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
