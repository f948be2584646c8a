//! snowmint mints unique, roughly time-sorted 64-bit IDs over gRPC.
//!
//! The crate is built in layers, each with one job:
//!
//! - [`layout`], [`generator`], [`clock`]: the pure core. A layout packs (time, worker,
//!   sequence) into 64 bits; the generator turns ticks into IDs or says why it cannot; the
//!   clock trait lets tests step time back and forth; [`clock_filter`] follows a forward
//!   jump of the wall clock only once it has lasted, and [`clock_memory`] keeps what it knew
//!   for the next process on the host. No I/O (but that small file), no tokio.
//! - [`minter`]: the minter core, with no I/O: the queue, the generator, and the holding it
//!   mints under, turned into replies and events.
//! - [`keeper`]: the slot keeper, the one place the claim and reservation rules live, as a
//!   state machine with no I/O; [`grant`] is what it hands the minter.
//! - [`node`]: the two cores joined: the rules between them (progress, extend-now, the order
//!   of events and holdings), their events turned into metrics and logs, and the tokio tasks
//!   that run them. The simulator drives the same joining rules.
//! - [`store`]: where slots are claimed and reservations kept (a state file, or etcd),
//!   behind one small compare-and-set protocol.
//! - [`upkeep`]: what an etcd-mode fleet does so that its etcd lasts for months: one instance
//!   a round compacts etcd's history, and etcd's alarms are watched and named.
//! - [`history`]: the record of every claim of a slot, written beside minting (never in its
//!   way), for provenance in `Decode` and for `snowmint audit`.
//! - [`rpc`]: the wire. One front door takes every call on the gRPC port (gRPC, the direct
//!   `NextId`, Connect), with one call context and one timeout rule; the service, the
//!   counting of calls, the connection caps, TLS and the admin endpoint live beside it.
//! - [`server`]: the wiring, with one shutdown token.
//! - [`metrics`]: every Prometheus metric.
//! - [`opaque`]: opaque public IDs, a keyed permutation of the ID space (FF1) and the
//!   string form that carries the key version. Pure, as the core is.
//! - [`sequence`]: named sequences' records and the rules of their segments, with no I/O.
//! - [`uuid7`]: UUIDv7 (RFC 9562) made from minted IDs, and read back. Pure.
//! - [`tenant`]: callers as tenants: tokens, the policy, permissions and quotas. Pure.
//!
//! The command line and the load tool are the `snowmint` binary's (`src/main.rs`,
//! `src/cli/`); the Rust client is its own crate, `snowmint-client` (`clients/rust`).
//!
//! The one promise: no ID is ever issued twice. When it cannot be kept, minting refuses with
//! a retriable `UNAVAILABLE`.

pub mod clock;
pub mod clock_filter;
pub mod clock_memory;
pub mod defects;
pub mod generator;
pub mod grant;
pub mod history;
pub mod keeper;
pub mod layout;
pub mod metrics;
pub mod minter;
pub mod node;
pub mod opaque;
pub mod proto;
pub mod rpc;
pub mod sequence;
pub mod server;
#[cfg(test)]
mod sim;
pub mod store;
pub mod tenant;
pub mod upkeep;
pub mod uuid7;
