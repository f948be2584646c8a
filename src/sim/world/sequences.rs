//! Named sequences in a schedule: each process runs the real segment machine
//! ([`crate::sequence::Segments`]) of each of the schedule's sequences beside its keeper and
//! minter, driven as the node's sequences task drives it (`node::sequences`): one store
//! operation in flight per sequence, a call that times out answered
//! [`Answer::Unknown`], a backoff before the read that follows, callers answered in the order
//! they asked, each with all its values at once (a caller whose deadline passed leaves what
//! was gathered for it to the next), and at a clean stop every machine closed and its
//! give-back let run before the process exits.
//!
//! The records live in the etcd model (the key's mod_revision as the version, a write a
//! transaction comparing it, a read linearizable) or in each machine's state dir (a file with
//! a revision counter; one dir per machine, so its sequences are its own). Their operations
//! cross the same network as the keeper's requests (lost, delayed, duplicated, reordered,
//! replies lost after the write took effect, writes held up to land after their caller gave
//! up), and meet the same crashes, pauses, NOSPACE alarms and restores (the records go back
//! with the snapshot; the operator's `snowmint fence` then moves them past what was taken,
//! [`crate::sim::etcd::EtcdModel::fence_sequences`]). A process that meets its store gone
//! back reads it again while asked, as the node's task has it, and goes on above a fence.
//!
//! Sequences have a randomness of their own ([`Fleet::rng`]), drawn apart from the
//! schedule's, so the keeper's and minter's faults in a schedule are drawn as without them.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

use super::{Ev, MS, Mode, SECOND, World};
use crate::node::sequences::{backoff_after, exhausted, lease_of, split_off_front};
use crate::sequence::{Answer, Event, MAX_VALUE, Op, Record, SegmentConfig, Segments, SequenceError};
use crate::sim::Us;
use crate::sim::disk::DiskFault;
use crate::sim::rng::Rng;
use crate::sim::sequence_write::{self, SequenceIndex};
use crate::store::SessionId;

/// The named sequences of a schedule, and their own randomness.
#[derive(Debug)]
pub(super) struct Fleet {
    /// How many sequences each process serves (none in most schedules without them).
    pub count: usize,
    pub config: SegmentConfig,
    /// Mean time between a machine's sequence callers.
    pub ask_every: Us,
    /// Of the writes that reach etcd, the share held up in the network past their caller's
    /// timeout.
    pub held_up: f64,
    /// Which of the sequences are ordered (in etcd mode; a state dir serves its own).
    pub ordered: Vec<bool>,
    pub rng: Rng,
}

impl Fleet {
    /// The sequences of the schedule of `seed`: in about half the schedules, one or two,
    /// with small segments so that instances contend for them; some with a small maximum.
    pub fn draw(seed: u64, records: &mut Vec<Record>) -> Fleet {
        let mut rng = Rng::new(seed ^ 0x5e9a_e1ce_0b1d_7a55);
        let count = if rng.chance(0.5) { rng.between(1, 2) as usize } else { 0 };
        for _ in 0..count {
            let start =
                if rng.chance(0.1) { MAX_VALUE - rng.between(1_000, 100_000) } else { rng.between(1, 1_000_000) };
            let max = if rng.chance(0.3) { (start + rng.between(100, 3_000)).min(MAX_VALUE) } else { MAX_VALUE };
            records.push(Record::new(start, max, false).expect("a valid record"));
        }
        let min_size = rng.between(1, 20);
        let config = SegmentConfig {
            min_size,
            max_size: min_size + rng.between(0, 500),
            target_interval: Duration::from_millis(rng.between(50, 3_000)),
        };
        let ask_every = rng.between(3, 40) * MS;
        let held_up = *rng.pick(&[0.0, 0.01, 0.05]);
        // Drawn apart, so the schedules drawn before ordered sequences were are drawn alike.
        let mut ordered_rng = Rng::new(seed ^ 0x07de_7ed5_eed5_0001);
        let ordered = (0..count).map(|_| ordered_rng.chance(0.5)).collect();
        Fleet { count, config, ask_every, held_up, ordered, rng }
    }
}

/// One caller of a sequence, waiting in line.
#[derive(Debug)]
struct Caller {
    count: u64,
    /// It gives up at this instant.
    deadline: Us,
}

/// One sequence on one process.
#[derive(Debug)]
pub(super) struct Entry {
    /// What the checker and the store model know it by.
    id: SequenceIndex,
    segments: Segments,
    callers: VecDeque<Caller>,
    /// Values taken for the callers at the front so far, in order.
    gathered: Vec<Range<u64>>,
    gathered_count: u64,
    backoff: Duration,
    /// The operation in flight (sent, or waiting out its backoff), as its events name it:
    /// the machine's id above `base`.
    in_flight: Option<u64>,
    /// Where the ids of this machine's operations start in the events: a machine dropped
    /// (an ordered sequence's lease lapsed) leaves answers to its operations unseen.
    base: u64,
    /// Who serves it, if it is ordered.
    holder: Holder,
}

/// Who serves an ordered sequence, as a process knows it (`node::sequences`' `Holder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Unknown,
    /// etcd is asked.
    Asking,
    /// This process, under this lease.
    Mine(SessionId),
    /// Another process, taken at its word until then.
    Elsewhere {
        until: Us,
    },
}

impl Entry {
    /// Closed or stopped, with nothing in flight.
    pub fn is_done(&self) -> bool {
        self.segments.is_done()
    }

    /// Drops the machine with what it held and gathered (a gap) and refuses the callers, as
    /// a process that stops serving an ordered sequence does: a new machine reads it afresh,
    /// and the answers to the old one's operations go unseen. A process stopping closes the
    /// new one at once.
    fn drop_machine(&mut self, session: i64, config: SegmentConfig, stopping: bool) {
        self.base += 1 << 32;
        self.segments = Segments::new(&sequence_write::name(self.id), session, config).claims_from(self.base);
        if stopping {
            self.segments.close();
        }
        self.in_flight = None;
        self.gathered.clear();
        self.gathered_count = 0;
        self.backoff = Duration::ZERO;
        self.holder = Holder::Unknown;
        self.callers.clear();
    }
}

/// The claims of process `inc` on machine `m` are named by this session: no two processes
/// share one, as the random session each start draws in production.
pub(super) fn session(m: usize, inc: u32) -> i64 {
    ((m as i64 + 1) << 32) | i64::from(inc)
}

impl World {
    /// What the checker and the store know sequence `index` of machine `m` by: one record
    /// per sequence in etcd, one per machine's state dir.
    fn sequence_id(&self, m: usize, index: usize) -> SequenceIndex {
        match self.params.mode {
            Mode::Etcd => index as SequenceIndex,
            Mode::File => (m * 4 + index) as SequenceIndex,
        }
    }

    /// Creates the schedule's sequences (`snowmint sequence create`) and starts their callers.
    pub(super) fn create_sequences(&mut self, records: Vec<Record>) {
        for (index, mut record) in records.into_iter().enumerate() {
            match self.params.mode {
                Mode::Etcd => {
                    record.ordered = self.sequences.ordered[index];
                    self.etcd.create_sequence(0, index as SequenceIndex, record)
                }
                Mode::File => {
                    for m in 0..self.machines.len() {
                        let id = self.sequence_id(m, index);
                        self.machines[m].disk.sequences.insert(id, (1, record.clone()));
                    }
                }
            }
        }
        if self.sequences.count > 0 {
            for m in 0..self.machines.len() {
                let at = self.sequences.rng.exp(self.sequences.ask_every as f64);
                self.schedule(at, Ev::SequenceAsk { m });
            }
        }
    }

    /// The sequences of a process starting on machine `m`.
    pub(super) fn new_entries(&self, m: usize, inc: u32) -> Vec<Entry> {
        (0..self.sequences.count)
            .map(|index| {
                let id = self.sequence_id(m, index);
                Entry {
                    id,
                    segments: Segments::new(&sequence_write::name(id), session(m, inc), self.sequences.config),
                    callers: VecDeque::new(),
                    gathered: Vec::new(),
                    gathered_count: 0,
                    backoff: Duration::ZERO,
                    in_flight: None,
                    base: 0,
                    holder: Holder::Unknown,
                }
            })
            .collect()
    }

    /// A caller asks machine `m` for values of one of the sequences.
    pub(super) fn sequence_ask(&mut self, m: usize) {
        let rng = &mut self.sequences.rng;
        let index = rng.below(self.sequences.count as u64) as usize;
        let count = if rng.chance(0.9) { rng.between(1, 20) } else { rng.between(50, 400) };
        let deadline = self.now + *rng.pick(&[5, 50, 200, 1_000, 2_000]) * MS;
        let Some(p) = self.machines[m].process.as_mut() else { return };
        if p.stopping {
            return;
        }
        p.sequences[index].callers.push_back(Caller { count, deadline });
        self.serve_sequence(m, index);
        self.drive_sequence(m, index);
    }

    /// Answers the callers of sequence `index` on machine `m` that its values cover, in
    /// order, as the node's sequences task does.
    fn serve_sequence(&mut self, m: usize, index: usize) {
        if !self.sequence_serves(m, index) {
            return;
        }
        let now = self.now;
        let Some(p) = self.machines[m].process.as_mut() else { return };
        let (owner, session, stopping) = ((m, p.inc), session(m, p.inc), p.stopping);
        let entry = &mut p.sequences[index];
        let mut answered = Vec::new();
        while let Some(front) = entry.callers.front() {
            if front.deadline <= now {
                // Gone: what was gathered for it goes to the next in line.
                entry.callers.pop_front();
                continue;
            }
            let wanted = front.count.saturating_sub(entry.gathered_count);
            if wanted > 0 {
                if exhausted(&entry.segments, wanted).is_some() {
                    entry.callers.pop_front();
                    continue;
                }
                if let Some(error) = entry.segments.error() {
                    if let SequenceError::NotHolder(_) = error {
                        // Another process took it: asked again, who serves it is asked anew.
                        entry.drop_machine(session, self.sequences.config, stopping);
                        break;
                    }
                    // A store gone back is read again now and then while asked: a fence lifts it.
                    entry.segments.recheck();
                    entry.callers.clear();
                    break;
                }
                let taken = entry.segments.take(wanted);
                let got: u64 = taken.iter().map(|r| r.end - r.start).sum();
                entry.gathered.extend(taken);
                entry.gathered_count += got;
                if got < wanted {
                    break;
                }
            }
            let caller = entry.callers.pop_front().expect("the front caller");
            answered.push(split_off_front(&mut entry.gathered, caller.count));
            entry.gathered_count -= caller.count;
        }
        let (id, ordered) = (entry.id, entry.segments.is_ordered());
        let mut events = Vec::new();
        while let Some(event) = entry.segments.poll_event() {
            events.push(event);
        }
        for event in events {
            self.trace(|| format!("m{m} s{id} event {event:?}"));
            match event {
                Event::Stopped(SequenceError::WentBack { .. }) => self.report.sequences_went_back += 1,
                Event::Fenced { .. } => self.report.sequences_fenced += 1,
                _ => {}
            }
        }
        for values in answered {
            if let Some(first) = values.first() {
                self.digest(first.start);
            }
            self.checker.issued_values(now, id, owner, session, ordered, &values);
        }
    }

    /// Whether the process on machine `m` serves sequence `index` now, by the node's rule
    /// (`node::sequences`' `serves`): always, unless it is ordered. An ordered one is served
    /// while this process holds it under the lease its keeper published, while that lease's
    /// deadline is ahead ([`lease_of`]); if not, etcd is asked who holds it (the callers
    /// wait), or the callers are refused (held elsewhere, or no lease), and a holder whose
    /// lease lapsed or changed drops its machine.
    fn sequence_serves(&mut self, m: usize, index: usize) -> bool {
        let (now, boot) = (self.now, self.machines[m].boot(self.now));
        let config = self.sequences.config;
        let Some(p) = self.machines[m].process.as_mut() else { return false };
        let inc = p.inc;
        let entry = &mut p.sequences[index];
        if !entry.segments.is_ordered() {
            return true;
        }
        let lease = lease_of(&p.published, boot);
        match entry.holder {
            Holder::Mine(session) if Some(session) == lease => return true,
            Holder::Mine(_) => {
                entry.drop_machine(session(m, inc), config, p.stopping);
                self.report.sequence_leases_lapsed += 1;
            }
            Holder::Asking => {}
            Holder::Elsewhere { until } if now < until => entry.callers.clear(),
            Holder::Unknown | Holder::Elsewhere { .. } => match lease {
                None => entry.callers.clear(),
                Some(session) if !entry.callers.is_empty() => {
                    entry.holder = Holder::Asking;
                    self.send_hold(m, inc, index, session);
                }
                Some(_) => {}
            },
        }
        false
    }

    /// Sends the ask to hold ordered sequence `index` under `session` to etcd; a call that
    /// does not get through fails at its timeout.
    fn send_hold(&mut self, m: usize, inc: u32, index: usize, session: SessionId) {
        let machine = &self.machines[m];
        let lost = machine.partitioned || self.now < self.etcd_down_until || self.sequences.rng.chance(0.01);
        if lost {
            let timeout =
                machine.instant_of_boot(machine.boot(self.now) + Duration::from_micros(self.params.call_timeout()));
            let held = Err("no answer in time".to_string());
            self.schedule(timeout, Ev::SequenceHeld { m, inc, index, held });
        } else {
            let at = self.now + self.sequence_delay(m);
            self.schedule(at, Ev::SequenceHold { m, inc, index, session });
        }
    }

    /// The ask to hold a sequence reaches etcd; the answer goes back.
    pub(super) fn sequence_hold(&mut self, m: usize, inc: u32, index: usize, session: SessionId) {
        let sequence = self.sequence_id(m, index);
        let held = if self.now < self.etcd_down_until || self.machines[m].partitioned {
            Err("no answer in time".to_string())
        } else {
            self.etcd.hold(self.now, sequence, session)
        };
        let at = self.now + self.sequence_delay(m);
        self.schedule(at, Ev::SequenceHeld { m, inc, index, held });
    }

    /// Who holds ordered sequence `index` reaches the process that asked (the node's `held`):
    /// its own lease, now, makes it the holder.
    pub(super) fn sequence_held(&mut self, m: usize, index: usize, held: Result<SessionId, String>) {
        let (now, boot) = (self.now, self.machines[m].boot(self.now));
        let Some(p) = self.machines[m].process.as_mut() else { return };
        let entry = &mut p.sequences[index];
        if entry.holder != Holder::Asking {
            return;
        }
        let lease = lease_of(&p.published, boot);
        entry.holder = match held {
            Ok(session) if Some(session) == lease => {
                entry.segments.hold();
                Holder::Mine(session)
            }
            Ok(_) => Holder::Elsewhere { until: now + SECOND },
            Err(_) => {
                entry.callers.clear();
                Holder::Unknown
            }
        };
        self.serve_sequence(m, index);
        self.drive_sequence(m, index);
        self.exit_if_done(m);
    }

    /// Sends sequence `index`'s next store operation on machine `m`, if one is due: a read
    /// after an operation of unknown outcome waits out the backoff first.
    fn drive_sequence(&mut self, m: usize, index: usize) {
        let boot = self.machines[m].boot(self.now);
        let Some(p) = self.machines[m].process.as_mut() else { return };
        let inc = p.inc;
        let entry = &mut p.sequences[index];
        if entry.in_flight.is_some() {
            return;
        }
        let Some((id, op)) = entry.segments.poll_op(boot) else { return };
        let id = entry.base + id;
        entry.in_flight = Some(id);
        let backoff = entry.backoff;
        // The holder's writes of an ordered sequence hold only while its key is its own.
        let holder = match entry.holder {
            Holder::Mine(session) => Some(session),
            _ => None,
        };
        if !backoff.is_zero() && matches!(op, Op::Read) {
            let at = self.now + backoff.as_micros() as Us;
            self.schedule(at, Ev::SequenceSend { m, inc, index, id, op, holder });
        } else {
            self.send_sequence_op(m, inc, index, id, op, holder);
        }
    }

    /// Sends an operation to the store, as the keeper's requests go: to etcd over the
    /// network (its call given up after the call timeout), or to the local disk.
    pub(super) fn send_sequence_op(
        &mut self,
        m: usize,
        inc: u32,
        index: usize,
        id: u64,
        op: Op,
        holder: Option<SessionId>,
    ) {
        let sequence = self.sequence_id(m, index);
        if self.params.mode == Mode::File {
            let at = self.now + self.sequences.rng.between(200, 5_000);
            self.schedule(at, Ev::SequenceArrive { m, inc, index, sequence, id, op, holder, copy: false });
            return;
        }
        let machine = &self.machines[m];
        let timeout =
            machine.instant_of_boot(machine.boot(self.now) + Duration::from_micros(self.params.call_timeout()));
        self.schedule(timeout, Ev::SequenceTimeout { m, inc, index, id });
        let rng = &mut self.sequences.rng;
        if self.machines[m].partitioned || self.now < self.etcd_down_until || rng.chance(0.01) {
            return;
        }
        let write = matches!(op, Op::Write { .. });
        let at = if write && rng.chance(self.sequences.held_up) {
            // Held up in the network: it lands after its caller gave up on it.
            timeout + rng.exp(SECOND as f64)
        } else {
            self.now + self.sequence_delay(m)
        };
        if self.machines[m].duplicates && self.sequences.rng.chance(0.5) {
            let later = at + self.sequences.rng.exp(SECOND as f64);
            let copy = Ev::SequenceArrive { m, inc, index, sequence, id, op: op.clone(), holder, copy: true };
            self.schedule(later, copy);
        }
        self.schedule(at, Ev::SequenceArrive { m, inc, index, sequence, id, op, holder, copy: false });
    }

    /// A network delay, as [`World::delay`] draws it, from the sequences' randomness.
    fn sequence_delay(&mut self, m: usize) -> Us {
        let rng = &mut self.sequences.rng;
        let base = rng.between(100, 1_500);
        if self.machines[m].slow {
            base + rng.exp(400.0 * MS as f64)
        } else if rng.chance(0.02) {
            base + rng.exp(30.0 * MS as f64)
        } else {
            base
        }
    }

    /// An operation reaches the store; its answer goes back, unless it is lost.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn sequence_arrive(
        &mut self,
        m: usize,
        inc: u32,
        index: usize,
        sequence: SequenceIndex,
        id: u64,
        op: Op,
        holder: Option<SessionId>,
        copy: bool,
    ) {
        let now = self.now;
        let (answer, at) = match self.params.mode {
            Mode::Etcd => {
                if now < self.etcd_down_until {
                    return;
                }
                let answer = self.etcd.sequence_call(now, sequence, &op, holder);
                self.trace(|| {
                    format!("m{m} s{sequence} #{id} {op:?} lands{}: {answer:?}", if copy { " (a copy)" } else { "" })
                });
                for note in std::mem::take(&mut self.etcd.notes) {
                    self.checker.note(now, note);
                }
                let rng = &mut self.sequences.rng;
                let machine = &self.machines[m];
                if copy || machine.partitioned || (machine.reply_loss && rng.chance(0.6)) {
                    return;
                }
                (answer, now + self.sequence_delay(m))
            }
            Mode::File => {
                // A write cut off by a crash lands whole or not at all; a live one now and
                // then fails, before or after its rename, or stalls (the caller waits).
                let current = self.is_current(m, inc);
                let rng = &mut self.sequences.rng;
                let fault = if !current {
                    if rng.chance(0.5) { DiskFault::None } else { DiskFault::FailedBefore }
                } else {
                    match rng.below(100) {
                        0 => DiskFault::FailedBefore,
                        1 => DiskFault::FailedAfter { landed: rng.chance(0.5) },
                        2 => DiskFault::Stall { at: 0 },
                        _ => DiskFault::None,
                    }
                };
                let later = if fault == (DiskFault::Stall { at: 0 }) { rng.between(0, 3 * SECOND) } else { 0 };
                let mut notes = Vec::new();
                let answer = self.machines[m].disk.sequence_call(sequence, &op, fault, &mut notes);
                for note in notes {
                    self.checker.note(now, note);
                }
                (answer, now + later)
            }
        };
        self.schedule(at, Ev::SequenceAnswer { m, inc, index, id, answer });
    }

    /// The answer to operation `id` of sequence `index` reaches its process (or its call
    /// timed out: [`Answer::Unknown`]). A late answer to a call given up is never seen.
    pub(super) fn sequence_answer(&mut self, m: usize, index: usize, id: u64, answer: Answer) {
        let Some(p) = self.machines[m].process.as_mut() else { return };
        let entry = &mut p.sequences[index];
        if entry.in_flight != Some(id) {
            return;
        }
        entry.in_flight = None;
        let sequence = entry.id;
        self.trace(|| format!("m{m} s{sequence} gets #{id} {answer:?}"));
        let Some(p) = self.machines[m].process.as_mut() else { return };
        let entry = &mut p.sequences[index];
        entry.backoff = backoff_after(entry.backoff, &answer);
        entry.segments.handle_answer(id - entry.base, answer);
        self.serve_sequence(m, index);
        self.drive_sequence(m, index);
        self.exit_if_done(m);
    }

    /// A clean stop: every sequence closes (its callers refused) and gives back what it can.
    pub(super) fn close_sequences(&mut self, m: usize) {
        let Some(p) = self.machines[m].process.as_mut() else { return };
        for entry in &mut p.sequences {
            entry.segments.close();
            entry.callers.clear();
        }
        for index in 0..p.sequences.len() {
            self.drive_sequence(m, index);
        }
    }

    /// Whether every sequence of the process is done (closed or stopped, nothing in flight).
    pub(super) fn sequences_done(&self, m: usize) -> bool {
        self.machines[m].process.as_ref().is_none_or(|p| p.sequences.iter().all(Entry::is_done))
    }
}
