//! The file store on a modelled local disk: the store's own rules over a map of files.
//!
//! Every decision of the store runs the file store's code: the answers to requests that
//! touch no file, the revision each file is known to be at, which writes are stale and the
//! revision a write records ([`crate::store::file::rules`]), and which of a slot's writes may
//! land ([`crate::store::file::order`]). What is modelled here is the disk under them, and
//! how it fails. A state file is replaced atomically and fsynced with its directory before
//! the write is acknowledged (invariant 6), so an acknowledged write survives a crash, and a
//! write cut off by a crash either landed whole or not at all. A disk can fail a write (full,
//! read-only): before the rename nothing changed; after it, the outcome is unknown. A write
//! can stall (a slow fsync) past the caller's timeout and go on in its thread: it takes its
//! turn to rename later, and lands only if no later write of its slot has begun. Between
//! runs a file can be torn or corrupted by hand; the next start must refuse it.

use std::collections::BTreeMap;

use super::etcd::{Note, Owner};
use super::sequence_write::{self, SequenceIndex};
use crate::layout::Slot;
use crate::sequence::{Answer, Op, Record};
use crate::store::file::order::{Ticket, Tickets, Turn, Turns};
use crate::store::file::rules::{self, Revisions};
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
    pub files: BTreeMap<Slot, FileState>,
    /// The named sequences' files (`sequences/<name>.json`): each record at its revision.
    pub sequences: BTreeMap<SequenceIndex, (i64, Record)>,
}

impl Disk {
    fn read(&self, slot: Slot) -> SlotRead {
        let stored = match self.files.get(&slot).unwrap_or(&FileState::Absent) {
            FileState::Absent => Stored::Absent,
            FileState::Good { until_ms, revision } => {
                Stored::Reserved { until_ms: *until_ms, version: Version::At(*revision) }
            }
            FileState::Corrupt => Stored::Corrupt { reason: "not JSON".into() },
        };
        SlotRead { slot, location: format!("state/worker-{slot}.json"), stored, claim_version: None }
    }

    /// An operation of a segment machine on sequence `sequence`, as the file sequence store
    /// makes it under its process's lock: the file read, compared on its revision, and
    /// replaced whole (temp file, fsync, rename, fsync of the dir). A failed write is of
    /// unknown outcome to the store, before the rename (nothing changed) or after it (the
    /// new file may or may not survive); `fault` says which ([`DiskFault::Stall`] only
    /// slows the answer, which the caller waits for).
    pub fn sequence_call(
        &mut self,
        sequence: SequenceIndex,
        op: &Op,
        fault: DiskFault,
        notes: &mut Vec<Note>,
    ) -> Answer {
        let current = self.sequences.get(&sequence).map(|(revision, record)| (Version::At(*revision), record.clone()));
        let Op::Write { expect, over, record } = op else { return Answer::Read(current) };
        let note = match sequence_write::apply(sequence, current.as_ref(), (*expect, over), record) {
            Err(refused) => return refused,
            Ok(note) => note,
        };
        let landed = match fault {
            DiskFault::None | DiskFault::Stall { .. } => true,
            DiskFault::FailedBefore => false,
            DiskFault::FailedAfter { landed } => landed,
        };
        let revision = current.map_or(0, |(version, _)| match version {
            Version::At(revision) => revision,
            Version::Absent => 0,
        }) + 1;
        if landed {
            self.sequences.insert(sequence, (revision, record.clone()));
            notes.extend(note);
        }
        match fault {
            DiskFault::None | DiskFault::Stall { .. } => Answer::Written(Version::At(revision)),
            DiskFault::FailedBefore => Answer::Unknown("no space left on device".into()),
            DiskFault::FailedAfter { .. } => Answer::Unknown("fsync of the sequences dir failed".into()),
        }
    }

    /// Whether a start would find a corrupt file (the real store refuses to open it).
    pub fn any_corrupt(&self, slots: &[Slot]) -> bool {
        slots.iter().any(|s| self.files.get(s) == Some(&FileState::Corrupt))
    }
}

/// One process's view of the disk: what the real file store keeps in memory.
#[derive(Debug)]
pub struct DiskStore {
    pub slots: Vec<Slot>,
    /// The revision each state file is known to be at.
    known: Revisions,
    /// Per slot, its writes in line, as its state file keeps them.
    lines: BTreeMap<Slot, Line>,
}

/// One slot's writes in line: the tickets handed out and whose turn it is.
#[derive(Debug, Default)]
struct Line {
    tickets: Tickets,
    turns: Turns,
}

/// A write under way; one that stalled past its caller's timeout lands later
/// ([`DiskStore::land`]).
#[derive(Debug, Clone)]
pub struct WriteUnderWay {
    slot: Slot,
    until_ms: i64,
    revision: i64,
    ticket: Ticket,
}

/// How the disk answers a request.
#[derive(Debug)]
pub enum DiskReply {
    Now(Reply),
    /// No answer before the caller gives up; the write goes on ([`DiskStore::land`]).
    Stalled(WriteUnderWay),
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
    pub fn open(disk: &Disk, slots: Vec<Slot>) -> DiskStore {
        let mut known = Revisions::default();
        for &slot in &slots {
            known.read(slot, &disk.read(slot).stored);
        }
        DiskStore { slots, known, lines: BTreeMap::new() }
    }

    /// A write of `slot` is issued and begins at once (nothing else of the process runs in
    /// between): its ticket.
    fn begin(&mut self, slot: Slot) -> Ticket {
        let line = self.lines.entry(slot).or_default();
        let ticket = line.tickets.issue();
        line.turns.take(ticket, Turn::Begin).expect("the write issued last begins");
        ticket
    }

    /// `write` takes its turn to rename into place: it lands only while no later write of
    /// its slot has begun; otherwise it is dropped. Whether it landed.
    pub fn land(&mut self, disk: &mut Disk, owner: Owner, write: WriteUnderWay, notes: &mut Vec<Note>) -> bool {
        let turns = &mut self.lines.entry(write.slot).or_default().turns;
        if turns.take(write.ticket, Turn::Rename).is_err() {
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

    pub fn apply(
        &mut self,
        disk: &mut Disk,
        owner: Owner,
        request: &Request,
        fault: DiskFault,
        notes: &mut Vec<Note>,
    ) -> DiskReply {
        let reply = match request {
            Request::ReadReservations { slots, .. } => {
                let reads: Vec<SlotRead> = slots.iter().map(|&s| disk.read(s)).collect();
                for read in &reads {
                    self.known.read(read.slot, &read.stored);
                }
                Reply::reservations(reads)
            }
            Request::WriteReservations { writes, .. } => {
                let stale = self.known.stale(writes);
                if !stale.is_empty() {
                    // As the real store does: the stale slots are read again, and the read
                    // teaches their versions, as any read does.
                    let current: Vec<SlotRead> = stale.iter().map(|&s| disk.read(s)).collect();
                    for read in &current {
                        self.known.read(read.slot, &read.stored);
                    }
                    return DiskReply::Now(Reply::WriteRefused { not_ours: Vec::new(), current });
                }
                let mut versions = Vec::new();
                for (i, write) in writes.iter().enumerate() {
                    let revision = self.known.next(write.slot);
                    let ticket = self.begin(write.slot);
                    let under_way = WriteUnderWay { slot: write.slot, until_ms: write.until_ms, revision, ticket };
                    let landed = match fault {
                        DiskFault::Stall { at } if i == at.min(writes.len() - 1) => {
                            return DiskReply::Stalled(under_way);
                        }
                        DiskFault::None | DiskFault::Stall { .. } => true,
                        DiskFault::FailedBefore => false,
                        DiskFault::FailedAfter { landed } => landed,
                    };
                    if landed {
                        // The latest write of its slot: its turn to rename comes.
                        self.land(disk, owner, under_way, notes);
                    }
                    let (error, outcome) = match fault {
                        DiskFault::None | DiskFault::Stall { .. } => {
                            versions.push((write.slot, self.known.written(write.slot, revision)));
                            continue;
                        }
                        // The model knows that nothing changed, and says so; the real store
                        // cannot tell, and says `Unknown` of every failed write.
                        DiskFault::FailedBefore => ("no space left on device", Outcome::NotApplied),
                        DiskFault::FailedAfter { .. } => ("fsync of the state dir failed", Outcome::Unknown),
                    };
                    self.known.failed(write.slot, outcome);
                    return DiskReply::Now(Reply::Failed { error: error.into(), outcome });
                }
                Reply::Written(versions)
            }
            request => rules::answer(request, &self.slots).expect("a request that touches no state file"),
        };
        DiskReply::Now(reply)
    }
}
