//! Each branch of both clock policies, over the real server with a manual clock.
//!
//! Strict (`--max-clock-drift-ms 0`): a small step back is waited out, a large one is refused
//! at once and recovers by itself, no call waits past its deadline. Hybrid (the default): a
//! step back within the bound mints on borrowed time with no refusal and the drift gauge
//! shows it, one beyond it is refused and recovers once the clock is back within the bound;
//! a forward jump is followed only once it has lasted, so a corrected one costs nothing.
//! Both: an exhausted sequence waits for the next tick.

mod common;

use std::time::{Duration, Instant};

use common::{ServerBuilder, TestServer, assert_increasing};
use snowmint::clock::Clock;
use snowmint::layout::Layout;
use snowmint::proto::{BatchIdsRequest, NextIdRequest};

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
    let (server, clock) = ServerBuilder::new().strict().start_on_manual_clock().await;
    let mut client = server.client().await;
    let first = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;

    clock.step_wall(-4); // within the 5 ms threshold
    let mut waiting = client.clone();
    let call = tokio::spawn(async move { waiting.next_id(NextIdRequest::default()).await });
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
    let (server, clock) = ServerBuilder::new().strict().start_on_manual_clock().await;
    let mut client = server.client().await;
    let first = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;

    clock.step_wall(-10_000);
    let start = Instant::now();
    let status = client.next_id(NextIdRequest::default()).await.unwrap_err();
    assert!(start.elapsed() < Duration::from_millis(500), "refusal took {:?}", start.elapsed());
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(status.message().contains("behind"), "{}", status.message());
    let status = client.batch_ids(BatchIdsRequest { count: 10, ..Default::default() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(wait_ready(&server, 503).await.contains("behind"));
    assert_eq!(server.metric(r#"snowmint_clock_backward_total{action="refused"}"#).await, 1.0);
    assert_eq!(server.metric("snowmint_clock_backward_seconds_count").await, 1.0);
    assert_eq!(server.metric("snowmint_minting").await, 0.0);

    // The clock comes back past the last tick used: ready again with no call needed.
    clock.step_wall(10_001);
    wait_ready(&server, 200).await;
    let second = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;
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
    let (server, clock) = ServerBuilder::new().strict().start_on_manual_clock().await;
    let mut client = server.client().await;
    client.next_id(NextIdRequest::default()).await.unwrap();
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
    let status = client.next_id(NextIdRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(start.elapsed() < Duration::from_millis(1_500), "{:?}", start.elapsed());
    server.stop().await;
}

#[tokio::test]
async fn exhausted_sequence_waits_for_the_next_tick() {
    let (server, clock) = ServerBuilder::new().strict().start_on_manual_clock().await;
    let mut client = server.client().await;
    // The clock is frozen: 5,000 IDs need two ticks of 4,096.
    let mut waiting = client.clone();
    let call =
        tokio::spawn(async move { waiting.batch_ids(BatchIdsRequest { count: 5_000, ..Default::default() }).await });
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
    let next = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;
    assert!(next > ids[4_999]);
    server.stop().await;
}

#[tokio::test]
async fn hybrid_a_step_back_within_the_bound_mints_on_without_refusal() {
    let (server, clock) = ServerBuilder::new().start_on_manual_clock().await;
    let mut client = server.client().await;
    let layout = Layout::default_snowmint();
    let first = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;
    let first_ms = layout.tick_start_ms(layout.unpack(first).tick);

    clock.step_wall(-4_000);
    // 10,000 IDs with the clock frozen 4 s behind: three ticks past the last one used.
    let ids = client.batch_ids(BatchIdsRequest { count: 10_000, ..Default::default() }).await.unwrap().into_inner().ids;
    assert_eq!(ids.len(), 10_000);
    assert!(ids[0] > first);
    assert_increasing(&ids);
    let last_ms = layout.tick_start_ms(layout.unpack(ids[9_999]).tick);
    assert_eq!(last_ms, first_ms + 2, "borrowed ticks follow the last one used");
    let drift = server.metric("snowmint_clock_drift_seconds").await;
    let expected = (last_ms - clock.wall_ms()) as f64 / 1000.0;
    assert!((drift - expected).abs() < 0.002, "drift gauge {drift}, minting time is {expected} s ahead");
    assert_eq!(wait_ready(&server, 200).await, "ready\n");
    assert_eq!(server.metric(r#"snowmint_clock_backward_total{action="borrowed"}"#).await, 1.0);
    assert_eq!(server.metric(r#"snowmint_clock_backward_total{action="refused"}"#).await, 0.0);

    // The clock catches up: borrowing ends, the gauge goes back to 0.
    clock.advance(Duration::from_millis(4_100));
    let next = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;
    assert!(next > ids[9_999]);
    assert_eq!(layout.tick_start_ms(layout.unpack(next).tick), clock.wall_ms());
    assert_eq!(server.metric("snowmint_clock_drift_seconds").await, 0.0);
    assert_eq!(
        server.metric(r#"snowmint_requests_total{code="Unavailable",method="BatchIds",protocol="grpc"}"#).await,
        0.0
    );
    server.stop().await;
}

#[tokio::test]
async fn hybrid_a_step_back_beyond_the_bound_is_refused_and_recovers_within_it() {
    let (server, clock) = ServerBuilder::new().start_on_manual_clock().await;
    let mut client = server.client().await;
    let first = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;

    clock.step_wall(-15_000);
    let status = client.next_id(NextIdRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(status.message().contains("behind"), "{}", status.message());
    assert!(wait_ready(&server, 503).await.contains("behind"));
    assert_eq!(server.metric(r#"snowmint_clock_backward_total{action="refused"}"#).await, 1.0);
    assert_eq!(server.metric(r#"snowmint_clock_backward_total{action="borrowed"}"#).await, 0.0);

    // Back within the bound (9 s behind the last tick): minting goes on, ahead of the clock.
    clock.step_wall(6_000);
    wait_ready(&server, 200).await;
    let second = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;
    assert!(second > first);
    let drift = server.metric("snowmint_clock_drift_seconds").await;
    assert!((8.9..=9.1).contains(&drift), "drift {drift}");
    server.stop().await;
}

#[tokio::test]
async fn a_forward_jump_corrected_before_it_is_confirmed_costs_nothing() {
    for (policy, server) in [("strict", ServerBuilder::new().strict()), ("hybrid", ServerBuilder::new())] {
        let (server, clock) = server.start_on_manual_clock().await;
        let mut client = server.client().await;
        let layout = Layout::default_snowmint();
        let first = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;
        let before = clock.wall_ms();

        // An hour ahead, corrected 2 s later: minting time follows the boot-time clock.
        clock.step_wall(3_600_000);
        clock.advance(Duration::from_millis(1_000));
        let during = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;
        let during_ms = layout.tick_start_ms(layout.unpack(during).tick);
        assert!(during_ms <= before + 1_000 + 1_000, "{policy}: followed the jump at once");
        assert!(during > first);
        assert_eq!(server.metric("snowmint_clock_forward_jumps_total").await, 1.0, "{policy}");
        clock.advance(Duration::from_millis(1_000));
        clock.step_wall(-3_600_000);
        let after = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;
        assert!(after > during, "{policy}");
        assert_eq!(layout.tick_start_ms(layout.unpack(after).tick), clock.wall_ms(), "{policy}");
        assert_eq!(server.metric("snowmint_clock_forward_jumps_adopted_total").await, 0.0, "{policy}");
        assert_eq!(server.metric(r#"snowmint_clock_backward_total{action="refused"}"#).await, 0.0, "{policy}");
        assert_eq!(wait_ready(&server, 200).await, "ready\n", "{policy}");
        server.stop().await;
    }
}

#[tokio::test]
async fn a_forward_jump_that_lasts_is_followed() {
    let (server, clock) = ServerBuilder::new().start_on_manual_clock().await;
    let mut client = server.client().await;
    let layout = Layout::default_snowmint();
    let first = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;
    clock.step_wall(60_000);
    client.next_id(NextIdRequest::default()).await.unwrap();
    // Past the 10 s confirmation window the jump is adopted.
    clock.advance(Duration::from_millis(10_500));
    let second = client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id;
    assert!(second > first);
    assert_eq!(layout.tick_start_ms(layout.unpack(second).tick), clock.wall_ms());
    assert_eq!(server.metric("snowmint_clock_forward_jumps_adopted_total").await, 1.0);
    assert!(server.metric("snowmint_reservation_headroom_seconds").await > 0.0);
    server.stop().await;
}
