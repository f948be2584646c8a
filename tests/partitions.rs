//! Real network partitions: three etcd members, one snowmint instance and its client, each
//! a host in a network namespace of its own on one bridge (`common/netns.rs`), with faults
//! made by nftables rules in one host's namespace:
//!
//! - the instance cut from every etcd member while its client still reaches it;
//! - the instance left talking only to a member on the minority side of a partition;
//! - one-way loss: the instance's requests reach etcd, the replies do not;
//! - a flapping link between the instance and etcd.
//!
//! After each, as in the fault suite: no ID twice and the instance's IDs increasing, every
//! refusal `UNAVAILABLE` within the call's deadline, no call started more than the lease TTL
//! after the cut minted (fenced within the TTL), and minting again within a bound after the
//! heal. Needs `ip netns` (root) and `nft`; without them the test says so and passes
//! without running. `scripts/long/soak` repeats the scenarios for as long as asked.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::child::{Child, output_within};
use common::fleet::longest_refusal;
use common::netns::{self, Host, Net};
use common::{HammerLog, Process, ServerBuilder, assert_increasing, binary, hammer_into, serial};

/// The instance's lease TTL, seconds.
const TTL: u64 = 3;
/// How long a cut lasts: the TTL and then some, so the lease runs out on etcd's side.
const HOLD: Duration = Duration::from_secs(TTL + 3);
/// The longest recovery accepted after a heal: a new session and claim, backoff included,
/// and a wait past the slot's reservation.
const RECOVERY: Duration = Duration::from_secs(20);

/// The network, etcd, the instance and its client, dropped in this order on any exit.
struct Cluster {
    client: Option<(std::thread::JoinHandle<()>, Arc<AtomicBool>)>,
    log: Arc<Mutex<HammerLog>>,
    instance: Option<Process>,
    etcd: Vec<Child>,
    /// The etcd client URLs, inside the namespaces.
    endpoints: String,
    net: Net,
    _dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some((_, stop)) = &self.client {
            stop.store(true, Ordering::Relaxed);
        }
        // The processes go before the namespaces they live in.
        self.instance.take();
        self.etcd.clear();
        self.net.heal_all();
    }
}

impl Cluster {
    fn start() -> Cluster {
        let net = Net::new(&["e0", "e1", "e2", "s0", "c0"]);
        let dir = tempfile::tempdir().unwrap();
        let members: Vec<Host> = ["e0", "e1", "e2"].iter().map(|n| net.host(n).clone()).collect();
        let initial = members.iter().map(|m| format!("{}=http://{}:2380", m.name, m.ip)).collect::<Vec<_>>().join(",");
        let mut etcd = Vec::new();
        for m in &members {
            let mut command = m.command("etcd");
            command
                .args(["--name", &m.name])
                .arg("--data-dir")
                .arg(dir.path().join(&m.name))
                .args(["--listen-client-urls", &format!("http://{}:2379", m.ip)])
                .args(["--advertise-client-urls", &format!("http://{}:2379", m.ip)])
                .args(["--listen-peer-urls", &format!("http://{}:2380", m.ip)])
                .args(["--initial-advertise-peer-urls", &format!("http://{}:2380", m.ip)])
                .args(["--initial-cluster", &initial, "--initial-cluster-state", "new"])
                .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
                .args(["--log-level", "error", "--logger", "zap"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            etcd.push(Child::spawn(command).expect("start etcd (Debian package etcd-server)"));
        }
        let endpoints = members.iter().map(|m| format!("http://{}:2379", m.ip)).collect::<Vec<_>>().join(",");
        let s0 = net.host("s0");
        let instance = ServerBuilder::new()
            .through(s0.launcher())
            .listen(&format!("{}:50051", s0.ip), &format!("{}:9464", s0.ip))
            .args(["--etcd-endpoints", &endpoints, "--lease-ttl", &TTL.to_string()])
            .spawn();
        let log = Arc::new(Mutex::new(HammerLog::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let addr = instance.grpc;
        let client = {
            let (log, stop) = (log.clone(), stop.clone());
            netns::spawn_in(net.host("c0"), move || async move {
                hammer_into(addr, stop, log, Duration::from_millis(2)).await.unwrap();
            })
        };
        Cluster { client: Some((client, stop)), log, instance: Some(instance), etcd, endpoints, net, _dir: dir }
    }

    fn etcd_hosts(&self) -> Vec<&Host> {
        ["e0", "e1", "e2"].iter().map(|n| self.net.host(n)).collect()
    }

    /// The first successful call that ended after `after`, waited for at most `limit`.
    async fn first_ok_after(&self, after: Instant, limit: Duration) -> Duration {
        loop {
            if let Some(t) = self.log.lock().unwrap().first_after(after, tonic::Code::Ok) {
                return t.duration_since(after);
            }
            assert!(after.elapsed() < limit, "no ID within {limit:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn calls_after(&self, t: Instant) -> Vec<(Instant, Duration, tonic::Code)> {
        self.log.lock().unwrap().calls.iter().filter(|c| c.0 > t).cloned().collect()
    }

    /// Stops the client and checks every ID: (IDs checked).
    fn finish(mut self) -> usize {
        let (thread, stop) = self.client.take().expect("the client runs");
        stop.store(true, Ordering::Relaxed);
        thread.join().expect("the client thread");
        let ids = self.log.lock().unwrap().ids.clone();
        assert_increasing(&ids);
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "{} duplicate IDs", ids.len() - sorted.len());
        // Every re-claim after a cut is on record, and the windows chain without overlap.
        self.net.heal_all();
        let mut audit = self.net.host("c0").command(binary());
        audit.args(["audit", "--etcd-endpoints", &self.endpoints]);
        let out = output_within(audit, Duration::from_secs(30));
        assert_eq!(out.code, 0, "snowmint audit failed:\n{}{}", out.stdout, out.stderr);
        eprintln!("audit: {}", out.stdout.trim());
        ids.len()
    }
}

/// What one scenario did.
struct Row {
    scenario: &'static str,
    /// From the fault to the first refusal.
    fenced_after: Option<Duration>,
    longest_refusal: Duration,
    /// From the heal to the first ID.
    recovery: Duration,
}

/// Injects a fault with `inject`, holds it `hold` (or runs `inject` as the whole fault when
/// it returns only after healing), heals, and checks the calls.
async fn scenario(
    cluster: &Cluster,
    name: &'static str,
    fenced_by_ttl: bool,
    inject: impl AsyncFnOnce(&Cluster),
) -> Row {
    cluster.first_ok_after(Instant::now(), RECOVERY).await;
    let cut = Instant::now();
    inject(cluster).await;
    cluster.net.heal_all();
    let healed = Instant::now();
    let recovery = cluster.first_ok_after(healed, RECOVERY).await;
    // Let the instance serve a moment past recovery, so its calls are in the record.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = cluster.calls_after(cut);
    for (end, took, code) in &calls {
        assert!(matches!(code, tonic::Code::Ok | tonic::Code::Unavailable), "{name}: a call ended {code:?}");
        assert!(*took <= Duration::from_millis(700), "{name}: a call took {took:?}");
        if fenced_by_ttl && *code == tonic::Code::Ok {
            let started = *end - *took;
            assert!(
                started < cut + Duration::from_secs(TTL) || started > healed,
                "{name}: a call started {:?} into the cut minted",
                started.duration_since(cut)
            );
        }
    }
    let fenced_after = calls.iter().find(|c| c.2 != tonic::Code::Ok).map(|c| (c.0 - c.1).duration_since(cut));
    if fenced_by_ttl {
        assert!(fenced_after.is_some(), "{name}: never refused");
    }
    Row { scenario: name, fenced_after, longest_refusal: longest_refusal(&calls), recovery }
}

/// Every scenario once, in order.
async fn scenarios(cluster: &Cluster) -> Vec<Row> {
    let mut rows = Vec::new();
    rows.push(
        scenario(cluster, "instance cut from every etcd member", true, async |c: &Cluster| {
            c.net.host("s0").cut_from(&c.etcd_hosts());
            tokio::time::sleep(HOLD).await;
        })
        .await,
    );
    rows.push(
        scenario(cluster, "instance reaches only a minority member", true, async |c: &Cluster| {
            let (e0, e1, e2) = (c.net.host("e0"), c.net.host("e1"), c.net.host("e2"));
            e2.cut_from(&[e0, e1]);
            c.net.host("s0").cut_from(&[e0, e1]);
            tokio::time::sleep(HOLD).await;
        })
        .await,
    );
    rows.push(
        scenario(cluster, "one-way loss: etcd's replies dropped", true, async |c: &Cluster| {
            c.net.host("s0").deaf_to(&c.etcd_hosts());
            tokio::time::sleep(HOLD).await;
        })
        .await,
    );
    rows.push(
        scenario(cluster, "flapping link: 8 x (0.7 s cut, 0.7 s up)", false, async |c: &Cluster| {
            for _ in 0..8 {
                c.net.host("s0").cut_from(&c.etcd_hosts());
                tokio::time::sleep(Duration::from_millis(700)).await;
                c.net.host("s0").heal();
                tokio::time::sleep(Duration::from_millis(700)).await;
            }
        })
        .await,
    );
    rows
}

fn table(rows: &[Row], checked: usize) {
    eprintln!("| scenario | first refusal after the fault | longest refusal | recovery after the heal |");
    eprintln!("|---|---|---|---|");
    for r in rows {
        let fenced = r.fenced_after.map_or("none".to_string(), |d| format!("{:.2} s", d.as_secs_f64()));
        eprintln!(
            "| {} | {fenced} | {:.2} s | {:.2} s |",
            r.scenario,
            r.longest_refusal.as_secs_f64(),
            r.recovery.as_secs_f64()
        );
    }
    eprintln!("IDs checked: {checked}, duplicates: 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_fence_the_instance_within_the_ttl_and_it_recovers_with_no_duplicate() {
    if let Some(reason) = netns::unavailable() {
        eprintln!("SKIPPED: network partitions need network namespaces and nftables: {reason}");
        return;
    }
    let _serial = serial().await;
    let cluster = Cluster::start();
    let rows = scenarios(&cluster).await;
    let checked = cluster.finish();
    table(&rows, checked);
}

/// The scenarios again and again for `SNOWMINT_SOAK_SECS` (default 300): run by
/// `scripts/long/soak`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run by scripts/long/soak"]
async fn partition_soak() {
    if let Some(reason) = netns::unavailable() {
        eprintln!("SKIPPED: network partitions need network namespaces and nftables: {reason}");
        return;
    }
    let _serial = serial().await;
    let secs: u64 = std::env::var("SNOWMINT_SOAK_SECS").map_or(300, |s| s.parse().expect("SNOWMINT_SOAK_SECS"));
    let cluster = Cluster::start();
    let start = Instant::now();
    let mut rows = Vec::new();
    while start.elapsed() < Duration::from_secs(secs) {
        rows.extend(scenarios(&cluster).await);
    }
    let checked = cluster.finish();
    table(&rows, checked);
}
