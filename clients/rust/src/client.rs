//! The client handle and its builder.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::buffer::{Buffer, BufferConfig};
use crate::closer::Closer;
use crate::coalesce::{self, Waiter};
use crate::credentials::Token;
use crate::endpoints::{Endpoints, Settings};
use crate::error::ClientError;
use crate::opaque::OpaqueId;
use crate::prefetch::Prefetch;
use crate::uuid::Uuid;

/// The largest `BatchIds` the coalescer makes unless told otherwise.
pub const DEFAULT_MAX_COALESCED: u32 = 4096;

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    buffer: Option<BufferConfig>,
    timeout: Duration,
    attempts: Option<usize>,
    max_coalesced: u32,
    sequence_prefetch: u32,
    /// Checked by [`ClientBuilder::connect`], where a bad one is refused.
    token: Option<Result<Token, ClientError>>,
    #[cfg(feature = "tls")]
    tls: Option<tonic::transport::ClientTlsConfig>,
}

impl ClientBuilder {
    /// Prefetch IDs into a local buffer.
    pub fn buffer(mut self, config: BufferConfig) -> ClientBuilder {
        self.buffer = Some(config);
        self
    }

    /// The deadline of each attempt on a server (default 1 s).
    pub fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    /// How many attempts one call makes at most, across endpoints (default: twice the
    /// number of endpoints, at least 2).
    pub fn attempts(mut self, attempts: usize) -> ClientBuilder {
        self.attempts = Some(attempts.max(1));
        self
    }

    /// The most IDs one coalesced `BatchIds` asks for (default 4,096). A server whose
    /// `--max-batch` is lower answers such a call `INVALID_ARGUMENT`; the client then halves
    /// the limit until the server accepts it, so setting it only saves those first calls.
    pub fn max_coalesced(mut self, max: u32) -> ClientBuilder {
        self.max_coalesced = max.max(1);
        self
    }

    /// Values of each unordered named sequence that `next_value()` fetches ahead in one
    /// `BatchValues` and hands out one by one (default 0: none, one `NextValue` per call). At
    /// most [`MAX_SEQUENCE_PREFETCH`](crate::prefetch::MAX_SEQUENCE_PREFETCH), the server's
    /// default `--max-batch`; above it [`ClientBuilder::connect`] fails with
    /// [`ClientError::InvalidSetting`]. Values still buffered when the client closes or the
    /// process ends are a gap, never handed out; buffered values leave the fleet-wide order
    /// of the calls. Ordered sequences are never buffered.
    pub fn sequence_prefetch(mut self, values: u32) -> ClientBuilder {
        self.sequence_prefetch = values;
        self
    }

    /// A bearer token for a server with a tenants' policy: every attempt of every call
    /// carries `authorization: Bearer <token>`. It must be 1 to 4,096 visible ASCII
    /// characters; else [`ClientBuilder::connect`] fails with [`ClientError::InvalidSetting`],
    /// which does not show it (nor does this builder's `Debug`). Over plain text it crosses the
    /// network as it is: beyond loopback, use `https://` endpoints.
    pub fn token(mut self, token: impl AsRef<str>) -> ClientBuilder {
        self.token = Some(Token::new(token.as_ref()));
        self
    }

    /// TLS settings for `https://` endpoints (a CA, a client certificate, the name to
    /// verify); without them, `https://` endpoints are verified against the system's roots.
    #[cfg(feature = "tls")]
    pub fn tls_config(mut self, tls: tonic::transport::ClientTlsConfig) -> ClientBuilder {
        self.tls = Some(tls);
        self
    }

    /// Makes the client. Connections open lazily, on first use, and a buffer sends nothing
    /// before the first `next_id()`. Must be called within a tokio runtime: it starts the
    /// background tasks.
    pub fn connect(self) -> Result<Client, ClientError> {
        let prefetch = Prefetch::new(self.sequence_prefetch)?;
        let settings = Settings {
            timeout: self.timeout,
            attempts: self.attempts,
            token: self.token.transpose()?,
            #[cfg(feature = "tls")]
            tls: self.tls,
        };
        let closer = Arc::new(Closer::default());
        let endpoints = Arc::new(Endpoints::new(&self.endpoints, settings, closer.clone())?);
        let (coalescer, waiting) = mpsc::channel(4096);
        tokio::spawn(coalesce::run(endpoints.clone(), waiting, self.max_coalesced as usize, closer.clone()));
        let buffer = self.buffer.map(|config| Buffer::start(config, &endpoints, &closer));
        Ok(Client { inner: Arc::new(Inner { endpoints, coalescer, buffer, prefetch, closer }) })
    }
}

/// A client of one or several snowmint servers. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: Arc<Endpoints>,
    coalescer: mpsc::Sender<Waiter>,
    buffer: Option<Arc<Buffer>>,
    /// The buffers of named sequences, with `sequence_prefetch` above 0.
    prefetch: Option<Prefetch>,
    /// Set by [`Client::close`], or once the last clone of the client is dropped; watched by
    /// every call and background task.
    closer: Arc<Closer>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.closer.close();
        self.endpoints.close();
    }
}

impl Client {
    /// A builder for a client of `endpoints`: URLs such as `http://10.0.0.1:50051`
    /// (`https://` with the `tls` feature), or `host:port` for plain text.
    pub fn builder<I, S>(endpoints: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            buffer: None,
            timeout: Duration::from_secs(1),
            attempts: None,
            max_coalesced: DEFAULT_MAX_COALESCED,
            sequence_prefetch: 0,
            token: None,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// One new ID: from the buffer if there is one, otherwise coalesced with every other
    /// `next_id()` waiting at the same moment into one call.
    pub async fn next_id(&self) -> Result<u64, ClientError> {
        self.next_id_by(None).await
    }

    /// [`Client::next_id`], all attempts included within `timeout`; past it the call fails
    /// with [`ClientError::DeadlineExceeded`].
    pub async fn next_id_within(&self, timeout: Duration) -> Result<u64, ClientError> {
        self.next_id_by(Some(Instant::now() + timeout)).await
    }

    async fn next_id_by(&self, deadline: Option<Instant>) -> Result<u64, ClientError> {
        let inner = &*self.inner;
        if inner.closer.is_closed() {
            return Err(ClientError::Closed);
        }
        if let Some(buffer) = &inner.buffer {
            return buffer.next_id(&inner.endpoints, deadline).await;
        }
        // The caller's deadline bounds the whole wait, its place in a full queue included.
        let shared = async {
            let (tx, rx) = oneshot::channel();
            inner.coalescer.send(Waiter { tx, deadline }).await.map_err(|_| ClientError::Closed)?;
            rx.await.map_err(|_| ClientError::Closed)?
        };
        let bounded = async {
            match deadline {
                Some(deadline) => {
                    tokio::time::timeout_at(deadline, shared).await.map_err(|_| ClientError::DeadlineExceeded)?
                }
                None => shared.await,
            }
        };
        inner.closer.or_closed(bounded).await
    }

    /// `count` new IDs, strictly increasing, from one server in one `BatchIds` call; never
    /// from the buffer. `count` must be 1 to the server's `--max-batch`.
    pub async fn batch(&self, count: u32) -> Result<Vec<u64>, ClientError> {
        self.batch_by(count, None).await
    }

    /// [`Client::batch`], all attempts included within `timeout`.
    pub async fn batch_within(&self, count: u32, timeout: Duration) -> Result<Vec<u64>, ClientError> {
        self.batch_by(count, Some(Instant::now() + timeout)).await
    }

    async fn batch_by(&self, count: u32, deadline: Option<Instant>) -> Result<Vec<u64>, ClientError> {
        if self.inner.closer.is_closed() {
            return Err(ClientError::Closed);
        }
        self.inner.endpoints.batch(count, deadline).await
    }

    /// One new opaque ID (from a server started with `--opaque-key-file`; others answer
    /// `FAILED_PRECONDITION`, returned as [`ClientError::Rejected`]). Never buffered or
    /// coalesced: one `NextId` call, failing over as [`Client::batch`] does.
    pub async fn next_opaque(&self) -> Result<OpaqueId, ClientError> {
        if self.inner.closer.is_closed() {
            return Err(ClientError::Closed);
        }
        let mut one = self.inner.endpoints.opaque(0, None).await?;
        one.pop().ok_or_else(|| ClientError::Rejected(tonic::Status::internal("the server sent no opaque ID")))
    }

    /// `count` new opaque IDs from one server in one `BatchIds` call, in no particular order
    /// (the IDs beneath them increase; their opaque values do not).
    pub async fn batch_opaque(&self, count: u32) -> Result<Vec<OpaqueId>, ClientError> {
        if self.inner.closer.is_closed() {
            return Err(ClientError::Closed);
        }
        self.inner.endpoints.opaque(count, None).await
    }

    /// One new UUIDv7 (RFC 9562), made by the server from one newly minted ID: unique
    /// fleet-wide as the ID is. Never buffered or coalesced: one `NextUuid` call, failing
    /// over as [`Client::batch`] does.
    pub async fn next_uuid(&self) -> Result<Uuid, ClientError> {
        self.uuids_by(None, None).await.map(|mut one| one.remove(0))
    }

    /// [`Client::next_uuid`], all attempts included within `timeout`.
    pub async fn next_uuid_within(&self, timeout: Duration) -> Result<Uuid, ClientError> {
        self.uuids_by(None, Some(Instant::now() + timeout)).await.map(|mut one| one.remove(0))
    }

    /// `count` new UUIDv7s, strictly increasing, from one server in one `BatchUuids` call.
    /// `count` must be 1 to the server's `--max-batch`.
    pub async fn batch_uuids(&self, count: u32) -> Result<Vec<Uuid>, ClientError> {
        self.uuids_by(Some(count), None).await
    }

    /// [`Client::batch_uuids`], all attempts included within `timeout`.
    pub async fn batch_uuids_within(&self, count: u32, timeout: Duration) -> Result<Vec<Uuid>, ClientError> {
        self.uuids_by(Some(count), Some(Instant::now() + timeout)).await
    }

    /// The next value of named sequence `name`: dense, never issued twice. One `NextValue`
    /// call, failing over as [`Client::batch`] does; with
    /// [`ClientBuilder::sequence_prefetch`], from the sequence's buffer when it holds one
    /// (an unordered sequence's buffer is refilled by one `BatchValues`, shared by the
    /// callers waiting). A name with no sequence is [`ClientError::Rejected`] with
    /// `NOT_FOUND`; a sequence used up, `OUT_OF_RANGE`.
    pub async fn next_value(&self, name: &str) -> Result<i64, ClientError> {
        self.next_value_by(name, None).await
    }

    /// [`Client::next_value`], all attempts included within `timeout`.
    pub async fn next_value_within(&self, name: &str, timeout: Duration) -> Result<i64, ClientError> {
        self.next_value_by(name, Some(Instant::now() + timeout)).await
    }

    async fn next_value_by(&self, name: &str, deadline: Option<Instant>) -> Result<i64, ClientError> {
        let Some(prefetch) = &self.inner.prefetch else {
            return self.values_by(name, None, deadline).await.map(|(mut one, _)| one.remove(0));
        };
        let buffered = prefetch.next_value(name, deadline, |count| self.values_by(name, count, deadline));
        self.inner.closer.or_closed(buffered).await
    }

    /// `count` values of named sequence `name`, increasing, from one server in one
    /// `BatchValues` call. `count` must be 1 to the server's `--max-batch`.
    pub async fn batch_values(&self, name: &str, count: u32) -> Result<Vec<i64>, ClientError> {
        self.values_by(name, Some(count), None).await.map(|(values, _)| values)
    }

    /// [`Client::batch_values`], all attempts included within `timeout`.
    pub async fn batch_values_within(
        &self,
        name: &str,
        count: u32,
        timeout: Duration,
    ) -> Result<Vec<i64>, ClientError> {
        self.values_by(name, Some(count), Some(Instant::now() + timeout)).await.map(|(values, _)| values)
    }

    /// `count` values of `name`, or one without; checked to be as many as asked, increasing;
    /// with whether the sequence is ordered.
    async fn values_by(
        &self,
        name: &str,
        count: Option<u32>,
        deadline: Option<Instant>,
    ) -> Result<(Vec<i64>, bool), ClientError> {
        if self.inner.closer.is_closed() {
            return Err(ClientError::Closed);
        }
        let (values, ordered) = self.inner.endpoints.values(name, count, deadline).await?;
        let asked = count.unwrap_or(1) as usize;
        if values.len() != asked || values.windows(2).any(|w| w[0] >= w[1]) || values.iter().any(|&v| v < 1) {
            let message =
                format!("the server sent {} values for {asked} asked, not all positive and increasing", values.len());
            return Err(ClientError::Rejected(tonic::Status::internal(message)));
        }
        Ok((values, ordered))
    }

    /// `count` UUIDs, or one without.
    async fn uuids_by(&self, count: Option<u32>, deadline: Option<Instant>) -> Result<Vec<Uuid>, ClientError> {
        if self.inner.closer.is_closed() {
            return Err(ClientError::Closed);
        }
        let uuids = self.inner.endpoints.uuids(count, deadline).await?;
        let asked = count.unwrap_or(1) as usize;
        if uuids.len() != asked {
            let message = format!("the server sent {} UUIDs for {asked} asked", uuids.len());
            return Err(ClientError::Rejected(tonic::Status::internal(message)));
        }
        Ok(uuids)
    }

    /// Ends the client at once, for every clone of it: the buffer stops refilling, every call
    /// waiting (on the buffer, on a shared call, in an attempt on a server) ends with
    /// [`ClientError::Closed`], the connections close, and every later call fails with
    /// [`ClientError::Closed`]. Buffered IDs and sequence values are dropped, never handed out
    /// (a gap). Calling it again does nothing; dropping the last clone of the client does the
    /// same.
    pub fn close(&self) {
        self.inner.closer.close();
        self.inner.endpoints.close();
    }
}
