//! Slot history against a real etcd and a real state dir, with the real binary: a hand-over
//! (kill -9 of the first holder, a second takes the slot) leaves records that tell the two
//! holders' IDs apart, `Decode` and `snowmint decode` name each ID's own holder, `snowmint
//! audit` passes, and a history edited by hand so that two windows overlap fails it,
//! naming both.

mod common;

use std::time::Duration;

use common::etcd::EtcdCluster;
use common::{Process, ServerBuilder, assert_unique, next_id_eventually, run_binary, serial};
use snowmint::history::Record;
use snowmint::layout::Parts;
use snowmint::proto::{BatchIdsRequest, DecodeRequest, Provenance};

/// Mints `count` IDs through `process`, waiting until it serves.
async fn mint(process: &Process, count: u32) -> Vec<u64> {
    let mut client = process.client().await;
    next_id_eventually(&mut client, Duration::from_secs(20)).await;
    client.batch_ids(BatchIdsRequest { count, ..Default::default() }).await.unwrap().into_inner().ids
}

/// Who minted `id`, as `Decode` with provenance answers on `process`.
async fn provenance(process: &Process, id: u64) -> Provenance {
    let mut client = process.client().await;
    let request = DecodeRequest { id, provenance: true, ..Default::default() };
    client.decode(request).await.unwrap().into_inner().provenance.expect("provenance asked for")
}

/// `snowmint decode --json` of `id` with `history` flags: the provenance object.
fn decode_cli(id: u64, history: &[&str]) -> serde_json::Value {
    let id = id.to_string();
    let (code, stdout, stderr) = run_binary(&[&["decode", &id, "--json"], history].concat());
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    json["provenance"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_after_kill_9_is_on_record_and_audits_clean_until_edited() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let endpoints = cluster.endpoints();
    let slot_7 =
        ServerBuilder::new().etcd(&endpoints, "/hist").args(["--lease-ttl", "2", "--preferred-worker-id", "7"]);
    let flags = ["--etcd-endpoints", endpoints.as_str(), "--etcd-prefix", "/hist"];

    let mut first = slot_7.spawn();
    let first_ids = mint(&first, 5_000).await;
    let first_pid = first.pid() as u32;
    first.signal("KILL");
    first.wait(Duration::from_secs(10)).await;

    // The second takes slot 7 once the first's lease has expired and its key is gone.
    let mut etcd = cluster.client().await;
    let gone = std::time::Instant::now();
    while common::etcd::get(&mut etcd, "/hist/workers/7").await.is_some() {
        assert!(gone.elapsed() < Duration::from_secs(20), "the killed holder's lease never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let second = slot_7.spawn();
    let second_ids = mint(&second, 5_000).await;
    let all: Vec<u64> = first_ids.iter().chain(&second_ids).copied().collect();
    assert_unique(&all);
    let layout = snowmint::layout::Layout::default_snowmint();
    assert!(all.iter().all(|&id| layout.unpack(id).worker == 7), "both held slot 7");

    // Each holder's IDs decode to their own holder, over gRPC and from the command line.
    for (ids, pid) in [(&first_ids, first_pid), (&second_ids, second.pid() as u32)] {
        for &id in [ids[0], ids[ids.len() / 2], ids[ids.len() - 1]].iter() {
            let p = provenance(&second, id).await;
            assert!(p.found, "{id}: {}", p.reason);
            assert_eq!(p.pid, pid, "{id} decoded to {p:?}");
            assert_eq!(p.worker_id, 7);
            assert!(p.lease != 0 && p.record.starts_with("/hist/history/7/"), "{p:?}");
            let cli = decode_cli(id, &flags);
            assert_eq!(cli["pid"], pid, "{cli}");
        }
    }
    // The killed holder's record was closed by its successor, with the floor it inherited.
    let p = provenance(&second, first_ids[0]).await;
    assert!(p.last_reservation_ms > 0 && p.closed_at_ms > 0, "{p:?}");
    let successor = provenance(&second, second_ids[0]).await;
    assert_eq!(successor.floor_ms, p.last_reservation_ms, "the successor minted above the last reservation");
    assert_eq!(successor.last_reservation_ms, 0, "still open");
    // An ID of a slot no one held has no record, and says why.
    let foreign = layout.pack(Parts { tick: layout.unpack(first_ids[0]).tick, worker: 9, sequence: 0 });
    let none = provenance(&second, foreign).await;
    assert!(!none.found && none.reason.contains("no record of worker 9"), "{none:?}");

    let (code, stdout, stderr) = run_binary(&[&["audit"], &flags[..]].concat());
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("1 slots, 2 holders, 1 hand-overs, 1 open"), "{stdout}");

    // Edited by hand: the second holder's floor moved below the first's last reservation.
    let key = successor.record.clone();
    let value = common::etcd::get(&mut etcd, &key).await.expect("the record is in etcd");
    let mut record: Record = serde_json::from_slice(&value).unwrap();
    record.floor_ms = p.last_reservation_ms - 1_000;
    etcd.put(key.as_str(), serde_json::to_vec(&record).unwrap(), None).await.unwrap();
    let (code, stdout, stderr) = run_binary(&[&["audit"], &flags[..]].concat());
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains(&p.record) && stderr.contains(&successor.record), "names both:\n{stderr}");
    assert!(stdout.contains(&format!("pid {first_pid}")), "{stdout}");
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_restarts_are_on_record_in_the_state_dir() {
    let worker_3 = ServerBuilder::new().args(["--worker-id", "3"]);
    let state = worker_3.state_path().to_str().unwrap();
    let flags = ["--state-dir", state];

    let mut first = worker_3.spawn();
    let first_ids = mint(&first, 2_000).await;
    let first_pid = first.pid() as u32;
    first.signal("KILL");
    first.wait(Duration::from_secs(10)).await;
    let mut second = worker_3.spawn();
    let second_ids = mint(&second, 2_000).await;
    let second_pid = second.pid() as u32;
    second.signal("TERM");
    assert!(second.wait(Duration::from_secs(10)).await.success());
    assert_unique(&[&first_ids[..], &second_ids[..]].concat());

    assert_eq!(decode_cli(first_ids[10], &flags)["pid"], first_pid);
    assert_eq!(decode_cli(second_ids[10], &flags)["pid"], second_pid);
    let released = decode_cli(second_ids[10], &flags);
    assert!(released["last_reservation_ms"].as_i64().unwrap() > 0, "closed on release: {released}");
    assert_eq!(released["lease"], "0");

    let (code, stdout, stderr) = run_binary(&[&["audit", "--json"], &flags[..]].concat());
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        (report["holders"].as_u64(), report["hand_overs"].as_u64(), report["open"].as_u64()),
        (Some(2), Some(1), Some(0))
    );

    // Without a history to read, decode still decodes, and audit says what it needs.
    let (code, stdout, _) = run_binary(&["decode", &first_ids[0].to_string(), "--json"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("\"provenance\":null"), "{stdout}");
    let (code, _, stderr) = run_binary(&["audit"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("--etcd-endpoints") && stderr.contains("--state-dir"), "{stderr}");
}
