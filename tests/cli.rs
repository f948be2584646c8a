//! The command line: bad configuration exits non-zero with one clear line, and the `next`
//! and `batch` clients talk to a real server.

mod common;

use std::time::Duration;

use common::{ServerBuilder, assert_increasing, assert_unique, run_binary};
use snowmint::proto::id_service_server::{IdService, IdServiceServer};
use snowmint::proto::{
    BatchIdsRequest, BatchIdsResponse, BatchUuidsRequest, BatchUuidsResponse, DecodeRequest, DecodeResponse,
    NextIdRequest, NextIdResponse, NextUuidRequest, NextUuidResponse, RevealRequest, RevealResponse,
};
use snowmint::proto::{BatchValuesRequest, BatchValuesResponse, NextValueRequest, NextValueResponse};
use tonic::{Request, Response, Status};

/// Runs `serve` with `args` and returns its error line, asserting it failed at once.
fn serve_error(args: &[&str]) -> String {
    let (code, stderr) = ServerBuilder::new().args(args).run_to_exit();
    assert_ne!(code, 0, "{args:?} should fail");
    let first = stderr.lines().next().unwrap_or_default().to_string();
    assert!(!stderr.contains("panicked"), "{stderr}");
    first
}

#[test]
fn bad_configuration_exits_with_one_clear_line() {
    let cases: &[(&[&str], &str)] = &[
        // Layout errors name the flags the user set, with the arithmetic.
        (
            &["--worker-bits", "40"],
            "--worker-bits 40 + --sequence-bits 12 leave 11 time bits (of 63); the time field needs 20 to 61",
        ),
        (&["--worker-bits", "30", "--sequence-bits", "20"], "--worker-bits 30 + --sequence-bits 20 leave 13 time bits"),
        (&["--worker-bits", "0", "--sequence-bits", "1"], "--worker-bits 0 + --sequence-bits 1 leave 62 time bits"),
        (&["--worker-bits", "40", "--sequence-bits", "30"], "--worker-bits 40 + --sequence-bits 30 = 70 bits"),
        (&["--worker-bits", "21"], "--worker-bits must be between 0 and 20, got 21"),
        (&["--sequence-bits", "0"], "--sequence-bits must be between 1 and 22, got 0"),
        (&["--epoch", "2999-01-01T00:00:00Z"], "--epoch 2999-01-01T00:00:00.000Z is in the future"),
        (
            &["--epoch", "1970-01-01T00:00:00Z", "--worker-bits", "20", "--sequence-bits", "22"],
            "--epoch 1970-01-01T00:00:00.000Z with 21 time bits of ms (63 - --worker-bits 20 - --sequence-bits 22) ran out at 1970-01-01T00:34:57.152Z",
        ),
        (&["--epoch", "yesterday"], "RFC 3339"),
        (&["--worker-id", "1024"], "--worker-id 1024 does not fit --worker-bits 10 (maximum 1023)"),
        (&["--worker-bits", "4", "--worker-id", "16"], "maximum 15"),
        (&["--max-batch", "0"], "--max-batch"),
        // A batch that cannot be minted within the longest wait, at the layout's rate.
        (
            &["--max-batch", "65536", "--max-wait-ms", "10"],
            "--max-batch 65536 needs 16 ms to mint at 4096 IDs per 1 ms tick (--sequence-bits 12), more than --max-wait-ms 10",
        ),
        (&["--max-outstanding-ids", "1000"], "--max-outstanding-ids 1000 is below --max-batch 65536"),
        (&["--worker-id", "3-1"], "the range 3-1 runs backward"),
        (&["--worker-id", "1,2,1"], "names a worker ID twice"),
        (&["--worker-id", "0-3", "--slots", "2"], "--slots 2 is for etcd mode"),
        (&["--worker-bits", "2", "--worker-id", "0-4"], "--worker-id 4 does not fit --worker-bits 2"),
        (&["--listen", "not-an-address"], "--listen"),
        (&["--handshake-timeout-ms", "0"], "--handshake-timeout-ms"),
        (&["--handshake-timeout-ms", "120001"], "--handshake-timeout-ms must be at most 120000"),
        (&["--handshake-timeout-ms", "ten"], "--handshake-timeout-ms"),
        (&["--max-connections-per-peer", "0"], "--max-connections-per-peer"),
        (&["--max-connections-per-peer", "many"], "--max-connections-per-peer"),
        (
            &["--max-connections", "8", "--max-connections-per-peer", "9"],
            "--max-connections-per-peer 9 is more than --max-connections 8",
        ),
        (&["--max-connections-per-peer", "16385"], "is more than --max-connections 16384"),
        (&["--log-format", "xml"], "--log-format"),
        // Compaction every 1 s to 1 h, or off: the edges pass (and the next flag is the one
        // refused), one past them does not.
        (&["--etcd-compaction-interval", "3601"], "must be between 1s and 3600s (1h), or off; got 3601s"),
        (&["--etcd-compaction-interval", "2h"], "must be between 1s and 3600s (1h), or off; got 7200s"),
        (&["--etcd-compaction-interval", "soon"], "not a duration such as 30d, 12h, 90m or 600s"),
        (&["--etcd-compaction-interval", "5ms"], "unknown unit \"ms\""),
        (&["--etcd-compaction-interval", "1h", "--worker-bits", "40"], "--worker-bits 40 + --sequence-bits 12"),
        (&["--etcd-compaction-interval", "1s", "--worker-bits", "40"], "--worker-bits 40 + --sequence-bits 12"),
        (&["--etcd-compaction-interval", "off", "--worker-bits", "40"], "--worker-bits 40 + --sequence-bits 12"),
        (&["--etcd-compaction-interval", "0", "--worker-bits", "40"], "--worker-bits 40 + --sequence-bits 12"),
    ];
    for (args, expected) in cases {
        let line = serve_error(args);
        assert!(line.contains(expected), "{args:?}: {line:?} lacks {expected:?}");
    }
    // Environment variables are read too, and checked the same way.
    let (code, stderr) = ServerBuilder::new().env("SNOWMINT_WORKER_ID", "5000").run_to_exit();
    assert_ne!(code, 0);
    assert!(stderr.contains("--worker-id 5000"), "{stderr}");
    // `decode` reads its own layout from the same flags, and says the same.
    let (code, _, err) = run_binary(&["decode", "12", "--worker-bits", "40"]);
    assert_ne!(code, 0);
    assert!(err.contains("--worker-bits 40 + --sequence-bits 12 leave 11 time bits"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_and_batch_talk_to_a_server() {
    let server = ServerBuilder::new().start().await;
    let url = server.url();
    let (code, out, err) = tokio::task::spawn_blocking({
        let url = url.clone();
        move || run_binary(&["next", "--addr", &url])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let one: u64 = out.trim().parse().unwrap();
    let (code, out, err) =
        tokio::task::spawn_blocking(move || run_binary(&["batch", "100", "--addr", &url])).await.unwrap();
    assert_eq!(code, 0, "{err}");
    let ids: Vec<u64> = out.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(ids.len(), 100);
    assert_increasing(&ids);
    assert!(ids[0] > one);
    let url = server.url();
    let (code, _, err) =
        tokio::task::spawn_blocking(move || run_binary(&["batch", "0", "--addr", &url])).await.unwrap();
    assert_ne!(code, 0);
    assert!(err.contains("InvalidArgument") && err.contains("65536"), "{err}");
    server.stop().await;
}

/// `next --uuid` and `batch --uuid` print UUIDv7s' text forms, increasing, and `decode` reads
/// one back into the ID it was made from and the slot that minted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_batch_and_decode_with_uuids() {
    let server = ServerBuilder::new().slot(7).start().await;
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || run_binary(&args.iter().map(String::as_str).collect::<Vec<_>>()))
    };
    let url = server.url();
    let (code, out, err) = run(vec!["next".into(), "--uuid".into(), "--addr".into(), url.clone()]).await.unwrap();
    assert_eq!(code, 0, "{err}");
    let one = out.trim().to_string();
    assert_eq!((one.len(), &one[14..15]), (36, "7"), "{one}");
    let (code, out, err) =
        run(vec!["batch".into(), "100".into(), "--uuid".into(), "--addr".into(), url.clone()]).await.unwrap();
    assert_eq!(code, 0, "{err}");
    let uuids: Vec<&str> = out.lines().collect();
    assert_eq!(uuids.len(), 100);
    assert!(uuids.windows(2).all(|w| w[0] < w[1]) && one.as_str() < uuids[0], "not increasing: {one} {uuids:?}");
    let (code, out, err) = run(vec!["decode".into(), "--json".into(), uuids[99].to_uppercase()]).await.unwrap();
    assert_eq!(code, 0, "{err}");
    let decoded: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((decoded["uuid"].as_str(), decoded["worker_id"].as_u64()), (Some(uuids[99]), Some(7)), "{out}");
    let (code, _, err) = run(vec!["decode".into(), "019b76da-a800-4003-bfc0-0000db803819".into()]).await.unwrap();
    assert_ne!(code, 0);
    assert!(err.contains("not a UUIDv7: its version is 4"), "{err}");
    let (code, _, err) = run(vec!["next".into(), "--uuid".into(), "--opaque".into()]).await.unwrap();
    assert_ne!(code, 0);
    assert!(err.contains("cannot be used with"), "{err}");
    server.stop().await;
}

#[test]
fn next_without_a_server_fails_clearly() {
    let (code, _, err) = run_binary(&["next", "--addr", "http://127.0.0.1:1"]);
    assert_ne!(code, 0);
    assert!(err.starts_with("snowmint: http://127.0.0.1:1: every endpoint refused or failed"), "{err}");
    assert!(err.contains("Unavailable"), "{err}");
}

/// Runs `bench` against `url` with `args` and returns its report, asserting it succeeded.
async fn bench(url: &str, args: &[&str]) -> String {
    let args: Vec<String> = ["bench", "--addr", url].iter().chain(args).map(|s| s.to_string()).collect();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_binary(&args)
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    out
}

/// The number after `label` on the line that starts with it.
fn field(report: &str, label: &str) -> u64 {
    let line = report.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label} in {report}"));
    line[label.len()..].split_whitespace().next().unwrap().parse().unwrap()
}

/// `bench` drives each method against a real server, and what it reports matches what the
/// server issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_reports_what_the_server_issued() {
    let server = ServerBuilder::new().start().await;
    let url = server.url();
    let mut issued = server.metric("snowmint_ids_issued_total").await;
    for (method, calls, ids) in [("next", 300, 300), ("batch", 40, 40 * 100)] {
        let report = bench(
            &url,
            &["--method", method, "--batch-size", "100", "--concurrency", "8", "--calls", &calls.to_string()],
        )
        .await;
        assert_eq!(field(&report, "calls"), calls, "{report}");
        assert!(report.contains(&format!("all {ids} IDs are unique")), "{report}");
        let now = server.metric("snowmint_ids_issued_total").await;
        assert_eq!(now - issued, ids as f64, "{method}: {report}");
        issued = now;
    }
    // The buffered client: every call is served from its local buffer, filled by BatchIds.
    let report =
        bench(&url, &["--method", "buffered", "--batch-size", "1000", "--concurrency", "4", "--duration", "0.5"]).await;
    assert!(field(&report, "calls") > 0, "{report}");
    assert!(report.contains(&format!("all {} IDs are unique", field(&report, "calls"))), "{report}");
    assert!(server.metric("snowmint_ids_issued_total").await - issued >= field(&report, "calls") as f64);
    server.stop().await;
}

/// `serve` on one thread (the single-threaded scheduler) and on two worker threads: both mint
/// under concurrent calls, including batches that wait for the next tick, and stop cleanly
/// on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_mints_and_stops_on_any_number_of_threads() {
    for threads in ["1", "2"] {
        let mut server = ServerBuilder::new().args(["--worker-threads", threads]).spawn();
        let mut callers = Vec::new();
        for _ in 0..8 {
            let mut client = server.client().await;
            callers.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..50 {
                    ids.push(client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id);
                    // 4,096 IDs a tick: batches of 3,000 run out the sequence and wait.
                    ids.extend(
                        client
                            .batch_ids(BatchIdsRequest { count: 3000, ..Default::default() })
                            .await
                            .unwrap()
                            .into_inner()
                            .ids,
                    );
                }
                ids
            }));
        }
        let mut all = Vec::new();
        for caller in callers {
            let ids = common::join_within(caller, Duration::from_secs(60), "a caller").await;
            assert_increasing(&ids);
            all.extend(ids);
        }
        assert_eq!(all.len(), 8 * 50 * 3001);
        assert_unique(&all);
        server.signal("TERM");
        let status = server.wait(Duration::from_secs(10)).await;
        assert!(status.success(), "--worker-threads {threads}: {status}");
    }
}

/// `bench` against `url` with `args`, expecting it to fail: its error line.
async fn failed_bench(url: &str, args: &[&str]) -> String {
    let args: Vec<String> = ["bench", "--addr", url].iter().chain(args).map(|s| s.to_string()).collect();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_binary(&args)
    })
    .await
    .unwrap();
    assert_ne!(code, 0, "bench succeeded: {out}{err}");
    err.lines().last().unwrap_or_default().to_string()
}

/// A server that dies in the middle of a `bench` run fails the run: its figures would
/// measure failed calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_fails_when_its_server_dies_mid_run() {
    let server = ServerBuilder::new().spawn();
    let url = format!("http://{}", server.grpc);
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        server.signal("KILL");
        server
    });
    let line = failed_bench(&url, &["--concurrency", "4", "--duration", "3"]).await;
    assert!(line.starts_with("snowmint: ") && line.contains("calls failed (the first: "), "{line}");
    assert!(!line.contains("duplicate"), "{line}");
    drop(killer.await.unwrap());
}

/// A server that answers every NextId with the same ID.
struct Repeating;

#[tonic::async_trait]
impl IdService for Repeating {
    async fn next_id(&self, _: Request<NextIdRequest>) -> Result<Response<NextIdResponse>, Status> {
        Ok(Response::new(NextIdResponse { id: 42, ..Default::default() }))
    }

    async fn batch_ids(&self, _: Request<BatchIdsRequest>) -> Result<Response<BatchIdsResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn decode(&self, _: Request<DecodeRequest>) -> Result<Response<DecodeResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn reveal(&self, _: Request<RevealRequest>) -> Result<Response<RevealResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn next_uuid(&self, _: Request<NextUuidRequest>) -> Result<Response<NextUuidResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn batch_uuids(&self, _: Request<BatchUuidsRequest>) -> Result<Response<BatchUuidsResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn next_value(&self, _: Request<NextValueRequest>) -> Result<Response<NextValueResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn batch_values(&self, _: Request<BatchValuesRequest>) -> Result<Response<BatchValuesResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
}

/// Duplicate IDs fail a `bench` run, and it says how many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_fails_on_duplicate_ids() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(IdServiceServer::new(Repeating))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let line = failed_bench(&url, &["--concurrency", "2", "--calls", "10"]).await;
    assert_eq!(line, "snowmint: 9 duplicate IDs among 10");
    server.abort();
}

/// A subcommand's flags as its `--help` shows them: each long flag (or `<POSITIONAL>`) with
/// the environment variable it reads, if any.
fn flags_in_help(help: &str) -> Vec<(String, Option<String>)> {
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    let mut section = "";
    for line in help.lines() {
        let trimmed = line.trim();
        if !line.starts_with(' ') && trimmed.ends_with(':') {
            section = trimmed;
            continue;
        }
        // A flag or argument starts its line, indented at most 6 spaces; its description, on
        // the same line or the next ones, is indented further.
        let indent = line.len() - line.trim_start().len();
        if indent <= 6 && section == "Arguments:" && trimmed.starts_with('<') {
            flags.push((trimmed.split_whitespace().next().unwrap().to_string(), None));
        } else if indent <= 6 && section == "Options:" && trimmed.starts_with('-') {
            let long = trimmed.split([',', ' ']).find(|word| word.starts_with("--")).expect("a long flag");
            flags.push((long.to_string(), None));
        }
        if let Some((_, env)) = line.split_once("[env: ") {
            // `[env: NAME=value]`, or `[env: NAME]` for a flag whose value help hides.
            let name = env.split(['=', ']']).next().unwrap().to_string();
            flags.last_mut().expect("an [env: ...] follows its flag").1 = Some(name);
        }
    }
    flags.retain(|(flag, _)| flag != "--help" && flag != "--version");
    flags
}

/// `snowmint` with `args`, with no `SNOWMINT_*` variables set (their values would show in the
/// help): its standard output.
fn help_of(args: &[&str]) -> String {
    let mut command = std::process::Command::new(common::binary());
    command.args(args).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    let output = common::output_within(command, common::EXIT_LIMIT);
    assert_eq!(output.code, 0, "{args:?}: {}", output.stderr);
    output.stdout
}

/// Every flag of every subcommand is in docs/operations/configuration.md, in its subcommand's
/// section, with the environment variable it reads: `serve`'s by the page's one rule, the
/// others' by name. The flags are read from the real binary's `--help`.
#[test]
fn every_flag_of_every_subcommand_is_in_the_configuration_page() {
    const PAGE: &str = "docs/operations/configuration.md";
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations/configuration.md")).unwrap();
    let top = help_of(&["--help"]);
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    assert_eq!(commands, ["serve", "decode", "audit", "fence", "next", "batch", "bench", "sequence", "token"], "{top}");
    for name in commands {
        let heading = format!("\n## `snowmint {name}");
        let start = readme.find(&heading).unwrap_or_else(|| panic!("{PAGE} has no section {heading}`")) + 1;
        let heading = &heading[1..];
        let section = &readme[start..];
        let section = &section[..section[heading.len()..].find("\n#").map_or(section.len(), |i| i + heading.len())];
        // A command with subcommands: the flags of each.
        let flags: Vec<_> = match name {
            "sequence" | "token" => {
                (if name == "token" { &["new", "hash"][..] } else { &["create", "list", "show"][..] })
                    .iter()
                    .flat_map(|sub| flags_in_help(&help_of(&[name, sub, "--help"])))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect()
            }
            _ => flags_in_help(&help_of(&[name, "--help"])),
        };
        assert!(flags.len() > 1 || name == "next" || name == "token", "{name}: no flags read from its help: {flags:?}");
        if name == "serve" {
            let listen = ("--listen".to_string(), Some("SNOWMINT_LISTEN".to_string()));
            assert!(flags.contains(&listen) && flags.len() > 30, "serve's help read wrong: {flags:?}");
        }
        for (flag, env) in flags {
            if flag.starts_with('<') {
                assert!(section.contains(&flag), "{name}: {flag} is not in its section of {PAGE}");
                continue;
            }
            assert!(section.contains(&format!("`{flag}`")), "{name}: `{flag}` is not in its section of {PAGE}");
            let Some(env) = env else { continue };
            if name == "serve" {
                let expected = format!("SNOWMINT_{}", flag.trim_start_matches('-').to_uppercase().replace('-', "_"));
                assert_eq!(env, expected, "serve {flag}");
            } else {
                assert!(section.contains(&env), "{name}: {env} (of {flag}) is not in its section of {PAGE}");
            }
        }
    }
}

#[test]
fn help_is_read_flag_by_flag() {
    let help = "Usage: snowmint decode [OPTIONS] <ID>\n\nArguments:\n  <ID>\n          The ID.\n\nOptions:\n      --layout <NAME>\n          A layout.\n\n      --epoch <EPOCH>\n          The epoch.\n\n          [env: SNOWMINT_EPOCH=]\n          [default: 2026-01-01T00:00:00Z]\n\n  -h, --help\n          Print help\n";
    let flags = flags_in_help(help);
    let expected = [("<ID>", None), ("--layout", None), ("--epoch", Some("SNOWMINT_EPOCH".to_string()))];
    assert_eq!(flags, expected.map(|(flag, env)| (flag.to_string(), env)));
}
