//! One simulated schedule: machines running the real keeper and minter core, a model store,
//! a network between them, clients, and faults, all driven by one seed in simulated time.
//!
//! Each machine runs one process at a time (a new incarnation after a crash or a stop). A
//! process is the production driver loop written out synchronously: one store request in
//! flight with a call timeout, replies recorded by the checker at the instant they are
//! minted. The keeper and the minter are two tasks, scheduled apart as tokio schedules them:
//! the keeper publishes its holding as a watch does (the minter sees only the latest value,
//! when it next runs), and the minter runs late now and then, or sleeps through a change of
//! holding until its own timer fires; it reports progress and asks for an extension through
//! the same kind of channels. A paused or suspended process handles nothing until it
//! resumes; its events wait, in order, as a stopped process's sockets do.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::rc::Rc;
use std::time::Duration;

use super::Us;
use super::checker::{Checker, StoreView};
use super::disk::{Disk, DiskFault, DiskReply, DiskStore, FileState, WriteUnderWay};
use super::etcd::{EtcdModel, Owner};
use super::rng::Rng;
use crate::clock_filter::ClockFilter;
use crate::grant::{Holding, Minted, Progress};
use crate::keeper::{Event, Keeper, KeeperConfig, Now, SlotPolicy};
use crate::layout::{Layout, Slot};
use crate::minter::{
    Ask, ConnectionKey, Ids, MintError, MinterConfig, MinterCore, Next, NoTally, Pending, Reading, Responder,
};
use crate::node::{KeeperSide, MinterSide};
use crate::sequence::{Answer as SequenceAnswer, Op as SequenceOp};
use crate::store::etcd::Horizon;
use crate::store::{Outcome, Reply, Request, SessionId};
use crate::upkeep::compactor::{self, Compactor};

mod hand_over;
mod sequences;

/// Unix µs at simulated time zero: well after the layout's epoch.
const WALL_AT_ZERO_US: i64 = 1_780_000_000_000_000;

const MS: Us = 1_000;

/// More events than a schedule can need: something wakes in a loop. A schedule may run for
/// two minutes of simulated time and more (two fence windows of recovery): the bound grows
/// with its length, at [`MAX_EVENTS_PER_SECOND`], from [`MAX_EVENTS`].
const MAX_EVENTS: u64 = 500_000;
const MAX_EVENTS_PER_SECOND: u64 = 10_000;
const SECOND: Us = 1_000_000;

/// Which store the machines of a schedule use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Etcd,
    File,
}

/// The shape of a schedule, drawn from its seed.
#[derive(Debug, Clone)]
pub struct Params {
    pub mode: Mode,
    pub machines: usize,
    /// Slots each process holds at once.
    pub slots: usize,
    pub layout: Layout,
    pub ttl: Duration,
    pub window_ms: i64,
    pub max_clock_back_ms: u64,
    /// How far minting may run ahead of a clock behind it (zero: the strict policy).
    pub max_clock_drift: Duration,
    /// How long a forward jump must last before it is followed.
    pub forward_jump_confirm: Duration,
    /// The fleet's clock check (etcd mode). The faults' clock steps add up to more than any
    /// sensible bound, and a clock that disagrees stops minting by design, which the
    /// recovery check would count against it: so the bound is an hour, or no check, and the
    /// check's requests run among every other fault without refusing.
    pub max_fleet_skew_ms: Option<i64>,
    /// Only clock trouble within the hybrid policy's bound: steps back, corrected forward
    /// jumps, the whole fleet's clocks back at once. Refusals are recorded in the report.
    pub clock_only: bool,
    /// A scripted hand-over of one slot back and forth ([`hand_over`]) instead of faults
    /// drawn at random.
    pub hand_over: bool,
    /// Faults happen before this instant, none after.
    pub fault_until: Us,
    pub end: Us,
    /// Every live machine must mint again within this long after the faults stop.
    pub recovery_bound: Us,
    /// Mean time between faults.
    pub fault_every: Us,
    /// Mean time between a client's requests.
    pub ask_every: Us,
    /// How far apart the machines' clocks stand (each at a steady offset within this much of
    /// true time, as a fleet's clocks do within its skew bound); 0: within 20 ms. A holder
    /// whose clock is behind the one before it mints near that one's range: where a wrong
    /// floor shows.
    pub skew_us: i64,
    /// Clients fall quiet now and then (for up to seconds, before the faults stop): claims
    /// are granted and lost with nothing minted under them, and reservations stop being
    /// extended for want of minting.
    pub bursty: bool,
    /// etcd loses state now and then (etcd schedules only): restored from a snapshot, or a
    /// reservation key deleted by hand. The schedule runs long enough after the faults for a
    /// fenced claim to wait its fence out.
    pub lost_state: bool,
    /// How far past "now" a fence reaches: TTL, drift bound and window, and the clocks'
    /// spread, which the fleet's check does not bound here (its bound is an hour or none):
    /// the machines' skew and the clock faults' steps of up to 3 s each.
    pub fence_window_ms: i64,
    /// The fleet's compaction interval (etcd schedules; `None`: compaction off).
    pub compaction_interval: Option<Duration>,
}

impl Params {
    pub fn draw(rng: &mut Rng) -> Params {
        let mode = if rng.chance(0.8) { Mode::Etcd } else { Mode::File };
        let machines = rng.between(2, 4) as usize;
        let slots = if rng.chance(0.6) { 1 } else { rng.between(2, 3) as usize };
        // Few worker bits, so slots are contended and handed over often; a state dir per
        // machine needs a slot of its own for each.
        // Enough slots for every machine's, never more than twice that.
        let needed = (usize::BITS - (machines * slots - 1).leading_zeros()) as u8;
        // Now and then no spare slot at all: a machine that loses its slot while paused finds
        // it taken by one that restarted, and slots change hands back and forth.
        let worker_bits = match mode {
            Mode::Etcd if rng.chance(0.3) => needed.max(1),
            Mode::Etcd => needed.max(2) + u8::from(rng.chance(0.5)),
            Mode::File => needed,
        };
        let sequence_bits = rng.between(6, 10) as u8;
        let layout = Layout::snowmint(crate::layout::DEFAULT_EPOCH_MS, worker_bits, sequence_bits);
        let ttl = Duration::from_secs(rng.between(2, 6));
        // Around the default window (3 s) and beyond it, up to more than twice the shortest
        // TTL: a reservation can then reach past a whole hand-over and back.
        let window_ms = rng.between(300, 5_000) as i64;
        let max_clock_back_ms = 50;
        let max_clock_drift =
            if rng.chance(0.3) { Duration::ZERO } else { Duration::from_millis(rng.between(1_000, 10_000)) };
        let forward_jump_confirm = Duration::from_millis(rng.between(500, 5_000));
        let max_fleet_skew_ms = rng.chance(0.5).then_some(3_600_000);
        let fault_until = rng.between(4, 10) * SECOND;
        let skew_us = if mode == Mode::Etcd && rng.chance(0.35) {
            // Within the drift bound's half, so that a holder behind borrows rather than
            // waits; a little under the strict policy, which waits it out.
            let bound = if max_clock_drift.is_zero() {
                500_000
            } else {
                (max_clock_drift.as_micros() as u64 / 2).min(4 * SECOND)
            };
            rng.between(200_000, bound.max(200_001)) as i64
        } else {
            0
        };
        let bursty = rng.chance(0.35);
        let lost_state = mode == Mode::Etcd && rng.chance(0.3);
        let compaction_interval =
            (mode == Mode::Etcd && rng.chance(0.8)).then(|| Duration::from_millis(rng.between(1_000, 4_000)));
        let mut params = Params {
            mode,
            machines,
            slots,
            layout,
            ttl,
            window_ms,
            max_clock_back_ms,
            max_clock_drift,
            forward_jump_confirm,
            max_fleet_skew_ms,
            clock_only: false,
            hand_over: false,
            fault_until,
            end: 0,
            recovery_bound: 0,
            fault_every: rng.between(200, 800) * MS,
            ask_every: rng.between(5, 30) * MS,
            skew_us,
            bursty,
            lost_state,
            fence_window_ms: 0,
            compaction_interval,
        };
        params.settle();
        params
    }

    /// Works out what follows from the rest: how far a fence reaches, how long recovery may
    /// take after the faults stop, and when the schedule ends.
    pub(super) fn settle(&mut self) {
        let ttl_us = self.ttl.as_micros() as u64;
        let spread_ms = 2 * self.skew_us / 1_000 + 10_000;
        self.fence_window_ms =
            crate::keeper::fence_window_ms(self.ttl, self.max_clock_drift, self.window_ms, Some(spread_ms));
        // Back steps up to 3 s, a window, claims and renewals: the slowest recovery. Two
        // clocks apart by twice the skew: a holder behind waits that much more; after a
        // restore, a fenced claim waits its fence out. A reservation key deleted by hand
        // late in the faults under a standing fence is found only when its holder next
        // writes, as its minting nears that fence (an idle holder writes nothing), and the
        // fence it then sets is waited out again: two fence windows (seed 96721844484).
        self.recovery_bound = 3 * SECOND
            + self.window_ms as u64 * MS
            + 3 * ttl_us
            + 2 * SECOND
            + 2 * self.skew_us as u64
            + if self.lost_state { 2 * self.fence_window_ms as u64 * MS } else { 0 };
        // After the bound, a machine must mint again before the end. The network loses 1% of
        // requests even once the faults stop, and a lost request costs a call timeout (a
        // fifth of the TTL, 0.3 to 2 s): the tail leaves room for three lost in a row.
        let tail = 2 * SECOND + 3 * (ttl_us / 5).clamp(300 * MS, 2 * SECOND);
        self.end = self.fault_until + self.recovery_bound + tail;
    }

    fn call_timeout(&self) -> Us {
        (self.ttl / 5).clamp(Duration::from_millis(300), Duration::from_secs(2)).as_micros() as u64
    }
}

/// A fault, as injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Crash,
    GracefulRestart,
    /// The minter fails at a stop: what it minted is unknown.
    MinterFailsAtStop,
    Pause,
    /// The process is stopped right after it sends its next request (a long GC pause, a
    /// SIGSTOP at an unlucky moment), so the reply waits for it.
    PauseAfterSend,
    Suspend,
    ClockBackSmall,
    ClockBackLarge,
    ClockForward,
    /// Every machine's clock steps back at once (a bad NTP source for the whole fleet).
    FleetClockBack,
    Partition,
    SlowNetwork,
    ReplyLoss,
    Duplicates,
    KeyDeletedByHand,
    /// A slot's reservation key deleted by hand.
    ReservationDeletedByHand,
    /// etcd is stopped, restored from a snapshot taken a few seconds earlier, fenced by the
    /// operator (`snowmint fence`, before clients can reach it) and started again.
    EtcdRestored,
    /// etcd's database is full: its NOSPACE alarm refuses every write for a while, until the
    /// operator compacts, defragments and disarms it.
    EtcdNoSpace,
    DiskFull,
    DiskUnknown,
    /// A state-file write stalls past the call timeout, and finishes later.
    DiskStall,
    CorruptFile,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::Crash => "kill -9",
            Fault::GracefulRestart => "SIGTERM and restart",
            Fault::MinterFailsAtStop => "minter fails at a stop",
            Fault::Pause => "SIGSTOP",
            Fault::PauseAfterSend => "SIGSTOP right after a send",
            Fault::Suspend => "machine suspended",
            Fault::ClockBackSmall => "clock back < 50 ms",
            Fault::ClockBackLarge => "clock back seconds",
            Fault::ClockForward => "clock jump forward",
            Fault::FleetClockBack => "every clock back at once",
            Fault::Partition => "cut off from the store",
            Fault::SlowNetwork => "slow network",
            Fault::ReplyLoss => "replies lost",
            Fault::Duplicates => "requests duplicated",
            Fault::KeyDeletedByHand => "worker key deleted by hand",
            Fault::ReservationDeletedByHand => "reservation key deleted by hand",
            Fault::EtcdRestored => "etcd restored from a snapshot",
            Fault::EtcdNoSpace => "etcd out of space (NOSPACE)",
            Fault::DiskFull => "disk write fails",
            Fault::DiskUnknown => "disk write of unknown outcome",
            Fault::DiskStall => "disk write stalls past the timeout",
            Fault::CorruptFile => "state file corrupted",
        }
    }
}

/// What happens next.
#[derive(Debug, Clone)]
enum Ev {
    /// The keeper's timer, or the keeper woken by the minter (progress, an extension).
    Wake {
        m: usize,
        inc: u32,
    },
    /// The minter task runs: a request, a holding change or its own timer woke it.
    MinterWake {
        m: usize,
        inc: u32,
    },
    /// A request reaches the store.
    Arrive {
        m: usize,
        inc: u32,
        id: u64,
        request: Request,
        copy: bool,
    },
    /// The store's reply reaches the process, with the revision in its header (`None` for
    /// a serializable read and a local disk, whose headers the store does not take in).
    Answer {
        m: usize,
        inc: u32,
        id: u64,
        reply: Reply,
        revision: Option<i64>,
    },
    /// The process gives up on a request.
    CallTimeout {
        m: usize,
        inc: u32,
        id: u64,
    },
    /// A client asks a machine for IDs.
    Ask {
        m: usize,
    },
    /// A paused or suspended process runs again.
    Resume {
        m: usize,
        pause: u64,
    },
    /// A stopped machine starts a new process.
    Start {
        m: usize,
    },
    /// A wall clock is set back to the truth after a jump.
    CorrectClock {
        m: usize,
    },
    /// A state-file write that stalled past its caller's timeout finishes.
    DiskLands {
        m: usize,
        inc: u32,
        write: WriteUnderWay,
    },
    /// etcd's state is replaced by the snapshot taken at or before `taken_by`, and fenced.
    Restore {
        taken_by: Us,
    },
    /// A snapshot of etcd is taken (a backup, every second or so).
    Snapshot,
    /// The compactor's timer.
    CompactorWake {
        m: usize,
        inc: u32,
    },
    /// A compactor's request reaches etcd; its answer comes back after `back` (none: the
    /// caller gave up on it first).
    CompactorArrive {
        m: usize,
        inc: u32,
        request: compactor::Request,
        back: Option<Us>,
    },
    /// etcd's answer to a compactor, with the revision in its header.
    CompactorAnswer {
        m: usize,
        inc: u32,
        reply: compactor::Reply,
        revision: Option<i64>,
    },
    /// A network trouble ends.
    NetworkHeals {
        m: usize,
        kind: Fault,
    },
    Fault,
    /// The hand-over's script looks at the world and takes its next step when it is due.
    Script,
    /// A caller asks a machine for values of a named sequence.
    SequenceAsk {
        m: usize,
    },
    /// A sequence's operation goes to the store, its backoff waited out.
    SequenceSend {
        m: usize,
        inc: u32,
        index: usize,
        id: u64,
        op: SequenceOp,
        /// The holder's lease its write compares, for an ordered sequence.
        holder: Option<SessionId>,
    },
    /// A sequence's operation reaches the store (`sequence`: what the store knows it by).
    SequenceArrive {
        m: usize,
        inc: u32,
        index: usize,
        sequence: crate::sim::sequence_write::SequenceIndex,
        id: u64,
        op: SequenceOp,
        holder: Option<SessionId>,
        copy: bool,
    },
    /// The store's answer to a sequence's operation reaches the process.
    SequenceAnswer {
        m: usize,
        inc: u32,
        index: usize,
        id: u64,
        answer: SequenceAnswer,
    },
    /// The process gives up on a sequence's operation.
    SequenceTimeout {
        m: usize,
        inc: u32,
        index: usize,
        id: u64,
    },
    /// A process's ask to hold an ordered sequence under its lease reaches etcd.
    SequenceHold {
        m: usize,
        inc: u32,
        index: usize,
        session: SessionId,
    },
    /// Who holds an ordered sequence (its lease), or why that is not known, reaches the
    /// process that asked.
    SequenceHeld {
        m: usize,
        inc: u32,
        index: usize,
        held: Result<SessionId, String>,
    },
}

/// A reply, and the connection it answers.
type Answer = (u64, Result<Ids, MintError>);

/// One reply slot the minter core answers into.
struct SimReply {
    sink: Rc<RefCell<Vec<Answer>>>,
    connection: u64,
}

impl Responder for SimReply {
    fn is_closed(&self) -> bool {
        false
    }

    fn send(self, result: Result<Ids, MintError>) -> bool {
        self.sink.borrow_mut().push((self.connection, result));
        true
    }
}

/// One incarnation of snowmint on a machine.
struct Process {
    inc: u32,
    keeper: KeeperSide,
    minter: MinterCore<SimReply>,
    /// When the minter's progress is reported, by the minter task's rules.
    minter_side: MinterSide,
    /// The holding the keeper published last (the watch's value).
    published: Holding,
    /// The holding the minter saw at its last pass.
    holding: Holding,
    /// The minter's wake already queued.
    minter_timer: Option<Us>,
    /// Progress the minter reported that the keeper has not read yet (a watch's value).
    progress: Option<Progress>,
    /// The minter asked for an extension now (a notify the keeper has not taken yet).
    extend_wish: bool,
    in_flight: Option<u64>,
    session: Option<SessionId>,
    disk: Option<DiskStore>,
    replies: Rc<RefCell<Vec<Answer>>>,
    /// A stop was asked for: the keeper finishes; the process exits once it is done.
    stopping: bool,
    /// The timer instant already queued, to avoid flooding the queue with wakes.
    timer: Option<Us>,
    /// Forward jumps of the wall clock, confirmed before they are followed.
    filter: ClockFilter,
    /// When the filter's reference was last kept for the next process, as production does
    /// every second ([`crate::clock_memory`]).
    memory_saved: Us,
    /// The latest state of the store this process has seen, as the etcd store keeps it.
    horizon: Horizon,
    /// The fleet's compactor, as the upkeep task runs it (etcd mode, unless off), with the
    /// latest state of etcd its answers showed and its timer's instant.
    compactor: Option<Compactor>,
    compactor_horizon: Horizon,
    compactor_timer: Option<Us>,
    /// The named sequences this process serves ([`sequences`]).
    sequences: Vec<sequences::Entry>,
}

/// A machine: its clocks, its disk and its current process.
struct Machine {
    /// Boot-clock rate error, parts per million.
    ppm: i64,
    /// Where this machine's wall clock stands when nothing is wrong with it: within the
    /// schedule's skew of true time.
    base_offset_us: i64,
    wall_offset_us: i64,
    suspended_us: Us,
    /// Not running until then (SIGSTOP or suspend), and which pause it is.
    paused: Option<(Us, u64, bool)>,
    deferred: Vec<Ev>,
    process: Option<Process>,
    incarnations: u32,
    disk: Disk,
    slots: Vec<Slot>,
    /// Network trouble between this machine and the store.
    partitioned: bool,
    slow: bool,
    reply_loss: bool,
    duplicates: bool,
    next_disk_fault: DiskFault,
    /// Stop the process for this long right after its next send (of a renewal only, when
    /// the flag is set).
    pause_after_send: Option<(Us, bool)>,
    /// The last instant a client got IDs from this machine.
    last_success: Option<Us>,
    /// The last backup of a good state file, restored by the operator after corruption.
    backups: BTreeMap<Slot, FileState>,
    /// No client asks before this instant (a quiet spell of a bursty schedule).
    quiet_until: Us,
    /// The clock filter's reference as the last process kept it (the machine never reboots,
    /// so it is always of this boot).
    clock_memory: Option<i64>,
}

impl Machine {
    fn boot(&self, now: Us) -> Duration {
        let t = now as i128;
        Duration::from_micros((t + t * self.ppm as i128 / 1_000_000) as u64)
    }

    /// Keeps the last good state file of each slot, for the operator to restore.
    fn back_up(&mut self) {
        for slot in &self.slots {
            if let Some(state @ FileState::Good { .. }) = self.disk.files.get(slot) {
                self.backups.insert(*slot, state.clone());
            }
        }
    }

    /// The simulated instant at which this machine's boot clock reads `boot`.
    fn instant_of_boot(&self, boot: Duration) -> Us {
        let b = boot.as_micros() as i128;
        (b * 1_000_000 / (1_000_000 + self.ppm as i128) + 1) as Us
    }

    fn wall_us(&self, now: Us) -> i64 {
        WALL_AT_ZERO_US + now as i64 + self.wall_offset_us
    }

    /// The clocks as the process reads them: the wall clock through its filter (forward
    /// jumps followed only once they have lasted), as [`crate::clock_filter::FilteredClock`]
    /// gives them in production.
    fn clocks(&mut self, now: Us) -> (Now, Reading) {
        let boot = self.boot(now);
        let raw = self.wall_us(now);
        let wall_us = match self.process.as_mut() {
            Some(p) => p.filter.filter(raw, boot).0,
            None => raw,
        };
        let awake = boot.saturating_sub(Duration::from_micros(self.suspended_us));
        (Now { wall_ms: wall_us.div_euclid(1000), boot }, Reading { wall_us, boot, awake })
    }
}

/// What one schedule did.
#[derive(Debug, Default)]
pub struct Report {
    pub violations: Vec<String>,
    pub ids: u64,
    pub responses: u64,
    /// Of `ids`, those answered as UUIDs.
    pub uuids: u64,
    pub faults: BTreeMap<&'static str, u64>,
    pub minted_on_lost_key: u64,
    /// Calls refused after the first second (recorded only for clock-only worlds).
    pub refusals: Vec<String>,
    /// A digest of everything that happened, to show that a seed replays exactly.
    pub digest: u64,
    /// Events handled.
    pub events: u64,
    /// Compactions of etcd's history the fleet made.
    pub compactions: u64,
    /// Values of named sequences handed to callers, every one checked.
    pub sequence_values: u64,
    /// Sequences stopped on a process that found their store gone back (a restore).
    pub sequences_went_back: u64,
    /// Sequences that a process running across a restore took up again above the fence.
    pub sequences_fenced: u64,
    /// Ordered sequences a process stopped serving as the lease it held them under lapsed.
    pub sequence_leases_lapsed: u64,
}

/// The connection whose answers are taken as UUIDs (its asks are small batches), as a
/// `BatchUuids` caller's are: made from the IDs the minter issued.
const UUID_CONNECTION: u64 = 2;

/// A UUID's random tail, from its ID: a stand-in for the system's random source that costs
/// the schedule's own random stream nothing, so seeds replay as before.
fn uuid_tail(id: u64) -> u32 {
    let mut z = id.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

pub struct World {
    params: Params,
    rng: Rng,
    now: Us,
    queue: BinaryHeap<Reverse<(Us, u64)>>,
    events: BTreeMap<u64, Ev>,
    next_seq: u64,
    machines: Vec<Machine>,
    etcd: EtcdModel,
    checker: Checker,
    report: Report,
    next_pause: u64,
    /// etcd answers nothing before this instant (stopped for a restore): requests that reach
    /// it meanwhile are never carried out.
    etcd_down_until: Us,
    tracing: bool,
    /// The hand-over's script, in a schedule of that kind.
    script: Option<hand_over::Script>,
    /// The named sequences of the schedule (none in many).
    sequences: sequences::Fleet,
}

/// The kinds of schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Faults drawn at random.
    Random,
    /// Clock trouble within the bound only ([`World::clock_trouble`]).
    ClockTrouble,
    /// One slot handed over back and forth between two machines ([`hand_over`]).
    HandOver,
}

impl World {
    /// The schedule of `seed`: mostly faults drawn at random, and for a share of seeds a
    /// scripted hand-over ([`hand_over`]).
    pub fn new(seed: u64) -> World {
        World::with(seed, if hand_over::drawn(seed) { Kind::HandOver } else { Kind::Random })
    }

    /// A world whose only faults are clock trouble within the hybrid policy's bound (steps
    /// back totalling at most 9 s of a 10 s bound, forward jumps corrected before the 10 s
    /// confirmation window, the fleet's clocks back at once), in which no call may be refused.
    pub fn clock_trouble(seed: u64) -> World {
        World::with(seed, Kind::ClockTrouble)
    }

    fn with(seed: u64, kind: Kind) -> World {
        let mut rng = Rng::new(seed);
        let mut params = Params::draw(&mut rng);
        match kind {
            Kind::Random => {}
            Kind::ClockTrouble => {
                params.clock_only = true;
                params.max_clock_drift = Duration::from_secs(10);
                params.forward_jump_confirm = Duration::from_secs(10);
                params.skew_us = 0;
                params.bursty = false;
            }
            Kind::HandOver => hand_over::shape(&mut params, &mut rng),
        }
        let mut records = Vec::new();
        let mut fleet = sequences::Fleet::draw(seed, &mut records);
        if kind != Kind::Random {
            fleet.count = 0;
            records.clear();
        }
        let skew = params.skew_us;
        let machines = (0..params.machines)
            .map(|i| Machine {
                ppm: rng.between(0, 400) as i64 - 200,
                base_offset_us: if skew > 0 { rng.between(0, 2 * skew as u64) as i64 - skew } else { 0 },
                wall_offset_us: rng.between(0, 40_000) as i64 - 20_000,
                suspended_us: 0,
                paused: None,
                deferred: Vec::new(),
                process: None,
                incarnations: 0,
                disk: Disk::default(),
                slots: (0..params.slots as Slot).map(|k| (i * params.slots) as Slot + k).collect(),
                partitioned: false,
                slow: false,
                reply_loss: false,
                duplicates: false,
                next_disk_fault: DiskFault::None,
                pause_after_send: None,
                last_success: None,
                backups: BTreeMap::new(),
                quiet_until: 0,
                clock_memory: None,
            })
            .map(|mut machine: Machine| {
                machine.wall_offset_us += machine.base_offset_us;
                machine
            })
            .collect();
        // A round's answer comes within a call timeout of its send, and the next round an
        // interval later on a clock whose rate is within 250 ppm.
        let compaction_min_kept_us = params
            .compaction_interval
            .map_or(0, |interval| (interval.as_micros() as u64 * 9_997 / 10_000).saturating_sub(params.call_timeout()));
        let mut world = World {
            params,
            rng,
            now: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            next_seq: 0,
            machines,
            etcd: EtcdModel::default(),
            checker: Checker::default(),
            report: Report::default(),
            next_pause: 0,
            etcd_down_until: 0,
            tracing: std::env::var_os("SNOWMINT_SIM_TRACE").is_some(),
            script: None,
            sequences: fleet,
        };
        world.create_sequences(records);
        world.checker.compaction_min_kept_us = compaction_min_kept_us;
        for m in 0..world.machines.len() {
            let at = world.rng.between(0, 300) * MS;
            world.schedule(at, Ev::Start { m });
            let at = world.rng.exp(world.params.ask_every as f64);
            world.schedule(at, Ev::Ask { m });
        }
        if kind == Kind::HandOver {
            world.start_script();
        } else {
            let first_fault = world.rng.exp(world.params.fault_every as f64) + SECOND;
            world.schedule(first_fault, Ev::Fault);
        }
        if world.params.mode == Mode::Etcd {
            world.schedule(SECOND / 2, Ev::Snapshot);
        }
        world
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    fn schedule(&mut self, at: Us, ev: Ev) {
        self.next_seq += 1;
        self.queue.push(Reverse((at, self.next_seq)));
        self.events.insert(self.next_seq, ev);
    }

    /// Prints what happens when `SNOWMINT_SIM_TRACE` is set (a replay of one seed).
    fn trace(&self, what: impl FnOnce() -> String) {
        if self.tracing {
            eprintln!("{:>10.6} {}", self.now as f64 / 1e6, what());
        }
    }

    fn digest(&mut self, value: u64) {
        // FNV-1a over 64-bit words.
        self.report.digest = (self.report.digest ^ value).wrapping_mul(0x0000_0100_0000_01b3);
    }

    /// Runs the schedule to its end and checks it.
    pub fn run(mut self) -> Report {
        self.report.digest = 0xcbf2_9ce4_8422_2325;
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            if at > self.params.end {
                break;
            }
            let max_events = MAX_EVENTS.max(MAX_EVENTS_PER_SECOND * (self.params.end / SECOND));
            if self.report.events > max_events {
                // A process waking in a loop is a bug too (it would spin a core).
                self.report
                    .violations
                    .push(format!("over {max_events} events by {:.3} s: something wakes in a loop", at as f64 / 1e6));
                break;
            }
            self.now = at;
            let ev = self.events.remove(&seq).expect("queued event");
            self.digest(at ^ (seq << 40));
            self.report.events += 1;
            self.handle(ev);
        }
        self.check_liveness();
        self.report.violations.append(&mut self.checker.violations);
        self.report.ids = self.checker.ids;
        self.report.uuids = self.checker.uuids;
        self.report.responses = self.checker.responses;
        self.report.minted_on_lost_key = self.checker.minted_on_lost_key;
        self.report.sequence_values = self.checker.sequences.values;
        self.report
    }

    fn check_liveness(&mut self) {
        let since = self.params.fault_until + self.params.recovery_bound;
        for (m, machine) in self.machines.iter().enumerate() {
            if machine.process.is_none() {
                continue;
            }
            if machine.last_success.is_none_or(|t| t < since) {
                self.report.violations.push(format!(
                    "liveness: machine {m} minted nothing within {:.1} s after the faults stopped (last at {:?} s)",
                    self.params.recovery_bound as f64 / 1e6,
                    machine.last_success.map(|t| t as f64 / 1e6)
                ));
            }
        }
    }

    /// Whether events for machine `m` must wait (it is paused), deferring `ev` if so.
    fn deferred(&mut self, m: usize, ev: &Ev) -> bool {
        if self.machines[m].paused.is_some() {
            self.machines[m].deferred.push(ev.clone());
            return true;
        }
        false
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Wake { m, inc } => {
                if self.deferred(m, &Ev::Wake { m, inc }) || !self.is_current(m, inc) {
                    return;
                }
                // As the driver's one sleep: a wake that a later step replaced is stale (run,
                // its copies would each queue the next wake, and multiply).
                let now = self.now;
                let p = self.process_mut(m);
                if p.timer != Some(now) {
                    return;
                }
                p.timer = None;
                let (now, _) = self.machines[m].clocks(self.now);
                self.process_mut(m).keeper.keeper_mut().handle_timeout(now);
                self.step(m);
            }
            Ev::MinterWake { m, inc } => {
                if self.deferred(m, &Ev::MinterWake { m, inc }) || !self.is_current(m, inc) {
                    return;
                }
                // One wake is queued at a time: one that an earlier wake replaced is stale.
                let now = self.now;
                let p = self.process_mut(m);
                if p.minter_timer != Some(now) {
                    return;
                }
                p.minter_timer = None;
                self.minter_step(m);
            }
            Ev::Arrive { m, inc, id, request, copy } => self.arrive(m, inc, id, request, copy),
            Ev::Answer { m, inc, id, reply, revision } => {
                let ev = Ev::Answer { m, inc, id, reply, revision };
                if self.deferred(m, &ev) || !self.is_current(m, inc) {
                    return;
                }
                let Ev::Answer { reply, revision, .. } = ev else { unreachable!() };
                // A late answer to a request no longer awaited (its call timed out) is never
                // seen: the store's future for it was dropped, header and all.
                if self.process_mut(m).in_flight != Some(id) {
                    return;
                }
                // As the etcd store does: a header below one seen before means the store
                // went back in time.
                let reply = match revision.and_then(|r| self.process_mut(m).horizon.saw(1, r)) {
                    Some(detail) => Reply::WentBack { detail, reply: Box::new(reply) },
                    None => reply,
                };
                self.answer(m, id, reply);
            }
            Ev::CallTimeout { m, inc, id } => {
                if self.deferred(m, &Ev::CallTimeout { m, inc, id }) || !self.is_current(m, inc) {
                    return;
                }
                let reply = Reply::Failed { error: "no answer in time".into(), outcome: Outcome::Unknown };
                self.answer(m, id, reply);
            }
            Ev::Ask { m } => {
                let next = self.now + self.rng.exp(self.params.ask_every as f64).max(100);
                self.schedule(next, Ev::Ask { m });
                if self.quiet(m) || self.deferred(m, &Ev::Ask { m }) {
                    return;
                }
                self.ask(m);
            }
            Ev::DiskLands { m, inc, write } => {
                // A stopped process's threads are stopped too; a dead one's write died with it.
                let ev = Ev::DiskLands { m, inc, write };
                if self.deferred(m, &ev) || !self.is_current(m, inc) {
                    return;
                }
                let Ev::DiskLands { write, .. } = ev else { unreachable!() };
                self.land(m, inc, write);
            }
            Ev::Resume { m, pause } => self.resume(m, pause),
            Ev::Start { m } => self.start(m),
            Ev::CorrectClock { m } => {
                self.machines[m].wall_offset_us =
                    self.machines[m].base_offset_us + self.rng.between(0, 40_000) as i64 - 20_000;
                if !self.deferred(m, &Ev::Wake { m, inc: self.machines[m].incarnations })
                    && self.machines[m].process.is_some()
                {
                    self.step(m);
                }
            }
            Ev::Restore { taken_by } => {
                let now = self.now;
                if let Some(taken) = self.etcd.restore(now, taken_by) {
                    for note in std::mem::take(&mut self.etcd.notes) {
                        self.checker.note(now, note);
                    }
                    self.trace(|| format!("etcd restored from the snapshot of {:.3} s", taken as f64 / 1e6));
                    // `snowmint fence`, on the operator's clock (within the skew of true time).
                    let params = &self.params;
                    let wall_ms = (WALL_AT_ZERO_US + now as i64 + params.skew_us).div_euclid(1000);
                    self.etcd.set_fence(now, wall_ms + params.fence_window_ms);
                    // The same command moves the named sequences past what was taken.
                    self.etcd.fence_sequences(now);
                }
            }
            Ev::Snapshot => {
                self.etcd.snapshot(self.now);
                if self.now < self.params.fault_until {
                    let next = self.now + self.rng.between(300 * MS, 1_500 * MS);
                    self.schedule(next, Ev::Snapshot);
                }
            }
            Ev::CompactorWake { m, inc } => {
                if self.deferred(m, &Ev::CompactorWake { m, inc }) || !self.is_current(m, inc) {
                    return;
                }
                let now = self.now;
                let p = self.process_mut(m);
                if p.compactor_timer != Some(now) {
                    return;
                }
                p.compactor_timer = None;
                self.compactor_step(m);
            }
            Ev::CompactorArrive { m, inc, request, back } => {
                if self.now < self.etcd_down_until {
                    // Lost: the caller's timeout answers it (about when the reply would have).
                    if let Some(back) = back {
                        let reply = compactor::Reply::Failed { error: "no answer in time".into() };
                        self.schedule(self.now + back, Ev::CompactorAnswer { m, inc, reply, revision: None });
                    }
                    return;
                }
                let reply = self.etcd.compaction(self.now, &request);
                for note in std::mem::take(&mut self.etcd.notes) {
                    self.checker.note(self.now, note);
                }
                if let compactor::Reply::Compacted = reply {
                    self.report.compactions += 1;
                }
                if let Some(back) = back {
                    let revision = Some(self.etcd.revision());
                    self.schedule(self.now + back, Ev::CompactorAnswer { m, inc, reply, revision });
                }
            }
            Ev::CompactorAnswer { m, inc, reply, revision } => {
                let ev = Ev::CompactorAnswer { m, inc, reply, revision };
                if self.deferred(m, &ev) || !self.is_current(m, inc) {
                    return;
                }
                let Ev::CompactorAnswer { reply, revision, .. } = ev else { unreachable!() };
                let (tracing, now) = (self.tracing, self.now);
                let boot = self.machines[m].boot(now);
                let p = self.process_mut(m);
                if let Some(compactor) = p.compactor.as_mut() {
                    if let Some(detail) = revision.and_then(|r| p.compactor_horizon.saw(1, r)) {
                        compactor.went_back(detail);
                    }
                    compactor.handle_reply(boot, reply);
                    while let Some(event) = compactor.poll_event() {
                        if tracing {
                            eprintln!("{:>10.6} m{m} compactor {event:?}", now as f64 / 1e6);
                        }
                    }
                }
                self.compactor_step(m);
            }
            Ev::NetworkHeals { m, kind } => {
                let machine = &mut self.machines[m];
                match kind {
                    Fault::Partition => machine.partitioned = false,
                    Fault::SlowNetwork => machine.slow = false,
                    Fault::ReplyLoss => machine.reply_loss = false,
                    Fault::Duplicates => machine.duplicates = false,
                    _ => {}
                }
            }
            Ev::Script => self.direct(),
            Ev::SequenceAsk { m } => {
                let next = self.now + self.sequences.rng.exp(self.sequences.ask_every as f64).max(100);
                self.schedule(next, Ev::SequenceAsk { m });
                if self.now < self.machines[m].quiet_until || self.deferred(m, &Ev::SequenceAsk { m }) {
                    return;
                }
                self.sequence_ask(m);
            }
            Ev::SequenceSend { m, inc, index, id, op, holder } => {
                let ev = Ev::SequenceSend { m, inc, index, id, op, holder };
                if self.deferred(m, &ev) || !self.is_current(m, inc) {
                    return;
                }
                let Ev::SequenceSend { op, .. } = ev else { unreachable!() };
                self.send_sequence_op(m, inc, index, id, op, holder);
            }
            Ev::SequenceArrive { m, inc, index, sequence, id, op, holder, copy } => {
                self.sequence_arrive(m, inc, index, sequence, id, op, holder, copy)
            }
            Ev::SequenceHold { m, inc, index, session } => self.sequence_hold(m, inc, index, session),
            Ev::SequenceHeld { m, inc, index, held } => {
                let ev = Ev::SequenceHeld { m, inc, index, held };
                if self.deferred(m, &ev) || !self.is_current(m, inc) {
                    return;
                }
                let Ev::SequenceHeld { held, .. } = ev else { unreachable!() };
                self.sequence_held(m, index, held);
            }
            Ev::SequenceAnswer { m, inc, index, id, answer } => {
                let ev = Ev::SequenceAnswer { m, inc, index, id, answer };
                if self.deferred(m, &ev) || !self.is_current(m, inc) {
                    return;
                }
                let Ev::SequenceAnswer { answer, .. } = ev else { unreachable!() };
                self.sequence_answer(m, index, id, answer);
            }
            Ev::SequenceTimeout { m, inc, index, id } => {
                if self.deferred(m, &Ev::SequenceTimeout { m, inc, index, id }) || !self.is_current(m, inc) {
                    return;
                }
                self.sequence_answer(m, index, id, SequenceAnswer::Unknown("no answer in time".into()));
            }
            Ev::Fault => {
                if self.now < self.params.fault_until {
                    self.inject();
                    let next = self.now + self.rng.exp(self.params.fault_every as f64).max(10 * MS);
                    self.schedule(next, Ev::Fault);
                }
            }
        }
    }

    /// Whether machine `m`'s client is quiet now (bursty schedules, before the faults stop):
    /// now and then a quiet spell of up to a few seconds begins.
    fn quiet(&mut self, m: usize) -> bool {
        if !self.params.bursty || self.now >= self.params.fault_until {
            return false;
        }
        if self.now < self.machines[m].quiet_until {
            return true;
        }
        if self.rng.chance(0.02) {
            let spell = self.rng.between(300 * MS, 3 * SECOND);
            self.machines[m].quiet_until = (self.now + spell).min(self.params.fault_until);
            return true;
        }
        false
    }

    fn is_current(&self, m: usize, inc: u32) -> bool {
        self.machines[m].process.as_ref().is_some_and(|p| p.inc == inc)
    }

    fn process_mut(&mut self, m: usize) -> &mut Process {
        self.machines[m].process.as_mut().expect("a process runs")
    }

    // ---- Processes ----

    fn start(&mut self, m: usize) {
        let now = self.now;
        let machine = &mut self.machines[m];
        if machine.process.is_some() {
            return;
        }
        machine.incarnations += 1;
        let inc = machine.incarnations;
        let (policy, disk) = match self.params.mode {
            Mode::Etcd => (SlotPolicy::Leased { count: self.params.slots, preferred: Vec::new() }, None),
            Mode::File => {
                if machine.disk.any_corrupt(&machine.slots) {
                    // The real store refuses to open a corrupt state file: the start fails and
                    // mints nothing. The operator restores the last good backup, and starts
                    // it again.
                    for slot in machine.slots.clone() {
                        let backup = machine.backups.get(&slot).cloned().unwrap_or(FileState::Absent);
                        machine.disk.files.insert(slot, backup);
                    }
                    let at = now + SECOND;
                    self.schedule(at, Ev::Start { m });
                    return;
                }
                (SlotPolicy::Fixed(machine.slots.clone()), Some(DiskStore::open(&machine.disk, machine.slots.clone())))
            }
        };
        let params = &self.params;
        let keeper = Keeper::new(KeeperConfig {
            policy,
            ttl: params.ttl,
            window_ms: params.window_ms,
            layout: params.layout.clone(),
            seed: self.rng.next_u64(),
            max_fleet_skew_ms: params.max_fleet_skew_ms,
            fence_window_ms: params.fence_window_ms,
            max_clock_drift_ms: params.max_clock_drift.as_millis() as i64,
        });
        let minter = MinterCore::new(
            MinterConfig {
                layout: params.layout.clone(),
                max_clock_back: Duration::from_millis(params.max_clock_back_ms),
                max_clock_drift: params.max_clock_drift,
                max_wait: Duration::from_secs(1),
                fair_quantum: crate::minter::FAIR_QUANTUM,
            },
            Box::new(NoTally),
        )
        .expect("the simulated layout is mintable");
        if self.params.mode == Mode::File {
            let slots = self.machines[m].slots.clone();
            self.checker.claim_fixed(now, (m, inc), &slots);
        }
        self.machines[m].process = Some(Process {
            inc,
            keeper: KeeperSide::new(keeper),
            minter,
            minter_side: MinterSide::default(),
            published: Holding::Unheld { reason: "starting".into() },
            holding: Holding::Unheld { reason: "starting".into() },
            minter_timer: None,
            progress: None,
            extend_wish: false,
            in_flight: None,
            session: None,
            disk,
            replies: Rc::default(),
            stopping: false,
            timer: None,
            filter: {
                let (threshold, confirm) = (Duration::from_millis(500), self.params.forward_jump_confirm);
                match self.machines[m].clock_memory {
                    Some(high) => ClockFilter::seeded(threshold, confirm, high),
                    None => ClockFilter::new(threshold, confirm),
                }
            },
            memory_saved: now,
            horizon: Horizon::default(),
            compactor: None,
            compactor_horizon: Horizon::default(),
            compactor_timer: None,
            sequences: self.new_entries(m, inc),
        });
        if self.params.mode == Mode::Etcd
            && let Some(interval) = self.params.compaction_interval
        {
            // The first round at a random point within an interval, as the task spreads them.
            let first = self.machines[m].boot(now) + interval.mul_f64(self.rng.below(1_000) as f64 / 1_000.0);
            let call_timeout = Duration::from_micros(self.params.call_timeout());
            self.process_mut(m).compactor = Some(Compactor::new(interval, first, call_timeout));
            self.compactor_step(m);
        }
        self.step(m);
    }

    /// The keeper's driver loop, once: the minter's progress and wishes in, requests out,
    /// the holding published, the next timer.
    fn step(&mut self, m: usize) {
        let now = self.now;
        let (kn, _) = self.machines[m].clocks(now);
        let mut sent = None;
        let mut published = false;
        {
            let machine = &mut self.machines[m];
            let Some(p) = machine.process.as_mut() else { return };
            // As the keeper task's turns: what the minter reported, the request due, the
            // events, then the holding; again while the minter wished for an extension.
            for _ in 0..3 {
                if let Some(progress) = p.progress.take() {
                    p.keeper.progress(&progress);
                }
                if let Some((id, request)) = p.keeper.poll_request(kn, p.in_flight.is_some()) {
                    p.in_flight = Some(id);
                    sent = Some((id, request));
                }
                let (session, tracing) = (&mut p.session, self.tracing);
                let holding = p.keeper.drain(|event| {
                    if let Event::SessionOpened { session: opened, .. } = event {
                        *session = Some(opened);
                    }
                    if tracing {
                        eprintln!("{:>10.6} m{m} event {event:?}", now as f64 / 1e6);
                    }
                });
                if let Some(holding) = holding {
                    if self.tracing {
                        eprintln!("{:>10.6} m{m} holding {holding:?}", now as f64 / 1e6);
                    }
                    p.published = holding;
                    published = true;
                }
                if p.keeper.finishing() || !std::mem::take(&mut p.extend_wish) {
                    break;
                }
                p.keeper.extend_now();
            }
        }
        if published {
            self.holding_changed(m);
        }
        if let Some((id, request)) = sent {
            self.trace(|| format!("m{m} sends #{id} {request:?}"));
            let renewal = matches!(request, Request::Renew { .. });
            self.send(m, id, request);
            if let Some((d, renewal_only)) = self.machines[m].pause_after_send
                && (renewal || !renewal_only)
            {
                self.machines[m].pause_after_send = None;
                self.pause(m, d, false);
            }
        }
        let machine = &mut self.machines[m];
        if let Some(p) = machine.process.as_mut()
            && now >= p.memory_saved + SECOND
        {
            p.memory_saved = now;
            machine.clock_memory = p.filter.high_offset_us().or(machine.clock_memory);
        }
        let machine = &self.machines[m];
        let Some(p) = machine.process.as_ref() else { return };
        if p.stopping && p.keeper.keeper().is_done() {
            self.exit_if_done(m);
            return;
        }
        if !p.stopping
            && let Some(error) = p.keeper.keeper().fatal()
        {
            // The start fails (every slot taken, a corrupt reservation): as the driver does,
            // the process gives back what it claimed, then exits non-zero and its supervisor
            // starts it again.
            self.trace(|| format!("m{m} start fails: {error}"));
            let p = self.machines[m].process.as_mut().expect("running");
            p.stopping = true;
            p.keeper.finish(Minted::Unknown);
            self.close_sequences(m);
            self.step(m);
            return;
        }
        if let Some(at) = p.keeper.keeper().poll_timeout(kn).map(|b| machine.instant_of_boot(b)) {
            let at = at.max(now + 1);
            if self.tracing && at < now + 100 {
                eprintln!("{:>10.6} m{m} keeper wakes again at {at}", now as f64 / 1e6);
            }
            let inc = p.inc;
            if p.timer.is_none_or(|t| at < t || t <= now) {
                self.process_mut(m).timer = Some(at);
                self.schedule(at, Ev::Wake { m, inc });
            }
        }
    }

    /// The minter task's turn: it takes the latest holding published (values published in
    /// between are never seen), passes, answers, and reports to the keeper as the task does.
    fn minter_step(&mut self, m: usize) {
        let (_, reading) = self.machines[m].clocks(self.now);
        let mut wake_keeper = false;
        let next = {
            let Some(p) = self.machines[m].process.as_mut() else { return };
            if p.stopping {
                return;
            }
            // As the minter task does: the keeper hears of progress now and then, and at
            // once before the minter takes a holding whose claims changed.
            p.holding = p.published.clone();
            if let Some(progress) = p.minter_side.before_pass(&p.minter, &p.holding) {
                p.progress = Some(progress);
                wake_keeper = true;
            }
            let (next, to_keeper) = p.minter_side.pass(&mut p.minter, reading, &p.holding);
            // The events go to the logs and metrics in production; here nowhere.
            while p.minter.poll_event().is_some() {}
            if let Some(progress) = to_keeper.progress {
                p.progress = Some(progress);
                wake_keeper = true;
            }
            if to_keeper.extend_now {
                p.extend_wish = true;
                wake_keeper = true;
            }
            next
        };
        self.record_replies(m);
        if wake_keeper {
            let at = self.now + self.task_lag();
            self.wake_keeper(m, at);
        }
        if let Next::At(boot) = next {
            let at = self.machines[m].instant_of_boot(boot).max(self.now + 1);
            let at = at + self.task_lag();
            self.wake_minter(m, at);
        }
    }

    /// How late a woken task runs: mostly at once, now and then after other work (a busy
    /// runtime, a precise tick wait on another thread), rarely much later.
    fn task_lag(&mut self) -> Us {
        match self.rng.below(100) {
            0..=84 => self.rng.between(0, 100),
            85..=96 => self.rng.between(100, 5 * MS),
            _ => self.rng.between(5 * MS, 100 * MS),
        }
    }

    /// The keeper published a holding: the minter is woken to see it, unless it is in a
    /// wait of its own that does not watch the holding (it sees the latest at its timer).
    fn holding_changed(&mut self, m: usize) {
        let now = self.now;
        let Some(p) = self.machines[m].process.as_ref() else { return };
        if p.minter_timer.is_some_and(|t| t > now && t < now + 5 * MS) && self.rng.chance(0.5) {
            return;
        }
        let at = now + self.task_lag();
        self.wake_minter(m, at);
    }

    fn wake_minter(&mut self, m: usize, at: Us) {
        let now = self.now;
        let Some(p) = self.machines[m].process.as_mut() else { return };
        if p.minter_timer.is_none_or(|t| at < t || t <= now) {
            p.minter_timer = Some(at);
            let inc = p.inc;
            self.schedule(at, Ev::MinterWake { m, inc });
        }
    }

    fn wake_keeper(&mut self, m: usize, at: Us) {
        let now = self.now;
        let Some(p) = self.machines[m].process.as_mut() else { return };
        if p.timer.is_none_or(|t| at < t || t <= now) {
            p.timer = Some(at);
            let inc = p.inc;
            self.schedule(at, Ev::Wake { m, inc });
        }
    }

    fn record_replies(&mut self, m: usize) {
        let now = self.now;
        let Some(p) = self.machines[m].process.as_ref() else { return };
        let replies: Vec<_> = p.replies.borrow_mut().drain(..).collect();
        let owner: Owner = (m, p.inc);
        let session = p.session;
        let layout = self.params.layout.clone();
        for (connection, reply) in replies {
            let ids = match reply {
                Ok(Ids::One(id)) => vec![id],
                Ok(Ids::Many(ids)) => ids,
                Err(error) => {
                    if self.params.clock_only && now > SECOND {
                        self.report.refusals.push(format!("m{m} at {:.3} s: {error}", now as f64 / 1e6));
                    }
                    continue;
                }
            };
            for &id in ids.iter().take(4) {
                self.digest(id);
            }
            self.machines[m].last_success = Some(now);
            let mode = self.params.mode;
            let etcd = &mut self.etcd;
            let machine = &self.machines[m];
            let view = |slot: Slot| match mode {
                Mode::Etcd => {
                    let session = session.unwrap_or(-1);
                    StoreView {
                        lease_alive: etcd.lease_alive(now, session),
                        holds: etcd.holds(now, session, slot),
                        stored: etcd.reservation(slot),
                    }
                }
                Mode::File => StoreView {
                    lease_alive: true,
                    holds: true,
                    stored: match machine.disk.files.get(&slot) {
                        Some(FileState::Good { until_ms, .. }) => Some(*until_ms),
                        _ => None,
                    },
                },
            };
            if connection == UUID_CONNECTION {
                self.checker.issued_uuids(now, &layout, owner, connection, &ids, uuid_tail);
            }
            // The closure borrows the store mutably for lazy lease expiry.
            let view = RefCell::new(view);
            self.checker.issued(now, &layout, owner, connection, session, &ids, |slot| (view.borrow_mut())(slot));
        }
    }

    /// Sends the compactor's due request, if any, as the upkeep task does (one at a time,
    /// given up after a call timeout), and sets its timer.
    fn compactor_step(&mut self, m: usize) {
        let boot = self.machines[m].boot(self.now);
        let Some(p) = self.machines[m].process.as_mut() else { return };
        let inc = p.inc;
        let Some(compactor) = p.compactor.as_mut() else { return };
        if let Some(request) = compactor.poll_request(boot) {
            self.trace(|| format!("m{m} compactor sends {request:?}"));
            let timeout = self.params.call_timeout();
            let lost = self.machines[m].partitioned || self.now < self.etcd_down_until || self.rng.chance(0.01);
            let (there, back) = (self.delay(m), self.delay(m));
            if !lost {
                let back = (there + back <= timeout).then_some(back);
                self.schedule(self.now + there, Ev::CompactorArrive { m, inc, request, back });
                if back.is_some() {
                    return;
                }
            }
            let reply = compactor::Reply::Failed { error: "no answer in time".into() };
            self.schedule(self.now + timeout, Ev::CompactorAnswer { m, inc, reply, revision: None });
            return;
        }
        let machine = &self.machines[m];
        let Some(at) = machine.process.as_ref().and_then(|p| p.compactor.as_ref()?.poll_timeout()) else { return };
        let at = machine.instant_of_boot(at).max(self.now);
        let p = self.process_mut(m);
        if p.compactor_timer.is_none_or(|t| t != at) {
            p.compactor_timer = Some(at);
            self.schedule(at, Ev::CompactorWake { m, inc });
        }
    }

    fn ask(&mut self, m: usize) {
        let Some(p) = self.machines[m].process.as_mut() else { return };
        if p.stopping {
            return;
        }
        // Mostly small asks, now and then a batch that spans several ticks; each kind from its
        // own connection, so the minter's fair queue interleaves them (and keeps each one's
        // requests in order). Outside clock-only worlds (where no call may be refused), bulk
        // batches from several connections too, and deadlines from a few ms to a second, so
        // batches are cut off part filled and refused for want of time.
        let bulk = !self.params.clock_only;
        let (ask, connection) = match self.rng.below(if bulk { 24 } else { 20 }) {
            0..=9 => (Ask::One, 1),
            10..=18 => (Ask::Many(self.rng.between(1, 20) as usize), UUID_CONNECTION),
            19 => (Ask::Many(self.rng.between(100, 600) as usize), 3),
            _ => (Ask::Many(self.rng.between(600, 5_000) as usize), 4 + self.rng.below(3)),
        };
        let wait_ms = if bulk { *self.rng.pick(&[2, 10, 50, 200, 500, 500, 1_000]) } else { 500 };
        let boot = self.machines[m].boot(self.now);
        let p = self.process_mut(m);
        let reply = SimReply { sink: p.replies.clone(), connection };
        let deadline = boot + Duration::from_millis(wait_ms);
        p.minter.push(Pending::new(ask, ConnectionKey(connection), boot, deadline, reply));
        let at = self.now + self.task_lag();
        self.wake_minter(m, at);
    }

    fn answer(&mut self, m: usize, id: u64, reply: Reply) {
        if self.process_mut(m).in_flight != Some(id) {
            return;
        }
        self.trace(|| format!("m{m} gets #{id} {reply:?}"));
        let (kn, _) = self.machines[m].clocks(self.now);
        let p = self.process_mut(m);
        p.in_flight = None;
        p.keeper.keeper_mut().handle_reply(kn, id, reply);
        self.step(m);
    }

    fn send(&mut self, m: usize, id: u64, request: Request) {
        let inc = self.process_mut(m).inc;
        let machine = &self.machines[m];
        let timeout =
            machine.instant_of_boot(machine.boot(self.now) + Duration::from_micros(self.params.call_timeout()));
        self.schedule(timeout, Ev::CallTimeout { m, inc, id });
        match self.params.mode {
            Mode::File => {
                // The local disk: an fsync or two.
                let at = self.now + self.rng.between(200, 5_000);
                self.schedule(at, Ev::Arrive { m, inc, id, request, copy: false });
            }
            Mode::Etcd => {
                // Lost on the way (never in a clock-only world, whose refusals must come from
                // the clock alone).
                if self.machines[m].partitioned
                    || self.now < self.etcd_down_until
                    || (self.rng.chance(0.01) && !self.params.clock_only)
                {
                    self.trace(|| format!("m{m} request #{id} lost"));
                    return;
                }
                let at = self.now + self.delay(m);
                if self.machines[m].duplicates && self.rng.chance(0.5) {
                    // A copy stuck in a queue somewhere (a retry by a proxy, a member that
                    // forwards it late) lands much later.
                    let later = at + self.rng.exp(SECOND as f64);
                    self.schedule(later, Ev::Arrive { m, inc, id, request: request.clone(), copy: true });
                }
                self.schedule(at, Ev::Arrive { m, inc, id, request, copy: false });
            }
        }
    }

    fn delay(&mut self, m: usize) -> Us {
        let base = self.rng.between(100, 1_500);
        if self.machines[m].slow {
            base + self.rng.exp(400.0 * MS as f64)
        } else if self.rng.chance(0.02) {
            base + self.rng.exp(30.0 * MS as f64)
        } else {
            base
        }
    }

    fn arrive(&mut self, m: usize, inc: u32, id: u64, request: Request, copy: bool) {
        let now = self.now;
        let owner = (m, inc);
        let mut revision = None;
        if self.params.mode == Mode::Etcd && now < self.etcd_down_until {
            self.trace(|| format!("m{m} request #{id} reaches an etcd that is down"));
            return;
        }
        let reply = match self.params.mode {
            Mode::Etcd => {
                // A member behind by up to a second serves serializable reads.
                let stale_at = now.saturating_sub(self.rng.between(0, SECOND));
                let reply = self.etcd.apply(now, owner, &request, stale_at);
                for note in std::mem::take(&mut self.etcd.notes) {
                    self.checker.note(now, note);
                }
                let serializable = matches!(request, Request::ReadReservations { linearizable: false, .. });
                revision = (!serializable).then(|| self.etcd.revision());
                reply
            }
            Mode::File => {
                // A write cut off by a crash lands whole or not at all.
                let current = self.is_current(m, inc);
                let fault = if !current {
                    if self.rng.chance(0.5) { DiskFault::None } else { DiskFault::FailedBefore }
                } else if matches!(request, Request::WriteReservations { .. }) {
                    std::mem::replace(&mut self.machines[m].next_disk_fault, DiskFault::None)
                } else {
                    DiskFault::None
                };
                let machine = &mut self.machines[m];
                let mut notes = Vec::new();
                let reply = match machine.process.as_mut().filter(|p| p.inc == inc).and_then(|p| p.disk.as_mut()) {
                    Some(store) => store.apply(&mut machine.disk, owner, &request, fault, &mut notes),
                    None => {
                        // The process died with the write under way.
                        let mut store = DiskStore::open(&machine.disk, machine.slots.clone());
                        store.apply(&mut machine.disk, owner, &request, fault, &mut notes)
                    }
                };
                machine.back_up();
                for note in notes {
                    self.checker.note(now, note);
                }
                match reply {
                    DiskReply::Now(reply) => reply,
                    DiskReply::Stalled(write) => {
                        // No answer: the call times out, and the write goes on.
                        let at = now + self.params.call_timeout() + self.rng.between(0, 2 * SECOND);
                        self.schedule(at, Ev::DiskLands { m, inc, write });
                        return;
                    }
                }
            }
        };
        if copy
            || (self.params.mode == Mode::Etcd
                && (self.machines[m].partitioned || (self.machines[m].reply_loss && self.rng.chance(0.6))))
        {
            self.trace(|| format!("m{m} reply to #{id} lost (copy {copy})"));
            return; // the reply is lost (or this was a duplicate nobody waits for)
        }
        let at = match self.params.mode {
            Mode::Etcd => now + self.delay(m),
            Mode::File => now,
        };
        self.schedule(at, Ev::Answer { m, inc, id, reply, revision });
    }

    /// The stalled `write` of process `inc` on machine `m` finishes.
    fn land(&mut self, m: usize, inc: u32, write: WriteUnderWay) {
        let machine = &mut self.machines[m];
        let Some(store) = machine.process.as_mut().and_then(|p| p.disk.as_mut()) else { return };
        let mut notes = Vec::new();
        let landed = store.land(&mut machine.disk, (m, inc), write, &mut notes);
        machine.back_up();
        for note in notes {
            self.checker.note(self.now, note);
        }
        self.trace(|| format!("m{m} stalled write {}", if landed { "lands" } else { "dropped" }));
    }

    /// The process ends once its keeper is done and its sequences have given back what they
    /// could (after a stop).
    fn exit_if_done(&mut self, m: usize) {
        let Some(p) = self.machines[m].process.as_ref() else { return };
        if p.stopping && p.keeper.keeper().is_done() && self.sequences_done(m) {
            self.exit(m);
        }
    }

    /// The process ends (after a stop); a new one starts a little later.
    fn exit(&mut self, m: usize) {
        self.machines[m].process = None;
        let at = self.now + self.rng.between(10, 1_000) * MS;
        self.schedule(at, Ev::Start { m });
    }

    fn resume(&mut self, m: usize, pause: u64) {
        let machine = &mut self.machines[m];
        let Some((_, id, suspended)) = machine.paused else { return };
        if id != pause {
            return;
        }
        let _ = suspended;
        machine.paused = None;
        let deferred = std::mem::take(&mut machine.deferred);
        for ev in deferred {
            match ev {
                // The request a client sent while the process was stopped; its next one is
                // already scheduled.
                Ev::Ask { m } => self.ask(m),
                Ev::SequenceAsk { m } => self.sequence_ask(m),
                ev => self.handle(ev),
            }
        }
        if self.machines[m].process.is_some() {
            let (now, _) = self.machines[m].clocks(self.now);
            self.process_mut(m).keeper.keeper_mut().handle_timeout(now);
            self.step(m);
            // The minter's timers, due or not, fire as the process runs again.
            let at = self.now + self.task_lag();
            self.wake_minter(m, at);
        }
    }

    // ---- Faults ----

    /// etcd is stopped for a while (every machine cut off from it), restored from a snapshot
    /// taken up to a few seconds before it stopped, fenced, and started again: the documented
    /// procedure. The outage lasts at least a TTL (a restore takes that long and more), so
    /// every claim the restore loses has passed its deadline before etcd answers again.
    fn restore_etcd(&mut self) {
        let ttl_us = self.params.ttl.as_micros() as u64;
        let outage = self.rng.between(ttl_us, 2 * ttl_us).min(self.params.fault_until.saturating_sub(self.now));
        if outage < ttl_us {
            return;
        }
        let taken_by = self.now.saturating_sub(self.rng.between(500 * MS, 5 * SECOND));
        self.etcd_down_until = self.etcd_down_until.max(self.now + outage);
        // The restore happens while etcd is down; the fence goes in before it answers.
        self.schedule(self.now + outage - 1, Ev::Restore { taken_by });
    }

    /// Stops machine `m`'s process for `d` (a suspend stops its awake clock too).
    fn pause(&mut self, m: usize, d: Us, suspended: bool) {
        if self.machines[m].paused.is_some() || self.now >= self.params.fault_until {
            return;
        }
        // Every fault is over when the fault phase ends.
        let d = d.min(self.params.fault_until - self.now);
        self.next_pause += 1;
        let id = self.next_pause;
        self.trace(|| format!("m{m} stopped for {:.3} s", d as f64 / 1e6));
        self.machines[m].paused = Some((self.now + d, id, suspended));
        if suspended {
            self.machines[m].suspended_us += d;
        }
        self.schedule(self.now + d, Ev::Resume { m, pause: id });
    }

    /// Clock trouble within the bound: every step corrected later, the outstanding steps
    /// back of a machine never beyond 9 s.
    fn inject_clock_trouble(&mut self) {
        let kinds = [Fault::ClockBackSmall, Fault::ClockBackLarge, Fault::ClockForward, Fault::FleetClockBack];
        let fault = *self.rng.pick(&kinds);
        let m = self.rng.below(self.machines.len() as u64) as usize;
        *self.report.faults.entry(fault.name()).or_default() += 1;
        self.trace(|| format!("FAULT {} on m{m}", fault.name()));
        let step = match fault {
            Fault::ClockBackSmall => -(self.rng.between(1, 40) as i64) * 1_000,
            Fault::ClockForward => self.rng.between(500, 3_000) as i64 * 1_000,
            _ => -(self.rng.between(200, 3_000) as i64) * 1_000,
        };
        let hit: Vec<usize> = if fault == Fault::FleetClockBack { (0..self.machines.len()).collect() } else { vec![m] };
        if hit.iter().any(|&m| self.machines[m].wall_offset_us + step < -9 * SECOND as i64) {
            return;
        }
        for m in hit {
            self.machines[m].wall_offset_us += step;
            let at = self.now + self.rng.between(100, 3_000) * MS;
            self.schedule(at, Ev::CorrectClock { m });
        }
    }

    fn inject(&mut self) {
        if self.params.clock_only {
            return self.inject_clock_trouble();
        }
        let etcd = self.params.mode == Mode::Etcd;
        let mut kinds = vec![
            Fault::Crash,
            Fault::GracefulRestart,
            Fault::MinterFailsAtStop,
            Fault::Pause,
            Fault::PauseAfterSend,
            Fault::PauseAfterSend,
            Fault::Suspend,
            Fault::ClockBackSmall,
            Fault::ClockBackSmall,
            Fault::ClockBackLarge,
            Fault::ClockForward,
            Fault::FleetClockBack,
        ];
        if etcd {
            kinds.extend([
                Fault::Partition,
                Fault::SlowNetwork,
                Fault::ReplyLoss,
                Fault::Duplicates,
                Fault::KeyDeletedByHand,
                Fault::EtcdNoSpace,
            ]);
            if self.params.lost_state {
                kinds.extend([Fault::ReservationDeletedByHand, Fault::EtcdRestored]);
            }
        } else {
            kinds.extend([Fault::DiskFull, Fault::DiskUnknown, Fault::DiskStall, Fault::CorruptFile]);
        }
        let fault = *self.rng.pick(&kinds);
        let m = self.rng.below(self.machines.len() as u64) as usize;
        self.trace(|| format!("FAULT {} on m{m}", fault.name()));
        *self.report.faults.entry(fault.name()).or_default() += 1;
        self.digest(fault as u64);
        let ttl_us = self.params.ttl.as_micros() as u64;
        match fault {
            Fault::Crash => {
                if self.machines[m].process.take().is_some() {
                    let at = self.now + self.rng.between(50, 3_000) * MS;
                    self.schedule(at, Ev::Start { m });
                }
            }
            Fault::GracefulRestart | Fault::MinterFailsAtStop => {
                if self.machines[m].paused.is_some() {
                    return;
                }
                let Some(p) = self.machines[m].process.as_mut() else { return };
                if p.stopping {
                    return;
                }
                p.stopping = true;
                p.minter.refuse_all(MintError::ShuttingDown);
                let minted = if fault == Fault::MinterFailsAtStop { Minted::Unknown } else { p.minter.minted() };
                p.keeper.finish(minted);
                self.close_sequences(m);
                self.step(m);
            }
            Fault::Pause | Fault::Suspend => {
                let d = self.rng.between(ttl_us / 5, ttl_us * 5 / 2);
                self.pause(m, d, fault == Fault::Suspend);
            }
            Fault::PauseAfterSend => {
                // Half the time right after a renewal, and for longer than the lease: the
                // renewal's reply then waits for a process whose lease is gone.
                let renewal_only = self.rng.chance(0.5);
                let d = if renewal_only {
                    self.rng.between(ttl_us, ttl_us * 5 / 2)
                } else {
                    self.rng.between(ttl_us / 5, ttl_us * 5 / 2)
                };
                self.machines[m].pause_after_send = Some((d, renewal_only));
            }
            Fault::ClockBackSmall => {
                self.machines[m].wall_offset_us -= self.rng.between(1, 40) as i64 * 1_000;
            }
            Fault::ClockBackLarge => {
                self.machines[m].wall_offset_us -= self.rng.between(200, 3_000) as i64 * 1_000;
                if self.rng.chance(0.5) {
                    let at = self.now + self.rng.between(100, 3_000) * MS;
                    self.schedule(at, Ev::CorrectClock { m });
                }
            }
            Fault::FleetClockBack => {
                let step = self.rng.between(200, 3_000) as i64 * 1_000;
                for machine in &mut self.machines {
                    machine.wall_offset_us -= step;
                }
            }
            Fault::ClockForward => {
                self.machines[m].wall_offset_us += self.rng.between(500, 3_000) as i64 * 1_000;
                if self.rng.chance(0.7) {
                    let at = self.now + self.rng.between(100, 3_000) * MS;
                    self.schedule(at, Ev::CorrectClock { m });
                }
            }
            Fault::Partition | Fault::SlowNetwork | Fault::ReplyLoss | Fault::Duplicates => {
                let machine = &mut self.machines[m];
                match fault {
                    Fault::Partition => machine.partitioned = true,
                    Fault::SlowNetwork => machine.slow = true,
                    Fault::ReplyLoss => machine.reply_loss = true,
                    _ => machine.duplicates = true,
                }
                let d = self.rng.between(100 * MS, ttl_us * 2).min(self.params.fault_until - self.now);
                self.schedule(self.now + d, Ev::NetworkHeals { m, kind: fault });
            }
            Fault::KeyDeletedByHand => {
                let slot = self.rng.below(self.params.layout.max_worker() + 1) as Slot;
                self.etcd.delete_worker(self.now, slot);
            }
            Fault::ReservationDeletedByHand => {
                let slot = self.rng.below(self.params.layout.max_worker() + 1) as Slot;
                self.etcd.delete_reservation(self.now, slot);
                for note in std::mem::take(&mut self.etcd.notes) {
                    self.checker.note(self.now, note);
                }
            }
            Fault::EtcdRestored => self.restore_etcd(),
            Fault::EtcdNoSpace => {
                let d = self.rng.between(100 * MS, ttl_us * 2).min(self.params.fault_until - self.now);
                self.etcd.nospace_until = self.etcd.nospace_until.max(self.now + d);
            }
            Fault::DiskFull => self.machines[m].next_disk_fault = DiskFault::FailedBefore,
            Fault::DiskUnknown => {
                let landed = self.rng.chance(0.5);
                self.machines[m].next_disk_fault = DiskFault::FailedAfter { landed };
            }
            Fault::DiskStall => {
                let at = self.rng.below(self.params.slots as u64) as usize;
                self.machines[m].next_disk_fault = DiskFault::Stall { at };
            }
            Fault::CorruptFile => {
                // Only between runs: the process is killed, the file broken, and the next
                // start must refuse it.
                if self.machines[m].process.take().is_some() {
                    let slot = self.machines[m].slots[0];
                    self.machines[m].disk.files.insert(slot, FileState::Corrupt);
                    let at = self.now + self.rng.between(50, 1_000) * MS;
                    self.schedule(at, Ev::Start { m });
                }
            }
        }
    }
}
