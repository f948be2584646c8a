//! The prefetch buffer of named sequences (`ClientBuilder::sequence_prefetch`), the contract of
//! clients/README.md: per sequence, values fetched ahead by one `BatchValues` and handed out
//! one by one by `next_value()`.
//!
//! Each sequence has one async lock over its buffered values, held across a refill: a caller
//! that finds the buffer empty refills it while the others wait on the lock, then take what it
//! left (no two callers refill one sequence at once, and no value goes to two callers). Until
//! an answer has said whether the sequence is ordered, a refill is one `NextValue`; an
//! unordered sequence is refilled by `BatchValues(n)`; an ordered one is never buffered (its
//! values increase fleet-wide in the order calls are answered, which buffering would break),
//! so its callers skip the lock and make one `NextValue` each. A refill that fails returns the
//! error the direct call would; the next caller tries again. A batch answered `OUT_OF_RANGE`
//! (fewer values left than asked for) is followed by one `NextValue`, so the last values of a
//! sequence are still handed out. `NOT_FOUND` forgets whether the sequence is ordered: it may
//! be created again otherwise. A caller whose future is dropped while it refills drops that
//! refill's values with it: a gap, never a value handed out twice.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tonic::Code;

use crate::error::ClientError;

/// The most values one refill asks for: the server's default `--max-batch`.
pub const MAX_SEQUENCE_PREFETCH: u32 = 65_536;

/// What the answers said of a sequence, kept in an [`AtomicU8`].
const UNKNOWN: u8 = 0;
const UNORDERED: u8 = 1;
const ORDERED: u8 = 2;

/// The buffers of one client, one per sequence used.
pub(crate) struct Prefetch {
    /// Values one refill asks for (at least 1).
    per_refill: u32,
    sequences: Mutex<HashMap<String, Arc<Sequence>>>,
}

#[derive(Default)]
struct Sequence {
    /// [`UNKNOWN`], [`UNORDERED`] or [`ORDERED`]: read before taking the lock, so that callers
    /// of an ordered sequence never wait on each other.
    kind: AtomicU8,
    /// The values fetched and not yet handed out, in the order they came (increasing within a
    /// refill). A tokio lock: it is held across the refill call.
    values: tokio::sync::Mutex<VecDeque<i64>>,
}

impl Sequence {
    fn learn(&self, ordered: bool) {
        self.kind.store(if ordered { ORDERED } else { UNORDERED }, Ordering::Relaxed);
    }

    fn forget_on_not_found(&self, error: &ClientError) {
        if matches!(error, ClientError::Rejected(status) if status.code() == Code::NotFound) {
            self.kind.store(UNKNOWN, Ordering::Relaxed);
        }
    }
}

impl Prefetch {
    /// Checks `per_refill` (1 to [`MAX_SEQUENCE_PREFETCH`]; 0 means no buffer, so no `Prefetch`).
    pub(crate) fn new(per_refill: u32) -> Result<Option<Prefetch>, ClientError> {
        match per_refill {
            0 => Ok(None),
            1..=MAX_SEQUENCE_PREFETCH => Ok(Some(Prefetch { per_refill, sequences: Mutex::default() })),
            _ => Err(ClientError::InvalidSetting(format!(
                "sequence_prefetch {per_refill} is above {MAX_SEQUENCE_PREFETCH}, the server's default --max-batch"
            ))),
        }
    }

    fn sequence(&self, name: &str) -> Arc<Sequence> {
        let mut sequences = self.sequences.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        sequences.entry(name.to_string()).or_default().clone()
    }

    /// The next value of `name`: buffered, or from a refill. `fetch(None)` is one `NextValue`,
    /// `fetch(Some(n))` a `BatchValues(n)`, each answering the values (as many as asked,
    /// increasing) and whether the sequence is ordered. `deadline` also bounds the wait for
    /// another caller's refill.
    pub(crate) async fn next_value<F, Fut>(
        &self,
        name: &str,
        deadline: Option<Instant>,
        fetch: F,
    ) -> Result<i64, ClientError>
    where
        F: Fn(Option<u32>) -> Fut,
        Fut: Future<Output = Result<(Vec<i64>, bool), ClientError>>,
    {
        let sequence = self.sequence(name);
        if sequence.kind.load(Ordering::Relaxed) == ORDERED {
            return one(&sequence, fetch(None).await);
        }
        let mut values = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, sequence.values.lock())
                .await
                .map_err(|_| ClientError::DeadlineExceeded)?,
            None => sequence.values.lock().await,
        };
        if let Some(value) = values.pop_front() {
            return Ok(value);
        }
        match sequence.kind.load(Ordering::Relaxed) {
            UNORDERED => {}
            ORDERED => {
                drop(values);
                return one(&sequence, fetch(None).await);
            }
            _ => return one(&sequence, fetch(None).await),
        }
        let answer = match fetch(Some(self.per_refill)).await {
            Err(ClientError::Rejected(status)) if status.code() == Code::OutOfRange => {
                return one(&sequence, fetch(None).await);
            }
            answer => answer,
        };
        let (fetched, ordered) = answer.inspect_err(|error| sequence.forget_on_not_found(error))?;
        sequence.learn(ordered);
        let mut fetched = fetched.into_iter();
        let first = fetched.next().ok_or_else(no_value)?;
        // Values of a batch answered ordered (the sequence was made ordered since) are still
        // this caller's alone: they are handed out here, never twice.
        values.extend(fetched);
        Ok(first)
    }
}

/// The one value of a `NextValue` answer, learning from it.
fn one(sequence: &Sequence, answer: Result<(Vec<i64>, bool), ClientError>) -> Result<i64, ClientError> {
    let (values, ordered) = answer.inspect_err(|error| sequence.forget_on_not_found(error))?;
    sequence.learn(ordered);
    values.first().copied().ok_or_else(no_value)
}

fn no_value() -> ClientError {
    ClientError::Rejected(tonic::Status::internal("the server sent no value"))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicI64;

    use super::*;

    /// A stand-in for the calls: values from `next`, counting the calls of each kind.
    #[derive(Default)]
    struct Fake {
        next: AtomicI64,
        ordered: std::sync::atomic::AtomicBool,
        singles: AtomicI64,
        batches: AtomicI64,
        fail: Mutex<Option<Code>>,
    }

    impl Fake {
        async fn fetch(&self, count: Option<u32>) -> Result<(Vec<i64>, bool), ClientError> {
            tokio::task::yield_now().await;
            if let Some(code) = *self.fail.lock().unwrap() {
                return Err(ClientError::Rejected(tonic::Status::new(code, "fake")));
            }
            let n = match count {
                Some(n) => {
                    self.batches.fetch_add(1, Ordering::SeqCst);
                    n
                }
                None => {
                    self.singles.fetch_add(1, Ordering::SeqCst);
                    1
                }
            };
            let start = self.next.fetch_add(i64::from(n), Ordering::SeqCst) + 1;
            Ok(((start..start + i64::from(n)).collect(), self.ordered.load(Ordering::SeqCst)))
        }
    }

    #[test]
    fn the_setting_is_checked() {
        assert!(Prefetch::new(0).unwrap().is_none());
        assert!(Prefetch::new(MAX_SEQUENCE_PREFETCH).unwrap().is_some());
        let error = Prefetch::new(MAX_SEQUENCE_PREFETCH + 1).err().unwrap();
        assert!(error.to_string().contains("65536"), "{error}");
    }

    #[tokio::test]
    async fn one_next_value_learns_then_batches_refill() {
        let prefetch = Prefetch::new(10).unwrap().unwrap();
        let fake = Fake::default();
        let mut got = Vec::new();
        for _ in 0..31 {
            got.push(prefetch.next_value("s", None, |c| fake.fetch(c)).await.unwrap());
        }
        assert_eq!(got, (1..=31).collect::<Vec<_>>());
        assert_eq!((fake.singles.load(Ordering::SeqCst), fake.batches.load(Ordering::SeqCst)), (1, 3));
    }

    #[tokio::test]
    async fn an_ordered_sequence_is_never_buffered() {
        let prefetch = Prefetch::new(10).unwrap().unwrap();
        let fake = Fake::default();
        fake.ordered.store(true, Ordering::SeqCst);
        for want in 1..=5 {
            assert_eq!(prefetch.next_value("s", None, |c| fake.fetch(c)).await.unwrap(), want);
        }
        assert_eq!((fake.singles.load(Ordering::SeqCst), fake.batches.load(Ordering::SeqCst)), (5, 0));
    }

    #[tokio::test]
    async fn a_failed_refill_returns_its_error_and_not_found_forgets_the_kind() {
        let prefetch = Prefetch::new(10).unwrap().unwrap();
        let fake = Fake::default();
        assert_eq!(prefetch.next_value("s", None, |c| fake.fetch(c)).await.unwrap(), 1);
        *fake.fail.lock().unwrap() = Some(Code::Unavailable);
        let error = prefetch.next_value("s", None, |c| fake.fetch(c)).await.unwrap_err();
        assert_eq!(error.code(), Code::Unavailable);
        *fake.fail.lock().unwrap() = Some(Code::NotFound);
        prefetch.next_value("s", None, |c| fake.fetch(c)).await.unwrap_err();
        assert_eq!(prefetch.sequence("s").kind.load(Ordering::Relaxed), UNKNOWN);
        *fake.fail.lock().unwrap() = None;
        assert_eq!(prefetch.next_value("s", None, |c| fake.fetch(c)).await.unwrap(), 2);
        assert_eq!(prefetch.next_value("s", None, |c| fake.fetch(c)).await.unwrap(), 3);
        assert_eq!(prefetch.next_value("s", None, |c| fake.fetch(c)).await.unwrap(), 4);
    }

    #[tokio::test]
    async fn concurrent_callers_share_refills_and_get_distinct_values() {
        let prefetch = Arc::new(Prefetch::new(8).unwrap().unwrap());
        let fake = Arc::new(Fake::default());
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let (prefetch, fake) = (prefetch.clone(), fake.clone());
            tasks.push(tokio::spawn(async move { prefetch.next_value("s", None, |c| fake.fetch(c)).await }));
        }
        let mut got = Vec::new();
        for task in tasks {
            got.push(task.await.unwrap().unwrap());
        }
        got.sort_unstable();
        assert_eq!(got, (1..=64).collect::<Vec<_>>());
        assert_eq!((fake.singles.load(Ordering::SeqCst), fake.batches.load(Ordering::SeqCst)), (1, 8));
    }
}
