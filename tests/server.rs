//! The real server over gRPC: uniqueness under concurrent load, request validation, Decode,
//! health, reflection and the admin endpoint.

mod common;

use std::time::{Duration, Instant};

use common::{ServerBuilder, TestServer, assert_increasing, assert_unique, metric_value};
use snowmint::clock::SystemClock;
use snowmint::metrics::CODES;
use snowmint::proto::{BatchIdsRequest, BatchIdsResponse, DecodeRequest, DecodeResponse, NextIdRequest};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// The IDs asked for and not yet answered are bounded server-wide: every queued batch holds
/// memory for its full count. Past the bound a call gets RESOURCE_EXHAUSTED at once, counted
/// by its code; the calls already queued are served.
#[tokio::test]
async fn ids_outstanding_are_bounded_and_the_excess_is_refused_and_counted() {
    // The clock stands still: one tick of 4,096 IDs, so big batches queue up.
    let (server, clock) = ServerBuilder::new()
        .config(|c| {
            c.max_outstanding_ids = 100_000;
            c.max_wait = Duration::from_secs(5);
        })
        .start_on_manual_clock()
        .await;
    let client = server.client().await;
    let mut first = client.clone();
    let queued =
        tokio::spawn(async move { first.batch_ids(BatchIdsRequest { count: 65_536, ..Default::default() }).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!queued.is_finished(), "the first batch waits for ticks");
    let status = client.clone().batch_ids(BatchIdsRequest { count: 65_536, ..Default::default() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("--max-outstanding-ids"), "{}", status.message());
    let refused = r#"snowmint_requests_total{code="ResourceExhausted",method="BatchIds",protocol="grpc"}"#;
    assert_eq!(server.metric(refused).await, 1.0);
    // Time moves on, a tick at a time: the queued batch completes, and the room is free again.
    for _ in 0..40 {
        if queued.is_finished() {
            break;
        }
        clock.advance(Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ids = queued.await.unwrap().unwrap().into_inner().ids;
    assert_eq!(ids.len(), 65_536);
    assert_increasing(&ids);
    let mut again = client.clone();
    let second =
        tokio::spawn(async move { again.batch_ids(BatchIdsRequest { count: 65_536, ..Default::default() }).await });
    for _ in 0..40 {
        if second.is_finished() {
            break;
        }
        clock.advance(Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(second.await.unwrap().unwrap().into_inner().ids.len(), 65_536);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundred_thousand_ids_from_sixteen_callers_are_unique_and_increasing_per_caller() {
    let server = ServerBuilder::new().start().await;
    const CALLERS: usize = 16;
    const PER_CALLER: usize = 6_250; // 100,000 in all
    let mut tasks = Vec::new();
    for caller in 0..CALLERS {
        let mut client = server.client().await;
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::with_capacity(PER_CALLER);
            let mut round = 0usize;
            while ids.len() < PER_CALLER {
                round += 1;
                // Mix single calls with batches of varied sizes (1..=500).
                if (round + caller).is_multiple_of(3) {
                    ids.push(client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id);
                } else {
                    let count = ((round * 37 + caller * 11) % 500 + 1).min(PER_CALLER - ids.len()) as u32;
                    let batch = client
                        .batch_ids(BatchIdsRequest { count, ..Default::default() })
                        .await
                        .unwrap()
                        .into_inner()
                        .ids;
                    assert_eq!(batch.len(), count as usize);
                    ids.extend(batch);
                }
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let ids = common::join_within(task, Duration::from_secs(60), "a caller").await;
        assert_eq!(ids.len(), PER_CALLER);
        assert_increasing(&ids);
        all.extend(ids);
    }
    assert_eq!(all.len(), 100_000);
    assert_unique(&all);
    // Every ID carries this server's worker ID and a time near now.
    let layout = snowmint::layout::Layout::default_snowmint();
    let now = SystemClock::new();
    for &id in &all {
        let parts = layout.unpack(id);
        assert_eq!(parts.worker, 5);
        let ms = layout.tick_start_ms(parts.tick);
        assert!((ms - snowmint::clock::Clock::wall_ms(&now)).abs() < 60_000, "time {ms} far from now");
    }
    assert_eq!(server.metric("snowmint_ids_issued_total").await, 100_000.0);
    server.stop().await;
}

#[tokio::test]
async fn batch_count_out_of_range_names_the_limit() {
    let server = ServerBuilder::new().start().await;
    let mut client = server.client().await;
    for count in [0, 65_537, u32::MAX] {
        let status = client.batch_ids(BatchIdsRequest { count, ..Default::default() }).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "count {count}");
        assert!(status.message().contains("65536"), "{}", status.message());
    }
    let max = client.batch_ids(BatchIdsRequest { count: 65_536, ..Default::default() }).await.unwrap().into_inner().ids;
    assert_eq!(max.len(), 65_536);
    assert_increasing(&max);
    assert_eq!(
        server.metric(r#"snowmint_requests_total{code="InvalidArgument",method="BatchIds",protocol="grpc"}"#).await,
        3.0
    );
    assert_eq!(server.metric(r#"snowmint_requests_total{code="OK",method="BatchIds",protocol="grpc"}"#).await, 1.0);
    server.stop().await;
}

#[tokio::test]
async fn decode_splits_own_ids_and_rejects_unknown_layouts() {
    let server = ServerBuilder::new().start().await;
    let mut client = server.client().await;
    let id = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;
    let decoded =
        client.decode(DecodeRequest { id, layout: String::new(), ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(decoded.id, id);
    assert_eq!(decoded.worker_id, 5);
    assert_eq!(decoded.layout, "snowmint");
    assert!(decoded.time.ends_with('Z') && decoded.time.len() == 24, "{}", decoded.time);
    let now_ms = snowmint::clock::Clock::wall_ms(&SystemClock::new());
    assert!((now_ms - decoded.unix_ms).abs() < 10_000);

    let status = client.decode(DecodeRequest { id, layout: "uuid".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    for name in ["twitter", "discord", "instagram", "sonyflake"] {
        assert!(status.message().contains(name), "{}", status.message());
    }
    let status =
        client.decode(DecodeRequest { id: 1 << 63, layout: String::new(), ..Default::default() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    server.stop().await;
}

#[tokio::test]
async fn health_reflection_and_admin_endpoints() {
    let server = ServerBuilder::new().start().await;
    let channel = common::channel(server.grpc).await;
    let mut health = HealthClient::new(channel.clone());
    // The minter reports serving as soon as it has a worker and a reservation.
    let deadline = Instant::now() + Duration::from_secs(5);
    for service in ["", "snowmint.v1.IdService"] {
        loop {
            let status =
                health.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner().status;
            if status == ServingStatus::Serving as i32 {
                break;
            }
            assert!(Instant::now() < deadline, "{service:?} not serving: {status}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // Both reflection versions list the ID service.
    {
        use tonic_reflection::pb::v1::ServerReflectionRequest;
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
        let mut reflection = ServerReflectionClient::new(channel.clone());
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = reflection.server_reflection_info(tokio_stream::iter([request])).await.unwrap().into_inner();
        let response = stream.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
            panic!("{response:?}")
        };
        let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"snowmint.v1.IdService"), "{names:?}");
        assert!(names.contains(&"grpc.health.v1.Health"), "{names:?}");
    }
    {
        use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
        let mut reflection = ServerReflectionClient::new(channel);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol("snowmint.v1.IdService".into())),
        };
        let mut stream = reflection.server_reflection_info(tokio_stream::iter([request])).await.unwrap().into_inner();
        let response = stream.message().await.unwrap().unwrap();
        let Some(MessageResponse::FileDescriptorResponse(files)) = response.message_response else {
            panic!("{response:?}")
        };
        assert!(!files.file_descriptor_proto.is_empty());
    }

    assert_eq!(server.admin_get("/healthz").await.0, 200);
    let (code, body) = server.admin_get("/readyz").await;
    assert_eq!((code, body.as_str()), (200, "ready\n"));
    let (code, metrics) = server.admin_get("/metrics").await;
    assert_eq!(code, 200);
    for name in ["snowmint_ids_issued_total", "snowmint_requests_total", "snowmint_request_duration_seconds_bucket"] {
        assert!(metrics.contains(name), "{name} missing");
    }
    assert_eq!(server.metric("snowmint_worker_id").await, 5.0);
    assert_eq!(server.metric("snowmint_minting").await, 1.0);
    server.stop().await;
}

/// Small unary calls must not wait for Nagle's algorithm (~40 ms a call without
/// TCP_NODELAY on accepted sockets).
#[tokio::test]
async fn single_calls_do_not_wait_for_nagle() {
    let server = ServerBuilder::new().start().await;
    let mut client = server.client().await;
    client.next_id(NextIdRequest::default()).await.unwrap();
    let mut times = Vec::new();
    for _ in 0..21 {
        let start = Instant::now();
        client.next_id(NextIdRequest::default()).await.unwrap();
        times.push(start.elapsed());
    }
    times.sort();
    let median = times[times.len() / 2];
    assert!(median < Duration::from_millis(20), "median NextId took {median:?}");
    server.stop().await;
}

/// A NextId on one connection is not held behind another connection's queued batches: the
/// minter shares each tick among connections, told apart by their peer addresses. The clock
/// moves a tick at a time; served in arrival order, the NextId would wait 128 ticks.
#[tokio::test]
async fn a_next_id_is_not_held_behind_another_connections_batches() {
    let (server, clock) =
        ServerBuilder::new().config(|c| c.max_wait = Duration::from_secs(30)).start_on_manual_clock().await;
    let bulk = server.client().await;
    let batches: Vec<_> = (0..8)
        .map(|_| {
            let mut bulk = bulk.clone();
            tokio::spawn(async move { bulk.batch_ids(BatchIdsRequest { count: 65_536, ..Default::default() }).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut single = server.client().await;
    let next = tokio::spawn(async move { single.next_id(NextIdRequest::default()).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The tick's sequence is spent: everyone waits for the next tick, and the gauge says so.
    assert!(!next.is_finished());
    assert_eq!(server.metric("snowmint_queue_length").await, 9.0);
    let mut ticks = 0;
    while !next.is_finished() && ticks < 100 {
        clock.advance(Duration::from_millis(1));
        ticks += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    next.await.unwrap().unwrap();
    assert!(ticks <= 2, "the NextId waited {ticks} ticks behind the other connection's batches");
    assert_eq!(server.metric(r#"snowmint_queue_wait_seconds_count{method="NextId"}"#).await, 1.0);
    assert!(batches.iter().all(|b| !b.is_finished()), "the batches cannot be done yet");
    // The batches complete once the clock has moved through their ticks.
    for _ in 0..1_000 {
        if batches.iter().all(|b| b.is_finished()) {
            break;
        }
        clock.advance(Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut all = Vec::new();
    for batch in batches {
        let ids = batch.await.unwrap().unwrap().into_inner().ids;
        assert_eq!(ids.len(), 65_536);
        assert_increasing(&ids);
        all.extend(ids);
    }
    assert_unique(&all);
    server.stop().await;
}

/// Every call to the `IdService` is counted by the code it ended with, the calls no handler
/// sees included (too large, malformed, a method the service does not have, ended by the
/// server's request timeout), with its latency; every code's series is there from the first
/// scrape.
#[tokio::test]
async fn every_call_is_counted_by_its_final_code_even_when_no_handler_sees_it() {
    // The strict policy, which waits out a small step back (the hybrid one mints through it).
    let (server, clock) = ServerBuilder::new()
        .strict()
        .config(|c| c.limits.request_timeout = Duration::from_millis(300))
        .start_on_manual_clock()
        .await;
    let labels = ["NextId", "BatchIds", "Decode", "Reveal", "other"];
    let scrape = server.admin_get("/metrics").await.1;
    for method in labels {
        for code in CODES {
            let series = format!(r#"snowmint_requests_total{{code="{code}",method="{method}",protocol="grpc"}}"#);
            assert_eq!(metric_value(&scrape, &series), 0.0, "{series} before any call");
        }
    }

    let mut client = server.client().await;
    client.next_id(NextIdRequest::default()).await.unwrap();
    let status = client.batch_ids(BatchIdsRequest { count: 0, ..Default::default() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    // Above the 16 KiB request limit: refused while decoding, before any handler.
    let status =
        client.decode(DecodeRequest { id: 1, layout: "x".repeat(1 << 20), ..Default::default() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    // Bytes that are not a DecodeRequest: field 1 length-delimited where a fixed64 belongs.
    let status = raw_call(
        &server,
        "/snowmint.v1.IdService/Decode",
        BatchIdsResponse { ids: vec![1, 2, 3], ..Default::default() },
    )
    .await;
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    let status = raw_call(&server, "/snowmint.v1.IdService/Mint", NextIdRequest::default()).await;
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");
    // The clock steps back a little and stays there: the calls wait. Both are refused by the
    // minter within the server's 300 ms request timeout, saying why, whichever path answers
    // them (NextId the direct one, BatchIds tonic's).
    clock.step_wall(-4);
    let status = client.next_id(NextIdRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("deadline"), "{status:?}");
    let status = client.batch_ids(BatchIdsRequest { count: 1, ..Default::default() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("deadline"), "{status:?}");
    clock.step_wall(4);
    // A call whose body never arrives is ended by the front door at its limit.
    let (code, _, _) = stalled_grpc(server.grpc, "/snowmint.v1.IdService/Decode").await;
    assert_eq!(code, tonic::Code::DeadlineExceeded);

    let expected = [
        ("NextId", "OK"),
        ("NextId", "Unavailable"),
        ("BatchIds", "InvalidArgument"),
        ("BatchIds", "Unavailable"),
        ("Decode", "OutOfRange"),
        ("Decode", "Internal"),
        ("Decode", "DeadlineExceeded"),
        ("other", "Unimplemented"),
    ];
    // A call ended at its limit is counted as it is dropped, just after the client hears of it.
    let start = Instant::now();
    let scrape = loop {
        let scrape = server.admin_get("/metrics").await.1;
        let ended = r#"snowmint_requests_total{code="DeadlineExceeded",method="Decode",protocol="grpc"}"#;
        if metric_value(&scrape, ended) == 1.0 || start.elapsed() > Duration::from_secs(5) {
            break scrape;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for method in labels {
        for code in CODES {
            let series = format!(r#"snowmint_requests_total{{code="{code}",method="{method}",protocol="grpc"}}"#);
            let want = if expected.contains(&(method, code)) { 1.0 } else { 0.0 };
            assert_eq!(metric_value(&scrape, &series), want, "{series}");
        }
        let calls = expected.iter().filter(|(m, _)| *m == method).count() as f64;
        let timed = format!(r#"snowmint_request_duration_seconds_count{{method="{method}",protocol="grpc"}}"#);
        assert_eq!(metric_value(&scrape, &timed), calls, "{timed}");
    }
    server.stop().await;
}

/// One timeout rule, one outcome, whichever path answers a call (issue 25): with the server's
/// 300 ms request timeout, a call the minter cannot serve in time (the clock held behind) is
/// refused by it with `UNAVAILABLE` and the reason, before the limit, on the direct `NextId`
/// path, on tonic's gRPC path and over Connect; a call whose body never arrives is ended at
/// the limit with `DEADLINE_EXCEEDED` on all three, and counted so.
#[tokio::test]
async fn one_timeout_rule_gives_one_outcome_on_every_path() {
    let (server, clock) = ServerBuilder::new()
        .strict()
        .config(|c| c.limits.request_timeout = Duration::from_millis(300))
        .start_on_manual_clock()
        .await;
    let mut client = server.client().await;
    client.next_id(NextIdRequest::default()).await.unwrap();

    clock.step_wall(-4);
    let in_time = |took: Duration| took >= Duration::from_millis(200) && took < Duration::from_millis(300);
    let start = Instant::now();
    let direct = client.next_id(NextIdRequest::default()).await.unwrap_err();
    let took = start.elapsed();
    assert_eq!((direct.code(), direct.message().contains("deadline")), (tonic::Code::Unavailable, true), "{direct:?}");
    assert!(in_time(took), "direct path: {took:?}");
    let start = Instant::now();
    let routed = client.batch_ids(BatchIdsRequest { count: 1, ..Default::default() }).await.unwrap_err();
    let took = start.elapsed();
    assert_eq!((routed.code(), routed.message().contains("deadline")), (tonic::Code::Unavailable, true), "{routed:?}");
    assert!(in_time(took), "tonic's path: {took:?}");
    for (method, body) in [("NextId", "{}"), ("BatchIds", r#"{"count":1}"#)] {
        let start = Instant::now();
        let answer = http1(server.grpc, &connect_post(method, body, body.len())).await;
        let took = start.elapsed();
        assert!(answer.starts_with("HTTP/1.1 503"), "Connect {method}: {answer}");
        assert!(answer.contains(r#""code":"unavailable""#) && answer.contains("deadline"), "{answer}");
        assert!(in_time(took), "Connect {method}: {took:?}");
    }
    clock.step_wall(4);

    let at_limit = |took: Duration| took >= Duration::from_millis(290) && took < Duration::from_millis(1_500);
    for path in ["/snowmint.v1.IdService/NextId", "/snowmint.v1.IdService/BatchIds"] {
        let (code, message, took) = stalled_grpc(server.grpc, path).await;
        assert_eq!(code, tonic::Code::DeadlineExceeded, "{path}: {message}");
        assert!(message.contains("300 ms"), "{message}");
        assert!(at_limit(took), "{path}: {took:?}");
    }
    let start = Instant::now();
    let answer = http1(server.grpc, &connect_post("NextId", "{", 10)).await;
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    assert!(answer.contains(r#""code":"deadline_exceeded""#) && answer.contains("300 ms"), "{answer}");
    assert!(at_limit(start.elapsed()), "{:?}", start.elapsed());

    // Each counted by the code it ended with: the ends by the limit once their futures drop.
    let expected = [
        ("grpc", "NextId", "Unavailable"),
        ("grpc", "BatchIds", "Unavailable"),
        ("connect", "NextId", "Unavailable"),
        ("connect", "BatchIds", "Unavailable"),
        ("grpc", "NextId", "DeadlineExceeded"),
        ("grpc", "BatchIds", "DeadlineExceeded"),
        ("connect", "NextId", "DeadlineExceeded"),
    ];
    let series = |(protocol, method, code): (&str, &str, &str)| {
        format!(r#"snowmint_requests_total{{code="{code}",method="{method}",protocol="{protocol}"}}"#)
    };
    let start = Instant::now();
    let scrape = loop {
        let scrape = server.admin_get("/metrics").await.1;
        if expected.iter().all(|&e| metric_value(&scrape, &series(e)) == 1.0)
            || start.elapsed() > Duration::from_secs(5)
        {
            break scrape;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for e in expected {
        assert_eq!(metric_value(&scrape, &series(e)), 1.0, "{}", series(e));
    }
    for protocol in ["grpc", "connect"] {
        for method in ["NextId", "BatchIds"] {
            let cancelled = series((protocol, method, "Cancelled"));
            assert_eq!(metric_value(&scrape, &cancelled), 0.0, "{cancelled}");
        }
    }
    server.stop().await;
}

/// A Connect `POST` of `method` over HTTP/1.1 that declares `length` bytes of body and sends
/// `body` (fewer, for a body that never arrives whole).
fn connect_post(method: &str, body: &str, length: usize) -> String {
    format!(
        "POST /snowmint.v1.IdService/{method} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n{body}"
    )
}

/// Writes `request` on a new connection and reads the first answer, within the tests' limit.
async fn http1(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = vec![0; 8192];
    let n = tokio::time::timeout(common::CALL_LIMIT, stream.read(&mut answer)).await.unwrap().unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

/// A gRPC call to `path` over HTTP/2 whose body never arrives whole (three bytes of a
/// message's prefix, and the stream left open): the code it ended with, its message, and
/// how long that took.
async fn stalled_grpc(addr: std::net::SocketAddr, path: &str) -> (tonic::Code, String, Duration) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let connection = tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let start = Instant::now();
    let (response, mut body) = client.send_request(request, false).unwrap();
    body.send_data(bytes::Bytes::from_static(&[0, 0, 0]), false).unwrap();
    let response = tokio::time::timeout(common::CALL_LIMIT, response).await.unwrap().unwrap();
    let took = start.elapsed();
    let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let code = tonic::Code::from_bytes(header("grpc-status").as_bytes());
    // Percent-encoded, as gRPC sends it; only spaces matter to the callers here.
    let message = header("grpc-message").replace("%20", " ");
    drop(body);
    connection.abort();
    (code, message, took)
}

/// Sends `message` to `path` as it is, whatever the method expects there; the call's status.
async fn raw_call<M: prost::Message + Default + Send + Sync + 'static>(
    server: &TestServer,
    path: &'static str,
    message: M,
) -> tonic::Status {
    let channel = common::channel(server.grpc).await;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<M, DecodeResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    grpc.unary(tonic::Request::new(message), path, codec).await.unwrap_err()
}
