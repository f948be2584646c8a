//! `snowmint bench`: the load tool. It drives NextId, BatchIds, NextUuid, BatchUuids,
//! NextValue, BatchValues (of `--sequence`) or the buffered Rust client against a server at a set concurrency for a set duration or call
//! count, reports calls/s, IDs/s (UUIDs/s) and latency percentiles, and checks that every ID
//! (UUID) it received is unique. A run with
//! a failed call or a duplicate ID is a failed run ([`Report::verdict`]): its figures measure
//! something else than a server serving.
//!
//! A call the server refused at once because it is saturated (`UNAVAILABLE` "the minter is
//! saturated", or `RESOURCE_EXHAUSTED` past `--max-outstanding-ids`) is no failure: nothing
//! was minted for it, and the server says to ask again. It is counted apart, and its worker
//! pauses as the client contract does before asking again (10 ms, doubling up to 320 ms while
//! refusals follow one another). A call that ran out its deadline (`--deadline-ms`) is a
//! failure.
//!
//! The IDs are kept as runs of consecutive values ([`Runs`]): a batch comes as a few runs
//! (whole ticks, or the fair queue's turns within one), so tens of millions of IDs a second
//! take a few megabytes rather than hundreds of megabytes of fresh memory a second, whose
//! page faults would throttle the client; and the check sorts runs rather than IDs. A UUID is
//! kept as a 64-bit key of the 90 bits that make it unique ([`uuid_key`]), which runs the same
//! way. A named sequence's values are kept as IDs are (values of one batch run as a segment).

use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use tonic::transport::{Channel, Endpoint};

use snowmint_client::proto::id_service_client::IdServiceClient;
use snowmint_client::proto::{
    BatchIdsRequest, BatchUuidsRequest, BatchValuesRequest, NextIdRequest, NextUuidRequest, NextValueRequest,
};
use snowmint_client::{BufferConfig, Client};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Method {
    /// NextId calls.
    Next,
    /// BatchIds calls of --batch-size.
    Batch,
    /// The Rust client (snowmint-client) with its local buffer: next_id() per call.
    Buffered,
    /// NextUuid calls.
    NextUuid,
    /// BatchUuids calls of --batch-size.
    BatchUuids,
    /// NextValue calls of --sequence.
    NextValue,
    /// BatchValues calls of --batch-size, of --sequence.
    BatchValues,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The server's gRPC URL.
    #[arg(long, env = "SNOWMINT_ADDR", default_value = "http://127.0.0.1:50051")]
    pub addr: String,
    /// Which call to make.
    #[arg(long, value_enum, default_value_t = Method::Next)]
    pub method: Method,
    /// IDs per BatchIds (UUIDs per BatchUuids, values per BatchValues) call.
    #[arg(long, default_value_t = 4096)]
    pub batch_size: u32,
    /// The named sequence of next-value and batch-values.
    #[arg(long, default_value = "bench")]
    pub sequence: String,
    /// Calls in flight at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// HTTP/2 connections the calls are spread over.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// How long to run, in seconds (ignored when --calls is given).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Stop after this many calls in all.
    #[arg(long)]
    pub calls: Option<u64>,
    /// Pace the calls to this many per second in all (default: as fast as they go).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Each call's deadline, sent as its `grpc-timeout` (default: none).
    #[arg(long)]
    pub deadline_ms: Option<u64>,
    /// A bearer token sent with every call (`authorization: Bearer <token>`), for a server
    /// with a tenants' policy.
    #[arg(long, env = "SNOWMINT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Buffered calls timed: one in this many. A buffered `next_id()` costs about as much as
/// reading the clock twice, so timing every call would halve the rate it measures.
pub const BUFFERED_LATENCY_SAMPLE: u64 = 16;

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Calls that succeeded.
    pub calls: u64,
    /// The latencies are of one call in this many (1: of every call).
    pub timed_every: u64,
    /// Calls that failed.
    pub errors: u64,
    /// What the first failed call got, when one failed.
    pub first_error: Option<String>,
    /// Failed calls by the code they got.
    pub error_codes: std::collections::BTreeMap<String, u64>,
    /// Calls the server refused at once, saturated (not failures).
    pub refused: u64,
    /// The slowest refusal: how soon "at once" was.
    pub refused_max: Duration,
    pub ids: u64,
    pub duplicates: u64,
    pub elapsed: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
    /// The slowest call.
    pub max: Duration,
}

impl Report {
    pub fn calls_per_second(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }

    pub fn ids_per_second(&self) -> f64 {
        self.ids as f64 / self.elapsed.as_secs_f64()
    }

    /// `Ok` for a clean run; otherwise the one line saying what went wrong: failed calls
    /// (and the first one's error), duplicate IDs, or both.
    pub fn verdict(&self) -> Result<(), String> {
        let mut wrong = Vec::new();
        if self.errors > 0 {
            let first = self.first_error.as_deref().unwrap_or("unknown");
            wrong.push(format!("{} of {} calls failed (the first: {first})", self.errors, self.calls + self.errors));
        }
        if self.duplicates > 0 {
            wrong.push(format!("{} duplicate IDs among {}", self.duplicates, self.ids));
        }
        if wrong.is_empty() { Ok(()) } else { Err(wrong.join("; ")) }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "calls       {} in {:.2} s ({} errors)", self.calls, self.elapsed.as_secs_f64(), self.errors)?;
        if let Some(error) = &self.first_error {
            writeln!(f, "first error {error}")?;
        }
        if !self.error_codes.is_empty() {
            let codes: Vec<String> = self.error_codes.iter().map(|(code, n)| format!("{code} {n}")).collect();
            writeln!(f, "errors      {}", codes.join(", "))?;
        }
        if self.refused > 0 {
            writeln!(f, "refused     {} at once, saturated (the slowest in {:?})", self.refused, self.refused_max)?;
        }
        writeln!(f, "calls/s     {:.0}", self.calls_per_second())?;
        writeln!(f, "IDs/s       {:.0}", self.ids_per_second())?;
        write!(f, "latency     p50 {:?}  p99 {:?}  p999 {:?}  max {:?}", self.p50, self.p99, self.p999, self.max)?;
        if self.timed_every > 1 {
            write!(f, "  (of every {}th call)", self.timed_every)?;
        }
        writeln!(f)?;
        if self.duplicates == 0 {
            write!(f, "unique      all {} IDs are unique", self.ids)
        } else {
            write!(f, "unique      NO: {} duplicates among {} IDs", self.duplicates, self.ids)
        }
    }
}

/// Runs the load and returns what it measured.
pub async fn run(args: &BenchArgs) -> Result<Report, String> {
    if args.concurrency == 0 || args.connections == 0 {
        return Err("--concurrency and --connections must be at least 1".into());
    }
    let endpoint = Endpoint::from_shared(args.addr.clone()).map_err(|e| format!("bad --addr: {e}"))?.tcp_nodelay(true);
    let mut channels = Vec::new();
    for _ in 0..args.connections {
        channels.push(endpoint.connect().await.map_err(|e| format!("cannot connect to {}: {e}", args.addr))?);
    }
    let budget = args.calls.map(|calls| std::sync::Arc::new(std::sync::atomic::AtomicU64::new(calls)));
    let until = Instant::now() + Duration::from_secs_f64(if args.calls.is_some() { 3600.0 } else { args.duration });
    // Each worker's share of the rate, as the interval between its calls.
    let interval = args.rate.map(|rate| Duration::from_secs_f64(args.concurrency as f64 / rate));
    let buffered = match args.method {
        Method::Buffered => {
            let builder = Client::builder([args.addr.clone()]).buffer(BufferConfig {
                batch: args.batch_size,
                low_water: 4 * args.batch_size as usize,
                max_refills: 4,
                ..Default::default()
            });
            let builder = match &args.token {
                Some(token) => builder.token(token),
                None => builder,
            };
            Some(builder.connect().map_err(|e| e.to_string())?)
        }
        _ => None,
    };
    if let Some(client) = &buffered {
        // Let the first refills arrive before the clock starts.
        client.next_id().await.map_err(|e| e.to_string())?;
    }
    // Paced calls are timed anyway, to know when the next one is due.
    let timed_every = if args.method == Method::Buffered && interval.is_none() { BUFFERED_LATENCY_SAMPLE } else { 1 };
    let start = Instant::now();
    let uuid_base_ms = unix_ms_now() - UUID_KEY_SPAN_MS / 2;
    let mut tasks = Vec::new();
    let authorization = match &args.token {
        Some(token) => Some(
            format!("Bearer {token}")
                .parse()
                .map_err(|_| "--token: not a token (letters, digits, - and _)".to_string())?,
        ),
        None => None,
    };
    for i in 0..args.concurrency {
        let target = match &buffered {
            Some(client) => Target::Buffered(client.clone()),
            None => Target::Server(IdServiceClient::new(channels[i % channels.len()].clone())),
        };
        let load = Load {
            uuid_base_ms,
            sequence: args.sequence.clone(),
            method: args.method,
            batch_size: args.batch_size,
            deadline: args.deadline_ms.map(Duration::from_millis),
            authorization: authorization.clone(),
            until,
            interval,
            budget: budget.clone(),
            timed_every,
        };
        tasks.push(tokio::spawn(worker(target, load)));
    }
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await.map_err(|e| e.to_string())?);
    }
    // Before the IDs are gathered and checked.
    let elapsed = start.elapsed();
    let mut runs = Vec::with_capacity(results.iter().map(|r| r.ids.runs()).sum());
    let mut latencies = Vec::with_capacity(results.iter().map(|r| r.latencies.len()).sum());
    let (mut calls, mut errors, mut total, mut refused) = (0, 0, 0, 0);
    let mut refused_max = Duration::ZERO;
    let mut first_error = None;
    let mut error_codes = std::collections::BTreeMap::new();
    for result in results {
        for (code, n) in result.error_codes {
            *error_codes.entry(code).or_insert(0) += n;
        }
        calls += result.calls;
        refused += result.refused;
        refused_max = refused_max.max(result.refused_max);
        total += result.ids.ids;
        result.ids.drain_into(&mut runs);
        result.latencies.drain_into(&mut latencies);
        errors += result.errors;
        first_error = first_error.or(result.first_error);
    }
    latencies.sort_unstable();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(Duration::ZERO, |&ns| Duration::from_nanos(ns))
    };
    Ok(Report {
        calls,
        timed_every,
        errors,
        first_error,
        error_codes,
        refused,
        refused_max,
        ids: total,
        duplicates: duplicates(&mut runs),
        elapsed,
        p50: pct(0.50),
        p99: pct(0.99),
        p999: pct(0.999),
        max: latencies.last().map_or(Duration::ZERO, |&ns| Duration::from_nanos(ns)),
    })
}

/// IDs `start`, `start + 1`, ... `start + len - 1`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Run {
    start: u64,
    len: u64,
}

impl Run {
    /// One past the last ID (past `u64::MAX` for a run that ends there).
    fn end(&self) -> u128 {
        u128::from(self.start) + u128::from(self.len)
    }
}

/// How many of the IDs in `runs` repeat another: all of them less the distinct ones (sorts
/// the runs).
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

/// The IDs a worker received, in the order received, as runs of consecutive IDs.
#[derive(Default)]
struct Runs {
    done: Chunks<Run>,
    /// The run the next ID may extend (none while its `len` is 0).
    open: Run,
    /// IDs in all.
    ids: u64,
}

impl Runs {
    fn push(&mut self, id: u64) {
        self.ids += 1;
        // A run that ends at u64::MAX is not continued by 0.
        if self.open.len > 0 && id == self.open.start.wrapping_add(self.open.len) && id != 0 {
            self.open.len += 1;
        } else {
            if self.open.len > 0 {
                self.done.push(self.open);
            }
            self.open = Run { start: id, len: 1 };
        }
    }

    fn push_all(&mut self, ids: &[u64]) {
        for &id in ids {
            self.push(id);
        }
    }

    fn runs(&self) -> usize {
        self.done.len() + usize::from(self.open.len > 0)
    }

    fn drain_into(self, out: &mut Vec<Run>) {
        self.done.drain_into(out);
        if self.open.len > 0 {
            out.push(self.open);
        }
    }
}

/// Values kept in chunks that never grow past their first allocation, so keeping millions
/// never copies them: a doubling `Vec` stalls its caller for milliseconds each time it grows,
/// long enough to leave the server idle through whole ticks.
struct Chunks<T> {
    chunks: Vec<Vec<T>>,
}

impl<T> Default for Chunks<T> {
    fn default() -> Chunks<T> {
        Chunks { chunks: Vec::new() }
    }
}

impl<T: Copy> Chunks<T> {
    const CHUNK: usize = 1 << 16;

    fn push(&mut self, value: T) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < chunk.capacity() => chunk.push(value),
            _ => {
                let mut chunk = Vec::with_capacity(Self::CHUNK);
                chunk.push(value);
                self.chunks.push(chunk);
            }
        }
    }

    fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }

    fn drain_into(self, out: &mut Vec<T>) {
        for chunk in self.chunks {
            out.extend_from_slice(&chunk);
        }
    }
}

/// What one worker got.
struct Outcome {
    /// Calls that succeeded.
    calls: u64,
    ids: Runs,
    latencies: Chunks<u64>,
    errors: u64,
    first_error: Option<String>,
    error_codes: std::collections::BTreeMap<String, u64>,
    refused: u64,
    refused_max: Duration,
}

/// What a worker calls.
enum Target {
    Server(IdServiceClient<Channel>),
    Buffered(Client),
}

/// How a worker drives its calls.
struct Load {
    /// The Unix ms from which UUIDs' times are keyed ([`uuid_key`]).
    uuid_base_ms: i64,
    /// The named sequence of `NextValue` and `BatchValues`.
    sequence: String,
    method: Method,
    batch_size: u32,
    /// Each call's deadline.
    deadline: Option<Duration>,
    /// Each call's `authorization` header.
    authorization: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    until: Instant,
    interval: Option<Duration>,
    /// Calls left, when a count was given.
    budget: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Time one call in this many; the end of the run is noticed on those calls.
    timed_every: u64,
}

async fn worker(mut target: Target, load: Load) -> Outcome {
    use std::sync::atomic::Ordering;
    let mut out = Outcome {
        calls: 0,
        ids: Runs::default(),
        latencies: Chunks::default(),
        errors: 0,
        first_error: None,
        error_codes: Default::default(),
        refused: 0,
        refused_max: Duration::ZERO,
    };
    // Refusals in a row, for the pause after each.
    let mut refusals = 0u32;
    let mut next_at = Instant::now();
    // Timing every call, one clock read per call: a call's end is the next one's start (a
    // read costs tens of nanoseconds, a good part of a buffered next_id()). Timing one call
    // in `timed_every`, two reads around it.
    let mut start = Instant::now();
    // Calls before the next timed one.
    let mut untimed = 0;
    loop {
        let timed = untimed == 0;
        if timed {
            untimed = load.timed_every;
            if load.timed_every > 1 {
                start = Instant::now();
            }
            if start >= load.until {
                break;
            }
        }
        if let Some(budget) = &load.budget
            && budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_err()
        {
            break;
        }
        if let Some(interval) = load.interval {
            tokio::time::sleep_until(next_at.into()).await;
            next_at += interval;
            start = Instant::now();
        }
        let result = match (&mut target, load.method) {
            (Target::Buffered(client), _) => client
                .next_id()
                .await
                .map(|id| out.ids.push(id))
                .map_err(|e| Failed::Other("client".into(), e.to_string())),
            (Target::Server(client), Method::Batch) => client
                .batch_ids(request(BatchIdsRequest { count: load.batch_size, ..Default::default() }, &load))
                .await
                .map(|r| out.ids.push_all(&r.into_inner().ids))
                .map_err(|s| Failed::of(&s)),
            (Target::Server(client), Method::NextUuid) => {
                match client.next_uuid(request(NextUuidRequest {}, &load)).await {
                    Ok(r) => keep_uuids(&mut out.ids, [r.into_inner().uuid].iter(), load.uuid_base_ms),
                    Err(s) => Err(Failed::of(&s)),
                }
            }
            (Target::Server(client), Method::BatchUuids) => {
                match client.batch_uuids(request(BatchUuidsRequest { count: load.batch_size }, &load)).await {
                    Ok(r) => keep_uuids(&mut out.ids, r.into_inner().uuids.iter(), load.uuid_base_ms),
                    Err(s) => Err(Failed::of(&s)),
                }
            }
            (Target::Server(client), Method::NextValue) => client
                .next_value(request(NextValueRequest { sequence: load.sequence.clone() }, &load))
                .await
                .map(|r| out.ids.push(r.into_inner().value as u64))
                .map_err(|s| Failed::of(&s)),
            (Target::Server(client), Method::BatchValues) => {
                let batch = BatchValuesRequest { sequence: load.sequence.clone(), count: load.batch_size };
                client
                    .batch_values(request(batch, &load))
                    .await
                    .map(|r| r.into_inner().values.into_iter().for_each(|value| out.ids.push(value as u64)))
                    .map_err(|s| Failed::of(&s))
            }
            (Target::Server(client), _) => client
                .next_id(request(NextIdRequest::default(), &load))
                .await
                .map(|r| out.ids.push(r.into_inner().id))
                .map_err(|s| Failed::of(&s)),
        };
        untimed -= 1;
        let end = timed.then(Instant::now);
        match result {
            Ok(()) => {
                out.calls += 1;
                refusals = 0;
                if let Some(end) = end {
                    out.latencies.push(end.duration_since(start).as_nanos() as u64);
                }
            }
            Err(Failed::Refused) => {
                // Only calls to the server are refused, and each of those is timed from `start`.
                out.refused += 1;
                out.refused_max = out.refused_max.max(start.elapsed());
                tokio::time::sleep(Duration::from_millis(10 << refusals.min(5))).await;
                refusals += 1;
                // The pause is no call's latency: the next call is timed from its own start.
                start = Instant::now();
                untimed = 0;
                continue;
            }
            Err(Failed::Other(code, error)) => {
                out.errors += 1;
                *out.error_codes.entry(code).or_insert(0) += 1;
                out.first_error.get_or_insert(error);
            }
        }
        if let Some(end) = end {
            start = end;
        }
    }
    out
}

/// The span of UUID times a run keys, around its start: 2^22 ms, about 70 minutes.
const UUID_KEY_SPAN_MS: i64 = 1 << 22;

fn unix_ms_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A snowmint UUID as a 64-bit key, unique as the UUID's 90 bits of time and minted field
/// are: its time since `base_ms` (within [`UUID_KEY_SPAN_MS`]) above the 42-bit minted field.
/// The UUIDs of one tick and slot have consecutive keys, so they are kept as runs. `Err` for
/// bytes that are no snowmint UUID, or one of a time outside the span.
fn uuid_key(bytes: &[u8], base_ms: i64) -> Result<u64, String> {
    let uuid = <[u8; 16]>::try_from(bytes).map_err(|_| format!("a UUID of {} bytes", bytes.len()))?;
    let text = || snowmint::uuid7::to_text(uuid);
    let (unix_ms, minted) = snowmint::uuid7::minted_fields(uuid).map_err(|e| format!("{}: {e}", text()))?;
    let since = unix_ms - base_ms;
    if !(0..UUID_KEY_SPAN_MS).contains(&since) {
        return Err(format!("{} is dated more than 35 minutes from this run", text()));
    }
    Ok(((since as u64) << 42) | minted)
}

/// Keeps the keys of `uuids`, or fails the call naming the first that is no snowmint UUID.
fn keep_uuids<'a>(ids: &mut Runs, uuids: impl Iterator<Item = &'a Vec<u8>>, base_ms: i64) -> Result<(), Failed> {
    for bytes in uuids {
        let key = uuid_key(bytes, base_ms).map_err(|e| Failed::Other("malformed".into(), e))?;
        ids.push(key);
    }
    Ok(())
}

/// `message` as a request, with `deadline` as its `grpc-timeout` when one is given.
fn request<T>(message: T, load: &Load) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(deadline) = load.deadline {
        request.set_timeout(deadline);
    }
    if let Some(authorization) = &load.authorization {
        request.metadata_mut().insert("authorization", authorization.clone());
    }
    request
}

/// Why a call got no IDs.
enum Failed {
    /// The server refused it at once, saturated: ask again after a pause.
    Refused,
    /// Anything else: its code, and all of it as one line.
    Other(String, String),
}

impl Failed {
    fn of(status: &tonic::Status) -> Failed {
        let saturated = status.code() == tonic::Code::Unavailable && status.message().contains("minter is saturated");
        if saturated || status.code() == tonic::Code::ResourceExhausted {
            Failed::Refused
        } else {
            Failed::Other(format!("{:?}", status.code()), format!("{:?}: {}", status.code(), status.message()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(errors: u64, duplicates: u64) -> Report {
        Report {
            calls: 90,
            timed_every: 1,
            errors,
            first_error: (errors > 0).then(|| "Unavailable: the server is shutting down".into()),
            error_codes: Default::default(),
            refused: 0,
            refused_max: Duration::ZERO,
            ids: 90,
            duplicates,
            elapsed: Duration::from_secs(1),
            p50: Duration::ZERO,
            p99: Duration::ZERO,
            p999: Duration::ZERO,
            max: Duration::ZERO,
        }
    }

    #[test]
    fn a_run_with_failed_calls_or_duplicates_fails_and_says_which() {
        assert_eq!(report(0, 0).verdict(), Ok(()));
        assert_eq!(
            report(10, 0).verdict().unwrap_err(),
            "10 of 100 calls failed (the first: Unavailable: the server is shutting down)"
        );
        assert_eq!(report(0, 2).verdict().unwrap_err(), "2 duplicate IDs among 90");
        let both = report(10, 2).verdict().unwrap_err();
        assert!(both.contains("10 of 100 calls failed") && both.contains("2 duplicate IDs"), "{both}");
    }

    /// The duplicates among `ids`, received in this order by one worker or (for each list)
    /// by several.
    fn duplicates_among(workers: &[&[u64]]) -> u64 {
        let mut runs = Vec::new();
        for ids in workers {
            let mut kept = Runs::default();
            kept.push_all(ids);
            assert_eq!(kept.ids, ids.len() as u64);
            kept.drain_into(&mut runs);
        }
        duplicates(&mut runs)
    }

    #[test]
    fn duplicates_are_counted_once_per_repeat() {
        assert_eq!(duplicates_among(&[&[3, 1, 2]]), 0);
        assert_eq!(duplicates_among(&[&[5, 1, 5, 2, 5, 1]]), 3);
        assert_eq!(duplicates_among(&[&[]]), 0);
        assert_eq!(duplicates_among(&[&[1, 2, 3, 4], &[4, 5, 6], &[2, 3]]), 3);
        assert_eq!(duplicates_among(&[&[7, 7, 8, 8]]), 2);
        assert_eq!(duplicates_among(&[&[u64::MAX - 1, u64::MAX], &[u64::MAX, 0]]), 1);
    }

    #[test]
    fn uuids_of_one_tick_and_slot_are_keyed_in_one_run_and_others_apart() {
        let layout = snowmint::layout::Layout::default_snowmint();
        let base = layout.tick_start_ms(100);
        let key = |tick, worker, sequence| {
            let id = layout.pack(snowmint::layout::Parts { tick, worker, sequence });
            uuid_key(&snowmint::uuid7::from_id(&layout, id, sequence as u32 ^ 0xffff), base).unwrap()
        };
        assert_eq!(key(100, 3, 1), key(100, 3, 0) + 1);
        assert_eq!(key(100, 3, 0), 3 << 22);
        let distinct = [key(100, 3, 0), key(101, 3, 0), key(100, 4, 0), key(100, 3, 4095)];
        assert_eq!(distinct.iter().collect::<std::collections::HashSet<_>>().len(), 4);
        assert!(uuid_key(&[0; 16], base).unwrap_err().contains("not a UUIDv7"));
        assert!(uuid_key(&[0; 15], base).unwrap_err().contains("15 bytes"));
        let late = snowmint::uuid7::from_id(
            &layout,
            layout.pack(snowmint::layout::Parts { tick: 99, worker: 0, sequence: 0 }),
            0,
        );
        assert!(uuid_key(&late, base).unwrap_err().contains("35 minutes"));
    }

    #[test]
    fn consecutive_ids_are_kept_as_one_run() {
        let mut kept = Runs::default();
        kept.push_all(&(100..200).collect::<Vec<u64>>());
        kept.push_all(&[200, 201, 300]);
        kept.push(301);
        kept.push(5);
        assert_eq!(kept.ids, 105);
        let mut runs = Vec::new();
        kept.drain_into(&mut runs);
        assert_eq!(runs, [Run { start: 100, len: 102 }, Run { start: 300, len: 2 }, Run { start: 5, len: 1 }]);
    }

    #[test]
    fn chunks_keep_every_value_in_order() {
        let mut chunks = Chunks::default();
        for i in 0..(Chunks::<u64>::CHUNK as u64 + 10) {
            chunks.push(i);
        }
        assert_eq!(chunks.len(), Chunks::<u64>::CHUNK + 10);
        let mut out = Vec::new();
        chunks.drain_into(&mut out);
        assert_eq!(out.len(), Chunks::<u64>::CHUNK + 10);
        assert_eq!(out[..3], [0, 1, 2]);
        assert_eq!(out[out.len() - 2..], [Chunks::<u64>::CHUNK as u64 + 8, Chunks::<u64>::CHUNK as u64 + 9]);
    }
}
