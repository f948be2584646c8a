//! The image the Dockerfile builds, run under podman as the StatefulSet runs it (see
//! [`common::podman`]): standalone with its state on a volume, stopped and started again;
//! etcd mode against a real etcd on this host; and a state volume it may not write, or none
//! at all.
//!
//! `scripts/checks/image`, a step of `scripts/check`, builds the image and runs these tests;
//! a plain `cargo test` has no image to run and ignores them, but checks that the settings
//! they run the containers with are still the manifests'. They run one at a time
//! ([`serial`]): each stop is timed against the pods' grace period.

mod common;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use common::etcd::{EtcdCluster, get};
use common::podman::{GRACE, PodSpec, Volume, image, podman};
use common::{EXIT_LIMIT, assert_increasing, assert_unique, client, http_get, next_id_eventually, serial};
use snowmint::layout::Layout;
use snowmint::proto::BatchIdsRequest;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// The image's user and group, which the pods' `runAsUser` and `runAsGroup` name too.
const APP_ID: u32 = 10001;

/// The state directory of the image and of the standalone overlay's `SNOWMINT_STATE_DIR`.
const STATE_DIR: &str = "/var/lib/snowmint";

fn layout() -> Layout {
    Layout::default_snowmint()
}

/// The standalone overlay's command and args: the worker ID is the pod name's ordinal.
const STANDALONE_COMMAND: [&str; 2] = ["/bin/sh", "-c"];
const STANDALONE_ARGS: &str = r#"exec /usr/local/bin/snowmint serve --worker-id "${POD_NAME##*-}""#;

/// The base ConfigMap's etcd settings but its endpoints.
const ETCD_PREFIX: &str = "/snowmint";
const LEASE_TTL: &str = "10";

/// A pod of the standalone overlay (deploy/overlays/standalone): its ConfigMap's state dir,
/// and its command.
fn standalone(pod_name: &str) -> PodSpec {
    PodSpec::new(pod_name)
        .env("SNOWMINT_STATE_DIR", STATE_DIR)
        .env("POD_NAME", pod_name)
        .command(&STANDALONE_COMMAND)
        .args(&[STANDALONE_ARGS])
}

/// The settings the containers here are run with are the manifests' own: a change to either
/// side that the other does not follow fails here (no image needed). The manifests keep one
/// setting per line, so lines are compared.
#[test]
fn the_containers_are_run_with_the_manifests_settings() {
    use common::podman::{CPUS, MEMORY_MIB, PRE_STOP, TMP_MIB};
    let read =
        |path: &str| std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    let lines = |text: &str| text.lines().map(|line| line.trim().to_string()).collect::<Vec<_>>();
    let quoted =
        |words: &[&str]| format!("[{}]", words.iter().map(|w| format!("{w:?}")).collect::<Vec<_>>().join(", "));
    let statefulset = lines(&read("deploy/base/statefulset.yaml"));
    let limits = statefulset.iter().position(|line| line == "limits:").expect("resource limits");
    let tmp = statefulset.iter().position(|line| line == "- name: tmp").expect("the tmp volume");
    for (line, from) in [
        (format!("terminationGracePeriodSeconds: {}", GRACE.as_secs()), 0),
        (format!("runAsUser: {APP_ID}"), 0),
        (format!("runAsGroup: {APP_ID}"), 0),
        ("type: RuntimeDefault".into(), 0),
        (r#"args: ["serve"]"#.into(), 0),
        (format!("command: {}", quoted(&PRE_STOP)), 0),
        (format!("cpu: \"{CPUS}\""), limits),
        (format!("memory: {MEMORY_MIB}Mi"), limits),
        ("allowPrivilegeEscalation: false".into(), 0),
        ("readOnlyRootFilesystem: true".into(), 0),
        (r#"drop: ["ALL"]"#.into(), 0),
        ("mountPath: /tmp".into(), 0),
        ("medium: Memory".into(), tmp),
        (format!("sizeLimit: {TMP_MIB}Mi"), tmp),
    ] {
        assert!(statefulset[from..].contains(&line), "deploy/base/statefulset.yaml has no {line:?}");
    }
    let config = lines(&read("deploy/base/kustomization.yaml"));
    for line in [
        "- SNOWMINT_LOG_FORMAT=json".into(),
        format!("- SNOWMINT_ETCD_PREFIX={ETCD_PREFIX}"),
        format!("- SNOWMINT_LEASE_TTL={LEASE_TTL}"),
    ] {
        assert!(config.contains(&line), "deploy/base/kustomization.yaml has no {line:?}");
    }
    let overlay = [
        read("deploy/overlays/standalone/kustomization.yaml"),
        read("deploy/overlays/standalone/statefulset-standalone.yaml"),
    ]
    .concat();
    for line in [
        format!("- SNOWMINT_STATE_DIR={STATE_DIR}"),
        format!("command: {}", quoted(&STANDALONE_COMMAND)),
        format!("- {STANDALONE_ARGS}"),
        format!("mountPath: {STATE_DIR}"),
    ] {
        assert!(lines(&overlay).contains(&line), "the standalone overlay has no {line:?}");
    }
    assert!(lines(&read("deploy/base/audit-cronjob.yaml")).contains(&r#"args: ["audit"]"#.to_string()));
}

/// Waits until the gRPC health service reports `service` SERVING, as the readiness probe
/// asks it for `snowmint.v1.IdService`.
async fn wait_serving(grpc: std::net::SocketAddr, service: &str) {
    let mut health = HealthClient::new(common::channel(grpc).await);
    let start = std::time::Instant::now();
    loop {
        let status = health.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner().status;
        if status == ServingStatus::Serving as i32 {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{service:?} not SERVING: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asks the pod at `grpc` and `admin` for IDs the ways a caller can: gRPC NextId and
/// BatchIds, and Connect's JSON over HTTP/1.1; every ID, in the order given (each way's
/// increasing).
async fn mint(grpc: std::net::SocketAddr, admin: std::net::SocketAddr) -> Vec<u64> {
    wait_serving(grpc, "snowmint.v1.IdService").await;
    assert_eq!(http_get(admin, "/healthz").await.0, 200, "the liveness probe's /healthz");
    assert_eq!(http_get(admin, "/readyz").await.0, 200, "/readyz");
    let mut grpc_client = client(grpc).await;
    let mut ids = vec![next_id_eventually(&mut grpc_client, Duration::from_secs(10)).await];
    ids.extend(
        grpc_client.batch_ids(BatchIdsRequest { count: 1_000, ..Default::default() }).await.unwrap().into_inner().ids,
    );
    assert_increasing(&ids);
    let body = connect_next_id(grpc).await;
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let id = json["id"].as_str().unwrap_or_else(|| panic!("no string id in {body}"));
    ids.push(id.parse().unwrap());
    assert!(ids[ids.len() - 1] > ids[ids.len() - 2], "the Connect call's ID is not above the gRPC calls' ones");
    ids
}

/// A Connect NextId call, JSON over HTTP/1.1 as `curl` makes it: the response's body, which
/// must come with 200 OK.
async fn connect_next_id(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST /snowmint.v1.IdService/NextId HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    };
    let response = tokio::time::timeout(common::CALL_LIMIT, exchange).await.expect("a Connect answer");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap()
}

/// The value of `field` (`Uid`, `CapEff`, ...) in a `/proc/<pid>/status`.
fn proc_status_field(status: &str, field: &str) -> String {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field).and_then(|rest| rest.strip_prefix(':')))
        .unwrap_or_else(|| panic!("no {field} in\n{status}"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
#[ignore = "needs the image: scripts/checks/image builds it and runs these tests"]
async fn standalone_serves_stops_on_sigterm_and_restarts_past_its_saved_reservation() {
    let _serial = serial().await;
    // Kubernetes' runAsNonRoot accepts only a numeric user.
    let user = podman(&["image", "inspect", "--format", "{{.Config.User}}", &image()]);
    assert_eq!(user.trim(), format!("{APP_ID}:{APP_ID}"));

    let volume = Volume::create();
    let spec = standalone("snowmint-3").volume(&volume.name, STATE_DIR);
    let mut pod = spec.start();

    // PID 1 is snowmint itself (the overlay's shell execs it), as the image's user, with no
    // capability, no way to gain privileges, and a seccomp filter.
    let proc = pod.pid1_proc();
    let cmdline = std::fs::read(proc.join("cmdline")).unwrap();
    assert!(cmdline.starts_with(b"/usr/local/bin/snowmint\0serve\0"), "{}", String::from_utf8_lossy(&cmdline));
    let status = std::fs::read_to_string(proc.join("status")).unwrap();
    let ids4 = format!("{APP_ID} {APP_ID} {APP_ID} {APP_ID}");
    assert_eq!(proc_status_field(&status, "Uid"), ids4);
    assert_eq!(proc_status_field(&status, "Gid"), ids4);
    assert_eq!(proc_status_field(&status, "Groups"), APP_ID.to_string());
    for caps in ["CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(proc_status_field(&status, caps), "0000000000000000", "{caps}");
    }
    assert_eq!(proc_status_field(&status, "NoNewPrivs"), "1");
    assert_eq!(proc_status_field(&status, "Seccomp"), "2", "a seccomp filter");

    let (grpc, admin) = (pod.process().grpc, pod.process().admin);
    let before = mint(grpc, admin).await;
    assert!(before.iter().all(|&id| layout().unpack(id).worker == 3), "worker 3, from the pod name snowmint-3");

    let (status, took) = pod.terminate().await;
    assert!(status.success(), "SIGTERM ended the container with {status}");
    assert!(took < GRACE, "the stop took {took:?}, beyond the grace of {GRACE:?}");
    let logs = pod.process().drain_logs();
    assert!(logs.iter().any(|line| line.contains("SIGTERM")), "no SIGTERM in the logs:\n{}", logs.join("\n"));
    drop(pod);

    // The state is on the volume, the image's user's, and covers every ID minted.
    let saved_path = volume.path().join("worker-3.json");
    let meta = std::fs::metadata(&saved_path).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (APP_ID, APP_ID));
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&saved_path).unwrap()).unwrap();
    let last_tick_end = layout().tick_end_ms(layout().unpack(*before.last().unwrap()).tick);
    assert!(saved["reserved_until_ms"].as_i64().unwrap() >= last_tick_end, "{saved}");

    // A new container on the same volume mints past the saved reservation.
    let mut pod = spec.start();
    let (grpc, admin) = (pod.process().grpc, pod.process().admin);
    let after = mint(grpc, admin).await;
    let (status, took) = pod.terminate().await;
    assert!(status.success() && took < GRACE, "{status} after {took:?}");
    assert!(after[0] > *before.last().unwrap(), "the restart went back: {} <= {}", after[0], before.last().unwrap());
    let all = [before, after].concat();
    assert_unique(&all);
    eprintln!("standalone: {} IDs over two containers on one volume, none twice", all.len());
}

#[tokio::test]
#[ignore = "needs the image: scripts/checks/image builds it and runs these tests"]
async fn etcd_mode_claims_its_ordinals_slot_mints_and_releases_it_on_sigterm() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let mut etcd = cluster.client().await;
    // The base's ConfigMap (deploy/base/kustomization.yaml), with the test's etcd; no volume
    // but /tmp, as in the base.
    let base = |pod_name: &str| {
        PodSpec::new(pod_name)
            .env("SNOWMINT_ETCD_ENDPOINTS", &cluster.endpoints())
            .env("SNOWMINT_ETCD_PREFIX", ETCD_PREFIX)
            .env("SNOWMINT_LEASE_TTL", LEASE_TTL)
    };
    let mut pod = base("snowmint-2").args(&["serve"]).start();
    let (grpc, admin) = (pod.process().grpc, pod.process().admin);
    let ids = mint(grpc, admin).await;
    assert_unique(&ids);
    assert!(ids.iter().all(|&id| layout().unpack(id).worker == 2), "slot 2, from the hostname snowmint-2");
    assert!(get(&mut etcd, "/snowmint/workers/2").await.is_some(), "the slot's key is held");

    let (status, took) = pod.terminate().await;
    assert!(status.success(), "SIGTERM ended the container with {status}");
    assert!(took < GRACE, "the stop took {took:?}, beyond the grace of {GRACE:?}");
    assert_eq!(get(&mut etcd, "/snowmint/workers/2").await, None, "the slot is released");
    let value = get(&mut etcd, "/snowmint/reservations/2").await.expect("the slot's reservation is kept");
    let reserved: serde_json::Value = serde_json::from_slice(&value).unwrap();
    let last_tick_end = layout().tick_end_ms(layout().unpack(*ids.iter().max().unwrap()).tick);
    assert_eq!(reserved["reserved_until_ms"].as_i64().unwrap(), last_tick_end, "the final reservation");
    drop(pod);

    // The audit CronJob's container (deploy/base/audit-cronjob.yaml): the same ConfigMap,
    // `args: ["audit"]`, finds the claim and its hand-back in order.
    let audit = base("snowmint-audit").args(&["audit"]).run_to_exit(EXIT_LIMIT);
    assert_eq!(audit.code, 0, "audit: {}{}", audit.stdout, audit.stderr);
}

#[tokio::test]
#[ignore = "needs the image: scripts/checks/image builds it and runs these tests"]
async fn a_state_volume_it_may_not_write_or_none_stops_the_start_with_a_clear_error() {
    let _serial = serial().await;
    // A volume owned by another user (root, mode 755), as a volume without the pod's fsGroup.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert_eq!(std::fs::metadata(dir.path()).unwrap().uid(), 0, "the tests run as root");
    let not_ours = standalone("snowmint-0").volume(dir.path().to_str().unwrap(), STATE_DIR).run_to_exit(EXIT_LIMIT);
    assert_ne!(not_ours.code, 0, "{}", not_ours.stderr);
    let line = not_ours.stderr.lines().last().unwrap_or_default();
    for needed in [STATE_DIR, "cannot be written", "uid 10001, gid 10001", "owned by uid 0, gid 0, mode 755", "fsGroup"]
    {
        assert!(line.contains(needed), "no {needed:?} in: {}", not_ours.stderr);
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing is written");

    // No volume: the state dir is the image's own, on the read-only root file system.
    let none = standalone("snowmint-0").run_to_exit(EXIT_LIMIT);
    assert_ne!(none.code, 0, "{}", none.stderr);
    let line = none.stderr.lines().last().unwrap_or_default();
    for needed in [STATE_DIR, "cannot be written", "read-only file system", "mount a writable volume"] {
        assert!(line.contains(needed), "no {needed:?} in: {}", none.stderr);
    }
}
