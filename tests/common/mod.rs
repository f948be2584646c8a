//! Helpers shared by the integration tests: servers, in this process or the real binary as a
//! child process, all started through one builder ([`server`]), and gRPC clients.
//!
//! Nothing here waits without a limit: every call made through these clients has a
//! deadline, every task and child process is awaited with a timeout, and children die with
//! the test (see [`child`]). A bug that makes something hang fails its test.

#![allow(dead_code)]

pub mod child;
pub mod claims;
pub mod etcd;
pub mod fleet;
pub mod netns;
pub mod podman;
pub mod postgres;
pub mod sequences;
pub mod server;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use snowmint::proto::id_service_client::IdServiceClient;
use tonic::transport::Channel;

pub use child::{Child, Output, output_within};
// Each test crate uses some of these, none all.
#[allow(unused_imports)]
pub use server::{Process, ServerBuilder, TestServer};

/// The longest any call of a test's client may take: far beyond any call's expected time,
/// so reaching it means something hangs.
pub const CALL_LIMIT: Duration = Duration::from_secs(10);

/// The longest a start that should fail may take to exit (an etcd start gives up after its
/// `--etcd-start-timeout-ms`, which tests keep to a few seconds).
pub const EXIT_LIMIT: Duration = Duration::from_secs(30);

/// Awaits `task`, at most `limit`, and returns its output; a task that panicked or did not
/// finish in time fails the test.
pub async fn join_within<T>(task: tokio::task::JoinHandle<T>, limit: Duration, what: &str) -> T {
    match tokio::time::timeout(limit, task).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => panic!("{what} failed: {e}"),
        Err(_) => panic!("{what} did not finish within {limit:?}"),
    }
}

/// The test of a file that serializes its tests holds this while it runs: their timing
/// bounds assume the machine is not also running another test's cluster or fleet.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

/// A channel to `addr`, connected at once, on which no call takes longer than
/// [`CALL_LIMIT`].
pub async fn channel(addr: SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(CALL_LIMIT)
        .timeout(CALL_LIMIT)
        .connect()
        .await
        .expect("connect")
}

/// A gRPC client for `addr`, connected at once; no call takes longer than [`CALL_LIMIT`].
pub async fn client(addr: SocketAddr) -> IdServiceClient<Channel> {
    IdServiceClient::new(channel(addr).await)
}

/// A minimal HTTP/1.1 GET over a fresh connection: (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_http_get(addr, path).await.unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

/// Like [`http_get`], with connection errors (and a server silent for [`CALL_LIMIT`])
/// returned.
pub async fn try_http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(CALL_LIMIT, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer within {CALL_LIMIT:?}")))??;
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// Finds `series` (e.g. `snowmint_ids_issued_total` or `x{a="b"}`) in a text exposition.
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Asserts `ids` holds no value twice.
pub fn assert_unique(ids: &[u64]) {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    let before = sorted.len();
    sorted.dedup();
    assert_eq!(sorted.len(), before, "{} duplicate IDs among {before}", before - sorted.len());
}

/// Asserts `ids` is strictly increasing.
pub fn assert_increasing(ids: &[u64]) {
    if let Some(i) = ids.windows(2).position(|w| w[0] >= w[1]) {
        panic!("IDs not increasing at {i}: {} then {}", ids[i], ids[i + 1]);
    }
}

/// The binary under test: this build's, or `SNOWMINT_TEST_BIN` (to run a test against an
/// older build, and see it fail there).
pub fn binary() -> PathBuf {
    std::env::var_os("SNOWMINT_TEST_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_snowmint")), PathBuf::from)
}

/// Runs the binary with `args` to completion, at most [`EXIT_LIMIT`]: (exit code, stdout,
/// stderr).
pub fn run_binary(args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(binary());
    command.args(args);
    let Output { code, stdout, stderr } = output_within(command, EXIT_LIMIT);
    (code, stdout, stderr)
}

/// Calls NextId until it succeeds, at most `limit`; every UNAVAILABLE on the way is allowed.
pub async fn next_id_eventually(client: &mut IdServiceClient<Channel>, limit: Duration) -> u64 {
    let start = std::time::Instant::now();
    loop {
        match client.next_id(snowmint::proto::NextIdRequest::default()).await {
            Ok(response) => return response.into_inner().id,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                assert!(start.elapsed() < limit, "no ID within {limit:?}: {status:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// What a hammering client saw: every ID it was given, and when each call ended how.
#[derive(Debug, Default)]
pub struct HammerLog {
    /// The IDs of its NextId and small BatchIds calls, in the order given.
    pub ids: Vec<u64>,
    /// (when the call ended, how long it took, its code), of those calls.
    pub calls: Vec<(std::time::Instant, Duration, tonic::Code)>,
    /// The IDs of the batches it asked for at the same time on a second connection, some
    /// spanning several ticks, in the order given: each connection's IDs increase, the two
    /// interleave (the minter shares ticks among connections).
    pub bulk: Vec<u64>,
    /// The named-sequence calls of its value callers ([`sequences::hammer_values_into`]),
    /// when it has any, each with what it was given.
    pub values: Vec<sequences::ValueCall>,
}

impl HammerLog {
    /// Every ID, from both connections.
    pub fn all_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.ids.iter().chain(&self.bulk).copied()
    }
}

impl HammerLog {
    /// The start of the last successful call that started before `t`.
    pub fn last_ok_started_before(&self, t: std::time::Instant) -> Option<std::time::Instant> {
        self.calls
            .iter()
            .map(|(end, took, code)| (*end - *took, code))
            .filter(|(start, code)| **code == tonic::Code::Ok && *start < t)
            .map(|(start, _)| start)
            .max()
    }

    /// The first call after `t` that ended with `code`.
    pub fn first_after(&self, t: std::time::Instant, code: tonic::Code) -> Option<std::time::Instant> {
        self.calls.iter().filter(|(end, _, c)| *c == code && *end > t).map(|c| c.0).min()
    }
}

/// Calls NextId and BatchIds(100) in turn against `addr` until `stop` is set, each call
/// with a 500 ms deadline, keeping every ID and every call's outcome; meanwhile, on a second
/// connection, asks for batches of mixed sizes up to a few ticks' worth (see [`BULK`]).
pub fn hammer(addr: SocketAddr, stop: Arc<std::sync::atomic::AtomicBool>) -> tokio::task::JoinHandle<HammerLog> {
    let log = Arc::new(std::sync::Mutex::new(HammerLog::default()));
    let task = hammer_into(addr, stop, log.clone(), Duration::ZERO);
    tokio::spawn(async move {
        // A hammer's calls end within their 500 ms deadline; once stopped, it ends after one.
        task.await.unwrap();
        std::mem::take(&mut *log.lock().unwrap())
    })
}

/// The batch sizes a hammer's second connection asks for in turn, a pause apart: mixed
/// sizes, some larger than a tick's 4,096, so the minter's fair queue interleaves them with
/// the first connection's calls under every fault.
const BULK: [u32; 3] = [5_000, 700, 9_000];
const BULK_PAUSE: Duration = Duration::from_millis(200);

/// Like [`hammer`], recording into `log` as it goes, so a test can watch it live, and
/// pausing `pace` between calls.
pub fn hammer_into(
    addr: SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
    log: Arc<std::sync::Mutex<HammerLog>>,
    pace: Duration,
) -> tokio::task::JoinHandle<()> {
    use snowmint::proto::{BatchIdsRequest, NextIdRequest};
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_millis(500));
    let bulk = {
        // Its own connection (a channel connects once), so the minter sees another caller.
        let mut client = IdServiceClient::new(endpoint.connect_lazy());
        let (stop, log) = (stop.clone(), log.clone());
        tokio::spawn(async move {
            for count in BULK.into_iter().cycle() {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let mut request = tonic::Request::new(BatchIdsRequest { count, ..Default::default() });
                request.set_timeout(Duration::from_millis(500));
                if let Ok(response) = client.batch_ids(request).await {
                    let ids = response.into_inner().ids;
                    assert_eq!(ids.len(), count as usize);
                    log.lock().unwrap().bulk.extend(ids);
                }
                tokio::time::sleep(BULK_PAUSE).await;
            }
        })
    };
    tokio::spawn(async move {
        let mut client = IdServiceClient::new(endpoint.connect_lazy());
        let mut round = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            round += 1;
            let start = std::time::Instant::now();
            let (ids, code) = if round.is_multiple_of(2) {
                let mut request = tonic::Request::new(NextIdRequest::default());
                request.set_timeout(Duration::from_millis(500));
                match client.next_id(request).await {
                    Ok(r) => (vec![r.into_inner().id], tonic::Code::Ok),
                    Err(s) => (Vec::new(), s.code()),
                }
            } else {
                let mut request = tonic::Request::new(BatchIdsRequest { count: 100, ..Default::default() });
                request.set_timeout(Duration::from_millis(500));
                match client.batch_ids(request).await {
                    Ok(r) => {
                        let ids = r.into_inner().ids;
                        assert_eq!(ids.len(), 100);
                        (ids, tonic::Code::Ok)
                    }
                    Err(s) => (Vec::new(), s.code()),
                }
            };
            {
                let mut log = log.lock().unwrap();
                log.ids.extend(ids);
                log.calls.push((std::time::Instant::now(), start.elapsed(), code));
            }
            if code != tonic::Code::Ok {
                tokio::time::sleep(Duration::from_millis(20)).await;
            } else if !pace.is_zero() {
                tokio::time::sleep(pace).await;
            }
        }
        bulk.await.unwrap();
    })
}

/// Calls the unary method at `path` with an empty request message over a bare HTTP/2
/// connection, telling the server the deadline `grpc_timeout` (e.g. `150m`) without
/// enforcing it here, unlike a tonic client: the outcome and its timing are the server's
/// alone. Returns the call's code and message.
pub async fn call_with_unenforced_deadline(addr: SocketAddr, path: &str, grpc_timeout: &str) -> (tonic::Code, String) {
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (h2, connection) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
        tokio::spawn(connection);
        let mut h2 = h2.ready().await.expect("HTTP/2 ready");
        let request = tonic::codegen::http::Request::post(format!("http://{addr}{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("grpc-timeout", grpc_timeout)
            .body(())
            .unwrap();
        let (response, mut send) = h2.send_request(request, false).expect("send the request");
        // A gRPC frame holding an empty message: not compressed, 0 bytes long.
        send.send_data(tonic::codegen::Bytes::from_static(&[0, 0, 0, 0, 0]), true).expect("send the message");
        let response = response.await.expect("response headers");
        let status_of = |headers: &tonic::codegen::http::HeaderMap| {
            let code = headers.get("grpc-status").map(|v| tonic::Code::from_bytes(v.as_bytes()))?;
            let message = headers.get("grpc-message").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            Some((code, message.unwrap_or_default()))
        };
        if let Some(status) = status_of(response.headers()) {
            return status;
        }
        let mut body = response.into_body();
        while let Some(data) = body.data().await {
            let data = data.expect("response body");
            let _ = body.flow_control().release_capacity(data.len());
        }
        let trailers = body.trailers().await.expect("trailers").expect("trailers with the status");
        status_of(&trailers).expect("a grpc-status in the trailers")
    };
    tokio::time::timeout(CALL_LIMIT, exchange).await.expect("the server answers")
}
