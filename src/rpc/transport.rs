//! The gRPC port's HTTP server: accepts connections (plain or TLS, already capped by
//! [`super::connections`]), serves each with hyper over HTTP/2 or HTTP/1.1, and hands each
//! request to the front door ([`Dispatch`]), which sends it down one path.
//!
//! tonic's own server would wrap every request in half a dozen layers (tracing span, error
//! recovery, timeout, connection info, boxing, routing) before any reached a handler; this
//! one keeps what they do for snowmint and no more:
//!
//! - `--max-concurrent-streams`, the HTTP/2 keep-alive pings and their timeout, as hyper's
//!   own settings;
//! - `--request-timeout-ms` and the caller's timeout, kept by the front door for every path
//!   ([`super::context`]);
//! - `--max-connection-age`: past it a connection is told to go away (GOAWAY), and closed
//!   once its calls in flight had `max_connection_age_grace` more to finish;
//! - `--handshake-timeout-ms`: a connection that has not sent the HTTP/2 preface or its
//!   first HTTP/1.1 request line by then, counted from its accept (so TLS's handshake counts
//!   too), is closed and counted ([`super::connections`]);
//! - the peer's address (and TLS session) in every request's extensions, where tonic's
//!   handlers read it;
//! - on shutdown: accepting stops and the listener closes at once, every connection is told
//!   to go away, and [`serve`] returns once the last one has finished its calls; dropped
//!   before that (the server's shutdown grace is over), it closes them all.
//!
//! HTTP/2 answers carry no `Date` header, as gRPC's own servers send none: it would be
//! formatted and compressed into every response for no client that reads it. HTTP/1.1
//! answers (Connect's, to `curl` and browsers) keep it.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;

use super::Limits;
use super::connections::{Accepted, Watched};
use super::dispatch::{Dispatch, Paths};
use crate::metrics::{HANDSHAKE_PROTOCOL, Metrics};

/// Serves the connections of `incoming` until `stop` completes, then lets every connection
/// finish its calls; returns once all have closed.
pub async fn serve<I, IO, E>(
    incoming: I,
    paths: Arc<Paths>,
    limits: &Limits,
    metrics: &Metrics,
    stop: impl Future<Output = ()>,
) where
    I: Stream<Item = Result<IO, E>>,
    IO: AsyncRead + AsyncWrite + Connected + Accepted + Unpin + Send + 'static,
    IO::ConnectInfo: Clone + Send + Sync + 'static,
    E: std::fmt::Display,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // With a timer, hyper also enforces its HTTP/1.1 header read timeout.
    builder.http1().timer(TokioTimer::new());
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .keep_alive_interval(limits.keepalive_interval)
        .keep_alive_timeout(limits.keepalive_timeout)
        .auto_date_header(false);
    let unopened = metrics.connections_handshake_timeouts.with_label_values(&[HANDSHAKE_PROTOCOL]);
    let (closing, closed) = watch::channel(());
    // The connections' tasks: dropped with this future, they end too, so a server given up
    // on after its shutdown grace leaves no connection behind.
    let mut connections = JoinSet::new();
    {
        // Dropped when the loop ends, which closes the listener: no client connects to a
        // server that will not answer.
        let mut incoming = pin!(incoming);
        let mut stop = pin!(stop);
        loop {
            let io = tokio::select! {
                () = &mut stop => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                next = incoming.next() => match next {
                    Some(Ok(io)) => io,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "accept failed");
                        continue;
                    }
                    None => break,
                },
            };
            let dispatch = Dispatch::new(io.connect_info(), paths.clone());
            let age = (limits.max_connection_age, limits.request_timeout);
            let bound = HandshakeBound { by: io.accepted_at() + limits.handshake_timeout, timed_out: unopened.clone() };
            connections.spawn(serve_connection(builder.clone(), io, dispatch, closed.clone(), age, bound));
        }
    }
    let _ = closing.send(());
    while connections.join_next().await.is_some() {}
}

/// The handshake bound of one connection.
struct HandshakeBound {
    /// The instant by which it must have opened: its accept plus `--handshake-timeout-ms`.
    by: tokio::time::Instant,
    /// `snowmint_connections_handshake_timeouts_total{stage="protocol"}`.
    timed_out: IntCounter,
}

/// Serves one connection until it closes: told to go away at shutdown (a change on
/// `closing`) or past its age, closed at once when its calls outlast the age's grace, and
/// closed (and counted) when it has not opened by its handshake bound.
async fn serve_connection<IO, C>(
    builder: auto::Builder<TokioExecutor>,
    io: IO,
    dispatch: Dispatch<C>,
    mut closing: watch::Receiver<()>,
    (max_age, grace): (Duration, Duration),
    handshake: HandshakeBound,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: Clone + Send + Sync + 'static,
{
    let (io, opened) = Watched::new(io);
    let mut connection = pin!(builder.serve_connection(TokioIo::new(io), dispatch));
    let aged = tokio::time::sleep(max_age);
    let mut aged = pin!(aged);
    let bound = tokio::time::sleep_until(handshake.by);
    let mut bound = pin!(bound);
    let (mut told, mut open) = (false, false);
    loop {
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut aged => {
                if told {
                    tracing::debug!("closed a connection whose calls outlasted its age's grace");
                    return;
                }
                told = true;
                connection.as_mut().graceful_shutdown();
                aged.as_mut().reset(tokio::time::Instant::now() + grace);
            }
            () = &mut bound, if !open => {
                if !has_opened(&opened, &handshake) {
                    return;
                }
                open = true;
            }
            _ = closing.changed(), if !told => {
                // Shutdown: no age applies any more, only the server's own grace, which its
                // caller keeps.
                told = true;
                connection.as_mut().graceful_shutdown();
                aged.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(365 * 86_400));
            }
        }
    }
}

/// Whether the connection has opened by its bound; counted when it has not, and then closed
/// by the caller. The rule: no connection holds its place under the caps for longer than
/// `--handshake-timeout-ms` without having spoken HTTP (hyper itself would wait for its
/// first bytes for ever).
fn has_opened(opened: &AtomicBool, handshake: &HandshakeBound) -> bool {
    if opened.load(Ordering::Acquire) {
        return true;
    }
    handshake.timed_out.inc();
    tracing::debug!("closed a connection that did not open within --handshake-timeout-ms");
    false
}
