//! The audit of the sequences' segment history: checks, sequence by sequence, that no two
//! recorded segments held the same value (that would be a value issued twice). Pure: records
//! in, a [`SegmentReport`] out; `snowmint audit` reads the records and prints it.

use std::collections::BTreeMap;

use super::segment::{SegmentEntry, SegmentRecord};
use crate::layout::rfc3339_ms;

/// Two records of one sequence that held the same values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The record whose held values start first.
    pub earlier: SegmentEntry,
    pub later: SegmentEntry,
}

impl Overlap {
    /// The values both held, `end` excluded.
    pub fn shared(&self) -> std::ops::Range<u64> {
        let (a, b) = (self.earlier.record.held(), self.later.record.held());
        a.start.max(b.start)..a.end.min(b.end)
    }
}

impl std::fmt::Display for Overlap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shared = self.shared();
        write!(
            f,
            "sequence {}: {} ({}) and {} ({}) both held values {} to {}: issued twice, if both handed them out",
            self.earlier.record.sequence,
            self.earlier.location,
            holder(&self.earlier.record),
            self.later.location,
            holder(&self.later.record),
            shared.start,
            shared.end - 1
        )
    }
}

fn holder(record: &SegmentRecord) -> String {
    let held = record.held();
    let more = if record.claims > 1 { format!(" and the {} after it", record.claims - 1) } else { String::new() };
    format!(
        "{} pid {}, session {}, claim {}{more}, values {} to {}",
        record.holder.pod.as_deref().unwrap_or(&record.holder.hostname),
        record.holder.pid,
        record.claim.session,
        record.claim.number,
        held.start,
        held.end.saturating_sub(1)
    )
}

/// What the audit of the segments found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentReport {
    /// Sequences with at least one record.
    pub sequences: usize,
    /// Segments on record: each record's claims (one, or the run it took in).
    pub segments: usize,
    /// Segments whose unused top was given back.
    pub given_back: usize,
    /// The values the records say were held, all told.
    pub values: u64,
    /// The earliest claim on record, Unix ms.
    pub oldest_ms: Option<i64>,
    pub overlaps: Vec<Overlap>,
}

impl SegmentReport {
    pub fn passed(&self) -> bool {
        self.overlaps.is_empty()
    }

    /// The summary line.
    pub fn summary(&self) -> String {
        format!(
            "{} sequences, {} segments, {} given back, {} values held, oldest segment {}",
            self.sequences,
            self.segments,
            self.given_back,
            self.values,
            self.oldest_ms.map_or_else(|| "none".into(), rfc3339_ms)
        )
    }
}

/// Audits `entries` (any order, any sequences).
pub fn audit_segments(entries: &[SegmentEntry]) -> SegmentReport {
    let mut by_sequence: BTreeMap<&str, Vec<&SegmentEntry>> = BTreeMap::new();
    for entry in entries {
        by_sequence.entry(&entry.record.sequence).or_default().push(entry);
    }
    let mut report = SegmentReport {
        sequences: by_sequence.len(),
        segments: entries.iter().map(|e| usize::try_from(e.record.claims).unwrap_or(usize::MAX)).sum(),
        given_back: entries.iter().filter(|e| e.record.given_back_from.is_some()).count(),
        values: entries.iter().map(|e| e.record.held().end - e.record.held().start).sum(),
        oldest_ms: entries.iter().map(|e| e.record.claimed_at_ms).min(),
        overlaps: Vec::new(),
    };
    for (_, mut held) in by_sequence {
        // A segment given back whole held nothing: it overlaps nothing.
        held.retain(|e| !e.record.held().is_empty());
        held.sort_by_key(|e| (e.record.held().start, e.record.held().end));
        // In order of their first values, a segment that starts below the furthest end seen
        // so far shares values with the segment that reaches there: every overlapping pair
        // with that one is named, each once.
        let mut furthest: Option<&SegmentEntry> = None;
        for entry in held {
            if let Some(before) = furthest
                && entry.record.held().start < before.record.held().end
            {
                report.overlaps.push(Overlap { earlier: before.clone(), later: entry.clone() });
            }
            if furthest.is_none_or(|f| entry.record.held().end > f.record.held().end) {
                furthest = Some(entry);
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::segment::sample_segment;

    #[test]
    fn disjoint_segments_pass_with_their_counts() {
        let given_back = {
            let mut e = sample_segment("orders", 11, 101..201, 2_000);
            e.record = e.record.given_back(150, 3_000);
            e
        };
        let entries = vec![
            sample_segment("orders", 10, 1..101, 1_000),
            given_back,
            // After the give-back, the next segment starts where it began.
            sample_segment("orders", 12, 150..250, 4_000),
            sample_segment("tickets", 10, 1..11, 900),
        ];
        let report = audit_segments(&entries);
        assert!(report.passed(), "{:?}", report.overlaps);
        assert_eq!((report.sequences, report.segments, report.given_back, report.values), (2, 4, 1, 259));
        assert_eq!(report.oldest_ms, Some(900));
        assert!(report.summary().starts_with("2 sequences, 4 segments, 1 given back, 259 values held"));
    }

    #[test]
    fn an_overlap_is_named_with_both_holders_and_the_shared_values() {
        let entries = vec![sample_segment("orders", 10, 1..101, 1_000), sample_segment("orders", 11, 90..150, 1_100)];
        let report = audit_segments(&entries);
        assert_eq!(report.overlaps.len(), 1);
        assert_eq!(report.overlaps[0].shared(), 90..101);
        let line = report.overlaps[0].to_string();
        assert!(line.contains("host-10 pid 10") && line.contains("host-11 pid 11"), "{line}");
        assert!(line.contains("values 90 to 100"), "{line}");
    }

    #[test]
    fn overlaps_are_found_whatever_the_order_and_not_across_sequences() {
        // One segment inside another, not next to it in value order; a third past both.
        let entries = vec![
            sample_segment("orders", 12, 300..400, 3_000),
            sample_segment("orders", 11, 150..160, 2_000),
            sample_segment("orders", 10, 100..200, 1_000),
            sample_segment("orders", 13, 170..180, 4_000),
            sample_segment("tickets", 14, 100..200, 1_000),
        ];
        let report = audit_segments(&entries);
        let named: Vec<(u32, u32)> =
            report.overlaps.iter().map(|o| (o.earlier.record.holder.pid, o.later.record.holder.pid)).collect();
        assert_eq!(named, [(10, 11), (10, 13)]);
        // The same values twice over, to the value.
        let report = audit_segments(&[sample_segment("a", 1, 5..6, 0), sample_segment("a", 2, 5..6, 0)]);
        assert_eq!(report.overlaps.len(), 1);
        // Touching is not overlapping.
        assert!(audit_segments(&[sample_segment("a", 1, 5..6, 0), sample_segment("a", 2, 6..7, 0)]).passed());
    }

    #[test]
    fn a_segment_given_back_whole_overlaps_nothing() {
        let mut whole = sample_segment("orders", 10, 100..200, 1_000);
        whole.record = whole.record.given_back(100, 2_000);
        let report = audit_segments(&[whole, sample_segment("orders", 11, 100..300, 3_000)]);
        assert!(report.passed(), "{:?}", report.overlaps);
    }

    #[test]
    fn an_empty_history_passes() {
        let report = audit_segments(&[]);
        assert!(report.passed());
        assert!(report.summary().contains("oldest segment none"));
    }
}
