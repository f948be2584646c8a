//! The Rust client over real servers: failover on UNAVAILABLE, coalescing of concurrent
//! calls, and the local buffer with its low-water refill and its age bound.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TestServer, assert_increasing, assert_unique, config};
use snowmint::client::{BufferConfig, Client, ClientError};
use snowmint::clock::{Clock, ManualClock, SystemClock};
use snowmint::layout::Layout;

async fn server() -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (TestServer::start(config(dir.path()), Arc::new(SystemClock::new())).await, dir)
}

/// The calls the server answered OK, NextId and BatchIds together.
async fn calls(server: &TestServer) -> f64 {
    server.metric(r#"snowmint_requests_total{code="OK",method="NextId"}"#).await
        + server.metric(r#"snowmint_requests_total{code="OK",method="BatchIds"}"#).await
}

#[tokio::test]
async fn next_id_and_batch() {
    let (server, _dir) = server().await;
    let client = Client::builder([server.url()]).connect().unwrap();
    let one = client.next_id().await.unwrap();
    let many = client.batch(1_000).await.unwrap();
    assert_eq!(many.len(), 1_000);
    assert_increasing(&many);
    assert!(many[0] > one);
    // A bad request is the caller's error, not retried elsewhere.
    assert!(matches!(client.batch(0).await, Err(ClientError::Rejected(s)) if s.code() == tonic::Code::InvalidArgument));
    server.stop().await;
}

#[tokio::test]
async fn fails_over_to_another_endpoint_when_one_refuses_or_is_gone() {
    let (good, _dir) = server().await;
    // One endpoint refuses (its clock stepped back 10 s), one has nothing listening.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(SystemClock::new().wall_ms());
    let refusing = TestServer::start(config(dir.path()), Arc::new(clock.clone())).await;
    Client::builder([refusing.url()]).connect().unwrap().next_id().await.unwrap();
    clock.step_wall(-10_000);
    let gone = format!("http://127.0.0.1:{}", common::etcd::free_port());

    let client = Client::builder([refusing.url(), gone, good.url()]).connect().unwrap();
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(client.next_id().await.unwrap());
        ids.extend(client.batch(10).await.unwrap());
    }
    assert_unique(&ids);
    assert!(refusing.metric(r#"snowmint_requests_total{code="Unavailable",method="NextId"}"#).await >= 1.0);

    // Every endpoint refusing: a clear error, in bounded time.
    let only_refusing = Client::builder([refusing.url()]).timeout(Duration::from_millis(200)).connect().unwrap();
    let start = Instant::now();
    let error = only_refusing.next_id().await.unwrap_err();
    assert!(matches!(&error, ClientError::Unavailable(s) if s.code() == tonic::Code::Unavailable), "{error}");
    assert!(start.elapsed() < Duration::from_secs(3));
    refusing.stop().await;
    good.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_next_ids_are_coalesced_into_few_calls() {
    let (server, _dir) = server().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_buffer_serves_from_prefetched_batches_and_refills_below_the_low_water_mark() {
    let (server, _dir) = server().await;
    let config = BufferConfig { batch: 4096, low_water: 4096, max_refills: 2, max_age: Duration::from_secs(5) };
    let client = Client::builder([server.url()]).buffer(config).connect().unwrap();
    let mut ids = Vec::with_capacity(100_000);
    for _ in 0..100_000 {
        ids.push(client.next_id().await.unwrap());
    }
    assert_unique(&ids);
    let made = calls(&server).await;
    // About 100,000 / 4,096 = 25 refills, plus the ones that keep the buffer above the mark.
    assert!((25.0..=40.0).contains(&made), "{made} calls for 100,000 buffered IDs");
    assert_eq!(server.metric("snowmint_batch_size_sum").await, made * 4096.0);
    server.stop().await;
}

#[tokio::test]
async fn buffered_ids_older_than_the_age_bound_are_dropped() {
    let (server, _dir) = server().await;
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
