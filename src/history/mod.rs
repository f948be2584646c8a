//! Slot history: a record of every claim of a worker slot (who held it, under which lease,
//! and the time range it minted in), for provenance and audits.
//!
//! The worker ID in an ID is reused by every instance that ever held the slot; the history
//! tells them apart. Each claim appends a [`Record`]; the holder closes it on release (or
//! loss) with its last reservation, and a successor that finds it still open closes it with
//! the reservation it inherited. By the hand-over rule (a new holder mints only above its
//! predecessor's last reservation, invariant 2 of [`crate::keeper`]) the minting windows of
//! one slot never overlap, so at most one record covers any ID: [`covering`] finds it, and
//! [`audit`] checks the rule from the record alone.
//!
//! Named sequences keep theirs beside it: a [`segment::SegmentRecord`] per segment an
//! instance held, written by [`segment_recorder`] and checked by [`segment_audit`].
//!
//! History never weighs on minting: [`recorder`] writes it from its own task, and a record
//! that cannot be written is logged and counted, nothing more. Where it lives is a [`Book`]:
//! [`etcd`] (`<prefix>/history/<slot>/<name>`, `<prefix>/history/sequences/<name>/<record>`)
//! or [`file`] (`<state dir>/history/<slot>/`, `<state dir>/history/sequences/<name>/`).

pub mod audit;
pub mod etcd;
pub mod file;
pub mod recorder;
pub mod segment;
pub mod segment_audit;
pub mod segment_recorder;

use crate::layout::Slot;
use segment::{SegmentEntry, SegmentRecord};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long closed records are kept, by default.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// How many records one claim prunes at most, per slot looked at.
pub const PRUNE_LIMIT: usize = 16;

/// The process that held a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub hostname: String,
    /// The Kubernetes pod, when the process ran in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    pub pid: u32,
    pub version: String,
    /// When the process started, Unix ms.
    pub started_at_ms: i64,
}

impl Holder {
    /// This process, on `hostname`, started at `started_at_ms`. The pod name comes from
    /// `POD_NAME` (the downward API), or is the hostname inside Kubernetes.
    pub fn this_process(hostname: String, started_at_ms: i64) -> Holder {
        let pod = std::env::var("POD_NAME")
            .ok()
            .filter(|p| !p.is_empty())
            .or_else(|| std::env::var_os("KUBERNETES_SERVICE_HOST").map(|_| hostname.clone()));
        Holder { hostname, pod, pid: std::process::id(), version: env!("CARGO_PKG_VERSION").to_string(), started_at_ms }
    }
}

/// How a record was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClosedBy {
    /// The holder gave the slot back on shutdown.
    Release,
    /// The holder lost the slot (its lease expired, its key was deleted).
    Lost,
    /// The next holder found the record open (the holder was killed) and closed it with the
    /// reservation it inherited.
    Successor,
}

/// One claim of one slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Stored under its first name, `worker_id`, which every record already written has.
    #[serde(rename = "worker_id")]
    pub slot: Slot,
    pub holder: Holder,
    /// The etcd lease the slot was held under; 0 in standalone mode.
    pub lease: i64,
    /// The holder's count of claims, which tells apart two claims in one millisecond.
    pub claim: u64,
    /// When the claim was taken, Unix ms.
    pub claimed_at_ms: i64,
    /// The holder mints only ticks above this, Unix ms: its predecessor's last reservation,
    /// or, when it inherited none (a slot's first claim, a lost state file accepted with
    /// --accept-missing-state), its own clock at the claim.
    pub floor_ms: i64,
    /// The end of the minting window: the holder's last reservation, Unix ms. `None` while
    /// the record is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reservation_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_by: Option<ClosedBy>,
}

impl Record {
    /// The record's name within its slot: sorts by claim time.
    pub fn name(&self) -> String {
        format!("{:013}-{}-{}", self.claimed_at_ms.max(0), self.holder.pid, self.claim)
    }

    pub fn is_open(&self) -> bool {
        self.last_reservation_ms.is_none()
    }

    /// Whether an ID of this slot minted at `unix_ms` falls in this record's window: above
    /// the floor, and up to the last reservation (open records: no end yet).
    pub fn covers(&self, unix_ms: i64) -> bool {
        unix_ms > self.floor_ms && self.last_reservation_ms.is_none_or(|last| unix_ms <= last)
    }

    /// The record closed at `closed_at_ms`, its window ending at `last_ms`.
    pub fn closed(&self, last_ms: i64, closed_at_ms: i64, by: ClosedBy) -> Record {
        Record {
            last_reservation_ms: Some(last_ms.max(self.floor_ms)),
            closed_at_ms: Some(closed_at_ms),
            closed_by: Some(by),
            ..self.clone()
        }
    }
}

/// A record with where it lives (an etcd key, a file path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub location: String,
    pub record: Record,
}

/// Why history could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    #[error("{0}")]
    Unavailable(String),
    #[error("history record {location} is unreadable: {reason}")]
    Corrupt { location: String, reason: String },
}

/// Where history lives. Each call is one bounded read or write; none is ever on the
/// minting path.
#[tonic::async_trait]
pub trait Book: Send + Sync + 'static {
    /// Writes a new record; where it now lives.
    async fn append(&self, record: &Record) -> Result<String, HistoryError>;
    /// Replaces `record` (named by its slot and name) with `closed`, if it is still open.
    /// `false`: it was closed already (by its holder or a successor), and stays as it is.
    async fn close(&self, record: &Record, closed: &Record) -> Result<bool, HistoryError>;
    /// Every record of `slot`, or of every slot, in slot and claim order. Unreadable
    /// records are left out, and returned as errors beside the rest.
    async fn list(&self, slot: Option<Slot>) -> Result<(Vec<Entry>, Vec<HistoryError>), HistoryError>;
    /// Deletes up to `limit` of the oldest records of `slot` closed before `before_ms`.
    async fn prune(&self, slot: Slot, before_ms: i64, limit: usize) -> Result<usize, HistoryError>;
    /// Writes a sequence's segment record, replacing the one of the same name (its own
    /// earlier version: a give-back); where it now lives.
    async fn write_segment(&self, record: &SegmentRecord) -> Result<String, HistoryError>;
    /// Every segment record of `sequence`, or of every sequence, by sequence and first value.
    /// Unreadable records are left out, and returned as errors beside the rest.
    async fn list_segments(
        &self,
        sequence: Option<&str>,
    ) -> Result<(Vec<SegmentEntry>, Vec<HistoryError>), HistoryError>;
    /// The `limit` records of `sequence` with the highest first values at or below `value`,
    /// in value order: where the one holding `value` is, without reading the whole sequence.
    async fn segments_at(
        &self,
        sequence: &str,
        value: u64,
        limit: usize,
    ) -> Result<(Vec<SegmentEntry>, Vec<HistoryError>), HistoryError>;
    /// Deletes up to `limit` of the lowest segment records of `sequence` that were claimed
    /// before `before_ms` or are more than the `keep` newest, never its highest (the segment
    /// perhaps still handed out).
    async fn prune_segments(
        &self,
        sequence: &str,
        before_ms: i64,
        keep: usize,
        limit: usize,
    ) -> Result<usize, HistoryError>;
    /// Where the history lives, for messages.
    fn describe(&self) -> String;
}

/// The record among `entries` whose window covers an ID of `slot` minted at `unix_ms`. By
/// the hand-over rule at most one can; if the history says otherwise (a broken rule, a
/// record edited by hand), the latest claim is returned and [`audit`] names the pair.
pub fn covering(entries: &[Entry], slot: Slot, unix_ms: i64) -> Option<&Entry> {
    entries
        .iter()
        .filter(|e| e.record.slot == slot && e.record.covers(unix_ms))
        .max_by_key(|e| (e.record.claimed_at_ms, e.record.claim))
}

/// A record for tests: `pid`'s claim of `slot` at `claimed`, above `floor`, closed at
/// `last` (open when `None`).
#[cfg(test)]
pub(crate) fn sample(slot: Slot, pid: u32, claimed: i64, floor: i64, last: Option<i64>) -> Record {
    Record {
        slot,
        holder: Holder {
            hostname: format!("host-{pid}"),
            pod: None,
            pid,
            version: "0.1.0".into(),
            started_at_ms: claimed - 5,
        },
        lease: i64::from(pid) << 8,
        claim: 1,
        claimed_at_ms: claimed,
        floor_ms: floor,
        last_reservation_ms: last,
        closed_at_ms: last.map(|l| l + 1),
        closed_by: last.map(|_| ClosedBy::Release),
    }
}

/// `record` as an entry named after it, for tests.
#[cfg(test)]
pub(crate) fn sample_entry(record: Record) -> Entry {
    Entry { location: format!("history/{}/{}", record.slot, record.name()), record }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records already written, in etcd or a state dir, name the slot `worker_id`: the code's
    /// name for it may change, what is stored may not.
    #[test]
    fn a_record_is_stored_with_the_slot_under_worker_id() {
        let record = sample(3, 10, 1_000, 900, Some(2_000));
        let json: serde_json::Value = serde_json::to_value(&record).unwrap();
        assert_eq!(json["worker_id"], 3, "{json}");
        assert!(json.get("slot").is_none(), "{json}");
        let back: Record = serde_json::from_value(json).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn a_window_is_above_the_floor_up_to_the_last_reservation() {
        let closed = sample(3, 10, 1_000, 900, Some(2_000));
        assert!(!closed.covers(900));
        assert!(closed.covers(901));
        assert!(closed.covers(2_000));
        assert!(!closed.covers(2_001));
        let open = sample(3, 11, 2_100, 2_000, None);
        assert!(open.covers(1 << 40));
        assert!(!open.covers(2_000));
    }

    #[test]
    fn the_covering_record_is_the_holder_whose_window_holds_the_time() {
        let entries = vec![
            sample_entry(sample(3, 10, 1_000, 0, Some(2_000))),
            sample_entry(sample(3, 11, 2_100, 2_000, Some(5_000))),
            sample_entry(sample(4, 12, 1_000, 0, None)),
        ];
        assert_eq!(covering(&entries, 3, 1_500).unwrap().record.holder.pid, 10);
        assert_eq!(covering(&entries, 3, 2_001).unwrap().record.holder.pid, 11);
        assert_eq!(covering(&entries, 4, 2_001).unwrap().record.holder.pid, 12);
        assert!(covering(&entries, 3, 5_001).is_none());
        assert!(covering(&entries, 5, 1_500).is_none());
    }

    #[test]
    fn closing_never_ends_a_window_below_its_floor() {
        let open = sample(3, 10, 1_000, 900, None);
        let closed = open.closed(800, 1_200, ClosedBy::Successor);
        assert_eq!(closed.last_reservation_ms, Some(900));
        assert_eq!(closed.closed_by, Some(ClosedBy::Successor));
        assert_eq!(closed.name(), open.name());
    }

    #[test]
    fn records_round_trip_through_json_and_names_sort_by_claim_time() {
        let r = sample(3, 10, 1_000, 900, Some(2_000));
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Record>(&json).unwrap(), r);
        assert!(sample(3, 99, 999, 0, None).name() < sample(3, 1, 1_000, 0, None).name());
    }
}
