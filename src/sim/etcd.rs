//! A model of etcd's documented behaviour, as far as the stores use it.
//!
//! Transactions are linearizable: each request takes effect at the instant it reaches the
//! model, compares and all. Keys carry create and mod revisions from one revision counter;
//! a compare on a missing key compares against zero. Leases expire in simulated time unless
//! renewed, deleting the keys attached to them; a keep-alive on an expired or revoked lease
//! is answered "lease not found" (the store's `SessionGone`). A serializable read may be
//! served by a member that is behind: it sees the state as of an earlier instant. A
//! transaction of more than 128 operations is refused whole: a read of more than
//! [`MAX_READS`] slots or a write of more than [`MAX_WRITES`], as the store builds them.
//!
//! Compaction (the fleet's compactor, [`crate::upkeep::compactor`]): the round is a
//! transaction on the compaction key's version that also reads the fence key; a compaction
//! to a revision at or below the one compacted is answered "already compacted", one above
//! the current revision "future revision". Compaction removes only superseded versions, so
//! every read and compare the stores make (the latest value of a key, its mod revision) is
//! answered as before it; no store call reads at a past revision. It is allowed under the
//! NOSPACE alarm (the round's put is not). A snapshot keeps the compacted revision.
//!
//! etcd's NOSPACE alarm refuses every request that may write, and nothing else. Beyond the
//! stores' calls, the operator's: a reservation key deleted by hand, and the
//! whole state restored from a snapshot taken earlier (`etcdctl snapshot restore`): keys,
//! revision and leases as they were then, every lease given its full TTL again (as etcd does
//! when a leader takes office). A slot's history is modelled as one key per slot, written
//! when a reservation is (the recorder writes a claim's record once its first reservation
//! is written).
//!
//! Named sequences' records are keys too (`Key::Sequence`), their version the mod revision,
//! written by a transaction comparing it ([`super::sequence_write`]); a restore brings them
//! back with the rest, and the operator's fence moves them on ([`EtcdModel::fence_sequences`]).
//! An ordered sequence's holder is a key bound to the holder's lease (`Key::Holder`,
//! [`EtcdModel::hold`]): it goes when the lease expires, comes back with a restored snapshot,
//! and a holder's write compares it is still its own.

use std::collections::BTreeMap;

use super::Us;
use super::sequence_write::{self, SequenceIndex};
use crate::layout::Slot;
use crate::sequence::{Answer, ClaimId, Op, Record};
use crate::store::{
    Fence, MAX_READS, MAX_WRITES, Outcome, PeerClock, Reply, Request, SessionId, SlotRead, Stored, Version, Write,
};
use crate::upkeep::compactor;

/// Which process sent a request: (node, incarnation).
pub type Owner = (usize, u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Worker(Slot),
    Reservation(Slot),
    /// The slot's history holds records.
    History(Slot),
    Fence,
    /// The compaction key: what its last writer compacts to, and its version.
    Compaction,
    /// A named sequence's record (`<prefix>/sequences/<name>`).
    Sequence(SequenceIndex),
    /// The holder of an ordered sequence (`<prefix>/sequence-holders/<name>`), bound to the
    /// holder's lease.
    Holder(SequenceIndex),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Owner(Owner),
    Reservation(i64),
    Used,
    Fence(i64),
    Compaction {
        compact_to: i64,
        version: i64,
    },
    Sequence(Record),
    /// An ordered sequence's holder: the key's lease is what holds it.
    Holder,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Kv {
    pub value: Value,
    pub create_rev: i64,
    pub mod_rev: i64,
    pub lease: i64,
    /// How many times the key was put since it was created (etcd's version): 1 as built,
    /// counted on by [`EtcdModel::set`] over a key that exists.
    pub version: i64,
}

#[derive(Debug, Clone)]
struct Lease {
    ttl_us: u64,
    expires_at: Us,
}

/// What the checker needs to know of what happened in the store.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// A reservation write took effect. `held`: the writer's session held the slot then.
    /// `fenced_ms`: the fleet's fence standing in the store then (every later claim floors
    /// at it).
    ReservationWritten {
        slot: Slot,
        until_ms: i64,
        writer: Owner,
        session: SessionId,
        held: bool,
        fenced_ms: Option<i64>,
    },
    /// `owner`'s session now holds `slot`.
    Claimed { slot: Slot, owner: Owner, session: SessionId },
    /// The store was restored from a snapshot taken at `taken`: what was written since is
    /// gone.
    Restored { taken: Us },
    /// An operator deleted `slot`'s reservation key.
    ReservationDeleted { slot: Slot },
    /// etcd's history was compacted up to `revision`, which etcd first reached `kept_us`
    /// before (on the history as it is now, restores included).
    Compacted { revision: i64, kept_us: Us },
    /// The slot's worker key went away (lease expired or revoked, released, deleted by hand).
    Freed { slot: Slot },
    /// A named sequence's claim took effect: its record's `next` moved from `values.start` to
    /// `values.end` (empty when the write did not move it up) naming `claim`.
    SegmentTaken { sequence: SequenceIndex, claim: ClaimId, values: std::ops::Range<u64> },
}

/// The state a snapshot keeps.
#[derive(Debug, Clone)]
struct Snapshot {
    rev: i64,
    kv: BTreeMap<Key, Kv>,
    leases: BTreeMap<i64, Lease>,
    written_at: BTreeMap<Slot, i64>,
    compacted: i64,
}

#[derive(Debug, Default)]
pub struct EtcdModel {
    rev: i64,
    /// History up to this revision is compacted.
    compacted: i64,
    /// When each revision was first reached, on the history as it is now: (instant, revision).
    revisions: Vec<(Us, i64)>,
    kv: BTreeMap<Key, Kv>,
    leases: BTreeMap<i64, Lease>,
    next_lease: i64,
    /// Snapshots taken (when, state), the oldest first.
    snapshots: Vec<(Us, Snapshot)>,
    /// etcd's NOSPACE alarm is raised until then: every request that may write (a claim, a
    /// reservation write, the fence, a lease grant) is refused before anything is applied;
    /// reads, keep-alives and deletes go on, as etcd 3.4 does.
    pub nospace_until: Us,
    /// Every change, for reads served by a member that is behind.
    history: Vec<(Us, Key, Option<Kv>)>,
    /// Per slot, the writer's wall clock published with its latest reservation write.
    written_at: BTreeMap<Slot, i64>,
    /// Per named sequence, the end of the highest segment any claim ever took: what an
    /// operator reads from the metrics after a restore (never restored itself).
    sequence_tops: BTreeMap<SequenceIndex, u64>,
    pub notes: Vec<Note>,
}

impl EtcdModel {
    fn set(&mut self, now: Us, key: Key, kv: Option<Kv>) {
        if self.revisions.last().is_none_or(|&(_, r)| r < self.rev) {
            self.revisions.push((now, self.rev));
        }
        match &kv {
            Some(kv) => {
                let version = self.kv.get(&key).map_or(1, |old| old.version + 1);
                self.kv.insert(key, Kv { version, ..kv.clone() });
            }
            None => {
                if let (Key::Worker(slot), Some(_)) = (key, self.kv.remove(&key)) {
                    self.notes.push(Note::Freed { slot });
                }
            }
        }
        self.history.push((now, key, kv));
    }

    /// Leases past their TTL expire, with their keys.
    pub fn expire(&mut self, now: Us) {
        let expired: Vec<i64> = self.leases.iter().filter(|(_, l)| l.expires_at <= now).map(|(&id, _)| id).collect();
        for id in expired {
            self.revoke(now, id);
        }
    }

    fn revoke(&mut self, now: Us, lease: i64) {
        if self.leases.remove(&lease).is_none() {
            return;
        }
        let keys: Vec<Key> = self.kv.iter().filter(|(_, kv)| kv.lease == lease).map(|(k, _)| *k).collect();
        for key in keys {
            self.rev += 1;
            self.set(now, key, None);
        }
    }

    /// Whether `session` is a live lease at `now`.
    pub fn lease_alive(&mut self, now: Us, session: SessionId) -> bool {
        self.expire(now);
        self.leases.contains_key(&session)
    }

    /// Whether `session` holds `slot` at `now`.
    pub fn holds(&mut self, now: Us, session: SessionId, slot: Slot) -> bool {
        self.expire(now);
        self.kv.get(&Key::Worker(slot)).is_some_and(|kv| kv.lease == session)
    }

    /// Whether any session holds `slot` at `now` (its worker key is there): the hand-over
    /// script waits for a slot to be freed.
    pub fn taken(&mut self, now: Us, slot: Slot) -> bool {
        self.expire(now);
        self.kv.contains_key(&Key::Worker(slot))
    }

    /// The stored reservation of `slot`, if it is one.
    pub fn reservation(&self, slot: Slot) -> Option<i64> {
        match self.kv.get(&Key::Reservation(slot)).map(|kv| &kv.value) {
            Some(Value::Reservation(ms)) => Some(*ms),
            _ => None,
        }
    }

    /// The revision now: every answer's header carries it.
    pub fn revision(&self) -> i64 {
        self.rev
    }

    /// Takes a snapshot (`etcdctl snapshot save`), keeping the last few.
    pub fn snapshot(&mut self, now: Us) {
        let snapshot = Snapshot {
            rev: self.rev,
            kv: self.kv.clone(),
            leases: self.leases.clone(),
            written_at: self.written_at.clone(),
            compacted: self.compacted,
        };
        self.snapshots.push((now, snapshot));
        if self.snapshots.len() > 8 {
            self.snapshots.remove(0);
        }
    }

    /// The operator restores the snapshot taken at or before `taken_by` (the oldest kept if
    /// none), as `etcdctl snapshot restore` and a restart do: keys and revision as they were,
    /// every lease in it alive again for its full TTL, leases granted since gone. Returns when
    /// the snapshot was taken, if there was one.
    pub fn restore(&mut self, now: Us, taken_by: Us) -> Option<Us> {
        let index = self.snapshots.iter().rposition(|(t, _)| *t <= taken_by).unwrap_or(0);
        let (taken, snapshot) = self.snapshots.get(index).cloned()?;
        let freed: Vec<Slot> = self
            .kv
            .keys()
            .filter_map(|k| match k {
                Key::Worker(slot) if !snapshot.kv.contains_key(k) => Some(*slot),
                _ => None,
            })
            .collect();
        self.rev = snapshot.rev;
        // The revisions above the snapshot's are handed out again.
        self.revisions.retain(|&(_, r)| r <= snapshot.rev);
        self.compacted = snapshot.compacted;
        self.kv = snapshot.kv;
        self.leases = snapshot.leases;
        for lease in self.leases.values_mut() {
            lease.expires_at = now + lease.ttl_us;
        }
        self.written_at = snapshot.written_at;
        // Members restored from one snapshot serve no older state than it.
        self.history = self.kv.iter().map(|(k, kv)| (now, *k, Some(kv.clone()))).collect();
        self.snapshots.truncate(index + 1);
        for slot in freed {
            self.notes.push(Note::Freed { slot });
        }
        for (key, kv) in &self.kv {
            if let (Key::Worker(slot), Value::Owner(owner)) = (key, &kv.value) {
                self.notes.push(Note::Claimed { slot: *slot, owner: *owner, session: kv.lease });
            }
        }
        self.notes.push(Note::Restored { taken });
        Some(taken)
    }

    /// An operator deletes the reservation key of `slot` by hand.
    pub fn delete_reservation(&mut self, now: Us, slot: Slot) {
        if self.kv.contains_key(&Key::Reservation(slot)) {
            self.rev += 1;
            self.set(now, Key::Reservation(slot), None);
            self.notes.push(Note::ReservationDeleted { slot });
        }
    }

    /// The fence, as the store reads it with the floors.
    fn fence(&self) -> Option<Fence> {
        match self.kv.get(&Key::Fence) {
            Some(Kv { value: Value::Fence(until_ms), .. }) => {
                Some(Fence { until_ms: *until_ms, reason: "the fleet's fence".into() })
            }
            _ => None,
        }
    }

    /// Sets the fence (`snowmint fence`, or an instance that found the store gone back),
    /// unless a higher one stands.
    pub fn set_fence(&mut self, now: Us, until_ms: i64) {
        if self.fence().is_some_and(|f| f.until_ms >= until_ms) {
            return;
        }
        self.rev += 1;
        let create_rev = self.kv.get(&Key::Fence).map_or(self.rev, |kv| kv.create_rev);
        let kv = Kv { value: Value::Fence(until_ms), create_rev, mod_rev: self.rev, lease: 0, version: 1 };
        self.set(now, Key::Fence, Some(kv));
    }

    /// `snowmint sequence create`: sequence `sequence`'s record, unless it exists.
    pub fn create_sequence(&mut self, now: Us, sequence: SequenceIndex, record: Record) {
        let key = Key::Sequence(sequence);
        if !self.kv.contains_key(&key) {
            self.rev += 1;
            let kv =
                Kv { value: Value::Sequence(record), create_rev: self.rev, mod_rev: self.rev, lease: 0, version: 1 };
            self.set(now, key, Some(kv));
        }
    }

    fn sequence(&self, sequence: SequenceIndex) -> Option<(Version, Record)> {
        match self.kv.get(&Key::Sequence(sequence)) {
            Some(Kv { value: Value::Sequence(record), mod_rev, .. }) => Some((Version::At(*mod_rev), record.clone())),
            _ => None,
        }
    }

    /// An operation of a segment machine on sequence `sequence`, as the etcd sequence store
    /// makes it: a linearizable read, or a transaction comparing the key's mod_revision.
    /// A holder's write (`holder`: its lease) also compares that the holder key is still
    /// bound to that lease: [`Answer::NotHolder`] if not.
    pub fn sequence_call(&mut self, now: Us, sequence: SequenceIndex, op: &Op, holder: Option<SessionId>) -> Answer {
        let Op::Write { expect, over, record } = op else { return Answer::Read(self.sequence(sequence)) };
        if let Some(session) = holder {
            self.expire(now);
            if self.kv.get(&Key::Holder(sequence)).is_none_or(|kv| kv.lease != session) {
                return Answer::NotHolder;
            }
        }
        if now < self.nospace_until {
            return Answer::Unknown("etcdserver: mvcc: database space exceeded".into());
        }
        let key = Key::Sequence(sequence);
        match sequence_write::apply(sequence, self.sequence(sequence).as_ref(), (*expect, over), record) {
            Err(refused) => refused,
            Ok(note) => {
                self.rev += 1;
                let create_rev = self.kv.get(&key).map_or(self.rev, |kv| kv.create_rev);
                let value = Value::Sequence(record.clone());
                self.set(now, key, Some(Kv { value, create_rev, mod_rev: self.rev, lease: 0, version: 1 }));
                if let Some(Note::SegmentTaken { values, .. }) = &note {
                    let top = self.sequence_tops.entry(sequence).or_default();
                    *top = (*top).max(values.end);
                }
                self.notes.extend(note);
                Answer::Written(Version::At(self.rev))
            }
        }
    }

    /// Makes `session` the holder of ordered sequence `sequence` unless one is (a transaction
    /// putting the holder key bound to the lease if it has no create revision, else reading
    /// it): the lease that holds it, or why etcd refused.
    pub fn hold(&mut self, now: Us, sequence: SequenceIndex, session: SessionId) -> Result<SessionId, String> {
        self.expire(now);
        let key = Key::Holder(sequence);
        if let Some(kv) = self.kv.get(&key) {
            return Ok(kv.lease);
        }
        if now < self.nospace_until {
            return Err("etcdserver: mvcc: database space exceeded".into());
        }
        if !self.leases.contains_key(&session) {
            return Err("etcdserver: requested lease not found".into());
        }
        self.rev += 1;
        self.set(
            now,
            key,
            Some(Kv { value: Value::Holder, create_rev: self.rev, mod_rev: self.rev, lease: session, version: 1 }),
        );
        Ok(session)
    }

    /// The operator's fence of the named sequences after a restore (`snowmint fence
    /// --sequence-skip N`): each record moved up by [`Record::fence`], N the values the
    /// metrics show were taken since the snapshot (every value any segment took above the
    /// restored `next`: those issued and those held unused), by a put that moves its
    /// mod_revision on.
    pub fn fence_sequences(&mut self, now: Us) {
        let fenced: Vec<(SequenceIndex, Record)> = self
            .kv
            .iter()
            .filter_map(|(key, kv)| match (key, &kv.value) {
                (Key::Sequence(sequence), Value::Sequence(record)) => {
                    let top = self.sequence_tops.get(sequence).copied().unwrap_or(0);
                    Some((*sequence, record.fence(top.saturating_sub(record.next))))
                }
                _ => None,
            })
            .collect();
        for (sequence, record) in fenced {
            self.rev += 1;
            let key = Key::Sequence(sequence);
            let create_rev = self.kv.get(&key).map_or(self.rev, |kv| kv.create_rev);
            self.set(
                now,
                key,
                Some(Kv { value: Value::Sequence(record), create_rev, mod_rev: self.rev, lease: 0, version: 1 }),
            );
        }
    }

    /// A request of an instance's compactor.
    pub fn compaction(&mut self, now: Us, request: &compactor::Request) -> compactor::Reply {
        self.expire(now);
        let fence = match self.kv.get(&Key::Fence) {
            Some(Kv { value: Value::Fence(until_ms), mod_rev, .. }) => {
                Some(compactor::FenceKey { mod_revision: *mod_rev, value: until_ms.to_string().into_bytes() })
            }
            _ => None,
        };
        match *request {
            compactor::Request::Round { .. } if now < self.nospace_until => {
                compactor::Reply::Failed { error: "etcdserver: mvcc: database space exceeded".into() }
            }
            compactor::Request::Round { expect_version, compact_to } => {
                let (version, value, create_rev) = match self.kv.get(&Key::Compaction) {
                    Some(Kv { value: Value::Compaction { compact_to, version }, create_rev, .. }) => {
                        (*version, Some(*compact_to), *create_rev)
                    }
                    _ => (0, None, 0),
                };
                if version != expect_version {
                    return compactor::Reply::Lost { version, compact_to: value, revision: self.rev, fence };
                }
                self.rev += 1;
                let create_rev = if version == 0 { self.rev } else { create_rev };
                let value = Value::Compaction { compact_to, version: version + 1 };
                self.set(now, Key::Compaction, Some(Kv { value, create_rev, mod_rev: self.rev, lease: 0, version: 1 }));
                compactor::Reply::Won { revision: self.rev, fence }
            }
            compactor::Request::Compact { revision } if revision <= self.compacted => {
                compactor::Reply::AlreadyCompacted
            }
            compactor::Request::Compact { revision } if revision > self.rev => {
                compactor::Reply::Failed { error: "etcdserver: mvcc: required revision is a future revision".into() }
            }
            compactor::Request::Compact { revision } => {
                self.compacted = revision;
                let reached = self.revisions.iter().find(|&&(_, r)| r >= revision).map_or(now, |&(t, _)| t);
                self.notes.push(Note::Compacted { revision, kept_us: now - reached });
                compactor::Reply::Compacted
            }
        }
    }

    /// An operator deletes the worker key of `slot` by hand.
    pub fn delete_worker(&mut self, now: Us, slot: Slot) {
        if self.kv.contains_key(&Key::Worker(slot)) {
            self.rev += 1;
            self.set(now, Key::Worker(slot), None);
        }
    }

    fn read_at(&self, key: Key, at: Option<Us>) -> Option<Kv> {
        match at {
            None => self.kv.get(&key).cloned(),
            Some(at) => {
                self.history.iter().rev().find(|(t, k, _)| *k == key && *t <= at).and_then(|(_, _, kv)| kv.clone())
            }
        }
    }

    fn slot_read(&self, slot: Slot, at: Option<Us>) -> SlotRead {
        let stored = match self.read_at(Key::Reservation(slot), at) {
            // As the store tells them apart: a slot with history but no reservation.
            None if at.is_none() && self.kv.contains_key(&Key::History(slot)) => {
                Stored::Missing { reason: "no reservation, though the slot's history holds records".into() }
            }
            None => Stored::Absent,
            Some(Kv { value: Value::Reservation(ms), mod_rev, .. }) => {
                Stored::Reserved { until_ms: ms, version: Version::At(mod_rev) }
            }
            Some(Kv { value, .. }) => Stored::Corrupt { reason: format!("{value:?}, not a reservation") },
        };
        SlotRead { slot, location: format!("/sim/reservations/{slot}"), stored, claim_version: None }
    }

    /// Applies `request` from `owner` at `now`. `stale_at`: for a serializable read, the
    /// instant as of which the member that serves it is up to date.
    pub fn apply(&mut self, now: Us, owner: Owner, request: &Request, stale_at: Us) -> Reply {
        self.expire(now);
        let too_many = match request {
            Request::ReadReservations { slots, linearizable: true } => slots.len() > MAX_READS,
            Request::WriteReservations { writes, .. } => writes.len() > MAX_WRITES,
            _ => false,
        };
        if too_many {
            let error = "etcdserver: too many operations in txn request".into();
            return Reply::Failed { error, outcome: Outcome::NotApplied };
        }
        let writes = matches!(
            request,
            Request::OpenSession { .. }
                | Request::Claim { .. }
                | Request::WriteReservations { .. }
                | Request::SetFence { .. }
        );
        if writes && now < self.nospace_until {
            let error = "etcdserver: mvcc: database space exceeded".into();
            return Reply::Failed { error, outcome: Outcome::NotApplied };
        }
        match request {
            Request::OpenSession { ttl } => {
                self.next_lease += 1;
                let id = self.next_lease;
                let ttl_us = ttl.as_micros() as u64;
                self.leases.insert(id, Lease { ttl_us, expires_at: now + ttl_us });
                Reply::SessionOpened { session: id, ttl: Some(*ttl) }
            }
            Request::CountSlots => {
                Reply::SlotCount { taken: self.kv.keys().filter(|k| matches!(k, Key::Worker(_))).count() as u64 }
            }
            Request::SampleClocks { session, from, limit } => {
                // As the store samples: the first slot met of each holder other than
                // `session`, from `from` on (wrapping), up to `limit` holders.
                let mut workers: Vec<(Slot, i64)> = self
                    .kv
                    .iter()
                    .filter_map(|(k, kv)| match k {
                        Key::Worker(slot) => Some((*slot, kv.lease)),
                        _ => None,
                    })
                    .collect();
                // In slot order from `from` on, then from the start.
                let from_on = workers.partition_point(|(slot, _)| slot < from);
                workers.rotate_left(from_on);
                let mut holders: Vec<(i64, Slot)> = Vec::new();
                for (slot, lease) in workers {
                    if lease != *session && holders.len() < *limit as usize && !holders.iter().any(|&(h, _)| h == lease)
                    {
                        holders.push((lease, slot));
                    }
                }
                let clocks = holders
                    .into_iter()
                    .filter(|(_, slot)| self.reservation(*slot).is_some())
                    .filter_map(|(holder, slot)| {
                        Some(PeerClock { slot, holder, wall_ms: *self.written_at.get(&slot)? })
                    })
                    .collect();
                Reply::PeerClocks(clocks)
            }
            Request::ListSlots { session } => {
                let mut taken = Vec::new();
                let mut ours = Vec::new();
                for (key, kv) in &self.kv {
                    if let Key::Worker(slot) = key {
                        taken.push(*slot);
                        if kv.lease == *session {
                            ours.push(*slot);
                        }
                    }
                }
                Reply::Slots { taken, ours }
            }
            Request::Claim { session, slot } => {
                if !self.leases.contains_key(session) {
                    return Reply::Failed {
                        error: "etcdserver: requested lease not found".into(),
                        outcome: Outcome::NotApplied,
                    };
                }
                match self.kv.get(&Key::Worker(*slot)) {
                    None => {
                        self.rev += 1;
                        let kv = Kv {
                            value: Value::Owner(owner),
                            create_rev: self.rev,
                            mod_rev: self.rev,
                            lease: *session,
                            version: 1,
                        };
                        self.set(now, Key::Worker(*slot), Some(kv));
                        self.notes.push(Note::Claimed { slot: *slot, owner, session: *session });
                        Reply::Claimed { slot: *slot, won: true }
                    }
                    Some(kv) => Reply::Claimed { slot: *slot, won: kv.lease == *session },
                }
            }
            Request::ReadReservations { slots, linearizable } => {
                let at = (!linearizable).then_some(stale_at);
                let reads = slots.iter().map(|&slot| self.slot_read(slot, at)).collect();
                Reply::Reservations { reads, fence: if *linearizable { self.fence() } else { None } }
            }
            Request::SetFence { until_ms, .. } => {
                self.set_fence(now, *until_ms);
                Reply::FenceSet
            }
            Request::WriteReservations { session, writes, check_claim } => {
                let held = |model: &EtcdModel, slot: Slot| {
                    model.kv.get(&Key::Worker(slot)).is_some_and(|kv| kv.lease == *session)
                };
                let claim_version =
                    |model: &EtcdModel, slot: Slot| model.kv.get(&Key::Worker(slot)).map(|kv| kv.version);
                let version_ok = |model: &EtcdModel, write: &Write| {
                    let mod_rev = model.kv.get(&Key::Reservation(write.slot)).map_or(0, |kv| kv.mod_rev);
                    match write.expect {
                        None => true,
                        // As the store compares: absent, and the claim still at the version
                        // the writer knew (which the write moves on).
                        Some(Version::Absent) => {
                            mod_rev == 0
                                && write.claim_version.is_none_or(|v| claim_version(model, write.slot) == Some(v))
                        }
                        Some(Version::At(rev)) => mod_rev == rev,
                    }
                };
                let ok = writes.iter().all(|w| (!check_claim || held(self, w.slot)) && version_ok(self, w));
                if !ok {
                    let not_ours = writes.iter().filter(|w| !held(self, w.slot)).map(|w| w.slot).collect();
                    let current = writes
                        .iter()
                        .map(|w| SlotRead {
                            claim_version: claim_version(self, w.slot),
                            ..self.slot_read(w.slot, None)
                        })
                        .collect();
                    return Reply::WriteRefused { not_ours, current };
                }
                self.rev += 1;
                let rev = self.rev;
                let mut versions = Vec::new();
                for write in writes {
                    let key = Key::Reservation(write.slot);
                    let create_rev = self.kv.get(&key).map_or(rev, |kv| kv.create_rev);
                    let was_held = held(self, write.slot);
                    let kv = Kv {
                        value: Value::Reservation(write.until_ms),
                        create_rev,
                        mod_rev: rev,
                        lease: 0,
                        version: 1,
                    };
                    self.set(now, key, Some(kv));
                    if write.expect == Some(Version::Absent)
                        && write.claim_version.is_some()
                        && let Some(worker) = self.kv.get(&Key::Worker(write.slot)).cloned()
                    {
                        // Put again as it is: its version moves on.
                        self.set(now, Key::Worker(write.slot), Some(Kv { mod_rev: rev, ..worker }));
                    }
                    let used = Kv { value: Value::Used, create_rev: rev, mod_rev: rev, lease: 0, version: 1 };
                    self.kv.entry(Key::History(write.slot)).or_insert(used);
                    if write.idle {
                        self.written_at.remove(&write.slot);
                    } else {
                        self.written_at.insert(write.slot, write.wall_ms);
                    }
                    let fenced_ms = self.fence().map(|f| f.until_ms);
                    self.notes.push(Note::ReservationWritten {
                        slot: write.slot,
                        until_ms: write.until_ms,
                        writer: owner,
                        session: *session,
                        held: was_held,
                        fenced_ms,
                    });
                    versions.push((write.slot, Version::At(rev)));
                }
                Reply::Written(versions)
            }
            Request::Renew { session } => match self.leases.get_mut(session) {
                Some(lease) => {
                    lease.expires_at = now + lease.ttl_us;
                    Reply::Renewed { ttl: std::time::Duration::from_micros(lease.ttl_us), fence: self.fence() }
                }
                None => Reply::SessionGone,
            },
            Request::Release { session, slot } => {
                if self.kv.get(&Key::Worker(*slot)).is_some_and(|kv| kv.lease == *session) {
                    self.rev += 1;
                    self.set(now, Key::Worker(*slot), None);
                }
                Reply::Released
            }
            Request::CloseSession { session } => {
                self.revoke(now, *session);
                Reply::SessionClosed
            }
        }
    }
}
