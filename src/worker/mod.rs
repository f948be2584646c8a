//! Worker sources: where an instance gets its worker ID and its reservations.
//!
//! A source publishes a [`WorkerState`] on a watch channel; the minter reads it before every
//! mint. `standalone` uses a static worker ID and a local state file; `etcd` leases a slot
//! from an etcd cluster. Either way the minter sees the same thing: the worker ID held, the
//! floor below which a previous holder may have minted, how far the durable reservation
//! reaches, and (etcd) the monotonic deadline past which the lease may be gone.

pub mod etcd;
pub mod standalone;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinHandle;

/// A worker ID held by this instance, and the window it may mint in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub worker_id: u32,
    /// Changes with every claim of a slot: a new generation gets a new generator.
    pub generation: u64,
    /// Unix ms up to which a previous run or holder of this worker ID may have minted;
    /// only later times are minted (invariant 2).
    pub floor_ms: Option<i64>,
    /// Unix ms up to which a durable reservation covers minting (invariant 1).
    pub reserved_ms: i64,
    /// The monotonic instant (as [`crate::clock::Clock::monotonic`]) past which the lease
    /// may have expired; `None` when there is no lease (standalone).
    pub lease_deadline: Option<Duration>,
}

/// What the minter may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerState {
    /// No worker ID is held: minting refuses, saying why.
    Unheld {
        reason: String,
    },
    Held(Grant),
}

/// Why a worker source could not start or keep going.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("state file {path}: {source}")]
    StateIo { path: String, source: std::io::Error },
    #[error(
        "state file {path} is corrupt ({reason}); it is never reset automatically: inspect it, and remove it only if no other instance used worker {worker_id} with a clock ahead of this one"
    )]
    StateCorrupt { path: String, reason: String, worker_id: u32 },
    #[error(
        "state file {path} is missing, but worker {worker_id} ran in this state dir before: the IDs it minted may not be covered; if the host clock is right (past every ID this worker minted), start once with --accept-missing-state"
    )]
    StateMissing { path: String, worker_id: u32 },
    #[error("state dir {dir} is in use by another snowmint process for worker {worker_id} (lock {lock})")]
    StateLocked { dir: String, worker_id: u32, lock: String },
    #[error("layout mismatch: {saved_at} records \"{saved}\" but this instance is configured with \"{configured}\"")]
    LayoutMismatch { saved_at: String, saved: String, configured: String },
    #[error(
        "every worker slot under {prefix} is taken ({slots} slots for {worker_bits} worker bits); stop an instance or widen --worker-bits on a new prefix"
    )]
    AllSlotsTaken { prefix: String, slots: u64, worker_bits: u8 },
    #[error("{0}")]
    Etcd(String),
    #[error("worker id {worker_id} does not fit {worker_bits} worker bits (maximum {max})")]
    WorkerOutOfRange { worker_id: u64, worker_bits: u8, max: u64 },
}

/// What the stopped minter minted, as the final reservation needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Minted {
    /// The minter stopped cleanly: nothing past this Unix ms was minted (`None`: nothing).
    UpTo(Option<i64>),
    /// The minter failed, or never reported: what it minted is unknown, so the saved
    /// reservation must stay as it is.
    Unknown,
}

/// A running worker source, as the server sees it.
pub struct WorkerSource {
    /// The state the minter reads.
    pub state: watch::Receiver<WorkerState>,
    /// Wakes the source to extend the reservation now (the minter found itself fenced).
    pub extend_now: Arc<Notify>,
    finish: oneshot::Sender<Minted>,
    task: JoinHandle<()>,
}

impl WorkerSource {
    /// Ends the source after the minter stopped. With [`Minted::UpTo`] the source shrinks the
    /// saved reservation to what was minted (never below the inherited floor), so the next
    /// run can start at once; then it releases its lease.
    pub async fn finish(self, minted: Minted) {
        // The task may already have ended (its sender dropped): nothing left to do then.
        let _ = self.finish.send(minted);
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "worker source task failed");
        }
    }
}
