//! The Rust client's driver for the conformance suite (`clients/conformance`): reads one JSON
//! request a line on stdin and answers each on stdout once its call has ended, many at once.
//! The ops and the error kinds are described in `clients/conformance/drivers.py`. Built with
//! `cargo build -p snowmint-client --features tls --example conformance`.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use snowmint_client::layout::{FieldOrder, Layout};
use snowmint_client::{BufferConfig, Client, ClientError, OpaqueId};
use tokio::io::AsyncBufReadExt;

type Clients = Arc<Mutex<HashMap<String, Client>>>;

#[tokio::main]
async fn main() {
    let clients = Clients::default();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut tasks = tokio::task::JoinSet::new();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(request) = serde_json::from_str::<Value>(&line) else {
            eprintln!("bad request: {line}");
            continue;
        };
        tasks.spawn(answer(clients.clone(), request));
    }
    while tasks.join_next().await.is_some() {}
}

async fn answer(clients: Clients, request: Value) {
    let start = Instant::now();
    let mut reply = match run(&clients, &request).await {
        Ok(Value::Object(fields)) => Value::Object(fields),
        Ok(_) => json!({}),
        Err(error) => json!({ "error": error }),
    };
    reply["ok"] = json!(reply.get("error").is_none());
    reply["id"] = request["id"].clone();
    reply["elapsed_ms"] = json!(start.elapsed().as_secs_f64() * 1000.0);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{reply}");
    let _ = out.flush();
}

/// The suite's form of an error: its kind, gRPC code and message.
fn error_of(error: &ClientError) -> Value {
    let kind = match error {
        ClientError::Unavailable(_) => "unavailable",
        ClientError::DeadlineExceeded => "deadline",
        ClientError::Closed => "closed",
        ClientError::Rejected(_) => "rejected",
        ClientError::InvalidSetting(_) => "invalid",
        _ => "other",
    };
    json!({ "kind": kind, "code": code_name(error.code()), "message": error.to_string() })
}

fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

fn other(message: impl ToString) -> Value {
    json!({ "kind": "other", "code": null, "message": message.to_string() })
}

fn deadline_of(request: &Value) -> Option<Duration> {
    request["deadline_ms"].as_f64().map(|ms| Duration::from_secs_f64(ms / 1000.0))
}

async fn run(clients: &Clients, request: &Value) -> Result<Value, Value> {
    match request["op"].as_str().unwrap_or_default() {
        "client" => return new_client(clients, request).map(|()| json!({})),
        "decode" => return decode(request),
        "opaque_format" | "opaque_parse" => return opaque(request),
        _ => {}
    }
    let name = request["client"].as_str().unwrap_or_default();
    let client = clients.lock().unwrap().get(name).cloned().ok_or_else(|| other(format!("no client {name}")))?;
    let deadline = deadline_of(request);
    match request["op"].as_str().unwrap_or_default() {
        "next_id" => {
            let id = next_id(&client, deadline).await.map_err(|e| error_of(&e))?;
            Ok(json!({ "ids": [id.to_string()] }))
        }
        "batch" => {
            let n = request["n"].as_u64().unwrap_or_default() as u32;
            let ids = match deadline {
                Some(within) => client.batch_within(n, within).await,
                None => client.batch(n).await,
            }
            .map_err(|e| error_of(&e))?;
            Ok(json!({ "ids": ids.iter().map(u64::to_string).collect::<Vec<_>>() }))
        }
        "next_value" => {
            let sequence = request["sequence"].as_str().unwrap_or_default();
            let value = match deadline {
                Some(within) => client.next_value_within(sequence, within).await,
                None => client.next_value(sequence).await,
            }
            .map_err(|e| error_of(&e))?;
            Ok(json!({ "value": value.to_string() }))
        }
        "close" => {
            client.close();
            Ok(json!({}))
        }
        "burst" => {
            let n = request["n"].as_u64().unwrap_or_default();
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let client = client.clone();
                    tokio::spawn(async move { client.next_id().await })
                })
                .collect();
            let mut results = Vec::new();
            for task in tasks {
                results.push(match task.await {
                    Ok(Ok(id)) => json!({ "ok": true, "id": id.to_string() }),
                    Ok(Err(error)) => json!({ "ok": false, "error": error_of(&error) }),
                    Err(error) => json!({ "ok": false, "error": other(error) }),
                });
            }
            Ok(json!({ "results": results }))
        }
        "loop" => Ok(json!({ "calls": call_loop(&client, request, deadline).await })),
        op => Err(other(format!("unknown op {op:?}"))),
    }
}

async fn next_id(client: &Client, deadline: Option<Duration>) -> Result<u64, ClientError> {
    match deadline {
        Some(within) => client.next_id_within(within).await,
        None => client.next_id().await,
    }
}

async fn call_loop(client: &Client, request: &Value, deadline: Option<Duration>) -> Vec<Value> {
    let every = Duration::from_secs_f64(request["every_ms"].as_f64().unwrap_or(100.0) / 1000.0);
    let duration = Duration::from_secs_f64(request["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0);
    let start = tokio::time::Instant::now();
    let mut calls = Vec::new();
    let mut n = 0;
    while start.elapsed() < duration {
        tokio::time::sleep_until(start + every * n).await;
        let at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0;
        let begun = Instant::now();
        let result = next_id(client, deadline).await;
        let took = begun.elapsed().as_secs_f64() * 1000.0;
        calls.push(match result {
            Ok(id) => json!([at, took, id.to_string(), null]),
            Err(error) => json!([at, took, null, error_of(&error)["kind"]]),
        });
        n += 1;
    }
    calls
}

fn new_client(clients: &Clients, request: &Value) -> Result<(), Value> {
    let endpoints: Vec<String> =
        request["endpoints"].as_array().into_iter().flatten().filter_map(|e| e.as_str().map(String::from)).collect();
    let mut builder = Client::builder(endpoints);
    if let Some(ms) = request["timeout_ms"].as_u64() {
        builder = builder.timeout(Duration::from_millis(ms));
    }
    if let Some(attempts) = request["attempts"].as_u64() {
        builder = builder.attempts(attempts as usize);
    }
    if let Some(n) = request["sequence_prefetch"].as_u64() {
        builder = builder.sequence_prefetch(u32::try_from(n).unwrap_or(u32::MAX));
    }
    if let Some(token) = request["token"].as_str() {
        builder = builder.token(token);
    }
    if let Some(buffer) = request["buffer"].as_object() {
        let mut config = BufferConfig::default();
        if let Some(batch) = buffer.get("batch").and_then(Value::as_u64) {
            config.batch = batch as u32;
        }
        if let Some(low_water) = buffer.get("low_water").and_then(Value::as_u64) {
            config.low_water = low_water as usize;
        }
        if let Some(max_refills) = buffer.get("max_refills").and_then(Value::as_u64) {
            config.max_refills = max_refills as usize;
        }
        if let Some(ms) = buffer.get("max_age_ms").and_then(Value::as_f64) {
            config.max_age = Duration::from_secs_f64(ms / 1000.0);
        }
        builder = builder.buffer(config);
    }
    if let Some(tls) = request["tls"].as_object() {
        let read = |key: &str| tls.get(key).and_then(Value::as_str).map(std::fs::read_to_string).transpose();
        let mut config = tonic::transport::ClientTlsConfig::new();
        if let Some(ca) = read("ca").map_err(other)? {
            config = config.ca_certificate(tonic::transport::Certificate::from_pem(ca));
        }
        if let (Some(cert), Some(key)) = (read("cert").map_err(other)?, read("key").map_err(other)?) {
            config = config.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        builder = builder.tls_config(config);
    }
    let client = builder.connect().map_err(|e| error_of(&e))?;
    clients.lock().unwrap().insert(request["name"].as_str().unwrap_or_default().to_string(), client);
    Ok(())
}

fn decode(request: &Value) -> Result<Value, Value> {
    let spec = &request["layout"];
    let bits = |key: &str| spec[key].as_u64().unwrap_or_default() as u32;
    let layout = Layout {
        name: "test".into(),
        epoch_ms: spec["epoch_ms"].as_i64().unwrap_or_default(),
        tick_ms: spec["tick_ms"].as_u64().unwrap_or_default(),
        time_bits: bits("time_bits"),
        worker_bits: bits("worker_bits"),
        sequence_bits: bits("sequence_bits"),
        order: if spec["order"] == "sequence_worker" { FieldOrder::SequenceWorker } else { FieldOrder::WorkerSequence },
    };
    let id: u64 = request["value"].as_str().and_then(|v| v.parse().ok()).ok_or_else(|| other("not a u64"))?;
    let invalid =
        |e: snowmint_client::layout::DecodeError| json!({ "kind": "invalid", "code": null, "message": e.to_string() });
    let d = layout.decode(id).map_err(invalid)?;
    Ok(json!({
        "unix_ms": d.unix_ms.to_string(),
        "tick": d.tick.to_string(),
        "worker_id": d.worker_id,
        "sequence": d.sequence,
        "time": d.rfc3339(),
    }))
}

fn opaque(request: &Value) -> Result<Value, Value> {
    let refused = |e: snowmint_client::OpaqueIdError| json!({ "kind": "opaque", "opaque_kind": format!("{:?}", e.kind()).to_lowercase(), "code": null, "message": e.to_string() });
    if request["op"] == "opaque_format" {
        let version = request["key_version"].as_u64().unwrap_or(u64::MAX);
        let value: u64 = request["value"].as_str().and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
        let version = u32::try_from(version).unwrap_or(u32::MAX);
        let opaque = OpaqueId::new(version, value).map_err(refused)?;
        return Ok(json!({ "text": opaque.to_string() }));
    }
    let opaque = OpaqueId::parse(request["text"].as_str().unwrap_or_default()).map_err(refused)?;
    Ok(json!({ "key_version": opaque.key_version, "value": opaque.value.to_string() }))
}
