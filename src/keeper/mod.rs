//! The slot keeper: the one place where the rules that keep the promise are written, for
//! every store.
//!
//! [`machine`] is a state machine with no I/O (clock readings, store replies and timer
//! expiries in; store requests, the holding for the minter and events out), in the manner of
//! quinn-proto and h2. [`crate::node`] runs it under tokio against a real [`crate::store::Store`];
//! the simulator (`crate::sim`, test builds) runs the very same machine against a model of
//! the stores' documented behaviour.
//!
//! # The invariants
//!
//! Each is stated again, as `Invariant N`, at the place in the code that keeps it, and
//! tested there and in the simulator.
//!
//! 1. A tick `t` is minted for worker `w` only while `t <= R`, where `R` is a reservation for
//!    `w` that this instance wrote durably while it held `w`. (The keeper publishes only
//!    confirmed writes; the generator fences ticks past them.)
//! 2. A new holder of `w` reads the previous `R` *after* its claim succeeded, with a
//!    linearizable read, and mints only ticks above it. A stored value outside the layout's
//!    time range is corrupt: the start stops naming where it lives, and nothing rewrites it.
//! 3. Extending `R` is a compare-and-set: it applies only while this instance's claim holds
//!    `w` and only over the exact version it replaces, so the stored reservation never
//!    decreases and a late write cannot land over a newer one. A refused write is never
//!    retried as a plain put.
//! 4. Every mint checks the claim's deadline against the boot-time clock (which counts
//!    suspend) at that moment, not a flag another task may not have updated. The deadline
//!    counts from when the confirming request was *sent*: the lease grant for the first, the
//!    renewal for the others.
//! 5. The sequence restarts only when the tick advances, and only after the clock check; a
//!    step back never resets it.
//! 6. A state file is durable only after the file and its directory are fsynced.
//! 7. The final shrink of a reservation happens only when what was minted is known, only over
//!    the version last written, and never below the floor inherited.
//! 8. One response is filled under one set of claims: a batch half filled when a claim
//!    changes is dropped, never continued under the next.

pub mod machine;

pub use machine::{
    Event, IDLE_AFTER_MS, Keeper, KeeperConfig, KeeperError, LossReason, Now, SlotPolicy, fence_window_ms,
};

/// What sees the keeper's events besides the logs and metrics: the slot history. Called
/// before the holding an event comes with is published, so a claim is stamped no later than
/// the first ID minted under it; it must never wait.
pub trait Observe: Send + Sync {
    fn observe(&self, event: &Event);
}
