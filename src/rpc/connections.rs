//! What a gRPC connection may hold, and for how long before it has spoken.
//!
//! Every connection costs memory (its HTTP/2 state and buffers) and a file descriptor, and
//! a fleet that leaks connections, or opens one per call, would otherwise run the server out
//! of either. Three rules bound them:
//!
//! - **The cap** (`--max-connections`): past it a new connection is closed as soon as it is
//!   accepted (the client sees it reset and retries, or goes to another instance) and counted
//!   in `snowmint_connections_refused_total{reason="max_connections"}`; the connections
//!   already open are not touched.
//! - **The cap per peer address** (`--max-connections-per-peer`, a quarter of the cap by
//!   default): past it a new connection from that address is closed on arrival, counted under
//!   `reason="per_peer"`; so one address (a broken health check, an attacker) cannot take the
//!   whole cap, and the others keep three quarters of it.
//! - **The handshake bound** (`--handshake-timeout-ms`): a connection must finish its TLS
//!   handshake (with TLS) and send the HTTP/2 preface or its first HTTP/1.1 request line
//!   within it, counted from its accept, or it is closed and counted in
//!   `snowmint_connections_handshake_timeouts_total{stage}`. Without it a connection that
//!   never speaks would hold its place under the cap for ever: hyper waits for the first
//!   bytes without a limit, and keep-alive pings start only once HTTP/2 has.
//!
//! Each accepted connection holds a semaphore permit and its peer's count inside its I/O
//! type, so both are returned exactly when the connection is dropped: however it ends (closed
//! by the client, by a keep-alive ping that went unanswered, by `--max-connection-age`, by the
//! handshake bound, by shutdown). [`Opening`] reads the first bytes of a connection, after TLS,
//! to tell when it has opened; [`Watched`] feeds it from the connection's reads.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use prometheus::{IntCounter, IntGauge};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tonic::codegen::tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;

use crate::metrics::{Metrics, REFUSED_MAX_CONNECTIONS, REFUSED_PER_PEER};

/// File descriptors kept for everything but client connections: the listeners, the admin
/// endpoint's connections, etcd, logs.
const RESERVED_FDS: u64 = 256;

/// An accepted connection holding its place under the cap, and under its peer's.
pub struct Limited {
    inner: TcpStream,
    /// When it was accepted: its handshake bound counts from here.
    accepted: Instant,
    _permit: OwnedSemaphorePermit,
    /// Its place among its peer address's connections, given back on drop.
    peer: IpAddr,
    peers: Arc<Mutex<PeerCounts>>,
    open: IntGauge,
}

impl Drop for Limited {
    fn drop(&mut self) {
        self.open.dec();
        self.peers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(self.peer);
    }
}

/// A connection that knows when it was accepted, the start of its handshake bound: the TCP
/// connection itself, or the TLS session over it.
pub trait Accepted {
    fn accepted_at(&self) -> Instant;
}

impl Accepted for Limited {
    fn accepted_at(&self) -> Instant {
        self.accepted
    }
}

impl Connected for Limited {
    type ConnectInfo = <TcpStream as Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for Limited {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Limited {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The connections open per peer address, each at most `max`. An address is kept only
/// while it has a connection open, so the table holds at most `--max-connections` entries.
#[derive(Debug)]
pub struct PeerCounts {
    max: usize,
    open: HashMap<IpAddr, usize>,
}

impl PeerCounts {
    pub fn new(max: usize) -> PeerCounts {
        PeerCounts { max, open: HashMap::new() }
    }

    /// Takes a place for a connection from `peer`; false, and nothing taken, when `peer`
    /// already has `max` open.
    pub fn try_add(&mut self, peer: IpAddr) -> bool {
        let count = self.open.entry(peer).or_insert(0);
        if *count >= self.max {
            return false;
        }
        *count += 1;
        true
    }

    /// Gives back a place [`PeerCounts::try_add`] took for `peer`.
    pub fn remove(&mut self, peer: IpAddr) {
        if let Some(count) = self.open.get_mut(&peer) {
            *count -= 1;
            if *count == 0 {
                self.open.remove(&peer);
            }
        }
    }

    /// The addresses with a connection open.
    pub fn peers(&self) -> usize {
        self.open.len()
    }
}

/// The address a connection is counted under: an IPv4 client of a dual-stack listener
/// (`::ffff:a.b.c.d`) under its IPv4 address, as it would be on an IPv4 listener.
fn peer_key(stream: &TcpStream) -> Option<IpAddr> {
    stream.peer_addr().ok().map(|addr| addr.ip().to_canonical())
}

/// The connections of `incoming`, at most `max` open at once and at most `per_peer` from
/// one address; the ones past either closed on arrival and counted.
pub fn limit<S>(
    incoming: S,
    max: usize,
    per_peer: usize,
    metrics: &Metrics,
) -> impl Stream<Item = io::Result<Limited>> + Send + 'static
where
    S: Stream<Item = io::Result<TcpStream>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(max));
    let peers = Arc::new(Mutex::new(PeerCounts::new(per_peer)));
    let open = metrics.connections_open.clone();
    let over_cap: IntCounter = metrics.connections_refused.with_label_values(&[REFUSED_MAX_CONNECTIONS]);
    let over_peer: IntCounter = metrics.connections_refused.with_label_values(&[REFUSED_PER_PEER]);
    incoming.filter_map(move |accepted| {
        let stream = match accepted {
            Err(e) => return Some(Err(e)),
            Ok(stream) => stream,
        };
        // Dropped on every path that returns `None`: the client's connection is closed at once.
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            over_cap.inc();
            return None;
        };
        let Some(peer) = peer_key(&stream) else {
            tracing::debug!("a connection closed before it could be counted");
            return None;
        };
        if !peers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).try_add(peer) {
            over_peer.inc();
            return None;
        }
        open.inc();
        let accepted = Instant::now();
        Some(Ok(Limited { inner: stream, accepted, _permit: permit, peer, peers: peers.clone(), open: open.clone() }))
    })
}

/// The HTTP/2 connection preface, the first bytes of every HTTP/2 client.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads a connection's first bytes (after TLS) to tell when it has opened: the HTTP/2
/// preface whole, or, once the bytes are not the preface, the end of the first line (an
/// HTTP/1.1 request line). What follows is hyper's to judge: malformed bytes end the
/// connection there, and an HTTP/1.1 request's headers have hyper's own timeout.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Opening {
    /// How many of the first bytes matched the preface.
    matched: usize,
    /// A byte that is not the preface's came: this is HTTP/1.1 (or nothing hyper serves).
    not_preface: bool,
    /// A line feed came.
    line_ended: bool,
}

impl Opening {
    /// Reads the next bytes of the connection; true once it has opened.
    pub fn read(&mut self, bytes: &[u8]) -> bool {
        for &byte in bytes {
            if self.opened() {
                break;
            }
            if !self.not_preface {
                if byte == PREFACE[self.matched] {
                    self.matched += 1;
                } else {
                    self.not_preface = true;
                }
            }
            self.line_ended |= byte == b'\n';
        }
        self.opened()
    }

    pub fn opened(&self) -> bool {
        self.matched == PREFACE.len() || (self.not_preface && self.line_ended)
    }
}

/// A connection's I/O with its first reads watched by an [`Opening`]: `opened` is set once
/// they open it, and from then on reads pass through untouched.
pub struct Watched<IO> {
    inner: IO,
    opening: Option<Opening>,
    opened: Arc<AtomicBool>,
}

impl<IO> Watched<IO> {
    /// `inner`, watched; the flag is set once it has opened.
    pub fn new(inner: IO) -> (Watched<IO>, Arc<AtomicBool>) {
        let opened = Arc::new(AtomicBool::new(false));
        (Watched { inner, opening: Some(Opening::default()), opened: opened.clone() }, opened)
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(opening)) = (&read, self.opening.as_mut())
            && opening.read(&buf.filled()[before..])
        {
            self.opening = None;
            self.opened.store(true, Ordering::Release);
        }
        read
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Raises this process's soft limit of open files to its hard limit (as the Go runtime
/// does at start), and says so in a warning when even that leaves too few for
/// `max_connections`. Returns the soft limit now in force.
pub fn raise_open_files(max_connections: usize) -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    let soft = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = limit.rlim_max;
            }
        }
        limit.rlim_cur
    };
    let needed = max_connections as u64 + RESERVED_FDS;
    if soft < needed {
        tracing::warn!(
            open_files_limit = soft,
            max_connections,
            "the open-files limit (ulimit -n) is below --max-connections plus {RESERVED_FDS}: past it new connections \
             fail to be accepted; raise the limit or lower --max-connections"
        );
    }
    soft
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use tokio::io::AsyncReadExt;

    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn each_peer_address_gets_at_most_its_share_and_gets_it_back() {
        let mut peers = PeerCounts::new(2);
        assert!(peers.try_add(ip("10.0.0.1")) && peers.try_add(ip("10.0.0.1")));
        assert!(!peers.try_add(ip("10.0.0.1")), "a third from one address");
        // Another address has its own share.
        assert!(peers.try_add(ip("10.0.0.2")) && peers.try_add(ip("10.0.0.2")));
        assert!(!peers.try_add(ip("10.0.0.2")));
        peers.remove(ip("10.0.0.1"));
        assert!(peers.try_add(ip("10.0.0.1")), "a place given back is free again");
        for _ in 0..2 {
            peers.remove(ip("10.0.0.1"));
            peers.remove(ip("10.0.0.2"));
        }
        assert_eq!(peers.peers(), 0, "an address with nothing open is forgotten");
        // A refusal takes nothing: one removal after it frees the one place there is.
        let mut one = PeerCounts::new(1);
        assert!(one.try_add(ip("::1")) && !one.try_add(ip("::1")));
        one.remove(ip("::1"));
        assert_eq!(one.peers(), 0);
    }

    #[test]
    fn an_ipv4_client_of_a_dual_stack_listener_counts_as_its_ipv4_address() {
        let mapped = IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0001));
        assert_eq!(mapped.to_canonical(), ip("10.0.0.1"));
    }

    #[test]
    fn the_http2_preface_opens_only_when_whole() {
        let mut at_once = Opening::default();
        assert!(at_once.read(PREFACE));
        let mut by_byte = Opening::default();
        for (i, byte) in PREFACE.iter().enumerate() {
            assert_eq!(by_byte.read(&[*byte]), i == PREFACE.len() - 1, "after byte {i}");
        }
        // Its first line ends after 16 bytes: that is no HTTP/1.1 request line yet.
        let mut half = Opening::default();
        assert!(!half.read(&PREFACE[..16]));
        assert!(!half.read(&PREFACE[16..23]));
        // A preface and a frame in one read.
        let mut more = Opening::default();
        assert!(more.read(&[&PREFACE[..], &[0, 0, 0, 4, 0, 0, 0, 0, 0]].concat()));
    }

    #[test]
    fn an_http1_request_line_opens_once_it_ends() {
        let mut line = Opening::default();
        assert!(!line.read(b"POST /snowmint.v1.IdService/NextId HTTP/1.1\r"));
        assert!(line.read(b"\nHost: x\r\n"));
        let mut short = Opening::default();
        assert!(short.read(b"GET / HTTP/1.1\r\n"));
        // Bytes that are neither: hyper refuses them once the line ends, so that is opened
        // too; without an end, they are still opening.
        let mut junk = Opening::default();
        assert!(!junk.read(b"\x16\x03\x01\x02\x00"));
        assert!(junk.read(b"\n"));
        // The preface's first line, then something else: an HTTP/1.1 request line.
        let mut pri = Opening::default();
        assert!(pri.read(b"PRI * HTTP/2.0\r\nX"));
        assert!(!Opening::default().read(b""));
    }

    #[tokio::test]
    async fn watched_reads_pass_through_and_set_the_flag_once_opened() {
        let bytes = [&PREFACE[..], b"rest"].concat();
        let (mut watched, opened) = Watched::new(&bytes[..]);
        let mut first = [0u8; 10];
        watched.read_exact(&mut first).await.unwrap();
        assert!(!opened.load(Ordering::Acquire), "opened after 10 bytes");
        let mut rest = Vec::new();
        watched.read_to_end(&mut rest).await.unwrap();
        assert!(opened.load(Ordering::Acquire));
        assert_eq!([&first[..], &rest].concat(), bytes, "the bytes as they were");
        assert!(watched.opening.is_none(), "still watching after it opened");
    }
}
