//! The checker: every ID issued in a schedule, and what the store did, held against the
//! promise and the invariants that keep it.
//!
//! Beyond "no ID issued twice" and "each response, and each connection's responses in the
//! order answered, increase" (the minter shares ticks among connections, so IDs leave a
//! process in increasing order per connection, not overall), it checks the invariants
//! directly, so a broken rule is caught even in a schedule where luck avoided a duplicate:
//! a mint after the minter's lease expired (4), below the floor its claim read (2), past the
//! stored reservation (1); a reservation written without holding the slot (3), or lowered
//! below an ID already minted.
//!
//! Responses answered as UUIDs ([`Checker::issued_uuids`]) are made as the service makes
//! them ([`uuid7::from_id`]) and held to what a UUID promises besides its ID's: each reads back
//! to the ID it was made from, and they strictly increase per response and per connection.

use std::collections::BTreeMap;

use super::Us;
use super::etcd::{Note, Owner};
use super::sequence_write;
use crate::layout::{Layout, Slot};
use crate::store::SessionId;
use crate::uuid7;

mod sequences;

pub use sequences::SequenceChecker;

/// How the store answered the checker's questions at the instant of a mint.
pub struct StoreView {
    /// The minter's session is alive (always, for a state file).
    pub lease_alive: bool,
    /// The minter's session holds the slot.
    pub holds: bool,
    /// The reservation stored for the slot.
    pub stored: Option<i64>,
}

#[derive(Debug, Default)]
pub struct Checker {
    /// Every ID issued so far, as disjoint runs of consecutive IDs: first → last. A minter
    /// issues runs (a tick's sequence numbers in order), so this stays small where a set of
    /// IDs would hold millions a schedule.
    seen: BTreeMap<u64, u64>,
    /// The last ID each connection to each process was given.
    last: BTreeMap<(Owner, u64), u64>,
    /// The last UUID each connection to each process was given.
    last_uuid: BTreeMap<(Owner, u64), [u8; 16]>,
    /// (slot, owner) → when the owner's claim on the slot took effect.
    claims: BTreeMap<(Slot, Owner), Us>,
    /// Per slot: every reservation write that took effect (when, value, writer, session).
    writes: BTreeMap<Slot, Vec<(Us, i64, Owner, SessionId)>>,
    /// Per slot: the end of the latest tick minted on it, Unix ms.
    minted_max: BTreeMap<Slot, i64>,
    /// The store was restored from a snapshot: the reservations it holds may be older than
    /// ones its holders wrote and saw confirmed.
    restored: bool,
    /// Slots whose reservation key an operator deleted by hand: what is stored (nothing, for
    /// a while) may be less than its holder wrote and saw confirmed.
    deleted: std::collections::BTreeSet<Slot>,
    /// Per slot: when its reservation key was deleted by hand.
    deleted_at: BTreeMap<Slot, Vec<Us>>,
    /// Every restore of the store: when the snapshot was taken, and when it was restored.
    restores: Vec<(Us, Us)>,
    /// Per (slot, owner): the end of the latest tick that owner minted on it, Unix ms.
    minted_by: BTreeMap<(Slot, Owner), i64>,
    /// Per (slot, owner): what other owners had minted on the slot when the owner's claim
    /// took effect (the end of their latest tick, Unix ms).
    others_minted_at_claim: BTreeMap<(Slot, Owner), i64>,
    /// The least history a compaction may keep (the compactor's interval, less a call's
    /// timeout and the clocks' rate error); zero where the fleet does not compact.
    pub compaction_min_kept_us: Us,
    /// The named sequences' values and segments.
    pub sequences: SequenceChecker,
    pub violations: Vec<String>,
    pub ids: u64,
    pub responses: u64,
    /// Of `ids`, those answered as UUIDs.
    pub uuids: u64,
    /// IDs minted while the slot's key was no longer the minter's (the lease alive), within
    /// the minter's own reservation: allowed, and counted.
    pub minted_on_lost_key: u64,
}

impl Checker {
    fn violation(&mut self, now: Us, what: String) {
        if self.violations.len() < 20 {
            self.violations.push(format!("at {:.3} s: {what}", now as f64 / 1e6));
        }
    }

    /// What the store did.
    pub fn note(&mut self, now: Us, note: Note) {
        match note {
            Note::Claimed { slot, owner, .. } => self.claimed(now, slot, owner),
            Note::ReservationWritten { slot, until_ms, writer, session, held, fenced_ms } => {
                if !held {
                    self.violation(
                        now,
                        format!("invariant 3: {writer:?} wrote slot {slot}'s reservation without holding the slot"),
                    );
                }
                // What a later claim floors at: the reservation, raised to the fleet's fence.
                // A lower reservation under a fence past what was minted (a late copy of an
                // old write, landing after a restore) endangers nothing.
                let minted = self.minted_max.get(&slot).copied().unwrap_or(i64::MIN);
                if until_ms.max(fenced_ms.unwrap_or(i64::MIN)) < minted {
                    self.violation(
                        now,
                        format!("{writer:?} lowered slot {slot}'s reservation to {until_ms}, below the ID minted at {minted}"),
                    );
                }
                self.writes.entry(slot).or_default().push((now, until_ms, writer, session));
            }
            Note::Freed { .. } => {}
            Note::SegmentTaken { sequence, claim, values } => self.sequences.taken(sequence, claim, values),
            Note::Restored { taken } => {
                self.restored = true;
                self.restores.push((taken, now));
            }
            Note::ReservationDeleted { slot } => {
                self.deleted.insert(slot);
                self.deleted_at.entry(slot).or_default().push(now);
            }
            Note::Compacted { revision, kept_us } => {
                if kept_us < self.compaction_min_kept_us {
                    self.violation(
                        now,
                        format!(
                            "etcd's history compacted to revision {revision}, reached only {:.3} s before, under the {:.3} s retention",
                            kept_us as f64 / 1e6,
                            self.compaction_min_kept_us as f64 / 1e6
                        ),
                    );
                }
            }
        }
    }

    /// `values` of sequence `sequence` answered to one caller by `owner`, whose claims are
    /// named by `session`.
    pub fn issued_values(
        &mut self,
        now: Us,
        sequence: sequence_write::SequenceIndex,
        owner: Owner,
        session: i64,
        ordered: bool,
        values: &[std::ops::Range<u64>],
    ) {
        for broken in self.sequences.issued(sequence, owner, session, ordered, values) {
            self.violation(now, broken);
        }
    }

    /// A process starts holding fixed slots (a state file): its claim is the start.
    pub fn claim_fixed(&mut self, now: Us, owner: Owner, slots: &[Slot]) {
        for &slot in slots {
            self.claimed(now, slot, owner);
        }
    }

    fn claimed(&mut self, now: Us, slot: Slot, owner: Owner) {
        self.claims.insert((slot, owner), now);
        let others = self
            .minted_by
            .range((slot, (0, 0))..=(slot, (usize::MAX, u32::MAX)))
            .filter(|((_, o), _)| *o != owner)
            .map(|(_, ms)| *ms)
            .max()
            .unwrap_or(i64::MIN);
        self.others_minted_at_claim.insert((slot, owner), others);
    }

    /// `ids`, one response on `connection`, issued by `owner` at `now` under `session`.
    #[allow(clippy::too_many_arguments)]
    pub fn issued(
        &mut self,
        now: Us,
        layout: &Layout,
        owner: Owner,
        connection: u64,
        session: Option<SessionId>,
        ids: &[u64],
        view: impl Fn(Slot) -> StoreView,
    ) {
        self.responses += 1;
        self.ids += ids.len() as u64;
        if ids.windows(2).any(|w| w[0] >= w[1]) {
            self.violation(now, format!("{owner:?} answered a batch that does not strictly increase"));
        }
        // Each slot's IDs of the response, checked against that slot's claim.
        let mut by_slot: BTreeMap<Slot, (u64, i64, usize)> = BTreeMap::new();
        for run in ids.chunk_by(|a, b| b.checked_sub(*a) == Some(1)) {
            let (first, last) = (run[0], run[run.len() - 1]);
            if let Some(taken) = self.record(first, last) {
                self.violation(now, format!("ID {taken} issued twice (now by {owner:?})"));
            }
            let (a, b) = (layout.unpack(first), layout.unpack(last));
            // A run stays in one tick and slot, but for the sequence's carry into the next
            // slot's bits: such a run is taken an ID at a time.
            let parts: Vec<_> = if (a.tick, a.worker) == (b.tick, b.worker) {
                vec![(a, run.len())]
            } else {
                run.iter().map(|&id| (layout.unpack(id), 1)).collect()
            };
            for (parts, count) in parts {
                let entry = by_slot.entry(parts.worker as Slot).or_insert((u64::MAX, i64::MIN, 0));
                entry.0 = entry.0.min(parts.tick);
                entry.1 = entry.1.max(layout.tick_end_ms(parts.tick));
                entry.2 += count;
            }
        }
        if let (Some(&last), Some(&first)) = (self.last.get(&(owner, connection)), ids.first())
            && first <= last
        {
            self.violation(now, format!("{owner:?} went back on connection {connection}: {first} after {last}"));
        }
        if let Some(&last) = ids.last() {
            self.last.insert((owner, connection), last);
        }
        for (slot, (lowest, tick_end, count)) in by_slot {
            self.check_slot(now, layout, owner, session, slot, lowest, tick_end, count, view(slot));
        }
    }

    /// The UUIDs of `ids` (one response on `connection`, answered as UUIDs) as the service
    /// makes them, with tails from `tail`: each must read back to its ID, and the response's,
    /// and the connection's in the order answered, must strictly increase. Their uniqueness
    /// is their IDs', which [`Checker::issued`] checks.
    pub fn issued_uuids(
        &mut self,
        now: Us,
        layout: &Layout,
        owner: Owner,
        connection: u64,
        ids: &[u64],
        tail: impl Fn(u64) -> u32,
    ) {
        let uuids: Vec<[u8; 16]> = ids.iter().map(|&id| uuid7::from_id(layout, id, tail(id))).collect();
        self.uuids += uuids.len() as u64;
        for (&id, &uuid) in ids.iter().zip(&uuids) {
            match uuid7::decode(layout, uuid) {
                Ok(read) if read.id == id && read.unix_ms == layout.tick_start_ms(layout.unpack(id).tick) => {}
                read => {
                    let text = uuid7::to_text(uuid);
                    self.violation(now, format!("UUID {text} of ID {id} (by {owner:?}) reads back as {read:?}"));
                }
            }
        }
        if uuids.windows(2).any(|w| w[0] >= w[1]) {
            self.violation(now, format!("{owner:?} answered UUIDs that do not strictly increase"));
        }
        if let (Some(&last), Some(&first)) = (self.last_uuid.get(&(owner, connection)), uuids.first())
            && first <= last
        {
            let (first, last) = (uuid7::to_text(first), uuid7::to_text(last));
            self.violation(now, format!("{owner:?} went back on UUID connection {connection}: {first} after {last}"));
        }
        if let Some(&last) = uuids.last() {
            self.last_uuid.insert((owner, connection), last);
        }
    }

    /// Records the IDs `first..=last` as issued; the lowest of them issued before, if any.
    fn record(&mut self, first: u64, last: u64) -> Option<u64> {
        record_run(&mut self.seen, first, last)
    }

    /// Checks `count` IDs minted on `slot` (ticks from `lowest`, the last one ending at
    /// `tick_end`) against the store's view at that instant.
    #[allow(clippy::too_many_arguments)]
    fn check_slot(
        &mut self,
        now: Us,
        layout: &Layout,
        owner: Owner,
        session: Option<SessionId>,
        slot: Slot,
        lowest: u64,
        tick_end: i64,
        count: usize,
        view: StoreView,
    ) {
        if session.is_none() {
            self.violation(now, format!("{owner:?} minted on slot {slot} with no session"));
        }
        // Invariant 4: never past the lease.
        if !view.lease_alive {
            self.violation(now, format!("invariant 4: {owner:?} minted on slot {slot} after its lease expired"));
        } else if !view.holds {
            self.minted_on_lost_key += count as u64;
            let own = self
                .writes
                .get(&slot)
                .into_iter()
                .flatten()
                .filter(|(_, _, w, s)| *w == owner && Some(*s) == session)
                .map(|(_, v, _, _)| *v)
                .max()
                .unwrap_or(i64::MIN);
            if tick_end > own {
                self.violation(
                    now,
                    format!("{owner:?} minted on slot {slot}, no longer its own, past its reservation"),
                );
            }
        }
        // Invariant 1: every minted tick is covered by the stored reservation. Once the store
        // was restored, it may hold less than the minter wrote and saw confirmed before: a
        // reservation this claim wrote durably covers it, lost or not.
        let own_max = || {
            self.writes
                .get(&slot)
                .into_iter()
                .flatten()
                .filter(|(_, _, w, s)| *w == owner && Some(*s) == session)
                .map(|(_, v, _, _)| *v)
                .max()
        };
        let lost = self.restored || self.deleted.contains(&slot);
        let covered = if lost { view.stored.max(own_max()) } else { view.stored };
        if covered.is_none_or(|stored| tick_end > stored) {
            self.violation(
                now,
                format!(
                    "invariant 1: {owner:?} minted up to {tick_end} on slot {slot}, past the stored reservation {:?}",
                    view.stored
                ),
            );
        }
        // Invariant 2: only above the reservations other processes wrote before the claim.
        // One that an operator deleted by hand before the claim, or that a restore threw
        // away, could not be read: the claim waits out a fence (its own, from its clock, or
        // the fleet's, set in the restore's procedure), which covers what the others minted
        // (a reservation may reach further, a fenced floor written as it is, with nothing
        // minted at it: simulator seed 96218935117), so the floor is what they had minted.
        match self.claims.get(&(slot, owner)) {
            None => self.violation(now, format!("{owner:?} minted on slot {slot} without ever claiming it")),
            Some(&claimed_at) => {
                // What another process stored last before the claim: its final shrink
                // lowers its own earlier reservations, legitimately.
                let last = self
                    .writes
                    .get(&slot)
                    .into_iter()
                    .flatten()
                    .filter(|(t, _, w, _)| *t <= claimed_at && *w != owner)
                    .map(|(t, v, _, _)| (*t, *v))
                    .next_back();
                // Deleted by hand, or thrown away by a restore to a snapshot taken before it
                // (seed 12021811556: a fenced floor, lost to a restore, above the fence the
                // claim waited out; nothing had been minted at it).
                let hidden = |written: Us| {
                    self.deleted_at.get(&slot).into_iter().flatten().any(|&at| written < at && at <= claimed_at)
                        || self.restores.iter().any(|&(taken, at)| taken < written && written < at && at <= claimed_at)
                };
                let floor = last.map(|(t, v)| {
                    if hidden(t) {
                        self.others_minted_at_claim.get(&(slot, owner)).copied().unwrap_or(i64::MIN)
                    } else {
                        v
                    }
                });
                if let Some(floor) = floor
                    && layout.tick_at(floor).is_some_and(|floor_tick| lowest <= floor_tick)
                {
                    self.violation(
                        now,
                        format!("invariant 2: {owner:?} minted tick {lowest} on slot {slot}, at or below the floor {floor} it claimed over"),
                    );
                }
            }
        }
        let max = self.minted_max.entry(slot).or_insert(i64::MIN);
        *max = (*max).max(tick_end);
        let by = self.minted_by.entry((slot, owner)).or_insert(i64::MIN);
        *by = (*by).max(tick_end);
    }
}

/// Adds the run `first..=last` to `seen` (disjoint runs of consecutive numbers, first →
/// last), merging it with the runs it touches; or, when some of it is there already, the
/// first such number, leaving `seen` as it was.
fn record_run(seen: &mut BTreeMap<u64, u64>, first: u64, last: u64) -> Option<u64> {
    // The run that starts at or below `last` nearest to it, and the one before `first`.
    if let Some((&start, &end)) = seen.range(..=last).next_back()
        && end >= first
    {
        return Some(start.max(first));
    }
    // Disjoint: merge with the runs just before and just after, when they touch.
    let mut from = first;
    let mut to = last;
    if let Some((&start, &end)) = seen.range(..first).next_back()
        && end.checked_add(1) == Some(first)
    {
        from = start;
        seen.remove(&start);
    }
    if let Some(after) = last.checked_add(1)
        && let Some(end) = seen.remove(&after)
    {
        to = end;
    }
    seen.insert(from, to);
    None
}

#[cfg(test)]
mod tests {
    use super::{Checker, StoreView};
    use crate::layout::Layout;
    use crate::sim::etcd::Note;

    /// A write that lowers a reservation below what was minted on the slot is a violation,
    /// unless the fleet's fence standing in the store reaches past what was minted: every
    /// later claim floors at the fence (a late copy of an old write landing after a restore,
    /// seed 96273628996).
    #[test]
    fn a_lowered_reservation_is_a_violation_unless_a_fence_covers_what_was_minted() {
        let layout = Layout::default_snowmint();
        let tick = |ms: i64| layout.tick_at(ms).unwrap();
        let view = || StoreView { lease_alive: true, holds: true, stored: Some(i64::MAX) };
        let a = (0, 1);
        let base = layout.epoch_ms + 1_000_000;
        for (fenced_ms, violation) in [(None, true), (Some(base + 5_000), true), (Some(base + 60_000), false)] {
            let mut c = Checker::default();
            c.note(0, Note::Claimed { slot: 2, owner: a, session: 1 });
            c.check_slot(1, &layout, a, Some(1), 2, tick(base + 10_000), base + 10_001, 1, view());
            let lowered = Note::ReservationWritten {
                slot: 2,
                until_ms: base + 2_000,
                writer: a,
                session: 1,
                held: true,
                fenced_ms,
            };
            c.note(2, lowered);
            assert_eq!(
                c.violations.iter().any(|v| v.contains("lowered slot 2")),
                violation,
                "fence {fenced_ms:?}: {:?}",
                c.violations
            );
        }
    }

    /// A reservation an operator deleted by hand before a claim could not be read by it:
    /// the claim is held to what the others had minted, not to a reservation that reached
    /// past it (a fenced floor written as it is: seed 96218935117). So is one a restore threw
    /// away (seed 12021811556). One still readable holds.
    #[test]
    fn a_reservation_deleted_before_the_claim_is_no_floor_but_what_was_minted_is() {
        let layout = Layout::default_snowmint();
        let tick = |ms: i64| layout.tick_at(ms).unwrap();
        let view = || StoreView { lease_alive: true, holds: true, stored: Some(i64::MAX) };
        let (a, b) = ((0, 1), (1, 1));
        let base = layout.epoch_ms + 1_000_000;
        // How A's reservation went before B's claim, and whether B's claim could read it.
        for (how, hidden) in [("deleted", true), ("restored away", true), ("restored, kept", false), ("kept", false)] {
            let mut c = Checker::default();
            c.note(0, Note::Claimed { slot: 2, owner: a, session: 1 });
            c.check_slot(1, &layout, a, Some(1), 2, tick(base), base + 1, 1, view());
            // A's fenced floor, written as it is, far past what it minted.
            c.note(
                2,
                Note::ReservationWritten {
                    slot: 2,
                    until_ms: base + 30_000,
                    writer: a,
                    session: 1,
                    held: true,
                    fenced_ms: None,
                },
            );
            match how {
                "deleted" => c.note(3, Note::ReservationDeleted { slot: 2 }),
                // To a snapshot taken before the write, or at it (which kept it).
                "restored away" => c.note(3, Note::Restored { taken: 1 }),
                "restored, kept" => c.note(3, Note::Restored { taken: 2 }),
                _ => {}
            }
            c.note(4, Note::Claimed { slot: 2, owner: b, session: 2 });
            // B mints above what A minted, below A's reservation.
            c.check_slot(5, &layout, b, Some(2), 2, tick(base + 10_000), base + 10_001, 1, view());
            assert_eq!(c.violations.is_empty(), hidden, "{how}: {:?}", c.violations);
            // At or below what A minted is a violation either way.
            c.check_slot(6, &layout, b, Some(2), 2, tick(base), base + 1, 1, view());
            assert!(c.violations.iter().any(|v| v.contains("invariant 2")), "{:?}", c.violations);
        }
    }

    #[test]
    fn runs_merge_and_any_overlap_is_a_duplicate() {
        let mut c = Checker::default();
        assert_eq!(c.record(10, 19), None);
        assert_eq!(c.record(30, 39), None);
        assert_eq!(c.record(20, 29), None, "touching runs are not duplicates");
        assert_eq!(c.seen.len(), 1, "and merge into one: {:?}", c.seen);
        assert_eq!(c.record(5, 10), Some(10));
        assert_eq!(c.record(39, 45), Some(39));
        assert_eq!(c.record(25, 25), Some(25));
        assert_eq!(c.record(0, 4), None);
        assert_eq!(c.record(40, 40), None);
        assert_eq!(c.record(u64::MAX, u64::MAX), None);
        assert_eq!(c.record(u64::MAX - 1, u64::MAX), Some(u64::MAX));
    }

    /// UUIDs that go back on their connection, or within a response, are violations; ones
    /// that increase are not, whatever their random tails.
    #[test]
    fn uuids_must_increase_per_response_and_per_connection() {
        let layout = Layout::default_snowmint();
        let id = |tick, sequence| layout.pack(crate::layout::Parts { tick, worker: 3, sequence });
        let mut c = Checker::default();
        c.issued_uuids(0, &layout, (0, 0), 2, &[id(10, 0), id(10, 1), id(11, 0)], |id| !(id as u32));
        c.issued_uuids(1, &layout, (0, 0), 2, &[id(12, 0)], |_| 0);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        assert_eq!(c.uuids, 4);
        c.issued_uuids(2, &layout, (0, 0), 2, &[id(11, 5)], |_| u32::MAX);
        assert!(c.violations.iter().any(|v| v.contains("went back on UUID connection 2")), "{:?}", c.violations);
        c.issued_uuids(3, &layout, (0, 1), 2, &[id(20, 1), id(20, 0)], |_| 0);
        assert!(c.violations.iter().any(|v| v.contains("do not strictly increase")), "{:?}", c.violations);
    }
}
