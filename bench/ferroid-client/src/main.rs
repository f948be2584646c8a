//! A load client for ferroid's tonic server (`ferroid-tonic-server` 2.0.0), so that
//! `scripts/measure/bench.sh --peers` measures that server in the same run as snowmint.
//!
//! It opens `--connections` HTTP/2 connections with `--streams` `StreamIds` streams on each,
//! every stream asking for `--count` IDs (and asking again if one ends), and counts the IDs
//! that arrive within `--duration` seconds. It prints `IDs/s N` in the form `snowmint bench`
//! prints it. Then it checks that every ID it got is unique: a duplicate, a failed stream or a
//! chunk that is not whole 8-byte IDs fails the run (exit status 1), since its figure would
//! measure something else than a server serving unique IDs.
//!
//! ```text
//! ferroid-client --addr http://127.0.0.1:50051 [--connections 2] [--streams 4]
//!                [--duration 10] [--count 1000000000]
//! ```
//!
//! The server's chunks are packed little-endian `u64`s (`ferroid_tonic_core::types`:
//! `SnowflakeTwitterId`, [`SNOWFLAKE_ID_SIZE`] bytes each). As `snowmint bench` does, the IDs
//! are kept as runs of consecutive values (a chunk is a few runs), so keeping them costs the
//! client next to nothing, and the check sorts runs rather than IDs.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ferroid_tonic_core::proto::StreamIdsRequest;
use ferroid_tonic_core::proto::id_generator_client::IdGeneratorClient;
use ferroid_tonic_core::types::{SNOWFLAKE_ID_SIZE, SnowflakeIdTy};
use tonic::transport::{Channel, Endpoint};

const USAGE: &str =
    "usage: ferroid-client --addr URL [--connections N] [--streams N] [--duration SECONDS] [--count IDS]";

/// The command line.
struct Args {
    addr: String,
    /// HTTP/2 connections.
    connections: usize,
    /// Streams open at once on each connection.
    streams: usize,
    duration: Duration,
    /// IDs each `StreamIds` call asks for (the server's default `--max-allowed-ids` is 10^9).
    count: u64,
}

fn parse(mut words: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args {
        addr: String::new(),
        connections: 2,
        streams: 4,
        duration: Duration::from_secs(10),
        count: 1_000_000_000,
    };
    while let Some(flag) = words.next() {
        let mut value = || words.next().ok_or(format!("{flag} needs a value"));
        let number = |text: String| text.parse::<u64>().map_err(|e| format!("{flag} {text}: {e}"));
        match flag.as_str() {
            "--addr" => args.addr = value()?,
            "--connections" => args.connections = number(value()?)? as usize,
            "--streams" => args.streams = number(value()?)? as usize,
            "--count" => args.count = number(value()?)?,
            "--duration" => {
                let text = value()?;
                let seconds = text.parse::<f64>().map_err(|e| format!("--duration {text}: {e}"))?;
                args.duration = Duration::try_from_secs_f64(seconds).map_err(|e| format!("--duration {text}: {e}"))?;
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if args.addr.is_empty() || args.connections == 0 || args.streams == 0 || args.count == 0 {
        return Err("--addr is required; --connections, --streams and --count must be at least 1".into());
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match parse(std::env::args().skip(1)) {
        Ok(args) => run(&args).await,
        Err(error) => Err(format!("{error}\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ferroid-client: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<(), String> {
    let endpoint = Endpoint::from_shared(args.addr.clone())
        .map_err(|e| format!("bad --addr: {e}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10));
    let mut channels = Vec::new();
    for _ in 0..args.connections {
        channels.push(endpoint.connect().await.map_err(|e| format!("cannot connect to {}: {e}", args.addr))?);
    }
    let start = Instant::now();
    let until = start + args.duration;
    let mut tasks = Vec::new();
    for channel in &channels {
        for _ in 0..args.streams {
            tasks.push(tokio::spawn(stream(IdGeneratorClient::new(channel.clone()), args.count, until)));
        }
    }
    let (mut runs, mut total) = (Vec::new(), 0);
    for task in tasks {
        let kept = task.await.map_err(|e| e.to_string())??;
        total += kept.ids;
        runs.extend(kept.runs);
        runs.extend((kept.open.len > 0).then_some(kept.open));
    }
    let elapsed = args.duration.as_secs_f64();
    println!("IDs         {total} in {elapsed:.2} s");
    println!("IDs/s       {:.0}", total as f64 / elapsed);
    let duplicates = duplicates(&mut runs);
    if duplicates > 0 {
        println!("unique      NO: {duplicates} duplicates among {total} IDs");
        return Err(format!("{duplicates} duplicate IDs among {total}"));
    }
    println!("unique      all {total} IDs are unique");
    Ok(())
}

/// IDs `start` to `start + len - 1`.
#[derive(Clone, Copy, Default)]
struct Run {
    start: u64,
    len: u64,
}

impl Run {
    fn end(&self) -> u128 {
        u128::from(self.start) + u128::from(self.len)
    }
}

/// The IDs one stream received, in order, as runs of consecutive IDs.
#[derive(Default)]
struct Kept {
    runs: Vec<Run>,
    /// The run the next ID may extend (none while its `len` is 0).
    open: Run,
    ids: u64,
}

impl Kept {
    fn push(&mut self, id: u64) {
        self.ids += 1;
        // A run that ends at u64::MAX is not continued by 0.
        if self.open.len > 0 && id == self.open.start.wrapping_add(self.open.len) && id != 0 {
            self.open.len += 1;
        } else {
            if self.open.len > 0 {
                self.runs.push(self.open);
            }
            self.open = Run { start: id, len: 1 };
        }
    }
}

/// How many of the IDs in `runs` repeat another: all of them less the distinct ones.
fn duplicates(runs: &mut [Run]) -> u64 {
    runs.sort_unstable_by_key(|run| run.start);
    let (mut all, mut distinct, mut covered) = (0u128, 0u128, 0u128);
    for run in runs.iter() {
        all += u128::from(run.len);
        distinct += run.end().saturating_sub(covered.max(u128::from(run.start)));
        covered = covered.max(run.end());
    }
    (all - distinct) as u64
}

/// One stream after another on `client` until `until`: the IDs that arrived before it.
async fn stream(mut client: IdGeneratorClient<Channel>, count: u64, until: Instant) -> Result<Kept, String> {
    let mut kept = Kept::default();
    while Instant::now() < until {
        let call = client.stream_ids(StreamIdsRequest { count });
        let Ok(response) = tokio::time::timeout_at(until.into(), call).await else { break };
        let mut ids = response.map_err(|s| format!("StreamIds failed: {:?}: {}", s.code(), s.message()))?.into_inner();
        loop {
            // Dropping the stream at the deadline cancels it on the server.
            let Ok(message) = tokio::time::timeout_at(until.into(), ids.message()).await else { return Ok(kept) };
            match message.map_err(|s| format!("StreamIds broke off: {:?}: {}", s.code(), s.message()))? {
                Some(chunk) if Instant::now() < until => {
                    let packed = chunk.packed_ids;
                    if packed.len() % SNOWFLAKE_ID_SIZE != 0 {
                        return Err(format!(
                            "a chunk of {} bytes is not whole {SNOWFLAKE_ID_SIZE}-byte IDs",
                            packed.len()
                        ));
                    }
                    for id in packed.chunks_exact(SNOWFLAKE_ID_SIZE) {
                        kept.push(SnowflakeIdTy::from_le_bytes(id.try_into().expect("8 bytes")));
                    }
                }
                Some(_) => return Ok(kept),
                None => break,
            }
        }
    }
    Ok(kept)
}
