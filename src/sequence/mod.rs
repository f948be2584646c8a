//! Named sequences: dense numbers per name, handed to each instance a segment at a time by
//! a compare-and-set on the sequence's record, and to callers from memory.
//!
//! [`record`] is what the store keeps of a sequence (its high-water mark and the claim that
//! moved it last); [`segments`] is one instance's rules for taking segments and handing out
//! their values, with no I/O: the same write-ahead rule as the slot keeper's reservations, so
//! no value is issued that is not covered by a durable claim, a claim of unknown outcome is
//! taken at its worst (a gap, never a repeat), and a store gone back stops the sequence.
//! [`store`] is where records live ([`etcd`] beside the slots, or [`file`] in the state dir).

pub mod etcd;
pub mod file;
pub mod record;
pub mod segments;
pub mod store;

pub use record::{ClaimId, MAX_NAME_LEN, MAX_VALUE, Record, RecordError, check_name};
pub use segments::{Answer, Event, Op, SegmentConfig, Segments, SequenceError};
pub use store::{Created, HeldBy, Listed, SequenceStore};
