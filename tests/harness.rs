//! The test helpers themselves: a test binary that is killed leaves no child running, a
//! cluster start that fails part-way leaves no member running, a member that exits is
//! retried and reported in its own words, and a start that should fail
//! but runs fails its test within a limit instead of hanging it.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::ServerBuilder;
use common::etcd::EtcdCluster;
use common::sequences::{AllValues, ValueCall, assert_answer_order, assert_refusals_retriable_and_prompt};

/// Where the helper run says it has started its children.
const READY_FILE: &str = "SNOWMINT_HARNESS_READY_FILE";

/// A process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    pid: i32,
    name: String,
    parent: i32,
    /// Since boot, in clock ticks: with the pid, it tells this process from a later one that
    /// reuses the pid.
    started: u64,
}

fn proc_of(pid: i32) -> Option<(Proc, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (name) state ppid ...`; the name may hold spaces and parentheses.
    let (head, rest) = stat.rsplit_once(") ")?;
    let name = head.split_once(" (")?.1.to_string();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let parent = fields.get(1)?.parse().ok()?;
    let started = fields.get(19)?.parse().ok()?;
    Some((Proc { pid, name, parent, started }, state))
}

/// The running (not zombie) children of process `parent`.
fn children_of(parent: i32) -> Vec<Proc> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse().ok()) else { continue };
        if let Some((proc, state)) = proc_of(pid)
            && proc.parent == parent
            && state != 'Z'
        {
            children.push(proc);
        }
    }
    children
}

/// Whether `proc` still runs (a zombie is dead; a new process on its pid is another).
fn still_runs(proc: &Proc) -> bool {
    matches!(proc_of(proc.pid), Some((now, state)) if now.started == proc.started && state != 'Z')
}

/// Waits up to `limit` for every one of `procs` to be gone; kills (SIGKILL) and returns the
/// ones that are not, so a failing test leaves nothing behind either.
fn survivors(procs: &[Proc], limit: Duration) -> Vec<Proc> {
    let start = Instant::now();
    loop {
        let running: Vec<Proc> = procs.iter().filter(|proc| still_runs(proc)).cloned().collect();
        if running.is_empty() || start.elapsed() >= limit {
            for proc in &running {
                // SAFETY: kill has no memory effects; each pid was checked to still be the
                // process this test saw start.
                unsafe { libc::kill(proc.pid, libc::SIGKILL) };
            }
            return running;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Not a test of its own: run as a separate process by
/// `a_killed_test_binary_leaves_no_child_running`, which kills it. Starts an etcd and a
/// snowmint, says so, and waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper, run by a_killed_test_binary_leaves_no_child_running"]
async fn start_children_and_wait_to_be_killed() {
    let Ok(ready) = std::env::var(READY_FILE) else { return };
    let cluster = EtcdCluster::start(1).await;
    let process = ServerBuilder::new().spawn();
    std::fs::write(ready, "ready").unwrap();
    // Killed long before this; if not, everything stops as it drops.
    tokio::time::sleep(Duration::from_secs(60)).await;
    drop((process, cluster));
}

/// A test binary killed with SIGKILL (a CI job cancelled, a timeout) gets no chance to drop
/// anything; its children (etcd, snowmint) must die with it all the same. The helper's temp
/// dirs (etcd's data, the server's state) cannot be removed by a process killed so: they go
/// under this test's own dir (`TMPDIR`), removed when it ends.
#[test]
fn a_killed_test_binary_leaves_no_child_running() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    // Killed on every path out of this test.
    struct Helper(std::process::Child);
    impl Drop for Helper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut helper = Helper(
        Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "start_children_and_wait_to_be_killed", "--nocapture"])
            .env(READY_FILE, &ready)
            .env("TMPDIR", dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while !Path::new(&ready).exists() {
        assert!(helper.0.try_wait().unwrap().is_none(), "the helper ended before its children started");
        assert!(start.elapsed() < Duration::from_secs(60), "the helper never started its children");
        std::thread::sleep(Duration::from_millis(50));
    }
    let children = children_of(helper.0.id() as i32);
    let names: Vec<&str> = children.iter().map(|child| child.name.as_str()).collect();
    assert!(names.contains(&"etcd") && names.contains(&"snowmint"), "the helper's children: {names:?}");

    helper.0.kill().unwrap();
    helper.0.wait().unwrap();
    let left = survivors(&children, Duration::from_secs(5));
    assert!(left.is_empty(), "still running 5 s after their test binary was killed (now killed): {left:?}");
    let kept: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert!(kept.len() > 1, "the helper's temp dirs are not under the test's own dir: {kept:?}");
}

/// A cluster whose third member cannot be started: the start fails, and the two members
/// already running are killed as it unwinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_start_that_fails_part_way_leaves_no_member_running() {
    let before = children_of(std::process::id() as i32);
    let start = tokio::spawn(EtcdCluster::start_members(3, None, |i| {
        if i < 2 { "etcd".to_string() } else { "/nonexistent/etcd".to_string() }
    }));
    let failed = tokio::time::timeout(Duration::from_secs(30), start).await.expect("the start ends");
    assert!(failed.is_err_and(|e| e.is_panic()), "a start with a missing binary failed");
    let started: Vec<Proc> = children_of(std::process::id() as i32)
        .into_iter()
        .filter(|child| child.name == "etcd" && !before.contains(child))
        .collect();
    let left = survivors(&started, Duration::from_secs(5));
    assert!(left.is_empty(), "members left running by the failed start (now killed): {left:?}");
}

/// A member that exits at once (its port taken by a parallel test, as etcd says in its last
/// line) fails its start attempt at once, not after the health limit; the start is made
/// again on fresh ports, and when every attempt fails the test is told each reason with
/// the member's own last lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_exits_is_retried_and_then_reported_with_its_own_words() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("etcd");
    std::fs::write(&script, "#!/bin/sh\necho 'listen tcp 127.0.0.1:1: bind: address already in use' >&2\nexit 1\n")
        .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let binary = script.to_string_lossy().into_owned();
    let start = tokio::spawn(EtcdCluster::start_members(1, None, move |_| binary.clone()));
    let failed = tokio::time::timeout(Duration::from_secs(20), start)
        .await
        .expect("a start whose member exits ends well before the 30 s health limit");
    let Err(error) = failed else { panic!("a start whose member exits succeeded") };
    let panic = error.into_panic();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    for attempt in 1..=3 {
        assert!(message.contains(&format!("attempt {attempt}: etcd member m0 exited")), "{message}");
    }
    assert!(message.contains("bind: address already in use"), "the member's own words are shown: {message}");
}

/// A start that should fail but runs (the very bug start-up tests guard against) fails its
/// test when the limit passes, instead of hanging it.
#[test]
#[should_panic(expected = "was still running after 2s; killed")]
fn a_start_that_should_fail_but_runs_fails_its_test_within_the_limit() {
    ServerBuilder::new().run_to_exit_within(Duration::from_secs(2));
}

/// A sequence call of `values` sent `start` ms and answered `end` ms after `t0`.
fn value_call(t0: Instant, start: u64, end: u64, values: &[i64]) -> ValueCall {
    let at = |ms| t0 + Duration::from_millis(ms);
    let code = if values.is_empty() { tonic::Code::Unavailable } else { tonic::Code::Ok };
    ValueCall { sequence: "orders", start: at(start), end: at(end), code, values: values.to_vec() }
}

/// The sequence checks of the fault tests pass what an instance may do (calls that overlap
/// answered in either order, gaps) and catch what it must not: an answer below one its
/// caller had already received, a batch out of order, a value given twice anywhere, a
/// refusal with another code than UNAVAILABLE or the caller's own deadline.
#[test]
fn the_sequence_checks_catch_what_they_look_for() {
    let t0 = Instant::now();
    let fails = |f: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();
    // Two calls that overlap may be answered in either order; a gap is no fault.
    let overlapping = [value_call(t0, 0, 10, &[7]), value_call(t0, 5, 8, &[3, 4]), value_call(t0, 20, 30, &[90])];
    assert_answer_order("ok", &overlapping);
    // A call sent after another was answered gets values above it.
    assert!(fails(&|| assert_answer_order("late", &[value_call(t0, 0, 10, &[7]), value_call(t0, 11, 12, &[6])])));
    assert!(fails(&|| assert_answer_order("batch", &[value_call(t0, 0, 10, &[7, 9, 8])])));
    // Once anywhere, across instances and lifetimes.
    let mut all = AllValues::default();
    all.add(&overlapping);
    all.add(&[value_call(t0, 0, 1, &[91, 92])]);
    assert_eq!(all.assert_no_value_twice(), 6);
    let mut all = AllValues::default();
    all.add(&overlapping);
    all.add(&[value_call(t0, 0, 1, &[1, 2, 90])]);
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| all.assert_no_value_twice())).is_err());
    // Refusals: UNAVAILABLE, or the caller's own timer, within the deadline.
    let mut refused = value_call(t0, 0, 500, &[]);
    assert_refusals_retriable_and_prompt("ok", std::slice::from_ref(&refused));
    refused.code = tonic::Code::DeadlineExceeded;
    assert_refusals_retriable_and_prompt("ok", std::slice::from_ref(&refused));
    refused.code = tonic::Code::Internal;
    assert!(fails(&|| assert_refusals_retriable_and_prompt("internal", std::slice::from_ref(&refused))));
    let slow = value_call(t0, 0, 2_000, &[]);
    assert!(fails(&|| assert_refusals_retriable_and_prompt("slow", std::slice::from_ref(&slow))));
}
