//! The snowmint image under podman, each container run as deploy/base/statefulset.yaml runs
//! its pods: as the image's user (the pod's `runAsUser` and `runAsGroup` are the same
//! 10001), with a read-only root file system, every capability dropped, no privilege
//! escalation, podman's default seccomp profile (the pod's `RuntimeDefault`), a 16 MiB
//! memory-backed `/tmp`, and the pod's memory and CPU limits.
//!
//! Containers share the host's network, with their listeners set to loopback addresses the
//! way the ConfigMap sets them, so that a real etcd on a loopback port is reachable from
//! inside and nothing listens beyond this machine.
//!
//! `scripts/checks/image` builds the image and names it in `SNOWMINT_IMAGE`, with podman's
//! configuration and storage in `CONTAINERS_CONF` and `CONTAINERS_STORAGE_CONF`. A [`Pod`]
//! and a [`Volume`] are removed when dropped, also when their test panics; the script
//! removes whatever a killed test binary left.

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::{Child, EXIT_LIMIT, Output, Process, output_within};

/// The pods' `terminationGracePeriodSeconds`.
pub const GRACE: Duration = Duration::from_secs(30);

/// The pods' preStop hook: the kubelet runs it in the container before SIGTERM, within the
/// grace.
pub const PRE_STOP: [&str; 2] = ["sleep", "5"];

/// The pods' memory limit, in MiB.
pub const MEMORY_MIB: u32 = 256;

/// The pods' CPU limit.
pub const CPUS: u32 = 1;

/// The size of the pods' memory-backed `/tmp`, in MiB.
pub const TMP_MIB: u32 = 16;

/// The image under test.
pub fn image() -> String {
    std::env::var("SNOWMINT_IMAGE").unwrap_or_else(|_| {
        panic!("SNOWMINT_IMAGE names no image: scripts/checks/image builds one and runs these tests")
    })
}

/// Runs `podman args...` to completion, at most [`EXIT_LIMIT`]; a failure fails the test.
pub fn podman(args: &[&str]) -> String {
    let mut command = Command::new("podman");
    command.args(args);
    let Output { code, stdout, stderr } = output_within(command, EXIT_LIMIT);
    assert_eq!(code, 0, "podman {}: {stderr}", args.join(" "));
    stdout
}

/// A name no other container or volume of this test binary has.
fn unique_name(what: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("snowmint-test-{what}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A named podman volume, as `docker run -v snowmint-state:/var/lib/snowmint` makes one: its
/// first mount over a directory of the image gives it that directory's owner and mode.
pub struct Volume {
    pub name: String,
}

impl Volume {
    pub fn create() -> Volume {
        let name = unique_name("state");
        podman(&["volume", "create", &name]);
        Volume { name }
    }

    /// Where the volume's files are on this host.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(podman(&["volume", "inspect", "--format", "{{.Mountpoint}}", &self.name]).trim())
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        podman_quietly(&["volume", "rm", "--force", &self.name]);
    }
}

/// Runs `podman args...` for a clean-up: at most [`EXIT_LIMIT`], its outcome ignored (the
/// script removes what is left), and without a panic of its own while a test unwinds.
fn podman_quietly(args: &[&str]) {
    let mut command = Command::new("podman");
    command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    if let Ok(mut child) = Child::spawn(command) {
        child.wait_within(EXIT_LIMIT);
    }
}

/// How a pod's container is started: its hostname (the pod's name), environment (the
/// ConfigMap's), volumes, and what it runs.
#[derive(Clone)]
pub struct PodSpec {
    hostname: String,
    env: Vec<(String, String)>,
    volumes: Vec<String>,
    /// `command` of the pod spec: replaces the image's entry point.
    command: Option<Vec<String>>,
    /// `args` of the pod spec: replaces the image's CMD.
    args: Vec<String>,
}

impl PodSpec {
    /// The pod `hostname` with its listeners on free loopback ports and JSON logs (the
    /// ConfigMap's `SNOWMINT_LOG_FORMAT`), running the image's entry point and CMD.
    pub fn new(hostname: &str) -> PodSpec {
        PodSpec { hostname: hostname.into(), env: Vec::new(), volumes: Vec::new(), command: None, args: Vec::new() }
            .env("SNOWMINT_LISTEN", "127.0.0.1:0")
            .env("SNOWMINT_ADMIN_LISTEN", "127.0.0.1:0")
            .env("SNOWMINT_LOG_FORMAT", "json")
    }

    pub fn env(mut self, name: &str, value: &str) -> PodSpec {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Mounts `source` (a volume's name or a host path) at `target`.
    pub fn volume(mut self, source: &str, target: &str) -> PodSpec {
        self.volumes.push(format!("{source}:{target}"));
        self
    }

    pub fn command(mut self, command: &[&str]) -> PodSpec {
        self.command = Some(command.iter().map(|s| s.to_string()).collect());
        self
    }

    pub fn args(mut self, args: &[&str]) -> PodSpec {
        self.args = args.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `podman run` of this pod's container, named `name`, attached: podman's exit status
    /// is the container's.
    fn run(&self, name: &str) -> Command {
        let mut command = Command::new("podman");
        command
            .args(["run", "--rm", "--name", name, "--network", "host", "--hostname", &self.hostname])
            // readOnlyRootFilesystem, with only the pod's /tmp volume (podman would add its
            // own tmpfs on /run, /tmp and /var/tmp).
            .args(["--read-only", "--read-only-tmpfs=false", "--tmpfs", &format!("/tmp:rw,size={TMP_MIB}m,mode=1777")])
            .args(["--cap-drop", "ALL", "--security-opt", "no-new-privileges"])
            .args(["--memory", &format!("{MEMORY_MIB}m"), "--cpus", &CPUS.to_string()]);
        for (key, value) in &self.env {
            command.arg("--env").arg(format!("{key}={value}"));
        }
        for volume in &self.volumes {
            command.arg("--volume").arg(volume);
        }
        let mut args = self.args.clone();
        if let Some(command_line) = &self.command {
            command.arg("--entrypoint").arg(&command_line[0]);
            args = [&command_line[1..], &args[..]].concat();
        }
        command.arg(image()).args(args);
        command
    }

    /// Starts the container and waits until snowmint listens in it.
    pub fn start(&self) -> Pod {
        let mut pod = Pod { process: None, name: unique_name(&self.hostname) };
        pod.process = Some(Process::listening(self.run(&pod.name)));
        pod
    }

    /// Runs the container to its end, at most `limit` (a start that fails).
    pub fn run_to_exit(&self, limit: Duration) -> Output {
        let name = unique_name(&self.hostname);
        let _pod = Pod { process: None, name: name.clone() };
        output_within(self.run(&name), limit)
    }
}

/// A running container; removed when dropped.
pub struct Pod {
    process: Option<Process>,
    pub name: String,
}

impl Pod {
    pub fn process(&mut self) -> &mut Process {
        self.process.as_mut().expect("the container runs")
    }

    /// The host's view of the container's first process (its PID 1) in `/proc`.
    pub fn pid1_proc(&self) -> PathBuf {
        let pid = podman(&["inspect", "--format", "{{.State.Pid}}", &self.name]);
        PathBuf::from(format!("/proc/{}", pid.trim()))
    }

    /// Runs `command` in the container, as an exec hook does; its exit code.
    pub fn exec(&self, command: &[&str]) -> Output {
        let mut exec = Command::new("podman");
        exec.args(["exec", &self.name]).args(command);
        output_within(exec, EXIT_LIMIT)
    }

    /// Stops the pod as the kubelet does: the preStop hook, then the image's stop signal
    /// (SIGTERM) with what is left of the grace, then SIGKILL. The container's exit status,
    /// and the time the whole stop took.
    pub async fn terminate(&mut self) -> (ExitStatus, Duration) {
        let start = Instant::now();
        let pre_stop = self.exec(&PRE_STOP);
        assert_eq!(pre_stop.code, 0, "preStop {PRE_STOP:?}: {}", pre_stop.stderr);
        let left = GRACE.saturating_sub(start.elapsed()).as_secs().to_string();
        podman(&["stop", "--time", &left, &self.name]);
        let status = self.process().wait(GRACE).await;
        (status, start.elapsed())
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        podman_quietly(&["rm", "--force", "--time", "0", "--ignore", &self.name]);
    }
}
