//! A named sequence's write as both store models apply it: the compare on the record's
//! version that etcd's transaction (`mod_revision`) and the state dir's file (its revision
//! counter) make, and on the record itself (etcd compares the value: a restore hands
//! versions out again), and the note of the segment a claim took, for the checker.
//!
//! The planted defect [`Defect::SegmentWithoutCompare`] drops the compare here: the write
//! applies over whatever record is stored.

use super::etcd::Note;
use crate::defects::{self, Defect};
use crate::sequence::{Answer, Record};
use crate::store::Version;

/// Which sequence of a schedule: its index, its name `s<index>`.
pub type SequenceIndex = u8;

/// The name of sequence `index`.
pub fn name(index: SequenceIndex) -> String {
    format!("s{index}")
}

/// A write of `record` over `over` at version `expect` to sequence `sequence`, whose stored
/// record is `current`: refused with the answer the store gives (untouched), or applied, with
/// the note of the segment it took when it is a claim (from the stored `next` to the new one).
pub fn apply(
    sequence: SequenceIndex,
    current: Option<&(Version, Record)>,
    (expect, over): (Version, &Record),
    record: &Record,
) -> Result<Option<Note>, Answer> {
    let Some((version, stored)) = current else { return Err(Answer::Refused(None)) };
    if (*version != expect || stored != over) && !defects::active(Defect::SegmentWithoutCompare) {
        return Err(Answer::Refused(current.cloned()));
    }
    Ok(record.claim.map(|claim| Note::SegmentTaken {
        sequence,
        claim,
        values: stored.next..record.next.max(stored.next),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequence::ClaimId;

    #[test]
    fn a_write_applies_only_over_the_record_and_version_it_names_and_notes_what_a_claim_took() {
        let stored = Record::new(10, 100, false).unwrap();
        let current = (Version::At(5), stored.clone());
        let claim = ClaimId { session: 3, number: 0 };
        let claimed = Record { next: 20, claim: Some(claim), ..stored.clone() };
        let note = apply(1, Some(&current), (Version::At(5), &stored), &claimed).unwrap();
        assert_eq!(note, Some(Note::SegmentTaken { sequence: 1, claim, values: 10..20 }));
        let refused = Err(Answer::Refused(Some(current.clone())));
        assert_eq!(apply(1, Some(&current), (Version::At(4), &stored), &claimed), refused);
        assert_eq!(apply(1, None, (Version::At(5), &stored), &claimed), Err(Answer::Refused(None)));
        // After a restore the version is handed out again, to another record: a write held
        // up from before it names the version it found, but not the record now there.
        let fenced_since = Record { next: 50, ..stored.fence(40) };
        let found_again = (Version::At(5), fenced_since);
        let refused = Err(Answer::Refused(Some(found_again.clone())));
        assert_eq!(apply(1, Some(&found_again), (Version::At(5), &stored), &claimed), refused);
        // A give-back names no claim, and takes nothing.
        let given_back = Record { next: 8, claim: None, ..stored.clone() };
        assert_eq!(apply(1, Some(&current), (Version::At(5), &stored), &given_back), Ok(None));

        defects::plant(Some(Defect::SegmentWithoutCompare));
        let applied = apply(1, Some(&current), (Version::At(4), &stored), &claimed);
        defects::plant(None);
        assert!(applied.is_ok(), "planted, the compare is gone: {applied:?}");
    }
}
