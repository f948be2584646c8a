//! The commands, and the flags more than one of them takes.
//!
//! Values are checked here, before anything starts; a bad one ends the process with one clear
//! line and a non-zero status.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use snowmint::layout::{Layout, LayoutError, SEQUENCE_BITS, TIME_BITS, WORKER_BITS, parse_rfc3339_ms, rfc3339_ms};

use super::bench::BenchArgs;
use super::clients::{BatchArgs, ClientArgs};
use super::decode::DecodeArgs;
use super::serve::ServeArgs;

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
    /// Split an ID into time, worker and sequence (offline).
    Decode(DecodeArgs),
    /// Ask a server for one ID.
    Next(ClientArgs),
    /// Ask a server for a batch of IDs.
    Batch(BatchArgs),
    /// Drive load against a server and report throughput, latency and uniqueness.
    Bench(BenchArgs),
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
