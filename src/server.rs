//! The server: wires the worker source, the minter, the gRPC service (with health and
//! reflection, and the Connect protocol beside gRPC on the same port, over HTTP/1.1 and
//! HTTP/2) and the admin endpoint together, and takes them down in order.
//!
//! The caller hands in bound listeners, a clock and one shutdown token ([`run`]); tests use
//! exactly this seam with `127.0.0.1:0` listeners. On shutdown the gRPC server stops
//! accepting and finishes the calls in flight, the minter stops, and only then is the final
//! reservation saved, so it covers every ID handed out.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::clock::Clock;
use crate::clock_filter::{ClockFilter, FilteredClock, JumpEvent};
use crate::clock_memory::ClockMemory;
use crate::generator::Generator;
use crate::grant::Minted;
use crate::history::etcd::EtcdBook;
use crate::history::file::FileBook;
use crate::history::recorder::{self, RecorderConfig, RecorderHandle, Tap};
use crate::history::segment_recorder::{self, SegmentRecorderConfig, SegmentRecorderHandle, SegmentTap};
use crate::history::{Book, Holder};
use crate::keeper::{self, KeeperConfig, SlotPolicy};
use crate::layout::{Layout, LayoutError};
use crate::metrics::Metrics;
use crate::minter::{MinterConfig, Readiness};
use crate::node::{self, DriverConfig, KeeperHandle, MinterLinks, SequencesConfig, SequencesHandle, StartError};
use crate::opaque::Keyring;
use crate::proto::id_service_server::IdServiceServer;
pub use crate::rpc::Limits;
use crate::rpc::calls::Counted;
use crate::rpc::connect::Connect;
use crate::rpc::direct::Direct;
use crate::rpc::dispatch::Paths;
use crate::rpc::{SERVICE_NAME, Service};
use crate::sequence::SegmentConfig;
use crate::sequence::etcd::EtcdSequences;
use crate::sequence::file::FileSequences;
use crate::store::StoreError;
use crate::store::alarm::{Alarm, AlarmWatch};
use crate::store::etcd::{EtcdConfig, EtcdStore};
use crate::store::file::{FileStore, StandaloneConfig};

mod tenants;
pub use tenants::TenantFiles;

/// Where the slots come from: a static list and its state files, or leases from etcd.
#[derive(Debug, Clone)]
pub enum SlotSource {
    Standalone(StandaloneConfig),
    Etcd(EtcdConfig),
}

/// Certificates for gRPC over TLS.
#[derive(Debug, Clone)]
pub struct GrpcTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// With a client CA, clients must present a certificate it signed (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

impl GrpcTls {
    /// How the transport is described in logs.
    pub fn describe(tls: Option<&GrpcTls>) -> &'static str {
        match tls {
            None => "plain text (no --tls-cert given)",
            Some(GrpcTls { client_ca: None, .. }) => "TLS",
            Some(GrpcTls { client_ca: Some(_), .. }) => "mutual TLS",
        }
    }

    fn server_config(&self) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, ServeError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| ServeError::Tls(format!("cannot read {}: {e}", path.display())))
        };
        let client_ca = self.client_ca.as_ref().map(read).transpose()?;
        crate::rpc::tls::server_config(&read(&self.cert)?, &read(&self.key)?, client_ca.as_deref())
            .map_err(ServeError::Tls)
    }
}

/// Everything `run` needs, validated by the caller's parsing except what needs the clock.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub layout: Layout,
    pub slot_source: SlotSource,
    /// How far ahead of the minting time reservations reach.
    pub reservation_window: Duration,
    pub max_batch: u32,
    /// IDs asked for and not yet answered, server-wide, beyond which calls get
    /// `RESOURCE_EXHAUSTED`.
    pub max_outstanding_ids: usize,
    pub max_clock_back: Duration,
    /// How far the minting time may run ahead of a wall clock that is behind it (0: strict).
    pub max_clock_drift: Duration,
    pub max_wait: Duration,
    /// IDs a connection takes per turn in the minter while several wait.
    pub fair_quantum: usize,
    pub forward_jump_threshold: Duration,
    /// How long a forward jump must last before it is followed.
    pub forward_jump_confirm: Duration,
    /// etcd mode: beyond this far from the median of the other instances' clocks, the start
    /// stops or minting stops until the clock agrees again. Zero: no check.
    pub max_fleet_skew: Duration,
    /// How long calls in flight get to finish once shutdown starts.
    pub shutdown_grace: Duration,
    /// How long closed slot history records are kept; `None`: no history is kept.
    pub history_retention: Option<Duration>,
    /// The most segment records kept per named sequence.
    pub history_max_segments: usize,
    /// Where the clock filter's memory is kept across restarts ([`crate::clock_memory`]):
    /// the state dir, in either mode. `None`: nowhere (each start trusts its first reading).
    pub clock_memory_dir: Option<PathBuf>,
    /// gRPC over TLS; plain text when `None`.
    pub tls: Option<GrpcTls>,
    pub limits: Limits,
    /// The keys of opaque IDs (`--opaque-key-file`, read and checked by the caller); without
    /// them, calls that ask for opaque IDs get `FAILED_PRECONDITION`.
    pub opaque: Option<Arc<Keyring>>,
    /// Named sequences: their segments' sizes, and whether a call creates a missing one.
    pub sequences: SequencesSettings,
    /// The tenants' policy and token files; without them, any caller may make any call.
    pub tenants: Option<TenantFiles>,
}

/// The named sequences' settings of a server.
#[derive(Debug, Clone, Default)]
pub struct SequencesSettings {
    pub segments: SegmentConfig,
    pub create_on_use: bool,
    /// Where the fleet forwards the calls of the ordered sequences this instance serves;
    /// `None`: the gRPC listener's address (the host name's, when it listens on every
    /// interface).
    pub advertise_address: Option<String>,
}

/// Why the server could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("invalid layout: {0}")]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Claim(String),
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("admin endpoint: {0}")]
    Admin(std::io::Error),
    #[error("gRPC TLS: {0}")]
    Tls(String),
    #[error("tenants: {0}")]
    Tenants(String),
}

/// `clock` with forward jumps confirmed before they are followed, logged and counted, the
/// filter started from what an earlier process of this boot knew, if anything.
fn filtered(
    clock: Arc<dyn Clock>,
    config: &ServeConfig,
    metrics: &Metrics,
    memory: Option<&ClockMemory>,
) -> Arc<FilteredClock> {
    let (threshold, confirm) = (config.forward_jump_threshold, config.forward_jump_confirm);
    let filter = match memory.and_then(ClockMemory::load) {
        Some(high_offset_us) => {
            tracing::debug!(high_offset_us, "the clock filter starts from the last process's reference");
            ClockFilter::seeded(threshold, confirm, high_offset_us)
        }
        None => ClockFilter::new(threshold, confirm),
    };
    let (seen, adopted) = (metrics.clock_forward_jumps.clone(), metrics.clock_forward_jumps_adopted.clone());
    let confirm = config.forward_jump_confirm;
    let on_jump = move |event: JumpEvent| match event {
        JumpEvent::Seen { ahead_ms } => {
            seen.inc();
            tracing::warn!(
                ahead_ms,
                confirm_ms = confirm.as_millis() as u64,
                "the wall clock jumped forward; minting time goes on with the boot-time clock until the jump has lasted the confirmation window"
            );
        }
        JumpEvent::Adopted { ahead_ms } => {
            adopted.inc();
            tracing::warn!(ahead_ms, "the wall clock's jump forward lasted; following it");
        }
        JumpEvent::Corrected => tracing::info!("the wall clock came back before its jump forward was confirmed"),
    };
    Arc::new(FilteredClock::new(clock, filter, Arc::new(on_jump)))
}

/// How often the clock filter's reference is looked at, to keep it for a later process.
const CLOCK_MEMORY_EVERY: Duration = Duration::from_secs(1);

/// Keeps the clock filter's reference in `memory` at once, then whenever it moved, until
/// `shutdown`, and once more then. At once: a process killed within its first second would
/// otherwise leave nothing, and its restart with the clock behind would take that clock as
/// its reference and the correction as a jump. A failed write is
/// logged once and tried again later: the memory is a hint, never a condition for minting.
async fn keep_clock_memory(clock: Arc<FilteredClock>, memory: ClockMemory, shutdown: CancellationToken) {
    let mut saved: Option<i64> = None;
    let mut warned = false;
    let mut first = true;
    loop {
        let stopping = if std::mem::take(&mut first) {
            false
        } else {
            tokio::select! {
                () = shutdown.cancelled() => true,
                () = tokio::time::sleep(CLOCK_MEMORY_EVERY) => false,
            }
        };
        if let Some(high) = clock.high_offset_us()
            && saved.is_none_or(|s| (high - s).abs() >= crate::clock_memory::SAVE_AFTER_US)
        {
            match memory.save(high) {
                Ok(()) => saved = Some(high),
                Err(error) if !warned => {
                    warned = true;
                    tracing::warn!(
                        path = %memory.path().display(),
                        %error,
                        "cannot keep the clock filter's reference for the next start; a restart during a forward jump of the clock will follow it at once"
                    );
                }
                Err(_) => {}
            }
        }
        if stopping {
            return;
        }
    }
}

/// How long the final reservation and the release may take on shutdown.
const FINISH_LIMIT: Duration = Duration::from_secs(5);

/// The history of a running server: where it is read and written, and the recorders of the
/// slots and of the sequences' segments.
struct History {
    book: Arc<dyn Book>,
    recorder: RecorderHandle,
    segments: SegmentRecorderHandle,
}

/// Opens the history's book and starts its recorders (the taps of the keeper and of the
/// sequences), unless history is off. A book that cannot be set up leaves the server without
/// history (logged and counted), never without minting.
async fn start_history(
    config: &ServeConfig,
    clock: &Arc<dyn Clock>,
    metrics: &Metrics,
) -> Option<(Tap, SegmentTap, History)> {
    let retention = config.history_retention?;
    let (book, hostname, leased, held): (Arc<dyn Book>, String, bool, usize) = match &config.slot_source {
        SlotSource::Standalone(standalone) => (
            Arc::new(FileBook::new(&standalone.state_dir)),
            crate::store::etcd::hostname(),
            false,
            standalone.slots.len(),
        ),
        SlotSource::Etcd(etcd) => match EtcdBook::connect(etcd).await {
            Ok(book) => (Arc::new(book), etcd.hostname.clone(), true, etcd.slots),
            Err(error) => {
                metrics.history_writes.with_label_values(&[crate::metrics::RESULT_FAILED]).inc();
                tracing::warn!(%error, "slot history unavailable; minting goes on without it");
                return None;
            }
        },
    };
    let holder = Holder::this_process(hostname, clock.wall_ms());
    let segment_config = SegmentRecorderConfig { holder: holder.clone(), retention, keep: config.history_max_segments };
    let recorder_config = RecorderConfig { holder, retention, leased, slots: config.layout.max_worker() + 1, held };
    let (tap, recorder) = recorder::spawn(book.clone(), recorder_config, clock.clone(), metrics.clone());
    let (segment_tap, segments) = segment_recorder::spawn(book.clone(), segment_config, clock.clone(), metrics.clone());
    Some((tap, segment_tap, History { book, recorder, segments }))
}

/// Opens the store and starts the keeper: the slot is claimed and its first reservation
/// written before this returns.
async fn start_keeper(
    config: &ServeConfig,
    clock: &Arc<dyn Clock>,
    metrics: &Metrics,
    history: Option<Tap>,
    alarms: &AlarmWatch,
) -> Result<KeeperHandle, ServeError> {
    let seed = clock.wall_us() as u64 ^ (u64::from(std::process::id()) << 32);
    let window_ms = config.reservation_window.as_millis() as i64;
    let max_fleet_skew_ms = (!config.max_fleet_skew.is_zero()).then_some(config.max_fleet_skew.as_millis() as i64);
    let keeper_config = |policy, ttl| KeeperConfig {
        policy,
        ttl,
        window_ms,
        layout: config.layout.clone(),
        seed,
        max_fleet_skew_ms,
        fence_window_ms: keeper::fence_window_ms(ttl, config.max_clock_drift, window_ms, max_fleet_skew_ms),
        max_clock_drift_ms: config.max_clock_drift.as_millis().min(i64::MAX as u128) as i64,
    };
    let driver = |call_timeout, start_timeout| DriverConfig {
        call_timeout,
        start_timeout,
        clock: clock.clone(),
        metrics: metrics.clone(),
        observer: history.clone().map(|tap| Arc::new(tap) as Arc<dyn keeper::Observe>),
    };
    let started = match &config.slot_source {
        SlotSource::Standalone(standalone) => {
            let store = FileStore::open(standalone, &config.layout)?;
            let policy = SlotPolicy::Fixed(standalone.slots.clone());
            // A state file write is an fsync or two: seconds only on a disk in trouble.
            let driver = driver(Duration::from_secs(5), Duration::from_secs(30));
            node::start_keeper(store, keeper_config(policy, Duration::MAX), driver).await
        }
        SlotSource::Etcd(etcd) => {
            let store = EtcdStore::connect(etcd, &config.layout, clock.wall_ms()).await?.report_alarms(alarms.clone());
            let policy = SlotPolicy::Leased { count: etcd.slots, preferred: etcd.preferred() };
            let driver = driver(etcd.call_timeout(), etcd.start_timeout);
            node::start_keeper(store, keeper_config(policy, etcd.lease_ttl), driver).await
        }
    };
    started.map_err(|e| match (&config.slot_source, e) {
        (SlotSource::Etcd(etcd), StartError::Keeper(keeper::KeeperError::AllTaken { slots, held, wanted })) => {
            let need = if wanted > 1 {
                format!(
                    "; this instance needs {wanted} (--slots {wanted}) and found {held} free, and {} instances of {wanted} slots fit in all",
                    slots / wanted as u64
                )
            } else {
                String::new()
            };
            ServeError::Claim(format!(
                "every worker slot under {}/workers/ is taken ({slots} slots for {} worker bits){need}; stop an instance or widen --worker-bits on a new prefix",
                etcd.prefix, config.layout.worker_bits
            ))
        }
        (SlotSource::Etcd(_), StartError::Timeout { last, .. }) => match Alarm::in_error(&last) {
            Some(alarm) => ServeError::Claim(format!("etcd refuses to start a claim: {}; last error: {last}", alarm.explain())),
            None => ServeError::Claim(format!("cannot reach etcd: {last}")),
        },
        (_, e) => ServeError::Claim(e.to_string()),
    })
}

/// Runs the server until `shutdown` is cancelled, then stops gracefully.
///
/// Everything that can be checked is checked before anything is claimed or written: the
/// layout, the TLS files, then the store (its lock, its files, the layout it records). The
/// `listening` line is logged only once the slot is held and the server about to serve.
pub async fn run(
    config: ServeConfig,
    grpc: TcpListener,
    admin: TcpListener,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    config.layout.validate_for_minting(clock.wall_ms())?;
    Generator::new(config.layout.clone(), 0, 0)?;
    let tls = config.tls.as_ref().map(GrpcTls::server_config).transpose()?;
    let metrics = Metrics::new();
    let gate = match &config.tenants {
        Some(files) => {
            let (gate, reloader) = files.load(&metrics).map_err(ServeError::Tenants)?;
            let client_ca = config.tls.as_ref().is_some_and(|tls| tls.client_ca.is_some());
            if gate.rules().policy().names_certificates() && !client_ca {
                return Err(ServeError::Tenants(format!(
                    "{} names client certificates, but this server asks for none: give --tls-client-ca (and --tls-cert, --tls-key)",
                    files.policy.display()
                )));
            }
            tokio::spawn(reloader.run(shutdown.clone()));
            Some(gate)
        }
        None => None,
    };
    metrics.layout_expiry_timestamp_seconds.set(config.layout.expiry_ms() as f64 / 1000.0);
    // The minter and the keeper read one filtered wall clock: a forward jump is followed
    // only once it has lasted, so a jump corrected soon never drags the reservations ahead.
    // The filter's reference outlives the process: a restart in a jump does not adopt it.
    let memory = config
        .clock_memory_dir
        .as_deref()
        .zip(clock.host_boot_origin())
        .and_then(|(dir, origin)| ClockMemory::for_this_boot(dir, origin));
    let filtered_clock = filtered(clock, &config, &metrics, memory.as_ref());
    // A first reading, so that the filter has a reference to keep from the start.
    filtered_clock.wall_us();
    let memory_task =
        memory.map(|memory| tokio::spawn(keep_clock_memory(filtered_clock.clone(), memory, shutdown.clone())));
    let clock: Arc<dyn Clock> = filtered_clock;

    // A record is written only once a claim is granted: a start that fails writes none.
    let (tap, segment_tap, history) = match start_history(&config, &clock, &metrics).await {
        Some((tap, segment_tap, history)) => (Some(tap), Some(segment_tap), Some(history)),
        None => (None, None, None),
    };
    // What etcd's alarms say, from every etcd call of this instance: for the metric, the logs
    // and the minter's refusals.
    let alarms = AlarmWatch::new(&metrics);
    let keeper = start_keeper(&config, &clock, &metrics, tap, &alarms).await?;
    // Stopped only once the gRPC server is done with the calls in flight.
    let stop_minter = CancellationToken::new();
    let links = MinterLinks {
        holding: keeper.holding.clone(),
        extend_now: keeper.extend_now.clone(),
        progress: keeper.progress.clone(),
        store_trouble: alarms.trouble(),
    };
    let minter_config = MinterConfig {
        layout: config.layout.clone(),
        max_clock_back: config.max_clock_back,
        max_clock_drift: config.max_clock_drift,
        max_wait: config.max_wait,
        fair_quantum: config.fair_quantum,
    };
    let (mint, readiness, minter_task) = node::spawn_minter(
        minter_config,
        config.max_outstanding_ids,
        clock.clone(),
        metrics.clone(),
        links,
        stop_minter.clone(),
    )?;

    let (reporter, health) = tonic_health::server::health_reporter();
    let health_task = tokio::spawn(report_health(reporter, readiness.clone(), shutdown.clone()));
    let admin_addr = admin.local_addr().map_err(ServeError::Admin)?;
    let admin_task = tokio::spawn(crate::rpc::admin::serve(admin, metrics.clone(), readiness, shutdown.clone()));

    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    if let Some(keys) = &config.opaque {
        let current = keys.current().version();
        metrics.opaque_key_version.set(i64::from(current));
        tracing::info!(versions = ?keys.versions(), current, "opaque IDs on: made with the current key, revealed with any");
    }
    let grpc_addr = grpc.local_addr().map_err(ServeError::Admin)?;
    if config.tenants.is_none() && config.tls.is_none() && !grpc_addr.ip().is_loopback() {
        tracing::warn!(
            address = %grpc_addr,
            "listening beyond loopback without TLS and without a policy: anyone who reaches this port may mint without limit, read provenance and reveal opaque IDs (see --policy-file)"
        );
    }
    let fleet = node::Fleet {
        holding: keeper.holding.clone(),
        clock: clock.clone(),
        address: advertised(config.sequences.advertise_address.as_deref(), grpc_addr),
    };
    let sequences = start_sequences(&config, &metrics, fleet, segment_tap, stop_minter.clone()).await?;
    let service = Arc::new(Service::new(
        mint,
        config.layout.clone(),
        config.max_batch,
        metrics.clone(),
        config.opaque.clone(),
        history.as_ref().map(|h| h.book.clone()),
        crate::rpc::service::Sequences {
            handle: sequences.0,
            forwarder: crate::rpc::forward::Forwarder::new(forward_tls(config.tls.as_ref())?),
        },
    ));
    // HTTP/1.1 as well as HTTP/2, for the Connect protocol: each connection is served as the
    // HTTP/2 preface (or, with TLS, ALPN) says.
    crate::rpc::connections::raise_open_files(config.limits.max_connections);
    let incoming = crate::rpc::connections::limit(
        TcpIncoming::from(grpc).with_nodelay(Some(true)),
        config.limits.max_connections,
        config.limits.max_connections_per_peer,
        &metrics,
    );
    // Counted from outside, so that calls refused before a handler runs are counted too.
    let grpc_ids = Counted::new(
        IdServiceServer::from_arc(service.clone()).max_decoding_message_size(config.limits.max_request_bytes),
        &metrics,
    );
    let limits = &config.limits;
    let routes = Routes::new(health)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .add_service(grpc_ids)
        .prepare();
    let paths = Arc::new(Paths {
        direct: Direct::new(service.clone(), &metrics, limits.max_request_bytes),
        routes,
        connect: Arc::new(Connect::new(service, &metrics, limits.max_request_bytes)),
        request_timeout: limits.request_timeout,
        gate,
    });
    let stop_accepting = shutdown.clone().cancelled_owned();
    let serve: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> = match tls {
        None => Box::pin(crate::rpc::transport::serve(incoming, paths, limits, &metrics, stop_accepting)),
        Some(tls) => {
            let in_tls = metrics.connections_handshake_timeouts.with_label_values(&[crate::metrics::HANDSHAKE_TLS]);
            Box::pin(crate::rpc::transport::serve(
                crate::rpc::tls::incoming(incoming, tls, limits.handshake_timeout, in_tls),
                paths,
                limits,
                &metrics,
                stop_accepting,
            ))
        }
    };
    // etcd mode: the compaction of etcd's history and the alarm polls, beside the keeper and
    // never in its way; ended by the shutdown token.
    let upkeep = match &config.slot_source {
        SlotSource::Etcd(etcd) => {
            let seed = (clock.wall_us() as u64).rotate_left(17) ^ u64::from(std::process::id());
            crate::upkeep::spawn(etcd, seed, clock.clone(), metrics.clone(), alarms, shutdown.clone()).await
        }
        SlotSource::Standalone(_) => None,
    };
    tracing::info!(
        %grpc_addr,
        %admin_addr,
        transport = GrpcTls::describe(config.tls.as_ref()),
        layout = %config.layout,
        version = env!("CARGO_PKG_VERSION"),
        "snowmint listening"
    );
    // Calls in flight get `shutdown_grace` to finish; a client that never closes its
    // connection (paused, or gone without a word) does not hold the shutdown up longer.
    let grace = async {
        shutdown.cancelled().await;
        tokio::time::sleep(config.shutdown_grace).await;
    };
    tokio::select! {
        () = serve => {}
        () = grace => {
            tracing::warn!(grace = ?config.shutdown_grace, "connections still open after the shutdown grace; closing them");
        }
    }
    // Whatever ended the gRPC server, take the rest down in order: the minter first, then
    // the final reservation covering all it minted.
    shutdown.cancel();
    stop_minter.cancel();
    let minted = match minter_task.await {
        Ok(minted) => minted,
        Err(e) => {
            tracing::error!(error = %e, "minter task failed");
            Minted::Unknown
        }
    };
    keeper.finish(minted, FINISH_LIMIT).await;
    // The sequences' task gives back its unused values on the same stop (within its own limit).
    if tokio::time::timeout(FINISH_LIMIT, sequences.1).await.is_err() {
        tracing::warn!("the named sequences' task did not stop in time");
    }
    if let Some(upkeep) = upkeep {
        // Cancelled with the shutdown: it ends at once, whatever call it was in.
        let abort = upkeep.abort_handle();
        if tokio::time::timeout(FINISH_LIMIT, upkeep).await.is_err() {
            abort.abort();
        }
    }
    if let Some(history) = history {
        history.recorder.finish(FINISH_LIMIT).await;
        // The sequences' task has ended (above), and with it the segments' tap.
        history.segments.finish(FINISH_LIMIT).await;
    }
    let _ = health_task.await;
    if let Some(task) = memory_task {
        let _ = task.await;
    }
    let admin = admin_task.await.expect("admin task panicked");
    admin.map_err(ServeError::Admin)?;
    tracing::info!("stopped");
    Ok(())
}

/// Starts the named sequences' task over the store beside the slots: etcd's prefix, or the
/// state dir. It stops with `stop` (after the calls in flight), giving back what it can. The
/// segments it holds go on record through `history`, if given.
async fn start_sequences(
    config: &ServeConfig,
    metrics: &Metrics,
    fleet: node::Fleet,
    history: Option<SegmentTap>,
    stop: CancellationToken,
) -> Result<(SequencesHandle, tokio::task::JoinHandle<()>), ServeError> {
    // What this instance's segment claims are named by: a number drawn at each start, so that
    // no two instances (nor two runs of one) share it. In a fleet, ordered sequences are held
    // under the keeper's lease; alone on a state dir, this instance holds every one.
    let settings = SequencesConfig {
        segments: config.sequences.segments,
        create_on_use: config.sequences.create_on_use,
        session: rand::random::<i64>(),
        fleet: matches!(config.slot_source, SlotSource::Etcd(_)).then(|| {
            tracing::info!(address = %fleet.address, "ordered sequences this instance serves are forwarded to it at this address");
            fleet
        }),
        history,
    };
    tracing::info!(session = settings.session, pid = std::process::id(), "named sequences: claims under session");
    Ok(match &config.slot_source {
        SlotSource::Standalone(standalone) => {
            node::spawn_sequences(FileSequences::new(&standalone.state_dir), settings, metrics.clone(), stop)
        }
        SlotSource::Etcd(etcd) => {
            let store = EtcdSequences::connect(etcd).await.map_err(|e| ServeError::Claim(e.to_string()))?;
            node::spawn_sequences(store, settings, metrics.clone(), stop)
        }
    })
}

/// How forwarded calls reach the instance serving an ordered sequence under TLS: showing this
/// instance's certificate (for mutual TLS), and checking the other's against the client CA
/// when there is one, else against the chain of this instance's own certificate file (a fleet
/// that shares one certificate, or whose file carries its CA).
fn forward_tls(tls: Option<&GrpcTls>) -> Result<Option<tonic::transport::ClientTlsConfig>, ServeError> {
    let Some(tls) = tls else { return Ok(None) };
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| ServeError::Claim(format!("cannot read {}: {e}", path.display())))
    };
    let (cert, key) = (read(&tls.cert)?, read(&tls.key)?);
    let ca = match &tls.client_ca {
        Some(ca) => read(ca)?,
        None => cert.clone(),
    };
    Ok(Some(
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca))
            .identity(tonic::transport::Identity::from_pem(cert, key)),
    ))
}

/// The address the fleet reaches this instance at: the one given, or the listener's (with the
/// host name for an unspecified IP).
fn advertised(given: Option<&str>, listening: std::net::SocketAddr) -> String {
    match given {
        Some(address) => address.to_string(),
        None if listening.ip().is_unspecified() => {
            format!("{}:{}", crate::store::etcd::hostname(), listening.port())
        }
        None => listening.to_string(),
    }
}

/// Mirrors readiness into the gRPC health service (overall and for the ID service).
async fn report_health(
    reporter: HealthReporter,
    mut readiness: watch::Receiver<Readiness>,
    shutdown: CancellationToken,
) {
    loop {
        let status = match &*readiness.borrow_and_update() {
            Readiness::Serving => ServingStatus::Serving,
            Readiness::NotServing(_) => ServingStatus::NotServing,
        };
        reporter.set_service_status("", status).await;
        reporter.set_service_status(SERVICE_NAME, status).await;
        tokio::select! {
            changed = readiness.changed() => if changed.is_err() { break },
            _ = shutdown.cancelled() => break,
        }
    }
    reporter.set_service_status("", ServingStatus::NotServing).await;
    reporter.set_service_status(SERVICE_NAME, ServingStatus::NotServing).await;
}
