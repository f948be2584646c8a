//! The checker's part for named sequences: every value handed to a caller, held against
//! the promise and against what the store did.
//!
//! Per sequence: no value handed out twice across the fleet; the values one process
//! (incarnation) hands out increase, in the order it answers, and those of an ordered
//! sequence increase fleet-wide, in the order the fleet answers; and every value lies in a
//! segment that the store durably applied for a claim of that process's session (a
//! compare-and-set that moved the record's `next` over it, as [`Note::SegmentTaken`] says).
//! A value handed out before its claim landed, or from a claim that landed over another's,
//! breaks the last even where luck avoided a repeat.
//!
//! [`Note::SegmentTaken`]: crate::sim::etcd::Note::SegmentTaken

use std::collections::BTreeMap;
use std::ops::Range;

use super::record_run;
use crate::sequence::ClaimId;
use crate::sim::etcd::Owner;
use crate::sim::sequence_write::SequenceIndex;

#[derive(Debug, Default)]
pub struct SequenceChecker {
    /// Per sequence, every value handed out, as disjoint runs: first → last.
    issued: BTreeMap<SequenceIndex, BTreeMap<u64, u64>>,
    /// The last value each process handed out of each sequence.
    last: BTreeMap<(SequenceIndex, Owner), u64>,
    /// The last value the fleet handed out of each ordered sequence, and by whom.
    last_ordered: BTreeMap<SequenceIndex, (u64, Owner)>,
    /// Per sequence and session, the segments the store applied for that session's claims.
    applied: BTreeMap<(SequenceIndex, i64), Vec<Range<u64>>>,
    /// Values handed out.
    pub values: u64,
}

impl SequenceChecker {
    /// The store applied `claim`, moving sequence `sequence`'s `next` over `values`.
    pub fn taken(&mut self, sequence: SequenceIndex, claim: ClaimId, values: Range<u64>) {
        if !values.is_empty() {
            self.applied.entry((sequence, claim.session)).or_default().push(values);
        }
    }

    /// `values` (one caller's answer, in order) handed out by `owner`, whose claims are
    /// named by `session`, of a sequence `ordered` or not; what they break, if anything.
    pub fn issued(
        &mut self,
        sequence: SequenceIndex,
        owner: Owner,
        session: i64,
        ordered: bool,
        values: &[Range<u64>],
    ) -> Vec<String> {
        let mut broken = Vec::new();
        for range in values.iter().filter(|r| !r.is_empty()) {
            self.values += range.end - range.start;
            let (first, last) = (range.start, range.end - 1);
            if let Some(twice) = record_run(self.issued.entry(sequence).or_default(), first, last) {
                broken.push(format!("sequence s{sequence}: value {twice} issued twice (now by {owner:?})"));
            }
            if let Some(&before) = self.last.get(&(sequence, owner))
                && first <= before
            {
                broken.push(format!("sequence s{sequence}: {owner:?} went back: {first} after {before}"));
            }
            self.last.insert((sequence, owner), last);
            if ordered {
                if let Some(&(before, by)) = self.last_ordered.get(&sequence)
                    && first <= before
                {
                    broken.push(format!(
                        "ordered sequence s{sequence}: {owner:?} answered {first} after {by:?} answered {before}"
                    ));
                }
                self.last_ordered.insert(sequence, (last, owner));
            }
            let applied = self.applied.get(&(sequence, session)).map_or(&[][..], |v| &v[..]);
            if !applied.iter().any(|segment| segment.start <= first && last < segment.end) {
                broken.push(format!(
                    "sequence s{sequence}: {owner:?} handed out {first}..={last}, outside every segment the store applied for its session {session}"
                ));
            }
        }
        broken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_twice_going_back_or_outside_a_segment_of_its_session_is_a_violation() {
        let mut checker = SequenceChecker::default();
        checker.taken(0, ClaimId { session: 1, number: 0 }, 1..11);
        checker.taken(0, ClaimId { session: 2, number: 0 }, 11..21);
        assert!(checker.issued(0, (0, 1), 1, false, &[1..4, 4..6]).is_empty());
        assert!(checker.issued(0, (1, 1), 2, false, std::slice::from_ref(&(11..13))).is_empty());
        assert!(checker.issued(1, (1, 1), 2, false, &[]).is_empty());
        let twice = checker.issued(0, (1, 1), 2, false, &[15..16, 5..6]);
        assert!(twice.iter().any(|v| v.contains("value 5 issued twice")), "{twice:?}");
        assert!(twice.iter().any(|v| v.contains("went back: 5 after 15")), "{twice:?}");
        assert!(twice.iter().any(|v| v.contains("outside every segment")), "{twice:?}");
        // A range that runs across two segments of one session lies in neither.
        checker.taken(0, ClaimId { session: 1, number: 1 }, 21..31);
        assert!(!checker.issued(0, (0, 1), 1, false, std::slice::from_ref(&(8..25))).is_empty());
        assert_eq!(checker.values, 5 + 2 + 1 + 1 + 17);
    }

    #[test]
    fn an_ordered_sequence_answered_below_an_earlier_answer_anywhere_is_a_violation() {
        let mut checker = SequenceChecker::default();
        checker.taken(0, ClaimId { session: 1, number: 0 }, 1..11);
        checker.taken(0, ClaimId { session: 2, number: 0 }, 11..21);
        assert!(checker.issued(0, (0, 1), 1, true, std::slice::from_ref(&(1..3))).is_empty());
        assert!(checker.issued(0, (1, 1), 2, true, std::slice::from_ref(&(11..13))).is_empty());
        // Each process's own values increase, but the fleet's do not.
        let broken = checker.issued(0, (0, 1), 1, true, std::slice::from_ref(&(3..4)));
        assert!(broken.iter().any(|v| v.contains("answered 3 after (1, 1) answered 12")), "{broken:?}");
        assert_eq!(broken.len(), 1, "{broken:?}");
        // Not ordered, the same answers break nothing.
        let mut unordered = SequenceChecker::default();
        unordered.taken(0, ClaimId { session: 1, number: 0 }, 1..11);
        unordered.taken(0, ClaimId { session: 2, number: 0 }, 11..21);
        assert!(unordered.issued(0, (0, 1), 1, false, std::slice::from_ref(&(1..3))).is_empty());
        assert!(unordered.issued(0, (1, 1), 2, false, std::slice::from_ref(&(11..13))).is_empty());
        assert!(unordered.issued(0, (0, 1), 1, false, std::slice::from_ref(&(3..4))).is_empty());
    }
}
