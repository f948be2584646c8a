//! The gRPC port's own HTTP server and `NextId`'s direct path, spoken to over raw HTTP/2: every
//! limit tonic's path kept still holds on the direct one (request size, undecodable bytes, a
//! body that never arrives, the server's request timeout, a minter that does not answer in
//! time), the forms the direct path does not
//! take still reach tonic, every call is counted by its final code, and a connection past its
//! age is told to go away while its calls in flight finish.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::ServerBuilder;
use prost::Message;
use snowmint::clock::{Clock, SystemClock};
use snowmint::proto::{BatchIdsRequest, BatchIdsResponse, NextIdRequest, NextIdResponse};
use tokio::net::TcpStream;

const NEXT_ID: &str = "/snowmint.v1.IdService/NextId";
const BATCH_IDS: &str = "/snowmint.v1.IdService/BatchIds";

/// An HTTP/2 connection to `addr`, and the task driving it, which ends when the connection
/// closes.
async fn connect(addr: SocketAddr) -> (h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<Result<(), h2::Error>>) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    (client, tokio::spawn(connection))
}

/// `message` framed as one gRPC message.
fn framed(message: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.extend_from_slice(&[0]);
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    frame.freeze()
}

/// A call's outcome: its `grpc-status` and `grpc-message`, and the message it carried.
#[derive(Debug)]
struct Answer {
    code: tonic::Code,
    message: String,
    body: Bytes,
}

/// Starts a call of `path` with `headers`, its request stream left open for its body.
async fn start(
    client: &h2::client::SendRequest<Bytes>,
    path: &str,
    headers: &[(&str, &str)],
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let mut request = http::Request::builder()
        .method("POST")
        .uri(format!("http://127.0.0.1{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut ready = client.clone().ready().await.unwrap();
    ready.send_request(request.body(()).unwrap(), false).unwrap()
}

/// Sends a call of `path` with `headers` and, unless `None`, `body` (ending the stream);
/// reads the whole answer, within 10 s.
async fn call(
    client: &mut h2::client::SendRequest<Bytes>,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Bytes>,
) -> Answer {
    let (response, mut send) = start(client, path, headers).await;
    if let Some(body) = body {
        send.send_data(body, true).unwrap();
    }
    tokio::time::timeout(Duration::from_secs(10), read(response)).await.expect("the answer comes within 10 s")
}

async fn read(response: h2::client::ResponseFuture) -> Answer {
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let (parts, mut body) = response.into_parts();
    let mut data = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        data.extend_from_slice(&chunk);
    }
    // A trailers-only answer has its status in the headers.
    let trailers = body.trailers().await.unwrap().unwrap_or(parts.headers);
    let status = tonic::Status::from_header_map(&trailers).expect("a grpc-status");
    Answer { code: status.code(), message: status.message().to_string(), body: data.freeze() }
}

fn series(method: &str, code: &str) -> String {
    format!(r#"snowmint_requests_total{{code="{code}",method="{method}",protocol="grpc"}}"#)
}

#[tokio::test]
async fn a_plain_next_id_keeps_every_limit_and_the_other_forms_still_reach_tonic() {
    // The strict policy: a clock a little behind makes the minter wait.
    let (server, clock) = ServerBuilder::new()
        .strict()
        .config(|c| c.limits.request_timeout = Duration::from_millis(400))
        .start_on_manual_clock()
        .await;
    common::client(server.grpc).await.next_id(NextIdRequest::default()).await.unwrap();
    let (mut client, _connection) = connect(server.grpc).await;

    // The plain call: one ID, in one message.
    let ok = call(&mut client, NEXT_ID, &[], Some(framed(&[]))).await;
    assert_eq!(ok.code, tonic::Code::Ok, "{ok:?}");
    let id = NextIdResponse::decode(&ok.body[5..]).unwrap().id;
    assert_eq!(&ok.body[..5], &[0, 0, 0, 0, 9][..], "one uncompressed message of 9 bytes");
    assert!(id > 0);

    // Over --max-request-bytes (16 KiB): refused before it is read whole.
    let big = call(&mut client, NEXT_ID, &[], Some(framed(&vec![0; 20_000]))).await;
    assert_eq!(big.code, tonic::Code::OutOfRange, "{big:?}");
    assert!(big.message.contains("16384"), "{big:?}");
    // Over the limit in several frames, so that no prefix is read before the limit is hit.
    let (response, mut send) = start(&client, NEXT_ID, &[]).await;
    send.send_data(Bytes::from_static(&[0, 0, 0]), false).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    send.send_data(Bytes::from(vec![0; 20_000]), true).unwrap();
    let split = tokio::time::timeout(Duration::from_secs(10), read(response)).await.unwrap();
    assert_eq!(split.code, tonic::Code::OutOfRange, "{split:?}");
    assert!(split.message.contains("more than 16384 bytes"), "{split:?}");
    // Bytes that are not a NextIdRequest: field 1 length-delimited where a bool belongs.
    let garbage = BatchIdsResponse { ids: vec![1, 2, 3], ..Default::default() }.encode_to_vec();
    let bad = call(&mut client, NEXT_ID, &[], Some(framed(&garbage))).await;
    assert_eq!(bad.code, tonic::Code::Internal, "{bad:?}");
    // A body with no message at all, and one with a second message after the first.
    let empty = call(&mut client, NEXT_ID, &[], Some(Bytes::new())).await;
    assert_eq!(empty.code, tonic::Code::Internal, "{empty:?}");
    let two = call(&mut client, NEXT_ID, &[], Some([framed(&[]), framed(&[])].concat().into())).await;
    assert_eq!(two.code, tonic::Code::Internal, "{two:?}");
    // A compressed message the call did not announce.
    let flagged = call(&mut client, NEXT_ID, &[], Some(Bytes::from_static(&[1, 0, 0, 0, 0]))).await;
    assert_eq!(flagged.code, tonic::Code::Internal, "{flagged:?}");

    // A body that never comes: the server's request timeout ends the call, as on every path.
    let started = Instant::now();
    let stalled = call(&mut client, NEXT_ID, &[], None).await;
    assert_eq!(stalled.code, tonic::Code::DeadlineExceeded, "{stalled:?}");
    assert!(started.elapsed() >= Duration::from_millis(350), "{:?}", started.elapsed());

    // A compressed call is not the plain form: tonic answers it, and says why it cannot.
    let gzip = call(&mut client, NEXT_ID, &[("grpc-encoding", "gzip")], Some(framed(&[]))).await;
    assert_eq!(gzip.code, tonic::Code::Unimplemented, "{gzip:?}");
    assert!(gzip.message.contains("gzip"), "{gzip:?}");

    // The clock falls behind and stays there: the minter refuses near the request timeout
    // (less its margin), saying why, and sooner for a caller with a shorter grpc-timeout.
    clock.step_wall(-4);
    let started = Instant::now();
    let waited = call(&mut client, NEXT_ID, &[], Some(framed(&[]))).await;
    assert_eq!(waited.code, tonic::Code::Unavailable, "{waited:?}");
    assert!(waited.message.contains("could not mint before the call's deadline"), "{waited:?}");
    let waited_for = started.elapsed();
    assert!(waited_for >= Duration::from_millis(300), "{waited_for:?}");
    let started = Instant::now();
    let hurried = call(&mut client, NEXT_ID, &[("grpc-timeout", "100m")], Some(framed(&[]))).await;
    assert_eq!(hurried.code, tonic::Code::Unavailable, "{hurried:?}");
    assert!(started.elapsed() < waited_for, "{:?} against {waited_for:?}", started.elapsed());
    clock.step_wall(4);
    let after = call(&mut client, NEXT_ID, &[], Some(framed(&[]))).await;
    assert_eq!(after.code, tonic::Code::Ok, "{after:?}");
    assert!(NextIdResponse::decode(&after.body[5..]).unwrap().id > id);

    // Each counted once by its final code, on both paths.
    for (code, calls) in [
        ("OK", 3.0),
        ("OutOfRange", 2.0),
        ("Internal", 4.0),
        ("DeadlineExceeded", 1.0),
        ("Unimplemented", 1.0),
        ("Unavailable", 2.0),
    ] {
        assert_eq!(server.metric(&series("NextId", code)).await, calls, "{code}");
    }
    server.stop().await;
}

/// On tonic's path too, the minter's deadline runs from the call's arrival, as the outer timer
/// does: a call whose body came late is refused by the minter, with the reason, before that
/// timer would end it with `CANCELLED`.
#[tokio::test]
async fn a_batch_whose_body_came_late_is_refused_with_the_reason_before_its_deadline() {
    // The strict policy: a clock a little behind makes the minter wait, to the deadline.
    let (server, clock) = ServerBuilder::new().strict().start_on_manual_clock().await;
    let (mut client, _connection) = connect(server.grpc).await;
    assert_eq!(call(&mut client, NEXT_ID, &[], Some(framed(&[]))).await.code, tonic::Code::Ok);
    clock.step_wall(-4);
    let (response, mut send) = start(&client, BATCH_IDS, &[("grpc-timeout", "600m")]).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    send.send_data(framed(&BatchIdsRequest { count: 10, opaque: false }.encode_to_vec()), true).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), read(response)).await.unwrap();
    assert_eq!(answer.code, tonic::Code::Unavailable, "{answer:?}");
    assert!(answer.message.contains("could not mint before the call's deadline"), "{answer:?}");
    clock.step_wall(4);
    server.stop().await;
}

/// A system clock whose `awake` reading blocks while `stalled` (at most 10 s): the minter reads
/// it on every pass and nothing else does, so it stalls the minter's task alone, as a minter
/// kept off a busy core for long does.
#[derive(Clone, Default)]
struct StallingClock {
    inner: SystemClock,
    stalled: Arc<AtomicBool>,
}

impl Clock for StallingClock {
    fn wall_us(&self) -> i64 {
        self.inner.wall_us()
    }

    fn boot_time(&self) -> Duration {
        self.inner.boot_time()
    }

    fn awake(&self) -> Duration {
        let started = Instant::now();
        while self.stalled.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.inner.awake()
    }
}

/// The direct path keeps the call's deadline (the front door's, as for every path), however
/// long the minter takes: calls waiting for a stalled minter, and calls waiting to hand their request to
/// its full queue, are all answered by their `grpc-timeout`, and nothing is minted for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_plain_next_id_keeps_its_deadline_while_the_minter_is_stalled() {
    let clock = StallingClock::default();
    // Room for every call on one connection: the minter's queue full, and more.
    let calls = snowmint::node::QUEUE + 100;
    let server = ServerBuilder::new()
        .clock(clock.clone())
        .config(|c| c.limits.max_concurrent_streams = calls as u32 + 100)
        .start()
        .await;
    let (mut client, _connection) = connect(server.grpc).await;
    assert_eq!(call(&mut client, NEXT_ID, &[], Some(framed(&[]))).await.code, tonic::Code::Ok);

    clock.stalled.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let mut waiting = tokio::task::JoinSet::new();
    for _ in 0..calls {
        let (response, mut send) = start(&client, NEXT_ID, &[("grpc-timeout", "300m")]).await;
        send.send_data(framed(&[]), true).unwrap();
        waiting.spawn(read(response));
    }
    // Each call is due 300 ms after it was sent; the minter stays stalled for all of this.
    let mut codes = std::collections::BTreeMap::new();
    let mut hand_over = 0;
    let limit = Duration::from_secs(6);
    while let Ok(Some(answer)) =
        tokio::time::timeout(limit.saturating_sub(started.elapsed()), waiting.join_next()).await
    {
        let answer = answer.unwrap();
        hand_over += usize::from(answer.message.contains("queue stayed full"));
        *codes.entry(format!("{:?}", answer.code)).or_insert(0) += 1;
    }
    let answered: usize = codes.values().sum();
    clock.stalled.store(false, Ordering::SeqCst);
    assert_eq!(
        answered, calls,
        "{answered} of {calls} calls answered within {limit:?} of the first (each had 300 ms) while the minter stalled: {codes:?}"
    );
    assert!(codes.keys().all(|code| code == "DeadlineExceeded" || code == "Unavailable"), "{codes:?}");
    assert!(hand_over > 0, "no call was refused while waiting to hand its request over: {codes:?}");

    // The minter back: it mints nothing for the calls that were given up on, and serves anew.
    let fresh = call(&mut client, NEXT_ID, &[], Some(framed(&[]))).await;
    assert_eq!(fresh.code, tonic::Code::Ok, "{fresh:?}");
    let dropped = server.metric(r#"snowmint_refused_on_arrival_total{reason="deadline"}"#).await;
    assert!(dropped >= snowmint::node::QUEUE as f64, "{dropped} requests dropped past their deadline");
    assert_eq!(server.metric("snowmint_ids_discarded_total").await, 0.0);
    assert_eq!(server.metric("snowmint_ids_issued_total").await, 2.0);
    server.stop().await;
}

#[tokio::test]
async fn a_connection_past_its_age_is_told_to_go_away_and_its_calls_in_flight_finish() {
    let server = ServerBuilder::new()
        .config(|c| {
            c.limits.max_connection_age = Duration::from_millis(300);
            c.limits.request_timeout = Duration::from_secs(5);
        })
        .start()
        .await;
    let (mut client, connection) = connect(server.grpc).await;
    assert_eq!(call(&mut client, NEXT_ID, &[], Some(framed(&[]))).await.code, tonic::Code::Ok);

    // A call starts, and its body comes only once the connection is past its age.
    let (response, mut send) = start(&client, NEXT_ID, &[]).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Told to go away: no new call is taken on this connection.
    let refused = match client.clone().ready().await {
        Err(e) => e.is_go_away(),
        Ok(mut ready) => {
            let request = http::Request::builder().method("POST").uri(format!("http://127.0.0.1{NEXT_ID}"));
            match ready.send_request(request.body(()).unwrap(), true) {
                Err(e) => e.is_go_away(),
                Ok((response, _)) => response.await.is_err_and(|e| e.is_go_away() || e.reason().is_some()),
            }
        }
    };
    assert!(refused, "a new call on a connection past its age is refused");
    // The call in flight finishes.
    send.send_data(framed(&[]), true).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), read(response)).await.unwrap();
    assert_eq!(answer.code, tonic::Code::Ok, "{answer:?}");
    // Then the connection closes, long before the grace of 5 s.
    let closed = common::join_within(connection, Duration::from_secs(3), "the connection's close").await;
    assert!(closed.is_ok(), "{closed:?}");
    // A new connection is served as ever.
    let (mut fresh, _connection) = connect(server.grpc).await;
    assert_eq!(call(&mut fresh, NEXT_ID, &[], Some(framed(&[]))).await.code, tonic::Code::Ok);
    server.stop().await;
}
