//! A real Prometheus server (Debian's `prometheus`) scrapes a running instance, and its query
//! API returns snowmint's counters; `promtool check metrics` finds nothing to lint.

mod common;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::etcd::free_port;
use common::{TestServer, config, try_http_get};
use snowmint::clock::SystemClock;
use snowmint::proto::{BatchIdsRequest, NextIdRequest};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(&dir.path().join("state")), Arc::new(SystemClock::new())).await;
    let mut client = server.client().await;
    for _ in 0..10 {
        client.next_id(NextIdRequest {}).await.unwrap();
    }
    client.batch_ids(BatchIdsRequest { count: 990 }).await.unwrap();
    client.batch_ids(BatchIdsRequest { count: 0 }).await.unwrap_err();

    // promtool's lint of the exposition: no findings.
    let metrics = server.admin_get("/metrics").await.1;
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/check installs it)");
    promtool.stdin.take().unwrap().write_all(metrics.as_bytes()).unwrap();
    let lint = promtool.wait_with_output().unwrap();
    let findings = format!("{}{}", String::from_utf8_lossy(&lint.stdout), String::from_utf8_lossy(&lint.stderr));
    assert!(lint.status.success() && findings.trim().is_empty(), "promtool check metrics: {findings}");

    let port = free_port();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: snowmint\n    static_configs:\n      - targets: ['{}']\n",
            server.admin
        ),
    )
    .unwrap();
    let _prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package prometheus; scripts/check installs it)"),
    );
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
    assert_eq!(query(addr, r#"snowmint_requests_total{method="NextId",code="OK"}"#).await, Some(10.0));
    assert_eq!(query(addr, r#"snowmint_requests_total{method="BatchIds",code="InvalidArgument"}"#).await, Some(1.0));
    // Label sets no call touched are there as zeros, for alerts to see.
    assert_eq!(query(addr, r#"snowmint_clock_backward_total{action="refused"}"#).await, Some(0.0));
    assert_eq!(query(addr, "snowmint_minting").await, Some(1.0));
    assert_eq!(query(addr, r#"up{job="snowmint"}"#).await, Some(1.0));
    server.stop().await;
}
