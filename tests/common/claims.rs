//! Fleets that start together against a real etcd: how long until every instance mints, and
//! what each claim costs etcd.
//!
//! Two kinds of instance, both against the same real 3-member etcd:
//!
//! - **processes**: the real binary, one process per instance ([`start_processes`]). Used
//!   where the machine allows (16 and 128 instances).
//! - **keepers**: the real slot keeper over the real etcd store, many in this one process
//!   ([`start_keepers`]). A thousand snowmint processes would need several GB of memory on a
//!   machine shared with others; the claim is the keeper's and the store's alone (the
//!   server's `start_keeper` runs exactly `EtcdStore::connect` then `node::start_keeper`, and logs
//!   its listening line only once that returns), so running them many times in one process
//!   claims exactly as many processes would: each keeper has its own etcd connections (one
//!   per endpoint), its own lease, its own state machine and its own random seed. What one
//!   process leaves out is the process start and each process's own runtime threads, which
//!   the process figures show. Each keeper's store is wrapped to count its requests by kind,
//!   beside etcd's own count.
//!
//! etcd's own count ([`EtcdLoad`]) is read from every member's `/metrics`: gRPC requests by
//! method (keep-alives as messages on their stream) and the raft proposals committed (the
//! writes). Its database ([`EtcdDb`]) from every member's status: the revision, the file's
//! size and the part of it in use.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use snowmint::clock::{Clock, SystemClock};
use snowmint::grant::Progress;
use snowmint::keeper::{self, KeeperConfig, SlotPolicy};
use snowmint::layout::Layout;
use snowmint::metrics::Metrics;
use snowmint::node::{self, KeeperHandle};
use snowmint::store::alarm::AlarmWatch;
use snowmint::store::etcd::{EtcdConfig, EtcdStore};
use snowmint::store::{Reply, Request, Store};
use tokio_util::sync::CancellationToken;

use super::etcd::EtcdCluster;
use super::{Process, ServerBuilder, next_id_eventually, try_http_get};

/// Raises this process's soft limit of open files to at least `wanted` (and the hard limit
/// with it, when allowed), so that many connections, and children started from here (etcd,
/// snowmint), can open them.
pub fn raise_open_files(wanted: u64) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur >= wanted {
            return;
        }
        let raised = libc::rlimit { rlim_cur: wanted, rlim_max: limit.rlim_max.max(wanted) };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            // Not allowed to raise the hard limit: go as far as it allows.
            let capped = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            libc::setrlimit(libc::RLIMIT_NOFILE, &capped);
        }
    }
}

/// etcd's own count of the requests it served, summed over the members.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EtcdLoad {
    /// Unary gRPC requests by method (`Txn`, `Range`, `LeaseGrant`, ...), every code.
    pub requests: BTreeMap<String, f64>,
    /// Lease keep-alive messages received (each renewal is one).
    pub keep_alives: f64,
    /// Raft proposals committed: the cluster's writes (the most any member saw).
    pub proposals: f64,
}

impl EtcdLoad {
    /// Reads every live member's `/metrics`.
    pub async fn read(cluster: &EtcdCluster) -> EtcdLoad {
        let mut load = EtcdLoad::default();
        for member in &cluster.members {
            let addr = member.client_url.trim_start_matches("http://").parse().expect("a plain-text loopback URL");
            let Ok((200, text)) = try_http_get(addr, "/metrics").await else { continue };
            let mut proposals = 0.0;
            for line in text.lines() {
                let Some((series, value)) = line.rsplit_once(' ') else { continue };
                let Ok(value) = value.parse::<f64>() else { continue };
                let label = |name: &str| {
                    let start = series.find(&format!("{name}=\""))? + name.len() + 2;
                    Some(&series[start..start + series[start..].find('"')?])
                };
                if series.starts_with("grpc_server_handled_total{") && label("grpc_type") == Some("unary") {
                    *load.requests.entry(label("grpc_method").unwrap_or("?").to_string()).or_default() += value;
                } else if series.starts_with("grpc_server_msg_received_total{")
                    && label("grpc_method") == Some("LeaseKeepAlive")
                {
                    load.keep_alives += value;
                } else if series == "etcd_server_proposals_committed_total" {
                    proposals = value;
                }
            }
            load.proposals = load.proposals.max(proposals);
        }
        load
    }

    /// What happened between `earlier` and this reading.
    pub fn since(&self, earlier: &EtcdLoad) -> EtcdLoad {
        let requests = self
            .requests
            .iter()
            .map(|(method, n)| (method.clone(), n - earlier.requests.get(method).copied().unwrap_or(0.0)))
            .filter(|(_, n)| *n > 0.0)
            .collect();
        EtcdLoad {
            requests,
            keep_alives: self.keep_alives - earlier.keep_alives,
            proposals: self.proposals - earlier.proposals,
        }
    }

    /// Every request: the unary ones and the keep-alive messages.
    pub fn total(&self) -> f64 {
        self.requests.values().sum::<f64>() + self.keep_alives
    }

    /// The unary requests and keep-alives as `Method n`, per `per` instances.
    pub fn breakdown(&self, per: f64) -> String {
        let mut parts: Vec<String> =
            self.requests.iter().map(|(method, n)| format!("{method} {:.2}", n / per)).collect();
        if self.keep_alives > 0.0 {
            parts.push(format!("LeaseKeepAlive {:.2}", self.keep_alives / per));
        }
        parts.join(", ")
    }
}

/// Requests a store was asked to carry out, by kind (the keeper's names: "claim slot", ...).
#[derive(Debug, Default)]
pub struct Counts(Mutex<BTreeMap<&'static str, u64>>);

impl Counts {
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.0.lock().unwrap().clone()
    }
}

/// A store that counts the requests it carries out.
pub struct Counted<S> {
    inner: S,
    counts: Arc<Counts>,
}

impl<S: Store> Store for Counted<S> {
    async fn call(&mut self, request: Request) -> Reply {
        let name = request.name();
        *self.counts.0.lock().unwrap().entry(name).or_default() += 1;
        let reply = self.inner.call(request).await;
        let outcome = match &reply {
            Reply::Failed { .. } => Some("failed"),
            Reply::SessionGone => Some("session gone"),
            Reply::Claimed { won: false, .. } => Some("claim lost"),
            _ => None,
        };
        if let Some(outcome) = outcome {
            let key: &'static str = Box::leak(format!("{name}: {outcome}").into_boxed_str());
            *self.counts.0.lock().unwrap().entry(key).or_default() += 1;
        }
        reply
    }
}

/// How a fleet's start went.
#[derive(Debug, Clone)]
pub struct Start {
    pub instances: usize,
    /// From the first start to each instance's first chance to mint, sorted.
    pub ready: Vec<Duration>,
    /// The worker IDs taken, one per instance.
    pub slots: Vec<u32>,
    /// What etcd served from the first start until the last instance could mint.
    pub etcd: EtcdLoad,
    /// The keepers' own count of their requests, by kind (keepers only).
    pub by_kind: BTreeMap<&'static str, u64>,
    /// The most claim transactions one keeper needed (keepers only).
    pub most_claims: u64,
}

impl Start {
    pub fn all_ready(&self) -> Duration {
        self.ready.last().copied().unwrap_or_default()
    }

    pub fn percentile(&self, p: f64) -> Duration {
        let i = ((self.ready.len() as f64 * p).ceil() as usize).clamp(1, self.ready.len().max(1)) - 1;
        self.ready.get(i).copied().unwrap_or_default()
    }

    /// Asserts every instance holds a slot of its own.
    pub fn assert_distinct(&self) {
        let mut slots = self.slots.clone();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(
            slots.len(),
            self.instances,
            "{} instances hold only {} distinct slots",
            self.instances,
            slots.len()
        );
    }

    /// Claim attempts per instance (keepers only): the claim transactions.
    pub fn claims_per_instance(&self) -> f64 {
        self.by_kind.get("claim slot").copied().unwrap_or(0) as f64 / self.instances as f64
    }

    /// Listings of the taken slots per instance (keepers only).
    pub fn listings_per_instance(&self) -> f64 {
        self.by_kind.get("list slots").copied().unwrap_or(0) as f64 / self.instances as f64
    }
}

/// Settings of the keepers' etcd mode, as `serve` makes them from its flags.
pub fn etcd_config(endpoints: &str, prefix: &str, ttl: Duration, preferred: Option<u32>, host: &str) -> EtcdConfig {
    EtcdConfig {
        endpoints: endpoints.split(',').map(str::to_string).collect(),
        prefix: prefix.to_string(),
        lease_ttl: ttl,
        preferred_worker_id: preferred,
        slots: 1,
        hostname: host.to_string(),
        tls: None,
        user: None,
        start_timeout: Duration::from_secs(60),
        compaction_interval: None,
    }
}

/// A started keeper, with what its start took and its worker ID.
pub struct Keeper {
    pub handle: KeeperHandle,
    pub ready: Duration,
    pub slot: u32,
}

/// Reports minting progress on its slots through each sender every 100 ms, as a minter that
/// never stops minting does (the minter task's `PROGRESS_EVERY_MS`), until the task is
/// aborted: the keepers extend their reservations as a busy fleet's do, and publish their
/// clocks with them (an instance that mints nothing marks its slots idle and stops writing).
pub fn keep_minting(feeds: Vec<Feed>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            for (progress, slots, clock) in &feeds {
                let now_ms = clock.wall_ms();
                let slots = slots.iter().map(|&slot| (slot, now_ms)).collect();
                progress.send_replace(Progress { mint_ms: Some(now_ms), slots });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// A keeper's progress sender, the slots it holds and the clock its minter would read.
pub type Feed = (tokio::sync::watch::Sender<Progress>, Vec<u32>, Arc<dyn Clock>);

/// The [`Feed`] of `handle`, minting on `clock`'s time, for [`keep_minting`].
pub fn feed(handle: &KeeperHandle, clock: Arc<dyn Clock>) -> Feed {
    let slots = handle.holding.borrow().grant().map(|g| g.slots.iter().map(|s| s.slot).collect()).unwrap_or_default();
    (handle.progress.clone(), slots, clock)
}

/// Starts `n` keepers at once on `prefix` with `layout`, each as `serve` starts its own (the
/// layout check, then the keeper with one leased slot and no preference unless `preferred`
/// gives one), and waits until every one holds its slot. Panics naming the first that could
/// not.
pub async fn start_keepers(
    cluster: &EtcdCluster,
    prefix: &str,
    layout: &Layout,
    n: usize,
    ttl: Duration,
    preferred: impl Fn(usize) -> Option<u32>,
) -> (Vec<Keeper>, Start) {
    let counts = Arc::new(Counts::default());
    let before = EtcdLoad::read(cluster).await;
    let started = Instant::now();
    let seeds = AtomicU64::new(started.elapsed().as_nanos() as u64 ^ 0x9e37_79b9_7f4a_7c15);
    let mut per_keeper = Vec::new();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let config = etcd_config(&cluster.endpoints(), prefix, ttl, preferred(i), &format!("keeper-{i}"));
            let layout = layout.clone();
            let counts = Arc::new(Counts::default());
            per_keeper.push(counts.clone());
            let seed = seeds.fetch_add(0x2545_f491_4f6c_dd1d, Ordering::Relaxed) ^ i as u64;
            tokio::spawn(
                async move { start_keeper(config, layout, counts, seed).await.map(|h| (h, started.elapsed())) },
            )
        })
        .collect();
    let mut keepers = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let (handle, ready) = match tokio::time::timeout(Duration::from_secs(120), task).await {
            Ok(Ok(Ok(started))) => started,
            Ok(Ok(Err(e))) => panic!("keeper {i} did not start: {e}; its requests {:?}", per_keeper[i].snapshot()),
            Ok(Err(e)) => panic!("keeper {i} failed: {e}"),
            Err(_) => panic!("keeper {i} did not start within 120 s"),
        };
        let slot = handle.holding.borrow().grant().expect("a started keeper holds its slot").slots[0].slot;
        keepers.push(Keeper { handle, ready, slot });
    }
    let etcd = EtcdLoad::read(cluster).await.since(&before);
    let mut ready: Vec<Duration> = keepers.iter().map(|k| k.ready).collect();
    ready.sort_unstable();
    let slots = keepers.iter().map(|k| k.slot).collect();
    for keeper in &per_keeper {
        for (kind, n) in keeper.snapshot() {
            *counts.0.lock().unwrap().entry(kind).or_default() += n;
        }
    }
    let most_claims = per_keeper.iter().map(|c| c.snapshot().get("claim slot").copied().unwrap_or(0)).max();
    let start =
        Start { instances: n, ready, slots, etcd, by_kind: counts.snapshot(), most_claims: most_claims.unwrap_or(0) };
    (keepers, start)
}

/// One keeper, started as the server starts its own.
pub async fn start_keeper(
    config: EtcdConfig,
    layout: Layout,
    counts: Arc<Counts>,
    seed: u64,
) -> Result<KeeperHandle, String> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let store = EtcdStore::connect(&config, &layout, clock.wall_ms()).await.map_err(|e| e.to_string())?;
    let keeper_config = KeeperConfig {
        policy: SlotPolicy::Leased { count: 1, preferred: config.preferred_worker_id.into_iter().collect() },
        ttl: config.lease_ttl,
        window_ms: 3_000,
        layout,
        seed,
        // As `serve` does by default: the start samples other holders' clocks first.
        max_fleet_skew_ms: Some(30_000),
        fence_window_ms: keeper::fence_window_ms(config.lease_ttl, Duration::from_secs(10), 3_000, Some(30_000)),
        max_clock_drift_ms: 10_000,
    };
    let driver = node::DriverConfig {
        call_timeout: config.call_timeout(),
        start_timeout: config.start_timeout,
        clock,
        metrics: Metrics::new(),
        observer: None,
    };
    node::start_keeper(Counted { inner: store, counts }, keeper_config, driver).await.map_err(|e| e.to_string())
}

/// Ends every keeper: each gives its slot back.
pub async fn stop_keepers(keepers: Vec<Keeper>) {
    let stops: Vec<_> = keepers
        .into_iter()
        .map(|k| tokio::spawn(k.handle.finish(snowmint::grant::Minted::Unknown, Duration::from_secs(10))))
        .collect();
    for stop in stops {
        super::join_within(stop, Duration::from_secs(30), "a keeper's stop").await;
    }
}

/// Starts `n` snowmint processes at once in etcd mode on `prefix` (with `extra` flags), and
/// waits until each has minted an ID: the time from the first start to each one's first ID.
pub async fn start_processes(cluster: &EtcdCluster, prefix: &str, n: usize, extra: &[&str]) -> (Vec<Process>, Start) {
    let before = EtcdLoad::read(cluster).await;
    let started = Instant::now();
    let endpoints = cluster.endpoints();
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (endpoints, prefix) = (endpoints.clone(), prefix.to_string());
            let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            std::thread::spawn(move || ServerBuilder::new().etcd(&endpoints, &prefix).args(extra).spawn())
        })
        .collect();
    let processes: Vec<Process> = threads.into_iter().map(|t| t.join().expect("a process started")).collect();
    let firsts: Vec<_> = processes
        .iter()
        .map(|p| {
            let addr = p.grpc;
            tokio::spawn(async move {
                let mut client = super::client(addr).await;
                let id = next_id_eventually(&mut client, Duration::from_secs(60)).await;
                (started.elapsed(), id)
            })
        })
        .collect();
    let layout = Layout::default_snowmint();
    let mut ready = Vec::new();
    let mut slots = Vec::new();
    for first in firsts {
        let (at, id) = super::join_within(first, Duration::from_secs(90), "a first ID").await;
        ready.push(at);
        slots.push(layout.unpack(id).worker as u32);
    }
    let etcd = EtcdLoad::read(cluster).await.since(&before);
    ready.sort_unstable();
    (processes, Start { instances: n, ready, slots, etcd, by_kind: BTreeMap::new(), most_claims: 0 })
}

/// What etcd serves per second for a fleet at rest, over `window`.
pub async fn steady_load(cluster: &EtcdCluster, window: Duration) -> EtcdLoad {
    let before = EtcdLoad::read(cluster).await;
    let start = Instant::now();
    tokio::time::sleep(window).await;
    let after = EtcdLoad::read(cluster).await;
    let secs = start.elapsed().as_secs_f64();
    let delta = after.since(&before);
    EtcdLoad {
        requests: delta.requests.into_iter().map(|(m, n)| (m, n / secs)).collect(),
        keep_alives: delta.keep_alives / secs,
        proposals: delta.proposals / secs,
    }
}

/// etcd's database as its members report it in their status: the largest figure of any
/// member (a member behind the others reports less).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EtcdDb {
    /// etcd's revision: every write adds one.
    pub revision: i64,
    /// The database file's size: what `--quota-backend-bytes` is checked against.
    pub size: i64,
    /// The part of it in use; the rest is free pages, reused after a compaction.
    pub in_use: i64,
}

impl EtcdDb {
    pub async fn read(cluster: &EtcdCluster) -> EtcdDb {
        let mut db = EtcdDb::default();
        for member in &cluster.members {
            let Some(mut client) = member_client(&member.client_url).await else { continue };
            let Ok(status) = client.status().await else { continue };
            db.revision = db.revision.max(status.header().map_or(0, |h| h.revision()));
            db.size = db.size.max(status.db_size());
            db.in_use = db.in_use.max(status.raft_used_db_size());
        }
        db
    }
}

/// A client of one member, if it answers.
async fn member_client(url: &str) -> Option<etcd_client::Client> {
    let options = etcd_client::ConnectOptions::new()
        .with_timeout(Duration::from_secs(5))
        .with_connect_timeout(Duration::from_secs(2));
    etcd_client::Client::connect([url], Some(options)).await.ok()
}

/// Defragments every member, one after the other: the database files shrink to what is in use.
pub async fn defragment(cluster: &EtcdCluster) {
    for member in &cluster.members {
        if let Some(mut client) = member_client(&member.client_url).await {
            client.defragment().await.expect("defragment a member");
        }
    }
}

/// The upkeep (compaction every `interval`, and the alarm polls) of `k` instances on
/// `prefix`, as each `serve` runs its own beside its keeper, each on its own connections;
/// ended by cancelling the token.
pub async fn start_upkeeps(
    cluster: &EtcdCluster,
    prefix: &str,
    k: usize,
    interval: Duration,
) -> (Vec<tokio::task::JoinHandle<()>>, CancellationToken) {
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for i in 0..k {
        let mut config = etcd_config(&cluster.endpoints(), prefix, Duration::from_secs(10), None, "upkeep");
        config.compaction_interval = Some(interval);
        let metrics = Metrics::new();
        let alarms = AlarmWatch::new(&metrics);
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let seed = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ clock.wall_us() as u64;
        let task = snowmint::upkeep::spawn(&config, seed, clock, metrics, alarms, stop.clone()).await;
        tasks.push(task.expect("the upkeep's connections are set up"));
    }
    (tasks, stop)
}
