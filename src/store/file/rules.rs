//! The file store's decisions, with no I/O: the answers to the requests that touch no state
//! file, and the revision each state file is known to be at, from which writes are found
//! stale and given their next revision. The file store ([`FileStore`](super::FileStore))
//! calls them around its reads and writes of real files, and the simulator's disk model
//! around its map of files, so that both run the same rules.

use std::collections::BTreeMap;

use crate::layout::Slot;
use crate::store::{Outcome, Reply, Request, Stored, Version, Write};

/// The file store's answer to `request` when it touches no state file, for a store holding
/// `slots`; `None` for reads and writes of reservations, which need the files.
///
/// The claim on a state file is its lock, taken when the store was opened: it never expires.
/// One instance per state dir: no peers to compare clocks with, no fleet to fence.
pub fn answer(request: &Request, slots: &[Slot]) -> Option<Reply> {
    Some(match request {
        Request::OpenSession { .. } => Reply::SessionOpened { session: 1, ttl: None },
        Request::ListSlots { .. } => Reply::Slots { taken: Vec::new(), ours: slots.to_vec() },
        Request::CountSlots => Reply::SlotCount { taken: slots.len() as u64 },
        Request::SampleClocks { .. } => Reply::PeerClocks(Vec::new()),
        Request::Claim { slot, .. } => Reply::Claimed { slot: *slot, won: slots.contains(slot) },
        Request::SetFence { .. } => Reply::FenceSet,
        Request::Renew { .. } => Reply::Renewed { ttl: std::time::Duration::MAX, fence: None },
        Request::Release { .. } => Reply::Released,
        Request::CloseSession { .. } => Reply::SessionClosed,
        Request::ReadReservations { .. } | Request::WriteReservations { .. } => return None,
    })
}

/// The revision each state file is known to be at: what a conditional write is compared
/// with. A slot is absent while its revision is unknown (after a write that may or may not
/// have landed), until it is read again.
#[derive(Debug, Default)]
pub struct Revisions {
    known: BTreeMap<Slot, Version>,
}

impl Revisions {
    /// A read of `slot` found `stored`: its version is known from now on. A corrupt file
    /// tells nothing.
    pub fn read(&mut self, slot: Slot, stored: &Stored) {
        if let Some(version) = stored.version() {
            self.known.insert(slot, version);
        }
    }

    /// The slots of `writes` whose expected version is not the one known. The compare is all
    /// or none: a single one refuses them all, before any file is touched. A write that
    /// expects nothing (only ever from a planted defect) is never stale.
    pub fn stale(&self, writes: &[Write]) -> Vec<Slot> {
        writes
            .iter()
            .filter(|w| w.expect.is_some_and(|expect| self.known.get(&w.slot) != Some(&expect)))
            .map(|w| w.slot)
            .collect()
    }

    /// The revision a write of `slot` records: one past the known one, 1 over a slot with
    /// none stored (or none known).
    pub fn next(&self, slot: Slot) -> i64 {
        match self.known.get(&slot) {
            Some(Version::At(r)) => r + 1,
            _ => 1,
        }
    }

    /// The write of `slot` at `revision` landed: known from now on. The version to answer.
    pub fn written(&mut self, slot: Slot, revision: i64) -> Version {
        let version = Version::At(revision);
        self.known.insert(slot, version);
        version
    }

    /// A write of `slot` failed with `outcome`. One that may have landed, whole or in part,
    /// leaves the revision unknown until read; one certainly not applied changed nothing. The
    /// file store cannot tell where a write failed, and says [`Outcome::Unknown`] of each.
    pub fn failed(&mut self, slot: Slot, outcome: Outcome) {
        match outcome {
            Outcome::Unknown => {
                self.known.remove(&slot);
            }
            Outcome::NotApplied => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(slot: Slot, expect: Option<Version>) -> Write {
        Write {
            slot,
            until_ms: 1_800_000_005_000,
            expect,
            wall_ms: 1_800_000_002_000,
            idle: false,
            claim_version: None,
        }
    }

    fn reserved(revision: i64) -> Stored {
        Stored::Reserved { until_ms: 1_800_000_000_000, version: Version::At(revision) }
    }

    /// Slots 3 (revision 4) and 5 (no file yet), as a store that opened them knows them.
    fn opened() -> Revisions {
        let mut revisions = Revisions::default();
        revisions.read(3, &reserved(4));
        revisions.read(5, &Stored::Absent);
        revisions
    }

    #[test]
    fn writes_naming_the_known_versions_are_not_stale() {
        let revisions = opened();
        assert_eq!(revisions.stale(&[write(3, Some(Version::At(4))), write(5, Some(Version::Absent))]), [0u32; 0]);
        assert_eq!((revisions.next(3), revisions.next(5)), (5, 1));
    }

    /// One stale write among several refuses them all: the caller writes none.
    #[test]
    fn one_stale_write_refuses_all() {
        let revisions = opened();
        for stale in [Some(Version::At(3)), Some(Version::At(5)), Some(Version::Absent)] {
            let writes = [write(5, Some(Version::Absent)), write(3, stale)];
            assert_eq!(revisions.stale(&writes), [3], "{stale:?}");
        }
        // A slot never read is known at no version.
        assert_eq!(revisions.stale(&[write(7, Some(Version::Absent))]), [7]);
        // Only the planted defect writes without a compare.
        assert_eq!(revisions.stale(&[write(3, None)]), [0u32; 0]);
    }

    #[test]
    fn a_landed_write_is_the_version_to_name_next() {
        let mut revisions = opened();
        assert_eq!(revisions.written(3, revisions.next(3)), Version::At(5));
        assert_eq!(revisions.stale(&[write(3, Some(Version::At(4)))]), [3]);
        assert_eq!(revisions.stale(&[write(3, Some(Version::At(5)))]), [0u32; 0]);
        assert_eq!(revisions.next(3), 6);
    }

    /// A write that may have landed leaves the revision unknown: every write naming one is
    /// refused until a read finds it.
    #[test]
    fn a_write_of_unknown_outcome_forgets_the_revision() {
        let mut revisions = opened();
        revisions.failed(3, Outcome::Unknown);
        for expect in [Version::At(4), Version::At(5), Version::Absent] {
            assert_eq!(revisions.stale(&[write(3, Some(expect))]), [3], "{expect:?}");
        }
        // Read again: it landed after all.
        revisions.read(3, &reserved(5));
        assert_eq!(revisions.stale(&[write(3, Some(Version::At(5)))]), [0u32; 0]);
        assert_eq!(revisions.next(3), 6);
    }

    #[test]
    fn a_write_certainly_not_applied_keeps_the_revision() {
        let mut revisions = opened();
        revisions.failed(3, Outcome::NotApplied);
        assert_eq!(revisions.stale(&[write(3, Some(Version::At(4)))]), [0u32; 0]);
        assert_eq!(revisions.next(3), 5);
    }

    /// A corrupt file read leaves what was known; a file gone reads as none stored.
    #[test]
    fn reads_record_what_they_found() {
        let mut revisions = opened();
        revisions.read(3, &Stored::Corrupt { reason: "not JSON".into() });
        assert_eq!(revisions.stale(&[write(3, Some(Version::At(4)))]), [0u32; 0]);
        revisions.read(3, &Stored::Absent);
        assert_eq!(revisions.stale(&[write(3, Some(Version::Absent))]), [0u32; 0]);
        assert_eq!(revisions.next(3), 1);
    }

    #[test]
    fn requests_that_touch_no_file_are_answered_from_the_slots() {
        let slots = [3, 5];
        let reply = |request| answer(&request, &slots);
        assert_eq!(reply(Request::ListSlots { session: 1 }), Some(Reply::Slots { taken: vec![], ours: vec![3, 5] }));
        assert_eq!(reply(Request::CountSlots), Some(Reply::SlotCount { taken: 2 }));
        assert_eq!(reply(Request::Claim { session: 1, slot: 5 }), Some(Reply::Claimed { slot: 5, won: true }));
        assert_eq!(reply(Request::Claim { session: 1, slot: 4 }), Some(Reply::Claimed { slot: 4, won: false }));
        // The claim never expires.
        let opened = reply(Request::OpenSession { ttl: std::time::Duration::from_secs(10) });
        assert_eq!(opened, Some(Reply::SessionOpened { session: 1, ttl: None }));
        assert_eq!(reply(Request::ReadReservations { slots: vec![3], linearizable: true }), None);
        let write = Request::WriteReservations { session: 1, writes: vec![write(3, None)], check_claim: true };
        assert_eq!(reply(write), None);
    }
}
