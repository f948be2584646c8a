//! Months of etcd mode, in minutes (issue 23): a real etcd with a small backend quota
//! (`--quota-backend-bytes`), a fleet of real `snowmint serve` processes with short
//! reservation windows, and a filler writer overwriting keys of its own, since the fleet's own
//! writes are few.
//!
//! - With compaction on (every second here), many times the quota is written and the database
//!   stays under it: no alarm, every instance minting at the end, no ID twice.
//! - With compaction off, the filler fills etcd and it raises its `NOSPACE` alarm: every
//!   refusal names the alarm and its fix, and so does `snowmint_etcd_alarm`; once the history
//!   is compacted, the member defragmented and the alarm disarmed (as the runbook says), the
//!   fleet mints again by itself, with no restart, and no ID twice.
//!
//! The tests run one at a time ([`serial`]): each keeps the two cores busy.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use common::{
    HammerLog, Process, ServerBuilder, assert_increasing, hammer_into, http_get, metric_value, next_id_eventually,
    serial,
};
use etcd_client::{AlarmAction, AlarmOptions, AlarmType, CompactionOptions, PutOptions};

const MIB: u64 = 1 << 20;

/// The pause between a hammer's calls: every path exercised, few enough IDs to keep them all.
const PACE: Duration = Duration::from_millis(5);

/// `snowmint serve` in etcd mode with short reservation windows and `extra` flags.
fn serve(cluster: &EtcdCluster, prefix: &str, extra: &[&str]) -> Process {
    let short = ["--lease-ttl", "3", "--reservation-window-ms", "300"];
    ServerBuilder::new().etcd(&cluster.endpoints(), prefix).args(short).args(extra).spawn()
}

/// One instance with its hammering client, which keeps every ID it is given.
struct Instance {
    process: Process,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<HammerLog>>,
    hammer: tokio::task::JoinHandle<()>,
}

impl Instance {
    fn start(process: Process) -> Instance {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(HammerLog::default()));
        let hammer = hammer_into(process.grpc, stop.clone(), log.clone(), PACE);
        Instance { process, stop, log, hammer }
    }

    async fn metrics(&self) -> String {
        http_get(self.process.admin, "/metrics").await.1
    }

    /// Stops the hammer and the process (SIGTERM, a clean exit); the IDs it was given.
    async fn finish(mut self) -> HammerLog {
        self.stop.store(true, Ordering::Relaxed);
        tokio::time::timeout(Duration::from_secs(10), self.hammer).await.expect("the hammer stops").unwrap();
        self.process.signal("TERM");
        let status = self.process.wait(Duration::from_secs(15)).await;
        assert!(status.success(), "exited {status:?} on SIGTERM");
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

/// Every ID of every hammer: each connection's strictly increasing, none twice. How many.
fn check_ids(logs: &[HammerLog]) -> usize {
    let mut all = Vec::new();
    for log in logs {
        assert_increasing(&log.ids);
        assert_increasing(&log.bulk);
        all.extend(log.all_ids());
    }
    let total = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), total, "{} duplicate IDs among {total}", total - all.len());
    total
}

/// etcd's own word on its database: the size of its file (what the quota is checked against)
/// and the alarms it lists.
async fn status(client: &mut etcd_client::Client) -> (u64, Vec<String>) {
    let status = client.status().await.expect("etcd status");
    (status.db_size() as u64, status.errors().to_vec())
}

/// A writer of its own keys: `keys` keys under `/filler/`, each put overwriting one with
/// `value_bytes` bytes, `writers` puts in flight at once, at most `rate` bytes a second. It
/// stops when told, when `target` bytes are written, or at the first refused put (kept).
struct Filler {
    written: Arc<AtomicU64>,
    refused: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Filler {
    async fn start(cluster: &EtcdCluster, value_bytes: usize, writers: usize, rate: u64, target: u64) -> Filler {
        let written = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..writers {
            let mut client = cluster.client().await;
            let (written, refused, stop) = (written.clone(), refused.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let value = vec![b'x'; value_bytes];
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let done = written.load(Ordering::Relaxed);
                    if done >= target {
                        break;
                    }
                    // Paced: no faster than `rate` bytes a second, all writers together.
                    let due = Duration::from_secs_f64(done as f64 / rate as f64);
                    if let Some(early) = due.checked_sub(started.elapsed()) {
                        tokio::time::sleep(early.min(Duration::from_millis(100))).await;
                        continue;
                    }
                    let key = format!("/filler/{w}-{}", n % 16);
                    n += 1;
                    match client.put(key, value.clone(), None::<PutOptions>).await {
                        Ok(_) => {
                            written.fetch_add(value_bytes as u64, Ordering::Relaxed);
                        }
                        Err(e) => {
                            refused.lock().unwrap().get_or_insert(e.to_string());
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
            }));
        }
        Filler { written, refused, stop, tasks }
    }

    fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    fn refused(&self) -> Option<String> {
        self.refused.lock().unwrap().clone()
    }

    fn done(&self) -> bool {
        self.tasks.iter().all(|t| t.is_finished())
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(10), task).await.expect("the filler stops").unwrap();
        }
    }
}

/// `series` summed over the instances' metrics.
async fn fleet_sum(instances: &[Instance], series: &str) -> f64 {
    let mut sum = 0.0;
    for instance in instances {
        sum += metric_value(&instance.metrics().await, series);
    }
    sum
}

/// A long run, accelerated: a 4 MiB quota, and ten times that written while three instances
/// mint with 300 ms reservation windows and compact every second. etcd's database stays under
/// its quota and raises no alarm; the fleet compacts once a round, not once per instance;
/// every instance mints at the end; no ID twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_keeps_etcd_under_its_quota_while_ten_times_it_is_written() {
    let _serial = serial().await;
    let quota = 4 * MIB;
    let cluster = EtcdCluster::start_args(1, &["--quota-backend-bytes", &quota.to_string()]).await;
    let began = Instant::now();
    let mut instances: Vec<Instance> =
        (0..3).map(|_| Instance::start(serve(&cluster, "/months", &["--etcd-compaction-interval", "1s"]))).collect();
    let mut client = cluster.client().await;
    let started = Instant::now();
    // Half a MiB a second: at most a few seconds of history between compactions.
    let target = 10 * quota;
    let filler = Filler::start(&cluster, 3 * 1024, 4, MIB / 2, target).await;
    let mut largest = 0;
    while !filler.done() {
        assert!(started.elapsed() < Duration::from_secs(150), "wrote only {} bytes in 150 s", filler.written());
        let (size, errors) = status(&mut client).await;
        largest = largest.max(size);
        assert!(errors.is_empty(), "etcd lists {errors:?} after {} bytes written", filler.written());
        assert!(size < quota, "etcd's database grew to {size} bytes, its quota is {quota}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let refused = filler.refused();
    let written = filler.written();
    filler.stop().await;
    let took = started.elapsed();
    assert_eq!(refused, None, "a filler put was refused");
    assert!(written >= target, "{written} bytes written, {target} wanted");
    let alarms = client.alarm(AlarmAction::Get, AlarmType::None, None).await.unwrap();
    assert!(alarms.alarms().is_empty(), "etcd raised an alarm");
    eprintln!(
        "wrote {written} bytes ({:.1} times the quota) in {:.1} s; the database peaked at {largest} bytes",
        written as f64 / quota as f64,
        took.as_secs_f64()
    );

    // One compaction a round fleet-wide (a round a second), not one per instance (three times
    // as many); and they did compact.
    let compacted = fleet_sum(&instances, r#"snowmint_etcd_compactions_total{result="compacted"}"#).await;
    let rounds = began.elapsed().as_secs_f64();
    assert!(compacted >= rounds / 4.0, "only {compacted} compactions in {rounds:.0} s");
    assert!(compacted <= 1.5 * rounds + 3.0, "{compacted} compactions in {rounds:.0} s: more than one a round");
    for instance in &instances {
        let metrics = instance.metrics().await;
        assert_eq!(metric_value(&metrics, r#"snowmint_etcd_alarm{alarm="NOSPACE"}"#), 0.0);
        assert_eq!(metric_value(&metrics, r#"snowmint_etcd_alarm{alarm="CORRUPT"}"#), 0.0);
        assert!(metric_value(&metrics, "snowmint_etcd_compacted_revision") > 0.0, "no compaction learnt");
    }
    // Every instance mints at the end.
    for instance in &mut instances {
        let mut grpc = instance.process.client().await;
        next_id_eventually(&mut grpc, Duration::from_secs(10)).await;
        assert_eq!(metric_value(&instance.metrics().await, "snowmint_minting"), 1.0);
    }
    let mut logs = Vec::new();
    for instance in instances {
        logs.push(instance.finish().await);
    }
    let checked = check_ids(&logs);
    assert!(checked > 10_000, "only {checked} IDs minted");
    eprintln!("{checked} IDs, none twice; {compacted} compactions");
}

/// What a NextId call answers now: the ID, or the refusal's code and message.
async fn next_id(process: &Process) -> Result<u64, (tonic::Code, String)> {
    let mut grpc = process.client().await;
    let mut request = tonic::Request::new(snowmint::proto::NextIdRequest::default());
    // Longer than the server's --max-wait-ms (1 s): the server's answer, never the client's
    // own timeout.
    request.set_timeout(Duration::from_secs(2));
    grpc.next_id(request).await.map(|r| r.into_inner().id).map_err(|s| (s.code(), s.message().to_string()))
}

/// etcd's NOSPACE alarm, raised by another writer while the fleet runs with compaction off:
/// every instance's refusals and `snowmint_etcd_alarm` name it, and the fix; after the
/// runbook's compaction, defragmentation and disarm the fleet mints again with no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nospace_is_named_in_refusals_and_minting_resumes_once_it_is_cleared() {
    let _serial = serial().await;
    let quota = 2 * MIB;
    let cluster = EtcdCluster::start_args(1, &["--quota-backend-bytes", &quota.to_string()]).await;
    let instances: Vec<Instance> =
        (0..2).map(|_| Instance::start(serve(&cluster, "/nospace", &["--etcd-compaction-interval", "off"]))).collect();
    for instance in &instances {
        let mut grpc = instance.process.client().await;
        next_id_eventually(&mut grpc, Duration::from_secs(10)).await;
    }
    let mut client = cluster.client().await;

    // The filler writes until etcd refuses.
    let filler = Filler::start(&cluster, 3 * 1024, 2, 4 * MIB, 100 * quota).await;
    let started = Instant::now();
    while !filler.done() {
        assert!(started.elapsed() < Duration::from_secs(60), "etcd took {} bytes without refusing", filler.written());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = filler.refused().expect("etcd refused a put");
    assert!(refused.contains("database space exceeded"), "{refused}");
    filler.stop().await;
    let full = Instant::now();

    // Every instance refuses, saying which alarm and how to clear it.
    for instance in &instances {
        let message = loop {
            match next_id(&instance.process).await {
                Err((tonic::Code::Unavailable, message)) if message.contains("NOSPACE") => break message,
                other => {
                    assert!(full.elapsed() < Duration::from_secs(15), "still {other:?} 15 s into NOSPACE");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        for needle in ["has not been extended", "NOSPACE", "compact", "defragment", "etcdctl alarm disarm"] {
            assert!(message.contains(needle), "the refusal lacks {needle:?}: {message}");
        }
        let metrics = instance.metrics().await;
        assert_eq!(metric_value(&metrics, r#"snowmint_etcd_alarm{alarm="NOSPACE"}"#), 1.0);
        assert_eq!(metric_value(&metrics, r#"snowmint_etcd_alarm{alarm="CORRUPT"}"#), 0.0);
        assert_eq!(metric_value(&metrics, "snowmint_minting"), 0.0);
        let (code, body) = http_get(instance.process.admin, "/readyz").await;
        assert!(code == 503 && body.contains("NOSPACE"), "/readyz {code}: {body}");
        eprintln!("refused: {message}");
    }
    // An instance started now exits, naming the alarm and its fix: etcd refuses the
    // transaction that checks the recorded layout (on the fleet's prefix) or records it (on a
    // new one), as it refuses any that may write.
    for prefix in ["/nospace", "/nospace-new"] {
        let endpoints = cluster.endpoints();
        let start = tokio::task::spawn_blocking(move || {
            let server = ServerBuilder::new().etcd(&endpoints, prefix).args(["--etcd-start-timeout-ms", "2000"]);
            server.run_to_exit_within(Duration::from_secs(30))
        });
        let (code, stderr) = start.await.unwrap();
        assert_ne!(code, 0, "an instance started on {prefix} during NOSPACE: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.contains("NOSPACE") && last.contains("etcdctl alarm disarm"), "{prefix}: {stderr}");
        eprintln!("a start on {prefix}: {last}");
    }
    // NOSPACE lasts a while: the keepers' write retries back off to their longest (2 s), the
    // leases' keep-alives go on (etcd takes them), and nothing is minted meanwhile.
    let failed = r#"snowmint_reservation_writes_total{result="failed"}"#;
    let failed_before = fleet_sum(&instances, failed).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let failed_during = fleet_sum(&instances, failed).await - failed_before;
    eprintln!("{failed_during} reservation writes failed in 6 s of NOSPACE, all instances together");
    // Each instance's retries back off (50 ms doubling to 2 s): at most 8 each in 6 s, however
    // many callers wait at the fence (each used to send one more: hundreds).
    assert!(failed_during <= 2.0 * 10.0, "{failed_during} failed reservation writes in 6 s of NOSPACE");

    // The runbook: compact the history, defragment every member, disarm the alarm.
    let revision = client.get("/", None).await.unwrap().header().unwrap().revision();
    client.compact(revision, Some(CompactionOptions::new().with_physical())).await.unwrap();
    client.defragment().await.unwrap();
    let alarms = client.alarm(AlarmAction::Get, AlarmType::None, None).await.unwrap();
    assert!(!alarms.alarms().is_empty(), "no alarm listed");
    for alarm in alarms.alarms() {
        let mut options = AlarmOptions::new();
        options.with_member(alarm.member_id());
        client.alarm(AlarmAction::Deactivate, alarm.alarm(), Some(options)).await.unwrap();
    }
    let cleared = Instant::now();

    // Minting resumes by itself, and the alarm's metric goes back to 0.
    for instance in &instances {
        // No call that started a second into NOSPACE (past the last reservation written
        // before it) and ended before the disarm got an ID.
        let minted = instance
            .log
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|(end, took, code)| {
                *code == tonic::Code::Ok && *end - *took > full + Duration::from_secs(1) && *end < cleared
            })
            .count();
        assert_eq!(minted, 0, "{minted} calls got IDs during NOSPACE");
        let resumed = loop {
            match next_id(&instance.process).await {
                Ok(_) => break cleared.elapsed(),
                Err(refusal) => {
                    assert_eq!(refusal.0, tonic::Code::Unavailable, "{refusal:?}");
                    assert!(cleared.elapsed() < Duration::from_secs(15), "still {refusal:?} 15 s after the disarm");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        let metrics = instance.metrics().await;
        assert_eq!(metric_value(&metrics, r#"snowmint_etcd_alarm{alarm="NOSPACE"}"#), 0.0);
        eprintln!("minting again {:.2} s after the disarm", resumed.as_secs_f64());
    }
    let mut logs = Vec::new();
    for instance in instances {
        logs.push(instance.finish().await);
    }
    let checked = check_ids(&logs);
    eprintln!("{checked} IDs across NOSPACE, none twice");
}
