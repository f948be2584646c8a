//! Fleets against a real 3-member etcd: many instances starting together, each claiming a
//! slot of its own, and what that costs etcd.
//!
//! The bounded cases run with every `cargo test`; `fleet_claims` (ignored) is the full
//! sweep that `scripts/fleet` runs and the README's fleet table comes from. Instances are
//! the real slot keeper over the real etcd store, many in this process (see
//! `common/claims.rs` for why that claims exactly as separate processes would), and real
//! `snowmint serve` processes where the machine has room for them.

mod common;

use std::time::Duration;

use common::claims::{self, Start};
use common::etcd::EtcdCluster;
use common::{serial, serve_to_exit_within};
use snowmint::layout::{DEFAULT_EPOCH_MS, Layout};

const TTL: Duration = Duration::from_secs(10);

/// The fleet sizes of `SNOWMINT_FLEET_SIZES` (comma-separated), or `default`.
fn sizes(default: &[usize]) -> Vec<usize> {
    std::env::var("SNOWMINT_FLEET_SIZES")
        .ok()
        .map(|s| s.split(',').map(|n| n.trim().parse().expect("SNOWMINT_FLEET_SIZES: numbers")).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// `snowmint serve` with `args`, expected to exit within `limit`: (exit code, stderr).
async fn serve_to_exit(args: &[&str], limit: Duration) -> (i32, String) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        serve_to_exit_within(&args, limit)
    })
    .await
    .unwrap()
}

/// One line of figures for a start, per instance.
fn report(kind: &str, start: &Start) {
    let k = start.instances as f64;
    let by_kind: Vec<String> = start.by_kind.iter().map(|(kind, n)| format!("{kind} {:.2}", *n as f64 / k)).collect();
    eprintln!(
        "FLEET {kind} k={}: all minting after {:.2} s (p50 {:.2} s, p99 {:.2} s); etcd requests per instance {:.2} \
         ({}), writes {:.2}; keeper requests per instance [{}], most claim txns by one {}",
        start.instances,
        start.all_ready().as_secs_f64(),
        start.percentile(0.5).as_secs_f64(),
        start.percentile(0.99).as_secs_f64(),
        start.etcd.total() / k,
        start.etcd.breakdown(k),
        start.etcd.proposals / k,
        by_kind.join(", "),
        start.most_claims,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_instances_starting_together_take_distinct_slots_in_a_few_round_trips() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(3).await;
    let (keepers, start) =
        claims::start_keepers(&cluster, "/fleet16", &Layout::default_snowmint(), 16, TTL, |_| None).await;
    report("keepers", &start);
    start.assert_distinct();
    // Each keeper lists once, wins its random slot at the first try or after a lost race or
    // two: nowhere near the one-transaction-per-taken-slot of a lowest-first claim.
    assert!(start.most_claims <= 4, "one keeper needed {} claim transactions", start.most_claims);
    assert!(start.claims_per_instance() <= 2.0, "{:.2} claim transactions per instance", start.claims_per_instance());
    assert!(start.all_ready() < Duration::from_secs(20), "the fleet took {:?} to start", start.all_ready());
    claims::stop_keepers(keepers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_slot_is_taken_the_next_instance_fails_with_the_clear_error() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(3).await;
    // 4 worker bits: 16 slots, taken by 16 keepers starting together.
    let layout = Layout::snowmint(DEFAULT_EPOCH_MS, 4, 12);
    let (keepers, start) = claims::start_keepers(&cluster, "/full", &layout, 16, TTL, |_| None).await;
    start.assert_distinct();
    // The seventeenth, a real process with the same layout, exits at once naming the prefix
    // and the count, rather than waiting for a slot.
    let endpoints = cluster.endpoints();
    let args = ["--etcd-endpoints", &endpoints, "--etcd-prefix", "/full", "--worker-bits", "4"];
    let (code, stderr) = serve_to_exit(&args, Duration::from_secs(30)).await;
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("every worker slot under /full/workers/ is taken (16 slots for 4 worker bits)"),
        "{stderr}"
    );
    claims::stop_keepers(keepers).await;
}

/// The README's fleet table: K keepers starting together for each size, then the fleet at
/// rest; and `SNOWMINT_FLEET_PROCESSES` real processes (default 16) starting together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run by scripts/fleet"]
async fn fleet_claims() {
    let _serial = serial().await;
    claims::raise_open_files(65_536);
    let layout = Layout::default_snowmint();
    for k in sizes(&[16, 128, 1024]) {
        let cluster = EtcdCluster::start(3).await;
        let (keepers, start) = claims::start_keepers(&cluster, "/fleet", &layout, k, TTL, |_| None).await;
        start.assert_distinct();
        report("keepers", &start);
        if k == 1 << 10 {
            // The whole layout is taken: the next instance fails with the clear error.
            let endpoints = cluster.endpoints();
            let args = ["--etcd-endpoints", &endpoints, "--etcd-prefix", "/fleet"];
            let (code, stderr) = serve_to_exit(&args, Duration::from_secs(60)).await;
            assert_ne!(code, 0, "{stderr}");
            assert!(stderr.contains("every worker slot under /fleet/workers/ is taken (1024 slots"), "{stderr}");
            eprintln!("FLEET k=1024: instance 1025 exits {code}: every worker slot under /fleet/workers/ is taken");
        }
        let steady = claims::steady_load(&cluster, Duration::from_secs(30)).await;
        eprintln!(
            "FLEET steady k={k}: per instance {:.3} requests/s ({}), {:.3} writes/s",
            steady.total() / k as f64,
            steady.breakdown(k as f64),
            steady.proposals / k as f64
        );
        claims::stop_keepers(keepers).await;
    }
    let processes: usize =
        std::env::var("SNOWMINT_FLEET_PROCESSES").map_or(16, |n| n.parse().expect("SNOWMINT_FLEET_PROCESSES"));
    if processes > 0 {
        let cluster = EtcdCluster::start(3).await;
        let (mut running, start) = claims::start_processes(&cluster, "/processes", processes, &[]).await;
        start.assert_distinct();
        report("processes", &start);
        for p in &mut running {
            p.signal("TERM");
        }
        for mut p in running {
            p.wait(Duration::from_secs(30)).await;
        }
    }
}
