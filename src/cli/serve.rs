//! `snowmint serve`: the server's flags, checked into a [`ServeConfig`], and its start: logging,
//! the listeners, and the shutdown on SIGTERM or SIGINT.
//!
//! Every flag can also be set through `SNOWMINT_<FLAG>` in the environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use snowmint::clock::{Clock, SystemClock};
use snowmint::layout::{Layout, Slot};
use snowmint::sequence::SegmentConfig;
use snowmint::server::{GrpcTls, Limits, SequencesSettings, ServeConfig, SlotSource};
use snowmint::store::etcd::{EtcdConfig, hostname, ordinal_of};
use snowmint::store::file::StandaloneConfig;
use snowmint::upkeep::task::{MAX_COMPACTION_INTERVAL, MIN_COMPACTION_INTERVAL};
use tokio_util::sync::CancellationToken;

use super::flags::{EtcdArgs, LayoutArgs, parse_ms, parse_nonzero_ms, parse_retention};
use super::opaque::read_key_file;

/// The longest `--handshake-timeout-ms` accepted: gRPC-Go's server allows a new connection
/// two minutes for its handshake by default; more only keeps silent connections longer.
const MAX_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Worker IDs as given on the command line, ascending and distinct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerIds(pub Vec<Slot>);

/// Parses `5`, `0,2,4`, `0-7` or a mix such as `0-3,8`.
fn parse_worker_ids(text: &str) -> Result<WorkerIds, String> {
    let mut ids = Vec::new();
    for part in text.split(',').map(str::trim) {
        let number = |t: &str| t.trim().parse::<Slot>().map_err(|e| format!("{t:?} is not a worker ID ({e})"));
        match part.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (number(from)?, number(to)?);
                if from > to {
                    return Err(format!("the range {part} runs backward"));
                }
                if to - from >= 1024 {
                    return Err(format!("the range {part} holds more than 1024 worker IDs"));
                }
                ids.extend(from..=to);
            }
            None => ids.push(number(part)?),
        }
    }
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    if ids.len() != before {
        return Err(format!("{text} names a worker ID twice"));
    }
    Ok(WorkerIds(ids))
}

/// `--etcd-compaction-interval`: how often the fleet compacts etcd's history, or `None`
/// (`off`, `0`): the operator compacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionInterval(pub Option<Duration>);

/// Parses `off` or `0` (no compaction), or a duration such as `5m`, `90s` or `1h` (a bare
/// number is seconds) from 1 s to 1 h.
fn parse_compaction_interval(text: &str) -> Result<CompactionInterval, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(CompactionInterval(None));
    }
    let interval = parse_retention(text)?;
    if interval.is_zero() {
        return Ok(CompactionInterval(None));
    }
    let (min, max) = (MIN_COMPACTION_INTERVAL, MAX_COMPACTION_INTERVAL);
    if interval < min || interval > max {
        return Err(format!(
            "must be between {}s and {}s (1h), or off; got {}s",
            min.as_secs(),
            max.as_secs(),
            interval.as_secs()
        ));
    }
    Ok(CompactionInterval(Some(interval)))
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Listen address of gRPC and of the Connect protocol (HTTP/1.1 and HTTP/2).
    #[arg(long, env = "SNOWMINT_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Admin HTTP listen address (/metrics, /healthz, /readyz).
    #[arg(long, env = "SNOWMINT_ADMIN_LISTEN", default_value = "127.0.0.1:9464")]
    pub admin_listen: SocketAddr,
    /// The static worker IDs (standalone mode): one (`5`), a list (`0,2,4`) or a range
    /// (`0-7`); each has its own state file. With several, each tick is filled across them.
    #[arg(long, env = "SNOWMINT_WORKER_ID", default_value = "0", value_parser = parse_worker_ids)]
    pub worker_id: WorkerIds,
    /// Slots (worker IDs) this instance holds at once (etcd mode); each adds 2^sequence_bits
    /// IDs per tick. In standalone mode, give the IDs with --worker-id instead.
    #[arg(long, env = "SNOWMINT_SLOTS", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub slots: Option<u32>,
    /// Where standalone mode keeps its reservation state; in either mode, where the clock
    /// filter's reference is kept for the next start on this host (`clock.json`).
    #[arg(long, env = "SNOWMINT_STATE_DIR", default_value = "snowmint-state")]
    pub state_dir: PathBuf,
    /// Start even though this worker's state file is missing from a state dir it used
    /// before (for after a deliberate reset, with the host clock known to be right).
    #[arg(long, env = "SNOWMINT_ACCEPT_MISSING_STATE")]
    pub accept_missing_state: bool,
    #[command(flatten)]
    pub layout: LayoutArgs,
    /// The largest BatchIds count accepted.
    #[arg(long, env = "SNOWMINT_MAX_BATCH", default_value_t = 65_536,
          value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub max_batch: u32,
    /// IDs asked for and not yet answered, server-wide, beyond which calls get
    /// RESOURCE_EXHAUSTED (every queued batch holds memory for its full count).
    #[arg(long, env = "SNOWMINT_MAX_OUTSTANDING_IDS", default_value_t = 4_194_304,
          value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub max_outstanding_ids: u64,
    /// How far ahead of the clock reservations reach, in ms.
    #[arg(long, env = "SNOWMINT_RESERVATION_WINDOW_MS", default_value = "3000", value_parser = parse_ms)]
    pub reservation_window_ms: Duration,
    /// With --max-clock-drift-ms 0 (the strict policy): wall-clock steps back up to this many
    /// ms are waited out; larger ones are refused.
    #[arg(long, env = "SNOWMINT_MAX_CLOCK_BACK_MS", default_value = "5", value_parser = parse_ms)]
    pub max_clock_back_ms: Duration,
    /// The longest a call waits for IDs, in ms, whatever its own deadline.
    #[arg(long, env = "SNOWMINT_MAX_WAIT_MS", default_value = "1000", value_parser = parse_ms)]
    pub max_wait_ms: Duration,
    /// IDs one connection takes per turn while several wait for IDs: each tick's sequence is
    /// shared in turn among connections (deficit round robin), so a bulk caller cannot hold
    /// the others' calls behind its batches.
    #[arg(long, env = "SNOWMINT_FAIR_QUANTUM", default_value_t = snowmint::minter::FAIR_QUANTUM as u64,
          value_parser = clap::value_parser!(u64).range(1..=1 << 22))]
    pub fair_quantum: u64,
    /// A call for a named sequence that does not exist creates it (from 1, unordered),
    /// instead of answering NOT_FOUND: a typo then makes a new sequence.
    #[arg(long, env = "SNOWMINT_CREATE_SEQUENCES_ON_USE")]
    pub create_sequences_on_use: bool,
    /// The fewest values one segment of a named sequence takes.
    #[arg(long, env = "SNOWMINT_SEQUENCE_MIN_SEGMENT", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=snowmint::sequence::MAX_VALUE))]
    pub sequence_min_segment: u64,
    /// The most values one segment of a named sequence takes: a crash leaves a gap of up to
    /// two segments.
    #[arg(long, env = "SNOWMINT_SEQUENCE_MAX_SEGMENT", default_value_t = 16_000_000,
          value_parser = clap::value_parser!(u64).range(1..=snowmint::sequence::MAX_VALUE))]
    pub sequence_max_segment: u64,
    /// How long a segment of a named sequence should last at the rate it is taken: about one
    /// store write per sequence per this, within the two sizes.
    #[arg(long, env = "SNOWMINT_SEQUENCE_SEGMENT_INTERVAL_MS", default_value = "3000", value_parser = parse_ms)]
    pub sequence_segment_interval_ms: Duration,
    /// Where the other instances of the fleet reach this one (host:port of --listen), to
    /// forward the calls of the ordered sequences it serves. Default: --listen's address, or
    /// the host name with its port when --listen is on every interface.
    #[arg(long, env = "SNOWMINT_ADVERTISE_ADDRESS")]
    pub advertise_address: Option<String>,
    /// While the wall clock is behind the minting time (a step back, a restart above a
    /// saved reservation), minting goes on ahead of it by at most this many ms, and refuses
    /// beyond; 0 keeps IDs' time never ahead of the clock (the strict policy).
    #[arg(long, env = "SNOWMINT_MAX_CLOCK_DRIFT_MS", default_value = "10000", value_parser = parse_ms)]
    pub max_clock_drift_ms: Duration,
    /// How long a forward jump of the wall clock (above --forward-jump-threshold-ms) must
    /// last before minting follows it, in ms; until then minting time goes on with the
    /// boot-time clock.
    #[arg(long, env = "SNOWMINT_FORWARD_JUMP_CONFIRM_MS", default_value = "10000", value_parser = parse_ms)]
    pub forward_jump_confirm_ms: Duration,
    /// Wall-clock jumps forward above this many ms (beyond the boot-time clock) are counted,
    /// and followed only once they have lasted --forward-jump-confirm-ms.
    #[arg(long, env = "SNOWMINT_FORWARD_JUMP_THRESHOLD_MS", default_value = "1000", value_parser = parse_ms)]
    pub forward_jump_threshold_ms: Duration,
    /// etcd mode: this clock is compared, at the start and every 15 s, with the median of
    /// other instances' clocks (published with their reservation writes); beyond this many
    /// ms the start stops, or a running instance stops minting (NOT_SERVING) until its clock
    /// agrees again. 0 turns the check off.
    #[arg(long, env = "SNOWMINT_MAX_FLEET_SKEW_MS", default_value = "30000", value_parser = parse_ms)]
    pub max_fleet_skew_ms: Duration,
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// How long closed slot history records, and named sequences' segment records, are kept
    /// (30d, 12h, 90m, 600s; a bare number is seconds); claims prune a bounded number of older
    /// ones. 0 keeps no history.
    #[arg(long, env = "SNOWMINT_HISTORY_RETENTION", default_value = "30d", value_parser = parse_retention)]
    pub history_retention: Duration,
    /// The most segment records kept per named sequence (1 to 10,000,000), the oldest pruned
    /// first past it however young: the segment history's room in etcd stays bounded (about
    /// 45 MB per sequence at the default) however many instances claim however often.
    #[arg(long, env = "SNOWMINT_HISTORY_MAX_SEGMENTS", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub history_max_segments: u64,
    /// Lease TTL in seconds: an instance that cannot renew stops minting within it.
    #[arg(long, env = "SNOWMINT_LEASE_TTL", default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub lease_ttl: u64,
    /// The slot to try first (default: the StatefulSet ordinal in the hostname, e.g. 3 in
    /// snowmint-3).
    #[arg(long, env = "SNOWMINT_PREFERRED_WORKER_ID")]
    pub preferred_worker_id: Option<Slot>,
    /// etcd mode: how often the fleet compacts etcd's history (5m, 90s, 1h; a bare number is
    /// seconds; 1 s to 1 h), keeping at least this much of it: each interval one instance,
    /// chosen through etcd, compacts. `off` (or 0) when etcd's operator compacts already
    /// (etcd's --auto-compaction-*).
    #[arg(long, env = "SNOWMINT_ETCD_COMPACTION_INTERVAL", default_value = "5m", value_parser = parse_compaction_interval)]
    pub etcd_compaction_interval: CompactionInterval,
    /// How long the start may spend reaching etcd before giving up, in ms.
    #[arg(long, env = "SNOWMINT_ETCD_START_TIMEOUT_MS", default_value = "30000", value_parser = parse_ms)]
    pub etcd_start_timeout_ms: Duration,
    /// Server certificate (PEM) for gRPC over TLS; without it gRPC is plain text.
    #[arg(long, env = "SNOWMINT_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Server key (PEM) for gRPC over TLS.
    #[arg(long, env = "SNOWMINT_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) that client certificates must be signed by: turns on mutual TLS.
    #[arg(long, env = "SNOWMINT_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// The keys of opaque IDs: a file of lines `<version> <64 hex digits>` (a key version 0 to
    /// 31 and an AES-256 key) and # comments, readable by its owner alone (chmod 600). The
    /// highest version makes opaque IDs; every version listed reveals them.
    #[arg(long, env = "SNOWMINT_OPAQUE_KEY_FILE")]
    pub opaque_key_file: Option<PathBuf>,
    /// The tenants' policy (TOML): who may call, what, and how much. With it, a caller of no
    /// tenant is refused; without it, any caller may make any call. Read again every second
    /// and at SIGHUP.
    #[arg(long, env = "SNOWMINT_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,
    /// The hashes of the tenants' bearer tokens (lines of `snowmint token new|hash`). Read
    /// again every second and at SIGHUP.
    #[arg(long, env = "SNOWMINT_TOKEN_FILE", requires = "policy_file")]
    pub token_file: Option<PathBuf>,
    /// HTTP/2 streams one connection may have open at once.
    #[arg(long, env = "SNOWMINT_MAX_CONCURRENT_STREAMS", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams: u32,
    /// The largest request message (a Connect call's body) accepted, in bytes.
    #[arg(long, env = "SNOWMINT_MAX_REQUEST_BYTES", default_value_t = 16 * 1024,
          value_parser = clap::value_parser!(u32).range(64..))]
    pub max_request_bytes: u32,
    /// The longest any call may take, gRPC or Connect, in ms.
    #[arg(long, env = "SNOWMINT_REQUEST_TIMEOUT_MS", default_value = "10000", value_parser = parse_ms)]
    pub request_timeout_ms: Duration,
    /// gRPC client connections open at once; past it a new connection is closed on arrival
    /// (the open files limit is raised to its hard limit at start to make room).
    #[arg(long, env = "SNOWMINT_MAX_CONNECTIONS", default_value_t = 16_384,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// gRPC connections one peer address may have open at once, at most --max-connections;
    /// past it a new connection from that address is closed on arrival. Default: a quarter of
    /// --max-connections (at least 1). Behind a proxy or NAT that shows many clients as one
    /// address, raise it (up to --max-connections).
    #[arg(long, env = "SNOWMINT_MAX_CONNECTIONS_PER_PEER", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_peer: Option<u32>,
    /// How long a new connection has to finish its TLS handshake (with TLS) and send the
    /// HTTP/2 preface or its first HTTP/1.1 request line, in ms (1 to 120000); past it, it is
    /// closed and counted.
    #[arg(long, env = "SNOWMINT_HANDSHAKE_TIMEOUT_MS", default_value = "10000", value_parser = parse_nonzero_ms)]
    pub handshake_timeout_ms: Duration,
    /// How often an HTTP/2 ping checks each connection's peer, in ms.
    #[arg(long, env = "SNOWMINT_KEEPALIVE_INTERVAL_MS", default_value = "60000", value_parser = parse_nonzero_ms)]
    pub keepalive_interval_ms: Duration,
    /// How long a ping's answer may take before its connection is closed, in ms.
    #[arg(long, env = "SNOWMINT_KEEPALIVE_TIMEOUT_MS", default_value = "20000", value_parser = parse_nonzero_ms)]
    pub keepalive_timeout_ms: Duration,
    /// The age, in ms, past which a connection (idle or busy) is asked to go away (GOAWAY);
    /// its calls in flight get --request-timeout-ms to finish.
    #[arg(long, env = "SNOWMINT_MAX_CONNECTION_AGE_MS", default_value = "1800000", value_parser = parse_nonzero_ms)]
    pub max_connection_age_ms: Duration,
    /// Threads serving gRPC; 0 for one per CPU core. The minter is one task whatever this
    /// is; more threads spread the HTTP/2 work of many connections, and 1 runs everything on
    /// one thread with tokio's single-threaded scheduler.
    #[arg(long, env = "SNOWMINT_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,
    /// On SIGTERM, how long calls in flight get to finish, in ms.
    #[arg(long, env = "SNOWMINT_SHUTDOWN_GRACE_MS", default_value = "5000", value_parser = parse_ms)]
    pub shutdown_grace_ms: Duration,
    /// Log format.
    #[arg(long, env = "SNOWMINT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl ServeArgs {
    /// The server configuration, or the one-line reason it is invalid.
    /// The server's settings; `reload` is what SIGHUP notifies, for the tenants' files.
    pub fn config(&self, now_ms: i64, reload: &Arc<tokio::sync::Notify>) -> Result<ServeConfig, String> {
        let layout = self.layout.layout(now_ms)?;
        if self.etcd.etcd_endpoints.is_empty() {
            if let Some(&too_big) = self.worker_id.0.iter().find(|&&id| u64::from(id) > layout.max_worker()) {
                return Err(format!(
                    "--worker-id {too_big} does not fit --worker-bits {} (maximum {})",
                    layout.worker_bits,
                    layout.max_worker()
                ));
            }
            if let Some(slots) = self.slots
                && slots as usize != self.worker_id.0.len()
            {
                return Err(format!(
                    "--slots {slots} is for etcd mode; in standalone mode the slots are the IDs --worker-id names ({})",
                    self.worker_id.0.len()
                ));
            }
        }
        let slots = match self.slots {
            Some(slots) => slots as usize,
            None if self.etcd.etcd_endpoints.is_empty() => self.worker_id.0.len(),
            None => 1,
        };
        if slots as u64 > layout.max_worker() + 1 {
            return Err(format!(
                "--slots {slots} is more than --worker-bits {} allows ({} slots)",
                layout.worker_bits,
                layout.max_worker() + 1
            ));
        }
        if self.reservation_window_ms < Duration::from_millis(300) {
            return Err("--reservation-window-ms must be at least 300".into());
        }
        if self.reservation_window_ms > Duration::from_secs(3600) {
            return Err("--reservation-window-ms must be at most 3600000 (an hour)".into());
        }
        if self.max_wait_ms.is_zero() {
            return Err("--max-wait-ms must be at least 1".into());
        }
        // A batch must be mintable within the longest wait at the layout's rate.
        let per_tick = (layout.max_sequence() + 1) * slots as u64;
        let ticks = u64::from(self.max_batch).div_ceil(per_tick);
        let needs_ms = ticks * layout.tick_ms;
        if needs_ms > self.max_wait_ms.as_millis() as u64 {
            return Err(format!(
                "--max-batch {} needs {needs_ms} ms to mint at {per_tick} IDs per {} ms tick (--sequence-bits {}{}), more than --max-wait-ms {}",
                self.max_batch,
                layout.tick_ms,
                layout.sequence_bits,
                if slots > 1 { format!(" on {slots} slots") } else { String::new() },
                self.max_wait_ms.as_millis()
            ));
        }
        if self.max_outstanding_ids < u64::from(self.max_batch) {
            return Err(format!(
                "--max-outstanding-ids {} is below --max-batch {}: the largest batch could never be asked for",
                self.max_outstanding_ids, self.max_batch
            ));
        }
        if self.sequence_min_segment > self.sequence_max_segment {
            return Err(format!(
                "--sequence-min-segment {} is more than --sequence-max-segment {}",
                self.sequence_min_segment, self.sequence_max_segment
            ));
        }
        if self.sequence_segment_interval_ms.is_zero() {
            return Err("--sequence-segment-interval-ms must be at least 1".into());
        }
        let max_connections_per_peer = self.max_connections_per_peer()?;
        if self.handshake_timeout_ms > MAX_HANDSHAKE_TIMEOUT {
            return Err(format!(
                "--handshake-timeout-ms must be at most {} (two minutes, gRPC-Go's own bound)",
                MAX_HANDSHAKE_TIMEOUT.as_millis()
            ));
        }
        let opaque = self.opaque_key_file.as_deref().map(read_key_file).transpose()?.map(Arc::new);
        let slot_source = if self.etcd.etcd_endpoints.is_empty() {
            SlotSource::Standalone(StandaloneConfig {
                state_dir: self.state_dir.clone(),
                slots: self.worker_id.0.clone(),
                accept_missing_state: self.accept_missing_state,
            })
        } else {
            SlotSource::Etcd(self.etcd_config(&layout, slots)?)
        };
        Ok(ServeConfig {
            slot_source,
            layout,
            reservation_window: self.reservation_window_ms,
            max_batch: self.max_batch,
            max_outstanding_ids: self.max_outstanding_ids as usize,
            max_clock_back: self.max_clock_back_ms,
            max_clock_drift: self.max_clock_drift_ms,
            forward_jump_confirm: self.forward_jump_confirm_ms,
            max_wait: self.max_wait_ms,
            fair_quantum: self.fair_quantum as usize,
            forward_jump_threshold: self.forward_jump_threshold_ms,
            max_fleet_skew: self.max_fleet_skew_ms,
            shutdown_grace: self.shutdown_grace_ms,
            history_retention: (!self.history_retention.is_zero()).then_some(self.history_retention),
            history_max_segments: self.history_max_segments as usize,
            clock_memory_dir: Some(self.state_dir.clone()),
            tls: self.tls_cert.clone().zip(self.tls_key.clone()).map(|(cert, key)| GrpcTls {
                cert,
                key,
                client_ca: self.tls_client_ca.clone(),
            }),
            limits: Limits {
                max_concurrent_streams: self.max_concurrent_streams,
                max_request_bytes: self.max_request_bytes as usize,
                request_timeout: self.request_timeout_ms,
                max_connections: self.max_connections as usize,
                max_connections_per_peer,
                handshake_timeout: self.handshake_timeout_ms,
                keepalive_interval: self.keepalive_interval_ms,
                keepalive_timeout: self.keepalive_timeout_ms,
                max_connection_age: self.max_connection_age_ms,
            },
            opaque,
            sequences: SequencesSettings {
                segments: SegmentConfig {
                    min_size: self.sequence_min_segment,
                    max_size: self.sequence_max_segment,
                    target_interval: self.sequence_segment_interval_ms,
                },
                create_on_use: self.create_sequences_on_use,
                advertise_address: self.advertise_address.clone(),
            },
            tenants: self.policy_file.clone().map(|policy| snowmint::server::TenantFiles {
                policy,
                tokens: self.token_file.clone(),
                reload: reload.clone(),
            }),
        })
    }

    /// `--max-connections-per-peer`, or its default: a quarter of `--max-connections`, so
    /// that one address leaves three quarters of the cap to the others.
    fn max_connections_per_peer(&self) -> Result<usize, String> {
        match self.max_connections_per_peer {
            None => Ok((self.max_connections as usize / 4).max(1)),
            Some(n) if n > self.max_connections => Err(format!(
                "--max-connections-per-peer {n} is more than --max-connections {}: give at most that",
                self.max_connections
            )),
            Some(n) => Ok(n as usize),
        }
    }

    fn etcd_config(&self, layout: &Layout, slots: usize) -> Result<EtcdConfig, String> {
        let hostname = hostname();
        let preferred = match self.preferred_worker_id {
            Some(id) if u64::from(id) > layout.max_worker() => {
                return Err(format!(
                    "--preferred-worker-id {id} does not fit --worker-bits {} (maximum {})",
                    layout.worker_bits,
                    layout.max_worker()
                ));
            }
            Some(id) => Some(id),
            // The pod with ordinal n prefers the n-th run of `slots` slots.
            None => ordinal_of(&hostname).and_then(|n| n.checked_mul(slots as u32)),
        };
        let mut config = self.etcd.config(hostname)?;
        config.lease_ttl = Duration::from_secs(self.lease_ttl);
        config.preferred_worker_id = preferred;
        config.slots = slots;
        config.start_timeout = self.etcd_start_timeout_ms;
        config.compaction_interval = self.etcd_compaction_interval.0;
        Ok(config)
    }
}

/// Sets up logging: text or JSON on stderr, filtered by `RUST_LOG` (default `info`).
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Runs the server until SIGTERM or SIGINT; `Err` is the one line to exit with.
pub async fn run(args: ServeArgs) -> Result<(), String> {
    init_logging(args.log_format);
    // Before anything listens: a signal that comes once the server says it listens must find
    // its handler listening (a task spawned to install it may run only later, and a signal
    // that lands while tokio installs the handler is lost).
    let signals = Signals::install()?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let reload = Arc::new(tokio::sync::Notify::new());
    let config = args.config(clock.wall_ms(), &reload)?;
    let has_policy = config.tenants.is_some();
    let grpc = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let admin = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .map_err(|e| format!("cannot listen on {} (admin): {e}", args.admin_listen))?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(signals, shutdown.clone(), has_policy.then_some(reload)));
    snowmint::server::run(config, grpc, admin, clock, shutdown).await.map_err(|e| e.to_string())
}

/// The signals' handlers, installed: the stop signals, and SIGHUP (read the tenants' files
/// again).
#[cfg(unix)]
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn install() -> Result<Signals, String> {
        use tokio::signal::unix::{SignalKind, signal};
        let failed = |e: std::io::Error| format!("cannot install the signal handlers: {e}");
        Ok(Signals {
            term: signal(SignalKind::terminate()).map_err(failed)?,
            int: signal(SignalKind::interrupt()).map_err(failed)?,
            hup: signal(SignalKind::hangup()).map_err(failed)?,
        })
    }

    /// The name of the next signal received.
    async fn received(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
            _ = self.hup.recv() => "SIGHUP",
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn install() -> Result<Signals, String> {
        Ok(Signals)
    }

    async fn received(&mut self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

/// Cancels `shutdown` on SIGTERM or SIGINT; on SIGHUP, has the tenants' files read again
/// (`reload`, with a policy) or says there is nothing to reload.
async fn cancel_on_signal(mut signals: Signals, shutdown: CancellationToken, reload: Option<Arc<tokio::sync::Notify>>) {
    loop {
        let name = signals.received().await;
        if name != "SIGHUP" {
            tracing::info!(signal = name, "shutting down");
            shutdown.cancel();
            return;
        }
        match &reload {
            Some(reload) => reload.notify_one(),
            None => tracing::info!("SIGHUP: nothing to reload (no --policy-file)"),
        }
    }
}
