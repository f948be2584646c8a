//! What the minter core tells the world, as the keeper does: changes of state as [`Event`]s,
//! polled after each pass, and the counts of its hot path through a [`Tally`].
//!
//! The core writes no metric and no log line. The node ([`crate::node::report`]) turns
//! both into metrics and logs; the simulator traces the events and counts nothing.

use std::time::Duration;

use super::error::MintError;
use crate::layout::Slot;

/// A change in the minter's state, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Minting started, or started again after a refusal.
    Minting,
    /// Minting refuses, for a reason of another kind than before (a refusal whose figures
    /// move on is the same refusal).
    Refusing { why: MintError },
    /// The windows of a new set of claims were taken.
    MintingFor { slots: Vec<Slot>, generation: u64 },
    /// Minting goes on ahead of a wall clock that is behind, within the drift bound.
    BorrowingStarted { drift_ms: i64, bound_ms: u64 },
    /// The wall clock caught up with the minting time.
    BorrowingEnded,
    /// The wall clock stepped back behind the minting time, counted once per step (minting
    /// on ahead of it is [`Event::BorrowingStarted`]).
    ClockBack { behind_ms: u64, action: ClockBackAction },
    /// The sequence of a tick ran out with requests waiting.
    SequenceExhausted,
    /// The wait for the next tick after the sequence ran out is over.
    SequenceWaited { waited: Duration },
}

/// What the minter did about a wall clock behind the minting time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockBackAction {
    /// Waited for the clock (a small step back).
    Waited,
    /// Refused (beyond the wait threshold and the drift bound).
    Refused,
}

/// The method a reply answered, for its queue wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    NextId = 0,
    BatchIds = 1,
}

/// Why a request was refused the moment the minter saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrivalRefusal {
    /// The work ahead would not finish within its deadline.
    Saturated = 0,
    /// Its deadline had passed.
    Deadline = 1,
}

/// What is counted on the hot path, once per reply or per request served: plain calls
/// rather than events, so that counting allocates nothing. Must never wait.
pub trait Tally: Send {
    /// A request was answered (IDs or a refusal) after waiting `waited` since it was asked.
    fn answered(&self, method: Method, waited: Duration);
    /// IDs handed to a request.
    fn issued(&self, ids: u64);
    /// IDs minted for a request that did not take them (its caller had gone, or its deadline
    /// passed).
    fn discarded(&self, ids: u64);
    /// A request refused at once, with nothing minted for it.
    fn refused_on_arrival(&self, why: ArrivalRefusal);
}

/// Counts nothing: for the simulator and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTally;

impl Tally for NoTally {
    fn answered(&self, _: Method, _: Duration) {}
    fn issued(&self, _: u64) {}
    fn discarded(&self, _: u64) {}
    fn refused_on_arrival(&self, _: ArrivalRefusal) {}
}
