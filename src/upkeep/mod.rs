//! etcd's upkeep: what an etcd-mode fleet does so that one etcd serves it for months.
//!
//! Every write to etcd is a revision that etcd keeps until its history is compacted, and etcd
//! 3.4 compacts nothing by default: a fleet that extends its reservations fills etcd's quota
//! (2 GiB by default) in days, and then etcd refuses every write (its `NOSPACE` alarm). So:
//!
//! - **Compaction** ([`compactor`]): one instance at a time, chosen through etcd by a
//!   compare on a key (the Kubernetes API server's scheme), compacts etcd's history every
//!   `--etcd-compaction-interval` (5 minutes, as the API server), keeping at least one
//!   interval of it. `off` leaves compaction to the operator (etcd's `--auto-compaction-*`,
//!   or their own jobs); both may run: compacting a revision already compacted is harmless.
//! - **Alarms** ([`crate::store::alarm`]): the alarms etcd raises are polled at a low rate
//!   (its status call: a local read), beside those its refusals name, so that refusals, logs,
//!   a metric and an alert say which alarm and how to clear it.
//!
//! [`task`] runs both in one tokio task on connections of its own, beside the keeper and
//! never in its way: a failure is logged and counted, and minting never waits for it.

pub mod compactor;
pub mod task;

pub use task::spawn;
