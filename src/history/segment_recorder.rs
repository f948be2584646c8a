//! Writes the sequences' segment history from their machines' events, in a task of its own.
//!
//! The sequences' task hands each event to a [`SegmentTap`] without waiting (a full queue
//! drops it, counted); the recorder writes a record for each segment confirmed this
//! instance's (a claim lost is no segment held, and is not recorded), rewrites the records
//! whose unused top a clean stop gave back, and prunes a bounded number of expired records of
//! a sequence now and then. A failed write is logged and counted: history is for audits and
//! provenance, and never holds a value up.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::segment::SegmentRecord;
use super::{Book, Holder};
use crate::clock::Clock;
use crate::metrics::{Metrics, RESULT_DROPPED, RESULT_FAILED, RESULT_OK};
use crate::sequence::Event;

/// Events waiting for the recorder; past the queue's room, events are dropped (and counted).
const QUEUE: usize = 1024;

/// A sequence's records are pruned at its first claim here and every this many after: often
/// enough, with [`PRUNE_LIMIT`], to outpace this instance's own records.
const PRUNE_EVERY: u64 = 32;

/// How many records one pruning deletes at most.
const PRUNE_LIMIT: usize = 2 * PRUNE_EVERY as usize;

/// The records of each sequence kept in memory, the latest, for a give-back to shorten: a
/// give-back returns only segments not handed out yet, of which an instance holds one or two.
const RECENT: usize = 8;

/// What the recorder needs beyond its book.
#[derive(Debug, Clone)]
pub struct SegmentRecorderConfig {
    pub holder: Holder,
    /// Records claimed longer ago than this are pruned.
    pub retention: Duration,
    /// The most records of one sequence kept, the oldest pruned first past it: the history's
    /// room in etcd stays bounded however many instances claim however often.
    pub keep: usize,
}

/// Where the sequences' task drops its events.
#[derive(Clone)]
pub struct SegmentTap {
    events: mpsc::Sender<(i64, String, Event)>,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
}

impl std::fmt::Debug for SegmentTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SegmentTap")
    }
}

impl SegmentTap {
    /// Hands `event` of sequence `sequence` over if the history needs it, stamped with the
    /// wall clock now; never waits.
    pub fn observe(&self, sequence: &str, event: &Event) {
        let wanted = matches!(event, Event::Claimed { .. } | Event::GaveBack { .. });
        if wanted && self.events.try_send((self.clock.wall_ms(), sequence.to_string(), event.clone())).is_err() {
            self.metrics.history_writes.with_label_values(&[RESULT_DROPPED]).inc();
            tracing::warn!(sequence, "segment history falls behind; an event was dropped and the history has a gap");
        }
    }
}

/// The running recorder.
pub struct SegmentRecorderHandle {
    task: JoinHandle<()>,
}

impl SegmentRecorderHandle {
    /// Waits, at most `limit`, for the records still queued once the sequences have stopped
    /// (every tap dropped).
    pub async fn finish(self, limit: Duration) {
        let abort = self.task.abort_handle();
        if tokio::time::timeout(limit, self.task).await.is_err() {
            abort.abort();
            tracing::warn!(
                ?limit,
                "segment history not fully written before the stop; its give-backs are not on record"
            );
        }
    }
}

/// Starts the recorder writing to `book`.
pub fn spawn(
    book: Arc<dyn Book>,
    config: SegmentRecorderConfig,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
) -> (SegmentTap, SegmentRecorderHandle) {
    let (events, mut queue) = mpsc::channel(QUEUE);
    let tap = SegmentTap { events, clock, metrics: metrics.clone() };
    let mut recorder = Recorder { book, config, metrics, recent: BTreeMap::new(), claims: BTreeMap::new() };
    let task = tokio::spawn(async move {
        while let Some((at_ms, sequence, event)) = queue.recv().await {
            recorder.handle(at_ms, sequence, event).await;
        }
    });
    (tap, SegmentRecorderHandle { task })
}

struct Recorder {
    book: Arc<dyn Book>,
    config: SegmentRecorderConfig,
    metrics: Metrics,
    /// This process's latest records per sequence.
    recent: BTreeMap<String, VecDeque<SegmentRecord>>,
    /// This process's claims recorded per sequence, for the pruning's pace.
    claims: BTreeMap<String, u64>,
}

impl Recorder {
    /// Records `event` of `sequence`, which happened at `at_ms` by this holder's wall clock.
    async fn handle(&mut self, at_ms: i64, sequence: String, event: Event) {
        match event {
            Event::Claimed { claim, values } => {
                let recent = self.recent.entry(sequence.clone()).or_default();
                // Following on from this process's latest record: that record grows.
                let record =
                    match recent.back_mut().and_then(|last| Some((last.extended(claim, &values, at_ms)?, last))) {
                        Some((extended, last)) => {
                            *last = extended.clone();
                            extended
                        }
                        None => {
                            let record = SegmentRecord {
                                sequence: sequence.clone(),
                                values,
                                claim,
                                holder: self.config.holder.clone(),
                                claimed_at_ms: at_ms,
                                given_back_from: None,
                                given_back_at_ms: None,
                                claims: 1,
                                last_claimed_at_ms: None,
                            };
                            if recent.len() == RECENT {
                                recent.pop_front();
                            }
                            recent.push_back(record.clone());
                            record
                        }
                    };
                self.write(&record, "record a segment").await;
                let claims = self.claims.entry(sequence.clone()).or_default();
                *claims += 1;
                if *claims % PRUNE_EVERY == 1 {
                    let before = at_ms - self.config.retention.as_millis() as i64;
                    match self.book.prune_segments(&sequence, before, self.config.keep, PRUNE_LIMIT).await {
                        Ok(n) => self.metrics.history_pruned.inc_by(n as u64),
                        Err(error) => self.failed("prune segments", &error.to_string()),
                    }
                }
            }
            Event::GaveBack { values } => {
                // The values went back from the top down, across this process's last
                // segments: each one they reach now ends where they begin.
                let mut shortened = Vec::new();
                for record in self.recent.get_mut(&sequence).into_iter().flatten() {
                    let held = record.held();
                    if values.start < held.end && held.start < values.end {
                        *record = record.given_back(values.start, at_ms);
                        shortened.push(record.clone());
                    }
                }
                for record in &shortened {
                    self.write(record, "record a give-back").await;
                }
            }
            Event::ClaimLost { .. } | Event::Stopped(_) | Event::Fenced { .. } => {}
        }
    }

    async fn write(&self, record: &SegmentRecord, what: &str) {
        match self.book.write_segment(record).await {
            Ok(location) => {
                self.metrics.history_writes.with_label_values(&[RESULT_OK]).inc();
                tracing::debug!(sequence = %record.sequence, %location, "segment history record written");
            }
            Err(error) => self.failed(what, &error.to_string()),
        }
    }

    fn failed(&self, what: &str, error: &str) {
        self.metrics.history_writes.with_label_values(&[RESULT_FAILED]).inc();
        tracing::warn!(
            what,
            error,
            book = %self.book.describe(),
            "segment history not written; values are handed out as before and the history has a gap"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::history::file::FileBook;
    use crate::history::segment::covering_segment;
    use crate::history::segment_audit::audit_segments;
    use crate::sequence::ClaimId;

    fn config(host: &str, retention: Duration) -> SegmentRecorderConfig {
        SegmentRecorderConfig { holder: Holder::this_process(host.into(), 1), retention, keep: usize::MAX }
    }

    fn claimed(session: i64, number: u64, values: std::ops::Range<u64>) -> Event {
        Event::Claimed { claim: ClaimId { session, number }, values }
    }

    async fn run(book: &Arc<FileBook>, clock: &Arc<ManualClock>, host: &str, events: Vec<(&str, Event)>) {
        let (tap, handle) = spawn(
            book.clone(),
            config(host, Duration::from_secs(3600)),
            clock.clone() as Arc<dyn Clock>,
            Metrics::new(),
        );
        for (sequence, event) in &events {
            tap.observe(sequence, event);
        }
        drop(tap);
        handle.finish(Duration::from_secs(5)).await;
    }

    /// Two instances take turns on one sequence; the first stops cleanly and gives back the
    /// unused top of its last two segments, which the second then claims: what each held is on
    /// record, the give-back ends the first's where the second's begins, a lost claim is not
    /// recorded, and the whole audits clean.
    #[tokio::test]
    async fn claims_and_a_give_back_leave_records_that_audit_clean() {
        let dir = tempfile::tempdir().unwrap();
        let book = Arc::new(FileBook::new(dir.path()));
        let clock = Arc::new(ManualClock::new(1_000_000));
        run(
            &book,
            &clock,
            "a",
            vec![
                ("orders", claimed(0xa, 0, 1..101)),
                ("orders", claimed(0xa, 1, 201..301)),
                ("orders", claimed(0xa, 2, 301..401)),
                ("orders", Event::ClaimLost { claim: ClaimId { session: 0xa, number: 3 }, values: 401..501 }),
                ("tickets", claimed(0xa, 0, 1..11)),
                ("orders", Event::GaveBack { values: 250..401 }),
            ],
        )
        .await;
        clock.set_wall(1_005_000);
        run(&book, &clock, "b", vec![("orders", claimed(0xb, 0, 101..201)), ("orders", claimed(0xb, 1, 250..350))])
            .await;
        let (entries, unreadable) = book.list_segments(Some("orders")).await.unwrap();
        assert!(unreadable.is_empty());
        let held: Vec<_> = entries.iter().map(|e| (e.record.claim.session, e.record.held())).collect();
        // A's claims 1 and 2 followed on: one record, given back from 250.
        assert_eq!(held, [(0xa, 1..101), (0xb, 101..201), (0xa, 201..250), (0xb, 250..350)]);
        assert_eq!(entries[2].record.values, 201..401, "the claims as taken stay on record");
        assert_eq!((entries[2].record.claim.number, entries[2].record.claims), (1, 2));
        assert_eq!(entries[2].record.given_back_at_ms, Some(1_000_000));
        assert_eq!(covering_segment(&entries, "orders", 260).unwrap().record.claim.session, 0xb);
        assert!(covering_segment(&entries, "orders", 450).is_none(), "a lost claim held nothing");
        let (all, _) = book.list_segments(None).await.unwrap();
        let report = audit_segments(&all);
        assert!(report.passed(), "{:?}", report.overlaps);
        assert_eq!((report.sequences, report.segments, report.given_back), (2, 6, 1));
    }

    #[tokio::test]
    async fn a_book_that_fails_is_counted_and_values_go_on() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the history dir should be: every write fails.
        std::fs::write(dir.path().join("history"), "").unwrap();
        let book = Arc::new(FileBook::new(dir.path()));
        let metrics = Metrics::new();
        let clock = Arc::new(ManualClock::new(1_000_000)) as Arc<dyn Clock>;
        let (tap, handle) = spawn(book, config("a", Duration::from_secs(3600)), clock, metrics.clone());
        tap.observe("orders", &claimed(1, 0, 1..101));
        tap.observe("orders", &Event::GaveBack { values: 50..101 });
        drop(tap);
        handle.finish(Duration::from_secs(5)).await;
        assert!(metrics.history_writes.with_label_values(&[RESULT_FAILED]).get() >= 2);
        assert_eq!(metrics.history_writes.with_label_values(&[RESULT_OK]).get(), 0);
    }

    #[tokio::test]
    async fn old_records_are_pruned_as_claims_go_on_but_the_highest() {
        let dir = tempfile::tempdir().unwrap();
        let book = Arc::new(FileBook::new(dir.path()));
        let clock = Arc::new(ManualClock::new(1_000_000));
        let metrics = Metrics::new();
        let (tap, handle) =
            spawn(book.clone(), config("a", Duration::from_secs(60)), clock.clone() as Arc<dyn Clock>, metrics.clone());
        // Apart (another instance claimed between): a record each.
        for n in 0..PRUNE_EVERY {
            tap.observe("orders", &claimed(1, n, n * 10 + 1..n * 10 + 6));
        }
        // Past the retention, the next pruning (at claim PRUNE_EVERY + 1) takes the old ones.
        clock.set_wall(1_000_000 + 61_000);
        tap.observe("orders", &claimed(1, PRUNE_EVERY, 10_001..10_011));
        drop(tap);
        handle.finish(Duration::from_secs(5)).await;
        let left: Vec<u64> =
            book.list_segments(Some("orders")).await.unwrap().0.iter().map(|e| e.record.values.start).collect();
        assert_eq!(left, [10_001]);
        assert_eq!(metrics.history_pruned.get(), PRUNE_EVERY);
    }

    /// Past the most records kept, the oldest go at each pruning, however young: the
    /// history's room stays bounded (a fleet of many instances claiming every few seconds
    /// would otherwise fill etcd within the retention), and the newest stay.
    #[tokio::test]
    async fn past_the_records_kept_the_oldest_are_pruned_however_young() {
        let dir = tempfile::tempdir().unwrap();
        let book = Arc::new(FileBook::new(dir.path()));
        let clock = Arc::new(ManualClock::new(1_000_000));
        let metrics = Metrics::new();
        let keep = 40;
        let config = SegmentRecorderConfig { keep, ..config("a", Duration::from_secs(3600)) };
        let (tap, handle) = spawn(book.clone(), config, clock.clone() as Arc<dyn Clock>, metrics.clone());
        let claims = 10 * PRUNE_EVERY;
        // Apart (another instance claimed between): a record each.
        for n in 0..claims {
            tap.observe("orders", &claimed(1, n, n * 10 + 1..n * 10 + 6));
        }
        drop(tap);
        handle.finish(Duration::from_secs(5)).await;
        let left: Vec<u64> =
            book.list_segments(Some("orders")).await.unwrap().0.iter().map(|e| e.record.values.start).collect();
        // Pruned at claims 1, 33, 65, ...: at most a pruning's interval of claims above the
        // number kept, and the newest all there.
        assert!(left.len() <= keep + PRUNE_EVERY as usize, "{} records left", left.len());
        assert!(left.len() >= keep, "{} records left", left.len());
        assert_eq!(*left.last().unwrap(), (claims - 1) * 10 + 1);
        assert!(left.windows(2).all(|w| w[1] == w[0] + 10), "the newest, without a gap: {left:?}");
        assert_eq!(metrics.history_pruned.get(), claims - left.len() as u64);
    }

    /// A sequence one instance serves alone (an ordered one always) claims segment after
    /// segment with nothing between: a record an hour, not one a segment; each covers its
    /// claims' values whole, and the records audit clean.
    #[tokio::test]
    async fn claims_that_follow_on_make_a_record_an_hour() {
        let dir = tempfile::tempdir().unwrap();
        let book = Arc::new(FileBook::new(dir.path()));
        let clock = Arc::new(ManualClock::new(1_000_000));
        let (tap, handle) = spawn(
            book.clone(),
            config("a", Duration::from_secs(30 * 86_400)),
            clock.clone() as Arc<dyn Clock>,
            Metrics::new(),
        );
        // 240 claims of 1,000 values, 30 s apart: two hours.
        for n in 0..240u64 {
            clock.set_wall(1_000_000 + n as i64 * 30_000);
            tap.observe("orders", &claimed(1, n, n * 1_000 + 1..(n + 1) * 1_000 + 1));
        }
        drop(tap);
        handle.finish(Duration::from_secs(5)).await;
        let (entries, _) = book.list_segments(Some("orders")).await.unwrap();
        let runs: Vec<(std::ops::Range<u64>, u64)> =
            entries.iter().map(|e| (e.record.values.clone(), e.record.claims)).collect();
        assert_eq!(runs, [(1..120_001, 120), (120_001..240_001, 120)]);
        assert_eq!(entries[1].record.last_claimed_ms(), 1_000_000 + 239 * 30_000);
        let report = audit_segments(&entries);
        assert!(report.passed());
        assert_eq!((report.segments, report.values), (240, 240_000));
    }
}
