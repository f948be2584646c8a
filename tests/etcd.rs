//! etcd mode against a real etcd (one node, or three members on loopback), with the real
//! binary. Every test that can get an ID twice (two holders of one slot, one after the
//! other, or instances that could share a slot) collects every ID and asserts there is none.
//!
//! The tests run one at a time ([`serial`]): their timing bounds (fenced within the TTL,
//! minting again within seconds of a member's death) assume the two cores are not also
//! running another test's cluster.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use common::etcd::{EtcdCluster, get};
use common::{
    Process, ServerBuilder, assert_increasing, assert_unique, hammer, join_within, metric_value, next_id_eventually,
    serial,
};
use snowmint::clock::{Clock, SystemClock};
use snowmint::grant::Minted;
use snowmint::keeper::{self, KeeperConfig, SlotPolicy};
use snowmint::layout::Layout;
use snowmint::metrics::Metrics;
use snowmint::node::{self, KeeperHandle};
use snowmint::proto::BatchIdsRequest;
use snowmint::store::etcd::EtcdStore;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

fn layout() -> Layout {
    Layout::default_snowmint()
}

/// `snowmint serve` in etcd mode with `extra` flags.
fn serve(cluster: &EtcdCluster, prefix: &str, extra: &[&str]) -> Process {
    ServerBuilder::new().etcd(&cluster.endpoints(), prefix).args(["--lease-ttl", "3"]).args(extra).spawn()
}

/// Mints a batch through `process` (waiting until it serves) and returns the IDs.
async fn mint(process: &Process, count: u32) -> Vec<u64> {
    let mut client = process.client().await;
    let mut ids = vec![next_id_eventually(&mut client, Duration::from_secs(20)).await];
    ids.extend(client.batch_ids(BatchIdsRequest { count, ..Default::default() }).await.unwrap().into_inner().ids);
    assert_increasing(&ids);
    ids
}

fn worker_of(id: u64) -> u64 {
    layout().unpack(id).worker
}

/// The saved reservation of slot `id` under `prefix`, in Unix ms.
async fn reservation(client: &mut etcd_client::Client, prefix: &str, id: u64) -> i64 {
    let value = get(client, &format!("{prefix}/reservations/{id}")).await.expect("reservation exists");
    serde_json::from_slice::<serde_json::Value>(&value).unwrap()["reserved_until_ms"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_started_at_once_get_distinct_workers() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let endpoints = cluster.endpoints();
    // Every instance prefers slot 0, whatever this host's name (without the flag the
    // preference is the host name's ordinal): all six race for one slot, and the losers
    // spread over the free ones.
    let starts: Vec<_> = (0..6)
        .map(|_| {
            let endpoints = endpoints.clone();
            std::thread::spawn(move || {
                let args = ["--lease-ttl", "3", "--preferred-worker-id", "0"];
                ServerBuilder::new().etcd(&endpoints, "/many").args(args).spawn()
            })
        })
        .collect();
    let processes: Vec<Process> = starts.into_iter().map(|t| t.join().unwrap()).collect();
    let mut workers = Vec::new();
    for process in &processes {
        let ids = mint(process, 2_000).await;
        let worker = worker_of(ids[0]);
        assert!(ids.iter().all(|&id| worker_of(id) == worker));
        let metrics = common::http_get(process.admin, "/metrics").await.1;
        assert_eq!(metric_value(&metrics, "snowmint_worker_id"), worker as f64);
        assert_eq!(metric_value(&metrics, "snowmint_lease_valid"), 1.0);
        workers.push(worker);
    }
    // Distinct workers: no two instances can mint the same ID.
    workers.sort_unstable();
    workers.dedup();
    assert_eq!(workers.len(), 6, "workers not distinct: {workers:?}");
    assert!(workers.iter().all(|&w| w < 1024), "workers outside the layout: {workers:?}");
}

#[tokio::test]
async fn a_killed_instances_slot_is_reused_only_after_its_lease_and_past_its_reservation() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let mut etcd = cluster.client().await;
    let a = serve(&cluster, "/killed", &["--preferred-worker-id", "7"]);
    let mut all = mint(&a, 5_000).await;
    assert_eq!(worker_of(all[0]), 7);
    a.signal("KILL");
    drop(a);
    let saved = reservation(&mut etcd, "/killed", 7).await;

    // While the dead instance's lease lives, its slot is not handed out.
    let b = serve(&cluster, "/killed", &["--preferred-worker-id", "7"]);
    let b_ids = mint(&b, 100).await;
    assert_ne!(worker_of(b_ids[0]), 7, "slot 7 reused before the lease expired");
    all.extend(b_ids);

    // Once the lease expires, the key goes; the next claimant mints only past the saved
    // reservation.
    let start = Instant::now();
    while get(&mut etcd, "/killed/workers/7").await.is_some() {
        assert!(start.elapsed() < Duration::from_secs(10), "lease never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = serve(&cluster, "/killed", &["--preferred-worker-id", "7"]);
    let c_ids = mint(&c, 5_000).await;
    assert_eq!(worker_of(c_ids[0]), 7);
    let first_ms = layout().tick_start_ms(layout().unpack(c_ids[0]).tick);
    assert!(first_ms > saved, "the new holder minted at {first_ms}, not past the reservation {saved}");
    all.extend(c_ids);
    assert_unique(&all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_every_etcd_member_fences_within_the_ttl_and_recovers_after() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(3).await;
    // Reservations reach 6 s ahead: past the TTL, so what fences minting here is the lease
    // deadline, not the reservation running out.
    let instances: Vec<Process> =
        (0..2).map(|_| serve(&cluster, "/paused", &["--reservation-window-ms", "6000"])).collect();
    for instance in &instances {
        mint(instance, 10).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let hammers: Vec<_> = instances.iter().map(|p| hammer(p.grpc, stop.clone())).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let paused = Instant::now();
    cluster.pause_all();
    // Fenced by the lease deadline, each instance says so everywhere an operator or a load
    // balancer looks, before etcd comes back.
    for instance in &instances {
        wait_until_fenced(instance, paused + Duration::from_secs(5)).await;
    }
    tokio::time::sleep_until((paused + Duration::from_secs(5)).into()).await;
    cluster.resume_all();
    let resumed = Instant::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop.store(true, Ordering::Relaxed);

    let mut all = Vec::new();
    for (i, task) in hammers.into_iter().enumerate() {
        let log = join_within(task, Duration::from_secs(10), "a hammer").await;
        // Fenced within the TTL (3 s): no call started later than that got an ID while
        // etcd was paused.
        let last_ok = log.last_ok_started_before(resumed).expect("minted before the pause");
        let fenced_after = last_ok.saturating_duration_since(paused);
        eprintln!("instance {i}: last ID from a call started {fenced_after:?} into the pause");
        assert!(fenced_after <= Duration::from_secs(3), "instance {i} minted {fenced_after:?} into the pause");
        // Refusals were UNAVAILABLE, each answered within its 500 ms deadline.
        for (end, took, code) in log.calls.iter().filter(|c| c.0 > paused && c.0 < resumed) {
            assert!(
                matches!(code, tonic::Code::Ok | tonic::Code::Unavailable),
                "{code:?} at {:?}",
                end.duration_since(paused)
            );
            assert!(*took < Duration::from_millis(600), "a call took {took:?}");
        }
        let recovered = log.first_after(resumed, tonic::Code::Ok).expect("minting resumed after SIGCONT");
        eprintln!("instance {i}: minting again {:?} after SIGCONT", recovered.duration_since(resumed));
        assert!(recovered.duration_since(resumed) < Duration::from_secs(6));
        assert_increasing(&log.ids);
        // Whether its lease outlived the pause or it had to re-claim, it holds its own
        // slot again (nobody else took it).
        assert_eq!(worker_of(log.ids[0]), worker_of(*log.ids.last().unwrap()), "instance {i} changed slots");
        assert_increasing(&log.bulk);
        all.extend(log.all_ids());
    }
    assert_unique(&all);
    for instance in &instances {
        let metrics = common::http_get(instance.admin, "/metrics").await.1;
        assert!(metric_value(&metrics, r#"snowmint_lease_renewals_total{result="failed"}"#) >= 1.0);
        assert_eq!(metric_value(&metrics, "snowmint_lease_valid"), 1.0);
        assert_eq!(health(instance).await, [ServingStatus::Serving; 2]);
    }
}

/// The gRPC health of `instance`, overall and of the ID service.
async fn health(instance: &Process) -> [ServingStatus; 2] {
    let mut client = HealthClient::new(common::channel(instance.grpc).await);
    let mut statuses = [ServingStatus::Unknown; 2];
    for (status, service) in statuses.iter_mut().zip(["", "snowmint.v1.IdService"]) {
        let response = client.check(HealthCheckRequest { service: service.into() }).await.unwrap();
        *status = response.into_inner().status();
    }
    statuses
}

/// Waits, at most until `limit`, for `instance` to report itself fenced: gRPC health
/// `NOT_SERVING`, `/readyz` 503, `snowmint_lease_valid 0` and `snowmint_minting 0`.
async fn wait_until_fenced(instance: &Process, limit: Instant) {
    loop {
        let metrics = common::http_get(instance.admin, "/metrics").await.1;
        let seen = (
            health(instance).await,
            instance.admin_ready().await,
            metric_value(&metrics, "snowmint_lease_valid"),
            metric_value(&metrics, "snowmint_minting"),
        );
        if seen == ([ServingStatus::NotServing; 2], 503, 0.0, 0.0) {
            return;
        }
        assert!(Instant::now() < limit, "not reported fenced (health, readyz, lease_valid, minting): {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// etcd unreachable at start: the start retries for --etcd-start-timeout-ms, then exits
/// non-zero with one line naming the endpoint.
#[test]
fn an_unreachable_etcd_stops_the_start_naming_the_endpoint() {
    let endpoint = format!("http://127.0.0.1:{}", common::etcd::free_port());
    let start = Instant::now();
    let (code, stderr) =
        ServerBuilder::new().args(["--etcd-endpoints", &endpoint, "--etcd-start-timeout-ms", "1500"]).run_to_exit();
    let took = start.elapsed();
    assert_ne!(code, 0, "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("snowmint: ") && last.contains("cannot reach etcd"), "{stderr}");
    assert!(last.contains(&endpoint), "the endpoint is not named: {last}");
    assert!(took >= Duration::from_secs(1), "gave up after {took:?}, before its 1.5 s start timeout");
}

/// Asserts minting went on after a member died at `killed`: in every second from the first
/// to the sixth after it, some call succeeded.
fn assert_minting_went_on(log: &common::HammerLog, killed: Instant, what: &str) {
    for second in 1..7 {
        let from = killed + Duration::from_secs(second);
        let ok = log
            .calls
            .iter()
            .any(|(end, _, code)| *code == tonic::Code::Ok && *end >= from && *end < from + Duration::from_secs(1));
        assert!(ok, "minted nothing in second {second} after {what} died");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_an_etcd_follower_and_then_the_leader_is_survived() {
    let _serial = serial().await;
    let mut cluster = EtcdCluster::start(3).await;
    let instances: Vec<Process> = (0..2).map(|_| serve(&cluster, "/leader", &[])).collect();
    for instance in &instances {
        mint(instance, 10).await;
    }
    let mut all = Vec::new();
    for victim in ["a follower", "the leader"] {
        let stop = Arc::new(AtomicBool::new(false));
        let hammers: Vec<_> = instances.iter().map(|p| hammer(p.grpc, stop.clone())).collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let leader = cluster.leader().await;
        let member = if victim == "the leader" { leader } else { (leader + 1) % 3 };
        let killed = Instant::now();
        cluster.kill(member);
        // Several renewals and reservation writes later, with a dead member still listed.
        tokio::time::sleep(Duration::from_secs(8)).await;
        stop.store(true, Ordering::Relaxed);
        for task in hammers {
            let log = join_within(task, Duration::from_secs(10), "a hammer").await;
            assert_minting_went_on(&log, killed, victim);
            assert_increasing(&log.ids);
            assert_increasing(&log.bulk);
            all.extend(log.all_ids());
        }
        for instance in &instances {
            let metrics = common::http_get(instance.admin, "/metrics").await.1;
            assert_eq!(metric_value(&metrics, "snowmint_lease_valid"), 1.0);
            assert_eq!(metric_value(&metrics, "snowmint_minting"), 1.0);
        }
        // Back to three members before the next kill, so the cluster keeps its quorum.
        cluster.restart(member);
        cluster.wait_healthy(Duration::from_secs(20)).await;
    }
    assert_unique(&all);
}

#[tokio::test]
async fn every_slot_taken_exits_with_a_clear_line() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let a = serve(&cluster, "/full", &["--worker-bits", "1"]);
    let b = serve(&cluster, "/full", &["--worker-bits", "1"]);
    let mut all = mint(&a, 100).await;
    all.extend(mint(&b, 100).await);
    let endpoints = cluster.endpoints();
    let (code, stderr) = ServerBuilder::new().etcd(&endpoints, "/full").args(["--worker-bits", "1"]).run_to_exit();
    assert_ne!(code, 0);
    let last = stderr.lines().last().unwrap();
    assert!(last.contains("/full/workers/") && last.contains("2 slots"), "{stderr}");
    assert_unique(&all);
}

#[tokio::test]
async fn a_different_layout_is_refused() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let a = serve(&cluster, "/layout", &[]);
    mint(&a, 10).await;
    let endpoints = cluster.endpoints();
    let (code, stderr) = ServerBuilder::new().etcd(&endpoints, "/layout").args(["--sequence-bits", "11"]).run_to_exit();
    assert_ne!(code, 0);
    let last = stderr.lines().last().unwrap();
    assert!(last.contains("layout mismatch") && last.contains("/layout/layout"), "{stderr}");
    assert!(last.contains("12 sequence bits") && last.contains("11 sequence bits"), "{stderr}");
}

#[tokio::test]
async fn sigterm_frees_the_slot_at_once() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let mut etcd = cluster.client().await;
    let started = Instant::now();
    let mut a = serve(&cluster, "/term", &["--preferred-worker-id", "4"]);
    let mut all = mint(&a, 1).await;
    eprintln!("etcd mode: first ID {:?} after the process started", started.elapsed());
    all.extend(mint(&a, 5_000).await);
    assert_eq!(worker_of(all[0]), 4);
    a.signal("TERM");
    assert!(a.wait(Duration::from_secs(10)).await.success());
    assert_eq!(get(&mut etcd, "/term/workers/4").await, None, "the slot is free at once");
    let last_ms = layout().tick_end_ms(layout().unpack(*all.last().unwrap()).tick);
    assert_eq!(reservation(&mut etcd, "/term", 4).await, last_ms, "the final reservation is the last tick used");

    let started = Instant::now();
    let b = serve(&cluster, "/term", &["--preferred-worker-id", "4"]);
    let b_ids = mint(&b, 5_000).await;
    eprintln!("slot hand-over: first ID {:?} after the next process started", started.elapsed());
    assert_eq!(worker_of(b_ids[0]), 4, "the next instance takes the freed slot");
    all.extend(b_ids);
    // One slot, held in turn: increasing across both holders, so never twice.
    assert_increasing(&all);
}

#[tokio::test]
async fn tls_with_client_certificates() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = common::tls::TestCa::new(dir.path(), "etcd-ca");
    let server = ca.issue("etcd-server");
    let client = ca.issue("snowmint");
    let cluster = EtcdCluster::start_with(1, Some((ca.ca.clone(), server))).await;
    let endpoints = cluster.endpoints();
    assert!(endpoints.starts_with("https://"));
    let (ca_path, cert, key) = (ca.ca.to_str().unwrap(), client.cert.to_str().unwrap(), client.key.to_str().unwrap());
    let a = serve(&cluster, "/tls", &["--etcd-ca", ca_path, "--etcd-cert", cert, "--etcd-key", key]);
    mint(&a, 1_000).await;

    // Without a client certificate etcd refuses the connection, and the start says so.
    let args = ["--etcd-endpoints", &endpoints, "--etcd-ca", ca_path, "--etcd-start-timeout-ms", "2000"];
    let (code, stderr) = ServerBuilder::new().args(args).run_to_exit();
    assert_ne!(code, 0);
    assert!(stderr.lines().last().unwrap().contains("cannot reach etcd"), "{stderr}");
}

#[tokio::test]
async fn user_authentication_with_the_password_from_the_environment_only() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let mut etcd = cluster.client().await;
    etcd.user_add("root", "s3cret-root", None).await.unwrap();
    etcd.user_grant_role("root", "root").await.unwrap();
    etcd.auth_enable().await.unwrap();
    let endpoints = cluster.endpoints();
    let base = ["--etcd-endpoints", &endpoints, "--etcd-start-timeout-ms", "2000"];

    // The password comes from SNOWMINT_ETCD_PASSWORD, never a flag.
    let mut process = ServerBuilder::new()
        .env("SNOWMINT_ETCD_PASSWORD", "s3cret-root")
        .env("SNOWMINT_ETCD_USER", "root")
        .args(["--etcd-endpoints", &endpoints, "--lease-ttl", "3"])
        .spawn();
    mint(&process, 1_000).await;
    process.signal("TERM");
    assert!(process.wait(Duration::from_secs(10)).await.success());
    let logs = process.drain_logs().join("\n");
    assert!(!logs.contains("s3cret-root"), "the password reached a log line");

    let (code, stderr) = ServerBuilder::new().args(base).args(["--etcd-user", "root"]).run_to_exit();
    assert_ne!(code, 0);
    assert!(stderr.contains("SNOWMINT_ETCD_PASSWORD"), "{stderr}");
    let (code, stderr) = ServerBuilder::new().args(base).args(["--etcd-password", "x"]).run_to_exit();
    assert_ne!(code, 0, "there is no password flag");
    assert!(stderr.contains("--etcd-password"), "{stderr}");

    let (code, stderr) = ServerBuilder::new()
        .args(base)
        .args(["--etcd-user", "root"])
        .env("SNOWMINT_ETCD_PASSWORD", "wrong")
        .run_to_exit();
    assert_ne!(code, 0);
    assert!(stderr.lines().last().unwrap().contains("authentication failed"), "{stderr}");
    assert!(!stderr.contains("wrong"), "{stderr}");
}

/// The worker key's lease for `slot` under `prefix`.
async fn lease_of(client: &mut etcd_client::Client, prefix: &str, slot: u64) -> i64 {
    let response = client.get(format!("{prefix}/workers/{slot}"), None).await.unwrap();
    response.kvs().first().expect("the slot is held").lease()
}

/// A lease gone on the server (revoked here by hand, as an expiry during a partition would
/// have it) is noticed by the next renewal, a third of the TTL later, not by the next
/// reservation write a third of the window later (20 s with this window). The instance
/// takes the same slot back, finds that nobody wrote its reservation since, and mints again
/// at once, instead of waiting out its own 60 s reservation.
#[tokio::test]
async fn a_revoked_lease_is_noticed_by_the_next_renewal_and_the_slot_resumes_at_once() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let mut process = serve(&cluster, "/revoked", &["--reservation-window-ms", "60000", "--preferred-worker-id", "3"]);
    let before = mint(&process, 1_000).await;
    assert_eq!(worker_of(before[0]), 3);
    let mut etcd = cluster.client().await;
    let lease = lease_of(&mut etcd, "/revoked", 3).await;
    let revoked = Instant::now();
    etcd.lease_revoke(lease).await.unwrap();

    let lost = loop {
        let metrics = common::http_get(process.admin, "/metrics").await.1;
        if metric_value(&metrics, "snowmint_lease_lost_total") >= 1.0 {
            break revoked.elapsed();
        }
        assert!(revoked.elapsed() < Duration::from_secs(10), "the revoked lease was not noticed in 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // A renewal every second (TTL 3 s), each bounded by a 0.6 s call timeout.
    assert!(lost < Duration::from_millis(2_500), "noticed {lost:?} after the revoke");

    let mut client = process.client().await;
    let after = next_id_eventually(&mut client, Duration::from_secs(10)).await;
    let resumed = revoked.elapsed();
    assert_eq!(worker_of(after), 3, "the lost slot was not taken back");
    assert!(after > *before.last().unwrap(), "went back after resuming");
    assert!(resumed < Duration::from_secs(5), "minted again only {resumed:?} after the revoke");
    assert_ne!(lease_of(&mut etcd, "/revoked", 3).await, lease, "the slot is held under a new lease");
    let logs = process.drain_logs().join("\n");
    assert!(logs.contains(r#""resumed":true"#), "the re-claim did not resume:\n{logs}");
}

/// A reservation in etcd that is valid JSON but an absurd time (it would overflow, or read
/// as "no floor") stops the start with a line naming the key, and is left untouched.
#[tokio::test]
async fn an_absurd_reservation_in_etcd_stops_the_start_naming_the_key() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let mut etcd = cluster.client().await;
    let key = "/absurd/reservations/0";
    let absurd = r#"{"reserved_until_ms":9223372036854775000,"reserved_until":"?"}"#;
    etcd.put(key, absurd, None).await.unwrap();
    let endpoints = cluster.endpoints();
    let (code, stderr) = ServerBuilder::new()
        .etcd(&endpoints, "/absurd")
        .args(["--preferred-worker-id", "0", "--worker-bits", "1", "--sequence-bits", "12"])
        .run_to_exit();
    assert_ne!(code, 0);
    let line = stderr.lines().last().unwrap_or_default();
    assert!(line.contains(key) && line.contains("outside the layout's time range"), "{stderr}");
    assert_eq!(get(&mut etcd, key).await.as_deref(), Some(absurd.as_bytes()), "the reservation was rewritten");
}

/// Every reservation under `prefix`, by slot, in Unix ms.
async fn reservations(client: &mut etcd_client::Client, prefix: &str) -> BTreeMap<u64, i64> {
    let keys = format!("{prefix}/reservations/");
    let got = client.get(keys.as_str(), Some(etcd_client::GetOptions::new().with_prefix())).await.unwrap();
    got.kvs()
        .iter()
        .map(|kv| {
            let slot = kv.key_str().unwrap().strip_prefix(&keys).unwrap().parse().unwrap();
            let value: serde_json::Value = serde_json::from_slice(kv.value()).unwrap();
            (slot, value["reserved_until_ms"].as_i64().unwrap())
        })
        .collect()
}

/// How many worker keys are under `prefix`: the slots held.
async fn workers_held(client: &mut etcd_client::Client, prefix: &str) -> i64 {
    let options = etcd_client::GetOptions::new().with_prefix().with_count_only();
    client.get(format!("{prefix}/workers/"), Some(options)).await.unwrap().count()
}

/// One instance holds every slot the default 10-bit worker field has
/// (`--slots 1024`), against an etcd with its default limit of 128 operations per
/// transaction. It starts, mints on every slot, extends every reservation, and on SIGTERM
/// saves each slot's final reservation and frees every slot. (One sequence bit, so that one
/// batch of 65,536 IDs spans every slot: 2,048 IDs per millisecond.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_holds_all_1024_slots_of_the_default_worker_field() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let mut etcd = cluster.client().await;
    let layout = Layout::snowmint(layout().epoch_ms, 10, 1);
    let started = Instant::now();
    let extra = ["--slots", "1024", "--sequence-bits", "1", "--etcd-start-timeout-ms", "120000"];
    let mut a = serve(&cluster, "/all", &extra);
    let mut client = a.client().await;
    let mut ids = vec![next_id_eventually(&mut client, Duration::from_secs(20)).await];
    eprintln!("--slots 1024: the first ID {:?} after the process started", started.elapsed());
    // A second after the last small ask, a batch may take each tick whole (the reserve kept
    // for small asks, a 64th of a tick, would be the last 16 slots' IDs).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let batch = BatchIdsRequest { count: 65_536, ..Default::default() };
    ids.extend(client.batch_ids(batch).await.unwrap().into_inner().ids);
    assert_increasing(&ids);
    let mut last_tick = BTreeMap::new();
    for &id in &ids {
        let parts = layout.unpack(id);
        last_tick.insert(parts.worker, parts.tick);
    }
    assert_eq!(last_tick.len(), 1024, "minted on {} slots of 1024", last_tick.len());
    assert_eq!(workers_held(&mut etcd, "/all").await, 1024);

    // Every reservation is extended as time goes on (a third of the 3 s window at a time).
    let first = reservations(&mut etcd, "/all").await;
    assert_eq!(first.len(), 1024);
    let waited = Instant::now();
    loop {
        let now = reservations(&mut etcd, "/all").await;
        let behind = first.iter().filter(|&(slot, until)| now.get(slot).is_none_or(|n| n <= until)).count();
        if behind == 0 {
            break;
        }
        assert!(waited.elapsed() < Duration::from_secs(20), "{behind} of 1024 reservations not extended in 20 s");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("every reservation extended {:?} after the first reading", waited.elapsed());

    let stopping = Instant::now();
    a.signal("TERM");
    assert!(a.wait(Duration::from_secs(20)).await.success());
    eprintln!("SIGTERM to exit: {:?}", stopping.elapsed());
    assert_eq!(workers_held(&mut etcd, "/all").await, 0, "every slot is free at once");
    let last = reservations(&mut etcd, "/all").await;
    for (&slot, &tick) in &last_tick {
        assert_eq!(last[&slot], layout.tick_end_ms(tick), "slot {slot}: the final reservation is its last tick used");
    }
    let logs = a.drain_logs().join("\n");
    assert!(!logs.contains("too many operations"), "{logs}");
    assert!(!logs.contains("slot history falls behind"), "{logs}");

    // The limit kept to: etcd refuses a transaction of 129 operations.
    let gets: Vec<etcd_client::TxnOp> = (0..129).map(|i| etcd_client::TxnOp::get(format!("/all/{i}"), None)).collect();
    let refused =
        etcd.txn(etcd_client::Txn::new().and_then(gets)).await.expect_err("129 operations in one transaction");
    assert!(refused.to_string().contains("too many operations in txn request"), "{refused}");
}

/// The system's clocks, with the wall clock `offset_ms` off (changed at will).
#[derive(Default)]
struct OffsetClock {
    system: SystemClock,
    offset_ms: AtomicI64,
}

impl Clock for OffsetClock {
    fn wall_us(&self) -> i64 {
        self.system.wall_us() + self.offset_ms.load(Ordering::Relaxed) * 1_000
    }

    fn boot_time(&self) -> Duration {
        self.system.boot_time()
    }
}

/// The real keeper over the real etcd store on `prefix`, as `serve` starts its own with the
/// fleet's clock check on (30 s): `slots` slots, `first` and the ones after it preferred.
async fn start_keeper(
    cluster: &EtcdCluster,
    prefix: &str,
    slots: usize,
    first: u32,
    clock: Arc<dyn Clock>,
) -> Result<KeeperHandle, String> {
    let config = common::claims::etcd_config(&cluster.endpoints(), prefix, Duration::from_secs(3), None, "skew");
    let store = EtcdStore::connect(&config, &layout(), clock.wall_ms()).await.map_err(|e| e.to_string())?;
    let keeper_config = KeeperConfig {
        policy: SlotPolicy::Leased { count: slots, preferred: (first..).take(slots).collect() },
        ttl: config.lease_ttl,
        window_ms: 3_000,
        layout: layout(),
        seed: u64::from(first) * 0x9e37_79b9 + 1,
        max_fleet_skew_ms: Some(30_000),
        fence_window_ms: keeper::fence_window_ms(config.lease_ttl, Duration::from_secs(10), 3_000, Some(30_000)),
        max_clock_drift_ms: 10_000,
    };
    let driver = node::DriverConfig {
        call_timeout: config.call_timeout(),
        start_timeout: Duration::from_secs(20),
        clock,
        metrics: Metrics::new(),
        observer: None,
    };
    node::start_keeper(store, keeper_config, driver).await.map_err(|e| e.to_string())
}

/// Against the real etcd: the fleet's clock check counts each instance
/// once. One instance holds 40 slots and its clock then goes an hour ahead, beside three
/// instances of one slot each, all minting: a healthy newcomer starts (by slot the 40 would
/// outvote the three), and a newcomer an hour ahead, as the 40, does not pass itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_clock_check_counts_an_instance_of_many_slots_once() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let mut etcd = cluster.client().await;
    let system = || Arc::new(SystemClock::new()) as Arc<dyn Clock>;
    let mut keepers = Vec::new();
    let mut feeds = Vec::new();
    for first in [500, 600, 700] {
        keepers.push(start_keeper(&cluster, "/skew", 1, first, system()).await.expect("a healthy instance starts"));
        feeds.push(common::claims::feed(keepers.last().unwrap(), system()));
    }
    let many_clock = Arc::new(OffsetClock::default());
    keepers.push(start_keeper(&cluster, "/skew", 40, 0, many_clock.clone()).await.expect("40 slots start"));
    feeds.push(common::claims::feed(keepers.last().unwrap(), many_clock.clone()));
    // They mint: an instance that mints nothing marks its slots idle and publishes no clock.
    let minting = common::claims::keep_minting(feeds);
    // Each extends its reservation within two thirds of a window (2 s), no longer idle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for slot in [500, 600, 700] {
        let value = get(&mut etcd, &format!("/skew/reservations/{slot}")).await.expect("reserved");
        let value = serde_json::from_slice::<serde_json::Value>(&value).unwrap();
        assert_ne!(value["idle"], serde_json::Value::Bool(true), "slot {slot} still idle: {value}");
    }

    // Its clock goes an hour ahead; its next writes publish that.
    many_clock.offset_ms.store(3_600_000, Ordering::Relaxed);
    let changed = Instant::now();
    loop {
        let value = get(&mut etcd, "/skew/reservations/0").await.expect("slot 0 reserved");
        let written_at = serde_json::from_slice::<serde_json::Value>(&value).unwrap()["written_at_ms"].as_i64();
        if written_at.is_some_and(|at| at > SystemClock::new().wall_ms() + 3_000_000) {
            break;
        }
        assert!(changed.elapsed() < Duration::from_secs(10), "the skewed clock was never published");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let healthy = start_keeper(&cluster, "/skew", 1, 800, system()).await;
    keepers.push(healthy.expect("a healthy instance beside one of 40 slots an hour ahead starts"));

    let ahead = Arc::new(OffsetClock::default());
    ahead.offset_ms.store(3_600_000, Ordering::Relaxed);
    let error = match start_keeper(&cluster, "/skew", 1, 900, ahead).await {
        Ok(_) => panic!("an instance an hour ahead of four of five instances started"),
        Err(error) => error,
    };
    // The four that mint; the newcomer at 800 mints nothing, so its clock is left out.
    assert!(error.contains("ahead of the median of 4 other instances"), "{error}");
    minting.abort();
    for keeper in keepers {
        keeper.finish(Minted::Unknown, Duration::from_secs(5)).await;
    }
}

/// A late copy of a slot's first write (onto its absent reservation) is refused by the real
/// etcd even when the reservation was deleted by hand meanwhile and reads as absent again:
/// the write compares the claim's version, which it moved on. Absence alone let such a copy
/// put back a reservation below what had been minted since (simulator seed 680721844248).
/// The holder's repair, at the version the refusal shows, lands; the worker key keeps its
/// value and lease.
#[tokio::test]
async fn a_late_copy_of_a_write_onto_an_absent_reservation_is_refused() {
    use snowmint::store::{Reply, Request, Store, Stored, Version, Write};
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let prefix = "/late-copy";
    let config = common::claims::etcd_config(&cluster.endpoints(), prefix, Duration::from_secs(10), None, "copy");
    let clock = SystemClock::new();
    let now = clock.wall_ms();
    let mut store = EtcdStore::connect(&config, &layout(), now).await.unwrap();
    let Reply::SessionOpened { session, .. } = store.call(Request::OpenSession { ttl: Duration::from_secs(10) }).await
    else {
        panic!("no session")
    };
    let claimed = store.call(Request::Claim { session, slot: 5 }).await;
    assert_eq!(claimed, Reply::Claimed { slot: 5, won: true });
    let write = |until_ms: i64, expect: Version, claim_version: Option<i64>| Request::WriteReservations {
        session,
        writes: vec![Write { slot: 5, until_ms, expect: Some(expect), wall_ms: now, idle: false, claim_version }],
        check_claim: true,
    };
    let first = write(now + 1_000, Version::Absent, Some(1));
    let Reply::Written(versions) = store.call(first.clone()).await else { panic!("the first write refused") };
    let extended = store.call(write(now + 5_000, versions[0].1, None)).await;
    assert!(matches!(extended, Reply::Written(_)), "{extended:?}");

    let mut etcd = cluster.client().await;
    let worker = format!("{prefix}/workers/5");
    let owner = get(&mut etcd, &worker).await.expect("the worker key");
    etcd.delete(format!("{prefix}/reservations/5"), None).await.unwrap();
    match store.call(first).await {
        Reply::WriteRefused { not_ours, current } => {
            assert!(not_ours.is_empty(), "{not_ours:?}");
            assert_eq!((&current[0].stored, current[0].claim_version), (&Stored::Absent, Some(2)));
        }
        other => panic!("the late copy landed: {other:?}"),
    }
    let repair = store.call(write(now + 5_000, Version::Absent, Some(2))).await;
    assert!(matches!(repair, Reply::Written(_)), "{repair:?}");
    assert_eq!(reservation(&mut etcd, prefix, 5).await, now + 5_000);
    assert_eq!(get(&mut etcd, &worker).await, Some(owner));
    assert_eq!(lease_of(&mut etcd, prefix, 5).await, session);
}
