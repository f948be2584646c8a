//! A fleet of real snowmint processes for fault injection: each node runs the real binary
//! under libfaketime (its wall clock offset driven through a file, the monotonic clock left
//! alone), with a client hammering it and keeping every ID and, in a fleet made with its
//! named sequences ([`SEQUENCES`]), callers taking their values. Faults act on real
//! processes: kill -9, SIGSTOP/SIGCONT, clock steps, etcd members killed or paused, state
//! files broken.
//!
//! The fault scenarios live here too, so the bounded suite and the soak run the same code.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::etcd::EtcdCluster;
use super::sequences::{self, ValueCall, hammer_values_into};
use super::{HammerLog, Process, ServerBuilder, assert_increasing, hammer_into, http_get, metric_value};
use snowmint::layout::Layout;

/// The pause between a hammer's calls: enough load to exercise every path, few enough IDs
/// that a long soak can keep and check them all.
const PACE: Duration = Duration::from_millis(2);

/// The named sequences a fleet made with them hammers: `orders` (from 1,000) and `tickets`
/// (from 1). Each node serves them with segments of 5 to 50 values
/// (`--sequence-min-segment`, `--sequence-max-segment`), so that under the callers' load
/// each node claims a new segment of each a few times a second, racing the others for the
/// same record.
pub const SEQUENCES: [(&str, i64); 2] = [("orders", 1_000), ("tickets", 1)];
const SEQUENCE_NAMES: &[&str] = &[SEQUENCES[0].0, SEQUENCES[1].0];

/// How many callers (each on a connection of its own) take values from each node, and the
/// pause between each one's calls.
const VALUE_CALLERS: usize = 2;
const VALUE_PACE: Duration = Duration::from_millis(5);

/// How long after a fault every node's sequences may take to answer again.
const VALUE_RECOVERY_LIMIT: Duration = Duration::from_secs(10);

/// How a node gets its worker ID.
#[derive(Debug, Clone)]
pub enum Mode {
    Etcd { endpoints: String, prefix: String },
    Standalone { state_dir: PathBuf, worker_id: u32 },
}

/// A running hammer: its task, its stop flag, and the log it writes.
type LiveHammer = (tokio::task::JoinHandle<()>, Arc<AtomicBool>, Arc<Mutex<HammerLog>>);

/// One snowmint process (across restarts) with its hammering client.
pub struct Node {
    pub name: String,
    pub mode: Mode,
    pub extra: Vec<String>,
    /// The kernel hostname the process sees (as a pod's, `snowmint-3`), set in a UTS
    /// namespace of its own; `None`: this host's.
    hostname: Option<String>,
    clock_file: PathBuf,
    /// The node's own local state (in etcd mode, only the clock filter's memory): each node
    /// is a host of its own, with a clock of its own.
    local_dir: PathBuf,
    pub process: Option<Process>,
    live: Option<LiveHammer>,
    /// Logs of this node's earlier lifetimes.
    pub done: Vec<HammerLog>,
    /// Whether its hammer also takes values of the fleet's [`SEQUENCES`] (which must exist).
    pub sequences: bool,
}

impl Node {
    pub fn new(name: &str, mode: Mode, extra: &[&str], dir: &Path) -> Node {
        let clock_file = dir.join(format!("{name}.faketime"));
        std::fs::write(&clock_file, "+0\n").unwrap();
        Node {
            name: name.to_string(),
            mode,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            hostname: None,
            clock_file,
            local_dir: dir.join(format!("{name}.local")),
            process: None,
            live: None,
            done: Vec::new(),
            sequences: false,
        }
    }

    /// Runs the process with `hostname` as its kernel hostname, as a StatefulSet pod sees
    /// its own name. Needs UTS namespaces ([`can_set_hostname`]).
    pub fn with_hostname(mut self, hostname: &str) -> Node {
        self.hostname = Some(hostname.to_string());
        self
    }

    /// The node's server: its mode, its clock, its hostname, its flags and `extra`.
    fn server(&self, extra: &[&str]) -> ServerBuilder {
        let server = match &self.mode {
            Mode::Etcd { endpoints, prefix } => ServerBuilder::new().etcd(endpoints, prefix).state_dir(&self.local_dir),
            Mode::Standalone { state_dir, worker_id } => {
                ServerBuilder::new().state_dir(state_dir).args(["--worker-id", &worker_id.to_string()])
            }
        };
        let server = server.faketime(&self.clock_file);
        let server = match &self.hostname {
            Some(hostname) => server.hostname(hostname),
            None => server,
        };
        // Strict policy: steps back up to 50 ms are waited out, so a small step is one
        // whatever the timing of the calls around it.
        // Forward jumps above 500 ms are counted, so every jump the faults make (1 s or more)
        // is one.
        server
            .args(["--lease-ttl", "3", "--max-clock-back-ms", "50"])
            .args(["--forward-jump-threshold-ms", "500"])
            .args(["--sequence-min-segment", "5", "--sequence-max-segment", "50"])
            .args(&self.extra)
            .args(extra)
    }

    /// Starts the process and its hammer.
    pub fn start(&mut self) {
        self.start_with(&[]);
    }

    pub fn start_with(&mut self, extra: &[&str]) {
        assert!(self.process.is_none(), "{} already running", self.name);
        self.process = Some(self.server(extra).spawn());
        self.attach_hammer();
    }

    /// Starts hammering the running process: IDs, and the fleet's sequences if it has them.
    fn attach_hammer(&mut self) {
        let addr = self.process.as_ref().expect("running").grpc;
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(HammerLog::default()));
        let mut tasks = vec![hammer_into(addr, stop.clone(), log.clone(), PACE)];
        if self.sequences {
            for _ in 0..VALUE_CALLERS {
                tasks.push(hammer_values_into(addr, SEQUENCE_NAMES, stop.clone(), log.clone(), VALUE_PACE));
            }
        }
        let task = tokio::spawn(async move {
            for task in tasks {
                task.await.unwrap();
            }
        });
        self.live = Some((task, stop, log));
    }

    /// Runs the binary with this node's arguments to completion, at most [`super::EXIT_LIMIT`]:
    /// (exit code, stderr).
    pub fn run_to_exit(&self, extra: &[&str]) -> (i32, String) {
        self.server(extra).run_to_exit()
    }

    /// Stops the hammer and keeps its log.
    pub async fn stop_hammer(&mut self) {
        if let Some((task, stop, log)) = self.live.take() {
            stop.store(true, Ordering::Relaxed);
            tokio::time::timeout(Duration::from_secs(5), task).await.expect("hammer stops").unwrap();
            self.done.push(std::mem::take(&mut *log.lock().unwrap()));
        }
    }

    /// kill -9; the process is gone when this returns.
    pub async fn kill9(&mut self) {
        self.stop_hammer().await;
        if let Some(mut process) = self.process.take() {
            process.signal("KILL");
            process.wait(Duration::from_secs(5)).await;
        }
    }

    /// SIGTERM, waiting for a clean exit.
    pub async fn terminate(&mut self) {
        self.stop_hammer().await;
        if let Some(mut process) = self.process.take() {
            process.signal("TERM");
            let status = process.wait(Duration::from_secs(10)).await;
            assert!(status.success(), "{} exited {status:?} on SIGTERM", self.name);
        }
    }

    pub fn signal(&self, signal: &str) {
        self.process.as_ref().expect("running").signal(signal);
    }

    /// Sets the node's wall-clock offset from real time, in seconds.
    pub fn set_clock(&self, offset_secs: f64) {
        // Whole or not at all: libfaketime reads the file at every clock call.
        let temp = self.clock_file.with_extension("faketime.tmp");
        std::fs::write(&temp, format!("{offset_secs:+.3}\n")).unwrap();
        std::fs::rename(&temp, &self.clock_file).unwrap();
    }

    pub async fn metrics(&self) -> String {
        http_get(self.process.as_ref().expect("running").admin, "/metrics").await.1
    }

    pub async fn metric(&self, series: &str) -> f64 {
        metric_value(&self.metrics().await, series)
    }

    /// Waits for a successful call that ended after `after`; how long after `after` it came.
    pub async fn recovered_after(&self, after: Instant, limit: Duration) -> Duration {
        let log = self.live.as_ref().expect("hammering").2.clone();
        loop {
            if let Some(t) = log.lock().unwrap().first_after(after, tonic::Code::Ok) {
                return t.duration_since(after);
            }
            assert!(after.elapsed() < limit, "{} did not mint within {limit:?}", self.name);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The calls of the live hammer that ended after `after`.
    pub fn calls_after(&self, after: Instant) -> Vec<(Instant, Duration, tonic::Code)> {
        let log = self.live.as_ref().expect("hammering").2.clone();
        log.lock().unwrap().calls.iter().filter(|c| c.0 > after).cloned().collect()
    }

    /// The IDs the live hammer received so far (on its first connection).
    pub fn live_ids(&self) -> Vec<u64> {
        self.live.as_ref().map(|l| l.2.lock().unwrap().ids.clone()).unwrap_or_default()
    }

    /// The IDs the live hammer's batches of mixed sizes received so far, on its second
    /// connection.
    pub fn live_bulk_ids(&self) -> Vec<u64> {
        self.live.as_ref().map(|l| l.2.lock().unwrap().bulk.clone()).unwrap_or_default()
    }

    /// Runs `f` on the live hammer's log, if it hammers.
    fn with_live_log<R>(&self, f: impl FnOnce(&HammerLog) -> R) -> Option<R> {
        self.live.as_ref().map(|l| f(&l.2.lock().unwrap()))
    }

    /// Waits until every sequence answered a call that ended after `after`; how long after
    /// `after` the last of them did.
    pub async fn values_recovered_after(&self, after: Instant, limit: Duration) -> Duration {
        let mut latest = Duration::ZERO;
        for &sequence in SEQUENCE_NAMES {
            loop {
                let answered = self.with_live_log(|log| {
                    let calls = log.values.iter().filter(|c| c.sequence == sequence);
                    calls.filter(|c| c.code == tonic::Code::Ok && c.end > after).map(|c| c.end).min()
                });
                if let Some(t) = answered.expect("hammering") {
                    latest = latest.max(t.duration_since(after));
                    break;
                }
                assert!(after.elapsed() < limit, "{}: no {sequence} value within {limit:?}", self.name);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        latest
    }
}

/// Whether this process may give a child a hostname of its own (a UTS namespace: root, or
/// a user namespace allowed to).
pub fn can_set_hostname() -> bool {
    Command::new("unshare")
        .args(["--uts", "--", "sh", "-c", "hostname snowmint-probe"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What one fault did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub fault: &'static str,
    /// The longest run of refused calls on an affected node.
    pub refusal: Duration,
    /// From the end of the fault to the first ID from every affected node.
    pub recovery: Duration,
    /// The longest run of refused sequence calls on any node, from the previous fault's end
    /// to this one's (zero in a fleet without sequences).
    pub value_refusal: Duration,
    /// From the end of the fault until every node's every sequence answered again.
    pub value_recovery: Duration,
}

/// The longest stretch of non-OK calls among `calls`.
pub fn longest_refusal(calls: &[(Instant, Duration, tonic::Code)]) -> Duration {
    let mut longest = Duration::ZERO;
    let mut since: Option<Instant> = None;
    for (end, took, code) in calls {
        match (code, since) {
            (tonic::Code::Ok, Some(start)) => {
                longest = longest.max(end.duration_since(start));
                since = None;
            }
            (tonic::Code::Ok, None) => {}
            (_, None) => since = Some(*end - *took),
            (_, Some(_)) => {}
        }
    }
    if let (Some(start), Some(last)) = (since, calls.last()) {
        longest = longest.max(last.0.duration_since(start));
    }
    longest
}

/// Asserts every call in `calls` either succeeded or was refused with UNAVAILABLE within
/// its 500 ms deadline (with a little slack for the loaded machine).
pub fn assert_refusals_are_unavailable_and_prompt(node: &str, calls: &[(Instant, Duration, tonic::Code)]) {
    for (_, took, code) in calls {
        assert!(matches!(code, tonic::Code::Ok | tonic::Code::Unavailable), "{node}: a call ended {code:?}");
        assert!(*took <= Duration::from_millis(700), "{node}: a call took {took:?}");
    }
}

/// A fleet: an etcd cluster (or none) and nodes.
pub struct Fleet {
    pub cluster: Option<EtcdCluster>,
    pub nodes: Vec<Node>,
    pub dir: tempfile::TempDir,
    pub outcomes: Vec<Outcome>,
    /// Logs of nodes removed from the fleet.
    pub retired: Vec<HammerLog>,
    /// Whether the fleet's [`SEQUENCES`] exist and every node (newcomers too) hammers them.
    pub sequences: bool,
    /// When the fault being injected began: the end of the previous one (or the start).
    since: Instant,
}

/// What a fleet's checks went through: every ID and every sequence value it was given.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checked {
    pub ids: usize,
    pub values: usize,
}

impl Fleet {
    /// `n` nodes in etcd mode on a cluster of `members`, hammering IDs and the fleet's
    /// [`SEQUENCES`].
    pub async fn etcd(members: usize, n: usize) -> Fleet {
        Fleet::etcd_with(members, n, &[]).await
    }

    /// `n` nodes in etcd mode on a cluster of `members`, hammering IDs and the fleet's
    /// [`SEQUENCES`], every node started with `extra` arguments.
    pub async fn etcd_with(members: usize, n: usize, extra: &[&str]) -> Fleet {
        let cluster = EtcdCluster::start(members).await;
        let dir = tempfile::tempdir().unwrap();
        let mode = Mode::Etcd { endpoints: cluster.endpoints(), prefix: "/fleet".into() };
        let nodes: Vec<Node> =
            (0..n).map(|i| Node::new(&format!("node{i}"), mode.clone(), extra, dir.path())).collect();
        Fleet::start(Some(cluster), nodes, dir, true).await
    }

    /// One node in standalone mode, with `extra` arguments, hammering IDs and the fleet's
    /// [`SEQUENCES`].
    pub async fn standalone(extra: &[&str]) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let mode = Mode::Standalone { state_dir: dir.path().join("state"), worker_id: 1 };
        let node = Node::new("solo", mode, extra, dir.path());
        Fleet::start(None, vec![node], dir, true).await
    }

    /// A fleet of `nodes` (not started): with `sequences`, creates the fleet's [`SEQUENCES`]
    /// in the nodes' store and has every node hammer them; starts the nodes and waits until
    /// each mints.
    pub async fn start(
        cluster: Option<EtcdCluster>,
        nodes: Vec<Node>,
        dir: tempfile::TempDir,
        sequences: bool,
    ) -> Fleet {
        let mut fleet =
            Fleet { cluster, nodes, dir, outcomes: Vec::new(), retired: Vec::new(), sequences, since: Instant::now() };
        if sequences {
            fleet.create_sequences();
        }
        for node in &mut fleet.nodes {
            node.sequences = sequences;
            node.start();
        }
        fleet.wait_all_minting(Duration::from_secs(30)).await;
        fleet.since = Instant::now();
        fleet
    }

    /// `snowmint sequence create` of each of [`SEQUENCES`] where the nodes keep them.
    fn create_sequences(&self) {
        let store = self.store_flags();
        for (name, start) in SEQUENCES {
            let start = start.to_string();
            let mut args = vec!["sequence", "create", name, "--start", &start];
            args.extend(store.iter().map(String::as_str));
            let (code, stdout, stderr) = super::run_binary(&args);
            assert_eq!(code, 0, "snowmint sequence create {name} failed:\n{stdout}{stderr}");
        }
    }

    /// The flags that name where the nodes keep their state: etcd, or the state dir.
    fn store_flags(&self) -> Vec<String> {
        match self.nodes.first().map(|n| &n.mode) {
            Some(Mode::Etcd { endpoints, prefix }) => {
                vec!["--etcd-endpoints".into(), endpoints.clone(), "--etcd-prefix".into(), prefix.clone()]
            }
            Some(Mode::Standalone { state_dir, .. }) => vec!["--state-dir".into(), state_dir.display().to_string()],
            None => Vec::new(),
        }
    }

    /// A new node of this fleet (not started): its mode, its dir, its sequences, and `extra`.
    pub fn newcomer(&self, name: &str, extra: &[&str]) -> Node {
        let mut node = Node::new(name, self.nodes[0].mode.clone(), extra, self.dir.path());
        node.sequences = self.sequences;
        node
    }

    pub async fn wait_all_minting(&self, limit: Duration) {
        let now = Instant::now();
        for node in self.nodes.iter().filter(|n| n.process.is_some()) {
            node.recovered_after(now, limit).await;
        }
    }

    /// Every ID and every sequence value every node was given so far, checked.
    pub fn check(&self) -> Checked {
        Checked { ids: self.check_ids(), values: self.check_values() }
    }

    /// Every ID every node was given so far, checked: no duplicate anywhere, and each
    /// process lifetime's IDs strictly increasing. Returns how many were checked.
    pub fn check_ids(&self) -> usize {
        let mut all = Vec::new();
        let lifetimes = self
            .nodes
            .iter()
            .flat_map(|n| {
                n.done.iter().flat_map(|l| [l.ids.clone(), l.bulk.clone()]).chain([n.live_ids(), n.live_bulk_ids()])
            })
            .chain(self.retired.iter().flat_map(|l| [l.ids.clone(), l.bulk.clone()]));
        for ids in lifetimes {
            assert_increasing(&ids);
            all.extend(ids);
        }
        let total = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), total, "{} duplicate IDs among {total}", total - all.len());
        total
    }

    /// The longest run of refused sequence calls, among the calls that ended after `t`, of
    /// any process lifetime (of nodes in the fleet, and of nodes gone from it).
    pub fn longest_value_refusal_since(&self, t: Instant) -> Duration {
        let stretch = |log: &HammerLog| {
            let mut calls: Vec<&ValueCall> = log.values.iter().filter(|c| c.end > t).collect();
            calls.sort_by_key(|c| c.end);
            let calls: Vec<(Instant, Duration, tonic::Code)> =
                calls.iter().map(|c| (c.end, c.end - c.start, c.code)).collect();
            longest_refusal(&calls)
        };
        let live = self.nodes.iter().filter_map(|n| n.with_live_log(stretch));
        let done = self.nodes.iter().flat_map(|n| &n.done).chain(&self.retired).map(stretch);
        live.chain(done).max().unwrap_or_default()
    }

    /// Every sequence value every node was given so far, checked: no value of a sequence
    /// twice anywhere, each process lifetime's values increasing in the order it answered
    /// them, every refusal retriable and within its deadline. Returns how many were checked.
    pub fn check_values(&self) -> usize {
        let mut all = sequences::AllValues::default();
        let mut check = |who: &str, calls: &[ValueCall]| {
            sequences::assert_refusals_retriable_and_prompt(who, calls);
            sequences::assert_answer_order(who, calls);
            all.add(calls);
        };
        for node in &self.nodes {
            for log in &node.done {
                check(&node.name, &log.values);
            }
            node.with_live_log(|log| check(&node.name, &log.values));
        }
        for log in &self.retired {
            check("a node gone from the fleet", &log.values);
        }
        all.assert_no_value_twice()
    }

    pub async fn stop(mut self) -> (Checked, Vec<Outcome>) {
        for node in &mut self.nodes {
            node.terminate().await;
        }
        let checked = self.check();
        eprintln!("fleet: {} IDs and {} sequence values checked, none twice", checked.ids, checked.values);
        self.audit();
        (checked, self.outcomes)
    }

    /// `snowmint audit` of the fleet's slot history passes: every hand-over the faults
    /// caused is on record, and no two holders' windows overlap.
    pub fn audit(&self) {
        if self.nodes.is_empty() {
            return;
        }
        let mut args = vec!["audit".to_string()];
        args.extend(self.store_flags());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = super::run_binary(&args);
        assert_eq!(code, 0, "snowmint audit failed:\n{stdout}{stderr}");
        assert!(stdout.contains("holders"), "{stdout}");
        eprintln!("audit: {}", stdout.trim());
    }
}

/// The worker ID in an ID of the default layout.
pub fn worker_of(id: u64) -> u64 {
    Layout::default_snowmint().unpack(id).worker
}

/// The Unix ms at which the tick of an ID of the default layout starts.
fn tick_ms(id: u64) -> i64 {
    let layout = Layout::default_snowmint();
    layout.tick_start_ms(layout.unpack(id).tick)
}

/// This host's wall clock (not a node's faked one), in Unix ms.
fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

// ---- The faults. Each injects one fault into the fleet, checks what it must, and
// ---- records an outcome. Bounds are generous: CI runs on a loaded 2-core machine.

/// The wall clock steps back by 40 ms: minted through (hybrid) or waited out (strict, under
/// its 50 ms threshold here), never refused.
pub async fn clock_small_step_back(fleet: &mut Fleet, i: usize) -> Outcome {
    let node = &fleet.nodes[i];
    let counted = |m: &str| {
        metric_value(m, r#"snowmint_clock_backward_total{action="waited"}"#)
            + metric_value(m, r#"snowmint_clock_backward_total{action="borrowed"}"#)
    };
    let before = counted(&node.metrics().await);
    let start = Instant::now();
    node.set_clock(-0.040);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    node.set_clock(0.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = node.calls_after(start);
    assert_refusals_are_unavailable_and_prompt(&node.name, &calls);
    assert!(calls.iter().all(|c| c.2 == tonic::Code::Ok), "{}: a 40 ms step back was refused", node.name);
    assert!(counted(&node.metrics().await) > before, "step not counted");
    record(
        fleet,
        Outcome {
            fault: "clock back 40 ms",
            refusal: longest_refusal(&calls),
            recovery: Duration::ZERO,
            ..Outcome::default()
        },
    )
    .await
}

/// The hybrid policy: the wall clock steps back by `secs`, within the 10 s drift bound. No
/// call is refused; the drift gauge shows the minting time ahead of the clock, and goes back
/// to 0 once real time has caught up.
pub async fn clock_step_back_within_bound(fleet: &mut Fleet, i: usize, secs: f64) -> Outcome {
    let node = &fleet.nodes[i];
    let start = Instant::now();
    node.set_clock(-secs);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let drift = node.metric("snowmint_clock_drift_seconds").await;
    assert!(
        drift > secs - 1.5 && drift <= secs + 0.1,
        "{}: drift gauge {drift} s, {secs} s step back half a second ago",
        node.name
    );
    tokio::time::sleep(Duration::from_secs_f64(secs + 0.5)).await;
    let drift_after = node.metric("snowmint_clock_drift_seconds").await;
    assert_eq!(drift_after, 0.0, "{}: still {drift_after} s ahead after real time caught up", node.name);
    node.set_clock(0.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = node.calls_after(start);
    assert_refusals_are_unavailable_and_prompt(&node.name, &calls);
    assert!(calls.iter().all(|c| c.2 == tonic::Code::Ok), "{}: refused during a {secs} s step back", node.name);
    record(
        fleet,
        Outcome {
            fault: "clock back within bound",
            refusal: longest_refusal(&calls),
            recovery: Duration::ZERO,
            ..Outcome::default()
        },
    )
    .await
}

/// Every node's clock steps back by `secs` at once (a bad time source for the whole fleet),
/// within the drift bound: no refusal anywhere.
pub async fn clock_fleet_step_back(fleet: &mut Fleet, secs: f64) -> Outcome {
    let start = Instant::now();
    let running: Vec<usize> = (0..fleet.nodes.len()).filter(|&i| fleet.nodes[i].process.is_some()).collect();
    for &i in &running {
        fleet.nodes[i].set_clock(-secs);
    }
    tokio::time::sleep(Duration::from_secs_f64(secs + 0.5)).await;
    for &i in &running {
        fleet.nodes[i].set_clock(0.0);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut refusal = Duration::ZERO;
    for &i in &running {
        let node = &fleet.nodes[i];
        let calls = node.calls_after(start);
        assert_refusals_are_unavailable_and_prompt(&node.name, &calls);
        assert!(calls.iter().all(|c| c.2 == tonic::Code::Ok), "{}: refused in a fleet-wide {secs} s step", node.name);
        refusal = refusal.max(longest_refusal(&calls));
    }
    record(
        fleet,
        Outcome { fault: "every clock back at once", refusal, recovery: Duration::ZERO, ..Outcome::default() },
    )
    .await
}

/// The wall clock steps back by `secs`. Hybrid policy, `secs` beyond the 10 s bound: refused
/// at once, counted, minting again once the clock is back within the bound (`secs` - 10 s
/// later). Strict policy (`bound` 0): refused until the clock passes the last ms used.
pub async fn clock_large_step_back(fleet: &mut Fleet, i: usize, secs: f64, bound: f64) -> Outcome {
    let node = &fleet.nodes[i];
    let refused = node.metric(r#"snowmint_clock_backward_total{action="refused"}"#).await;
    let start = Instant::now();
    node.set_clock(-secs);
    let expected = secs - bound;
    let recovery =
        node.recovered_after(start + Duration::from_millis(100), Duration::from_secs_f64(expected + 5.0)).await;
    if recovery < Duration::from_secs_f64(expected * 0.8) {
        let jumps = node.metric("snowmint_clock_forward_jumps_total").await;
        panic!(
            "{}: minted {recovery:?} into a {secs} s step back, bound {bound} s ({jumps} forward jumps seen)",
            node.name
        );
    }
    node.set_clock(0.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = node.calls_after(start);
    assert_refusals_are_unavailable_and_prompt(&node.name, &calls);
    assert!(node.metric(r#"snowmint_clock_backward_total{action="refused"}"#).await > refused, "refusal not counted");
    let refusal = longest_refusal(&calls);
    let fault = if bound > 0.0 { "clock back beyond bound" } else { "clock back seconds (strict)" };
    record(
        fleet,
        Outcome {
            fault,
            refusal,
            recovery: recovery.saturating_sub(Duration::from_secs_f64(expected)),
            ..Outcome::default()
        },
    )
    .await
}

/// The wall clock jumps forward by `secs` and is corrected back 2 s later, inside the
/// confirmation window: counted as seen, never followed (no ID more than the 500 ms jump
/// threshold ahead of real time), and no call refused before, during or after.
pub async fn clock_forward_jump(fleet: &mut Fleet, i: usize, secs: f64) -> Outcome {
    let node = &fleet.nodes[i];
    let jumps = node.metric("snowmint_clock_forward_jumps_total").await;
    let adopted = node.metric("snowmint_clock_forward_jumps_adopted_total").await;
    let start = Instant::now();
    let ids_before = node.live_ids().len();
    node.set_clock(secs);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(node.metric("snowmint_clock_forward_jumps_total").await > jumps, "jump not counted");
    node.set_clock(0.0);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let ahead = node.live_ids()[ids_before..].iter().map(|&id| tick_ms(id) - wall_ms()).max().unwrap_or(i64::MIN);
    assert!(ahead <= 600, "{}: minted {ahead} ms ahead of real time after a {secs} s jump", node.name);
    assert_eq!(node.metric("snowmint_clock_forward_jumps_adopted_total").await, adopted, "a corrected jump adopted");
    let calls = node.calls_after(start);
    assert_refusals_are_unavailable_and_prompt(&node.name, &calls);
    assert!(calls.iter().all(|c| c.2 == tonic::Code::Ok), "{}: refused around a corrected jump", node.name);
    record(
        fleet,
        Outcome {
            fault: "clock jump forward, corrected",
            refusal: longest_refusal(&calls),
            recovery: Duration::ZERO,
            ..Outcome::default()
        },
    )
    .await
}

/// kill -9 and restart, with the clock `behind` seconds behind at the restart. Standalone
/// (hybrid): the restart mints at once above the saved reservation, every new ID above every
/// ID the killed run issued. etcd: the killed lease still holds its slot, so another is taken.
pub async fn kill_and_restart(fleet: &mut Fleet, i: usize, behind: f64) -> Outcome {
    let node = &mut fleet.nodes[i];
    let before = node.live_ids().last().copied();
    node.kill9().await;
    node.set_clock(-behind);
    let restarted = Instant::now();
    node.start();
    let limit = Duration::from_secs_f64(behind + 10.0);
    let recovery = node.recovered_after(restarted, limit).await;
    if let (Mode::Standalone { .. }, Some(before)) = (&node.mode, before) {
        let first = node.live_ids()[0];
        assert!(first > before, "{}: restarted at {first}, below {before} from before the kill", node.name);
    }
    node.set_clock(0.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = node.calls_after(restarted);
    assert_refusals_are_unavailable_and_prompt(&node.name, &calls);
    let fault = if behind > 0.0 { "kill -9, restart clock behind" } else { "kill -9, restart" };
    record(fleet, Outcome { fault, refusal: longest_refusal(&calls), recovery, ..Outcome::default() }).await
}

/// The wall clock jumps `secs` ahead; before the jump is confirmed the process is killed
/// (kill -9) and restarted with the clock still ahead; the clock is then corrected. The restart, seeded with what the killed process kept in its state dir, does
/// not adopt the jump: its minting time moves with real time (within 600 ms) from where it
/// resumed, far below the jump, and nothing is refused once the clock is corrected. Without
/// that memory, the restart took the jumped clock as the truth and minted `secs` ahead.
pub async fn restart_during_forward_jump(fleet: &mut Fleet, i: usize, secs: f64) -> Outcome {
    let node = &mut fleet.nodes[i];
    let before = node.live_ids().last().copied();
    // The filter's reference is kept about every second: let the node keep it first.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    node.set_clock(secs);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    node.kill9().await;
    let restarted = Instant::now();
    node.start();
    let recovery = node.recovered_after(restarted, Duration::from_secs(15)).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    // The restart resumes above the killed process's reservation, which may reach a window
    // (and what earlier restarts borrowed) ahead of real time: by design, and no jump. The
    // jump adopted would put the IDs `secs` ahead, and move them faster than real time.
    let now_ms = wall_ms();
    let ids = node.live_ids();
    let ahead = ids.iter().map(|&id| tick_ms(id) - now_ms).max().unwrap_or(i64::MIN);
    let spread = ids.iter().map(|&id| tick_ms(id)).max().zip(ids.iter().map(|&id| tick_ms(id)).min());
    let spread_ms = spread.map_or(0, |(max, min)| max - min);
    let since_restart_ms = restarted.elapsed().as_millis() as i64;
    assert!(
        ahead < (secs * 1000.0 / 3.0) as i64 && spread_ms <= since_restart_ms + 600,
        "{}: after a restart during a {secs} s forward jump, minted {ahead} ms ahead of real time, \
         {spread_ms} ms of minting time in {since_restart_ms} ms ({} IDs)",
        node.name,
        ids.len(),
    );
    if let (Mode::Standalone { .. }, Some(before)) = (&node.mode, before) {
        let first = node.live_ids()[0];
        assert!(first > before, "{}: restarted at {first}, below {before} from before the kill", node.name);
    }
    let corrected = Instant::now();
    node.set_clock(0.0);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let calls = node.calls_after(restarted);
    assert_refusals_are_unavailable_and_prompt(&node.name, &calls);
    let after = node.calls_after(corrected);
    assert!(after.iter().all(|c| c.2 == tonic::Code::Ok), "{}: refused once the clock was corrected", node.name);
    record(
        fleet,
        Outcome {
            fault: "kill -9 during a forward jump, restart",
            refusal: longest_refusal(&calls),
            recovery,
            ..Outcome::default()
        },
    )
    .await
}

/// A new instance whose clock is a minute ahead of the fleet's: the start stops with a clear
/// line naming the difference, and it takes no slot.
pub async fn clock_far_from_the_fleet(fleet: &mut Fleet) -> Outcome {
    let node = fleet.newcomer("skewed", &[]);
    node.set_clock(60.0);
    let start = Instant::now();
    let (code, stderr) = node.run_to_exit(&[]);
    assert_ne!(code, 0, "an instance a minute ahead of the fleet started: {stderr}");
    assert!(stderr.contains("ahead of the median of") && stderr.contains("--max-fleet-skew-ms"), "{stderr}");
    record(
        fleet,
        Outcome {
            fault: "start with a clock far from the fleet's",
            refusal: Duration::ZERO,
            recovery: start.elapsed(),
            ..Outcome::default()
        },
    )
    .await
}

/// SIGSTOP past the lease TTL; another instance takes the slot meanwhile; SIGCONT. The
/// resumed process mints nothing on its old slot, re-claims another and goes on.
pub async fn pause_and_takeover(fleet: &mut Fleet, i: usize) -> Outcome {
    let old_worker = worker_of(*fleet.nodes[i].live_ids().last().expect("node minted"));
    let prefix = match &fleet.nodes[i].mode {
        Mode::Etcd { prefix, .. } => prefix.clone(),
        Mode::Standalone { .. } => panic!("takeover needs etcd mode"),
    };
    let mut etcd = fleet.cluster.as_ref().unwrap().client().await;
    fleet.nodes[i].signal("STOP");
    let paused = Instant::now();
    let paused_ms = wall_ms();
    // Wait for the lease to expire and the slot to be free, then let a newcomer take it.
    let key = format!("{prefix}/workers/{old_worker}");
    while super::etcd::get(&mut etcd, &key).await.is_some() {
        assert!(paused.elapsed() < Duration::from_secs(15), "the paused node's lease never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut newcomer = fleet.newcomer(&format!("takeover{}", fleet.nodes.len()), &[]);
    newcomer.start_with(&["--preferred-worker-id", &old_worker.to_string()]);
    newcomer.recovered_after(Instant::now(), Duration::from_secs(15)).await;
    let newcomer_first = newcomer.live_ids()[0];
    assert_eq!(worker_of(newcomer_first), old_worker, "the newcomer took the freed slot");

    let node = &mut fleet.nodes[i];
    let before_resume = node.live_ids().len();
    node.signal("CONT");
    let resumed = Instant::now();
    let resumed_ms = wall_ms();
    let recovery = node.recovered_after(resumed, Duration::from_secs(15)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after: Vec<u64> = node.live_ids()[before_resume..].to_vec();
    // A response minted before the SIGSTOP (while the lease held) may reach the client only
    // after the SIGCONT: its IDs carry a tick no later than the pause. Anything later on the
    // lost slot was minted after the lease ran out.
    let on_lost_slot: Vec<i64> = after
        .iter()
        .filter(|&&id| worker_of(id) == old_worker)
        .map(|&id| tick_ms(id))
        .filter(|&tick| tick > paused_ms)
        .collect();
    assert!(
        on_lost_slot.is_empty(),
        "{}: minted on its lost slot {old_worker} after SIGCONT, at {on_lost_slot:?} (Unix ms; paused at {paused_ms}, \
         resumed at {resumed_ms}; the newcomer's first ID at {})",
        node.name,
        tick_ms(newcomer_first)
    );
    assert!(
        node.live_ids().iter().filter(|&&id| worker_of(id) == old_worker).all(|&id| id < newcomer_first),
        "the paused node's IDs on slot {old_worker} are not all below the newcomer's"
    );
    // The loss is found by a renewal (the lease is gone) or by a reservation write (the
    // slot's key is someone else's), whichever runs first after SIGCONT; either counts it.
    assert!(node.metric("snowmint_lease_lost_total").await >= 1.0, "the lost lease was not counted");
    let calls = node.calls_after(resumed + Duration::from_millis(600));
    assert_refusals_are_unavailable_and_prompt(&node.name, &calls);
    let refusal = longest_refusal(&node.calls_after(resumed));
    // The newcomer takes the paused node's place in the fleet.
    let mut old = fleet.nodes.swap_remove(i);
    old.terminate().await;
    fleet.retired.append(&mut old.done);
    fleet.nodes.push(newcomer);
    record(fleet, Outcome { fault: "SIGSTOP past TTL + take-over", refusal, recovery, ..Outcome::default() }).await
}

/// etcd (one member) restored from a snapshot taken `ago` before the holder of node 0's slot
/// is killed, while the fleet minted past the snapshot; then a newcomer whose clock is
/// `behind` seconds behind (inside the fleet's skew bound) takes that slot once the restored
/// lease on it expires (issue 23). The restored etcd holds the slot's reservation as it was at
/// the snapshot: a newcomer that took it as its floor would mint, on its clock behind, IDs the
/// killed holder issued after the snapshot. The nodes that lived through the restore find it
/// (a revision below one they saw, their own reservations gone) and fence the fleet: the
/// newcomer's floor is the fence, and it mints only past it. Every ID is checked at the end.
///
/// With sequences, the operator's step of the procedure follows the restore: `snowmint fence
/// --sequence-skip` moves them past anything issued since the snapshot (the nodes that met the
/// restored records refuse until then, and go on above it after).
pub async fn etcd_restored(fleet: &mut Fleet, ago: Duration, behind: f64) -> Outcome {
    let snapshot = fleet.dir.path().join("etcd.snapshot");
    fleet.cluster.as_ref().expect("etcd mode").snapshot(&snapshot).await;
    // Minting goes on past the snapshot: reservations written after it, IDs issued under them.
    tokio::time::sleep(ago).await;
    let slot = worker_of(*fleet.nodes[0].live_ids().last().expect("node0 minted"));
    let killed_last = *fleet.nodes[0].live_ids().last().unwrap();
    fleet.nodes[0].kill9().await;
    let restored = Instant::now();
    fleet.cluster.as_mut().unwrap().restore(&snapshot).await;
    // The slot's restored lease is alive again for a TTL; then the slot is free.
    let prefix = match &fleet.nodes[0].mode {
        Mode::Etcd { prefix, .. } => prefix.clone(),
        Mode::Standalone { .. } => panic!("a restore needs etcd mode"),
    };
    if fleet.sequences {
        let endpoints = fleet.cluster.as_ref().unwrap().endpoints();
        let flags = ["--etcd-endpoints", &endpoints, "--etcd-prefix", &prefix];
        // Far more than the fleet takes in a test; the slots' fence as the fleet's would be.
        let fence = ["fence", "--sequence-skip", "10000000", "--for-ms", "1000"];
        let (code, stdout, stderr) = super::run_binary(&[&fence[..], &flags[..]].concat());
        assert_eq!(code, 0, "snowmint fence: {stdout}{stderr}");
    }
    let mut etcd = fleet.cluster.as_ref().unwrap().client().await;
    let key = format!("{prefix}/workers/{slot}");
    while super::etcd::get(&mut etcd, &key).await.is_some() {
        assert!(restored.elapsed() < Duration::from_secs(30), "the restored lease on slot {slot} never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let extra: Vec<&str> = fleet.nodes[0].extra.iter().map(String::as_str).collect();
    let mut newcomer = fleet.newcomer("successor", &extra);
    newcomer.set_clock(-behind);
    newcomer.start_with(&["--preferred-worker-id", &slot.to_string()]);
    let started = Instant::now();
    let recovery = newcomer.recovered_after(started, Duration::from_secs(90)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let first = newcomer.live_ids()[0];
    assert_eq!(worker_of(first), slot, "the newcomer took the killed holder's slot");
    assert!(first > killed_last, "the newcomer minted {first} on slot {slot}, below the killed holder's {killed_last}");
    // The fleet found the restore and fenced it.
    let mut went_back = 0.0;
    for node in fleet.nodes.iter().filter(|n| n.process.is_some()) {
        went_back += node.metric("snowmint_store_went_back_total").await;
    }
    assert!(went_back >= 1.0, "no node found that etcd went back in time");
    assert!(super::etcd::get(&mut etcd, &format!("{prefix}/fence")).await.is_some(), "no fence set");
    assert!(newcomer.metric("snowmint_slots_fenced_total").await >= 1.0, "the newcomer's floor was not fenced");
    newcomer.set_clock(0.0);
    let mut old = fleet.nodes.swap_remove(0);
    fleet.retired.append(&mut old.done);
    fleet.nodes.push(newcomer);
    record(
        fleet,
        Outcome { fault: "etcd restored from a snapshot", refusal: Duration::ZERO, recovery, ..Outcome::default() },
    )
    .await
}

/// kill -9 of the etcd leader: minting goes on; the member is restarted afterwards.
pub async fn kill_etcd_leader(fleet: &mut Fleet) -> Outcome {
    let cluster = fleet.cluster.as_mut().unwrap();
    let leader = cluster.leader().await;
    let killed = Instant::now();
    cluster.kill(leader);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut worst = Duration::ZERO;
    let mut recovery = Duration::ZERO;
    for node in &fleet.nodes {
        let calls = node.calls_after(killed);
        assert_refusals_are_unavailable_and_prompt(&node.name, &calls);
        worst = worst.max(longest_refusal(&calls));
        recovery = recovery.max(node.recovered_after(killed + Duration::from_secs(2), Duration::from_secs(8)).await);
        assert_eq!(node.metric("snowmint_lease_valid").await, 1.0, "{} lost its lease", node.name);
    }
    assert!(worst < Duration::from_secs(3), "minting stopped for {worst:?} when the leader died");
    let cluster = fleet.cluster.as_mut().unwrap();
    cluster.restart(leader);
    cluster.wait_healthy(Duration::from_secs(20)).await;
    record(fleet, Outcome { fault: "etcd leader killed", refusal: worst, recovery, ..Outcome::default() }).await
}

/// Every etcd member paused past the TTL: every node is fenced within the TTL, and mints
/// again after SIGCONT.
pub async fn pause_etcd(fleet: &mut Fleet) -> Outcome {
    let mut failed = Vec::new();
    for node in &fleet.nodes {
        failed.push(node.metric(r#"snowmint_lease_renewals_total{result="failed"}"#).await);
    }
    let paused = Instant::now();
    fleet.cluster.as_ref().unwrap().pause_all();
    tokio::time::sleep(Duration::from_secs(5)).await;
    for node in &fleet.nodes {
        // No call that started more than the TTL (3 s) into the pause got an ID.
        let fenced = paused + Duration::from_secs(3);
        let calls = node.calls_after(fenced);
        assert!(
            calls.iter().all(|(end, took, code)| *code != tonic::Code::Ok || *end - *took < fenced),
            "{} minted more than the 3 s TTL into the etcd pause",
            node.name
        );
        assert_eq!(node.metric("snowmint_minting").await, 0.0, "{} still reports minting", node.name);
    }
    fleet.cluster.as_ref().unwrap().resume_all();
    let resumed = Instant::now();
    let mut recovery = Duration::ZERO;
    let mut refusal = Duration::ZERO;
    for (node, failed) in fleet.nodes.iter().zip(failed) {
        recovery = recovery.max(node.recovered_after(resumed, Duration::from_secs(15)).await);
        let calls = node.calls_after(paused);
        assert_refusals_are_unavailable_and_prompt(&node.name, &calls);
        refusal = refusal.max(longest_refusal(&calls));
        let now_failed = node.metric(r#"snowmint_lease_renewals_total{result="failed"}"#).await;
        assert!(now_failed > failed, "{}: failed renewals not counted", node.name);
    }
    record(fleet, Outcome { fault: "all etcd members paused", refusal, recovery, ..Outcome::default() }).await
}

/// `n` more instances cold-start at once: distinct workers, all minting.
pub async fn cold_start(fleet: &mut Fleet, n: usize) -> Outcome {
    let base = fleet.nodes.len();
    let mut nodes: Vec<Node> = (0..n).map(|k| fleet.newcomer(&format!("cold{}", base + k), &[])).collect();
    let started = Instant::now();
    let handles: Vec<_> = nodes
        .drain(..)
        .map(|mut node| {
            std::thread::spawn(move || {
                // The processes start in parallel; hammers attach on the fleet's runtime.
                node.process = Some(node.server(&[]).spawn());
                node
            })
        })
        .collect();
    let mut recovery = Duration::ZERO;
    for handle in handles {
        let mut node = handle.join().unwrap();
        node.attach_hammer();
        recovery = recovery.max(node.recovered_after(started, Duration::from_secs(20)).await);
        fleet.nodes.push(node);
    }
    let mut workers: Vec<u64> =
        fleet.nodes.iter().filter_map(|n| n.live_ids().last().map(|&id| worker_of(id))).collect();
    let count = workers.len();
    workers.sort_unstable();
    workers.dedup();
    assert_eq!(workers.len(), count, "two live nodes share a worker");
    // Back to the fleet's size: the newcomers leave with SIGTERM.
    for _ in 0..n {
        let mut node = fleet.nodes.pop().unwrap();
        node.terminate().await;
        fleet.retired.append(&mut node.done);
    }
    record(fleet, Outcome { fault: "cold start of many", refusal: Duration::ZERO, recovery, ..Outcome::default() })
        .await
}

/// Standalone: the state file deleted, truncated or corrupted between runs. The start
/// refuses with a clear line; after the operator's explicit reset, minting resumes.
pub async fn break_state_file(fleet: &mut Fleet, how: &'static str) -> Outcome {
    let node = &mut fleet.nodes[0];
    let Mode::Standalone { state_dir, worker_id } = node.mode.clone() else { panic!("standalone only") };
    let path = state_dir.join(format!("worker-{worker_id}.json"));
    node.kill9().await;
    let (fault, expected) = match how {
        "deleted" => {
            std::fs::remove_file(&path).unwrap();
            ("state file deleted", "is missing")
        }
        "truncated" => {
            std::fs::write(&path, "").unwrap();
            ("state file truncated", "is corrupt")
        }
        _ => {
            let mut bytes = std::fs::read(&path).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x5a;
            bytes.truncate(bytes.len() - 3);
            std::fs::write(&path, bytes).unwrap();
            ("state file corrupted", "is corrupt")
        }
    };
    let (code, stderr) = node.run_to_exit(&[]);
    assert_ne!(code, 0, "started on a {how} state file");
    assert!(stderr.lines().last().unwrap_or_default().contains(expected), "{stderr}");
    // The operator resets it deliberately: remove it, and accept the missing state once,
    // after waiting out --max-clock-drift-ms (10 s): the killed run may have minted that far
    // ahead of its clock. (Without the wait the audit at the end flags the hand-over.)
    let _ = std::fs::remove_file(&path);
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    let restarted = Instant::now();
    node.start_with(&["--accept-missing-state"]);
    let recovery = node.recovered_after(restarted, Duration::from_secs(10)).await;
    record(fleet, Outcome { fault, refusal: Duration::ZERO, recovery, ..Outcome::default() }).await
}

/// Ends a fault: every node's sequences answer again (within [`VALUE_RECOVERY_LIMIT`]),
/// and what the fault did to them joins its outcome; every ID and value so far is checked.
async fn record(fleet: &mut Fleet, mut outcome: Outcome) -> Outcome {
    if fleet.sequences {
        let ended = Instant::now();
        for node in fleet.nodes.iter().filter(|n| n.live.is_some()) {
            outcome.value_recovery =
                outcome.value_recovery.max(node.values_recovered_after(ended, VALUE_RECOVERY_LIMIT).await);
        }
        outcome.value_refusal = fleet.longest_value_refusal_since(fleet.since);
    }
    eprintln!(
        "fault {:<40} refusal {:>7.3} s  recovery {:>7.3} s  values: refusal {:>7.3} s  recovery {:>7.3} s",
        outcome.fault,
        outcome.refusal.as_secs_f64(),
        outcome.recovery.as_secs_f64(),
        outcome.value_refusal.as_secs_f64(),
        outcome.value_recovery.as_secs_f64(),
    );
    fleet.outcomes.push(outcome.clone());
    fleet.check();
    fleet.since = Instant::now();
    outcome
}

/// Two instances holding three slots each join the fleet: each holds three slots no other
/// instance mints on, a large batch spans its slots in ascending order within a tick, and
/// after a kill -9 the restarted one takes three slots again (others, while the dead lease
/// still holds its own). Every ID stays unique.
pub async fn several_slots_per_instance(fleet: &mut Fleet) -> Outcome {
    use snowmint::proto::BatchIdsRequest;
    let started = Instant::now();
    let base = fleet.nodes.len();
    for k in 0..2 {
        let mut node = fleet.newcomer(&format!("multi{}", base + k), &["--slots", "3"]);
        node.start();
        fleet.nodes.push(node);
    }
    let mut recovery = Duration::ZERO;
    for node in &fleet.nodes[base..] {
        recovery = recovery.max(node.recovered_after(started, Duration::from_secs(20)).await);
        assert_eq!(node.metric("snowmint_slots_held").await, 3.0, "{} holds the wrong number of slots", node.name);
    }
    // A batch larger than one slot's tick spans slots, in ascending order.
    for node in &fleet.nodes[base..] {
        let mut client = node.process.as_ref().expect("running").client().await;
        let ids =
            client.batch_ids(BatchIdsRequest { count: 12_000, ..Default::default() }).await.unwrap().into_inner().ids;
        assert_increasing(&ids);
        let mut workers: Vec<u64> = ids.iter().map(|&id| worker_of(id)).collect();
        workers.dedup();
        assert!(workers.len() >= 2, "{}: a batch of 12,000 came from one slot", node.name);
        fleet.retired.push(HammerLog { ids, ..HammerLog::default() });
    }
    // kill -9 one of them: it comes back with three slots again.
    let i = base;
    fleet.nodes[i].kill9().await;
    let restarted = Instant::now();
    fleet.nodes[i].start();
    recovery = recovery.max(fleet.nodes[i].recovered_after(restarted, Duration::from_secs(20)).await);
    assert_eq!(fleet.nodes[i].metric("snowmint_slots_held").await, 3.0);
    // Back to the fleet's size.
    for _ in 0..2 {
        let mut node = fleet.nodes.pop().unwrap();
        node.terminate().await;
        fleet.retired.append(&mut node.done);
    }
    record(
        fleet,
        Outcome { fault: "several slots per instance", refusal: Duration::ZERO, recovery, ..Outcome::default() },
    )
    .await
}
