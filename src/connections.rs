//! A cap on the gRPC connections open at once.
//!
//! Every connection costs memory (its HTTP/2 state and buffers) and a file descriptor, and
//! a fleet that leaks connections, or opens one per call, would otherwise run the server out
//! of either. Past `--max-connections` a new connection is closed as soon as it is accepted
//! (the client sees it reset and retries, or goes to another instance) and counted in
//! `snowmint_connections_refused_total`; the connections already open are not touched.
//!
//! Each accepted connection holds a semaphore permit inside its I/O type, so the permit is
//! returned exactly when hyper drops the connection: however it ends (closed by the client,
//! by a keep-alive ping that went unanswered, by `--max-connection-age`, by shutdown).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use prometheus::{IntCounter, IntGauge};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::codegen::tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;

use crate::metrics::Metrics;

/// File descriptors kept for everything but client connections: the listeners, the admin
/// endpoint's connections, etcd, logs.
const RESERVED_FDS: u64 = 256;

/// An accepted connection holding its place under the cap.
pub struct Limited {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    open: IntGauge,
}

impl Drop for Limited {
    fn drop(&mut self) {
        self.open.dec();
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

/// The connections of `incoming`, at most `max` open at once; the ones past it closed on
/// arrival and counted.
pub fn limit<S>(incoming: S, max: usize, metrics: &Metrics) -> impl Stream<Item = io::Result<Limited>> + Send + 'static
where
    S: Stream<Item = io::Result<TcpStream>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(max));
    let open = metrics.connections_open.clone();
    let refused: IntCounter = metrics.connections_refused.clone();
    incoming.filter_map(move |accepted| match accepted {
        Err(e) => Some(Err(e)),
        Ok(stream) => match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                open.inc();
                Some(Ok(Limited { inner: stream, _permit: permit, open: open.clone() }))
            }
            Err(_) => {
                // Dropped here: the client's connection is closed at once.
                refused.inc();
                None
            }
        },
    })
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
