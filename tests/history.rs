//! Slot history against a real etcd and a real state dir, with the real binary: a hand-over
//! (kill -9 of the first holder, a second takes the slot) leaves records that tell the two
//! holders' IDs apart, `Decode` and `snowmint decode` name each ID's own holder, `snowmint
//! audit` passes, and a history edited by hand so that two windows overlap fails it,
//! naming both; the sequences' segment records in etcd list past a page, apart from the
//! slots'.

mod common;

use std::time::Duration;

use common::etcd::EtcdCluster;
use common::{Process, ServerBuilder, assert_unique, next_id_eventually, run_binary, serial};
use etcd_client::{Txn, TxnOp};
use snowmint::history::etcd::EtcdBook;
use snowmint::history::segment::SegmentRecord;
use snowmint::history::{Book, Holder, Record};
use snowmint::layout::Parts;
use snowmint::proto::{BatchIdsRequest, DecodeRequest, Provenance};
use snowmint::sequence::ClaimId;

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

/// The segment records in a real etcd: more than a page of them (1,000 keys a read) list back
/// whole and in value order, beside a slot's record, which the slots' listing alone sees; and
/// pruning never takes a sequence's highest record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_records_in_etcd_list_past_a_page_apart_from_the_slots() {
    let cluster = EtcdCluster::start(1).await;
    let config = common::claims::etcd_config(&cluster.endpoints(), "/segs", Duration::from_secs(10), None, "host");
    let book = EtcdBook::connect(&config).await.unwrap();
    let holder = Holder::this_process("host".into(), 1);
    let slot = Record {
        slot: 4,
        holder: holder.clone(),
        lease: 1,
        claim: 1,
        claimed_at_ms: 1_000,
        floor_ms: 0,
        last_reservation_ms: None,
        closed_at_ms: None,
        closed_by: None,
    };
    book.append(&slot).await.unwrap();
    let segment = |sequence: &str, n: u64| SegmentRecord {
        sequence: sequence.into(),
        values: n * 10 + 1..n * 10 + 11,
        claim: ClaimId { session: -1, number: n },
        holder: holder.clone(),
        claimed_at_ms: n as i64,
        given_back_from: None,
        given_back_at_ms: None,
        claims: 1,
        last_claimed_at_ms: None,
    };
    // Written straight to etcd, a hundred a transaction, under the names the book gives them.
    let mut etcd = cluster.client().await;
    let records: Vec<SegmentRecord> = (0..1_050).map(|n| segment("orders", n)).collect();
    for chunk in records.chunks(100) {
        let puts: Vec<TxnOp> = chunk
            .iter()
            .map(|r| {
                let key = format!("/segs/history/sequences/orders/{}", r.name());
                TxnOp::put(key, serde_json::to_vec(r).unwrap(), None)
            })
            .collect();
        etcd.txn(Txn::new().and_then(puts)).await.unwrap();
    }
    for n in 0..3 {
        book.write_segment(&segment("other", n)).await.unwrap();
    }

    let (orders, unreadable) = book.list_segments(Some("orders")).await.unwrap();
    assert!(unreadable.is_empty());
    let listed: Vec<&SegmentRecord> = orders.iter().map(|e| &e.record).collect();
    assert_eq!(listed, records.iter().collect::<Vec<_>>(), "not every record, once, in value order");
    assert_eq!(book.list_segments(None).await.unwrap().0.len(), 1_053);
    let (slots, unreadable) = book.list(None).await.unwrap();
    assert_eq!((slots.len(), unreadable.len()), (1, 0), "the slots' listing read segment records: {unreadable:?}");

    // The few records at or below a value, read without the rest.
    let (at, _) = book.segments_at("orders", 5_005, 3).await.unwrap();
    assert_eq!(at.iter().map(|e| e.record.values.start).collect::<Vec<_>>(), [4_981, 4_991, 5_001]);
    let (at, _) = book.segments_at("orders", 5_000, 3).await.unwrap();
    assert_eq!(at.iter().map(|e| e.record.values.start).collect::<Vec<_>>(), [4_971, 4_981, 4_991]);
    assert!(book.segments_at("orders", 0, 3).await.unwrap().0.is_empty());

    assert_eq!(book.prune_segments("orders", i64::MAX, usize::MAX, 10).await.unwrap(), 10);
    // Past the records kept, however young: the oldest go, up to the limit.
    assert_eq!(book.prune_segments("orders", 0, 1_000, 64).await.unwrap(), 40);
    assert_eq!(book.list_segments(Some("orders")).await.unwrap().0[0].record.values.start, 501);
    assert_eq!(book.prune_segments("other", i64::MAX, usize::MAX, 64).await.unwrap(), 2);
    let (other, _) = book.list_segments(Some("other")).await.unwrap();
    assert_eq!(other.iter().map(|e| e.record.values.start).collect::<Vec<_>>(), [21], "the highest is kept");
}
