//! Restarts never go back: a graceful stop saves the reservation, a restart (also after
//! kill -9, also with the clock behind) mints only past it, and a corrupt or locked state
//! stops the start with a clear error.

mod common;

use std::time::Duration;

use common::{ServerBuilder, assert_increasing, next_id_eventually};
use snowmint::layout::Layout;

use snowmint::proto::{BatchIdsRequest, NextIdRequest};

#[tokio::test]
async fn restart_with_the_clock_behind_waits_until_past_the_saved_reservation() {
    let builder = ServerBuilder::new();
    let (server, clock) = builder.start_on_manual_clock().await;
    let mut client = server.client().await;
    let mut before =
        client.batch_ids(BatchIdsRequest { count: 1_000, ..Default::default() }).await.unwrap().into_inner().ids;
    clock.advance(Duration::from_millis(7));
    before.push(client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id);
    server.stop().await;

    // The host comes back with its clock 10 s behind.
    clock.step_wall(-10_000);
    let server = builder.clock(clock.clone()).start().await;
    let mut client = server.client().await;
    let status = client.next_id(NextIdRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(status.message().contains("reservation"), "{}", status.message());
    assert_eq!(server.admin_get("/readyz").await.0, 503);
    // A step back below the floor is not counted as a clock step while minting.
    assert_eq!(server.metric(r#"snowmint_clock_backward_total{action="refused"}"#).await, 0.0);

    clock.step_wall(10_001);
    let after = next_id_eventually(&mut client, Duration::from_secs(5)).await;
    assert!(after > *before.last().unwrap(), "restart went back: {after} <= {}", before.last().unwrap());
    server.stop().await;
}

#[tokio::test]
async fn sigterm_saves_the_reservation_and_kill_9_restarts_past_it() {
    let worker_9 = ServerBuilder::new().args(["--worker-id", "9"]);
    let mut all = Vec::new();

    let mut process = worker_9.spawn();
    let mut client = process.client().await;
    let first = next_id_eventually(&mut client, Duration::from_secs(5)).await;
    all.push(first);
    all.extend(
        client.batch_ids(BatchIdsRequest { count: 5_000, ..Default::default() }).await.unwrap().into_inner().ids,
    );
    drop(client);
    process.signal("TERM");
    let status = process.wait(Duration::from_secs(10)).await;
    assert!(status.success(), "SIGTERM exit: {status:?}");
    let logs = process.drain_logs().join("\n");
    assert!(logs.contains("final reservation saved"), "{logs}");
    let layout = snowmint::layout::Layout::default_snowmint();
    let last_ms = layout.tick_end_ms(layout.unpack(*all.last().unwrap()).tick);
    assert_eq!(saved_reservation(worker_9.state_path(), 9), last_ms, "the final reservation is the last tick used");

    // A graceful restart mints at once, past everything before.
    let mut process = worker_9.spawn();
    let mut client = process.client().await;
    let start = std::time::Instant::now();
    let id = next_id_eventually(&mut client, Duration::from_secs(5)).await;
    assert!(start.elapsed() < Duration::from_secs(1), "graceful restart waited {:?}", start.elapsed());
    all.push(id);
    all.extend(
        client.batch_ids(BatchIdsRequest { count: 5_000, ..Default::default() }).await.unwrap().into_inner().ids,
    );

    // kill -9: the reservation on disk reaches ahead of the clock, past the last ID; the
    // restart mints only above it.
    process.signal("KILL");
    process.wait(Duration::from_secs(5)).await;
    drop(process);
    let reserved = saved_reservation(worker_9.state_path(), 9);
    let last_ms = layout.tick_end_ms(layout.unpack(*all.last().unwrap()).tick);
    assert!(reserved > last_ms, "the killed run's reservation {reserved} does not reach past its last ID ({last_ms})");
    let process = worker_9.spawn();
    let mut client = process.client().await;
    let first = next_id_eventually(&mut client, Duration::from_secs(10)).await;
    let first_ms = layout.tick_start_ms(layout.unpack(first).tick);
    assert!(first_ms > reserved, "the restart after kill -9 minted at {first_ms}, inside the reservation {reserved}");
    all.push(first);
    all.extend(
        client.batch_ids(BatchIdsRequest { count: 5_000, ..Default::default() }).await.unwrap().into_inner().ids,
    );
    // One worker across three runs: increasing throughout, so never an ID twice.
    assert_increasing(&all);
}

/// The `reserved_until_ms` of worker `worker_id`'s state file in `dir`.
fn saved_reservation(dir: &std::path::Path, worker_id: u32) -> i64 {
    let path = dir.join(format!("worker-{worker_id}.json"));
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    saved["reserved_until_ms"].as_i64().unwrap()
}

#[test]
fn corrupt_state_stops_the_start_with_one_clear_line() {
    let server = ServerBuilder::new().args(["--log-format", "json"]);
    let state_file = server.state_path().join("worker-0.json");
    std::fs::create_dir(server.state_path()).unwrap();
    std::fs::write(&state_file, "{\"version\":1,\"worker").unwrap();
    let (code, stderr) = server.run_to_exit();
    assert_ne!(code, 0);
    let last = stderr.lines().last().unwrap();
    assert!(last.starts_with("snowmint: state file") && last.contains("corrupt"), "{stderr}");
    // Never reset: the file is untouched.
    assert_eq!(std::fs::read_to_string(&state_file).unwrap(), "{\"version\":1,\"worker");
}

/// A state file that parses but holds an absurd time (past the layout's end, or before its
/// epoch) is corrupt: trusting it could overflow, or read as "no floor". The start stops
/// naming the file, and the file is left as it was.
#[test]
fn an_absurd_reservation_in_the_state_file_stops_the_start_naming_the_file() {
    for absurd in [i64::MAX - 5, 1_000] {
        let server = ServerBuilder::new();
        std::fs::create_dir(server.state_path()).unwrap();
        let path = server.state_path().join("worker-0.json");
        let state = serde_json::json!({
            "version": 1,
            "worker_id": 0,
            "layout": Layout::default_snowmint(),
            "reserved_until_ms": absurd,
            "reserved_until": "?",
            "saved_at": "?",
        })
        .to_string();
        std::fs::write(&path, &state).unwrap();
        let (code, stderr) = server.run_to_exit();
        assert_ne!(code, 0, "started over {absurd}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.contains(path.to_str().unwrap()) && last.contains("outside the layout's time range"), "{stderr}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), state, "the state file was rewritten");
    }
}

#[tokio::test]
async fn a_second_process_on_the_same_state_is_refused() {
    let server = ServerBuilder::new();
    let _first = server.spawn();
    let (code, stderr) = server.run_to_exit();
    assert_ne!(code, 0);
    assert!(stderr.lines().last().unwrap().contains("in use by another snowmint process"), "{stderr}");
}

#[tokio::test]
async fn sigint_also_stops_gracefully() {
    let mut process = ServerBuilder::new().spawn();
    let mut client = process.client().await;
    next_id_eventually(&mut client, Duration::from_secs(5)).await;
    process.signal("INT");
    assert!(process.wait(Duration::from_secs(10)).await.success());
}

/// A client that never lets its connection go does not hold the shutdown past the grace.
#[tokio::test]
async fn shutdown_grace_bounds_a_stuck_client() {
    let mut process = ServerBuilder::new().args(["--shutdown-grace-ms", "500"]).spawn();
    // A raw HTTP/2 connection that sends its preface and then nothing, never acking.
    let mut raw = std::net::TcpStream::connect(process.grpc).unwrap();
    std::io::Write::write_all(&mut raw, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let start = std::time::Instant::now();
    process.signal("TERM");
    assert!(process.wait(Duration::from_secs(10)).await.success());
    assert!(start.elapsed() < Duration::from_secs(3), "shutdown took {:?}", start.elapsed());
}

/// `--accept-missing-state` after a deliberate reset says so in its log line, rather than
/// calling it a first start.
#[tokio::test]
async fn a_start_on_a_missing_state_file_says_it_was_accepted_deliberately() {
    let server = ServerBuilder::new();
    let mut first = server.spawn();
    first.wait_for_log("first start for this worker", Duration::from_secs(5)).await;
    // Minting, so the signal handlers are in place: a SIGTERM before them kills at once.
    next_id_eventually(&mut first.client().await, Duration::from_secs(5)).await;
    first.signal("TERM");
    assert!(first.wait(Duration::from_secs(10)).await.success());

    std::fs::remove_file(server.state_path().join("worker-0.json")).unwrap();
    let mut reset = server.args(["--accept-missing-state"]).spawn();
    let logs = reset.wait_for_log("slot taken", Duration::from_secs(5)).await.join("\n");
    assert!(logs.contains("state file missing; start accepted deliberately (--accept-missing-state)"), "{logs}");
    assert!(!logs.contains("first start"), "{logs}");
    next_id_eventually(&mut reset.client().await, Duration::from_secs(5)).await;
}

/// A start that fails after taking a worker's lock file and before its first state write
/// (here: another of its worker IDs is in use) leaves that worker's state dir fresh, so the
/// next start is a first start rather than a refusal over a "missing" state file; once it
/// has written, a state file that goes missing is refused again.
#[tokio::test]
async fn a_start_that_failed_before_its_first_write_leaves_the_state_dir_fresh() {
    let state = ServerBuilder::new();
    let state_dir = state.state_path();
    let mut holder = state.clone().args(["--worker-id", "1"]).spawn();
    next_id_eventually(&mut holder.client().await, Duration::from_secs(5)).await;

    let (code, stderr) = state.clone().args(["--worker-id", "0,1"]).run_to_exit();
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("in use by another snowmint process for worker 1"), "{stderr}");
    assert!(state_dir.join("worker-0.lock").exists(), "the failed start did not get as far as worker 0");
    assert!(!state_dir.join("worker-0.json").exists());

    let worker_0 = state.clone().args(["--worker-id", "0"]);
    let mut next = worker_0.spawn();
    next.wait_for_log("first start for this worker", Duration::from_secs(5)).await;
    next_id_eventually(&mut next.client().await, Duration::from_secs(5)).await;
    next.signal("TERM");
    assert!(next.wait(Duration::from_secs(10)).await.success());

    std::fs::remove_file(state_dir.join("worker-0.json")).unwrap();
    let (code, stderr) = worker_0.run_to_exit();
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("is missing, but worker 0 ran in this state dir before"), "{stderr}");
    holder.signal("TERM");
    assert!(holder.wait(Duration::from_secs(10)).await.success());
}

/// A reservation that cannot be written (the full or read-only disk of docs/design/guarantees.md): minting goes
/// on inside the reservation already on disk, never past it, then refuses with UNAVAILABLE;
/// the failure is logged and counted, and minting resumes once writes work again.
///
/// Every write of the state file goes through `worker-<id>.json.tmp`; a directory in its
/// place makes each write fail, as a full or read-only disk would. Unlike a read-only mode
/// bit, it stops root too, and it needs no mount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_that_cannot_be_written_is_minted_up_to_then_refused_until_writes_work() {
    let mut process = ServerBuilder::new().args(["--reservation-window-ms", "1000"]).spawn();
    let state_dir = process.state_path().to_path_buf();
    let mut client = process.client().await;
    let before = next_id_eventually(&mut client, Duration::from_secs(5)).await;

    // A write under way when the directory appears holds the temp file: try until it is
    // free, after which no write can land.
    let blocker = state_dir.join("worker-0.json.tmp");
    let start = std::time::Instant::now();
    while let Err(e) = std::fs::create_dir(&blocker) {
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        assert!(start.elapsed() < Duration::from_secs(5), "the temp file never went away");
        std::thread::sleep(Duration::from_millis(1));
    }
    let reserved = saved_reservation(&state_dir, 0);
    let blocked = std::time::Instant::now();

    let layout = snowmint::layout::Layout::default_snowmint();
    let mut minted = Vec::new();
    let refusal = loop {
        assert!(blocked.elapsed() < Duration::from_secs(5), "still minting 5 s after writes stopped working");
        match client.next_id(NextIdRequest::default()).await {
            Ok(response) => minted.push(response.into_inner().id),
            Err(status) => break status,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(refusal.code(), tonic::Code::Unavailable, "{refusal:?}");
    // Refused for the reservation; or, when the minter's pass comes after the call's deadline
    // on a loaded machine (the call waited for a write that does not land), for the deadline.
    let message = refusal.message();
    assert!(message.contains("reservation") || message.contains("before the call's deadline"), "{message}");
    assert!(!minted.is_empty(), "nothing minted inside the reservation on disk");
    for &id in &minted {
        let ms = layout.tick_end_ms(layout.unpack(id).tick);
        assert!(ms <= reserved, "minted at {ms}, past the reservation on disk ({reserved})");
    }
    process.wait_for_log("reservation write failed", Duration::from_secs(5)).await;
    let failed = process.metric(r#"snowmint_reservation_writes_total{result="failed"}"#).await;
    assert!(failed >= 1.0, "failed writes not counted");
    let start = std::time::Instant::now();
    while process.admin_ready().await != 503 {
        assert!(start.elapsed() < Duration::from_secs(2), "still ready 2 s after minting refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    std::fs::remove_dir(&blocker).unwrap();
    let after = next_id_eventually(&mut client, Duration::from_secs(5)).await;
    process.wait_for_log("reservation writes work again", Duration::from_secs(5)).await;
    minted.insert(0, before);
    minted.push(after);
    assert_increasing(&minted);
}

/// On SIGTERM the calls in flight finish with their IDs, the process exits 0, and the final
/// reservation covers every ID they got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_at_sigterm_finish_and_the_final_reservation_covers_them() {
    // 64 IDs a millisecond: eight batches of 4,000 take half a second of ticks, so they are
    // still in flight when the signal comes. A generous --max-wait-ms keeps a slow machine
    // from refusing them for taking long.
    let mut process = ServerBuilder::new().args(["--sequence-bits", "6", "--max-wait-ms", "5000"]).spawn();
    let mut client = process.client().await;
    next_id_eventually(&mut client, Duration::from_secs(5)).await;
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let ids = client
                    .batch_ids(BatchIdsRequest { count: 4_000, ..Default::default() })
                    .await
                    .map(|r| r.into_inner().ids);
                (ids, std::time::Instant::now())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let signalled = std::time::Instant::now();
    process.signal("TERM");
    let mut all = Vec::new();
    let mut in_flight = 0;
    for caller in callers {
        let (ids, done) = common::join_within(caller, Duration::from_secs(10), "a call in flight").await;
        let ids = ids.unwrap_or_else(|status| panic!("a call in flight at SIGTERM failed: {status:?}"));
        assert_eq!(ids.len(), 4_000);
        in_flight += usize::from(done > signalled);
        all.extend(ids);
    }
    assert!(in_flight > 0, "every call had finished before the signal; nothing was in flight");
    let status = process.wait(Duration::from_secs(10)).await;
    assert!(status.success(), "SIGTERM exit: {status:?}");
    let layout = Layout::snowmint(snowmint::layout::DEFAULT_EPOCH_MS, 10, 6);
    let last_ms = all.iter().map(|&id| layout.tick_end_ms(layout.unpack(id).tick)).max().unwrap();
    assert!(saved_reservation(process.state_path(), 0) >= last_ms, "the final reservation does not cover the last ID");
}

/// Standalone with several worker IDs: each has its own state file, a large batch fills each
/// tick across them in ascending order, and a restart goes on past every one's reservation.
#[tokio::test]
async fn several_static_worker_ids_fill_ticks_in_order_and_restart_past_each() {
    let layout = Layout::default_snowmint();
    let workers_2_and_3 = ServerBuilder::new().args(["--worker-id", "2-3"]);
    let mut process = workers_2_and_3.spawn();
    let mut client = process.client().await;
    next_id_eventually(&mut client, Duration::from_secs(5)).await;
    let before =
        client.batch_ids(BatchIdsRequest { count: 20_000, ..Default::default() }).await.unwrap().into_inner().ids;
    assert_increasing(&before);
    let workers: std::collections::BTreeSet<u64> = before.iter().map(|&id| layout.unpack(id).worker).collect();
    assert_eq!(workers, [2, 3].into(), "a batch of 20,000 should span both slots");
    for worker in [2, 3] {
        assert!(workers_2_and_3.state_path().join(format!("worker-{worker}.json")).exists());
    }
    process.signal("KILL");
    process.wait(Duration::from_secs(5)).await;
    let mut again = workers_2_and_3.spawn();
    let mut client = again.client().await;
    let after = next_id_eventually(&mut client, Duration::from_secs(10)).await;
    assert!(after > *before.last().unwrap(), "the restart went back");
    let _ = again.drain_logs();
}

/// The log lines keep the field names they were published with, whatever the code calls the
/// concept: a slot is `worker_id` in them, as in the API and the metrics.
#[tokio::test]
async fn the_slot_taken_line_names_the_slot_worker_id() {
    let server = ServerBuilder::new().args(["--worker-id", "5"]);
    let mut process = server.spawn();
    let lines = process.wait_for_log("slot taken", Duration::from_secs(5)).await;
    let line = lines.iter().find(|line| line.contains("slot taken")).expect("waited for");
    let json: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(json["worker_id"], 5, "{line}");
}

/// A SIGTERM that comes the moment the server says it listens stops it cleanly: the signal
/// handlers are in place before the listeners open, so no such signal is lost (the server
/// running on until SIGKILL) or taken by the default action (an unclean death).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_right_after_the_listening_line_stops_the_server() {
    let builder = ServerBuilder::new();
    for round in 0..25 {
        let mut server = builder.spawn();
        server.signal("TERM");
        let status = server.wait(Duration::from_secs(10)).await;
        assert!(status.success(), "round {round}: {status}");
    }
}
