//! Rolling restarts under load, as a Kubernetes StatefulSet update does them: instances
//! `snowmint-0` … `snowmint-{n-1}` on a real 3-member etcd, each a real process whose kernel
//! hostname is its pod name (a UTS namespace of its own), each with a client keeping every
//! ID. Highest ordinal first, one at a time: SIGTERM, wait for the exit, start it again.
//!
//! Shown: no ID twice across the whole run; every instance holds the slot of its ordinal,
//! before and after its restart (the slot its hostname asks for, released on SIGTERM and
//! taken back by the new process); the other instances refuse nothing meanwhile; and how
//! long each ordinal gave no ID. The bounded case runs with every `cargo test`;
//! `scripts/long/rolling` runs the larger one the table of docs/operations/fleets.md comes from.

mod common;

use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use common::fleet::{Fleet, Mode, Node, can_set_hostname, longest_refusal, worker_of};
use common::serial;

/// One instance's restart.
#[derive(Debug)]
struct Restart {
    ordinal: usize,
    /// The worker ID of its first ID after the restart.
    slot_after: u64,
    /// From SIGTERM to the process's exit.
    stop: Duration,
    /// From its last ID before SIGTERM to its first ID from the new process: what a client
    /// pinned to this ordinal waited.
    gap: Duration,
    /// The longest run of refused calls on the new process.
    refused_after: Duration,
    /// Calls the other instances refused while this one restarted.
    refused_elsewhere: usize,
}

/// Starts `n` StatefulSet-like instances, restarts them one by one `rounds` times, and
/// checks every ID. Returns the restarts and the number of IDs checked.
async fn rolling_restart(n: usize, rounds: usize) -> (Vec<Restart>, usize) {
    let cluster = EtcdCluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let mode = Mode::Etcd { endpoints: cluster.endpoints(), prefix: "/rolling".into() };
    let hostnames = can_set_hostname();
    if !hostnames {
        eprintln!("no UTS namespaces here: each instance is given its ordinal with --preferred-worker-id instead");
    }
    let nodes: Vec<Node> = (0..n)
        .map(|i| {
            let name = format!("snowmint-{i}");
            if hostnames {
                Node::new(&name, mode.clone(), &[], dir.path()).with_hostname(&name)
            } else {
                Node::new(&name, mode.clone(), &["--preferred-worker-id", &i.to_string()], dir.path())
            }
        })
        .collect();
    let mut fleet = Fleet::start(Some(cluster), nodes, dir, false).await;
    for (i, node) in fleet.nodes.iter().enumerate() {
        let first = node.live_ids()[0];
        assert_eq!(worker_of(first), i as u64, "{} started on slot {}", node.name, worker_of(first));
    }
    let mut restarts = Vec::new();
    for _ in 0..rounds {
        // A StatefulSet updates the highest ordinal first.
        for i in (0..n).rev() {
            let node = &mut fleet.nodes[i];
            node.stop_hammer().await;
            let last_ok =
                node.done.last().and_then(|log| log.calls.iter().filter(|c| c.2 == tonic::Code::Ok).map(|c| c.0).max());
            let sigterm = Instant::now();
            node.terminate().await;
            let stop = sigterm.elapsed();
            node.start();
            let started = Instant::now();
            let recovered = node.recovered_after(sigterm, Duration::from_secs(30)).await;
            let first = *node.live_ids().first().expect("an ID after recovery");
            let slot_after = worker_of(first);
            assert_eq!(slot_after, i as u64, "{} came back on slot {slot_after}", node.name);
            // Let the new process serve a little before the next restart, as a readiness
            // probe would.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let refused_after = longest_refusal(&fleet.nodes[i].calls_after(started));
            let refused_elsewhere = fleet
                .nodes
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .flat_map(|(_, other)| other.calls_after(sigterm))
                .filter(|c| c.2 != tonic::Code::Ok)
                .count();
            let gap = (sigterm + recovered).duration_since(last_ok.unwrap_or(sigterm));
            restarts.push(Restart { ordinal: i, slot_after, stop, gap, refused_after, refused_elsewhere });
        }
    }
    let (checked, _) = fleet.stop().await;
    let checked = checked.ids;
    for r in &restarts {
        assert_eq!(r.refused_elsewhere, 0, "other instances refused calls while snowmint-{} restarted", r.ordinal);
    }
    (restarts, checked)
}

fn table(restarts: &[Restart], checked: usize) {
    eprintln!(
        "| instance | slot after restart | SIGTERM to exit | no ID from it | longest refusal after restart | refused elsewhere |"
    );
    eprintln!("|---|---|---|---|---|---|");
    for r in restarts {
        eprintln!(
            "| snowmint-{} | {} | {} ms | {} ms | {} ms | {} |",
            r.ordinal,
            r.slot_after,
            r.stop.as_millis(),
            r.gap.as_millis(),
            r.refused_after.as_millis(),
            r.refused_elsewhere
        );
    }
    eprintln!("IDs checked: {checked}, duplicates: 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_gives_every_ordinal_its_slot_back_with_no_duplicate() {
    let _serial = serial().await;
    let (restarts, checked) = rolling_restart(3, 1).await;
    table(&restarts, checked);
    for r in &restarts {
        // The new process reads the saved reservation and mints at once: the gap is the
        // restart itself (exit, start, first call), not a wait on a lease.
        assert!(r.gap < Duration::from_secs(5), "snowmint-{} gave no ID for {:?}", r.ordinal, r.gap);
    }
    assert!(checked > 1_000, "only {checked} IDs");
}

/// The rolling-restart table of docs/operations/fleets.md: `SNOWMINT_ROLLING_INSTANCES` (default 8) instances,
/// `SNOWMINT_ROLLING_ROUNDS` (default 2) rolling updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run by scripts/long/rolling"]
async fn rolling_restart_table() {
    let _serial = serial().await;
    let env = |name: &str, default: usize| std::env::var(name).map_or(default, |v| v.parse().expect(name));
    let (restarts, checked) =
        rolling_restart(env("SNOWMINT_ROLLING_INSTANCES", 8), env("SNOWMINT_ROLLING_ROUNDS", 2)).await;
    table(&restarts, checked);
}
