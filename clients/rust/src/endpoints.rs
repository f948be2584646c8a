//! The endpoints, and the contract's rule for moving between them (clients/README.md).
//!
//! All calls go to one current endpoint. An attempt that was refused (`UNAVAILABLE`), failed
//! in transport (a status this client made from a broken connection, not one a server sent),
//! or got no answer within its own deadline moves the call to the next endpoint, round
//! robin, and that endpoint becomes the current one for every caller. Every other status
//! returns as it is: it would be the same on every server. An attempt cut short by the
//! caller's own deadline ends the call and moves nothing. Once every endpoint has been tried
//! in a call, each further attempt waits first (10 ms, doubling, at most 320 ms); nothing
//! waits after the last attempt. An attempt refused for its tenant's quota with a retry
//! delay waits that delay and tries the same endpoint again, when the call has an attempt and
//! the time left for it; else it ends the call as it is. Closing the client ends every call
//! at once and drops the channels, which closes the connections.
//!
//! tonic reconnects a lazy channel on demand, at the next call: a server that comes back is
//! used at once, with no reconnect backoff to wait out.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::closer::Closer;
use crate::credentials::{Credentials, Token};
use crate::error::{ClientError, retry_delay};
use crate::opaque::OpaqueId;
use crate::proto::id_service_client::IdServiceClient;
use crate::proto::{
    BatchIdsRequest, BatchUuidsRequest, BatchValuesRequest, NextIdRequest, NextUuidRequest, NextValueRequest,
};
use crate::uuid::Uuid;

/// The stub of one endpoint: its channel, every request stamped with the credentials.
type Stub = IdServiceClient<InterceptedService<Channel, Credentials>>;

/// The servers a client talks to, and which one is current.
pub(crate) struct Endpoints {
    /// One stub per endpoint, emptied by `close()` so that the channels (and their
    /// connections) go once the attempts in progress end.
    stubs: Mutex<Vec<Stub>>,
    /// How many endpoints there are.
    len: usize,
    /// The index of the current endpoint; always below `len`.
    current: AtomicUsize,
    closer: Arc<Closer>,
    /// The deadline of one attempt.
    pub(crate) timeout: Duration,
    /// Attempts one call makes at most.
    pub(crate) attempts: usize,
}

/// How the builder's settings reach the connections.
pub(crate) struct Settings {
    pub timeout: Duration,
    /// `None`: twice the number of endpoints, at least 2.
    pub attempts: Option<usize>,
    pub token: Option<Token>,
    #[cfg(feature = "tls")]
    pub tls: Option<tonic::transport::ClientTlsConfig>,
}

impl Endpoints {
    /// Lazily connected channels to `urls` (`http://`, `https://`, or a bare `host:port`
    /// for plain text).
    pub(crate) fn new(urls: &[String], settings: Settings, closer: Arc<Closer>) -> Result<Endpoints, ClientError> {
        if urls.is_empty() {
            return Err(ClientError::NoEndpoints);
        }
        let mut stubs = Vec::with_capacity(urls.len());
        for url in urls {
            let endpoint = endpoint(url, &settings)?.tcp_nodelay(true).connect_timeout(settings.timeout);
            let credentials = Credentials(settings.token.clone());
            stubs.push(IdServiceClient::with_interceptor(endpoint.connect_lazy(), credentials));
        }
        let attempts = settings.attempts.unwrap_or((2 * urls.len()).max(2)).max(1);
        Ok(Endpoints {
            len: stubs.len(),
            stubs: Mutex::new(stubs),
            current: AtomicUsize::new(0),
            closer,
            timeout: settings.timeout,
            attempts,
        })
    }

    /// Drops the stubs: the channels close once no attempt holds them.
    pub(crate) fn close(&self) {
        self.stubs.lock().expect("stubs lock").clear();
    }

    /// One `NextId` call, failing over as the contract says.
    pub(crate) async fn next_id(&self, deadline: Option<Instant>) -> Result<u64, ClientError> {
        self.call(deadline, |mut stub, timeout| async move {
            let mut request = tonic::Request::new(NextIdRequest::default());
            request.set_timeout(timeout);
            stub.next_id(request).await.map(|response| response.into_inner().id)
        })
        .await
    }

    /// One `BatchIds` call of `count`, failing over as the contract says.
    pub(crate) async fn batch(&self, count: u32, deadline: Option<Instant>) -> Result<Vec<u64>, ClientError> {
        self.call(deadline, |mut stub, timeout| async move {
            let mut request = tonic::Request::new(BatchIdsRequest { count, ..Default::default() });
            request.set_timeout(timeout);
            stub.batch_ids(request).await.map(|response| response.into_inner().ids)
        })
        .await
    }

    /// One `NextId` or `BatchIds` call asking for opaque IDs (`count` 0: `NextId`), failing
    /// over as the contract says: each opaque ID from the string form the server sends.
    /// With `count`, a `BatchUuids` of `count`; without, one `NextUuid`.
    pub(crate) async fn uuids(&self, count: Option<u32>, deadline: Option<Instant>) -> Result<Vec<Uuid>, ClientError> {
        let bytes = self
            .call(deadline, |mut stub, timeout| async move {
                if let Some(count) = count {
                    let mut request = tonic::Request::new(BatchUuidsRequest { count });
                    request.set_timeout(timeout);
                    stub.batch_uuids(request).await.map(|response| response.into_inner().uuids)
                } else {
                    let mut request = tonic::Request::new(NextUuidRequest {});
                    request.set_timeout(timeout);
                    stub.next_uuid(request).await.map(|response| vec![response.into_inner().uuid])
                }
            })
            .await?;
        bytes
            .iter()
            .map(|bytes| {
                Uuid::from_slice(bytes).ok_or_else(|| {
                    let message = format!("the server sent a UUID of {} bytes, not 16", bytes.len());
                    ClientError::Rejected(Status::internal(message))
                })
            })
            .collect()
    }

    /// With `count`, a `BatchValues` of `count` of sequence `name`; without, one `NextValue`.
    /// With the values, whether the answer says the sequence is ordered.
    pub(crate) async fn values(
        &self,
        name: &str,
        count: Option<u32>,
        deadline: Option<Instant>,
    ) -> Result<(Vec<i64>, bool), ClientError> {
        self.call(deadline, |mut stub, timeout| {
            let sequence = name.to_string();
            async move {
                if let Some(count) = count {
                    let mut request = tonic::Request::new(BatchValuesRequest { sequence, count });
                    request.set_timeout(timeout);
                    stub.batch_values(request).await.map(|response| {
                        let answer = response.into_inner();
                        (answer.values, answer.ordered)
                    })
                } else {
                    let mut request = tonic::Request::new(NextValueRequest { sequence });
                    request.set_timeout(timeout);
                    stub.next_value(request).await.map(|response| {
                        let answer = response.into_inner();
                        (vec![answer.value], answer.ordered)
                    })
                }
            }
        })
        .await
    }

    pub(crate) async fn opaque(&self, count: u32, deadline: Option<Instant>) -> Result<Vec<OpaqueId>, ClientError> {
        let texts = self
            .call(deadline, |mut stub, timeout| async move {
                if count == 0 {
                    let mut request = tonic::Request::new(NextIdRequest { opaque: true });
                    request.set_timeout(timeout);
                    stub.next_id(request).await.map(|response| vec![response.into_inner().text])
                } else {
                    let mut request = tonic::Request::new(BatchIdsRequest { count, opaque: true });
                    request.set_timeout(timeout);
                    stub.batch_ids(request).await.map(|response| response.into_inner().texts)
                }
            })
            .await?;
        texts
            .iter()
            .map(|text| {
                OpaqueId::parse(text).map_err(|e| {
                    ClientError::Rejected(Status::internal(format!("the server sent a malformed opaque ID: {e}")))
                })
            })
            .collect()
    }

    /// Makes the attempts of one call (see [`Endpoints::attempts`]), ended at once by
    /// `close()`.
    async fn call<T, F, Fut>(&self, deadline: Option<Instant>, attempt: F) -> Result<T, ClientError>
    where
        F: Fn(Stub, Duration) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        self.closer.or_closed(self.attempts(deadline, attempt)).await
    }

    /// Each attempt on the current endpoint, within the smaller of the attempt's timeout and
    /// what is left of the caller's `deadline`.
    async fn attempts<T, F, Fut>(&self, deadline: Option<Instant>, attempt: F) -> Result<T, ClientError>
    where
        F: Fn(Stub, Duration) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let mut last = None;
        for n in 0..self.attempts {
            let timeout = match deadline {
                Some(deadline) => self.timeout.min(deadline.saturating_duration_since(Instant::now())),
                None => self.timeout,
            };
            if timeout.is_zero() {
                return Err(ClientError::DeadlineExceeded);
            }
            let i = self.current.load(Ordering::Relaxed);
            let stub = self.stubs.lock().expect("stubs lock").get(i).cloned().ok_or(ClientError::Closed)?;
            let status = match tokio::time::timeout(timeout, attempt(stub, timeout)).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(status)) => status,
                Err(_) => Status::deadline_exceeded(format!("no answer within the attempt's {timeout:?}")),
            };
            let caller_passed = deadline.is_some_and(|deadline| Instant::now() >= deadline);
            if (caller_passed || timeout < self.timeout) && timed_out(&status) {
                // The caller's deadline, which cut the attempt short, not the server: nothing
                // moves.
                return Err(ClientError::DeadlineExceeded);
            }
            if let Some(wait) = quota_wait(&status, n + 1 < self.attempts, deadline) {
                // Over the tenant's quota at this server: wait as it says, then try it again.
                tokio::time::sleep(wait).await;
                continue;
            }
            if !fails_over(&status) {
                return Err(ClientError::Rejected(status));
            }
            last = Some(status);
            // Move on from this endpoint, unless another call already did.
            let _ = self.current.compare_exchange(i, next_index(i, self.len), Ordering::Relaxed, Ordering::Relaxed);
            if caller_passed {
                return Err(ClientError::DeadlineExceeded);
            }
            if let Some(pause) = backoff(n, self.len, self.attempts) {
                match deadline {
                    Some(deadline) if Instant::now() + pause >= deadline => {
                        tokio::time::sleep_until(deadline).await;
                        return Err(ClientError::DeadlineExceeded);
                    }
                    _ => tokio::time::sleep(pause).await,
                }
            }
        }
        Err(ClientError::Unavailable(last.expect("a call makes at least one attempt")))
    }
}

/// The tonic endpoint of `url`.
fn endpoint(url: &str, settings: &Settings) -> Result<Endpoint, ClientError> {
    let bad = |message: String| ClientError::Endpoint { endpoint: url.to_string(), message };
    let full = if url.contains("://") { url.to_string() } else { format!("http://{url}") };
    let endpoint = Endpoint::from_shared(full.clone()).map_err(|e| bad(e.to_string()))?;
    if !full.starts_with("https://") {
        return Ok(endpoint);
    }
    #[cfg(feature = "tls")]
    {
        let tls = settings.tls.clone().unwrap_or_else(|| tonic::transport::ClientTlsConfig::new().with_native_roots());
        endpoint.tls_config(tls).map_err(|e| bad(e.to_string()))
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = settings;
        Err(bad("https:// needs the client's `tls` feature".into()))
    }
}

/// Whether another endpoint may succeed where this attempt failed: the server refused
/// (`UNAVAILABLE`), the attempt's deadline passed (`DEADLINE_EXCEEDED`, from the server or
/// this client's timer), or the transport failed. A status tonic made here from a failure of
/// the connection (reset, closed, refused; its own timer's expiry too) carries that failure
/// as its source; one the server sent carries none, and returns as it is, whatever its code
/// (`UNKNOWN` and `CANCELLED` included).
pub(crate) fn fails_over(status: &Status) -> bool {
    matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded) || std::error::Error::source(status).is_some()
}

/// Whether an attempt ended for want of time: `DEADLINE_EXCEEDED`, or tonic's own timer,
/// which ends a call past its `grpc-timeout` with `CANCELLED` carrying `TimeoutExpired`.
fn timed_out(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = error.source();
    }
    status.code() == Code::DeadlineExceeded
}

/// How long to wait before trying the same endpoint again after `status`: its retry delay,
/// when it refused the call for its tenant's quota (`RESOURCE_EXHAUSTED` with a
/// `google.rpc.RetryInfo`), the call has an attempt `left`, and the delay ends before the
/// caller's `deadline`. `None`: the status is the call's answer (or fails over).
fn quota_wait(status: &Status, left: bool, deadline: Option<Instant>) -> Option<Duration> {
    if status.code() != Code::ResourceExhausted || !left {
        return None;
    }
    let wait = retry_delay(status)?;
    let fits = |deadline| Instant::now().checked_add(wait).is_some_and(|end| end < deadline);
    deadline.is_none_or(fits).then_some(wait)
}

/// The endpoint after `failed`, round robin over `len`.
pub(crate) fn next_index(failed: usize, len: usize) -> usize {
    (failed + 1) % len
}

/// The pause after failed attempt `n` (from 0) of a call that makes `attempts` over
/// `endpoints`: none until every endpoint was tried, then before attempt `k = n + 1`
/// `min(10 ms × 2^(k − endpoints), 320 ms)`, and none after the last attempt.
pub(crate) fn backoff(n: usize, endpoints: usize, attempts: usize) -> Option<Duration> {
    let k = n + 1;
    (k >= endpoints && k < attempts).then(|| Duration::from_millis(10 << (k - endpoints).min(5)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_endpoint_goes_round_and_round() {
        // Failing on whichever endpoint is current moves through every one, again and again:
        // the index stays below the count, so the compare-and-swap never misses.
        let current = AtomicUsize::new(0);
        let mut seen = Vec::new();
        for _ in 0..10 {
            let i = current.load(Ordering::Relaxed);
            seen.push(i);
            current.compare_exchange(i, next_index(i, 3), Ordering::Relaxed, Ordering::Relaxed).unwrap();
        }
        assert_eq!(seen, [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn pauses_come_only_between_rounds_and_never_after_the_last_attempt() {
        // Two endpoints, four attempts: A, B, 10 ms, A, 20 ms, B.
        let pauses: Vec<_> = (0..4).map(|n| backoff(n, 2, 4).map(|d| d.as_millis())).collect();
        assert_eq!(pauses, [None, Some(10), Some(20), None]);
        let long: Vec<_> = (0..9).map(|n| backoff(n, 1, 9).map(|d| d.as_millis())).collect();
        assert_eq!(long, [Some(10), Some(20), Some(40), Some(80), Some(160), Some(320), Some(320), Some(320), None]);
        assert_eq!(backoff(0, 1, 1), None);
    }

    #[test]
    fn only_refusals_deadlines_and_transport_failures_fail_over() {
        assert!(fails_over(&Status::unavailable("refused")));
        assert!(fails_over(&Status::deadline_exceeded("late")));
        for sent in [Code::Unknown, Code::Cancelled, Code::InvalidArgument, Code::Internal, Code::ResourceExhausted] {
            assert!(!fails_over(&Status::new(sent, "from the server")), "{sent:?}");
        }
        // What tonic makes of a broken connection: the failure rides along as the source.
        let broken = Status::from_error(Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset)));
        assert_eq!(broken.code(), Code::Unknown);
        assert!(fails_over(&broken));
        let timer = Status::from_error(Box::new(tonic::TimeoutExpired(())));
        assert_eq!(timer.code(), Code::Cancelled);
        assert!(fails_over(&timer));
        assert!(timed_out(&timer) && timed_out(&Status::deadline_exceeded("late")));
        assert!(!timed_out(&broken) && !timed_out(&Status::unavailable("refused")));
    }
}
