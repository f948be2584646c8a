//! Writes the slot history from the keeper's events, in a task of its own.
//!
//! The keeper's driver hands each event to a [`Tap`] without waiting (a full queue drops it,
//! counted); the recorder turns claims into appended records, closes them on loss and
//! release, closes a killed predecessor's record with the reservation the claim inherited,
//! and prunes a bounded number of expired records per claim. A failed write is logged and
//! counted: history is for audits and provenance, and never holds minting up.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Book, ClosedBy, Holder, PRUNE_LIMIT, Record};
use crate::clock::Clock;
use crate::keeper::Event;
use crate::keeper::Observe;
use crate::layout::Slot;
use crate::metrics::{Metrics, RESULT_DROPPED, RESULT_FAILED, RESULT_OK};

/// Events waiting for the recorder beyond those of the slots held; past the queue's room,
/// events are dropped (and counted).
const QUEUE: usize = 1024;

/// What the recorder needs beyond its book.
#[derive(Debug, Clone)]
pub struct RecorderConfig {
    pub holder: Holder,
    /// Closed records older than this are pruned.
    pub retention: Duration,
    /// Whether the keeper's session is an etcd lease worth recording (standalone: no).
    pub leased: bool,
    /// The slots the layout has, for spreading the pruning over them.
    pub slots: u64,
    /// The slots this instance holds at once (`--slots`, or the `--worker-id` list).
    pub held: usize,
}

/// Where the keeper's driver drops its events.
#[derive(Clone)]
pub struct Tap {
    events: mpsc::Sender<(i64, Event)>,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
}

impl Observe for Tap {
    /// Hands `event` over if the history needs it, stamped with the wall clock now; never
    /// waits. The driver calls it before it publishes the holding an event comes with, so a
    /// claim's stamp is no later than the first ID minted under it.
    fn observe(&self, event: &Event) {
        let wanted = matches!(
            event,
            Event::SessionOpened { .. }
                | Event::SlotTaken { .. }
                | Event::SlotLost { .. }
                | Event::ReservationsWritten { .. }
                | Event::FinalSaved { .. }
                | Event::Closed
        );
        if wanted && self.events.try_send((self.clock.wall_ms(), event.clone())).is_err() {
            self.metrics.history_writes.with_label_values(&[RESULT_DROPPED]).inc();
            tracing::warn!("slot history falls behind; an event was dropped and the history has a gap");
        }
    }
}

/// The running recorder.
pub struct RecorderHandle {
    task: JoinHandle<()>,
}

impl RecorderHandle {
    /// Waits, at most `limit`, for the records still queued once the keeper has ended (its
    /// tap dropped).
    pub async fn finish(self, limit: Duration) {
        let abort = self.task.abort_handle();
        if tokio::time::timeout(limit, self.task).await.is_err() {
            abort.abort();
            tracing::warn!(?limit, "slot history not fully written before the stop; the next holder closes it");
        }
    }
}

/// Starts the recorder writing to `book`.
pub fn spawn(
    book: Arc<dyn Book>,
    config: RecorderConfig,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
) -> (Tap, RecorderHandle) {
    // A start or a stop hands over an event per slot held (its claim, its close) and a
    // write per few slots before the recorder has written one: the queue has room for two
    // per slot beyond the usual, so that `--slots 1024` leaves no gap.
    let (events, mut queue) = mpsc::channel(QUEUE + 2 * config.held);
    let tap = Tap { events, clock, metrics: metrics.clone() };
    let mut recorder = Recorder {
        book,
        config,
        metrics,
        lease: 0,
        open: BTreeMap::new(),
        lost: BTreeMap::new(),
        finals: BTreeMap::new(),
    };
    let task = tokio::spawn(async move {
        while let Some((at_ms, event)) = queue.recv().await {
            recorder.handle(at_ms, event).await;
        }
    });
    (tap, RecorderHandle { task })
}

/// An open record of this process, with its latest confirmed reservation.
struct Open {
    record: Record,
    confirmed_ms: i64,
}

struct Recorder {
    book: Arc<dyn Book>,
    config: RecorderConfig,
    metrics: Metrics,
    lease: i64,
    open: BTreeMap<Slot, Open>,
    /// Records of slots this process lost, not closed yet: where their window ends is known
    /// once the slot is taken again by this process (a resumed claim goes on from where
    /// this one stopped minting), or at the stop; if the process dies first, the next
    /// holder closes them.
    lost: BTreeMap<Slot, Open>,
    /// The final reservations saved on the way out.
    finals: BTreeMap<Slot, i64>,
}

impl Recorder {
    /// Records `event`, which happened at `at_ms` by this holder's wall clock.
    async fn handle(&mut self, at_ms: i64, event: Event) {
        match event {
            Event::SessionOpened { session, .. } => self.lease = if self.config.leased { session } else { 0 },
            Event::ReservationsWritten { slots } => {
                for (slot, until) in slots {
                    if let Some(open) = self.open.get_mut(&slot) {
                        open.confirmed_ms = open.confirmed_ms.max(until);
                    }
                }
            }
            Event::SlotTaken { slot, claim, floor_ms, reserved_ms, resumed, at_ms: granted_ms, minted_ms } => {
                // Invariant 2 as the history states it: a claim mints above the floor it
                // inherited; with none, from the grant on (stamped on the minter's clock
                // before the minter could mint under it). A resumed claim goes on from where
                // this process stopped minting on the slot.
                let floor_ms = match (resumed, minted_ms) {
                    (true, Some(minted)) => floor_ms.map_or(minted, |f| f.max(minted)),
                    _ => floor_ms.unwrap_or(granted_ms - 1),
                };
                if let Some(lost) = self.lost.remove(&slot) {
                    // This process's earlier claim of the slot ended where this one begins,
                    // or, taken over from another holder, at its last confirmed reservation.
                    let last = if resumed { floor_ms } else { lost.confirmed_ms };
                    self.close(at_ms, &lost.record, last, ClosedBy::Lost).await;
                }
                self.taken(at_ms.max(granted_ms), slot, claim, floor_ms, reserved_ms).await
            }
            Event::SlotLost { slot, .. } => {
                if let Some(open) = self.open.remove(&slot) {
                    self.lost.insert(slot, open);
                }
            }
            Event::FinalSaved { slots } => self.finals.extend(slots),
            Event::Closed => {
                for (_, lost) in std::mem::take(&mut self.lost) {
                    self.close(at_ms, &lost.record, lost.confirmed_ms, ClosedBy::Lost).await;
                }
                for (slot, open) in std::mem::take(&mut self.open) {
                    let last = self.finals.get(&slot).copied().unwrap_or(open.confirmed_ms);
                    self.close(at_ms, &open.record, last, ClosedBy::Release).await;
                }
            }
            _ => {}
        }
    }

    async fn taken(&mut self, now: i64, slot: Slot, claim: u64, floor_ms: i64, reserved_ms: i64) {
        let record = Record {
            slot,
            holder: self.config.holder.clone(),
            lease: self.lease,
            claim,
            claimed_at_ms: now,
            floor_ms,
            last_reservation_ms: None,
            closed_at_ms: None,
            closed_by: None,
        };
        match self.book.append(&record).await {
            Ok(location) => {
                self.counted(true);
                tracing::debug!(worker_id = slot, %location, "slot history record written");
            }
            Err(error) => self.failed("record the claim", &error.to_string()),
        }
        // Any other record of the slot still open: its holder was killed, or its close
        // failed. It minted nothing above the reservation this claim inherited (every
        // reservation it wrote was stored before this claim), so that is where its window
        // ends. (Not judged by claim times: they come from each holder's own clock.)
        match self.book.list(Some(slot)).await {
            Ok((entries, _)) => {
                for entry in entries {
                    if entry.record.is_open() && entry.record.name() != record.name() {
                        self.close(now, &entry.record, floor_ms, ClosedBy::Successor).await;
                    }
                }
            }
            Err(error) => self.failed("read the slot's history", &error.to_string()),
        }
        self.open.insert(slot, Open { record, confirmed_ms: reserved_ms });
        // Bounded pruning: this slot's oldest records, and those of one other slot.
        let before = now - self.config.retention.as_millis() as i64;
        let other = (now as u64 ^ claim.rotate_left(17)) % self.config.slots.max(1);
        for prune in [slot, other as Slot] {
            match self.book.prune(prune, before, PRUNE_LIMIT).await {
                Ok(n) => self.metrics.history_pruned.inc_by(n as u64),
                Err(error) => self.failed("prune", &error.to_string()),
            }
            if other as Slot == slot {
                break;
            }
        }
    }

    async fn close(&mut self, now: i64, record: &Record, last_ms: i64, by: ClosedBy) {
        let closed = record.closed(last_ms, now, by);
        match self.book.close(record, &closed).await {
            Ok(_) => self.counted(true),
            Err(error) => self.failed("close a record", &error.to_string()),
        }
    }

    fn counted(&self, ok: bool) {
        self.metrics.history_writes.with_label_values(&[if ok { RESULT_OK } else { RESULT_FAILED }]).inc();
    }

    fn failed(&self, what: &str, error: &str) {
        self.counted(false);
        tracing::warn!(
            what,
            error,
            book = %self.book.describe(),
            "slot history not written; minting goes on and the history has a gap"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::history::audit::audit;
    use crate::history::covering;
    use crate::history::file::FileBook;
    use crate::history::segment::{SegmentEntry, SegmentRecord};
    use crate::history::{Entry, HistoryError};

    fn config(pid_host: &str) -> RecorderConfig {
        RecorderConfig {
            holder: Holder::this_process(pid_host.into(), 1),
            retention: Duration::from_secs(3600),
            leased: true,
            slots: 1024,
            held: 1,
        }
    }

    fn taken(slot: Slot, claim: u64, floor: Option<i64>, reserved: i64) -> Event {
        Event::SlotTaken {
            slot,
            claim,
            floor_ms: floor,
            reserved_ms: reserved,
            resumed: false,
            at_ms: 1_000_000,
            minted_ms: None,
        }
    }

    async fn run(book: &Arc<FileBook>, clock: &Arc<ManualClock>, host: &str, events: Vec<Event>) {
        let (tap, handle) = spawn(book.clone(), config(host), clock.clone() as Arc<dyn Clock>, Metrics::new());
        for event in &events {
            tap.observe(event);
        }
        drop(tap);
        handle.finish(Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_release_a_kill_and_a_successor_leave_a_history_that_audits_clean() {
        let dir = tempfile::tempdir().unwrap();
        let book = Arc::new(FileBook::new(dir.path()));
        let clock = Arc::new(ManualClock::new(1_000_000));
        // The first holder claims slot 3, extends, and releases with a shrunk reservation.
        run(
            &book,
            &clock,
            "a",
            vec![
                Event::SessionOpened { session: 0xa, ttl: None },
                Event::ReservationsWritten { slots: vec![(3, 1_003_000)] },
                taken(3, 1, None, 1_003_000),
                Event::ReservationsWritten { slots: vec![(3, 1_006_000)] },
                Event::FinalSaved { slots: vec![(3, 1_004_500)] },
                Event::Closed,
            ],
        )
        .await;
        // The second claims it above that, and is killed: its record stays open.
        clock.set_wall(1_010_000);
        run(
            &book,
            &clock,
            "b",
            vec![
                Event::SessionOpened { session: 0xb, ttl: None },
                taken(3, 1, Some(1_004_500), 1_013_000),
                Event::ReservationsWritten { slots: vec![(3, 1_016_000)] },
            ],
        )
        .await;
        // The third finds it open and closes it with the reservation it inherited.
        clock.set_wall(1_030_000);
        run(
            &book,
            &clock,
            "c",
            vec![Event::SessionOpened { session: 0xc, ttl: None }, taken(3, 1, Some(1_016_000), 1_033_000)],
        )
        .await;
        let (entries, _) = book.list(Some(3)).await.unwrap();
        let ends: Vec<_> =
            entries.iter().map(|e| (e.record.floor_ms, e.record.last_reservation_ms, e.record.closed_by)).collect();
        assert_eq!(
            ends,
            [
                (999_999, Some(1_004_500), Some(ClosedBy::Release)),
                (1_004_500, Some(1_016_000), Some(ClosedBy::Successor)),
                (1_016_000, None, None),
            ]
        );
        assert_eq!(entries[1].record.lease, 0xb);
        let report = audit(&entries);
        assert!(report.passed(), "{:?}", report.violations);
        assert_eq!(report.hand_overs, 2);
    }

    /// A first claim's window starts at its grant (not when
    /// the recorder got to it), and a claim that resumes takes over where this process
    /// stopped minting under the one it continues, so each ID names the claim it was minted
    /// under and the windows still never overlap.
    #[tokio::test]
    async fn a_resumed_claim_is_named_for_the_ids_minted_under_it() {
        let dir = tempfile::tempdir().unwrap();
        let book = Arc::new(FileBook::new(dir.path()));
        let clock = Arc::new(ManualClock::new(1_000_000));
        let granted = |claim, floor_ms, reserved_ms, resumed, at_ms, minted_ms| Event::SlotTaken {
            slot: 3,
            claim,
            floor_ms,
            reserved_ms,
            resumed,
            at_ms,
            minted_ms,
        };
        run(
            &book,
            &clock,
            "a",
            vec![
                Event::SessionOpened { session: 0xa, ttl: Some(Duration::from_secs(10)) },
                // Granted at 999,000, stamped by the recorder's tap a second later.
                granted(1, None, 1_003_000, false, 999_000, None),
                Event::ReservationsWritten { slots: vec![(3, 1_006_000)] },
                Event::SlotLost { slot: 3, reason: crate::keeper::LossReason::SessionGone },
                Event::SessionOpened { session: 0xb, ttl: Some(Duration::from_secs(10)) },
                // Re-claimed, finding its own last write: it goes on from 1,002,000, the last
                // time minted on the slot, well below the reservation it wrote.
                granted(2, None, 1_009_000, true, 1_002_100, Some(1_002_000)),
            ],
        )
        .await;
        let (entries, _) = book.list(Some(3)).await.unwrap();
        let claim_of = |ms| covering(&entries, 3, ms).map(|e| e.record.claim);
        assert_eq!(claim_of(999_500), Some(1), "minted after the grant, before the stamp");
        assert_eq!(claim_of(1_001_000), Some(1));
        assert_eq!(claim_of(1_002_500), Some(2), "minted under the resumed claim");
        assert_eq!(claim_of(1_005_000), Some(2));
        let report = audit(&entries);
        assert!(report.passed(), "{:?}", report.violations);
    }

    #[tokio::test]
    async fn a_history_that_cannot_be_written_is_counted_and_nothing_waits() {
        let dir = tempfile::tempdir().unwrap();
        // The history dir is a file: every write fails.
        std::fs::write(dir.path().join("history"), "").unwrap();
        let book = Arc::new(FileBook::new(dir.path()));
        let clock = Arc::new(ManualClock::new(1_000_000));
        let metrics = Metrics::new();
        let (tap, handle) = spawn(book.clone(), config("a"), clock.clone() as Arc<dyn Clock>, metrics.clone());
        tap.observe(&taken(3, 1, None, 1_003_000));
        tap.observe(&Event::Closed);
        drop(tap);
        handle.finish(Duration::from_secs(5)).await;
        assert!(metrics.history_writes.with_label_values(&[RESULT_FAILED]).get() >= 2);
        assert_eq!(metrics.history_writes.with_label_values(&[RESULT_OK]).get(), 0);
    }

    /// A book that keeps nothing and fails nothing.
    struct Discard;

    #[tonic::async_trait]
    impl Book for Discard {
        async fn append(&self, _: &Record) -> Result<String, HistoryError> {
            Ok("nowhere".into())
        }
        async fn close(&self, _: &Record, _: &Record) -> Result<bool, HistoryError> {
            Ok(true)
        }
        async fn list(&self, _: Option<Slot>) -> Result<(Vec<Entry>, Vec<HistoryError>), HistoryError> {
            Ok((Vec::new(), Vec::new()))
        }
        async fn prune(&self, _: Slot, _: i64, _: usize) -> Result<usize, HistoryError> {
            Ok(0)
        }
        async fn write_segment(&self, _: &SegmentRecord) -> Result<String, HistoryError> {
            Ok("nowhere".into())
        }
        async fn list_segments(&self, _: Option<&str>) -> Result<(Vec<SegmentEntry>, Vec<HistoryError>), HistoryError> {
            Ok((Vec::new(), Vec::new()))
        }
        async fn segments_at(
            &self,
            _: &str,
            _: u64,
            _: usize,
        ) -> Result<(Vec<SegmentEntry>, Vec<HistoryError>), HistoryError> {
            Ok((Vec::new(), Vec::new()))
        }
        async fn prune_segments(&self, _: &str, _: i64, _: usize, _: usize) -> Result<usize, HistoryError> {
            Ok(0)
        }
        fn describe(&self) -> String {
            "nowhere".into()
        }
    }

    /// The start of an instance holding all 1,024 slots hands the
    /// recorder a claim per slot and a reservation write per [`crate::store::MAX_WRITES`]
    /// slots before it has written
    /// any of them: none is dropped.
    #[tokio::test]
    async fn the_start_of_every_slot_held_fits_the_queue() {
        let metrics = Metrics::new();
        let clock = Arc::new(ManualClock::new(1_000_000)) as Arc<dyn Clock>;
        let config = RecorderConfig { held: 1024, ..config("a") };
        let (tap, handle) = spawn(Arc::new(Discard), config, clock, metrics.clone());
        tap.observe(&Event::SessionOpened { session: 0xa, ttl: None });
        for chunk in (0..1024).collect::<Vec<u32>>().chunks(crate::store::MAX_WRITES) {
            tap.observe(&Event::ReservationsWritten { slots: chunk.iter().map(|&slot| (slot, 1_003_000)).collect() });
            for &slot in chunk {
                tap.observe(&taken(slot, 1, None, 1_003_000));
            }
        }
        drop(tap);
        handle.finish(Duration::from_secs(5)).await;
        assert_eq!(metrics.history_writes.with_label_values(&[RESULT_DROPPED]).get(), 0, "events dropped");
        assert_eq!(metrics.history_writes.with_label_values(&[RESULT_OK]).get(), 1024);
    }

    #[tokio::test]
    async fn old_closed_records_are_pruned_at_a_claim() {
        let dir = tempfile::tempdir().unwrap();
        let book = Arc::new(FileBook::new(dir.path()));
        let clock = Arc::new(ManualClock::new(1_000_000));
        run(&book, &clock, "a", vec![taken(3, 1, None, 1_003_000), Event::Closed]).await;
        // Within the retention: kept.
        clock.set_wall(1_000_000 + 3_000_000);
        run(&book, &clock, "b", vec![taken(3, 1, Some(1_003_000), 4_003_000), Event::Closed]).await;
        assert_eq!(book.list(Some(3)).await.unwrap().0.len(), 2);
        // Past it (an hour here): the first goes at the next claim; the others stay.
        clock.set_wall(1_000_000 + 3_700_000);
        run(&book, &clock, "c", vec![taken(3, 1, Some(4_003_000), 4_703_000)]).await;
        let pids: Vec<i64> = book.list(Some(3)).await.unwrap().0.iter().map(|e| e.record.floor_ms).collect();
        assert_eq!(pids, [1_003_000, 4_003_000]);
    }
}
