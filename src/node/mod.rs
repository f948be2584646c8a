//! A node: the keeper and the minter joined, as one instance runs them.
//!
//! The two cores stay without I/O ([`crate::keeper::machine`], [`crate::minter::core`]).
//! What joins them is written here once: [`link`] has the rules between them (the minter's
//! progress and its wish for an extension now, heard by the keeper unless the stop began;
//! the keeper's events handed out before the holding they come with), and [`report`] turns
//! both cores' events into metrics and log lines. [`keeper_task`] and [`minter_task`] are the
//! tokio tasks that carry them; the simulator (`crate::sim`) carries the same [`link`] rules
//! over its own schedule. [`sequences`] runs the named sequences' segment machines over their
//! store.

pub mod keeper_task;
pub mod link;
pub mod minter_task;
pub mod report;
pub mod sequences;

pub use keeper_task::{DriverConfig, KeeperHandle, StartError, start_keeper};
pub use link::{KeeperSide, MinterSide, PROGRESS_EVERY_MS, ToKeeper};
pub use minter_task::{MintHandle, MinterLinks, QUEUE, spawn_minter};
pub use sequences::{Fleet, SequenceCallError, SequencesConfig, SequencesHandle, Taken, spawn_sequences};
