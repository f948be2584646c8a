//! Tenants on the real server: callers known by a bearer token or a client certificate, each
//! permission allowed to its tenant and denied to the others over gRPC and Connect, a token
//! removed from its file refused on a connection already open, a broken file changing
//! nothing, quotas refused with the time to wait, mutual TLS identities (good, another CA,
//! expired, a certificate of no tenant), bad files stopping the start with file and line,
//! `snowmint token`, and the Rust client's token and quota waits (the other clients' are in
//! their own suites and the conformance suite's `tenants` scenario).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::tls::{CertFiles, TestCa};
use common::{Process, ServerBuilder, run_binary};
use snowmint::proto::id_service_client::IdServiceClient;
use snowmint::proto::{BatchIdsRequest, DecodeRequest, NextIdRequest, NextUuidRequest, NextValueRequest};
use snowmint::tenant::token;
use snowmint_client::{Client, ClientError};
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic_types::StatusExt as _;

/// A policy's and a token file's paths in `dir`, written.
fn write_files(dir: &Path, policy: &str, tokens: &[(&str, &str)]) -> (PathBuf, PathBuf) {
    let (policy_path, tokens_path) = (dir.join("policy.toml"), dir.join("tokens"));
    std::fs::write(&policy_path, policy).unwrap();
    let lines: String = tokens.iter().map(|(name, t)| token::line(name, t) + "\n").collect();
    std::fs::write(&tokens_path, lines).unwrap();
    (policy_path, tokens_path)
}

/// `message` with `token` as its bearer token.
fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let value = MetadataValue::try_from(format!("Bearer {token}")).unwrap();
    request.metadata_mut().insert("authorization", value);
    request
}

const POLICY: &str = r#"
[tenant.minter]
tokens = ["minter-1"]
allow = ["ids", "uuids"]
max_batch = 500

[tenant.reader]
tokens = ["reader-1"]
allow = ["decode", "provenance"]

[tenant.orders]
tokens = ["orders-1"]
allow = ["sequences:orders*"]
"#;

struct Tokens {
    minter: String,
    reader: String,
    orders: String,
}

/// A server with [`POLICY`], its tokens, and sequences made on first use.
fn spawn_with_policy() -> (Process, Tokens, PathBuf, PathBuf) {
    let tokens = Tokens { minter: token::new_token(), reader: token::new_token(), orders: token::new_token() };
    let builder = ServerBuilder::new();
    let (policy, file) = write_files(
        builder.dir(),
        POLICY,
        &[("minter-1", &tokens.minter), ("reader-1", &tokens.reader), ("orders-1", &tokens.orders)],
    );
    let server = builder
        .args(["--policy-file", policy.to_str().unwrap(), "--token-file", file.to_str().unwrap()])
        .args(["--create-sequences-on-use"])
        .spawn();
    (server, tokens, policy, file)
}

/// `curl` a Connect call: the HTTP status, the headers and the body.
fn connect(addr: std::net::SocketAddr, method: &str, body: &str, token: Option<&str>) -> (u16, String, String) {
    let headers = tempfile::NamedTempFile::new().unwrap();
    let url = format!("http://{addr}/snowmint.v1.IdService/{method}");
    let mut command = Command::new("curl");
    command.args(["-s", "-S", "--max-time", "10", "-w", "%{http_code}", "-D"]).arg(headers.path());
    command.args(["-H", "Content-Type: application/json", "-d", body, "-o", "-"]);
    let bearer;
    if let Some(token) = token {
        bearer = format!("Authorization: Bearer {token}");
        command.args(["-H", &bearer]);
    }
    command.arg(&url);
    let output = common::output_within(command, common::EXIT_LIMIT);
    assert_eq!(output.code, 0, "curl: {}", output.stderr);
    let (body, status) = output.stdout.split_at(output.stdout.len() - 3);
    (status.parse().unwrap(), std::fs::read_to_string(headers.path()).unwrap(), body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_permission_is_its_tenants_over_grpc_and_connect_and_no_secret_is_echoed() {
    let (server, tokens, ..) = spawn_with_policy();
    let mut client = server.client().await;

    let none = client.next_id(NextIdRequest::default()).await.unwrap_err();
    assert_eq!(none.code(), Code::Unauthenticated, "{none:?}");
    assert!(none.message().contains("no credentials"), "{none:?}");
    let wrong = token::new_token();
    let unknown = client.next_id(with_token(NextIdRequest::default(), &wrong)).await.unwrap_err();
    assert_eq!(unknown.code(), Code::Unauthenticated, "{unknown:?}");
    assert!(!unknown.message().contains(&wrong[4..]), "{unknown:?}");
    let mut malformed = tonic::Request::new(NextIdRequest::default());
    malformed.metadata_mut().insert("authorization", MetadataValue::from_static("Basic dXNlcjpwYXNz"));
    let malformed = client.next_id(malformed).await.unwrap_err();
    assert_eq!(malformed.code(), Code::Unauthenticated);
    assert!(malformed.message().contains("not `Bearer <token>`") && !malformed.message().contains("dXNl"));

    // The minter: IDs and UUIDs, within its max_batch; nothing else.
    let id = client.next_id(with_token(NextIdRequest::default(), &tokens.minter)).await.unwrap().into_inner().id;
    client.next_uuid(with_token(NextUuidRequest::default(), &tokens.minter)).await.unwrap();
    let batch = BatchIdsRequest { count: 500, ..Default::default() };
    assert_eq!(client.batch_ids(with_token(batch, &tokens.minter)).await.unwrap().into_inner().ids.len(), 500);
    let over = BatchIdsRequest { count: 501, ..Default::default() };
    let over = client.batch_ids(with_token(over, &tokens.minter)).await.unwrap_err();
    assert_eq!(over.code(), Code::InvalidArgument, "{over:?}");
    assert!(over.message().contains("max_batch"), "{over:?}");
    let decode = DecodeRequest { id, ..Default::default() };
    let denied = client.decode(with_token(decode.clone(), &tokens.minter)).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("\"decode\"") && denied.message().contains("minter"), "{denied:?}");

    // The reader: Decode with provenance; no minting.
    let provenance = DecodeRequest { id, provenance: true, ..Default::default() };
    let decoded = client.decode(with_token(provenance, &tokens.reader)).await.unwrap().into_inner();
    assert_eq!(decoded.id, id);
    let denied = client.next_id(with_token(NextIdRequest::default(), &tokens.reader)).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    let denied = client.next_uuid(with_token(NextUuidRequest::default(), &tokens.reader)).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);

    // The orders tenant: its sequences, no other.
    let value = |name: &str| NextValueRequest { sequence: name.into() };
    client.next_value(with_token(value("orders-eu"), &tokens.orders)).await.unwrap();
    let denied = client.next_value(with_token(value("invoices"), &tokens.orders)).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("sequences:invoices"), "{denied:?}");
    let denied = client.next_value(with_token(value("orders-eu"), &tokens.minter)).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);

    // The same over Connect.
    let addr = server.grpc;
    let (minter, reader, wrong) = (tokens.minter.clone(), tokens.reader.clone(), wrong.clone());
    let answers = tokio::task::spawn_blocking(move || {
        [
            connect(addr, "NextId", "{}", None),
            connect(addr, "NextId", "{}", Some(&wrong)),
            connect(addr, "NextId", "{}", Some(&minter)),
            connect(addr, "NextId", "{}", Some(&reader)),
            connect(addr, "Decode", &format!("{{\"id\":\"{id}\"}}"), Some(&reader)),
        ]
    })
    .await
    .unwrap();
    let codes: Vec<(u16, String)> = answers
        .iter()
        .map(|(status, _, body)| {
            let json: serde_json::Value = serde_json::from_str(body).unwrap();
            (*status, json["code"].as_str().unwrap_or("ok").to_string())
        })
        .collect();
    let expected =
        [(401, "unauthenticated"), (401, "unauthenticated"), (200, "ok"), (403, "permission_denied"), (200, "ok")];
    assert_eq!(codes, expected.map(|(s, c)| (s, c.to_string())), "{answers:?}");
    assert!(!answers[1].2.contains(&tokens.minter[4..]) && !answers[1].2.contains("smt_"), "{answers:?}");

    assert_eq!(server.metric("snowmint_unauthenticated_calls_total{reason=\"missing\"}").await, 2.0);
    assert_eq!(server.metric("snowmint_tenant_refusals_total{reason=\"permission\",tenant=\"reader\"}").await, 3.0);
    assert!(server.metric("snowmint_tenant_ids_total{tenant=\"minter\"}").await >= 503.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_token_is_refused_on_an_open_connection_and_a_broken_file_changes_nothing() {
    let (mut server, tokens, policy, file) = spawn_with_policy();
    let mut client = server.client().await;
    client.next_id(with_token(NextIdRequest::default(), &tokens.minter)).await.unwrap();
    // The minter's token removed from the file: refused on this same connection within
    // seconds; the others' stay.
    let kept = [("reader-1", tokens.reader.as_str()), ("orders-1", tokens.orders.as_str())];
    let lines: String = kept.iter().map(|(n, t)| token::line(n, t) + "\n").collect();
    let without = POLICY.replace("tokens = [\"minter-1\"]", "certificates = [\"CN=minter\"]");
    std::fs::write(&policy, &without).unwrap();
    std::fs::write(&file, lines).unwrap();
    let started = Instant::now();
    let refused = loop {
        match client.next_id(with_token(NextIdRequest::default(), &tokens.minter)).await {
            Ok(_) => assert!(started.elapsed() < Duration::from_secs(10), "the removed token still works"),
            Err(status) => break status,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    eprintln!("a removed token refused {:?} after the files changed", started.elapsed());
    let decode = DecodeRequest { id: 1 << 30, ..Default::default() };
    client.decode(with_token(decode.clone(), &tokens.reader)).await.unwrap();

    // A broken policy is logged with its file and line, and the rules in force stay.
    std::fs::write(&policy, format!("{without}\n[tenant.x]\nallow = [\"mint\"]\n")).unwrap();
    let logged = server.wait_for_log("were not reloaded", Duration::from_secs(10)).await;
    let line = logged.last().unwrap();
    assert!(line.contains("policy.toml") && line.contains("line"), "{line}");
    client.decode(with_token(decode.clone(), &tokens.reader)).await.unwrap();
    assert!(server.metric("snowmint_tenant_policy_reloads_total{result=\"failed\"}").await >= 1.0);

    // SIGHUP reads the files again at once; the server runs on.
    std::fs::write(&policy, POLICY).unwrap();
    server.signal("HUP");
    server.wait_for_log("reloaded", Duration::from_secs(10)).await;
    client.decode(with_token(decode, &tokens.reader)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_its_quota_a_tenant_is_told_how_long_to_wait_and_then_served() {
    let token_value = token::new_token();
    let builder = ServerBuilder::new();
    let policy = "[tenant.slow]\ntokens = [\"slow-1\"]\nallow = [\"ids\"]\nrate = 20\nburst = 40\n";
    let (policy, file) = write_files(builder.dir(), policy, &[("slow-1", &token_value)]);
    let mut server =
        builder.args(["--policy-file", policy.to_str().unwrap(), "--token-file", file.to_str().unwrap()]).spawn();
    let mut client = server.client().await;
    let batch = |count| with_token(BatchIdsRequest { count, ..Default::default() }, &token_value);
    client.batch_ids(batch(40)).await.unwrap();
    let over = client.batch_ids(batch(10)).await.unwrap_err();
    assert_eq!(over.code(), Code::ResourceExhausted, "{over:?}");
    let wait = over.get_error_details().retry_info().and_then(|r| r.retry_delay).expect("a RetryInfo");
    assert!(wait > Duration::ZERO && wait <= Duration::from_millis(600), "{wait:?}");
    let burst = client.batch_ids(batch(41)).await.unwrap_err();
    assert_eq!(burst.code(), Code::InvalidArgument, "{burst:?}");
    tokio::time::sleep(wait).await;
    client.batch_ids(batch(10)).await.unwrap();

    // Over Connect: 429, the RetryInfo detail and Retry-After.
    let addr = server.grpc;
    let t = token_value.clone();
    let (status, headers, body) =
        tokio::task::spawn_blocking(move || connect(addr, "BatchIds", "{\"count\":40}", Some(&t))).await.unwrap();
    assert_eq!(status, 429, "{headers}{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["code"], "resource_exhausted");
    assert_eq!(json["details"][0]["type"], "google.rpc.RetryInfo", "{body}");
    let shown = json["details"][0]["debug"]["retryDelay"].as_str().unwrap_or_default();
    assert!(shown.ends_with('s') && shown.trim_end_matches('s').parse::<f64>().is_ok_and(|s| s > 0.0), "{body}");
    assert!(headers.to_ascii_lowercase().contains("retry-after: "), "{headers}");
    assert_eq!(server.metric("snowmint_tenant_refusals_total{reason=\"quota\",tenant=\"slow\"}").await, 2.0);
    // Logged with the tenant: the first refusal of a kind, then at most one line in 10 s.
    let mut lines = server.wait_for_log("a tenant's calls refused", Duration::from_secs(5)).await;
    lines.extend(server.drain_logs());
    let refused: Vec<_> = lines.iter().filter(|line| line.contains("a tenant's calls refused")).collect();
    let quota: Vec<_> = refused.iter().filter(|line| line.contains("\"quota\"")).collect();
    assert!(quota.len() == 1 && quota[0].contains("\"slow\""), "{refused:?}");
    assert!(!lines.iter().any(|line| line.contains(&token_value[4..])), "a token in the log");
}

/// The count of gRPC calls of `method` a server answered with `code`.
async fn answered(server: &Process, method: &str, code: &str) -> f64 {
    server.metric(&format!(r#"snowmint_requests_total{{code="{code}",method="{method}",protocol="grpc"}}"#)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_carries_its_token_and_waits_out_its_quota_on_the_same_server() {
    let (a, b) = (token::new_token(), token::new_token());
    let builder = ServerBuilder::new();
    let policy = r#"
[tenant.a]
tokens = ["a-1"]
allow = ["ids", "uuids"]
rate = 5
burst = 1
[tenant.b]
tokens = ["b-1"]
allow = ["uuids"]
"#;
    let (policy, file) = write_files(builder.dir(), policy, &[("a-1", &a), ("b-1", &b)]);
    let server =
        builder.args(["--policy-file", policy.to_str().unwrap(), "--token-file", file.to_str().unwrap()]).spawn();
    let other = ServerBuilder::new().spawn();
    let url = format!("http://{}", server.grpc);
    let client = |token: Option<&str>| {
        let builder = Client::builder([url.clone(), format!("http://{}", other.grpc)]);
        match token {
            Some(token) => builder.token(token).connect().unwrap(),
            None => builder.connect().unwrap(),
        }
    };

    // Tenant a, 5 a second with a burst of 1: the second call waits about 200 ms, on the
    // same server, and is served; the other endpoint sees nothing.
    let minter = client(Some(&a));
    minter.batch(1).await.unwrap();
    let started = Instant::now();
    minter.batch(1).await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(100), "served after {waited:?}: no wait");
    assert!(answered(&server, "BatchIds", "ResourceExhausted").await >= 1.0);
    // A deadline shorter than the wait: the refusal, at once, with its delay.
    let started = Instant::now();
    let refused = minter.batch_within(1, Duration::from_millis(60)).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(60), "{refused:?} after {:?}", started.elapsed());
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.retry_delay().is_some() && refused.is_retriable(), "{refused:?}");
    // The same through the shared next_id() call, which carries its callers' deadline.
    let started = Instant::now();
    let refused = minter.next_id_within(Duration::from_millis(60)).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(60), "{refused:?} after {:?}", started.elapsed());
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    // The shared next_id() and UUIDs wait the same way.
    minter.next_id().await.unwrap();
    minter.next_uuid().await.unwrap();
    assert_eq!(answered(&other, "BatchIds", "OK").await + answered(&other, "NextId", "OK").await, 0.0);
    assert_eq!(answered(&other, "NextUuid", "OK").await, 0.0);

    // No token, a wrong one, a tenant without the permission: as they are, one call each.
    let unauthenticated = async || {
        let missing = server.metric(r#"snowmint_unauthenticated_calls_total{reason="missing"}"#).await;
        missing + server.metric(r#"snowmint_unauthenticated_calls_total{reason="unknown_token"}"#).await
    };
    let before = unauthenticated().await;
    for (what, token) in [("no token", None), ("a wrong token", Some(token::new_token()))] {
        let refused = client(token.as_deref()).batch(1).await.unwrap_err();
        assert!(
            matches!(&refused, ClientError::Rejected(s) if s.code() == Code::Unauthenticated),
            "{what}: {refused:?}"
        );
    }
    assert_eq!(unauthenticated().await - before, 2.0);
    let reader = client(Some(&b));
    let denied = reader.batch(1).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    reader.next_uuid().await.unwrap();
    // Each tenant's calls, by code.
    let calls = async |tenant: &str, code: &str| {
        server.metric(&format!(r#"snowmint_tenant_calls_total{{code="{code}",tenant="{tenant}"}}"#)).await
    };
    assert!(calls("a", "ResourceExhausted").await >= 2.0 && calls("a", "OK").await >= 4.0);
    assert_eq!((calls("b", "PermissionDenied").await, calls("b", "OK").await), (1.0, 1.0));

    // A token that cannot be one is refused when the client is made, unshown; the builder's
    // Debug shows no token.
    for bad in ["", "two words", &"x".repeat(4097)] {
        let error = Client::builder([url.clone()]).token(bad).connect().err().expect(bad);
        assert!(matches!(error, ClientError::InvalidSetting(_)), "{error:?}");
        assert!(bad.is_empty() || !error.to_string().contains(bad), "{error}");
    }
    let shown = format!("{:?}", Client::builder([url.clone()]).token(&a));
    assert!(!shown.contains(&a[4..]), "{shown}");

    // `snowmint batch` and `next` through the client: the token from --token, or
    // SNOWMINT_TOKEN; without one, the server's refusal as the one line.
    let (code, out, err) =
        tokio::task::spawn_blocking(move || run_binary(&["batch", "2", "--uuid", "--addr", &url, "--token", &b]))
            .await
            .unwrap();
    assert_eq!((code, out.lines().count()), (0, 2), "{out}{err}");
    let (code, _, err) =
        tokio::task::spawn_blocking(move || run_binary(&["next", "--addr", &format!("http://{}", server.grpc)]))
            .await
            .unwrap();
    assert!(code != 0 && err.contains("Unauthenticated"), "{code} {err}");
}

/// A client channel to `addr` over TLS with the CA `ca`, showing `identity`.
async fn tls_client(
    addr: std::net::SocketAddr,
    ca: &Path,
    identity: &CertFiles,
) -> Result<IdServiceClient<Channel>, String> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap()))
        .domain_name("localhost")
        .identity(Identity::from_pem(std::fs::read(&identity.cert).unwrap(), std::fs::read(&identity.key).unwrap()));
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .timeout(common::CALL_LIMIT)
        .connect_timeout(common::CALL_LIMIT)
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(IdServiceClient::new(channel))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_name_tenants_by_common_name_dns_and_uri() {
    let builder = ServerBuilder::new();
    let dir = builder.dir().to_path_buf();
    let ca = TestCa::new(&dir, "ca");
    let other = TestCa::new(&dir, "other-ca");
    let policy = r#"
[tenant.by-cn]
certificates = ["CN=billing"]
allow = ["ids"]
[tenant.by-dns]
certificates = ["DNS:reports.svc"]
allow = ["decode"]
[tenant.by-uri]
certificates = ["URI:spiffe://corp/ns/orders"]
allow = ["uuids"]
"#;
    let (policy, _) = write_files(&dir, policy, &[]);
    let server = builder
        .tls(&ca.issue("snowmint-server"), Some(ca.ca.as_path()))
        .args(["--policy-file", policy.to_str().unwrap()])
        .spawn();
    let addr = server.grpc;

    let mut billing = tls_client(addr, &ca.ca, &ca.issue_client("billing", &[], None, false)).await.unwrap();
    billing.next_id(NextIdRequest::default()).await.unwrap();
    let denied = billing.next_uuid(NextUuidRequest::default()).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    let mut reports = tls_client(addr, &ca.ca, &ca.issue_client("r", &["reports.svc"], None, false)).await.unwrap();
    reports.decode(DecodeRequest { id: 1 << 30, ..Default::default() }).await.unwrap();
    let uri = Some("spiffe://corp/ns/orders");
    let mut orders = tls_client(addr, &ca.ca, &ca.issue_client("o", &[], uri, false)).await.unwrap();
    orders.next_uuid(NextUuidRequest::default()).await.unwrap();

    // A good certificate whose names are no tenant's: UNAUTHENTICATED, naming them.
    let mut stranger = tls_client(addr, &ca.ca, &ca.issue_client("stranger", &["x.svc"], None, false)).await.unwrap();
    let refused = stranger.next_id(NextIdRequest::default()).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert!(refused.message().contains("CN=stranger") && refused.message().contains("DNS:x.svc"), "{refused:?}");

    // Another CA's certificate, or an expired one: refused at the handshake.
    for (what, files) in [
        ("another CA", other.issue_client("billing", &[], None, false)),
        ("expired", ca.issue_client("billing-old", &[], None, true)),
    ] {
        let refused = match tls_client(addr, &ca.ca, &files).await {
            Err(error) => error,
            Ok(mut client) => client.next_id(NextIdRequest::default()).await.unwrap_err().to_string(),
        };
        assert!(!refused.is_empty(), "{what}: served");
    }
}

#[test]
fn bad_files_stop_the_start_naming_file_and_line_and_never_a_raw_token() {
    let builder = ServerBuilder::new();
    let dir = builder.dir().to_path_buf();
    let raw = token::new_token();
    let cases = [
        ("[tenant.a]\ntokens = [\"t\"]\nallow = [\"mint\"]\n", vec![("t", "smt_x".to_string())], "line 3", None),
        ("[tenant.a]\ntokens = [\"gone\"]\n", vec![], "gone", None),
        ("[tenant.a]\ntokens = [\"t\"]\n", vec![], "line 1", Some(format!("t {raw}\n"))),
        ("[tenant.a]\ncertificates = [\"CN=a\"]\n", vec![], "--tls-client-ca", None),
    ];
    for (policy_text, tokens, says, raw_file) in cases {
        let tokens: Vec<(&str, &str)> = tokens.iter().map(|(n, t)| (*n, t.as_str())).collect();
        let (policy, file) = write_files(&dir, policy_text, &tokens);
        if let Some(text) = &raw_file {
            std::fs::write(&file, text).unwrap();
        }
        let (code, stderr) = ServerBuilder::new()
            .args(["--policy-file", policy.to_str().unwrap(), "--token-file", file.to_str().unwrap()])
            .run_to_exit();
        assert_ne!(code, 0, "{policy_text}: started");
        assert!(stderr.contains(says), "{policy_text}: {stderr}");
        assert!(!stderr.contains(&raw[4..]), "a raw token shown: {stderr}");
    }
}

#[test]
fn the_token_command_makes_tokens_and_their_lines() {
    let (code, out, err) = run_binary(&["token", "new", "billing-prod"]);
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    let (made, line) = (lines.next().unwrap(), lines.next().unwrap());
    assert!(made.starts_with(token::TOKEN_PREFIX), "{out}");
    assert_eq!(line, token::line("billing-prod", made));
    let file = snowmint::tenant::TokenFile::parse(line).unwrap();
    assert_eq!(file.name_of(made), Some("billing-prod"));

    let mut hash = Command::new(common::binary());
    hash.args(["token", "hash", "ci"]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    let mut child = hash.spawn().unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(format!("{made}\n").as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8(output.stdout).unwrap().trim(), token::line("ci", made));
    let (code, _, err) = run_binary(&["token", "new", "bad name"]);
    assert_ne!(code, 0);
    assert!(err.contains("token name"), "{err}");
}

/// IDs each of `callers` got from `addr` in `run`: each caller (a token, and how many
/// connections it spreads its calls over) keeps 8 `BatchIds(65536)` in flight per connection,
/// each with a 10 s deadline.
async fn saturate(addr: std::net::SocketAddr, callers: &[(&str, usize)], run: Duration) -> Vec<u64> {
    let until = Instant::now() + run;
    let mut tasks = Vec::new();
    for (index, &(token, connections)) in callers.iter().enumerate() {
        for _ in 0..connections {
            // A channel of its own: a connection of its own.
            let client = common::client(addr).await;
            for _ in 0..8 {
                let (mut client, token) = (client.clone(), token.to_string());
                tasks.push(tokio::spawn(async move {
                    let mut got = 0u64;
                    while Instant::now() < until {
                        let mut request = with_token(BatchIdsRequest { count: 65_536, ..Default::default() }, &token);
                        request.set_timeout(Duration::from_secs(10));
                        match client.batch_ids(request).await {
                            // Only what came within the run: the calls still queued at its
                            // end (many more of a caller with more in flight) are not shares.
                            Ok(answer) if Instant::now() < until => got += answer.into_inner().ids.len() as u64,
                            Ok(_) => {}
                            // Refused on arrival when the minter could not answer in time:
                            // retriable, and asked again.
                            Err(status) => assert!(
                                matches!(status.code(), Code::ResourceExhausted | Code::Unavailable),
                                "{status:?}"
                            ),
                        }
                    }
                    (index, got)
                }));
            }
        }
    }
    let mut got = vec![0u64; callers.len()];
    for task in tasks {
        let (index, ids) = common::join_within(task, run + Duration::from_secs(30), "a saturating caller").await;
        got[index] += ids;
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_instance_is_shared_by_tenant_weight_not_by_connections() {
    let (light, heavy, many) = (token::new_token(), token::new_token(), token::new_token());
    let builder = ServerBuilder::new();
    let policy = r#"
[tenant.light]
tokens = ["light-1"]
allow = ["ids"]
[tenant.heavy]
tokens = ["heavy-1"]
allow = ["ids"]
weight = 3
[tenant.many]
tokens = ["many-1"]
allow = ["ids"]
"#;
    let (policy, file) =
        write_files(builder.dir(), policy, &[("light-1", &light), ("heavy-1", &heavy), ("many-1", &many)]);
    let server = builder
        .args(["--policy-file", policy.to_str().unwrap(), "--token-file", file.to_str().unwrap()])
        // Every call admitted (none refused on arrival for want of time: a queue of 10 s), so
        // that the queue's turns alone decide the shares.
        .args(["--max-batch", "65536", "--max-outstanding-ids", "100000000", "--max-wait-ms", "10000"])
        .spawn();
    let got = saturate(server.grpc, &[(&light, 1), (&heavy, 1)], Duration::from_secs(3)).await;
    let ratio = got[1] as f64 / got[0] as f64;
    eprintln!("weights 1 and 3: {got:?}, {ratio:.2}");
    assert!((2.4..=3.6).contains(&ratio), "weights 1 and 3 got {got:?}: {ratio:.2}");
    let got = saturate(server.grpc, &[(&many, 8), (&light, 1)], Duration::from_secs(3)).await;
    let ratio = got[0] as f64 / got[1] as f64;
    eprintln!("8 connections and 1 at equal weights: {got:?}, {ratio:.2}");
    assert!((0.7..=1.4).contains(&ratio), "8 connections and 1 got {got:?}: {ratio:.2}");
}
