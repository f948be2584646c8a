//! Named sequences on the real server: values dense and unique under concurrent callers, a
//! clean restart that gives the unused rest back (no gap), a kill -9 that leaves a gap and
//! never a repeat, two instances over one etcd never sharing a value (also while etcd loses
//! its leader and pauses), an instance that refuses after etcd was restored under it, every
//! refusal with its code, and `snowmint sequence create|list|show` against a state dir and
//! etcd; the segment history (`snowmint sequence show --value`, `snowmint audit`) in etcd and
//! in a state dir.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use common::sequences::{AllValues, assert_answer_order, batch, hammer_values_into, is_retriable_refusal, next};
use common::{HammerLog, ServerBuilder, run_binary};
use snowmint::history::segment::SegmentRecord;
use snowmint::proto::id_service_client::IdServiceClient;
use snowmint::sequence::file::FileSequences;
use snowmint::sequence::{Record, SequenceStore as _};
use tonic::Code;
use tonic::transport::Channel;

/// `rounds` rounds of one `NextValue` and one `BatchValues(batch_size)`; every answer's
/// values increase within it and after the caller's previous answer.
async fn take(mut client: IdServiceClient<Channel>, name: String, rounds: usize, batch_size: u32) -> Vec<i64> {
    let mut got: Vec<i64> = Vec::new();
    for _ in 0..rounds {
        got.push(client.next_value(next(&name)).await.unwrap().into_inner().value);
        let values = client.batch_values(batch(&name, batch_size)).await.unwrap().into_inner().values;
        assert_eq!(values.len(), batch_size as usize);
        got.extend(values);
    }
    let late = got.windows(2).position(|w| w[0] >= w[1]);
    assert_eq!(late, None, "one caller's values do not increase: {:?}", late.map(|i| &got[i..i + 2]));
    got
}

/// Eight callers at once on one standalone server: the values they get are unique and,
/// together, exactly the values from the sequence's start up (nothing lost while the server
/// runs). A clean stop gives the unused rest back: the restarted server goes on with the next
/// value. Small segments, so that the run takes many of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn values_are_dense_and_unique_and_a_clean_restart_leaves_no_gap() {
    let builder = ServerBuilder::new().config(|c| {
        c.sequences.segments.min_size = 7;
        c.sequences.segments.max_size = 50;
    });
    let store = FileSequences::new(builder.state_path());
    store.create("orders", &Record::new(1_000, snowmint::sequence::MAX_VALUE, false).unwrap()).await.unwrap();
    let server = builder.start().await;
    let mut callers = Vec::new();
    for _ in 0..8 {
        callers.push(tokio::spawn(take(server.client().await, "orders".into(), 40, 13)));
    }
    let mut all = BTreeSet::new();
    for caller in callers {
        for value in caller.await.unwrap() {
            assert!(all.insert(value), "{value} issued twice");
        }
    }
    let expected: BTreeSet<i64> = (1_000..1_000 + 8 * 40 * 14).collect();
    assert_eq!(all, expected, "the values are not the sequence's first ones, dense");
    let segments = server.metric(r#"snowmint_named_sequence_segments_total{result="claimed",sequence="orders"}"#).await;
    assert!(segments >= (8 * 40 * 14 / 50) as f64, "{segments} segments for {} values", all.len());
    let issued = server.metric(r#"snowmint_named_sequence_values_issued_total{sequence="orders"}"#).await;
    assert_eq!(issued, all.len() as f64);
    server.stop().await;

    let server = builder.start().await;
    let mut client = server.client().await;
    let after = client.next_value(next("orders")).await.unwrap().into_inner().value;
    assert_eq!(after, 1_000 + 8 * 40 * 14, "a clean restart left a gap");
    server.stop().await;
}

/// A server killed with SIGKILL gives nothing back: its successor in the same state dir goes
/// on above every value the killed one could have handed out (a gap), never below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_leaves_a_gap_never_a_repeat() {
    let builder = ServerBuilder::new().args(["--create-sequences-on-use", "--sequence-min-segment", "100"]);
    let mut seen = BTreeSet::new();
    for round in 0..3 {
        let process = builder.spawn();
        let mut client = process.client().await;
        let values = take(client.clone(), "invoices".into(), 20, 9).await;
        let first = *values.first().unwrap();
        assert!(seen.last().is_none_or(|&last| first > last), "round {round}: {first} not above {:?}", seen.last());
        for value in values {
            assert!(seen.insert(value), "{value} issued twice");
        }
        // A call in flight at the kill, perhaps: what it took is lost, not issued again.
        let _ = client.next_value(next("invoices")).await;
        process.signal("KILL");
    }
    assert_eq!(seen.len(), 3 * 20 * 10);
}

/// Two servers over one etcd, four callers each, on one sequence with small segments: no
/// value is handed out twice, and each caller's values increase. `snowmint sequence` creates,
/// lists and shows it in etcd, and refuses to create it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_over_one_etcd_never_share_a_value() {
    let etcd = EtcdCluster::start(1).await;
    let endpoints = etcd.endpoints();
    let flags = ["--etcd-endpoints", endpoints.as_str(), "--etcd-prefix", "/seq-test"];
    let created =
        run_binary(&[&["sequence", "create", "tickets", "--start", "500", "--json"][..], &flags[..]].concat());
    assert_eq!(created.0, 0, "{created:?}");
    let json: serde_json::Value = serde_json::from_str(created.1.trim()).unwrap();
    assert_eq!((json["name"].as_str(), json["next"].as_u64()), (Some("tickets"), Some(500)));
    let again = run_binary(&[&["sequence", "create", "tickets"][..], &flags[..]].concat());
    assert_eq!(again.0, 1, "{again:?}");
    assert!(again.2.contains("exists already"), "{again:?}");

    let servers = [
        ServerBuilder::new()
            .etcd(&endpoints, "/seq-test")
            .args(["--sequence-min-segment", "10", "--sequence-max-segment", "64"])
            .spawn(),
        ServerBuilder::new()
            .etcd(&endpoints, "/seq-test")
            .args(["--sequence-min-segment", "10", "--sequence-max-segment", "64"])
            .spawn(),
    ];
    let mut callers = Vec::new();
    for server in &servers {
        for _ in 0..4 {
            callers.push(tokio::spawn(take(server.client().await, "tickets".into(), 25, 17)));
        }
    }
    let mut all = BTreeSet::new();
    for caller in callers {
        for value in caller.await.unwrap() {
            assert!(all.insert(value), "{value} issued twice across the fleet");
        }
    }
    assert_eq!(all.len(), 8 * 25 * 18);
    for server in &servers {
        let issued = server.metric(r#"snowmint_named_sequence_values_issued_total{sequence="tickets"}"#).await;
        assert_eq!(issued, (4 * 25 * 18) as f64, "each server answered its own callers");
        let claimed =
            server.metric(r#"snowmint_named_sequence_segments_total{result="claimed",sequence="tickets"}"#).await;
        assert!(claimed >= (4 * 25 * 18 / 64) as f64, "{claimed} segments");
    }
    assert!(*all.first().unwrap() >= 500);

    let listed = run_binary(&[&["sequence", "list", "--json"][..], &flags[..]].concat());
    assert_eq!(listed.0, 0, "{listed:?}");
    let list: serde_json::Value = serde_json::from_str(listed.1.trim()).unwrap();
    let next = list[0]["next"].as_i64().unwrap();
    assert!(next > *all.last().unwrap(), "the record's next value {next} is not past what was issued");
    let shown = run_binary(&[&["sequence", "show", "tickets"][..], &flags[..]].concat());
    assert!(shown.1.starts_with("tickets: next value "), "{shown:?}");
    let missing = run_binary(&[&["sequence", "show", "nope"][..], &flags[..]].concat());
    assert_eq!(missing.0, 1, "{missing:?}");
}

/// Every refusal with its code: a name with no sequence (`NOT_FOUND`, naming the command that
/// creates it), a bad name or count (`INVALID_ARGUMENT`), a batch beyond what is left
/// (`OUT_OF_RANGE`, and nothing taken: the values left are still given); and a server started
/// to create sequences on use makes one on the first call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_have_their_codes_and_create_on_use_creates() {
    let builder = ServerBuilder::new();
    let store = FileSequences::new(builder.state_path());
    store.create("small", &Record::new(1, 10, false).unwrap()).await.unwrap();
    let server = builder.start().await;
    let mut client = server.client().await;
    let missing = client.next_value(next("orders")).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    assert!(missing.message().contains("snowmint sequence create orders"), "{missing:?}");
    for bad in ["", "Orders", "a/b", &"x".repeat(65)] {
        let refused = client.next_value(next(bad)).await.unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{bad:?}: {refused:?}");
    }
    for count in [0, 65_537] {
        let refused = client.batch_values(batch("small", count)).await.unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{count}: {refused:?}");
    }
    assert_eq!(client.batch_values(batch("small", 4)).await.unwrap().into_inner().values, vec![1, 2, 3, 4]);
    let beyond = client.batch_values(batch("small", 7)).await.unwrap_err();
    assert_eq!(beyond.code(), Code::OutOfRange, "{beyond:?}");
    assert!(beyond.message().contains("6 values left"), "{beyond:?}");
    assert_eq!(client.batch_values(batch("small", 6)).await.unwrap().into_inner().values, vec![5, 6, 7, 8, 9, 10]);
    let used_up = client.next_value(next("small")).await.unwrap_err();
    assert_eq!(used_up.code(), Code::OutOfRange, "{used_up:?}");
    server.stop().await;

    let server = ServerBuilder::new().config(|c| c.sequences.create_on_use = true).start().await;
    let mut client = server.client().await;
    assert_eq!(client.next_value(next("orders")).await.unwrap().into_inner().value, 1);
    assert_eq!(client.next_value(next("orders")).await.unwrap().into_inner().value, 2);
    server.stop().await;
}

/// `snowmint sequence` in a state dir: create (from a start, up to a maximum), list and show,
/// in words and JSON; a name or bounds out of range refused with the reason.
#[test]
fn the_sequence_command_creates_lists_and_shows_in_a_state_dir() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    let (code, out, err) = run_binary(&["sequence", "list", "--state-dir", state]);
    assert_eq!((code, out.trim()), (0, format!("no sequences in {state}/sequences").as_str()), "{err}");
    let (code, out, err) =
        run_binary(&["sequence", "create", "b-orders", "--start", "7", "--max", "99", "--state-dir", state]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("values from 7 to 99"), "{out}");
    assert_eq!(run_binary(&["sequence", "create", "a", "--state-dir", state]).0, 0);
    let (code, out, _) = run_binary(&["sequence", "list", "--json", "--state-dir", state]);
    assert_eq!(code, 0);
    let list: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let names: Vec<_> = list.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["a", "b-orders"]);
    assert_eq!(
        (list[1]["next"].as_u64(), list[1]["max"].as_u64(), list[1]["left"].as_u64()),
        (Some(7), Some(99), Some(93))
    );
    let (_, out, _) = run_binary(&["sequence", "show", "b-orders", "--state-dir", state]);
    assert_eq!(out.trim(), "b-orders: next value 7, maximum 99, 93 left");
    for (args, why) in [
        (&["sequence", "create", "Bad"][..], "lowercase letters"),
        (&["sequence", "create", "x", "--start", "0"][..], "0 is not in 1..="),
        (&["sequence", "create", "x", "--start", "9", "--max", "8"][..], "maximum must be at least its start"),
        (&["sequence", "show", "missing"][..], "does not exist"),
    ] {
        let (code, _, err) = run_binary(&[args, &["--state-dir", state][..]].concat());
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

/// Two servers on a three-member etcd, four callers each (single values and batches): the
/// leader killed, then every member paused past the callers' deadlines, then resumed. Calls
/// that cannot be answered are refused `UNAVAILABLE` (or reach their caller's own deadline
/// first, on a loaded machine); calls go on being answered once etcd is back; no value is
/// handed out twice, each server's answers increase in the order it gave them, and
/// `snowmint audit` finds no two segments on record holding one value.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sequence_lives_through_etcd_losing_its_leader_and_pausing() {
    let mut etcd = EtcdCluster::start(3).await;
    let endpoints = etcd.endpoints();
    let flags = ["--etcd-endpoints", endpoints.as_str(), "--etcd-prefix", "/seq-faults"];
    assert_eq!(run_binary(&[&["sequence", "create", "receipts"][..], &flags[..]].concat()).0, 0);
    let segments = ["--sequence-min-segment", "5", "--sequence-max-segment", "20"];
    let servers = [
        ServerBuilder::new().etcd(&endpoints, "/seq-faults").args(segments).spawn(),
        ServerBuilder::new().etcd(&endpoints, "/seq-faults").args(segments).spawn(),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let logs = [Arc::new(Mutex::new(HammerLog::default())), Arc::new(Mutex::new(HammerLog::default()))];
    let mut callers = Vec::new();
    for (server, log) in servers.iter().zip(&logs) {
        for _ in 0..4 {
            callers.push(hammer_values_into(server.grpc, &["receipts"], stop.clone(), log.clone(), Duration::ZERO));
        }
    }
    let seconds = |s: u64| tokio::time::sleep(std::time::Duration::from_secs(s));
    seconds(1).await;
    let leader = etcd.leader().await;
    etcd.kill(leader);
    seconds(3).await;
    etcd.restart(leader);
    etcd.pause_all();
    seconds(3).await;
    etcd.resume_all();
    let after_pause = servers[0].metric(r#"snowmint_named_sequence_values_issued_total{sequence="receipts"}"#).await
        + servers[1].metric(r#"snowmint_named_sequence_values_issued_total{sequence="receipts"}"#).await;
    seconds(4).await;
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        common::join_within(caller, Duration::from_secs(5), "a caller").await;
    }
    let mut all = AllValues::default();
    let mut refused = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        let calls = &log.lock().unwrap().values;
        // Each instance's answers increase in the order it gave them.
        assert_answer_order(&format!("server {i}"), calls);
        all.add(calls);
        refused.extend(calls.iter().map(|c| c.code).filter(|&code| code != Code::Ok));
    }
    let got = all.assert_no_value_twice();
    let other: Vec<_> = refused.iter().filter(|&&code| !is_retriable_refusal(code)).collect();
    assert!(other.is_empty(), "refusals other than UNAVAILABLE: {other:?}");
    assert!(refused.contains(&Code::Unavailable), "no call was refused UNAVAILABLE while etcd was paused: {refused:?}");
    assert!(got as f64 > after_pause + 50.0, "calls were not answered again after etcd came back");
    // The segment history agrees: no two segments on record held one value.
    let (code, stdout, stderr) = run_binary(&[&["audit"][..], &flags[..]].concat());
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("1 sequences, "), "{stdout}");
}

/// etcd restored from a snapshot taken before the segments an instance holds: the instance
/// hands out what it holds (those values are its alone), then refuses with `UNAVAILABLE`
/// saying the store went back, rather than take the restored values again; nothing it
/// handed out repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_saw_newer_state_refuses_after_a_restore() {
    let mut etcd = EtcdCluster::start(1).await;
    let endpoints = etcd.endpoints();
    let flags = ["--etcd-endpoints", endpoints.as_str(), "--etcd-prefix", "/seq-restore"];
    assert_eq!(run_binary(&[&["sequence", "create", "refunds"][..], &flags[..]].concat()).0, 0);
    let server = ServerBuilder::new()
        .etcd(&endpoints, "/seq-restore")
        .args(["--sequence-min-segment", "10", "--sequence-max-segment", "10"])
        .spawn();
    let mut client = server.client().await;
    let snapshot = tempfile::NamedTempFile::new().unwrap();
    let mut got = take(client.clone(), "refunds".into(), 5, 9).await;
    etcd.snapshot(snapshot.path()).await;
    got.extend(take(client.clone(), "refunds".into(), 5, 9).await);
    etcd.restore(snapshot.path()).await;
    let mut refusal = None;
    for _ in 0..200 {
        match client.next_value(next("refunds")).await {
            Ok(answer) => got.push(answer.into_inner().value),
            Err(status) => {
                refusal = Some(status);
                break;
            }
        }
    }
    let refusal = refusal.expect("no refusal after the restore");
    assert_eq!(refusal.code(), Code::Unavailable, "{refusal:?}");
    assert!(refusal.message().contains("went back"), "{refusal:?}");
    let unique: BTreeSet<i64> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "values issued twice");
    let again = client.next_value(next("refunds")).await.unwrap_err();
    assert_eq!(again.code(), Code::Unavailable, "the refusal does not last: {again:?}");
}

/// The restore procedure with sequences: `snowmint fence` refuses to fence a prefix with
/// sequences until told how far to move them (and changes nothing), then moves them; an
/// instance started after the restore takes values above everything issued before it, and
/// the instance that ran across the restore (refusing, if it met the restored record first)
/// goes on above the fence too. No value twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_moves_sequences_past_what_a_restore_lost() {
    let mut etcd = EtcdCluster::start(1).await;
    let endpoints = etcd.endpoints();
    let flags = ["--etcd-endpoints", endpoints.as_str(), "--etcd-prefix", "/seq-fence"];
    assert_eq!(run_binary(&[&["sequence", "create", "refunds"][..], &flags[..]].concat()).0, 0);
    let segments = ["--sequence-min-segment", "10", "--sequence-max-segment", "10"];
    let before = ServerBuilder::new().etcd(&endpoints, "/seq-fence").args(segments).spawn();
    let client = before.client().await;
    let snapshot = tempfile::NamedTempFile::new().unwrap();
    let mut got = take(client.clone(), "refunds".into(), 5, 9).await;
    etcd.snapshot(snapshot.path()).await;
    got.extend(take(client.clone(), "refunds".into(), 5, 9).await);
    etcd.restore(snapshot.path()).await;

    let show = || run_binary(&[&["sequence", "show", "refunds", "--json"][..], &flags[..]].concat());
    let restored = show();
    let record: serde_json::Value = serde_json::from_str(restored.1.trim()).unwrap();
    assert!(record["next"].as_i64().unwrap() <= *got.iter().max().unwrap(), "not restored: {restored:?}");
    let refused = run_binary(&[&["fence"][..], &flags[..]].concat());
    assert_eq!(refused.0, 1, "{refused:?}");
    assert!(refused.2.contains("refunds") && refused.2.contains("--sequence-skip"), "{refused:?}");
    assert_eq!(show(), restored, "the refused fence changed the sequence");
    let fenced = run_binary(&[&["fence", "--sequence-skip", "1000"][..], &flags[..]].concat());
    assert_eq!(fenced.0, 0, "{fenced:?}");
    assert!(fenced.1.contains("sequence refunds moved from"), "{fenced:?}");

    let after = ServerBuilder::new().etcd(&endpoints, "/seq-fence").args(segments).spawn();
    let fresh = take(after.client().await, "refunds".into(), 5, 9).await;
    let highest = *got.iter().max().unwrap();
    assert!(fresh.iter().all(|&v| v > highest), "a value at or below {highest} after the fence: {fresh:?}");
    got.extend(fresh);
    // The instance that ran across the restore may have met the restored record before the
    // fence (it then refuses, UNAVAILABLE); it reads the record again when asked, and goes on.
    let mut client = client;
    let mut resumed = None;
    for _ in 0..100 {
        match client.next_value(next("refunds")).await {
            Ok(answer) => {
                resumed = Some(answer.into_inner().value);
                break;
            }
            Err(status) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let resumed = resumed.expect("the instance that ran across the restore never answered after the fence");
    assert!(resumed > highest, "{resumed} at or below {highest} after the fence");
    got.push(resumed);
    got.extend(take(client, "refunds".into(), 5, 9).await);
    let unique: BTreeSet<i64> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "values issued twice");
}

/// A claim held up in the network from before a restore of etcd lands after the fence:
/// etcd hands the restored revisions out again, so by then the sequence's record may stand at
/// the very mod_revision the claim compares, holding other values. The write compares the
/// record it read too, and is refused; had it landed, the record would have gone back below
/// what was issued after the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_held_up_across_a_restore_is_refused_where_its_revision_comes_again() {
    use snowmint::sequence::etcd::EtcdSequences;
    use snowmint::sequence::{Answer, ClaimId, MAX_VALUE, Op};
    use snowmint::store::Version;

    let mut etcd = EtcdCluster::start(1).await;
    let config = common::claims::etcd_config(&etcd.endpoints(), "/seq-held", Duration::from_secs(3), None, "test");
    let store = EtcdSequences::connect(&config).await.unwrap();
    store.create("refunds", &Record::new(1, MAX_VALUE, false).unwrap()).await.unwrap();
    let read = |answer: Answer| match answer {
        Answer::Read(Some(current)) => current,
        other => panic!("{other:?}"),
    };
    let claim = |(version, over): &(Version, Record), number: u64, size: u64| Op::Write {
        expect: *version,
        over: over.clone(),
        record: Record { next: over.next + size, claim: Some(ClaimId { session: 9, number }), ..over.clone() },
    };
    let snapshot = tempfile::NamedTempFile::new().unwrap();
    etcd.snapshot(snapshot.path()).await;
    // After the snapshot: a claim lands, and the next is sent and held up, never answered.
    let first = read(store.call("refunds", Op::Read, None).await);
    assert!(matches!(store.call("refunds", claim(&first, 0, 100), None).await, Answer::Written(_)));
    let before = read(store.call("refunds", Op::Read, None).await);
    let held_up = claim(&before, 1, 100);
    let Version::At(held_revision) = before.0 else { panic!("{before:?}") };

    etcd.restore(snapshot.path()).await;
    let store = EtcdSequences::connect(&config).await.unwrap();
    let endpoints = etcd.endpoints();
    let fenced =
        run_binary(&["fence", "--sequence-skip", "1000", "--etcd-endpoints", &endpoints, "--etcd-prefix", "/seq-held"]);
    assert_eq!(fenced.0, 0, "{fenced:?}");
    // Claims after the fence, until the record stands at the held claim's revision again.
    let mut client = etcd.client().await;
    let mut number = 10;
    let current = loop {
        let current = read(store.call("refunds", Op::Read, None).await);
        let Version::At(revision) = current.0 else { panic!("{current:?}") };
        assert!(revision <= held_revision, "the revisions were not handed out again: {revision} > {held_revision}");
        if revision == held_revision {
            break current;
        }
        if revision + 1 < held_revision {
            client.put("/seq-held/filler", "x", None).await.unwrap();
        } else {
            assert!(matches!(store.call("refunds", claim(&current, number, 10), None).await, Answer::Written(_)));
            number += 1;
        }
    };
    assert!(current.1.next > before.1.next + 100, "the fence did not move the record past the held claim: {current:?}");

    let landed = store.call("refunds", held_up, None).await;
    assert_eq!(landed, Answer::Refused(Some(current.clone())), "the held-up claim landed on the fenced record");
    assert_eq!(read(store.call("refunds", Op::Read, None).await), current, "the record changed");
}

/// A record stored in other bytes than this release encodes it in (another release wrote it:
/// another field order, spaces) is still written over: the write compares the value, and
/// compares it again by the stored bytes when those read as the record it expects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_stored_in_other_bytes_is_still_written_over() {
    use snowmint::sequence::etcd::EtcdSequences;
    use snowmint::sequence::{Answer, ClaimId, Op};

    let etcd = EtcdCluster::start(1).await;
    let config = common::claims::etcd_config(&etcd.endpoints(), "/seq-bytes", Duration::from_secs(3), None, "test");
    let mut client = etcd.client().await;
    client.put("/seq-bytes/sequences/refunds", r#"{ "max": 500, "claim": null, "next": 7 }"#, None).await.unwrap();
    let store = EtcdSequences::connect(&config).await.unwrap();
    let Answer::Read(Some((version, over))) = store.call("refunds", Op::Read, None).await else { panic!() };
    assert_eq!((over.next, over.max), (7, 500));
    let record = Record { next: 17, claim: Some(ClaimId { session: 9, number: 0 }), ..over.clone() };
    let written =
        store.call("refunds", Op::Write { expect: version, over: over.clone(), record: record.clone() }, None).await;
    assert!(matches!(written, Answer::Written(_)), "{written:?}");
    let Answer::Read(Some((_, stored))) = store.call("refunds", Op::Read, None).await else { panic!() };
    assert_eq!(stored, record);
    // Over a record that is not the one expected, the write is refused as before.
    let stale = Record { next: 27, ..record.clone() };
    let refused = store.call("refunds", Op::Write { expect: version, over, record: stale }, None).await;
    assert!(matches!(refused, Answer::Refused(Some((_, ref now))) if *now == record), "{refused:?}");
}

/// One call to an ordered sequence as the caller saw it: when it was sent and answered, and
/// the values it got.
struct Answered {
    sent: std::time::Instant,
    received: std::time::Instant,
    values: Vec<i64>,
}

/// Calls `name` on `client` until `stop` (or until its server is gone), keeping every answer;
/// refusals must be `UNAVAILABLE` (or the caller's own timer) and are retried.
async fn call_ordered(
    mut client: IdServiceClient<Channel>,
    name: &'static str,
    batch_size: u32,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<Answered> {
    let mut got = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let sent = std::time::Instant::now();
        let mut request = tonic::Request::new(batch(name, batch_size));
        request.set_timeout(std::time::Duration::from_secs(2));
        match client.batch_values(request).await {
            Ok(answer) => {
                let answer = answer.into_inner();
                assert!(answer.ordered);
                got.push(Answered { sent, received: std::time::Instant::now(), values: answer.values });
            }
            // Its server was killed.
            Err(status) if status.code() == Code::Unknown => break,
            Err(status) => {
                assert!(
                    matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled),
                    "{status:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }
    got
}

/// An ordered sequence over three instances of one etcd: one serves it, the others forward
/// its calls; every answer's values are above those of every answer received before its
/// call was sent, fleet-wide, and stay so when the serving instance is killed (-9) and
/// another takes over once its lease is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ordered_sequence_increases_fleet_wide_through_the_loss_of_its_server() {
    let etcd = EtcdCluster::start(1).await;
    let endpoints = etcd.endpoints();
    let flags = ["--etcd-endpoints", endpoints.as_str(), "--etcd-prefix", "/seq-ordered"];
    let created = run_binary(&[&["sequence", "create", "receipts", "--ordered"][..], &flags[..]].concat());
    assert_eq!(created.0, 0, "{created:?}");
    assert!(created.1.contains("created ordered sequence receipts"), "{created:?}");
    let spawn = || {
        ServerBuilder::new()
            .etcd(&endpoints, "/seq-ordered")
            .args(["--lease-ttl", "2", "--sequence-min-segment", "10", "--sequence-max-segment", "50"])
            .spawn()
    };
    let servers = vec![spawn(), spawn(), spawn()];
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut callers = Vec::new();
    for server in &servers {
        for batch_size in [1, 7] {
            callers.push(tokio::spawn(call_ordered(server.client().await, "receipts", batch_size, stop.clone())));
        }
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    // The instance that serves it, as etcd names it.
    let mut kv = etcd.client().await;
    let held = kv.get("/seq-ordered/sequence-holders/receipts", None).await.unwrap();
    let holder: serde_json::Value = serde_json::from_slice(held.kvs()[0].value()).unwrap();
    let address = holder["address"].as_str().unwrap().to_string();
    let index = servers.iter().position(|s| s.grpc.to_string() == address).expect("the holder is one of the three");
    servers[index].signal("KILL");
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut answers = Vec::new();
    for caller in callers {
        answers.extend(caller.await.unwrap());
    }
    let killed_at = answers.iter().map(|a| a.received).max().unwrap();
    let mut all = BTreeSet::new();
    for answer in &answers {
        assert!(answer.values.windows(2).all(|w| w[0] < w[1]), "{:?}", answer.values);
        for &value in &answer.values {
            assert!(all.insert(value), "{value} issued twice");
        }
    }
    // Sorted by when they were received: each answer is above every answer received before
    // the next one was sent.
    answers.sort_by_key(|a| a.received);
    let mut highest_before: Vec<(std::time::Instant, i64)> = Vec::new();
    let mut highest = 0;
    for answer in &answers {
        highest = highest.max(*answer.values.last().unwrap());
        highest_before.push((answer.received, highest));
    }
    for answer in &answers {
        let before = highest_before.partition_point(|(received, _)| *received < answer.sent);
        if before > 0 {
            let floor = highest_before[before - 1].1;
            assert!(answer.values[0] > floor, "{} answered after {floor} was received", answer.values[0]);
        }
    }
    let after_kill = answers.iter().filter(|a| a.sent > killed_at - std::time::Duration::from_secs(3)).count();
    assert!(after_kill > 0, "no call was answered after the serving instance was killed");
    assert!(answers.len() > 100, "only {} answers", answers.len());
    drop(servers);
}

/// `snowmint sequence show NAME --value V --json` with `flags`: its provenance object, once the
/// holder's recorder has written it (off the path of the values: bounded wait).
async fn held_by(name: &str, value: i64, flags: &[&str]) -> serde_json::Value {
    let value = value.to_string();
    let since = Instant::now();
    loop {
        let (code, stdout, stderr) =
            run_binary(&[&["sequence", "show", name, "--value", &value, "--json"][..], flags].concat());
        assert_eq!(code, 0, "{stdout}{stderr}");
        let shown: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        let provenance = shown["provenance"].clone();
        if provenance["found"] == true || since.elapsed() > Duration::from_secs(10) {
            return provenance;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The segment history in etcd: two servers take turns handing out one sequence's values;
/// `snowmint sequence show --value` names, for values each served, the pid of the server that
/// held them, and `snowmint audit` passes, its slot audit untroubled by the segment records
/// beside the slots' under `history/`. A segment record planted by hand over values another
/// server held fails the audit, naming both records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_values_holder_is_on_record_in_etcd_and_an_overlap_fails_the_audit() {
    let etcd = EtcdCluster::start(1).await;
    let endpoints = etcd.endpoints();
    let flags = ["--etcd-endpoints", endpoints.as_str(), "--etcd-prefix", "/seq-hist"];
    let created = run_binary(&[&["sequence", "create", "parcels"][..], &flags[..]].concat());
    assert_eq!(created.0, 0, "{created:?}");
    let server = || {
        ServerBuilder::new()
            .etcd(&endpoints, "/seq-hist")
            .args(["--sequence-min-segment", "10", "--sequence-max-segment", "40"])
            .spawn()
    };
    let servers = [server(), server()];
    let mut all = BTreeSet::new();
    let mut served: Vec<(u32, i64)> = Vec::new();
    for _ in 0..2 {
        for server in &servers {
            let values = take(server.client().await, "parcels".into(), 6, 9).await;
            for &value in &values {
                assert!(all.insert(value), "{value} issued twice");
            }
            let pid = server.pid() as u32;
            served.extend([values[0], values[values.len() / 2], values[values.len() - 1]].map(|v| (pid, v)));
        }
    }
    let mut records = Vec::new();
    for &(pid, value) in &served {
        let held = held_by("parcels", value, &flags).await;
        assert_eq!(held["found"], true, "{value}: {held}");
        assert_eq!(held["pid"], pid, "{value} held by {held}");
        assert!(held["from"].as_i64().unwrap() <= value && value <= held["to"].as_i64().unwrap(), "{held}");
        let key = held["record"].as_str().unwrap().to_string();
        assert!(key.starts_with("/seq-hist/history/sequences/parcels/"), "{key}");
        records.push(key);
    }
    let (code, stdout, stderr) = run_binary(&[&["audit"][..], &flags[..]].concat());
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("2 slots, 2 holders") && stdout.contains("1 sequences, "), "{stdout}");

    // Planted by hand: a record of the first server's over values the second held.
    let mut client = etcd.client().await;
    let (first_key, second_key) = (&records[0], &records[3]);
    let second: SegmentRecord =
        serde_json::from_slice(&common::etcd::get(&mut client, second_key).await.unwrap()).unwrap();
    let mut planted: SegmentRecord =
        serde_json::from_slice(&common::etcd::get(&mut client, first_key).await.unwrap()).unwrap();
    planted.values = second.values.start..second.values.start + 3;
    planted.claim.number = 999_999;
    let planted_key = format!("/seq-hist/history/sequences/parcels/{}", planted.name());
    client.put(planted_key.as_str(), serde_json::to_vec(&planted).unwrap(), None).await.unwrap();
    let (code, stdout, stderr) = run_binary(&[&["audit"][..], &flags[..]].concat());
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("overlapping segment"), "{stderr}");
    let fail = stdout.lines().find(|l| l.starts_with("FAIL sequence parcels: ")).unwrap_or_default();
    assert!(fail.contains(second_key.as_str()) && fail.contains(&planted_key), "names both:\n{stdout}");
    assert!(fail.contains(&format!("pid {}", servers[0].pid())), "{stdout}");
}

/// The segment history in a state dir: a clean stop gives the unused rest back and its
/// records say so, so the next server's segment, which starts where the give-back began,
/// overlaps none of them and the audit passes; each value's holder is named, and a value no
/// segment has taken yet is said to be never issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_segments_are_on_record_with_their_give_backs() {
    let builder = ServerBuilder::new().args(["--create-sequences-on-use", "--sequence-min-segment", "50"]);
    let state = builder.state_path().to_str().unwrap().to_string();
    let flags = ["--state-dir", state.as_str()];
    let mut first = builder.spawn();
    let first_values = take(first.client().await, "labels".into(), 3, 9).await;
    let first_pid = first.pid() as u32;
    first.signal("TERM");
    assert!(first.wait(Duration::from_secs(10)).await.success());
    let second = builder.spawn();
    let second_values = take(second.client().await, "labels".into(), 3, 9).await;
    assert_eq!(second_values[0], first_values[first_values.len() - 1] + 1, "the give-back left a gap");

    for (pid, values) in [(first_pid, &first_values), (second.pid() as u32, &second_values)] {
        for value in [values[0], values[values.len() - 1]] {
            let held = held_by("labels", value, &flags).await;
            assert_eq!(held["pid"], pid, "{value} held by {held}");
        }
    }
    let first_held = held_by("labels", first_values[0], &flags).await;
    assert_eq!(first_held["to"], first_values[first_values.len() - 1], "given back above: {first_held}");
    assert!(first_held["claimed_to"].as_i64().unwrap() > first_held["to"].as_i64().unwrap(), "{first_held}");
    let never = held_by("labels", 1_000_000, &flags).await;
    assert_eq!(never["found"], false);
    assert!(never["reason"].as_str().unwrap().contains("never issued"), "{never}");

    let (code, stdout, stderr) = run_binary(&[&["audit", "--json"][..], &flags[..]].concat());
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["sequences"]["sequences"], 1, "{report}");
    assert!(report["sequences"]["given_back"].as_u64().unwrap() >= 1, "{report}");
    assert!(report["sequences"]["segments"].as_u64().unwrap() >= 2, "{report}");
}
