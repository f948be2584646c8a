//! Why minting refused, and whether the minter would mint now.

use crate::layout::Slot;

/// Why IDs could not be minted. Every variant but [`MintError::Overloaded`] means "retry,
/// here later or on another instance"; that one means "ask for fewer at once".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MintError {
    #[error("the wall clock is {behind_ms} ms behind the last time used; minting resumes at {resume_at}")]
    ClockBehind { behind_ms: u64, resume_at: String },
    #[error(
        "the wall clock has not passed the reservation a previous holder of worker {slot} saved ({floor}); {behind_ms} ms to go"
    )]
    BelowFloor { slot: Slot, floor: String, behind_ms: u64 },
    #[error(
        "worker {slot} is fenced until {until} ({behind_ms} ms to go), past anything minted on it that may be lost: {reason}"
    )]
    Fenced { slot: Slot, until: String, behind_ms: u64, reason: String },
    #[error("no worker ID is held: {0}")]
    NoWorker(String),
    #[error("the lease on worker {0} may have expired; minting is fenced until it is renewed or re-claimed")]
    LeaseExpired(Slot),
    #[error("the reservation for worker {slot} ends at {reserved_until} and has not been extended")]
    ReservationBehind { slot: Slot, reserved_until: String },
    /// One of the refusals the store causes (no slot held, a lease that may have expired, a
    /// reservation not extended), while the store says why it refuses (an etcd alarm): what
    /// that means and how to clear it.
    #[error("{refusal}; {why}")]
    StoreRefuses { refusal: Box<MintError>, why: String },
    #[error("the wall clock ({now}) is before the layout's epoch")]
    BeforeEpoch { now: String },
    #[error("the layout ran out at {expiry}")]
    LayoutExhausted { expiry: String },
    #[error("could not mint before the call's deadline: {0}")]
    Deadline(String),
    /// Refused when it arrived, before anything was minted for it: the IDs already queued for
    /// large asks and these would not all be minted by the earliest of their deadlines.
    #[error(
        "the minter is saturated: the {queued} IDs queued for large asks and these {ids} would take about {wait_ms} ms to mint, and the earliest of their deadlines is {within_ms} ms away; nothing was minted for this call: retry shortly or on another instance"
    )]
    Saturated { ids: u64, queued: u64, wait_ms: u64, within_ms: u64 },
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error(
        "{outstanding} IDs are already asked for and not yet answered, the server's limit is {limit} (--max-outstanding-ids); ask for fewer at once or retry shortly"
    )]
    Overloaded { outstanding: usize, limit: usize },
}

/// Whether minting would succeed now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Serving,
    NotServing(MintError),
}
