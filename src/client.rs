//! A Rust client for snowmint: one or several endpoints, retries on another endpoint when one
//! refuses, coalescing of concurrent `next_id()` calls into one `BatchIds`, and an optional
//! local buffer that prefetches batches in the background.
//!
//! Concurrency design: every `next_id()` without a buffer sends a oneshot sender over an mpsc
//! channel to one background task, which takes every waiting caller at once and asks the
//! server for that many IDs in one `BatchIds` call (one `NextId` for a single caller), so a
//! burst of callers costs one round trip. With a buffer, `next_id()` pops an ID from a local
//! queue; refills run in the background when the queue falls below a low-water mark, and a
//! buffered batch older than its maximum age is dropped unused, so IDs handed out stay
//! roughly time-sorted. IDs are unique either way; a dropped ID is never handed out.
//!
//! ```no_run
//! # async fn demo() -> Result<(), snowmint::client::ClientError> {
//! use snowmint::client::{BufferConfig, Client};
//! let client = Client::builder(["http://10.0.0.1:50051", "http://10.0.0.2:50051"])
//!     .buffer(BufferConfig::default())
//!     .connect()?;
//! let id = client.next_id().await?;
//! let ids = client.batch(100).await?;
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

use crate::proto::id_service_client::IdServiceClient;
use crate::proto::{BatchIdsRequest, NextIdRequest};

/// Why the client could not get IDs.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("invalid endpoint {endpoint:?}: {message}")]
    Endpoint { endpoint: String, message: String },
    #[error("no endpoints given")]
    NoEndpoints,
    #[error("every endpoint refused or failed: {0}")]
    Unavailable(tonic::Status),
    #[error("the server refused the request: {0}")]
    Rejected(tonic::Status),
    #[error("the client is shut down")]
    Closed,
}

/// The local buffer's settings.
#[derive(Debug, Clone)]
pub struct BufferConfig {
    /// IDs asked for per refill.
    pub batch: u32,
    /// A refill starts when fewer IDs than this are buffered.
    pub low_water: usize,
    /// Refills in flight at once, to keep up with heavy use.
    pub max_refills: usize,
    /// A buffered batch older than this is dropped unused.
    pub max_age: Duration,
}

impl Default for BufferConfig {
    fn default() -> BufferConfig {
        BufferConfig { batch: 4096, low_water: 8192, max_refills: 3, max_age: Duration::from_secs(1) }
    }
}

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    buffer: Option<BufferConfig>,
    timeout: Duration,
    attempts: usize,
}

impl ClientBuilder {
    /// Prefetch IDs into a local buffer.
    pub fn buffer(mut self, config: BufferConfig) -> ClientBuilder {
        self.buffer = Some(config);
        self
    }

    /// The deadline of each call to a server (default 1 s).
    pub fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    /// How many calls one request may make, across endpoints, before giving up (default:
    /// twice the number of endpoints, at least 2).
    pub fn attempts(mut self, attempts: usize) -> ClientBuilder {
        self.attempts = attempts.max(1);
        self
    }

    /// Makes the client. Connections are opened lazily, on first use; must be called within
    /// a tokio runtime (it starts the background tasks).
    pub fn connect(self) -> Result<Client, ClientError> {
        if self.endpoints.is_empty() {
            return Err(ClientError::NoEndpoints);
        }
        let mut channels = Vec::new();
        for endpoint in &self.endpoints {
            let bad = |e: tonic::transport::Error| ClientError::Endpoint {
                endpoint: endpoint.clone(),
                message: e.to_string(),
            };
            let channel = Endpoint::from_shared(endpoint.clone())
                .map_err(bad)?
                .tcp_nodelay(true)
                .connect_timeout(self.timeout)
                .connect_lazy();
            channels.push(IdServiceClient::new(channel));
        }
        let attempts = if self.attempts == 0 { (2 * channels.len()).max(2) } else { self.attempts };
        let pool = Arc::new(Pool { clients: channels, next: AtomicUsize::new(0), timeout: self.timeout, attempts });
        let (tx, rx) = mpsc::channel(4096);
        tokio::spawn(coalesce(pool.clone(), rx));
        let buffer = self.buffer.map(|config| {
            let buffer = Arc::new(Buffer {
                config,
                state: Mutex::new(BufferState::default()),
                refill: Arc::new(Notify::new()),
                filled: Notify::new(),
            });
            for _ in 0..buffer.config.max_refills.max(1) {
                tokio::spawn(refill(pool.clone(), Arc::downgrade(&buffer), buffer.refill.clone()));
            }
            buffer
        });
        Ok(Client { pool, coalescer: tx, buffer })
    }
}

/// The connections, and which one to use next.
struct Pool {
    clients: Vec<IdServiceClient<Channel>>,
    next: AtomicUsize,
    timeout: Duration,
    attempts: usize,
}

impl Pool {
    /// Asks for `count` IDs (NextId for one), moving to the next endpoint on UNAVAILABLE or
    /// a transport failure.
    async fn fetch(&self, count: u32) -> Result<Vec<u64>, ClientError> {
        let mut last = None;
        for attempt in 0..self.attempts {
            let i = self.next.load(Ordering::Relaxed) % self.clients.len();
            let mut client = self.clients[i].clone();
            let result = if count == 1 {
                let mut request = tonic::Request::new(NextIdRequest {});
                request.set_timeout(self.timeout);
                client.next_id(request).await.map(|r| vec![r.into_inner().id])
            } else {
                let mut request = tonic::Request::new(BatchIdsRequest { count });
                request.set_timeout(self.timeout);
                client.batch_ids(request).await.map(|r| r.into_inner().ids)
            };
            match result {
                Ok(ids) => return Ok(ids),
                Err(status) if retriable(&status) => {
                    // Move on from this endpoint (unless another caller already did).
                    let _ = self.next.compare_exchange(i, i + 1, Ordering::Relaxed, Ordering::Relaxed);
                    last = Some(status);
                    if attempt + 1 >= self.clients.len() {
                        // Every endpoint tried once: back off a little before going round again.
                        tokio::time::sleep(Duration::from_millis(10 << attempt.min(5))).await;
                    }
                }
                Err(status) => return Err(ClientError::Rejected(status)),
            }
        }
        Err(ClientError::Unavailable(last.expect("at least one attempt")))
    }
}

fn retriable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown | tonic::Code::Cancelled
    )
}

/// A client of one or several snowmint servers. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    pool: Arc<Pool>,
    coalescer: mpsc::Sender<oneshot::Sender<Result<u64, ClientError>>>,
    buffer: Option<Arc<Buffer>>,
}

impl Client {
    /// A builder for a client of `endpoints` (URLs such as `http://127.0.0.1:50051`).
    pub fn builder<I, S>(endpoints: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            buffer: None,
            timeout: Duration::from_secs(1),
            attempts: 0,
        }
    }

    /// One ID: from the buffer if there is one, otherwise coalesced with every other
    /// `next_id()` waiting at the same moment into one call.
    pub async fn next_id(&self) -> Result<u64, ClientError> {
        if let Some(buffer) = &self.buffer {
            return buffer.next_id(&self.pool).await;
        }
        let (tx, rx) = oneshot::channel();
        self.coalescer.send(tx).await.map_err(|_| ClientError::Closed)?;
        rx.await.map_err(|_| ClientError::Closed)?
    }

    /// `count` IDs, strictly increasing, straight from one server.
    pub async fn batch(&self, count: u32) -> Result<Vec<u64>, ClientError> {
        self.pool.fetch(count).await
    }
}

/// Takes every waiting `next_id()` caller at once and serves them with one call.
async fn coalesce(pool: Arc<Pool>, mut rx: mpsc::Receiver<oneshot::Sender<Result<u64, ClientError>>>) {
    let mut waiting = Vec::new();
    while rx.recv_many(&mut waiting, 65_536).await > 0 {
        waiting.retain(|tx| !tx.is_closed());
        if waiting.is_empty() {
            continue;
        }
        match pool.fetch(waiting.len() as u32).await {
            Ok(ids) => {
                for (tx, id) in waiting.drain(..).zip(ids) {
                    let _ = tx.send(Ok(id));
                }
            }
            Err(e) => {
                for tx in waiting.drain(..) {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }
}

/// A batch of prefetched IDs.
struct Fetched {
    ids: VecDeque<u64>,
    at: Instant,
}

#[derive(Default)]
struct BufferState {
    batches: VecDeque<Fetched>,
    /// IDs in `batches`.
    buffered: usize,
    /// Refills under way.
    refilling: usize,
    /// The last refill's error, for callers waiting on an empty buffer.
    error: Option<ClientError>,
}

/// The local buffer of prefetched IDs.
struct Buffer {
    config: BufferConfig,
    state: Mutex<BufferState>,
    /// Wakes a refill task. Shared with the tasks, which hold the buffer itself only weakly,
    /// so they end once the client is dropped.
    refill: Arc<Notify>,
    /// Wakes callers waiting on an empty buffer.
    filled: Notify,
}

impl Buffer {
    /// Pops one ID, dropping batches past their age; `None` when empty.
    fn pop(&self) -> (Option<u64>, bool) {
        let mut state = self.state.lock().expect("buffer lock");
        let now = Instant::now();
        while let Some(front) = state.batches.front() {
            if now.duration_since(front.at) <= self.config.max_age && !front.ids.is_empty() {
                break;
            }
            let dropped = state.batches.pop_front().expect("front exists");
            state.buffered -= dropped.ids.len();
        }
        let id = state.batches.front_mut().and_then(|b| b.ids.pop_front());
        if id.is_some() {
            state.buffered -= 1;
        }
        let low = state.buffered + state.refilling * self.config.batch as usize <= self.config.low_water;
        (id, low)
    }

    async fn next_id(&self, pool: &Pool) -> Result<u64, ClientError> {
        // A pop never waits, so a caller looping on next_id() would never give its thread
        // back, and the refill it just woke (queued on the same thread) would not run until
        // the buffer is empty. Take part in tokio's cooperative budget instead: yield now and
        // then.
        tokio::task::coop::consume_budget().await;
        let mut deadline = None;
        loop {
            let (id, low) = self.pop();
            if low {
                self.refill.notify_one();
            }
            if let Some(id) = id {
                return Ok(id);
            }
            // Empty: wait for a refill, registered before looking again so none is missed.
            let filled = self.filled.notified();
            if let (Some(id), _) = self.pop() {
                return Ok(id);
            }
            if let Some(error) = self.state.lock().expect("buffer lock").error.take() {
                return Err(error);
            }
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + pool.timeout * pool.attempts as u32);
            if tokio::time::timeout_at(deadline, filled).await.is_err() {
                return Err(ClientError::Unavailable(tonic::Status::unavailable("no IDs arrived in time")));
            }
        }
    }
}

/// One refill task: fetches batches while the buffer is low, then waits to be woken.
async fn refill(pool: Arc<Pool>, buffer: std::sync::Weak<Buffer>, signal: Arc<Notify>) {
    loop {
        let woken = signal.notified();
        let Some(strong) = buffer.upgrade() else { return };
        let needed = {
            let mut state = strong.state.lock().expect("buffer lock");
            let low = state.buffered + state.refilling * strong.config.batch as usize <= strong.config.low_water;
            if low {
                state.refilling += 1;
            }
            low
        };
        if !needed {
            drop(strong);
            // Wake now and then to end once the client is dropped.
            let _ = tokio::time::timeout(Duration::from_secs(1), woken).await;
            continue;
        }
        let result = pool.fetch(strong.config.batch).await;
        let failed = {
            let mut state = strong.state.lock().expect("buffer lock");
            state.refilling -= 1;
            match result {
                Ok(ids) => {
                    state.buffered += ids.len();
                    state.batches.push_back(Fetched { ids: ids.into(), at: Instant::now() });
                    state.error = None;
                }
                Err(e) => state.error = Some(e),
            }
            state.error.is_some()
        };
        strong.filled.notify_waiters();
        drop(strong);
        if failed {
            // Every endpoint failed: do not hammer them.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
