//! The wire: everything between a caller's bytes and the [`Service`]'s calls. One front door
//! ([`dispatch`]) takes every request on the gRPC port, decides once which path answers it
//! (the direct `NextId`, tonic's gRPC routes, or Connect), and builds the one call context
//! ([`context`]) all of them read, with its one timeout rule.
//!
//! - [`transport`]: the port's HTTP server (hyper), connection by connection;
//! - [`connections`]: the caps on connections, and their handshake bound; [`tls`]: TLS;
//! - [`dispatch`]: the front door; [`context`]: a call's connection, limit, end and tenant;
//! - [`gate`]: with a policy, who a caller is and whether each call goes through;
//! - [`direct`]: a plain gRPC `NextId`, without tonic's machinery;
//! - [`connect`]: the Connect protocol (JSON over HTTP/1.1 and HTTP/2);
//! - [`service`]: the calls themselves, and the one mapping of errors to status codes;
//! - [`calls`]: every call counted by its final code, and timed;
//! - [`admin`]: the admin port (`/metrics`, `/healthz`, `/readyz`).
//!
//! Nothing here reaches up to the server that assembles it ([`crate::server`]).

pub mod admin;
pub mod calls;
pub mod connect;
pub mod connections;
pub mod context;
pub mod direct;
pub mod dispatch;
pub mod forward;
pub mod gate;
pub mod service;
pub mod tls;
pub mod transport;

use std::time::Duration;

pub use service::Service;

/// The gRPC service name: its calls' paths and the health service's name for it.
pub const SERVICE_NAME: &str = "snowmint.v1.IdService";

/// Limits against abuse.
#[derive(Debug, Clone)]
pub struct Limits {
    /// HTTP/2 streams one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// The largest request message accepted.
    pub max_request_bytes: usize,
    /// The longest any call may take, of any service.
    pub request_timeout: Duration,
    /// gRPC connections open at once; more are closed on arrival.
    pub max_connections: usize,
    /// gRPC connections one peer address may have open at once (in effect at most
    /// `max_connections`); more from it are closed on arrival, so one address (a broken
    /// health check, an attacker) cannot take the whole cap.
    pub max_connections_per_peer: usize,
    /// How long a new connection has, from its accept, to finish its TLS handshake (with
    /// TLS) and send the HTTP/2 preface or its first HTTP/1.1 request line; past it, it is
    /// closed: a connection that never speaks holds no place under the cap for long.
    pub handshake_timeout: Duration,
    /// How often an HTTP/2 ping goes to a connection, and how long its answer may take
    /// before the connection is closed: a peer gone without a word (a killed pod, a
    /// partition) frees its connection.
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// Past this age a connection is told to go away (GOAWAY; its calls in flight finish
    /// within `max_connection_age_grace`), idle or not: clients reconnect and spread over
    /// the instances again, and no connection holds its place under the cap forever.
    pub max_connection_age: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_concurrent_streams: 1024,
            max_request_bytes: 16 * 1024,
            request_timeout: Duration::from_secs(10),
            max_connections: 16_384,
            max_connections_per_peer: 16_384 / 4,
            handshake_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(20),
            max_connection_age: Duration::from_secs(30 * 60),
        }
    }
}
