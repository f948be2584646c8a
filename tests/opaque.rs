//! Opaque public IDs against the real server: a million of them unique, each revealing to the
//! ID beneath it and none showing the minting order; refused without a key; a key file open
//! to others refused at start before anything is written; key rotation; the Connect protocol.

mod common;

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::{ServerBuilder, TestServer, assert_increasing, assert_unique, metric_value};
use snowmint::opaque::{Keyring, OpaqueId, VALUE_LIMIT};
use snowmint::proto::{BatchIdsRequest, DecodeRequest, NextIdRequest, RevealRequest};

const KEY_0: [u8; 32] = [0x10; 32];
const KEY_1: [u8; 32] = [0x21; 32];

fn hex(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// A key file of `keys` in `dir`, with `mode`.
fn key_file(dir: &Path, keys: &[(u32, [u8; 32])], mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("opaque.keys");
    let lines: String = keys.iter().map(|(version, key)| format!("{version} {}\n", hex(key))).collect();
    std::fs::write(&path, format!("# test keys\n{lines}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn keyring(keys: &[(u32, [u8; 32])]) -> Arc<Keyring> {
    Arc::new(Keyring::new(keys.iter().copied()).unwrap())
}

/// A server in this process with `keys` (none: no key file), on `server`'s state dir.
async fn start(server: &ServerBuilder, keys: &[(u32, [u8; 32])]) -> TestServer {
    let opaque = (!keys.is_empty()).then(|| keyring(keys));
    server.clone().config(|c| c.opaque = opaque).start().await
}

/// Spearman's rank correlation of `values` with their order: 1 for increasing values, -1 for
/// decreasing, near 0 (within a few 1/sqrt(n)) for values in no relation to their order.
/// The values are distinct, so there are no ties: rho = 1 - 6 * sum(d^2) / (n (n^2 - 1)).
fn spearman_with_order(values: &[u64]) -> f64 {
    let mut by_value: Vec<usize> = (0..values.len()).collect();
    by_value.sort_unstable_by_key(|&i| values[i]);
    let mut d2: u128 = 0;
    for (rank, &position) in by_value.iter().enumerate() {
        let d = rank.abs_diff(position) as u128;
        d2 += d * d;
    }
    let n = values.len() as f64;
    1.0 - 6.0 * d2 as f64 / (n * (n * n - 1.0))
}

/// 20,000 opaque IDs from `server`: (value, string).
async fn mint(server: &TestServer) -> Vec<(u64, String)> {
    let mut client = server.client().await;
    let batch = client.batch_ids(BatchIdsRequest { count: 20_000, opaque: true }).await.unwrap().into_inner();
    batch.ids.into_iter().zip(batch.texts).collect()
}

#[test]
fn spearman_is_one_for_order_minus_one_for_reverse() {
    assert_eq!(spearman_with_order(&[1, 5, 9, 20]), 1.0);
    assert_eq!(spearman_with_order(&[20, 9, 5, 1]), -1.0);
    assert!(spearman_with_order(&[3, 1, 4, 2]).abs() < 0.5);
}

/// A million opaque IDs from one key, asked for as a caller would (BatchIds in batches): all
/// distinct, each string the value's, each revealing to an ID the server minted (all of them
/// with the library's permutation, a sample with Reveal), and the values in no relation to
/// the minting order that the IDs beneath them keep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_opaque_ids_are_unique_reveal_to_their_ids_and_show_no_order() {
    const TOTAL: usize = 1_000_000;
    const BATCH: usize = 65_536;
    let server = start(&ServerBuilder::new(), &[(0, KEY_0), (1, KEY_1)]).await;
    let mut client = server.client().await;
    let (mut values, mut texts) = (Vec::with_capacity(TOTAL), Vec::with_capacity(TOTAL));
    while values.len() < TOTAL {
        let count = BATCH.min(TOTAL - values.len()) as u32;
        let batch = client.batch_ids(BatchIdsRequest { count, opaque: true }).await.unwrap().into_inner();
        assert_eq!((batch.ids.len(), batch.texts.len()), (count as usize, count as usize));
        values.extend(batch.ids);
        texts.extend(batch.texts);
    }
    assert_unique(&values);
    assert!(values.iter().all(|&v| v < VALUE_LIMIT));
    assert_eq!(texts.iter().collect::<HashSet<_>>().len(), TOTAL, "a string twice");

    let keys = keyring(&[(0, KEY_0), (1, KEY_1)]);
    let mut ids = Vec::with_capacity(TOTAL);
    for (&value, text) in values.iter().zip(&texts) {
        let opaque = OpaqueId::parse(text).unwrap();
        assert_eq!(opaque, OpaqueId { key_version: 1, value }, "{text}: the newest key makes IDs");
        ids.push(keys.reveal(opaque).unwrap());
    }
    // Beneath: this server's IDs, in the order it minted them.
    assert_increasing(&ids);
    let layout = snowmint::layout::Layout::default_snowmint();
    assert!(ids.iter().all(|&id| layout.unpack(id).worker == 5));
    for i in (0..TOTAL).step_by(TOTAL / 200) {
        let by_value = RevealRequest { id: values[i], key_version: Some(1), ..Default::default() };
        let revealed = client.reveal(by_value).await.unwrap().into_inner();
        assert_eq!((revealed.id, revealed.key_version), (ids[i], 1));
        let by_text = RevealRequest { text: texts[i].to_lowercase(), ..Default::default() };
        assert_eq!(client.reveal(by_text).await.unwrap().into_inner().id, ids[i]);
    }

    let rho = spearman_with_order(&values);
    println!("Spearman's rho of {TOTAL} opaque values against their minting order: {rho:+.6}");
    assert!(rho.abs() < 0.01, "opaque values follow the minting order: rho {rho}");
    assert_eq!(spearman_with_order(&ids), 1.0);

    let encoded = r#"snowmint_opaque_ids_total{operation="encoded"}"#;
    assert_eq!(server.metric(encoded).await, TOTAL as f64);
    assert_eq!(server.metric(r#"snowmint_opaque_ids_total{operation="revealed"}"#).await, 400.0);
    assert_eq!(server.metric("snowmint_opaque_key_version").await, 1.0);
    server.stop().await;
}

/// Without a key file every opaque request fails the same way, FAILED_PRECONDITION naming
/// the flag, before anything is minted; plain calls go on.
#[tokio::test]
async fn without_a_key_opaque_requests_fail_with_failed_precondition_naming_the_flag() {
    let server = start(&ServerBuilder::new(), &[]).await;
    let mut client = server.client().await;
    let text = OpaqueId::new(0, 12345).unwrap().to_string();
    let statuses = [
        client.next_id(NextIdRequest { opaque: true }).await.unwrap_err(),
        client.batch_ids(BatchIdsRequest { count: 10, opaque: true }).await.unwrap_err(),
        client.reveal(RevealRequest { text: text.clone(), ..Default::default() }).await.unwrap_err(),
        client.reveal(RevealRequest { id: 12345, key_version: Some(0), ..Default::default() }).await.unwrap_err(),
        client.decode(DecodeRequest { text, ..Default::default() }).await.unwrap_err(),
    ];
    for status in statuses {
        assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
        assert!(status.message().contains("--opaque-key-file"), "{}", status.message());
    }
    let client_crate = snowmint_client::Client::builder([server.url()]).connect().unwrap();
    let error = client_crate.next_opaque().await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::FailedPrecondition, "{error}");
    assert_eq!(server.metric("snowmint_ids_issued_total").await, 0.0, "minted for a call that failed");
    assert_ne!(client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id, 0);
    let refused = r#"snowmint_requests_total{code="FailedPrecondition",method="Reveal",protocol="grpc"}"#;
    assert_eq!(server.metric(refused).await, 2.0);
    assert_eq!(server.metric("snowmint_opaque_key_version").await, -1.0);
    server.stop().await;
}

/// Malformed strings, unknown versions and mixed requests are INVALID_ARGUMENT, each saying
/// what is wrong.
#[tokio::test]
async fn malformed_opaque_requests_are_invalid_arguments_that_say_why() {
    let server = start(&ServerBuilder::new(), &[(0, KEY_0)]).await;
    let mut client = server.client().await;
    let reveal =
        |text: &str, id: u64, key_version: Option<u32>| RevealRequest { id, key_version, text: text.to_string() };
    let cases = [
        (reveal("0ABC", 0, None), "not 14"),
        (reveal("0000000000000U", 0, None), "'U' (character 14)"),
        (reveal("08000000000000", 0, None), "2^63"),
        (reveal("30000000000000", 0, None), "key version 3 is not among the opaque keys (versions 0)"),
        (reveal("", 5, Some(7)), "key version 7 is not among"),
        (reveal("", 1 << 63, Some(0)), "below 2^63"),
        (reveal("", 0, Some(40)), "not between 0 and 31"),
        (reveal("00000000000000", 5, None), "`text` alone"),
        (reveal("00000000000000", 0, Some(0)), "`text` alone"),
        (reveal("", 5, None), "needs its `key_version`"),
    ];
    for (request, says) in cases {
        let status = client.reveal(request.clone()).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{request:?}: {status:?}");
        assert!(status.message().contains(says), "{request:?}: {}", status.message());
    }
    let status = client.decode(DecodeRequest { id: 5, key_version: Some(1), ..Default::default() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("set `opaque`"), "{}", status.message());
    server.stop().await;
}

/// Decode of an opaque ID reveals it first: by its string, or by its value and version.
#[tokio::test]
async fn decode_reveals_an_opaque_id_first() {
    let server = start(&ServerBuilder::new(), &[(4, KEY_0)]).await;
    let mut client = server.client().await;
    let opaque = client.next_id(NextIdRequest { opaque: true }).await.unwrap().into_inner();
    assert!(opaque.text.starts_with('4'), "{}", opaque.text);
    let id = keyring(&[(4, KEY_0)]).reveal(OpaqueId { key_version: 4, value: opaque.id }).unwrap();
    let plain = client.decode(DecodeRequest { id, ..Default::default() }).await.unwrap().into_inner();
    let by_text =
        client.decode(DecodeRequest { text: opaque.text.clone(), ..Default::default() }).await.unwrap().into_inner();
    let by_value = client
        .decode(DecodeRequest { id: opaque.id, opaque: true, key_version: Some(4), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_text, plain);
    assert_eq!(by_value, plain);
    assert_eq!(plain.worker_id, 5);
    server.stop().await;
}

/// Opaque values are unique per key version only, so every answer that carries them says
/// the version, and Reveal and Decode take a value only with its version: without it, a value
/// the new key made would be revealed with the old key into another ID, and nothing would say.
#[tokio::test]
async fn numeric_opaque_ids_come_with_their_key_version_and_need_it_back() {
    let server = start(&ServerBuilder::new(), &[(0, KEY_0), (1, KEY_1)]).await;
    let mut client = server.client().await;
    let one = client.next_id(NextIdRequest { opaque: true }).await.unwrap().into_inner();
    assert_eq!(one.key_version, 1, "NextId did not say the key version: {one:?}");
    assert_eq!(OpaqueId::parse(&one.text).unwrap(), OpaqueId { key_version: 1, value: one.id });
    let batch = client.batch_ids(BatchIdsRequest { count: 100, opaque: true }).await.unwrap().into_inner();
    assert_eq!(batch.key_version, 1, "BatchIds did not say the key version");
    for (&value, text) in batch.ids.iter().zip(&batch.texts) {
        assert_eq!(OpaqueId::parse(text).unwrap(), OpaqueId { key_version: 1, value }, "{text}");
    }
    let plain = client.next_id(NextIdRequest::default()).await.unwrap().into_inner();
    assert_eq!((plain.key_version, plain.text.as_str()), (0, ""), "a plain answer with a key version");

    let beneath = keyring(&[(1, KEY_1)]).reveal(OpaqueId { key_version: 1, value: one.id }).unwrap();
    // The same number under the old key is another ID: what the number alone would reveal.
    let under_old = keyring(&[(0, KEY_0)]).reveal(OpaqueId { key_version: 0, value: one.id }).unwrap();
    assert_ne!(under_old, beneath);
    let with_version = RevealRequest { id: one.id, key_version: Some(1), ..Default::default() };
    assert_eq!(client.reveal(with_version).await.unwrap().into_inner().id, beneath);
    let alone = client.reveal(RevealRequest { id: one.id, ..Default::default() }).await;
    let status = alone.expect_err("a value without its key version was revealed");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("needs its `key_version`"), "{}", status.message());
    // Version 0, given, is a version as any other.
    let old = RevealRequest { id: one.id, key_version: Some(0), ..Default::default() };
    assert_eq!(
        client.reveal(old).await.unwrap().into_inner(),
        snowmint::proto::RevealResponse { id: under_old, key_version: 0 }
    );

    let decode = |key_version| DecodeRequest { id: one.id, opaque: true, key_version, ..Default::default() };
    assert_eq!(client.decode(decode(Some(1))).await.unwrap().into_inner().id, beneath);
    let status = client.decode(decode(None)).await.expect_err("a value without its key version was decoded");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("needs its `key_version`"), "{}", status.message());
    server.stop().await;
}

/// A rotation: the same IDs' strings under the old and the new key never collide, the server
/// with both keys makes new IDs with the new one and reveals each string with its own
/// version, and once the old key is retired its strings fail, saying so.
#[tokio::test]
async fn key_rotation_keeps_strings_unique_and_retires_old_ones_clearly() {
    let state = ServerBuilder::new();
    let before = start(&state, &[(0, KEY_0)]).await;
    let old = mint(&before).await;
    before.stop().await;

    let both = start(&state, &[(0, KEY_0), (1, KEY_1)]).await;
    let new = mint(&both).await;
    let mut client = both.client().await;
    let texts: HashSet<&String> = old.iter().chain(&new).map(|(_, text)| text).collect();
    assert_eq!(texts.len(), old.len() + new.len(), "a string under both keys");
    assert!(old.iter().all(|(_, t)| t.starts_with('0')) && new.iter().all(|(_, t)| t.starts_with('1')));
    let mut revealed = Vec::new();
    for (i, (value, text)) in old.iter().chain(&new).enumerate().step_by(500) {
        let version = u32::from(i >= old.len());
        let by_text = client.reveal(RevealRequest { text: text.clone(), ..Default::default() }).await.unwrap();
        let by_text = by_text.into_inner();
        assert_eq!(by_text.key_version, version);
        let by_value = RevealRequest { id: *value, key_version: Some(version), ..Default::default() };
        assert_eq!(client.reveal(by_value).await.unwrap().into_inner().id, by_text.id);
        revealed.push(by_text.id);
    }
    assert_increasing(&revealed);
    both.stop().await;

    let after = start(&state, &[(1, KEY_1)]).await;
    let mut client = after.client().await;
    let status = client.reveal(RevealRequest { text: old[0].1.clone(), ..Default::default() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("key version 0 is not among the opaque keys (versions 1)"), "{status:?}");
    assert!(status.message().contains("retired"), "{status:?}");
    assert!(client.reveal(RevealRequest { text: new[0].1.clone(), ..Default::default() }).await.is_ok());
    after.stop().await;
}

/// A key file its group or others can read stops the start, with one line naming the file,
/// its mode and the fix, before anything is claimed or written; so do malformed files, and
/// no message shows a key.
#[test]
fn a_bad_key_file_is_refused_at_start_naming_the_file_and_writing_nothing() {
    let server = ServerBuilder::new();
    let keys = server.dir().join("keys");
    std::fs::create_dir(&keys).unwrap();
    let open = key_file(&keys, &[(0, KEY_0)], 0o644);
    let state = server.state_path();
    let (code, stderr) = server.clone().args([OsStr::new("--opaque-key-file"), open.as_os_str()]).run_to_exit();
    assert_ne!(code, 0);
    let line = stderr.trim();
    assert_eq!(line.lines().count(), 1, "{stderr}");
    assert!(line.contains(&format!("--opaque-key-file {}", open.display())), "{line}");
    assert!(line.contains("mode 0644") && line.contains("chmod 600"), "{line}");
    assert!(!state.exists(), "the refused start wrote {}", state.display());

    let bad = [
        ("", "no keys"),
        ("0 abc\n", "line 1: the key has 3 hex digits"),
        (&*format!("0 {}\n1 {}\n1 {}\n", hex(&KEY_0), hex(&KEY_1), hex(&[7; 32])), "line 3: key version 1 again"),
        (&*format!("40 {}\n", hex(&KEY_0)), "line 1: key version \"40\""),
    ];
    for (text, says) in bad {
        let path = key_file(&keys, &[], 0o600);
        std::fs::write(&path, text).unwrap();
        let (code, stderr) = server.clone().args([OsStr::new("--opaque-key-file"), path.as_os_str()]).run_to_exit();
        assert_ne!(code, 0, "{text:?}");
        assert!(stderr.contains(says) && stderr.trim().lines().count() == 1, "{text:?}: {stderr}");
        assert!(!stderr.contains(&hex(&KEY_0)[..16]) && !stderr.contains(&hex(&KEY_1)[..16]), "{stderr}");
        assert!(!state.exists(), "the refused start wrote {}", state.display());
    }
}

/// The flag and its environment variable reach the server, the start logs the versions and
/// not a key, and the Connect protocol speaks the opaque fields and Reveal in JSON (as curl
/// would), counted under its method; `snowmint next` and `batch` ask for opaque IDs, and
/// `snowmint decode` reveals a string with the same file.
#[tokio::test]
async fn the_binary_serves_opaque_ids_over_connect_json_and_decode_reveals_them() {
    let server = ServerBuilder::new();
    let keys = key_file(server.dir(), &[(0, KEY_0), (2, KEY_1)], 0o600);
    let mut server = server.env("SNOWMINT_OPAQUE_KEY_FILE", &keys).spawn();
    let post = |method: &str, body: &str| {
        let url = format!("http://{}/snowmint.v1.IdService/{method}", server.grpc);
        let mut curl = Command::new("curl");
        curl.args(["-s", "-S", "--max-time", "10", "-H", "Content-Type: application/json", "-d", body, &url]);
        let out = common::output_within(curl, common::EXIT_LIMIT);
        assert_eq!(out.code, 0, "{}", out.stderr);
        serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap_or_else(|e| panic!("{}: {e}", out.stdout))
    };
    let next = post("NextId", r#"{"opaque":true}"#);
    let (value, text) = (next["id"].as_str().unwrap().to_string(), next["text"].as_str().unwrap().to_string());
    assert!(text.starts_with('2') && text.len() == 14, "{next}");
    assert_eq!(next["keyVersion"], 2, "{next}");
    let batch = post("BatchIds", r#"{"count":3,"opaque":true}"#);
    assert_eq!(batch["texts"].as_array().unwrap().len(), 3, "{batch}");
    assert_eq!(batch["keyVersion"], 2, "{batch}");
    let alone = post("Reveal", &format!(r#"{{"id":"{value}"}}"#));
    assert_eq!(alone["code"], "invalid_argument", "{alone}");

    let revealed = post("Reveal", &format!(r#"{{"text":"{}"}}"#, text.to_lowercase()));
    let id = revealed["id"].as_str().unwrap().to_string();
    assert_eq!(revealed["keyVersion"], 2, "{revealed}");
    let by_value = post("Reveal", &format!(r#"{{"id":"{value}","keyVersion":2}}"#));
    assert_eq!(by_value["id"], revealed["id"], "{by_value}");
    let decoded = post("Decode", &format!(r#"{{"text":"{text}"}}"#));
    assert_eq!(decoded["id"].as_str(), Some(id.as_str()), "{decoded}");
    let retired = post("Reveal", r#"{"text":"10000000000000"}"#);
    assert_eq!(retired["code"], "invalid_argument", "{retired}");

    let (_, metrics) = common::http_get(server.admin, "/metrics").await;
    let count = |code: &str| {
        metric_value(
            &metrics,
            &format!(r#"snowmint_requests_total{{code="{code}",method="Reveal",protocol="connect"}}"#),
        )
    };
    assert_eq!((count("OK"), count("InvalidArgument")), (2.0, 2.0));
    assert_eq!(metric_value(&metrics, "snowmint_opaque_key_version"), 2.0);

    let logs = server.drain_logs().join("\n");
    assert!(logs.contains("opaque IDs on") && logs.contains("[0, 2]"), "{logs}");
    assert!(!logs.contains(&hex(&KEY_0)[..16]) && !logs.contains(&hex(&KEY_1)[..16]), "{logs}");

    let addr = format!("http://{}", server.grpc);
    let (code, stdout, stderr) = common::run_binary(&["batch", "3", "--opaque", "--addr", &addr]);
    assert_eq!(code, 0, "{stderr}");
    let printed: Vec<OpaqueId> = stdout.lines().map(|line| line.parse().unwrap()).collect();
    assert!(printed.len() == 3 && printed.iter().all(|o| o.key_version == 2), "{stdout}");
    let (code, stdout, stderr) = common::run_binary(&["next", "--opaque", "--addr", &addr]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim().parse::<OpaqueId>().unwrap().key_version, 2, "{stdout}");

    let (code, stdout, stderr) =
        common::run_binary(&["decode", &text, "--opaque-key-file", keys.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let offline: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(offline["id"].as_str(), Some(id.as_str()), "{stdout}");
    assert_eq!(offline["time"], decoded["time"], "{stdout}");
    server.signal("TERM");
    assert!(server.wait(common::EXIT_LIMIT).await.success());
}
