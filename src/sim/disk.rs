//! A model of the file store on a local disk.
//!
//! A state file is replaced atomically and fsynced with its directory before the write is
//! acknowledged (invariant 6), so an acknowledged write survives a crash, and a write cut off
//! by a crash either landed whole or not at all. A disk can fail a write (full, read-only):
//! before the rename nothing changed; after it, the outcome is unknown. A write can stall
//! (a slow fsync) past the caller's timeout and go on in its thread: it lands later only if
//! no later write of its slot has begun, as [`crate::store::file::StateFile::write`] rules.
//! Between runs a file can be torn or corrupted by hand; the next start must refuse it.

use std::collections::BTreeMap;

use super::etcd::{Note, Owner};
use crate::defects::{self, Defect};
use crate::store::{Outcome, Reply, Request, SlotRead, Stored, Version, Write};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileState {
    Absent,
    Good { until_ms: i64, revision: i64 },
    Corrupt,
}

/// The durable state of a machine's state dir.
#[derive(Debug, Default)]
pub struct Disk {
    pub files: BTreeMap<u32, FileState>,
}

impl Disk {
    fn read(&self, slot: u32) -> SlotRead {
        let stored = match self.files.get(&slot).unwrap_or(&FileState::Absent) {
            FileState::Absent => Stored::Absent,
            FileState::Good { until_ms, revision } => {
                Stored::Reserved { until_ms: *until_ms, version: Version::At(*revision) }
            }
            FileState::Corrupt => Stored::Corrupt { reason: "not JSON".into() },
        };
        SlotRead { slot, location: format!("state/worker-{slot}.json"), stored }
    }

    /// Whether a start would find a corrupt file (the real store refuses to open it).
    pub fn any_corrupt(&self, slots: &[u32]) -> bool {
        slots.iter().any(|s| self.files.get(s) == Some(&FileState::Corrupt))
    }
}

/// One process's view of the disk: the revisions it knows, as the real file store keeps them.
#[derive(Debug)]
pub struct DiskStore {
    pub slots: Vec<u32>,
    known: BTreeMap<u32, Version>,
    /// The last write ticket handed out (one counter for every slot of the process).
    tickets: u64,
    /// Per slot, the ticket of the latest write that began.
    latest: BTreeMap<u32, u64>,
}

/// A write that stalled past its caller's timeout, still under way.
#[derive(Debug, Clone)]
pub struct StalledWrite {
    slot: u32,
    until_ms: i64,
    revision: i64,
    ticket: u64,
}

/// How the disk answers a request.
#[derive(Debug)]
pub enum DiskReply {
    Now(Reply),
    /// No answer before the caller gives up; the write goes on ([`DiskStore::land`]).
    Stalled(StalledWrite),
}

/// How a write ends on a disk in trouble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskFault {
    None,
    /// The write failed before the rename: nothing changed.
    FailedBefore,
    /// The directory fsync failed after the rename: the new file may or may not survive.
    FailedAfter {
        landed: bool,
    },
    /// The write of the slot at this index of the request (the last one, when there are
    /// fewer) stalls past the caller's timeout: those before it landed, those after it never
    /// began.
    Stall {
        at: usize,
    },
}

impl DiskStore {
    pub fn open(disk: &Disk, slots: Vec<u32>) -> DiskStore {
        let known = slots.iter().filter_map(|&s| Some((s, disk.read(s).stored.version()?))).collect();
        DiskStore { slots, known, tickets: 0, latest: BTreeMap::new() }
    }

    /// A write begins: its ticket, now the latest of its slot.
    fn begin(&mut self, slot: u32) -> u64 {
        self.tickets += 1;
        self.latest.insert(slot, self.tickets);
        self.tickets
    }

    /// The stalled `write` finishes: it lands only while no later write of its slot has
    /// begun (the rule of [`crate::store::file::StateFile::write`]); otherwise it is dropped.
    /// Whether it landed.
    pub fn land(&self, disk: &mut Disk, owner: Owner, write: StalledWrite, notes: &mut Vec<Note>) -> bool {
        let latest = self.latest.get(&write.slot) == Some(&write.ticket);
        if !latest && !defects::active(Defect::StaleWriteLandsLate) {
            return false;
        }
        disk.files.insert(write.slot, FileState::Good { until_ms: write.until_ms, revision: write.revision });
        notes.push(Note::ReservationWritten {
            slot: write.slot,
            until_ms: write.until_ms,
            writer: owner,
            session: 1,
            held: true,
            fenced_ms: None,
        });
        true
    }

    fn stall(&mut self, write: &Write, revision: i64) -> DiskReply {
        let ticket = self.begin(write.slot);
        DiskReply::Stalled(StalledWrite { slot: write.slot, until_ms: write.until_ms, revision, ticket })
    }

    pub fn apply(
        &mut self,
        disk: &mut Disk,
        owner: Owner,
        request: &Request,
        fault: DiskFault,
        notes: &mut Vec<Note>,
    ) -> DiskReply {
        let reply = match request {
            Request::OpenSession { .. } => Reply::SessionOpened { session: 1, ttl: None },
            Request::ListSlots { .. } => Reply::Slots { taken: Vec::new(), ours: self.slots.clone() },
            Request::CountSlots => Reply::SlotCount { taken: self.slots.len() as u64 },
            Request::SetFence { .. } => Reply::FenceSet,
            Request::SampleClocks { .. } => Reply::PeerClocks(Vec::new()),
            Request::Claim { slot, .. } => Reply::Claimed { slot: *slot, won: self.slots.contains(slot) },
            Request::ReadReservations { slots, .. } => {
                let reads: Vec<SlotRead> = slots.iter().map(|&s| disk.read(s)).collect();
                for read in &reads {
                    if let Some(version) = read.stored.version() {
                        self.known.insert(read.slot, version);
                    }
                }
                Reply::reservations(reads)
            }
            Request::WriteReservations { writes, .. } => {
                let stale: Vec<u32> = writes
                    .iter()
                    .filter(|w| w.expect.is_some_and(|e| self.known.get(&w.slot) != Some(&e)))
                    .map(|w| w.slot)
                    .collect();
                if !stale.is_empty() {
                    let current = stale.iter().map(|&s| disk.read(s)).collect();
                    return DiskReply::Now(Reply::WriteRefused { not_ours: Vec::new(), current });
                }
                let mut versions = Vec::new();
                for (i, write) in writes.iter().enumerate() {
                    let revision = match self.known.get(&write.slot) {
                        Some(Version::At(r)) => r + 1,
                        _ => 1,
                    };
                    let landed = match fault {
                        DiskFault::Stall { at } if i == at.min(writes.len() - 1) => return self.stall(write, revision),
                        DiskFault::None | DiskFault::Stall { .. } => true,
                        DiskFault::FailedBefore => false,
                        DiskFault::FailedAfter { landed } => landed,
                    };
                    self.begin(write.slot);
                    if landed {
                        disk.files.insert(write.slot, FileState::Good { until_ms: write.until_ms, revision });
                        notes.push(Note::ReservationWritten {
                            slot: write.slot,
                            until_ms: write.until_ms,
                            writer: owner,
                            session: 1,
                            held: true,
                            fenced_ms: None,
                        });
                    }
                    match fault {
                        DiskFault::None | DiskFault::Stall { .. } => {
                            self.known.insert(write.slot, Version::At(revision));
                            versions.push((write.slot, Version::At(revision)));
                        }
                        DiskFault::FailedBefore => {
                            return DiskReply::Now(Reply::Failed {
                                error: "no space left on device".into(),
                                outcome: Outcome::NotApplied,
                            });
                        }
                        DiskFault::FailedAfter { .. } => {
                            self.known.remove(&write.slot);
                            return DiskReply::Now(Reply::Failed {
                                error: "fsync of the state dir failed".into(),
                                outcome: Outcome::Unknown,
                            });
                        }
                    }
                }
                Reply::Written(versions)
            }
            Request::Renew { .. } => Reply::Renewed { ttl: std::time::Duration::MAX, fence: None },
            Request::Release { .. } => Reply::Released,
            Request::CloseSession { .. } => Reply::SessionClosed,
        };
        DiskReply::Now(reply)
    }
}
