//! etcd over months (issue 23), against a real etcd: what an idle fleet writes, and a restore
//! from an earlier snapshot while instances minted past it.
//!
//! Every write to etcd is a revision kept until compacted: a fleet that writes while nobody
//! asks it for anything fills etcd for nothing. And etcd restored from a snapshot holds
//! reservations older than what was minted since: the fleet must find that out and fence it,
//! or a newcomer would mint again what a holder that died in the lost stretch minted.

mod common;

use std::time::{Duration, Instant};

use common::etcd::EtcdCluster;
use common::fleet::{self, Fleet};
use common::{Process, ServerBuilder, http_get, serial};

/// The revision etcd is at.
async fn revision(client: &mut etcd_client::Client) -> i64 {
    let options = etcd_client::GetOptions::new().with_count_only();
    client.get("/", Some(options)).await.unwrap().header().expect("a header").revision()
}

/// Instances that mint nothing write nothing to etcd once idle (at most 0.2 writes a second
/// each: the target), stay ready, and the first call after a quiet stretch is answered (its
/// reservation written on demand). Before, each wrote its reservation about once a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_fleet_writes_nothing_and_answers_at_once() {
    let _serial = serial().await;
    let cluster = EtcdCluster::start(1).await;
    let endpoints = cluster.endpoints();
    let processes: Vec<Process> = (0..3).map(|_| ServerBuilder::new().etcd(&endpoints, "/idle").spawn()).collect();
    let mut client = cluster.client().await;
    // Past the idle time (10 s of nothing minted) the instances write no more.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let (from, started) = (revision(&mut client).await, Instant::now());
    tokio::time::sleep(Duration::from_secs(20)).await;
    let writes = revision(&mut client).await - from;
    let per_instance = writes as f64 / started.elapsed().as_secs_f64() / processes.len() as f64;
    eprintln!("idle: {writes} etcd writes in {:?} from {} instances", started.elapsed(), processes.len());
    assert!(per_instance <= 0.2, "{per_instance:.2} writes a second per idle instance (target at most 0.2)");
    for process in &processes {
        let (status, body) = http_get(process.admin, "/readyz").await;
        assert_eq!(status, 200, "an idle instance is not ready: {body}");
        let mut grpc = common::client(process.grpc).await;
        let id = grpc.next_id(snowmint::proto::NextIdRequest::default()).await.expect("the first call after idling");
        assert_ne!(id.into_inner().id, 0);
    }
    drop(processes);
}

/// etcd restored from a snapshot taken 3 s before a holder was killed, while the fleet minted
/// past it; a newcomer 8 s behind takes the killed holder's slot: no ID twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_from_an_earlier_snapshot_issues_no_id_twice() {
    let _serial = serial().await;
    // A short window and skew bound, so that the fence (TTL + drift + window + skew) is waited
    // out within the test: 3 + 10 + 1 + 15 s.
    let extra = ["--reservation-window-ms", "1000", "--max-fleet-skew-ms", "15000"];
    let mut fleet = Fleet::etcd_with(1, 3, &extra).await;
    fleet::etcd_restored(&mut fleet, Duration::from_secs(3), 8.0).await;
    let (checked, _) = fleet.stop().await;
    eprintln!("restore: {} IDs and {} sequence values checked, none twice", checked.ids, checked.values);
}
