//! The commands, and the flags more than one of them takes.
//!
//! Values are checked here, before anything starts; a bad one ends the process with one clear
//! line and a non-zero status.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use snowmint::history::Book;
use snowmint::history::etcd::EtcdBook;
use snowmint::history::file::FileBook;
use snowmint::layout::{Layout, LayoutError, SEQUENCE_BITS, TIME_BITS, WORKER_BITS, parse_rfc3339_ms, rfc3339_ms};
use snowmint::store::etcd::{EtcdConfig, EtcdTls};

use super::audit::AuditArgs;
use super::bench::BenchArgs;
use super::clients::{BatchArgs, ClientArgs};
use super::decode::DecodeArgs;
use super::fence::FenceArgs;
use super::sequence::SequenceArgs;
use super::serve::ServeArgs;
use super::token::TokenArgs;

#[derive(Debug, Parser)]
#[command(name = "snowmint", version, about = "Mints unique, roughly time-sorted 64-bit IDs over gRPC")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the ID server.
    Serve(Box<ServeArgs>),
    /// Split an ID into time, worker and sequence (offline); with the slot history's flags,
    /// say which holder minted it.
    Decode(DecodeArgs),
    /// Check the slot history: each holder minted only above its predecessor's last
    /// reservation, and no two minting windows of a slot overlap.
    Audit(AuditArgs),
    /// After etcd was restored from a snapshot: fence the fleet, so that no claim takes a
    /// floor from a reservation older than the restore.
    Fence(FenceArgs),
    /// Ask a server for one ID.
    Next(ClientArgs),
    /// Ask a server for a batch of IDs.
    Batch(BatchArgs),
    /// Drive load against a server and report throughput, latency and uniqueness.
    Bench(BenchArgs),
    /// Create, list and show named sequences (in etcd, or a state dir).
    Sequence(SequenceArgs),
    /// Make bearer tokens for the tenants' policy, and their lines for the token file.
    Token(TokenArgs),
}

/// The layout flags, shared by `serve` and `decode`.
#[derive(Debug, Clone, Args)]
pub struct LayoutArgs {
    /// The epoch IDs count time from, in RFC 3339. Frozen once IDs exist.
    #[arg(long, env = "SNOWMINT_EPOCH", default_value = "2026-01-01T00:00:00Z", value_parser = parse_epoch)]
    pub epoch: i64,
    /// Bits of the worker ID (2^bits workers).
    #[arg(long, env = "SNOWMINT_WORKER_BITS", default_value_t = 10)]
    pub worker_bits: u8,
    /// Bits of the per-millisecond sequence (2^bits IDs per ms per worker).
    #[arg(long, env = "SNOWMINT_SEQUENCE_BITS", default_value_t = 12)]
    pub sequence_bits: u8,
}

impl LayoutArgs {
    /// snowmint's layout from these flags, checked for minting at wall time `now_ms`; or the
    /// one line that names the flags at fault, with the arithmetic.
    pub fn layout(&self, now_ms: i64) -> Result<Layout, String> {
        let layout = self.widths()?;
        layout.validate_for_minting(now_ms).map_err(|e| match e {
            LayoutError::EpochInFuture { epoch, now } => format!("--epoch {epoch} is in the future (now is {now})"),
            LayoutError::Expired { expiry, time_bits, .. } => format!(
                "--epoch {} with {time_bits} time bits of ms (63 - --worker-bits {} - --sequence-bits {}) ran out at {expiry}",
                rfc3339_ms(self.epoch),
                self.worker_bits,
                self.sequence_bits
            ),
            e => format!("invalid layout: {e}"),
        })?;
        Ok(layout)
    }

    /// snowmint's layout from these flags with its widths checked, for decoding: the time
    /// field gets what the worker and sequence leave of the 63 bits below the sign bit.
    pub fn widths(&self) -> Result<Layout, String> {
        let (worker, sequence) = (self.worker_bits, self.sequence_bits);
        let (min, max) = (TIME_BITS.start(), TIME_BITS.end());
        let time = 63 - i32::from(worker) - i32::from(sequence);
        if time < 0 {
            return Err(format!(
                "--worker-bits {worker} + --sequence-bits {sequence} = {} bits, more than the 63 below the sign bit; the time field needs {min} to {max} of them",
                63 - time
            ));
        }
        if !(i32::from(*min)..=i32::from(*max)).contains(&time) {
            return Err(format!(
                "--worker-bits {worker} + --sequence-bits {sequence} leave {time} time bits (of 63); the time field needs {min} to {max}"
            ));
        }
        for (flag, range, got) in [("--worker-bits", WORKER_BITS, worker), ("--sequence-bits", SEQUENCE_BITS, sequence)]
        {
            if !range.contains(&got) {
                return Err(format!("{flag} must be between {} and {}, got {got}", range.start(), range.end()));
            }
        }
        Ok(Layout::snowmint(self.epoch, worker, sequence))
    }
}

/// The etcd connection flags, shared by `serve`, `decode` and `audit`.
#[derive(Debug, Clone, Args)]
pub struct EtcdArgs {
    /// etcd endpoints (comma-separated URLs); when given, the worker ID is leased from etcd
    /// instead of --worker-id, and reservations live in etcd instead of --state-dir.
    #[arg(long, env = "SNOWMINT_ETCD_ENDPOINTS", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,
    /// Key prefix in etcd.
    #[arg(long, env = "SNOWMINT_ETCD_PREFIX", default_value = "/snowmint")]
    pub etcd_prefix: String,
    /// CA certificate (PEM) to verify etcd with.
    #[arg(long, env = "SNOWMINT_ETCD_CA")]
    pub etcd_ca: Option<PathBuf>,
    /// Client certificate (PEM) for etcd.
    #[arg(long, env = "SNOWMINT_ETCD_CERT")]
    pub etcd_cert: Option<PathBuf>,
    /// Client key (PEM) for etcd.
    #[arg(long, env = "SNOWMINT_ETCD_KEY")]
    pub etcd_key: Option<PathBuf>,
    /// etcd user; the password is read only from SNOWMINT_ETCD_PASSWORD.
    #[arg(long, env = "SNOWMINT_ETCD_USER")]
    pub etcd_user: Option<String>,
}

impl EtcdArgs {
    /// The etcd connection these flags describe (one slot, a 10 s lease, no preference: the
    /// callers that claim set their own), or the one line that says what is wrong.
    pub fn config(&self, hostname: String) -> Result<EtcdConfig, String> {
        if self.etcd_endpoints.iter().any(|e| e.trim().is_empty()) {
            return Err("--etcd-endpoints has an empty entry".into());
        }
        let prefix = self.etcd_prefix.trim_end_matches('/').to_string();
        if !prefix.starts_with('/') {
            return Err(format!("--etcd-prefix {:?} must start with /", self.etcd_prefix));
        }
        let uses_tls = self.etcd_endpoints.iter().any(|e| e.starts_with("https://"))
            || self.etcd_ca.is_some()
            || self.etcd_cert.is_some()
            || self.etcd_key.is_some();
        let tls = uses_tls.then(|| EtcdTls {
            ca: self.etcd_ca.clone(),
            cert: self.etcd_cert.clone(),
            key: self.etcd_key.clone(),
        });
        if uses_tls && self.etcd_ca.is_none() {
            return Err("TLS to etcd needs --etcd-ca (the CA that signed the etcd server certificates)".into());
        }
        let password = std::env::var("SNOWMINT_ETCD_PASSWORD").ok();
        let user = match (&self.etcd_user, password) {
            (Some(user), Some(password)) => Some((user.clone(), password)),
            (Some(_), None) => return Err("--etcd-user needs the password in SNOWMINT_ETCD_PASSWORD".into()),
            (None, _) => None,
        };
        Ok(EtcdConfig {
            endpoints: self.etcd_endpoints.clone(),
            prefix,
            lease_ttl: Duration::from_secs(10),
            preferred_worker_id: None,
            slots: 1,
            hostname,
            tls,
            user,
            start_timeout: Duration::from_secs(10),
            // Only `serve` compacts (its own flag).
            compaction_interval: None,
        })
    }
}

/// Where a command reads the slot history: etcd (`--etcd-endpoints`) or a standalone
/// server's `--state-dir`.
#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// A standalone server's state dir (its history is under history/).
    #[arg(long, env = "SNOWMINT_STATE_DIR", conflicts_with = "etcd_endpoints")]
    pub state_dir: Option<PathBuf>,
}

impl HistoryArgs {
    /// The history these flags name; `None` when they name none.
    pub async fn book(&self) -> Result<Option<Arc<dyn Book>>, String> {
        if !self.etcd.etcd_endpoints.is_empty() {
            let config = self.etcd.config(String::new())?;
            let book = EtcdBook::connect(&config).await.map_err(|e| e.to_string())?;
            return Ok(Some(Arc::new(book)));
        }
        Ok(self.state_dir.as_deref().map(|dir| Arc::new(FileBook::new(dir)) as Arc<dyn Book>))
    }
}

/// A retention such as 30d, 12h, 90m or 600s; a bare number is seconds.
pub fn parse_retention(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits.parse().map_err(|_| format!("not a duration such as 30d, 12h, 90m or 600s: {text:?}"))?;
    let secs = match unit {
        "d" => n.checked_mul(86_400),
        "h" => n.checked_mul(3_600),
        "m" => n.checked_mul(60),
        "s" => Some(n),
        _ => return Err(format!("unknown unit {unit:?} in {text:?}: use d, h, m or s")),
    };
    secs.map(Duration::from_secs).ok_or_else(|| format!("{text:?} is too long"))
}

fn parse_epoch(text: &str) -> Result<i64, String> {
    parse_rfc3339_ms(text).map_err(|e| format!("not an RFC 3339 time such as 2026-01-01T00:00:00Z ({e})"))
}

/// A flag's number of milliseconds.
pub fn parse_ms(text: &str) -> Result<Duration, String> {
    let ms: u64 = text.parse().map_err(|e| format!("not a number of milliseconds ({e})"))?;
    Ok(Duration::from_millis(ms))
}

/// A flag's number of milliseconds, where 0 means nothing sensible (a keep-alive every 0 ms).
pub fn parse_nonzero_ms(text: &str) -> Result<Duration, String> {
    match parse_ms(text)? {
        Duration::ZERO => Err("must be at least 1 ms".into()),
        d => Ok(d),
    }
}
