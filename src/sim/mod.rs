//! The deterministic simulator (test builds only): the real keeper, minter core and
//! generator, run on several simulated machines against a model of etcd's documented
//! behaviour (or of a local disk), over a network that delays, drops, duplicates and
//! reorders, with crashes, pauses, suspends and clock steps, all from one seed. In about
//! half the schedules each process also serves one or two named sequences with the real
//! segment machine (`world::sequences`), their records in the same store models
//! ([`sequence_write`] is the write both apply).
//!
//! A schedule is drawn from its seed ([`world::Params::draw`]): how many machines, which
//! store, the layout, the TTL, the window, and when each fault strikes. One seed in 16
//! scripts a contended hand-over instead (`world::hand_over`): one slot handed back and
//! forth between two stalling holders, at moments random faults rarely line up. After every
//! schedule the checker ([`checker`]) holds every ID and sequence value issued against the
//! promise and the invariants, and every live machine must have minted again within a
//! stated bound after the faults stopped. The same seed gives the same run to the byte ([`world::Report::digest`]).
//!
//! `cargo test` runs a bounded sweep; `scripts/long/simulate` runs long ones. A failing schedule
//! prints its seed, and
//! `SNOWMINT_SIM_SEED=<seed> cargo test --release --lib sim::tests::the_default_sweep`
//! replays it.

mod checker;
mod disk;
mod etcd;
mod rng;
mod sequence_write;
mod world;

#[cfg(test)]
mod tests;

/// Simulated time, in microseconds.
pub type Us = u64;

pub use world::{Report, World};

/// Runs the schedule of `seed`.
pub fn run(seed: u64) -> Report {
    World::new(seed).run()
}
