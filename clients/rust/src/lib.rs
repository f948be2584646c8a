//! A Rust client for snowmint, following the client contract of `clients/README.md`: one or
//! several endpoints with failover, deadlines per attempt and per call, coalescing of
//! concurrent `next_id()` calls, and an optional local buffer that prefetches batches in the
//! background.
//!
//! It depends on tonic, prost and tokio only: a service that needs IDs compiles none of the
//! server.
//!
//! - [`client`]: the [`Client`] handle and its builder.
//! - `endpoints`: which server is current, and when a call moves to the next one.
//! - `coalesce`: unbuffered `next_id()` callers folded into one `BatchIds`.
//! - `closer`: the closed state every call and background task watches.
//! - `credentials`: the bearer token every call carries.
//! - [`buffer`]: the prefetch buffer and its refill tasks.
//! - [`prefetch`]: the buffers of named sequences, refilled by the callers themselves.
//! - [`error`]: the one error type. [`proto`]: the generated gRPC client and messages.
//! - [`opaque`]: the string form of opaque IDs, read and written with no key.
//! - [`layout`]: decoding IDs locally, with no server.
//! - [`uuid`]: UUIDv7s' text form, and their fields read back locally.
//!
//! ```no_run
//! # async fn demo() -> Result<(), snowmint_client::ClientError> {
//! use snowmint_client::{BufferConfig, Client};
//! let client = Client::builder(["http://10.0.0.1:50051", "http://10.0.0.2:50051"])
//!     .buffer(BufferConfig::default())
//!     .connect()?;
//! let id = client.next_id().await?;
//! let ids = client.batch(100).await?;
//! # Ok(()) }
//! ```

pub mod buffer;
pub mod client;
mod closer;
mod coalesce;
mod credentials;
mod endpoints;
pub mod error;
pub mod layout;
pub mod opaque;
pub mod prefetch;
pub mod proto;
pub mod uuid;

pub use buffer::BufferConfig;
pub use client::{Client, ClientBuilder};
pub use error::ClientError;
pub use layout::{Decoded, Layout};
pub use opaque::{OpaqueId, OpaqueIdError};
pub use prefetch::MAX_SEQUENCE_PREFETCH;
pub use uuid::{DecodedUuid, Uuid, UuidError};
