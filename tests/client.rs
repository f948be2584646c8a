//! The Rust client (`snowmint-client`) over real servers: failover on UNAVAILABLE and only
//! then, round and round between endpoints; deadlines per attempt and per call; coalescing of
//! concurrent calls within a server's `--max-batch`; and the local buffer with its low-water
//! refill and its age bound.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ServerBuilder, TestServer, assert_increasing, assert_unique};
use snowmint::clock::{Clock, ManualClock, SystemClock};
use snowmint::layout::Layout;
use snowmint::proto::id_service_server::{IdService, IdServiceServer};
use snowmint::proto::{
    BatchIdsRequest, BatchIdsResponse, BatchUuidsRequest, BatchUuidsResponse, DecodeRequest, DecodeResponse,
    NextIdRequest, NextIdResponse, NextUuidRequest, NextUuidResponse, RevealRequest, RevealResponse,
};
use snowmint::proto::{BatchValuesRequest, BatchValuesResponse, NextValueRequest, NextValueResponse};
use snowmint_client::{BufferConfig, Client, ClientError};
use tonic::{Code, Request, Response, Status};

/// A server on a manual clock, which refuses while its clock is stepped back.
async fn steppable() -> (TestServer, ManualClock) {
    let (server, clock) = ServerBuilder::new().start_on_manual_clock().await;
    Client::builder([server.url()]).connect().unwrap().next_id().await.unwrap();
    (server, clock)
}

/// The calls the server answered OK, NextId and BatchIds together.
async fn calls(server: &TestServer) -> f64 {
    server.metric(r#"snowmint_requests_total{code="OK",method="NextId",protocol="grpc"}"#).await
        + server.metric(r#"snowmint_requests_total{code="OK",method="BatchIds",protocol="grpc"}"#).await
}

/// A stand-in server that answers every call with `status`, after `delay`; it counts the
/// calls it got.
#[derive(Clone)]
struct Stub {
    status: Code,
    delay: Duration,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl Stub {
    async fn answer<T>(&self) -> Result<Response<T>, Status> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        Err(Status::new(self.status, "the stub's answer"))
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Serves the stub on a loopback port: its URL, and the task to abort.
    async fn serve(status: Code, delay: Duration) -> (Stub, String, tokio::task::JoinHandle<()>) {
        let stub = Stub { status, delay, calls: Arc::default() };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tonic::transport::Server::builder()
            .add_service(IdServiceServer::new(stub.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
        let task = tokio::spawn(async move {
            let _ = server.await;
        });
        (stub, url, task)
    }
}

#[tonic::async_trait]
impl IdService for Stub {
    async fn next_id(&self, _: Request<NextIdRequest>) -> Result<Response<NextIdResponse>, Status> {
        self.answer().await
    }

    async fn batch_ids(&self, _: Request<BatchIdsRequest>) -> Result<Response<BatchIdsResponse>, Status> {
        self.answer().await
    }

    async fn decode(&self, _: Request<DecodeRequest>) -> Result<Response<DecodeResponse>, Status> {
        self.answer().await
    }

    async fn reveal(&self, _: Request<RevealRequest>) -> Result<Response<RevealResponse>, Status> {
        self.answer().await
    }

    async fn next_uuid(&self, _: Request<NextUuidRequest>) -> Result<Response<NextUuidResponse>, Status> {
        self.answer().await
    }

    async fn batch_uuids(&self, _: Request<BatchUuidsRequest>) -> Result<Response<BatchUuidsResponse>, Status> {
        self.answer().await
    }

    async fn next_value(&self, _: Request<NextValueRequest>) -> Result<Response<NextValueResponse>, Status> {
        self.answer().await
    }

    async fn batch_values(&self, _: Request<BatchValuesRequest>) -> Result<Response<BatchValuesResponse>, Status> {
        self.answer().await
    }
}

#[tokio::test]
async fn next_id_and_batch() {
    let server = ServerBuilder::new().start().await;
    let client = Client::builder([server.url()]).connect().unwrap();
    let one = client.next_id().await.unwrap();
    let many = client.batch(1_000).await.unwrap();
    assert_eq!(many.len(), 1_000);
    assert_increasing(&many);
    assert!(many[0] > one);
    // A bad request is the caller's error, not retried elsewhere.
    assert!(matches!(client.batch(0).await, Err(ClientError::Rejected(s)) if s.code() == Code::InvalidArgument));
    // An endpoint given as host:port is plain text.
    let bare = Client::builder([server.grpc.to_string()]).connect().unwrap();
    assert!(bare.next_id().await.unwrap() > many[999]);
    // Closed: every call fails at once.
    client.close();
    assert!(matches!(client.next_id().await, Err(ClientError::Closed)));
    assert!(matches!(client.batch(3).await, Err(ClientError::Closed)));
    server.stop().await;
}

/// UUIDs: version 7, of this server's slot, increasing within a batch and from call to call,
/// failing over as IDs do past an endpoint that refuses or is gone; a bad count is the
/// server's answer, not failed over.
#[tokio::test]
async fn next_uuid_and_batch_uuids_fail_over_as_ids_do() {
    let good = ServerBuilder::new().slot(6).start().await;
    let (refusing, clock) = steppable().await;
    clock.step_wall(-60_000);
    let gone = format!("http://127.0.0.1:{}", common::etcd::free_port());
    let client = Client::builder([refusing.url(), gone, good.url()]).connect().unwrap();
    let layout = snowmint_client::Layout::default_snowmint();
    let mut uuids = vec![client.next_uuid().await.unwrap()];
    for count in [1, 1_000] {
        uuids.extend(client.batch_uuids(count).await.unwrap());
        uuids.push(client.next_uuid().await.unwrap());
    }
    assert_eq!(uuids.len(), 1_004);
    assert!(uuids.windows(2).all(|w| w[0] < w[1]), "UUIDs not increasing");
    assert!(uuids.windows(2).all(|w| w[0].to_string() < w[1].to_string()), "their text not increasing");
    for uuid in &uuids {
        assert_eq!(layout.decode_uuid(*uuid).unwrap().slot, 6, "{uuid}");
    }
    let refused = r#"snowmint_requests_total{code="Unavailable",method="NextUuid",protocol="grpc"}"#;
    assert!(refusing.metric(refused).await >= 1.0);
    let error = Client::builder([good.url(), refusing.url()]).connect().unwrap().batch_uuids(0).await.unwrap_err();
    assert!(matches!(&error, ClientError::Rejected(s) if s.code() == Code::InvalidArgument), "{error}");
    let invalid = r#"snowmint_requests_total{code="InvalidArgument",method="BatchUuids",protocol="grpc"}"#;
    assert_eq!((good.metric(invalid).await, refusing.metric(invalid).await), (1.0, 0.0));
    client.close();
    assert!(matches!(client.next_uuid().await, Err(ClientError::Closed)));
    refusing.stop().await;
    good.stop().await;
}

/// Named sequences through the client: past an endpoint that is gone, values of one sequence,
/// increasing from call to call, with and without a deadline; a name with no sequence is
/// `NOT_FOUND` from the first server that answers, not asked of the next.
#[tokio::test]
async fn next_value_and_batch_values_fail_over_and_not_found_is_final() {
    let with_it = ServerBuilder::new();
    let store = snowmint::sequence::file::FileSequences::new(with_it.state_path());
    let record = snowmint::sequence::Record::new(41, snowmint::sequence::MAX_VALUE, false).unwrap();
    snowmint::sequence::SequenceStore::create(&store, "orders", &record).await.unwrap();
    let good = with_it.start().await;
    let without = ServerBuilder::new().start().await;
    let gone = format!("http://127.0.0.1:{}", common::etcd::free_port());
    let client = Client::builder([gone, good.url()]).connect().unwrap();
    let mut values = vec![client.next_value("orders").await.unwrap()];
    values.extend(client.batch_values("orders", 1_000).await.unwrap());
    values.push(client.next_value_within("orders", Duration::from_secs(5)).await.unwrap());
    values.extend(client.batch_values_within("orders", 3, Duration::from_secs(5)).await.unwrap());
    assert_eq!(values, (41..41 + 1_005).collect::<Vec<i64>>());
    let first_without = Client::builder([without.url(), good.url()]).connect().unwrap();
    let error = first_without.next_value("orders").await.unwrap_err();
    assert!(matches!(&error, ClientError::Rejected(s) if s.code() == Code::NotFound), "{error}");
    let not_found = r#"snowmint_requests_total{code="NotFound",method="NextValue",protocol="grpc"}"#;
    assert_eq!((without.metric(not_found).await, good.metric(not_found).await), (1.0, 0.0));
    client.close();
    assert!(matches!(client.next_value("orders").await, Err(ClientError::Closed)));
    good.stop().await;
    without.stop().await;
}

/// A standalone server's state dir with the sequences `(name, start, max, ordered)` made in it.
async fn with_sequences(sequences: &[(&str, i64, i64, bool)]) -> ServerBuilder {
    let builder = ServerBuilder::new();
    let store = snowmint::sequence::file::FileSequences::new(builder.state_path());
    for &(name, start, max, ordered) in sequences {
        let record = snowmint::sequence::Record::new(start as u64, max as u64, ordered).unwrap();
        snowmint::sequence::SequenceStore::create(&store, name, &record).await.unwrap();
    }
    builder
}

/// The sequence calls a server answered, by method and code.
async fn value_calls(server: &TestServer, method: &str, code: &str) -> f64 {
    server.metric(&format!(r#"snowmint_requests_total{{code="{code}",method="{method}",protocol="grpc"}}"#)).await
}

/// With `sequence_prefetch(n)`, m calls of an unordered sequence are one `NextValue` (which
/// learns it is unordered) and about m/n `BatchValues`; two clients interleaving see their
/// values in blocks of n; the last values before the sequence's maximum are still handed out;
/// an ordered sequence is never buffered: two clients taking turns get increasing values.
#[tokio::test]
async fn sequence_prefetch_buffers_unordered_sequences_only() {
    let server =
        with_sequences(&[("orders", 1, 1_000_000, false), ("invoices", 1, 1_000_000, true), ("short", 1, 25, false)])
            .await
            .start()
            .await;
    let prefetched = || Client::builder([server.url()]).sequence_prefetch(10).connect().unwrap();
    let (a, b) = (prefetched(), prefetched());
    let mut from_a = Vec::new();
    let mut from_b = Vec::new();
    for _ in 0..50 {
        from_a.push(a.next_value("orders").await.unwrap());
        from_b.push(b.next_value("orders").await.unwrap());
    }
    for values in [&from_a, &from_b] {
        assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
        // After the first value, each client's values come in runs of 10 consecutive ones.
        let jumps = values[1..].windows(2).filter(|w| w[1] != w[0] + 1).count();
        assert!(jumps <= 5, "{jumps} jumps: {values:?}");
    }
    let mut all: Vec<i64> = from_a.iter().chain(&from_b).copied().collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 100);
    assert_eq!(value_calls(&server, "NextValue", "OK").await, 2.0);
    assert_eq!(value_calls(&server, "BatchValues", "OK").await, 10.0);

    for _ in 0..10 {
        let (x, y) = (a.next_value("invoices").await.unwrap(), b.next_value("invoices").await.unwrap());
        assert!(x < y, "{x} then {y}");
        let z = a.next_value("invoices").await.unwrap();
        assert!(y < z, "{y} then {z}");
    }
    assert_eq!(value_calls(&server, "NextValue", "OK").await, 2.0 + 30.0);
    assert_eq!(value_calls(&server, "BatchValues", "OK").await, 10.0);

    let mut short = Vec::new();
    let error = loop {
        match a.next_value("short").await {
            Ok(value) => short.push(value),
            Err(error) => break error,
        }
        assert!(short.len() <= 25, "{short:?}");
    };
    assert_eq!(short, (1..=25).collect::<Vec<i64>>());
    assert_eq!(error.code(), Code::OutOfRange, "{error}");
    assert!(matches!(a.next_value("missing").await, Err(ClientError::Rejected(s)) if s.code() == Code::NotFound));
    a.close();
    assert!(matches!(a.next_value("orders").await, Err(ClientError::Closed)));
    server.stop().await;
}

/// Many tasks on one client with `sequence_prefetch`: every value distinct, few calls.
#[tokio::test]
async fn sequence_prefetch_shares_refills_between_concurrent_callers() {
    let server = with_sequences(&[("orders", 1, 1_000_000, false)]).await.start().await;
    let client = Client::builder([server.url()]).sequence_prefetch(100).connect().unwrap();
    let tasks: Vec<_> = (0..500)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.next_value("orders").await.unwrap() })
        })
        .collect();
    let mut values = Vec::new();
    for task in tasks {
        values.push(common::join_within(task, Duration::from_secs(30), "a next_value").await);
    }
    values.sort_unstable();
    values.dedup();
    assert_eq!(values.len(), 500);
    let calls = value_calls(&server, "NextValue", "OK").await + value_calls(&server, "BatchValues", "OK").await;
    assert!(calls <= 7.0, "500 values took {calls} calls");
    server.stop().await;
}

#[test]
fn sequence_prefetch_is_checked() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _guard = runtime.enter();
    let connect = |n| Client::builder(["http://127.0.0.1:1"]).sequence_prefetch(n).connect();
    assert!(connect(0).is_ok() && connect(snowmint_client::MAX_SEQUENCE_PREFETCH).is_ok());
    let error = connect(snowmint_client::MAX_SEQUENCE_PREFETCH + 1).err().unwrap();
    assert!(matches!(&error, ClientError::InvalidSetting(m) if m.contains("65536")), "{error}");
}

#[tokio::test]
async fn fails_over_to_another_endpoint_when_one_refuses_or_is_gone() {
    let good = ServerBuilder::new().start().await;
    // One endpoint refuses (its clock stepped back 10 s), one has nothing listening.
    let (refusing, clock) = steppable().await;
    clock.step_wall(-60_000);
    let gone = format!("http://127.0.0.1:{}", common::etcd::free_port());

    let client = Client::builder([refusing.url(), gone, good.url()]).connect().unwrap();
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(client.next_id().await.unwrap());
        ids.extend(client.batch(10).await.unwrap());
    }
    assert_unique(&ids);
    let refused = r#"snowmint_requests_total{code="Unavailable",method="NextId",protocol="grpc"}"#;
    assert!(refusing.metric(refused).await >= 1.0);

    // Every endpoint refusing: a clear, retriable error, in bounded time.
    let only_refusing = Client::builder([refusing.url()]).timeout(Duration::from_millis(200)).connect().unwrap();
    let start = Instant::now();
    let error = only_refusing.next_id().await.unwrap_err();
    assert!(matches!(&error, ClientError::Unavailable(s) if s.code() == Code::Unavailable), "{error}");
    assert!(error.is_retriable());
    assert!(start.elapsed() < Duration::from_secs(3));
    refusing.stop().await;
    good.stop().await;
}

/// The current endpoint moves on every time the current one refuses, however many times the
/// calls have gone round: here the two servers take turns refusing, five times over.
#[tokio::test]
async fn fails_over_back_and_forth_as_the_servers_take_turns_refusing() {
    let (a, clock_a) = steppable().await;
    let (b, clock_b) = steppable().await;
    let client = Client::builder([a.url(), b.url()]).attempts(2).connect().unwrap();
    let mut ids = vec![client.next_id().await.unwrap()];
    for turn in 0..6 {
        // One server's clock steps back 10 s (it refuses), the other's comes back.
        let (refusing, recovering) = if turn % 2 == 0 { (&clock_a, &clock_b) } else { (&clock_b, &clock_a) };
        refusing.step_wall(-60_000);
        if turn > 0 {
            recovering.step_wall(60_000);
        }
        for _ in 0..3 {
            let id = client.next_id().await.unwrap_or_else(|e| panic!("turn {turn}: {e}"));
            ids.push(id);
        }
    }
    assert_unique(&ids);
    a.stop().await;
    b.stop().await;
}

/// An error a server sends, UNKNOWN and CANCELLED included, comes back as it is: the next
/// endpoint never sees the call.
#[tokio::test]
async fn errors_the_server_sends_are_returned_without_failing_over() {
    let good = ServerBuilder::new().start().await;
    for code in [Code::Unknown, Code::Cancelled, Code::Internal, Code::ResourceExhausted] {
        let (stub, url, task) = Stub::serve(code, Duration::ZERO).await;
        let client = Client::builder([url, good.url()]).connect().unwrap();
        let before = calls(&good).await;
        let error = client.next_id().await.unwrap_err();
        assert!(matches!(&error, ClientError::Rejected(s) if s.code() == code), "{code:?}: {error}");
        assert!(!error.is_retriable());
        let error = client.batch(5).await.unwrap_err();
        assert!(matches!(&error, ClientError::Rejected(s) if s.code() == code), "{code:?}: {error}");
        assert_eq!(stub.calls(), 2);
        assert_eq!(calls(&good).await, before, "{code:?} moved the call to the next endpoint");
        task.abort();
    }
    good.stop().await;
}

/// A server that does not answer within the attempt's deadline loses the call to the next
/// endpoint; the caller's own deadline ends the call, all attempts included.
#[tokio::test]
async fn an_attempt_past_its_deadline_fails_over_and_the_callers_deadline_ends_the_call() {
    let good = ServerBuilder::new().start().await;
    let (slow, url, task) = Stub::serve(Code::Unavailable, Duration::from_secs(5)).await;
    let client = Client::builder([url.clone(), good.url()]).timeout(Duration::from_millis(200)).connect().unwrap();
    let start = Instant::now();
    client.batch(10).await.unwrap();
    assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
    assert_eq!(slow.calls(), 1);

    let only_slow = Client::builder([url]).timeout(Duration::from_millis(300)).attempts(10).connect().unwrap();
    let start = Instant::now();
    let error = only_slow.batch_within(10, Duration::from_millis(500)).await.unwrap_err();
    assert!(matches!(error, ClientError::DeadlineExceeded), "{error}");
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(450) && took < Duration::from_millis(1500), "{took:?}");
    let error = only_slow.next_id_within(Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(error, ClientError::DeadlineExceeded), "{error}");
    task.abort();
    good.stop().await;
}

/// A call that fails on every attempt gives up right after the last one: it pauses between
/// rounds (10, 20, 40, 80, 160 and 320 ms over 7 attempts), not after the last.
#[tokio::test]
async fn a_call_gives_up_right_after_its_last_attempt() {
    let (refusing, clock) = steppable().await;
    clock.step_wall(-60_000);
    let client = Client::builder([refusing.url()]).attempts(7).connect().unwrap();
    client.batch(1).await.unwrap_err();
    let start = Instant::now();
    let error = client.batch(1).await.unwrap_err();
    let took = start.elapsed();
    assert!(matches!(&error, ClientError::Unavailable(s) if s.code() == Code::Unavailable), "{error}");
    // 630 ms of pauses; a pause after the last attempt would add 320 ms more.
    assert!(took >= Duration::from_millis(630) && took < Duration::from_millis(900), "{took:?}");
    refusing.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_next_ids_are_coalesced_into_few_calls() {
    let server = ServerBuilder::new().start().await;
    let client = Client::builder([server.url()]).connect().unwrap();
    client.next_id().await.unwrap();
    let before = calls(&server).await;
    let tasks: Vec<_> = (0..256)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.next_id().await.unwrap() })
        })
        .collect();
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(common::join_within(task, Duration::from_secs(30), "a caller").await);
    }
    assert_unique(&ids);
    let made = calls(&server).await - before;
    assert!(made < 128.0, "256 concurrent next_id() made {made} calls");
    assert!(server.metric("snowmint_batch_size_count").await >= 1.0, "no BatchIds call");
    server.stop().await;
}

/// Coalesced calls stay within a server's lower `--max-batch`: the first refusal halves what
/// the client asks for, and no caller sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coalesced_calls_fit_a_server_with_a_small_max_batch() {
    let server = ServerBuilder::new().config(|c| c.max_batch = 50).start().await;
    let client = Client::builder([server.url()]).max_coalesced(100).connect().unwrap();
    for _ in 0..3 {
        let tasks: Vec<_> = (0..300)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move { client.next_id().await })
            })
            .collect();
        let mut ids = Vec::new();
        for task in tasks {
            ids.push(common::join_within(task, Duration::from_secs(30), "a caller").await.unwrap());
        }
        assert_unique(&ids);
    }
    let invalid = r#"snowmint_requests_total{code="InvalidArgument",method="BatchIds",protocol="grpc"}"#;
    assert!(server.metric(invalid).await <= 1.0, "the client kept asking for more than 50 at once");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_buffer_serves_from_prefetched_batches_and_refills_below_the_low_water_mark() {
    let server = ServerBuilder::new().start().await;
    let config = BufferConfig { batch: 4096, low_water: 4096, max_refills: 2, max_age: Duration::from_secs(5) };
    let client = Client::builder([server.url()]).buffer(config).connect().unwrap();
    let mut ids = Vec::with_capacity(100_000);
    for _ in 0..100_000 {
        ids.push(client.next_id().await.unwrap());
    }
    assert_unique(&ids);
    let made = calls(&server).await;
    // About 100,000 / 4,096 = 25 refills, a few small ones first while the rate is measured,
    // and the ones that keep the buffer above the mark.
    assert!((25.0..=45.0).contains(&made), "{made} calls for 100,000 buffered IDs");
    // What is left in the buffer at the end: at most the mark and the refills in flight.
    let minted = server.metric("snowmint_batch_size_sum").await;
    assert!((100_000.0..=100_000.0 + 4096.0 * 3.0).contains(&minted), "{minted} IDs minted for 100,000");
    server.stop().await;
}

#[tokio::test]
async fn buffered_ids_older_than_the_age_bound_are_dropped() {
    let server = ServerBuilder::new().start().await;
    let config = BufferConfig { batch: 1000, low_water: 100, max_refills: 1, max_age: Duration::from_millis(100) };
    let client = Client::builder([server.url()]).buffer(config).connect().unwrap();
    let layout = Layout::default_snowmint();
    let first = client.next_id().await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The rest of the first batch is too old: the next ID comes from a fresh one.
    let next = client.next_id().await.unwrap();
    let age_ms = layout.tick_start_ms(layout.unpack(next).tick) - layout.tick_start_ms(layout.unpack(first).tick);
    assert!(age_ms >= 300, "an ID {age_ms} ms after the first came from the stale batch");
    assert!(SystemClock::new().wall_ms() - layout.tick_start_ms(layout.unpack(next).tick) < 200);
    server.stop().await;
}

/// An empty buffer whose refills fail on every endpoint fails its waiting callers with the
/// refill's error, and fills again once a server answers.
#[tokio::test]
async fn an_empty_buffer_fails_its_callers_when_the_refill_fails() {
    let (refusing, clock) = steppable().await;
    clock.step_wall(-60_000);
    let config = BufferConfig { batch: 100, low_water: 10, max_refills: 1, max_age: Duration::from_secs(1) };
    let client = Client::builder([refusing.url()]).buffer(config).connect().unwrap();
    let start = Instant::now();
    let error = client.next_id().await.unwrap_err();
    assert!(matches!(&error, ClientError::Unavailable(s) if s.code() == Code::Unavailable), "{error}");
    assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
    let error = client.next_id_within(Duration::from_millis(50)).await.unwrap_err();
    assert!(error.is_retriable(), "{error}");
    clock.step_wall(60_000);
    let start = Instant::now();
    loop {
        match client.next_id().await {
            Ok(_) => break,
            Err(error) => assert!(start.elapsed() < Duration::from_secs(5), "no ID after the clock came back: {error}"),
        }
    }
    refusing.stop().await;
}

/// The Rust quick start, exactly as docs/api/rust-client.md shows it, against a real server.
#[path = "../clients/rust/examples/quickstart.rs"]
#[allow(dead_code)]
mod quickstart;

#[tokio::test]
async fn the_rust_quick_start_runs_as_the_page_shows_it() {
    let server = ServerBuilder::new().start().await;
    quickstart::mint(&format!("{},{}", server.url(), server.url())).await.unwrap();
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api/rust-client.md")).unwrap();
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/clients/rust/examples/quickstart.rs")).unwrap();
    let marker = "<!-- snippet: ../../clients/rust/examples/quickstart.rs -->\n```rust\n";
    let start = page.find(marker).expect("docs/api/rust-client.md shows the Rust quick start") + marker.len();
    let shown = &page[start..start + page[start..].find("```\n").unwrap()];
    assert_eq!(
        shown, example,
        "the Rust quick start of docs/api/rust-client.md differs from clients/rust/examples/quickstart.rs"
    );
    server.stop().await;
}

/// `close()` ends every call waiting on the client at once with `Closed`: callers on an empty
/// buffer, callers of a shared (coalesced) call, and a `batch` in an attempt on a server that
/// does not answer (issue 30).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_ends_every_waiting_call_at_once() {
    let (_stub, url, task) = Stub::serve(Code::Unavailable, Duration::from_secs(30)).await;
    let buffer = BufferConfig { batch: 100, low_water: 10, max_refills: 1, max_age: Duration::from_secs(1) };
    let buffered = Client::builder([url.clone()]).timeout(Duration::from_secs(10)).buffer(buffer).connect().unwrap();
    let plain = Client::builder([url]).timeout(Duration::from_secs(10)).connect().unwrap();
    let mut waiting = Vec::new();
    for client in [&buffered, &plain] {
        for _ in 0..3 {
            let client = client.clone();
            waiting.push(tokio::spawn(async move { client.next_id().await.map(|_| ()) }));
        }
    }
    let batch = plain.clone();
    waiting.push(tokio::spawn(async move { batch.batch(5).await.map(|_| ()) }));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let closed = Instant::now();
    buffered.close();
    plain.close();
    for call in waiting {
        let result = common::join_within(call, Duration::from_secs(5), "a call waiting at close()").await;
        assert!(matches!(result, Err(ClientError::Closed)), "{result:?}");
    }
    assert!(
        closed.elapsed() < Duration::from_millis(500),
        "the waiting calls ended {:?} after close()",
        closed.elapsed()
    );
    task.abort();
}

/// `close()` closes the client's connections, though the `Client` itself is still held.
#[tokio::test]
async fn close_closes_the_connections() {
    let server = ServerBuilder::new().start().await;
    let client = Client::builder([server.url()])
        .buffer(BufferConfig { batch: 10, low_water: 2, max_refills: 1, max_age: Duration::from_secs(5) })
        .connect()
        .unwrap();
    client.next_id().await.unwrap();
    client.batch(3).await.unwrap();
    assert!(server.metric("snowmint_connections_open").await >= 1.0);
    client.close();
    let start = Instant::now();
    while server.metric("snowmint_connections_open").await > 0.0 {
        assert!(start.elapsed() < Duration::from_secs(5), "the connection is still open 5 s after close()");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(matches!(client.next_id().await, Err(ClientError::Closed)));
    server.stop().await;
}

/// A caller's deadline bounds its whole call, even behind more callers than the shared call
/// takes at once (4,096) and its queue holds (issue 30).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_deadline_holds_behind_a_full_queue() {
    let (_stub, url, task) = Stub::serve(Code::Unavailable, Duration::from_secs(30)).await;
    let client = Client::builder([url]).timeout(Duration::from_secs(10)).connect().unwrap();
    let crowd: Vec<_> = (0..9_000)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.next_id().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    let error = client.next_id_within(Duration::from_millis(200)).await.unwrap_err();
    assert!(matches!(error, ClientError::DeadlineExceeded), "{error}");
    assert!(start.elapsed() < Duration::from_millis(450), "took {:?}", start.elapsed());
    client.close();
    for caller in crowd {
        let _ = caller.await;
    }
    task.abort();
}

/// A buffered client sends nothing until it is first used, and a process that uses 10 IDs a
/// second makes the server mint a small multiple of that, not a batch per `max_age`
///.
#[tokio::test]
async fn a_buffer_refills_at_the_rate_of_use() {
    let server = ServerBuilder::new().start().await;
    let client = Client::builder([server.url()]).buffer(BufferConfig::default()).connect().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls(&server).await, 0.0, "a buffered client fetched IDs before it was used");
    let mut ids = Vec::new();
    let start = tokio::time::Instant::now();
    for n in 0..40 {
        tokio::time::sleep_until(start + Duration::from_millis(100) * n).await;
        ids.push(client.next_id().await.unwrap());
    }
    assert_unique(&ids);
    let minted = server.metric("snowmint_ids_issued_total").await;
    assert!(minted <= 3.0 * ids.len() as f64 + 20.0, "{minted} IDs minted for {} used in 4 s", ids.len());
    server.stop().await;
}

/// A buffered client of a server with a lower `--max-batch` asks for less: its callers get
/// their IDs, not the server's INVALID_ARGUMENT.
#[tokio::test]
async fn a_buffer_fits_a_server_with_a_small_max_batch() {
    let server = ServerBuilder::new().config(|c| c.max_batch = 50).start().await;
    let client = Client::builder([server.url()]).buffer(BufferConfig::default()).connect().unwrap();
    let mut ids = Vec::new();
    for _ in 0..500 {
        ids.push(client.next_id().await.unwrap());
    }
    assert_unique(&ids);
    let invalid = r#"snowmint_requests_total{code="InvalidArgument",method="BatchIds",protocol="grpc"}"#;
    assert!(server.metric(invalid).await <= 8.0, "the buffer kept asking for more than 50 at once");
    server.stop().await;
}
