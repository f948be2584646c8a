//! Each branch of the clock policy, over the real server with a manual clock: a small step
//! back is waited out, a large one is refused at once and recovers by itself, no call waits
//! past its deadline, an exhausted sequence waits for the next tick, and a forward jump is
//! followed by the reservation.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TestServer, assert_increasing, config};
use snowmint::clock::{Clock, ManualClock, SystemClock};
use snowmint::layout::Layout;
use snowmint::proto::{BatchIdsRequest, NextIdRequest};

async fn start() -> (TestServer, ManualClock, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(SystemClock::new().wall_ms());
    let server = TestServer::start(config(dir.path()), Arc::new(clock.clone())).await;
    (server, clock, dir)
}

/// Waits until `/readyz` answers `code`, at most 5 s.
async fn wait_ready(server: &TestServer, code: u16) -> String {
    let start = Instant::now();
    loop {
        let (got, body) = server.admin_get("/readyz").await;
        if got == code {
            return body;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "readyz stayed {got}: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn small_step_back_is_waited_out() {
    let (server, clock, _dir) = start().await;
    let mut client = server.client().await;
    let first = client.next_id(NextIdRequest {}).await.unwrap().into_inner().id;

    clock.step_wall(-4); // within the 5 ms threshold
    let mut waiting = client.clone();
    let call = tokio::spawn(async move { waiting.next_id(NextIdRequest {}).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!call.is_finished(), "a call during a small step back waits for the clock");
    assert_eq!(wait_ready(&server, 200).await, "ready\n", "a small step back keeps the server ready");

    clock.step_wall(4);
    let second = common::join_within(call, Duration::from_secs(5), "the waiting call").await.unwrap().into_inner().id;
    assert!(second > first);
    assert_eq!(server.metric(r#"snowmint_clock_backward_total{action="waited"}"#).await, 1.0);
    assert_eq!(server.metric(r#"snowmint_clock_backward_total{action="refused"}"#).await, 0.0);
    server.stop().await;
}

#[tokio::test]
async fn large_step_back_is_refused_at_once_and_recovers_by_itself() {
    let (server, clock, _dir) = start().await;
    let mut client = server.client().await;
    let first = client.next_id(NextIdRequest {}).await.unwrap().into_inner().id;

    clock.step_wall(-10_000);
    let start = Instant::now();
    let status = client.next_id(NextIdRequest {}).await.unwrap_err();
    assert!(start.elapsed() < Duration::from_millis(500), "refusal took {:?}", start.elapsed());
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(status.message().contains("behind"), "{}", status.message());
    let status = client.batch_ids(BatchIdsRequest { count: 10 }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(wait_ready(&server, 503).await.contains("behind"));
    assert_eq!(server.metric(r#"snowmint_clock_backward_total{action="refused"}"#).await, 1.0);
    assert_eq!(server.metric("snowmint_clock_backward_seconds_count").await, 1.0);
    assert_eq!(server.metric("snowmint_minting").await, 0.0);

    // The clock comes back past the last tick used: ready again with no call needed.
    clock.step_wall(10_001);
    wait_ready(&server, 200).await;
    let second = client.next_id(NextIdRequest {}).await.unwrap().into_inner().id;
    assert!(second > first);
    assert_eq!(
        server.metric(r#"snowmint_requests_total{code="Unavailable",method="NextId",protocol="grpc"}"#).await,
        1.0
    );
    server.stop().await;
}

/// A call that cannot be served gets the server's own refusal before its deadline. The
/// deadline travels in `grpc-timeout`, and this client does not enforce it, so the outcome
/// is the server's alone: a tonic client's own timer, racing the answer home over a loaded
/// machine's loopback, would turn a refusal 15 ms early into a client-side timeout.
#[tokio::test]
async fn no_call_waits_past_its_deadline() {
    let (server, clock, _dir) = start().await;
    let mut client = server.client().await;
    client.next_id(NextIdRequest {}).await.unwrap();
    clock.step_wall(-5); // waited out, but the clock never comes back in this test
    let start = Instant::now();
    let (code, message) =
        common::call_with_unenforced_deadline(server.grpc, "/snowmint.v1.IdService/NextId", "150m").await;
    let took = start.elapsed();
    // UNAVAILABLE from the minter, sent before the deadline; at the deadline itself the
    // server's transport would have dropped the call and answered CANCELLED.
    assert_eq!(code, tonic::Code::Unavailable, "{message} after {took:?}");
    assert!(message.contains("deadline"), "{message}");
    assert!(took >= Duration::from_millis(100), "gave up long before the deadline: {took:?}");

    // Without a deadline, the configured maximum wait (1 s) bounds the call.
    let start = Instant::now();
    let status = client.next_id(NextIdRequest {}).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(start.elapsed() < Duration::from_millis(1_500), "{:?}", start.elapsed());
    server.stop().await;
}

#[tokio::test]
async fn exhausted_sequence_waits_for_the_next_tick() {
    let (server, clock, _dir) = start().await;
    let mut client = server.client().await;
    // The clock is frozen: 5,000 IDs need two ticks of 4,096.
    let mut waiting = client.clone();
    let call = tokio::spawn(async move { waiting.batch_ids(BatchIdsRequest { count: 5_000 }).await });
    // Once the minter has run out of the tick (however long the call took to reach it on
    // a loaded machine), it waits as long as the clock stays: 100 ms here.
    let start = Instant::now();
    while server.metric("snowmint_sequence_exhausted_total").await < 1.0 {
        assert!(start.elapsed() < Duration::from_secs(5), "the sequence never ran out");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!call.is_finished(), "the batch waits for the next tick");
    clock.advance(Duration::from_millis(1));
    let ids = common::join_within(call, Duration::from_secs(5), "the batch").await.unwrap().into_inner().ids;
    assert_eq!(ids.len(), 5_000);
    assert_increasing(&ids);
    let layout = Layout::default_snowmint();
    let first = layout.unpack(ids[0]);
    let last = layout.unpack(ids[4_999]);
    assert_eq!(last.tick, first.tick + 1, "the batch spans two ticks");
    assert_eq!(server.metric("snowmint_sequence_exhausted_total").await, 1.0);
    assert!(server.metric("snowmint_sequence_wait_seconds_total").await > 0.05);
    // The next single ID continues after the batch, never wrapping the sequence.
    let next = client.next_id(NextIdRequest {}).await.unwrap().into_inner().id;
    assert!(next > ids[4_999]);
    server.stop().await;
}

#[tokio::test]
async fn forward_jump_is_counted_and_followed_by_the_reservation() {
    let (server, clock, _dir) = start().await;
    let mut client = server.client().await;
    let first = client.next_id(NextIdRequest {}).await.unwrap().into_inner().id;
    // Past the 3 s reservation window: minting waits for the reservation to catch up.
    clock.step_wall(60_000);
    let second = client.next_id(NextIdRequest {}).await.unwrap().into_inner().id;
    assert!(second > first);
    let layout = Layout::default_snowmint();
    assert_eq!(layout.tick_start_ms(layout.unpack(second).tick), clock.wall_ms());
    assert_eq!(server.metric("snowmint_clock_forward_jumps_total").await, 1.0);
    assert!(server.metric("snowmint_reservation_headroom_seconds").await > 0.0);
    server.stop().await;
}
