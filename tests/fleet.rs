//! Fleets against a real 3-member etcd: many instances starting together, each claiming a
//! slot of its own, and what that costs etcd.
//!
//! The bounded cases run with every `cargo test`; `fleet_claims` (ignored) is the full
//! sweep that `scripts/long/fleet` runs and the fleet tables of docs/operations/fleets.md come from. Instances are
//! the real slot keeper over the real etcd store, many in this process (see
//! `common/claims.rs` for why that claims exactly as separate processes would), and real
//! `snowmint serve` processes where the machine has room for them.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::claims::{self, EtcdDb, Start};
use common::etcd::EtcdCluster;
use common::{ServerBuilder, serial};
use snowmint::clock::{Clock, SystemClock};
use snowmint::layout::{DEFAULT_EPOCH_MS, Layout};

const TTL: Duration = Duration::from_secs(10);

/// A number of seconds from the environment variable `name`, or `default`.
fn seconds(name: &str, default: u64) -> Duration {
    Duration::from_secs(std::env::var(name).map_or(default, |s| s.trim().parse().expect("a number of seconds")))
}

/// What `k` instances that mint all the time cost etcd's database, without compaction and
/// with it:
///
/// - over 30 s with nothing compacting (as the start left it): etcd's revisions per
///   second per instance, the bytes each adds to the database in use, and so the bytes per
///   instance-day, and the days until etcd's default 2 GiB quota is full;
/// - then the fleet's own compaction (every instance's upkeep, as `serve` runs it) every
///   `SNOWMINT_FLEET_COMPACTION_INTERVAL` seconds (10): once it has compacted, every member
///   is defragmented, and over `SNOWMINT_FLEET_COMPACTION_STRETCH` seconds (60) the database
///   file grows back to its plateau, sampled every 2 s; with the requests and writes the
///   rounds add. The plateau at the default interval (5 minutes) is projected from it: two
///   intervals of the fleet's history more.
async fn months(cluster: &EtcdCluster, keepers: &[claims::Keeper]) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let minting = claims::keep_minting(keepers.iter().map(|k| claims::feed(&k.handle, clock.clone())).collect());
    months_minting(cluster, keepers.len()).await;
    minting.abort();
}

async fn months_minting(cluster: &EtcdCluster, k: usize) {
    // The first extensions of a fleet that starts minting, before the measurement.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = EtcdDb::read(cluster).await;
    let started = Instant::now();
    let steady = claims::steady_load(cluster, Duration::from_secs(30)).await;
    let after = EtcdDb::read(cluster).await;
    let secs = started.elapsed().as_secs_f64();
    let revisions = (after.revision - before.revision) as f64;
    let bytes = (after.in_use - before.in_use).max(0) as f64;
    let per_revision = if revisions > 0.0 { bytes / revisions } else { 0.0 };
    let per_instance_day = bytes / secs / k as f64 * 86_400.0;
    let quota = 2.0 * (1u64 << 30) as f64;
    eprintln!(
        "FLEET growth k={k}: per instance {:.3} etcd writes/s, {:.3} revisions/s; {per_revision:.0} bytes per revision; \
         {:.1} MB per instance-day without compaction; a 2 GiB quota full after {:.1} days ({:.1} h)",
        steady.proposals / k as f64,
        revisions / secs / k as f64,
        per_instance_day / 1e6,
        quota / (per_instance_day * k as f64),
        quota / (per_instance_day * k as f64) * 24.0,
    );

    let interval = seconds("SNOWMINT_FLEET_COMPACTION_INTERVAL", 10);
    let stretch = seconds("SNOWMINT_FLEET_COMPACTION_STRETCH", 60);
    let (upkeeps, stop) = claims::start_upkeeps(cluster, "/fleet", k, interval).await;
    // The first rounds only learn the key; the second compacts. Then the files shrink to what
    // is in use, and grow back to the plateau.
    tokio::time::sleep(2 * interval + Duration::from_secs(1)).await;
    claims::defragment(cluster).await;
    let load_before = claims::EtcdLoad::read(cluster).await;
    let first = EtcdDb::read(cluster).await;
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < stretch {
        tokio::time::sleep(Duration::from_secs(2)).await;
        samples.push((started.elapsed(), EtcdDb::read(cluster).await));
    }
    let secs = started.elapsed().as_secs_f64();
    let mut load = claims::EtcdLoad::read(cluster).await.since(&load_before);
    // Not the fleet's: this test's own status reads, one per member per sample.
    let own = ((1 + samples.len()) * cluster.members.len()) as f64;
    if let Some(status) = load.requests.get_mut("Status") {
        *status -= own;
    }
    load.requests.retain(|_, n| *n > 0.0);
    stop.cancel();
    for upkeep in upkeeps {
        common::join_within(upkeep, Duration::from_secs(30), "an upkeep's stop").await;
    }
    let last = samples.last().map_or(first, |s| s.1);
    let late: Vec<EtcdDb> = samples.iter().filter(|(t, _)| *t >= stretch / 2).map(|s| s.1).collect();
    let (size_min, size_max) = (late.iter().map(|d| d.size).min(), late.iter().map(|d| d.size).max());
    let (use_min, use_max) = (late.iter().map(|d| d.in_use).min(), late.iter().map(|d| d.in_use).max());
    let fleet_revisions = (last.revision - first.revision) as f64 / secs;
    let projected =
        size_max.unwrap_or(0) as f64 + 2.0 * (300.0 - interval.as_secs_f64()).max(0.0) * fleet_revisions * per_revision;
    let mb = |b: Option<i64>| b.unwrap_or(0) as f64 / 1e6;
    eprintln!(
        "FLEET plateau k={k}, compacting every {interval:?}: database file {:.2}-{:.2} MB over the last {:?} \
         (in use {:.2}-{:.2} MB; {:.2} MB after the defragmentation); per instance {:.3} requests/s ({}), \
         {:.3} writes/s; projected plateau compacting every 5 minutes: {:.1} MB",
        mb(size_min),
        mb(size_max),
        stretch / 2,
        mb(use_min),
        mb(use_max),
        first.size as f64 / 1e6,
        load.total() / secs / k as f64,
        load.breakdown(secs * k as f64),
        load.proposals / secs / k as f64,
        projected / 1e6,
    );
}

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
    tokio::task::spawn_blocking(move || ServerBuilder::new().args(args).run_to_exit_within(limit)).await.unwrap()
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

/// The fleet tables of docs/operations/fleets.md: K keepers starting together for each size, then the fleet at
/// rest, and what it costs etcd's database over months ([`months`]); and
/// `SNOWMINT_FLEET_PROCESSES` real processes (default 16) starting together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run by scripts/long/fleet"]
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
            "FLEET at rest k={k} (minting nothing): per instance {:.3} requests/s ({}), {:.3} writes/s",
            steady.total() / k as f64,
            steady.breakdown(k as f64),
            steady.proposals / k as f64
        );
        months(&cluster, &keepers).await;
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
