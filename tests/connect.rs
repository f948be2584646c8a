//! The Connect protocol on the gRPC port, driven with `curl` as a person would: the examples of
//! README.md and docs/api/connect.md exactly as written, against the real binary, JSON and
//! binary, HTTP/1.1 and HTTP/2, plain and over TLS (ALPN picks the version), every error with
//! the protocol's HTTP status, `Connect-Timeout-Ms`, and the calls counted under
//! `protocol="connect"`. The official Connect client for Node covers the same server in
//! `tests/connect/` (run by `scripts/check`).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::ServerBuilder;
use common::tls::TestCa;
use prost::Message;
use snowmint::proto::{BatchIdsRequest, BatchIdsResponse};

/// What `curl` got: the HTTP status, the HTTP version, and the body.
#[derive(Debug)]
struct Answer {
    status: u16,
    version: String,
    body: String,
}

impl Answer {
    /// The body as JSON.
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{self:?} is not JSON: {e}"))
    }

    /// The Connect error's code, with the status it came with.
    fn error(&self) -> (u16, String) {
        (self.status, self.json()["code"].as_str().unwrap_or_default().to_string())
    }
}

/// Runs `curl` with `args` (quietly, with a time limit), writing the body to a file so binary
/// bodies survive: what it got, and the body's bytes.
fn curl_bytes(args: &[&str]) -> (Answer, Vec<u8>) {
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut command = Command::new("curl");
    command.args(["-s", "-S", "--max-time", "10", "-o"]).arg(out.path()).args(["-w", "%{http_code} %{http_version}"]);
    command.args(args);
    let output = common::output_within(command, common::EXIT_LIMIT);
    assert_eq!(output.code, 0, "curl {args:?}: {}", output.stderr);
    let (status, version) = output.stdout.trim().split_once(' ').unwrap();
    let bytes = std::fs::read(out.path()).unwrap();
    let body = String::from_utf8_lossy(&bytes).into_owned();
    (Answer { status: status.parse().unwrap(), version: version.to_string(), body }, bytes)
}

fn curl(args: &[&str]) -> Answer {
    curl_bytes(args).0
}

/// A JSON POST of `body` to `method` on the plain-text server at `addr`, over HTTP/1.1.
fn post(addr: SocketAddr, method: &str, body: &str, extra: &[&str]) -> Answer {
    let url = format!("http://{addr}/snowmint.v1.IdService/{method}");
    let args: Vec<&str> =
        ["-H", "Content-Type: application/json", "-d", body].iter().copied().chain(extra.iter().copied()).collect();
    curl(&[args.as_slice(), &[url.as_str()]].concat())
}

/// `curl` blocking this test's runtime no longer than one call: run it on a blocking thread.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// Whether `line` (an answer a page shows) matches `got`, where each `…` stands for an ID
/// (decimal digits).
fn matches_shown(shown: &str, got: &str) -> bool {
    let mut rest = got;
    let mut parts = shown.split('…');
    let first = parts.next().unwrap();
    let Some(after) = rest.strip_prefix(first) else { return false };
    rest = after;
    for part in parts {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return false;
        }
        let Some(after) = rest[digits..].strip_prefix(part) else { return false };
        rest = after;
    }
    rest.is_empty()
}

/// The block of `curl` examples under the marker in `page` (relative to the repository).
fn connect_examples(page: &str) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).unwrap();
    let marker = "<!-- connect examples: run by tests/connect.rs -->\n```sh\n";
    let start = text.find(marker).unwrap_or_else(|| panic!("{page} has no Connect examples")) + marker.len();
    text[start..start + text[start..].find("```\n").unwrap()].to_string()
}

/// Every `curl` line of the Connect examples (the front page's first call, and the full set
/// in docs/api/connect.md), run exactly as written but for the server's address, answers what
/// the `# ` line under it shows, from the real binary as an operator starts it.
#[tokio::test]
async fn the_curl_examples_of_the_pages_answer_as_shown() {
    let mut server = ServerBuilder::new().spawn();
    let front = connect_examples("README.md");
    let block = connect_examples("docs/api/connect.md");
    let lines: Vec<&str> = front.lines().chain(block.lines()).collect();
    let mut ran = 0;
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with("curl ") {
            continue;
        }
        let shown =
            lines.get(i + 1).and_then(|l| l.strip_prefix("# ")).unwrap_or_else(|| panic!("no answer under {line}"));
        assert!(line.contains("http://127.0.0.1:50051/"), "{line}");
        let command = line.replace("127.0.0.1:50051", &server.grpc.to_string());
        let got = blocking(move || {
            let mut sh = Command::new("sh");
            sh.args(["-c", &command]);
            common::output_within(sh, common::EXIT_LIMIT)
        })
        .await;
        assert_eq!(got.code, 0, "{line}: {}", got.stderr);
        assert!(matches_shown(shown, got.stdout.trim_end()), "{line}\nshows {shown}\n got  {}", got.stdout);
        ran += 1;
    }
    let first = r#"curl -H 'Content-Type: application/json' -d '{"count":3}' http://127.0.0.1:50051/snowmint.v1.IdService/BatchIds"#;
    assert!(block.starts_with(&format!("{first}\n# {{\"ids\":[\"…\",\"…\",\"…\"]}}\n")), "{block}");
    assert!(front.starts_with("curl "), "{front}");
    assert!(ran >= 6, "{ran} examples");
    server.signal("TERM");
    assert!(server.wait(common::EXIT_LIMIT).await.success());
}

/// The examples of docs/api/sequences.md, after the page's own `snowmint sequence create`,
/// answer exactly what it shows, from the real binary.
#[tokio::test]
async fn the_sequences_page_examples_answer_as_shown() {
    let builder = ServerBuilder::new();
    let state = builder.state_path().to_str().unwrap().to_string();
    let created = common::run_binary(&["sequence", "create", "orders", "--start", "1000", "--state-dir", &state]);
    assert_eq!(created.0, 0, "{created:?}");
    let mut server = builder.spawn();
    let block = connect_examples("docs/api/sequences.md");
    let lines: Vec<&str> = block.lines().collect();
    let mut ran = 0;
    for (i, line) in lines.iter().enumerate().filter(|(_, line)| line.starts_with("curl ")) {
        let shown =
            lines.get(i + 1).and_then(|l| l.strip_prefix("# ")).unwrap_or_else(|| panic!("no answer under {line}"));
        let command = line.replace("127.0.0.1:50051", &server.grpc.to_string());
        let got = blocking(move || {
            let mut sh = Command::new("sh");
            sh.args(["-c", &command]);
            common::output_within(sh, common::EXIT_LIMIT)
        })
        .await;
        assert_eq!((got.code, got.stdout.trim_end()), (0, shown), "{line}: {}", got.stderr);
        ran += 1;
    }
    assert_eq!(ran, 3, "{block}");
    server.signal("TERM");
    assert!(server.wait(common::EXIT_LIMIT).await.success());
}

#[test]
fn shown_answers_match_ids_in_place_of_ellipses() {
    assert!(matches_shown(r#"{"ids":["…","…"]}"#, r#"{"ids":["12","345"]}"#));
    assert!(!matches_shown(r#"{"ids":["…","…"]}"#, r#"{"ids":["12"]}"#));
    assert!(!matches_shown(r#"{"id":"…"}"#, r#"{"id":""}"#));
    assert!(matches_shown("exact", "exact"));
    assert!(!matches_shown("exact", "exactly"));
}

/// JSON and binary, over HTTP/1.1 and HTTP/2 with prior knowledge, on the port gRPC uses.
#[tokio::test]
async fn json_and_binary_over_http1_and_http2() {
    let server = ServerBuilder::new().start().await;
    let url = format!("http://{}/snowmint.v1.IdService/BatchIds", server.grpc);
    for version in ["--http1.1", "--http2-prior-knowledge"] {
        let json = blocking({
            let url = url.clone();
            move || curl(&[version, "-H", "Content-Type: application/json", "-d", r#"{"count":3}"#, &url])
        })
        .await;
        assert_eq!(json.status, 200, "{json:?}");
        assert_eq!(json.version, if version == "--http1.1" { "1.1" } else { "2" });
        let ids = json.json()["ids"].as_array().unwrap().clone();
        assert_eq!(ids.len(), 3);
        assert!(ids.iter().all(|id| id.as_str().unwrap().parse::<u64>().is_ok()), "{ids:?}");

        let request = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(request.path(), BatchIdsRequest { count: 5, ..Default::default() }.encode_to_vec()).unwrap();
        let data = format!("@{}", request.path().display());
        let (answer, bytes) = blocking({
            let url = url.clone();
            move || curl_bytes(&[version, "-H", "Content-Type: application/proto", "--data-binary", &data, &url])
        })
        .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        let ids = BatchIdsResponse::decode(bytes.as_slice()).unwrap().ids;
        assert_eq!(ids.len(), 5);
        common::assert_increasing(&ids);
    }
    server.stop().await;
}

/// Over TLS the server offers both HTTP/2 and HTTP/1.1 by ALPN, and a client that speaks only
/// one of them gets it; with mutual TLS, only clients with a certificate from the CA.
#[tokio::test]
async fn over_tls_alpn_picks_http2_or_http1() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "ca");
    let cert = ca.issue("snowmint-server");
    for mutual in [false, true] {
        let server = ServerBuilder::new().tls(&cert, mutual.then_some(ca.ca.as_path())).start().await;
        let url = format!("https://{}/snowmint.v1.IdService/NextId", server.grpc);
        let client = ca.issue("client");
        for version in ["--http1.1", "--http2"] {
            let mut args = vec![version.to_string(), "--cacert".into(), path(&ca.ca)];
            if mutual {
                args.extend(["--cert".into(), path(&client.cert), "--key".into(), path(&client.key)]);
            }
            args.extend(["-H".into(), "Content-Type: application/json".into(), "-d".into(), "{}".into(), url.clone()]);
            let answer = blocking(move || curl(&args.iter().map(String::as_str).collect::<Vec<_>>())).await;
            assert_eq!(answer.status, 200, "{version}: {answer:?}");
            assert_eq!(answer.version, if version == "--http1.1" { "1.1" } else { "2" });
            assert!(answer.json()["id"].as_str().unwrap().parse::<u64>().is_ok(), "{answer:?}");
        }
        if mutual {
            // Without a client certificate: no answer at all.
            let args = ["--cacert".to_string(), path(&ca.ca), "-d".into(), "{}".into(), url.clone()];
            let output = blocking(move || {
                let mut command = Command::new("curl");
                command.args(["-s", "--max-time", "10", "-H", "Content-Type: application/json"]).args(args);
                common::output_within(command, common::EXIT_LIMIT)
            })
            .await;
            assert_ne!(output.code, 0, "a client without a certificate got {}", output.stdout);
        }
        server.stop().await;
    }
}

fn path(path: &Path) -> String {
    path.display().to_string()
}

/// Every error the Connect side answers, each with the protocol's HTTP status for its code,
/// and a JSON body naming the code.
#[tokio::test]
async fn errors_have_the_protocols_http_statuses() {
    let server = ServerBuilder::new().start().await;
    let addr = server.grpc;
    let checks = blocking(move || {
        let url = format!("http://{addr}/snowmint.v1.IdService/NextId");
        let huge = format!(r#"{{"id":"1","layout":"{}"}}"#, "x".repeat(20_000));
        vec![
            ("count 0", post(addr, "BatchIds", r#"{"count":0}"#, &[]).error()),
            ("not JSON", post(addr, "BatchIds", "{count", &[]).error()),
            ("wrong type", post(addr, "BatchIds", r#"{"count":"many"}"#, &[]).error()),
            ("unknown layout", post(addr, "Decode", r#"{"id":"1","layout":"nope"}"#, &[]).error()),
            ("too large", post(addr, "Decode", &huge, &[]).error()),
            ("unknown method", post(addr, "Mint", "{}", &[]).error()),
            ("compressed", post(addr, "NextId", "{}", &["-H", "Content-Encoding: gzip"]).error()),
            ("bad timeout", post(addr, "NextId", "{}", &["-H", "Connect-Timeout-Ms: soon"]).error()),
            ("bad version", post(addr, "NextId", "{}", &["-H", "Connect-Protocol-Version: 2"]).error()),
            ("text", curl(&["-H", "Content-Type: text/plain", "-d", "{}", &url]).error()),
            ("GET", curl(&[&url]).error()),
        ]
    })
    .await;
    let expected = [
        ("count 0", 400, "invalid_argument"),
        ("not JSON", 400, "invalid_argument"),
        ("wrong type", 400, "invalid_argument"),
        ("unknown layout", 400, "invalid_argument"),
        ("too large", 400, "out_of_range"),
        ("unknown method", 501, "unimplemented"),
        ("compressed", 501, "unimplemented"),
        ("bad timeout", 400, "invalid_argument"),
        ("bad version", 400, "invalid_argument"),
        ("text", 415, "unimplemented"),
        ("GET", 405, "unimplemented"),
    ];
    for ((what, got), (name, status, code)) in checks.into_iter().zip(expected) {
        assert_eq!(what, name);
        assert_eq!(got, (status, code.to_string()), "{what}");
    }
    // Still serving.
    assert_eq!(blocking(move || post(addr, "NextId", "{}", &[])).await.status, 200);
    let counted = r#"snowmint_requests_total{code="InvalidArgument",method="BatchIds",protocol="connect"}"#;
    assert_eq!(server.metric(counted).await, 3.0);
    let other = r#"snowmint_requests_total{code="Unimplemented",method="other",protocol="connect"}"#;
    assert_eq!(server.metric(other).await, 1.0);
    server.stop().await;
}

/// A refusal is `unavailable` (503), a server over its outstanding IDs `resource_exhausted`
/// (429), as gRPC's UNAVAILABLE and RESOURCE_EXHAUSTED.
#[tokio::test]
async fn refusals_are_unavailable_and_overload_is_resource_exhausted() {
    // A clock that stands still: 4,096 IDs, then every call waits for a tick that does not
    // come unless the test moves it.
    let (server, clock) = ServerBuilder::new()
        .config(|c| {
            c.max_outstanding_ids = 100_000;
            c.max_wait = Duration::from_secs(5);
        })
        .start_on_manual_clock()
        .await;
    let addr = server.grpc;
    // The clock stands still: the first batch waits for ticks, holding 65,536 of the 100,000.
    let first = tokio::task::spawn_blocking(move || post(addr, "BatchIds", r#"{"count":65536}"#, &[]));
    let queued = r#"snowmint_requests_total{code="OK",method="BatchIds",protocol="connect"}"#;
    let start = Instant::now();
    while server.metric("snowmint_sequence_exhausted_total").await < 1.0 {
        assert!(start.elapsed() < Duration::from_secs(5), "the first batch never waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = blocking(move || post(addr, "BatchIds", r#"{"count":65536}"#, &[])).await;
    assert_eq!(second.error(), (429, "resource_exhausted".to_string()), "{second:?}");
    for _ in 0..40 {
        if first.is_finished() {
            break;
        }
        clock.advance(Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(server.metric(queued).await, 1.0);

    // The clock steps back a minute, past the drift bound: minting refuses, retriable.
    clock.step_wall(-60_000);
    let refused = blocking(move || post(addr, "NextId", "{}", &[])).await;
    assert_eq!(refused.error(), (503, "unavailable".to_string()), "{refused:?}");
    assert!(refused.json()["message"].as_str().unwrap().contains("clock"), "{refused:?}");
    server.stop().await;
}

/// `Connect-Timeout-Ms` bounds a call: one that cannot be served in time is refused before
/// the deadline (`unavailable`), and a request whose body never arrives in full ends at the
/// deadline (`deadline_exceeded`, 504).
#[tokio::test]
async fn connect_timeout_ms_bounds_every_call() {
    // The strict clock policy, which waits out a small step back (the hybrid one mints on).
    let (server, clock) = ServerBuilder::new().strict().start_on_manual_clock().await;
    let addr = server.grpc;
    blocking(move || post(addr, "NextId", "{}", &[])).await;
    clock.step_wall(-5); // waited out, but the clock never comes back in this test
    let start = Instant::now();
    let answer = blocking(move || post(addr, "NextId", "{}", &["-H", "Connect-Timeout-Ms: 150"])).await;
    let took = start.elapsed();
    assert_eq!(answer.error(), (503, "unavailable".to_string()), "{answer:?}");
    assert!(answer.json()["message"].as_str().unwrap().contains("deadline"), "{answer:?}");
    assert!(took >= Duration::from_millis(100) && took < Duration::from_millis(1000), "{took:?}");

    // Headers, then a body that stops half way.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let start = Instant::now();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = "POST /snowmint.v1.IdService/NextId HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnect-Timeout-Ms: 200\r\nContent-Length: 10\r\n\r\n{";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = vec![0; 4096];
    let n = tokio::time::timeout(common::CALL_LIMIT, stream.read(&mut response)).await.unwrap().unwrap();
    let response = String::from_utf8_lossy(&response[..n]);
    assert!(response.starts_with("HTTP/1.1 504"), "{response}");
    assert!(response.contains(r#""code":"deadline_exceeded""#), "{response}");
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(150) && took < Duration::from_millis(1000), "{took:?}");
    server.stop().await;
}

/// Small calls do not wait for Nagle's algorithm: every socket the server accepts has
/// TCP_NODELAY, whichever protocol it speaks. Asked of the sockets themselves (the server
/// runs in this process): a timing would not tell, as the answers here go out in one write
/// each and curl sets TCP_NODELAY on its own side.
#[tokio::test]
async fn every_accepted_connection_has_tcp_nodelay() {
    let server = ServerBuilder::new().start().await;
    let port = server.grpc.port();
    // A Connect call over HTTP/1.1 on a connection kept open, and a gRPC one over HTTP/2.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut http1 = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    let request = "POST /snowmint.v1.IdService/NextId HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    http1.write_all(request.as_bytes()).await.unwrap();
    let mut response = vec![0; 4096];
    let n = tokio::time::timeout(common::CALL_LIMIT, http1.read(&mut response)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&response[..n]).starts_with("HTTP/1.1 200"));
    let mut grpc = server.client().await;
    grpc.next_id(snowmint::proto::NextIdRequest::default()).await.unwrap();

    let accepted = accepted_sockets(port);
    assert!(accepted.len() >= 2, "found {} accepted sockets on port {port}", accepted.len());
    for (fd, nodelay) in &accepted {
        assert!(*nodelay, "the accepted socket (fd {fd}) has no TCP_NODELAY");
    }
    drop((http1, grpc));
    server.stop().await;
}

/// This process's TCP sockets whose local port is `port` and that were accepted (not the
/// listener), each with whether it has TCP_NODELAY.
fn accepted_sockets(port: u16) -> Vec<(i32, bool)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        if !target.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let option = |level: i32, name: i32| -> Option<i32> {
            let mut value: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: fd is open in this process; value and len are valid for the call.
            let got = unsafe { libc::getsockopt(fd, level, name, (&raw mut value).cast(), &raw mut len) };
            (got == 0).then_some(value)
        };
        // SAFETY: all zeroes is a valid sockaddr_in (plain integers and bytes).
        let mut address: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: as above; the address buffer is a sockaddr_in of len bytes.
        let named = unsafe { libc::getsockname(fd, (&raw mut address).cast(), &raw mut len) };
        let is_tcp_v4 = named == 0 && i32::from(address.sin_family) == libc::AF_INET;
        if !is_tcp_v4
            || u16::from_be(address.sin_port) != port
            || option(libc::SOL_SOCKET, libc::SO_ACCEPTCONN) != Some(0)
        {
            continue;
        }
        found.push((fd, option(libc::IPPROTO_TCP, libc::TCP_NODELAY).is_some_and(|v| v != 0)));
    }
    found
}

/// UUIDs over Connect: `NextUuid` and `BatchUuids` answer the bytes (base64) and the text form,
/// and `Decode` reads a UUID's text back; one snowmint did not mint is `invalid_argument`.
#[tokio::test]
async fn uuids_are_minted_and_decoded_over_json() {
    let server = ServerBuilder::new().slot(9).start().await;
    let addr = server.grpc;
    let one = blocking(move || post(addr, "NextUuid", "{}", &[])).await;
    assert_eq!(one.status, 200, "{one:?}");
    let text = one.json()["text"].as_str().unwrap().to_string();
    assert_eq!(one.json()["uuid"].as_str().map(str::len), Some(24), "16 bytes in base64: {one:?}");
    let batch = blocking(move || post(addr, "BatchUuids", r#"{"count":3}"#, &[])).await;
    let texts: Vec<String> =
        batch.json()["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect();
    assert_eq!(texts.len(), 3, "{batch:?}");
    assert!(text < texts[0] && texts[0] < texts[1] && texts[1] < texts[2], "{text} {texts:?}");
    let body = format!(r#"{{"uuidText":"{}"}}"#, texts[2]);
    let decoded = blocking(move || post(addr, "Decode", &body, &[])).await;
    assert_eq!(decoded.status, 200, "{decoded:?}");
    assert_eq!(decoded.json()["workerId"], 9, "{decoded:?}");
    assert_eq!(decoded.json()["uuidText"].as_str(), Some(texts[2].as_str()), "{decoded:?}");
    let v4 = r#"{"uuidText":"019b76da-a800-4003-bfc0-0000db803819"}"#;
    let refused = blocking(move || post(addr, "Decode", v4, &[])).await;
    assert_eq!(refused.error(), (400, "invalid_argument".to_string()), "{refused:?}");
    assert!(refused.json()["message"].as_str().unwrap().contains("version is 4"), "{refused:?}");
    let zero = blocking(move || post(addr, "BatchUuids", r#"{"count":0}"#, &[])).await;
    assert_eq!(zero.error(), (400, "invalid_argument".to_string()), "{zero:?}");
    server.stop().await;
}
