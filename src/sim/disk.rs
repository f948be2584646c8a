//! A model of the file store on a local disk.
//!
//! A state file is replaced atomically and fsynced with its directory before the write is
//! acknowledged (invariant 6), so an acknowledged write survives a crash, and a write cut off
//! by a crash either landed whole or not at all. A disk can fail a write (full, read-only):
//! before the rename nothing changed; after it, the outcome is unknown. Between runs a file
//! can be torn or corrupted by hand; the next start must refuse it.

use std::collections::BTreeMap;

use super::etcd::{Note, Owner};
use crate::store::{Outcome, Reply, Request, SlotRead, Stored, Version};

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
}

impl DiskStore {
    pub fn open(disk: &Disk, slots: Vec<u32>) -> DiskStore {
        let known = slots.iter().filter_map(|&s| Some((s, disk.read(s).stored.version()?))).collect();
        DiskStore { slots, known }
    }

    pub fn apply(
        &mut self,
        disk: &mut Disk,
        owner: Owner,
        request: &Request,
        fault: DiskFault,
        notes: &mut Vec<Note>,
    ) -> Reply {
        match request {
            Request::OpenSession { .. } => Reply::SessionOpened { session: 1, ttl: None },
            Request::ListSlots { .. } => Reply::Slots { taken: Vec::new(), ours: self.slots.clone() },
            Request::CountSlots => Reply::SlotCount { taken: self.slots.len() as u64 },
            Request::SampleClocks { .. } => Reply::PeerClocks(Vec::new()),
            Request::Claim { slot, .. } => Reply::Claimed { slot: *slot, won: self.slots.contains(slot) },
            Request::ReadReservations { slots, .. } => {
                let reads: Vec<SlotRead> = slots.iter().map(|&s| disk.read(s)).collect();
                for read in &reads {
                    if let Some(version) = read.stored.version() {
                        self.known.insert(read.slot, version);
                    }
                }
                Reply::Reservations(reads)
            }
            Request::WriteReservations { writes, .. } => {
                let stale: Vec<u32> = writes
                    .iter()
                    .filter(|w| w.expect.is_some_and(|e| self.known.get(&w.slot) != Some(&e)))
                    .map(|w| w.slot)
                    .collect();
                if !stale.is_empty() {
                    let current = stale.iter().map(|&s| disk.read(s)).collect();
                    return Reply::WriteRefused { not_ours: Vec::new(), current };
                }
                let mut versions = Vec::new();
                for write in writes {
                    let revision = match self.known.get(&write.slot) {
                        Some(Version::At(r)) => r + 1,
                        _ => 1,
                    };
                    let landed = match fault {
                        DiskFault::None => true,
                        DiskFault::FailedBefore => false,
                        DiskFault::FailedAfter { landed } => landed,
                    };
                    if landed {
                        disk.files.insert(write.slot, FileState::Good { until_ms: write.until_ms, revision });
                        notes.push(Note::ReservationWritten {
                            slot: write.slot,
                            until_ms: write.until_ms,
                            writer: owner,
                            session: 1,
                            held: true,
                        });
                    }
                    match fault {
                        DiskFault::None => {
                            self.known.insert(write.slot, Version::At(revision));
                            versions.push((write.slot, Version::At(revision)));
                        }
                        DiskFault::FailedBefore => {
                            return Reply::Failed {
                                error: "no space left on device".into(),
                                outcome: Outcome::NotApplied,
                            };
                        }
                        DiskFault::FailedAfter { .. } => {
                            self.known.remove(&write.slot);
                            return Reply::Failed {
                                error: "fsync of the state dir failed".into(),
                                outcome: Outcome::Unknown,
                            };
                        }
                    }
                }
                Reply::Written(versions)
            }
            Request::Renew { .. } => Reply::Renewed { ttl: std::time::Duration::MAX },
            Request::Release { .. } => Reply::Released,
            Request::CloseSession { .. } => Reply::SessionClosed,
        }
    }
}
