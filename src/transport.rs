//! The gRPC port's HTTP server: accepts connections (plain or TLS, already capped by
//! [`crate::connections`]), serves each with hyper over HTTP/2 or HTTP/1.1, and hands each
//! request to [`NextIdPath`] when it is a plain gRPC `NextId` call, or to tonic's routes (the
//! `IdService` over gRPC and Connect, health, reflection) otherwise.
//!
//! tonic's own server would wrap every request in half a dozen layers (tracing span, error
//! recovery, timeout, connection info, boxing, routing) before any reached a handler; this
//! one keeps what they do for snowmint and no more:
//!
//! - `--max-concurrent-streams`, the HTTP/2 keep-alive pings and their timeout, as hyper's
//!   own settings;
//! - `--request-timeout-ms` and the caller's `grpc-timeout`, the shorter of which ends a call
//!   to tonic's routes with `CANCELLED`, as tonic's server does, and whose end from the call's
//!   arrival the handlers give the minter ([`CallDeadline`]; a plain `NextId` keeps them in
//!   its own way: [`NextIdPath`]);
//! - `--max-connection-age`: past it a connection is told to go away (GOAWAY), and closed
//!   once its calls in flight had `max_connection_age_grace` more to finish;
//! - `--handshake-timeout-ms`: a connection that has not sent the HTTP/2 preface or its
//!   first HTTP/1.1 request line by then, counted from its accept (so TLS's handshake counts
//!   too), is closed and counted ([`crate::connections`]);
//! - the peer's address (and TLS session) in every request's extensions, where tonic's
//!   handlers read it;
//! - on shutdown: accepting stops and the listener closes at once, every connection is told
//!   to go away, and [`serve`] returns once the last one has finished its calls; dropped
//!   before that (the server's shutdown grace is over), it closes them all.
//!
//! HTTP/2 answers carry no `Date` header, as gRPC's own servers send none: it would be
//! formatted and compressed into every response for no client that reads it. HTTP/1.1
//! answers (Connect's, to `curl` and browsers) keep it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;
use tonic::service::Routes;
use tonic::transport::server::Connected;
use tower_service::Service as _;

use crate::connections::{Accepted, Watched};
use crate::metrics::{HANDSHAKE_PROTOCOL, Metrics};
use crate::minter::ConnectionKey;
use crate::next_path::{NextIdBody, NextIdPath};
use crate::server::Limits;
use crate::service::{CallDeadline, parse_grpc_timeout};

/// Serves the connections of `incoming` until `stop` completes, then lets every connection
/// finish its calls; returns once all have closed.
pub async fn serve<I, IO, E>(
    incoming: I,
    routes: Routes,
    next_id: Arc<NextIdPath>,
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
    let routes = routes.prepare();
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
            let dispatch = Dispatch::new(io.connect_info(), routes.clone(), next_id.clone(), limits.request_timeout);
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

/// One connection's requests: `NextId` to its own path, the rest to tonic's routes.
#[derive(Clone)]
struct Dispatch<C> {
    /// The peer's address (and TLS session), as tonic's handlers read it.
    info: C,
    /// The connection's key in the minter's fair queue.
    connection: ConnectionKey,
    routes: Routes,
    next_id: Arc<NextIdPath>,
    request_timeout: Duration,
}

impl<C: Clone + Send + Sync + 'static> Dispatch<C> {
    fn new(info: C, routes: Routes, next_id: Arc<NextIdPath>, request_timeout: Duration) -> Dispatch<C> {
        // The peer's address as tonic reads it from a request, read once for the connection.
        let mut probe = tonic::Request::new(());
        probe.extensions_mut().insert(info.clone());
        let connection = ConnectionKey::of_peer(probe.remote_addr());
        Dispatch { info, connection, routes, next_id, request_timeout }
    }
}

type Answering = Pin<Box<dyn Future<Output = Result<Response<Answer>, Infallible>> + Send>>;

impl<C: Clone + Send + Sync + 'static> hyper::service::Service<Request<Incoming>> for Dispatch<C> {
    type Response = Response<Answer>;
    type Error = Infallible;
    type Future = Answering;

    fn call(&self, mut request: Request<Incoming>) -> Answering {
        if let Some(plain) = self.next_id.takes(&request) {
            let (next_id, connection) = (self.next_id.clone(), self.connection);
            return Box::pin(async move { Ok(next_id.call(request, plain, connection).await.map(Answer::NextId)) });
        }
        let caller = request.headers().get("grpc-timeout").and_then(|v| parse_grpc_timeout(v.to_str().ok()?));
        let limit = caller.map_or(self.request_timeout, |caller| caller.min(self.request_timeout));
        request.extensions_mut().insert(self.info.clone());
        // The handler gives the minter what is left of the same limit, so that the minter's
        // refusal, with its reason, comes before this timer's `CANCELLED`.
        request.extensions_mut().insert(CallDeadline { arrived: std::time::Instant::now(), limit });
        let answer = self.routes.clone().call(request);
        Box::pin(async move {
            Ok(match tokio::time::timeout(limit, answer).await {
                Ok(Ok(response)) => response.map(Answer::Routes),
                Ok(Err(never)) => match never {},
                Err(_) => Status::cancelled("Timeout expired").into_http(),
            })
        })
    }
}

/// A response body: `NextId`'s own, or one of tonic's routes.
pub enum Answer {
    NextId(NextIdBody),
    Routes(tonic::body::Body),
}

impl Default for Answer {
    fn default() -> Answer {
        Answer::NextId(NextIdBody::default())
    }
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        match self.get_mut() {
            Answer::NextId(body) => Pin::new(body).poll_frame(cx),
            Answer::Routes(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Answer::NextId(body) => body.is_end_stream(),
            Answer::Routes(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Answer::NextId(body) => body.size_hint(),
            Answer::Routes(body) => body.size_hint(),
        }
    }
}
