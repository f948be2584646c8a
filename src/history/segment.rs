//! The history of a named sequence: one [`SegmentRecord`] per segment an instance was
//! confirmed to hold (which values, under which claim, by which process), for provenance
//! ([`covering_segment`]) and for the audit ([`super::segment_audit`]).
//!
//! A segment's values are handed out only by the instance whose claim the store confirmed,
//! and the sequence's record moves past them before any is, so no two segments of one
//! sequence ever hold the same value; the one exception by design is a give-back, which
//! returns the unused top of a segment to the sequence at a clean stop, and the record says
//! so ([`SegmentRecord::given_back_from`]), so that what it held ends where the give-back
//! began. Records are named by their first value, so they list in value order.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::Holder;
use crate::sequence::ClaimId;

/// One segment of one sequence, as its holder recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentRecord {
    /// The sequence's name.
    pub sequence: String,
    /// The values the claim took (`end` excluded).
    pub values: Range<u64>,
    /// The claim the store confirmed, as its record named it.
    pub claim: ClaimId,
    pub holder: Holder,
    /// When the holder learnt the claim was confirmed, Unix ms by its clock.
    pub claimed_at_ms: i64,
    /// The values from here to the end went back to the sequence unused, at a clean stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub given_back_from: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub given_back_at_ms: Option<i64>,
    /// How many claims of the holder the record covers: each next one whose values began
    /// where the record's ended (nobody claimed between) extends it instead of making a
    /// record of its own, for up to [`MERGE_FOR_MS`] after the first; `claim` and
    /// `claimed_at_ms` are the first's.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub claims: u64,
    /// When the holder learnt the latest of its claims here was confirmed, if it is not the
    /// first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_claimed_at_ms: Option<i64>,
}

/// How long after its first claim a record takes in the holder's next claims that follow it
/// with nothing between: a sequence served by one instance (an ordered one always) keeps a
/// record an hour, not one a segment, while its records still age out by the hour.
pub const MERGE_FOR_MS: i64 = 3_600_000;

fn one() -> u64 {
    1
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

impl SegmentRecord {
    /// The record's name within its sequence: its first value (so names sort by value), then
    /// the claim, which tells apart two records that start at the same value.
    pub fn name(&self) -> String {
        format!("{}-{:016x}-{}", name_start(self.values.start), self.claim.session as u64, self.claim.number)
    }

    /// The values the holder may have handed out: the claim's, less what it gave back.
    pub fn held(&self) -> Range<u64> {
        let end = self.given_back_from.map_or(self.values.end, |from| from.clamp(self.values.start, self.values.end));
        self.values.start..end
    }

    /// When the holder learnt its latest claim here was confirmed: what the retention counts
    /// from.
    pub fn last_claimed_ms(&self) -> i64 {
        self.last_claimed_at_ms.unwrap_or(self.claimed_at_ms)
    }

    /// The record taking in the holder's claim `claim` of `values`, confirmed at `at_ms`, if
    /// it follows on: the same session, starting where this one ends, nothing given back, and
    /// within [`MERGE_FOR_MS`] of the first claim.
    pub fn extended(&self, claim: ClaimId, values: &Range<u64>, at_ms: i64) -> Option<SegmentRecord> {
        let follows = claim.session == self.claim.session
            && self.given_back_from.is_none()
            && values.start == self.values.end
            && at_ms.saturating_sub(self.claimed_at_ms) < MERGE_FOR_MS;
        follows.then(|| SegmentRecord {
            values: self.values.start..values.end,
            claims: self.claims + 1,
            last_claimed_at_ms: Some(at_ms),
            ..self.clone()
        })
    }

    /// Whether `value` is one its holder may have handed out.
    pub fn covers(&self, value: u64) -> bool {
        self.held().contains(&value)
    }

    /// The record with the values from `from` up given back at `at_ms`; a later give-back
    /// never returns what an earlier one kept.
    pub fn given_back(&self, from: u64, at_ms: i64) -> SegmentRecord {
        let from = from.clamp(self.values.start, self.values.end);
        SegmentRecord {
            given_back_from: Some(self.given_back_from.map_or(from, |earlier| earlier.min(from))),
            given_back_at_ms: Some(at_ms),
            ..self.clone()
        }
    }
}

/// How a record's name starts when its first value is `value`: names then sort by value, and
/// every name of a record starting at or below `value` sorts before `name_start(value + 1)`.
pub fn name_start(value: u64) -> String {
    format!("{value:019}")
}

/// A segment record with where it lives (an etcd key, a file path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentEntry {
    pub location: String,
    pub record: SegmentRecord,
}

/// The record among `entries` of sequence `sequence` whose held values include `value`. At
/// most one can, unless the audit finds an overlap; then the latest claim is returned.
pub fn covering_segment<'a>(entries: &'a [SegmentEntry], sequence: &str, value: u64) -> Option<&'a SegmentEntry> {
    entries
        .iter()
        .filter(|e| e.record.sequence == sequence && e.record.covers(value))
        .max_by_key(|e| e.record.claimed_at_ms)
}

/// A segment record for tests: `pid`'s claim of `values` of `sequence` at `claimed`.
#[cfg(test)]
pub(crate) fn sample_segment(sequence: &str, pid: u32, values: Range<u64>, claimed: i64) -> SegmentEntry {
    let record = SegmentRecord {
        sequence: sequence.into(),
        values,
        claim: ClaimId { session: i64::from(pid) << 8, number: 1 },
        holder: Holder { hostname: format!("host-{pid}"), pod: None, pid, version: "0.1.0".into(), started_at_ms: 1 },
        claimed_at_ms: claimed,
        given_back_from: None,
        given_back_at_ms: None,
        claims: 1,
        last_claimed_at_ms: None,
    };
    SegmentEntry { location: format!("history/sequences/{sequence}/{}", record.name()), record }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_through_json_and_names_sort_by_first_value() {
        let mut record = sample_segment("orders", 10, 100..200, 1_000).record;
        record.claim.session = -5;
        let json = serde_json::to_string(&record).unwrap();
        assert!(json.contains(r#""values":{"start":100,"end":200}"#), "{json}");
        assert!(!json.contains("given_back"), "{json}");
        assert_eq!(serde_json::from_str::<SegmentRecord>(&json).unwrap(), record);
        let back = record.given_back(150, 2_000);
        assert_eq!(serde_json::from_str::<SegmentRecord>(&serde_json::to_string(&back).unwrap()).unwrap(), back);
        assert_eq!(back.name(), record.name(), "a give-back rewrites the same record");
        assert_eq!(record.name(), "0000000000000000100-fffffffffffffffb-1");
        let later = sample_segment("orders", 1, 9_000..9_100, 0).record;
        assert!(record.name() < later.name());
    }

    /// A claim that follows on (same session, from where the record ends, nothing given
    /// back, within the hour) extends the record; any other starts one of its own. Records
    /// written before claims were merged read as one claim each.
    #[test]
    fn a_claim_that_follows_on_extends_the_record() {
        let record = sample_segment("orders", 10, 100..200, 1_000).record;
        let next = ClaimId { number: 2, ..record.claim };
        let extended = record.extended(next, &(200..300), 4_000).expect("follows on");
        assert_eq!((extended.values.clone(), extended.claims, extended.last_claimed_ms()), (100..300, 2, 4_000));
        assert_eq!((extended.claim, extended.claimed_at_ms, extended.name()), (record.claim, 1_000, record.name()));
        assert!(extended.covers(299) && extended.covers(100));
        assert!(record.extended(next, &(201..300), 4_000).is_none(), "a gap between");
        assert!(record.extended(ClaimId { session: 7, number: 2 }, &(200..300), 4_000).is_none(), "another session");
        assert!(record.extended(next, &(200..300), 1_000 + MERGE_FOR_MS).is_none(), "an hour on");
        assert!(record.given_back(150, 2_000).extended(next, &(200..300), 4_000).is_none(), "given back");
        let json = serde_json::to_string(&extended).unwrap();
        assert_eq!(serde_json::from_str::<SegmentRecord>(&json).unwrap(), extended);
        let old = serde_json::to_string(&record).unwrap();
        assert!(!old.contains("claims"), "{old}");
        assert_eq!(serde_json::from_str::<SegmentRecord>(&old).unwrap().claims, 1);
    }

    #[test]
    fn a_give_back_ends_what_was_held_where_it_began() {
        let record = sample_segment("orders", 10, 100..200, 1_000).record;
        assert!(record.covers(100) && record.covers(199) && !record.covers(200) && !record.covers(99));
        let back = record.given_back(150, 2_000);
        assert_eq!(back.held(), 100..150);
        assert!(!back.covers(150));
        // All of it given back: it held nothing. Below its start: clamped.
        assert!(record.given_back(100, 2_000).held().is_empty());
        assert!(record.given_back(7, 2_000).held().is_empty());
        // A second give-back never hands back what the first kept as held.
        assert_eq!(back.given_back(180, 3_000).held(), 100..150);
        assert_eq!(back.given_back(120, 3_000).held(), 100..120);
    }

    #[test]
    fn the_covering_record_is_the_one_holding_the_value() {
        let entries = vec![
            sample_segment("orders", 10, 1..101, 1_000),
            sample_segment("orders", 11, 101..151, 1_100),
            sample_segment("tickets", 12, 1..1_001, 1_000),
        ];
        assert_eq!(covering_segment(&entries, "orders", 100).unwrap().record.holder.pid, 10);
        assert_eq!(covering_segment(&entries, "orders", 101).unwrap().record.holder.pid, 11);
        assert_eq!(covering_segment(&entries, "tickets", 101).unwrap().record.holder.pid, 12);
        assert!(covering_segment(&entries, "orders", 151).is_none());
        assert!(covering_segment(&entries, "invoices", 5).is_none());
    }
}
