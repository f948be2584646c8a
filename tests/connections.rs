//! Many client connections on one server: the cap on open connections, and what each
//! connection costs.
//!
//! The bounded case runs with every `cargo test`; `connection_table` (ignored) is what
//! `scripts/connections` runs for the README's connection table: a real server process,
//! thousands of idle connections and hundreds of active ones from this process.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Process, TestServer, channel, config, serial};
use snowmint::clock::SystemClock;
use snowmint::proto::NextIdRequest;
use snowmint::proto::id_service_client::IdServiceClient;

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
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.max_connections = 3;
    let server = TestServer::start(config, Arc::new(SystemClock::new())).await;
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
    assert!(server.metric("snowmint_connections_refused_total").await >= 1.0);
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

/// The README's connection table: RSS with `SNOWMINT_IDLE_CONNECTIONS` (default 10,000)
/// idle connections open, and NextId from `SNOWMINT_ACTIVE_CONNECTIONS` (default 1,000)
/// active ones beside them, against 64 active ones alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run by scripts/connections"]
async fn connection_table() {
    let _serial = serial().await;
    let env = |name: &str, default: usize| std::env::var(name).map_or(default, |v| v.parse().expect(name));
    let (idle, active, secs) =
        (env("SNOWMINT_IDLE_CONNECTIONS", 10_000), env("SNOWMINT_ACTIVE_CONNECTIONS", 1_000), 10);
    common::claims::raise_open_files(65_536);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let server = Process::serve(&["--state-dir", &state, "--worker-id", "1", "--max-connections", "20000"]);
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
