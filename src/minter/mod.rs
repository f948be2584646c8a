//! The minter: the one task that owns the generator and answers every request.
//!
//! [`core`] holds the decisions with no I/O (the queue, the generator, the holding from the
//! keeper, readiness); [`fair`] is its queue, which shares each tick's IDs among the tenants (by weight) and
//! connections waiting (the tokio task around it, and the handle callers use, are the node's:
//! [`crate::node::minter_task`]);
//! [`error`] says why minting refused; [`event`] is what the core tells the world (changes of
//! state, and the counts of its hot path), for logs and metrics to subscribe to.
//!
//! Before minting, each pass reads the clocks once and checks the holding the keeper
//! publishes: the claim's deadline against the boot-time clock at that moment, and the
//! reservation. What the generator cannot do now becomes a bounded wait (an exhausted
//! sequence, a small step back) or an immediate, retriable refusal. No request waits past its
//! deadline. The minter also owns readiness: it publishes [`Readiness`] whenever minting
//! would start or stop refusing, and wakes by itself to notice a clock that came back or a
//! claim that ran out.

pub mod core;
pub mod error;
pub mod event;
pub mod fair;

pub use core::{Ask, FAIR_QUANTUM, Ids, MinterConfig, MinterCore, Next, Pending, Reading, Responder};
pub use error::{MintError, Readiness};
pub use event::{Event, NoTally, Tally};
pub use fair::{ConnectionKey, Share};
