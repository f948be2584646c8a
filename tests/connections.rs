//! Many client connections on one server: the cap on open connections, the cap per peer
//! address, the bound on a connection's handshake, and what each connection costs.
//!
//! The bounded cases run with every `cargo test`; `connection_table` (ignored) is what
//! `scripts/measure/connections` runs for the connection table of docs/operations/fleets.md: a real server process,
//! thousands of idle connections and hundreds of active ones from this process.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::tls::TestCa;
use common::{ServerBuilder, TestServer, channel, serial};
use snowmint::proto::NextIdRequest;
use snowmint::proto::id_service_client::IdServiceClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A call on `channel` with a short deadline: its code.
async fn call(channel: tonic::transport::Channel) -> tonic::Code {
    let mut request = tonic::Request::new(NextIdRequest::default());
    request.set_timeout(Duration::from_secs(2));
    match IdServiceClient::new(channel).next_id(request).await {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}

/// Waits until the metric `series` of `server` reads `value`, at most 5 s.
async fn metric_becomes(server: &TestServer, series: &str, value: f64) {
    let start = Instant::now();
    loop {
        let now = server.metric(series).await;
        if now == value {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{series} is {now}, not {value}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn past_max_connections_new_connections_are_closed_and_counted_and_open_ones_keep_working() {
    let _serial = serial().await;
    let server = ServerBuilder::new()
        .config(|c| {
            c.limits.max_connections = 3;
            c.limits.max_connections_per_peer = 3;
        })
        .start()
        .await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let channel = channel(server.grpc).await;
        assert_eq!(call(channel.clone()).await, tonic::Code::Ok);
        open.push(channel);
    }
    metric_becomes(&server, "snowmint_connections_open", 3.0).await;

    // The fourth is closed on arrival: no gRPC status comes back, the client sees its
    // connection fail (tonic reports that as UNAVAILABLE or CANCELLED, as hyper words it).
    let endpoint =
        tonic::transport::Endpoint::from_shared(server.url()).unwrap().connect_timeout(Duration::from_secs(2));
    let refused = match endpoint.connect().await {
        Err(_) => tonic::Code::Unavailable,
        Ok(channel) => call(channel).await,
    };
    assert!(matches!(refused, tonic::Code::Unavailable | tonic::Code::Cancelled), "{refused:?}");
    assert!(server.metric(r#"snowmint_connections_refused_total{reason="max_connections"}"#).await >= 1.0);
    assert_eq!(server.metric(r#"snowmint_connections_refused_total{reason="per_peer"}"#).await, 0.0);
    // The open ones are untouched.
    for channel in &open {
        assert_eq!(call(channel.clone()).await, tonic::Code::Ok);
    }

    // One closes: its place is free again.
    drop(open.pop());
    metric_becomes(&server, "snowmint_connections_open", 2.0).await;
    let channel = channel(server.grpc).await;
    assert_eq!(call(channel.clone()).await, tonic::Code::Ok);
    drop(channel);
    drop(open);
    server.stop().await;
}

/// The handshake bound of the tests: short, so that they run quickly, and far above the
/// time a real client on loopback takes to send its first bytes.
const BOUND: Duration = Duration::from_secs(2);

/// The longest a test waits for something the server does within [`BOUND`]: generous, for
/// a loaded machine.
const WITHIN: Duration = Duration::from_secs(15);

const PROTOCOL_TIMEOUTS: &str = r#"snowmint_connections_handshake_timeouts_total{stage="protocol"}"#;
const TLS_TIMEOUTS: &str = r#"snowmint_connections_handshake_timeouts_total{stage="tls"}"#;

/// Waits until the server closes `stream` (a read sees the end, or a reset), at most
/// [`WITHIN`]; whatever the server sent before is skipped.
async fn closed_by_server(stream: &mut (impl tokio::io::AsyncRead + Unpin), what: &str) {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        let left = WITHIN.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return,
            Ok(Ok(_)) => continue,
            Err(_) => panic!("the server kept {what} open for {WITHIN:?}"),
        }
    }
}

/// A NextId call on a fresh connection; retried (a fresh connection each time) until one
/// succeeds, at most [`WITHIN`]. Panics with the last failure.
async fn call_gets_through(addr: SocketAddr) {
    let start = Instant::now();
    loop {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(2));
        let code = match endpoint.connect().await {
            Err(_) => tonic::Code::Unavailable,
            Ok(channel) => call(channel).await,
        };
        if code == tonic::Code::Ok {
            return;
        }
        assert!(start.elapsed() < WITHIN, "no NextId got through within {WITHIN:?}: the last got {code:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Connect call (JSON over HTTP/1.1) on a fresh connection: the response's status line and
/// body.
async fn connect_call(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /snowmint.v1.IdService/NextId HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(WITHIN, stream.read_to_string(&mut response)).await.expect("a Connect answer").unwrap();
    response
}

/// Four connections that never finish opening hold the whole cap (two silent, one with half
/// the HTTP/2 preface, one with half an HTTP/1.1 request line): once the handshake bound has
/// passed the server has closed all four, counted them, and real gRPC and Connect calls get
/// in.
#[tokio::test]
async fn connections_that_never_open_are_closed_at_the_handshake_bound_and_counted() {
    let _serial = serial().await;
    let server = ServerBuilder::new()
        .config(|c| {
            c.limits.max_connections = 4;
            c.limits.max_connections_per_peer = 4;
            c.limits.handshake_timeout = BOUND;
        })
        .start()
        .await;
    let opened_at = Instant::now();
    let mut unopened = Vec::new();
    for first_bytes in [&b""[..], b"", b"PRI * HTTP/2.0\r\n", b"POST /snowmint.v1.IdService/Ne"] {
        let mut stream = TcpStream::connect(server.grpc).await.unwrap();
        stream.write_all(first_bytes).await.unwrap();
        unopened.push(stream);
    }
    metric_becomes(&server, "snowmint_connections_open", 4.0).await;

    for (i, stream) in unopened.iter_mut().enumerate() {
        closed_by_server(stream, &format!("unopened connection {i}")).await;
    }
    assert!(opened_at.elapsed() >= BOUND, "closed after {:?}, before the bound", opened_at.elapsed());
    assert_eq!(server.metric(PROTOCOL_TIMEOUTS).await, 4.0);
    assert_eq!(server.metric(TLS_TIMEOUTS).await, 0.0);
    call_gets_through(server.grpc).await;
    let answer = connect_call(server.grpc).await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains(r#""id":""#), "{answer}");
    drop(unopened);
    server.stop().await;
}

/// The bound is on opening only: a gRPC connection that opened, and an HTTP/1.1 one that sent
/// its request line in time, live past it.
#[tokio::test]
async fn connections_that_opened_live_past_the_handshake_bound() {
    let _serial = serial().await;
    let server = ServerBuilder::new().config(|c| c.limits.handshake_timeout = BOUND).start().await;
    let grpc = channel(server.grpc).await;
    assert_eq!(call(grpc.clone()).await, tonic::Code::Ok);
    // An HTTP/1.1 request whose request line came at once and whose headers come later.
    let mut slow = TcpStream::connect(server.grpc).await.unwrap();
    slow.write_all(b"POST /snowmint.v1.IdService/NextId HTTP/1.1\r\n").await.unwrap();
    tokio::time::sleep(BOUND * 2).await;
    let rest = format!(
        "Host: {}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}",
        server.grpc
    );
    slow.write_all(rest.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(WITHIN, slow.read_to_string(&mut answer)).await.expect("an answer").unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(call(grpc.clone()).await, tonic::Code::Ok);
    assert_eq!(server.metric(PROTOCOL_TIMEOUTS).await, 0.0);
    assert_eq!(server.metric("snowmint_connections_open").await, 1.0, "the gRPC connection was closed");
    drop(grpc);
    server.stop().await;
}

/// With TLS the one bound covers the TLS handshake and the protocol's first bytes after it: a
/// connection silent before its ClientHello and one silent after its handshake are both
/// closed, each counted under its stage, and a real TLS client gets in.
#[tokio::test]
async fn with_tls_connections_silent_in_or_after_their_handshake_are_closed_by_stage() {
    use tokio_rustls::rustls;
    let _serial = serial().await;
    let builder = ServerBuilder::new();
    let ca = TestCa::new(builder.dir(), "ca");
    let server = builder
        .tls(&ca.issue("snowmint-server"), None)
        .config(|c| {
            c.limits.max_connections = 2;
            c.limits.max_connections_per_peer = 2;
            c.limits.handshake_timeout = BOUND;
        })
        .start()
        .await;

    let mut silent = TcpStream::connect(server.grpc).await.unwrap();
    let mut roots = rustls::RootCertStore::empty();
    let ca_pem = std::fs::read(&ca.ca).unwrap();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&ca_pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let tcp = TcpStream::connect(server.grpc).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut after_handshake = connector.connect(name, tcp).await.expect("the TLS handshake");
    metric_becomes(&server, "snowmint_connections_open", 2.0).await;

    closed_by_server(&mut silent, "a connection silent before its ClientHello").await;
    closed_by_server(&mut after_handshake, "a connection silent after its TLS handshake").await;
    assert_eq!(server.metric(TLS_TIMEOUTS).await, 1.0);
    assert_eq!(server.metric(PROTOCOL_TIMEOUTS).await, 1.0);
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{}", server.grpc))
        .unwrap()
        .connect_timeout(common::CALL_LIMIT)
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("a TLS client connects once the silent ones are closed");
    assert_eq!(call(channel.clone()).await, tonic::Code::Ok);
    drop(channel);
    server.stop().await;
}

/// Past `--max-connections-per-peer` a peer address's new connections are closed on arrival
/// and counted under `per_peer`, while the cap as a whole has room; the open ones keep
/// working, and one closing frees its place. (Every test client is on 127.0.0.1: one peer.)
#[tokio::test]
async fn past_max_connections_per_peer_a_peer_s_new_connections_are_closed_and_counted() {
    let _serial = serial().await;
    let server = ServerBuilder::new()
        .config(|c| {
            c.limits.max_connections = 10;
            c.limits.max_connections_per_peer = 2;
        })
        .start()
        .await;
    let mut open = vec![channel(server.grpc).await, channel(server.grpc).await];
    for channel in &open {
        assert_eq!(call(channel.clone()).await, tonic::Code::Ok);
    }
    metric_becomes(&server, "snowmint_connections_open", 2.0).await;

    let endpoint =
        tonic::transport::Endpoint::from_shared(server.url()).unwrap().connect_timeout(Duration::from_secs(2));
    let refused = match endpoint.connect().await {
        Err(_) => tonic::Code::Unavailable,
        Ok(channel) => call(channel).await,
    };
    assert!(matches!(refused, tonic::Code::Unavailable | tonic::Code::Cancelled), "{refused:?}");
    assert!(server.metric(r#"snowmint_connections_refused_total{reason="per_peer"}"#).await >= 1.0);
    assert_eq!(server.metric(r#"snowmint_connections_refused_total{reason="max_connections"}"#).await, 0.0);
    metric_becomes(&server, "snowmint_connections_open", 2.0).await;
    for channel in &open {
        assert_eq!(call(channel.clone()).await, tonic::Code::Ok);
    }

    drop(open.pop());
    metric_becomes(&server, "snowmint_connections_open", 1.0).await;
    let channel = channel(server.grpc).await;
    assert_eq!(call(channel.clone()).await, tonic::Code::Ok);
    drop(channel);
    drop(open);
    server.stop().await;
}

/// The flags at their edges, on the binary: `--handshake-timeout-ms 1` closes a silent
/// connection at once, and the largest, 120000, serves; `--max-connections-per-peer 1` lets
/// a peer have one connection, and equal to `--max-connections` lets it have them all.
#[tokio::test]
async fn the_connection_flags_work_at_their_edges() {
    let _serial = serial().await;
    // One state dir for the servers here, one after the other.
    let builder = ServerBuilder::new();

    let mut server = builder.clone().args(["--handshake-timeout-ms", "1"]).spawn();
    let mut silent = TcpStream::connect(server.grpc).await.unwrap();
    closed_by_server(&mut silent, "a silent connection, with a bound of 1 ms").await;
    assert_eq!(server.metric(PROTOCOL_TIMEOUTS).await, 1.0);
    server.signal("TERM");
    server.wait(Duration::from_secs(30)).await;

    let mut server = builder.clone().args(["--handshake-timeout-ms", "120000"]).spawn();
    assert_eq!(call(channel(server.grpc).await).await, tonic::Code::Ok);
    server.signal("TERM");
    server.wait(Duration::from_secs(30)).await;

    let per_peer = r#"snowmint_connections_refused_total{reason="per_peer"}"#;
    let over_cap = r#"snowmint_connections_refused_total{reason="max_connections"}"#;
    for (max, per_peer_max) in [("4", "1"), ("2", "2")] {
        let args = ["--max-connections", max, "--max-connections-per-peer", per_peer_max];
        let mut server = builder.clone().args(args).spawn();
        let allowed: usize = per_peer_max.parse().unwrap();
        let mut open = Vec::new();
        for _ in 0..allowed {
            let channel = channel(server.grpc).await;
            assert_eq!(call(channel.clone()).await, tonic::Code::Ok, "{args:?}");
            open.push(channel);
        }
        let mut refused = TcpStream::connect(server.grpc).await.unwrap();
        closed_by_server(&mut refused, "a connection past the caps").await;
        let (by_peer, by_cap) = (server.metric(per_peer).await, server.metric(over_cap).await);
        let expected = if allowed == 1 { (1.0, 0.0) } else { (0.0, 1.0) };
        assert_eq!((by_peer, by_cap), expected, "{args:?}");
        drop(open);
        server.signal("TERM");
        server.wait(Duration::from_secs(30)).await;
    }
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// `active` connections calling NextId back to back for `secs`: (calls/s, p50, p99).
async fn load(addr: SocketAddr, active: usize, secs: u64) -> (f64, Duration, Duration) {
    let mut channels = Vec::new();
    for _ in 0..active {
        channels.push(channel(addr).await);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = channels
        .into_iter()
        .map(|channel| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut client = IdServiceClient::new(channel);
                let mut took = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    client.next_id(NextIdRequest::default()).await.expect("NextId under load");
                    took.push(start.elapsed());
                }
                took
            })
        })
        .collect();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for task in tasks {
        all.extend(common::join_within(task, Duration::from_secs(30), "a load task").await);
    }
    let rate = all.len() as f64 / start.elapsed().as_secs_f64();
    all.sort_unstable();
    let at = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    (rate, at(0.5), at(0.99))
}

/// The connection table of docs/operations/fleets.md: RSS with `SNOWMINT_IDLE_CONNECTIONS` (default 10,000)
/// idle connections open, and NextId from `SNOWMINT_ACTIVE_CONNECTIONS` (default 1,000)
/// active ones beside them, against 64 active ones alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run by scripts/measure/connections"]
async fn connection_table() {
    let _serial = serial().await;
    let env = |name: &str, default: usize| std::env::var(name).map_or(default, |v| v.parse().expect(name));
    let (idle, active, secs) =
        (env("SNOWMINT_IDLE_CONNECTIONS", 10_000), env("SNOWMINT_ACTIVE_CONNECTIONS", 1_000), 10);
    common::claims::raise_open_files(65_536);
    let server = ServerBuilder::new()
        .args([
            "--worker-id",
            "1",
            "--max-connections",
            "20000",
            // Every client here is on 127.0.0.1: one peer, which may take the whole cap.
            "--max-connections-per-peer",
            "20000",
        ])
        .spawn();
    let pid = server.pid();
    let rss_start = rss_kib(pid);
    eprintln!("| connections | RSS | calls/s | p50 | p99 |");
    eprintln!("|---|---|---|---|---|");
    let (rate, p50, p99) = load(server.grpc, 64, secs).await;
    eprintln!("| 64 active | {} MiB | {rate:.0} | {} | {} |", rss_kib(pid) / 1024, ms(p50), ms(p99));
    let before_idle = rss_kib(pid);
    let mut idle_channels = Vec::new();
    for _ in 0..idle {
        idle_channels.push(channel(server.grpc).await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let with_idle = rss_kib(pid);
    eprintln!(
        "| {idle} idle | {} MiB | - | - | - |  ({:.1} KiB per idle connection; {} MiB at start)",
        with_idle / 1024,
        (with_idle.saturating_sub(before_idle)) as f64 / idle as f64,
        rss_start / 1024
    );
    let (rate, p50, p99) = load(server.grpc, active, secs).await;
    eprintln!(
        "| {idle} idle + {active} active | {} MiB | {rate:.0} | {} | {} |",
        rss_kib(pid) / 1024,
        ms(p50),
        ms(p99)
    );
    drop(idle_channels);
    server.signal("TERM");
    let mut server = server;
    server.wait(Duration::from_secs(30)).await;
}
