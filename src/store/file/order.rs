//! The order in which one state file's writes land, with no I/O: the file store's
//! [`StateFile`](super::StateFile) keeps it under its lock, and the simulator's disk model
//! keeps it per slot.
//!
//! The store issues one write at a time, but a write whose call timed out goes on in its
//! thread; were it renamed in after the write that followed it, the file would record its
//! older, lower reservation, and a restart with the clock behind would mint the same IDs
//! again. So each write takes a [`Ticket`] when it is issued, and the state file only ever
//! receives the latest write to have begun: a write that finds a later one begun is dropped,
//! and fails ([`Turns::take`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::defects::{self, Defect};

/// A write's place in line: taken when the write is issued, before it goes to a thread of
/// its own, so that tickets follow the order of the calls, not of the threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

/// Hands out one state file's tickets, in the order its writes are issued. Needs no lock:
/// the caller takes a ticket while a write of its file may hold the file's lock.
#[derive(Debug, Default)]
pub struct Tickets(AtomicU64);

impl Tickets {
    /// The place in line of the next write; take it when the write is issued.
    pub fn issue(&self) -> Ticket {
        Ticket(self.0.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

/// Which turn of a write [`Turns::take`] rules on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Creating its temp file: the write begins.
    Begin,
    /// Renaming it into place: the write lands.
    Rename,
}

/// A write that found a later write of its file begun: it is dropped, touching nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superseded;

/// Whose turn it is among one state file's writes: the latest to have begun.
#[derive(Debug, Default)]
pub struct Turns {
    /// The ticket of the latest write that began (0: none yet).
    latest: u64,
}

impl Turns {
    /// Takes `ticket`'s `turn`, or refuses it: a write may begin unless a later one has
    /// begun, and rename into place only while it is still the latest to have begun.
    pub fn take(&mut self, ticket: Ticket, turn: Turn) -> Result<(), Superseded> {
        let superseded = match turn {
            Turn::Begin => self.latest > ticket.0,
            Turn::Rename => self.latest != ticket.0,
        };
        if superseded && !defects::active(Defect::StaleWriteLandsLate) {
            return Err(Superseded);
        }
        // Never back: a write the planted defect lets through does not undo a later begin.
        self.latest = self.latest.max(ticket.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_follow_the_order_of_issue() {
        let tickets = Tickets::default();
        let (first, second) = (tickets.issue(), tickets.issue());
        assert!(first < second, "{first:?} {second:?}");
    }

    #[test]
    fn a_write_alone_begins_and_lands() {
        let (tickets, mut turns) = (Tickets::default(), Turns::default());
        let ticket = tickets.issue();
        assert_eq!(turns.take(ticket, Turn::Begin), Ok(()));
        assert_eq!(turns.take(ticket, Turn::Rename), Ok(()));
    }

    /// A write issued first but slow to start (its call timed out before its thread ran)
    /// finds the next write begun: it does not begin.
    #[test]
    fn a_write_superseded_before_it_begins_is_dropped() {
        let (tickets, mut turns) = (Tickets::default(), Turns::default());
        let (stale, next) = (tickets.issue(), tickets.issue());
        assert_eq!(turns.take(next, Turn::Begin), Ok(()));
        assert_eq!(turns.take(stale, Turn::Begin), Err(Superseded));
        // The later write is still the one to land.
        assert_eq!(turns.take(next, Turn::Rename), Ok(()));
    }

    /// A write that began, then stalled (a slow fsync) while the next one began: it does not
    /// rename over it, whether the next one landed already or is still under way.
    #[test]
    fn a_write_superseded_before_it_renames_is_dropped() {
        for next_landed in [false, true] {
            let (tickets, mut turns) = (Tickets::default(), Turns::default());
            let stale = tickets.issue();
            assert_eq!(turns.take(stale, Turn::Begin), Ok(()));
            let next = tickets.issue();
            assert_eq!(turns.take(next, Turn::Begin), Ok(()));
            if next_landed {
                assert_eq!(turns.take(next, Turn::Rename), Ok(()));
            }
            assert_eq!(turns.take(stale, Turn::Rename), Err(Superseded), "next landed: {next_landed}");
            if !next_landed {
                assert_eq!(turns.take(next, Turn::Rename), Ok(()));
            }
        }
    }

    /// Issued but not yet begun, a later write does not stop an earlier one: only a write
    /// that began counts.
    #[test]
    fn a_later_write_only_issued_does_not_supersede() {
        let (tickets, mut turns) = (Tickets::default(), Turns::default());
        let first = tickets.issue();
        let second = tickets.issue();
        assert_eq!(turns.take(first, Turn::Begin), Ok(()));
        assert_eq!(turns.take(first, Turn::Rename), Ok(()));
        assert_eq!(turns.take(second, Turn::Begin), Ok(()));
    }

    /// The planted defect lets the stale write land, and leaves the later write the latest.
    #[test]
    fn the_planted_defect_lets_a_superseded_write_land() {
        let (tickets, mut turns) = (Tickets::default(), Turns::default());
        let stale = tickets.issue();
        turns.take(stale, Turn::Begin).unwrap();
        let next = tickets.issue();
        turns.take(next, Turn::Begin).unwrap();
        defects::plant(Some(Defect::StaleWriteLandsLate));
        let landed = turns.take(stale, Turn::Rename);
        defects::plant(None);
        assert_eq!(landed, Ok(()));
        assert_eq!(turns.take(next, Turn::Rename), Ok(()));
    }
}
