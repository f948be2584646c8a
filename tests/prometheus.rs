//! A real Prometheus server (Debian's `prometheus`) scrapes a running instance, and its query
//! API returns snowmint's counters; `promtool check metrics` finds nothing to lint.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::etcd::free_port;
use common::{Child, ServerBuilder, output_within, try_http_get};
use snowmint::proto::{BatchIdsRequest, NextIdRequest};

/// The value of an instant query's first sample, once Prometheus has one.
async fn query(addr: std::net::SocketAddr, promql: &str) -> Option<f64> {
    let encoded: String = promql
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (code, body) = try_http_get(addr, &format!("/api/v1/query?query={encoded}")).await.ok()?;
    if code != 200 {
        return None;
    }
    let json: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    json["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_counters() {
    let builder = ServerBuilder::new();
    let server = builder.start().await;
    // The exposition and Prometheus's own files go beside the server's state.
    let dir = builder.dir();
    let mut client = server.client().await;
    for _ in 0..10 {
        client.next_id(NextIdRequest::default()).await.unwrap();
    }
    client.batch_ids(BatchIdsRequest { count: 990, ..Default::default() }).await.unwrap();
    client.batch_ids(BatchIdsRequest { count: 0, ..Default::default() }).await.unwrap_err();

    // promtool's lint of the exposition: no findings.
    let metrics = server.admin_get("/metrics").await.1;
    let exposition = dir.join("metrics.txt");
    std::fs::write(&exposition, &metrics).unwrap();
    let mut promtool = Command::new("sh");
    promtool.arg("-c").arg("exec promtool check metrics < \"$0\"").arg(&exposition);
    let lint = output_within(promtool, Duration::from_secs(30));
    let findings = format!("{}{}", lint.stdout, lint.stderr);
    assert!(lint.code == 0 && findings.trim().is_empty(), "promtool check metrics: {findings}");

    let port = free_port();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: snowmint\n    static_configs:\n      - targets: ['{}']\n",
            server.admin
        ),
    )
    .unwrap();
    let mut prometheus = Command::new("prometheus");
    prometheus
        .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Killed when dropped, or with the test binary.
    let _prometheus =
        Child::spawn(prometheus).expect("prometheus (Debian package prometheus; scripts/check installs it)");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let start = Instant::now();
    let issued = loop {
        if let Some(value) = query(addr, "snowmint_ids_issued_total").await {
            break value;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "Prometheus never returned snowmint_ids_issued_total");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(issued, 1000.0);
    assert_eq!(query(addr, r#"snowmint_requests_total{method="NextId",code="OK",protocol="grpc"}"#).await, Some(10.0));
    assert_eq!(
        query(addr, r#"snowmint_requests_total{method="BatchIds",code="InvalidArgument",protocol="grpc"}"#).await,
        Some(1.0)
    );
    // Label sets no call touched are there as zeros, for alerts to see.
    assert_eq!(query(addr, r#"snowmint_clock_backward_total{action="refused"}"#).await, Some(0.0));
    assert_eq!(query(addr, "snowmint_minting").await, Some(1.0));
    assert_eq!(query(addr, r#"up{job="snowmint"}"#).await, Some(1.0));
    server.stop().await;
}
