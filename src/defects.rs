//! Planted defects: switches that put known bugs back, so the simulator's power to find them
//! can itself be tested.
//!
//! They exist only in test builds (`cfg(test)`): in every other build [`active`] is a
//! constant `false` and the checks compile away. Each is set per thread, so tests running in
//! parallel do not see each other's defects.

/// A bug the simulator must be able to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    /// Reservation writes without the compare on the slot's claim (breaks invariant 3).
    WriteWithoutClaimCheck,
    /// The lease deadline taken from when the renewal's reply arrived, not when it was sent.
    DeadlineFromReply,
    /// The floor read from a member's possibly stale copy (breaks invariant 2).
    StaleFloorRead,
    /// The sequence restarted whenever the tick changes, before the clock check (breaks
    /// invariant 5: Twitter Snowflake's old bug).
    SequenceResetBeforeClockCheck,
    /// The final reservation shrunk even when what the minter minted is unknown, to the last
    /// progress it reported.
    ShrinkOnUnknown,
    /// Reservation writes without the compare on the version they replace.
    WriteWithoutVersionCheck,
    /// The lease deadline measured on a clock that stops while the machine is suspended.
    DeadlineOnSuspendingClock,
    /// A claim that already carries this session's lease treated as lost.
    ClaimNotIdempotent,
    /// A resumed claim given the floor of the first claim that wrote the slot in this
    /// process, not of the claim it continues.
    ResumeWithOlderFloor,
    /// A state-file write that stalled past its call timeout lands after the write that
    /// followed it, recording its older, lower reservation. Planted in the file store's
    /// write-order rule (`store::file::order::Turns::take`), which both the real store and
    /// the simulator's disk model run; the real store runs it on a blocking thread, out of
    /// reach of this per-thread switch, so only the simulator (and that rule's own tests)
    /// see it planted.
    StaleWriteLandsLate,
    /// A claim's floor read takes the stored reservation as it is, whatever fence stands and
    /// whether it is missing (issue 23: a restored snapshot's reservations, a deleted key,
    /// trusted as the latest).
    FenceIgnored,
    /// The compactor compacts to the revision its winning round saw, keeping no history
    /// (issue 23: the retention of at least one interval dropped).
    CompactToCurrent,
    /// A named sequence's segment claim written without the compare on its record's
    /// version: the store applies it whatever is stored. Planted in the write path of the
    /// simulator's store models (etcd's transaction, the state dir's file), where the real
    /// stores make the compare.
    SegmentWithoutCompare,
    /// A named sequence's values handed out from a claim before the store confirmed it: the
    /// pending claim's values taken as ready at once (`sequence::segments`).
    ValueBeforeDurable,
    /// The holder of an ordered sequence goes on serving it after its lease's deadline
    /// passed: the deadline check of `node::sequences::lease_of` skipped.
    OrderedPastLease,
}

impl Defect {
    /// Every planted defect.
    pub const ALL: [Defect; 15] = [
        Defect::WriteWithoutClaimCheck,
        Defect::DeadlineFromReply,
        Defect::StaleFloorRead,
        Defect::SequenceResetBeforeClockCheck,
        Defect::ShrinkOnUnknown,
        Defect::WriteWithoutVersionCheck,
        Defect::DeadlineOnSuspendingClock,
        Defect::ClaimNotIdempotent,
        Defect::ResumeWithOlderFloor,
        Defect::StaleWriteLandsLate,
        Defect::FenceIgnored,
        Defect::CompactToCurrent,
        Defect::SegmentWithoutCompare,
        Defect::ValueBeforeDurable,
        Defect::OrderedPastLease,
    ];
}

#[cfg(test)]
pub use planted::{active, plant};

/// Whether `defect` is planted: always `false` outside test builds.
#[cfg(not(test))]
#[inline(always)]
pub fn active(_defect: Defect) -> bool {
    false
}

#[cfg(test)]
mod planted {
    use super::Defect;
    use std::cell::Cell;

    thread_local! {
        static ACTIVE: Cell<Option<Defect>> = const { Cell::new(None) };
    }

    pub fn active(defect: Defect) -> bool {
        ACTIVE.with(|active| active.get() == Some(defect))
    }

    /// Plants `defect` (or none) on this thread.
    pub fn plant(defect: Option<Defect>) {
        ACTIVE.with(|active| active.set(defect));
    }
}
