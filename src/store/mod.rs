//! Stores: where slots are claimed and reservations kept, behind one small protocol.
//!
//! The slot keeper ([`crate::keeper`]) decides everything; a store only carries out one
//! [`Request`] at a time and answers with a [`Reply`]. Every write is compare-and-set: it names
//! the [`Version`] it replaces and the claim it needs, and is refused, untouched, when either
//! changed. A store that cannot tell whether a request took effect says so
//! ([`Outcome::Unknown`]); the keeper then assumes the worst.
//!
//! Two stores exist: [`file`] (a static worker ID and a local state file) and [`etcd`] (slots
//! leased from an etcd cluster). A third (a Kubernetes Lease, Consul) needs only this trait.

pub mod alarm;
pub mod etcd;
pub mod file;

use crate::layout::Slot;
use std::time::Duration;

/// The most slots one [`Request::ReadReservations`] names. Every store reads that many in one
/// step: etcd in one transaction of as many gets and one of the fence, within its 128
/// operations.
pub const MAX_READS: usize = 127;

/// The most writes one [`Request::WriteReservations`] carries. Every store applies that many
/// all or none: etcd in one transaction of up to seven operations per write (three compares,
/// two puts, and two gets should it be refused), 126 of its 128. A keeper with more slots
/// writes them in several requests, each of them all or none, and each slot's write
/// independent of the others' (its own compares).
pub const MAX_WRITES: usize = 18;

/// The store's handle on a claim: an etcd lease ID, or the file store's lock.
pub type SessionId = i64;

/// The version of a stored reservation: what a conditional write must name to replace it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// No reservation is stored for the slot.
    Absent,
    /// etcd's mod_revision of the key; the state file's revision counter.
    At(i64),
}

/// A reservation as read from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    Absent,
    /// No reservation is stored, though the slot was used before (its history says so): the
    /// key was deleted by hand, or the store went back in time (a restored snapshot).
    /// Nothing is known of how far the slot was minted.
    Missing {
        reason: String,
    },
    /// "This slot may have minted up to `until_ms`" (Unix ms), at `version`.
    Reserved {
        until_ms: i64,
        version: Version,
    },
    /// Something that is not a reservation: never trusted, never overwritten.
    Corrupt {
        reason: String,
    },
}

impl Stored {
    pub fn version(&self) -> Option<Version> {
        match self {
            Stored::Absent | Stored::Missing { .. } => Some(Version::Absent),
            Stored::Reserved { version, .. } => Some(*version),
            Stored::Corrupt { .. } => None,
        }
    }
}

/// One slot's reservation as read, with where it lives (a file path, an etcd key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRead {
    pub slot: Slot,
    pub location: String,
    pub stored: Stored,
    /// The version of the slot's claim ([`Write::claim_version`]), where the store keeps one
    /// and the answer carries it (etcd's refusal of a write); `None` otherwise.
    pub claim_version: Option<i64>,
}

/// The fleet's fence: the store was found to have gone back in time (a restored snapshot), so
/// no stored reservation is trusted as a floor below `until_ms`, past which nothing minted
/// under the lost state can reach. Every claim floors at it, whatever its reservation's
/// version: a restore hands revisions out again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// Unix ms on the clock of whoever set it, with the fleet's clock skew already added.
    pub until_ms: i64,
    /// What was found, for logs and refusals.
    pub reason: String,
}

/// Another holder's clock, as it published it with its latest reservation write of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerClock {
    pub slot: Slot,
    /// The session that holds the slot (etcd: its lease): one instance holds all its slots
    /// under one session, so this says which instance the clock is.
    pub holder: SessionId,
    /// The writer's wall clock when it wrote, Unix ms.
    pub wall_ms: i64,
}

/// One conditional reservation write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub slot: Slot,
    /// The new reservation, Unix ms.
    pub until_ms: i64,
    /// The version it replaces: the write applies only if the stored one is still this.
    /// `None` (only ever from a planted defect) writes whatever is stored.
    pub expect: Option<Version>,
    /// The writer's wall clock when it sent the write, published for the fleet's clock check.
    pub wall_ms: i64,
    /// The writer extends this reservation only when its minter asks (it has minted nothing
    /// lately): its published clock goes stale, and the fleet's clock check leaves it out.
    pub idle: bool,
    /// With `expect: Some(Version::Absent)`, the version of the slot's claim as the writer
    /// knows it (1 when claimed, one more for each write onto an absent reservation since):
    /// etcd applies the write only while the claim is still at it and moves it on, so a copy
    /// of the write that lands later (a retry held up in a proxy) finds it moved, even where
    /// the reservation was deleted by hand meanwhile and reads as absent again. Absence
    /// alone would let that copy put back a reservation below what was minted since
    /// (simulator seed 680721844248). The state file, which nothing copies, needs none.
    pub claim_version: Option<i64>,
}

/// What the keeper asks of a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Starts a claim that lives `ttl` unless renewed (etcd: a lease grant).
    OpenSession { ttl: Duration },
    /// The slots taken by anyone, and those taken under `session` (keys only).
    ListSlots { session: SessionId },
    /// How many slots are taken fleet-wide (a count, not a listing), for the metric an
    /// alert watches before the slots run out.
    CountSlots,
    /// The wall clocks other holders published with their latest reservation writes: up to
    /// `limit` holders (sessions other than `session`), one slot each, found from slot `from`
    /// on (wrapping), for the fleet's clock check. A holder of many slots is one holder.
    SampleClocks { session: SessionId, from: Slot, limit: u32 },
    /// Takes `slot` for `session` if it is free, or confirms it is already `session`'s.
    Claim { session: SessionId, slot: Slot },
    /// Reads the reservations of `slots` (at most [`MAX_READS`]), and the fleet's fence.
    /// Always linearizable in production: a read served from a member's stale copy could
    /// miss the previous holder's last reservation.
    ReadReservations { slots: Vec<Slot>, linearizable: bool },
    /// Sets the fleet's fence (or raises it: a lower one never replaces a higher one).
    SetFence { until_ms: i64, reason: String },
    /// Writes reservations (at most [`MAX_WRITES`]): each only while `session` holds its slot
    /// (unless the planted defect drops that check) and while its stored version is
    /// `expect`. The compare is all or none: when one fails, nothing is written
    /// ([`Reply::WriteRefused`]). What follows differs by store: etcd applies every write in
    /// one transaction; the file store replaces one state file after another, each
    /// atomically, so a failure partway leaves the earlier ones written and the later ones
    /// not, reported as [`Outcome::Unknown`].
    WriteReservations { session: SessionId, writes: Vec<Write>, check_claim: bool },
    /// Keeps the session alive.
    Renew { session: SessionId },
    /// Gives one slot back, if `session` still holds it.
    Release { session: SessionId, slot: Slot },
    /// Ends the session, releasing every slot it holds.
    CloseSession { session: SessionId },
}

impl Request {
    /// A short name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Request::OpenSession { .. } => "open session",
            Request::ListSlots { .. } => "list slots",
            Request::CountSlots => "count slots",
            Request::SampleClocks { .. } => "sample clocks",
            Request::Claim { .. } => "claim slot",
            Request::ReadReservations { .. } => "read reservations",
            Request::SetFence { .. } => "set fence",
            Request::WriteReservations { .. } => "write reservations",
            Request::Renew { .. } => "renew",
            Request::Release { .. } => "release slot",
            Request::CloseSession { .. } => "close session",
        }
    }
}

/// Whether a failed request may have taken effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Certainly not applied (e.g. the connection was refused before anything was sent).
    NotApplied,
    /// May have been applied: a timeout, a reply lost after its commit.
    Unknown,
}

/// A store's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `ttl`: what the store granted (it may raise a small one); `None` when the claim never
    /// expires.
    SessionOpened {
        session: SessionId,
        ttl: Option<Duration>,
    },
    Slots {
        taken: Vec<Slot>,
        ours: Vec<Slot>,
    },
    SlotCount {
        taken: u64,
    },
    /// Per slot sampled from another session, its holder and the writer's wall clock at its
    /// latest reservation write. Slots whose reservation carries none, or was written idle
    /// ([`Write::idle`]: a clock that old says nothing of the writer's now), are left out.
    /// Several may come from one holder; the keeper counts each holder once.
    PeerClocks(Vec<PeerClock>),
    /// `won`: the slot now belongs to the session (newly, or already).
    Claimed {
        slot: Slot,
        won: bool,
    },
    Reservations {
        reads: Vec<SlotRead>,
        /// The fleet's fence, if one was ever set.
        fence: Option<Fence>,
    },
    FenceSet,
    /// Every write applied; the new version of each slot's reservation.
    Written(Vec<(Slot, Version)>),
    /// Nothing applied: the slots no longer the session's, and the current reservations.
    WriteRefused {
        not_ours: Vec<Slot>,
        current: Vec<SlotRead>,
    },
    Renewed {
        ttl: Duration,
        /// The fleet's fence as the store holds it (etcd mode): a holder learns a new one here
        /// too, not only with the floors of a claim.
        fence: Option<Fence>,
    },
    /// The session is gone on the store (etcd: "lease not found"); every slot with it.
    SessionGone,
    Released,
    SessionClosed,
    Failed {
        error: String,
        outcome: Outcome,
    },
    /// The store answered `reply`, and in it showed that its state went back in time since
    /// an earlier answer (a revision lower than one it gave before, or another cluster): a
    /// restored snapshot. What was written since that state is lost.
    WentBack {
        detail: String,
        reply: Box<Reply>,
    },
}

impl Reply {
    /// Reservations read, with no fence (a store that keeps none).
    pub fn reservations(reads: Vec<SlotRead>) -> Reply {
        Reply::Reservations { reads, fence: None }
    }
}

/// Why a store cannot be used at all; the start stops with this one line.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state file {path}: {source}")]
    StateIo { path: String, source: std::io::Error },
    /// The state dir refused this process's first write: what to change is outside snowmint
    /// (the volume's owner, a volume not mounted), so the line says what.
    #[error("state dir {dir} cannot be written: {why} ({source})")]
    StateDirUnwritable { dir: String, why: String, source: std::io::Error },
    #[error(
        "state file {path} is corrupt ({reason}); it is never reset automatically: inspect it, and remove it only if no other instance used worker {slot} with a clock ahead of this one"
    )]
    StateCorrupt { path: String, reason: String, slot: Slot },
    #[error(
        "state file {path} is missing, but worker {slot} ran in this state dir before: the IDs it minted may not be covered; if the host clock is right and past every ID this worker minted (a run may mint up to --max-clock-drift-ms ahead of its clock: wait that long after it stopped), start once with --accept-missing-state"
    )]
    StateMissing { path: String, slot: Slot },
    #[error("state dir {dir} is in use by another snowmint process for worker {slot} (lock {lock})")]
    StateLocked { dir: String, slot: Slot, lock: String },
    #[error("layout mismatch: {saved_at} records \"{saved}\" but this instance is configured with \"{configured}\"")]
    LayoutMismatch { saved_at: String, saved: String, configured: String },
    #[error("worker id {slot} does not fit {worker_bits} worker bits (maximum {max})")]
    WorkerOutOfRange { slot: u64, worker_bits: u8, max: u64 },
    #[error("{0}")]
    Etcd(String),
}

/// A store: carries out one request at a time.
pub trait Store: Send + 'static {
    /// Carries out `request`. Never panics on the store's failures: they come back as
    /// [`Reply::Failed`], with whether the request may have taken effect.
    fn call(&mut self, request: Request) -> impl Future<Output = Reply> + Send;
}
