//! The one way tests start a server: a [`ServerBuilder`] holds what a test varies (the state
//! dir, flags, etcd, the clock, TLS, the environment, a command the binary runs through) and
//! starts the server in this process ([`ServerBuilder::start`]), as the real binary
//! ([`ServerBuilder::spawn`]), or as a start that should fail ([`ServerBuilder::run_to_exit`]).
//! Its defaults are what most tests use: a fresh temp dir, loopback ports the OS picks, the
//! system clock, and in this process worker 5.
//!
//! Each builder makes a temp dir, where the server keeps its state unless told otherwise and
//! where the test may put files of its own (certificates, key files). Every server started
//! from the builder holds the dir with it, so it is removed with the last of them, also when
//! the test panics: a child is killed first (see [`super::child`]), and a server in this
//! process is told to stop when dropped. A builder is cloned, or used again, to start servers
//! one after the other on one state dir.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use snowmint::clock::{Clock, ManualClock, SystemClock};
use snowmint::layout::Layout;
use snowmint::proto::id_service_client::IdServiceClient;
use snowmint::server::{GrpcTls, ServeConfig, SlotSource};
use snowmint::store::file::StandaloneConfig;
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::child::{self, Child, Output, output_within};
use super::tls::CertFiles;
use super::{EXIT_LIMIT, binary, client, http_get, metric_value};

/// A server as a test wants it, not yet started. See the module's doc.
#[derive(Clone)]
pub struct ServerBuilder {
    dir: Arc<TempDir>,
    state_dir: PathBuf,
    /// For a server in this process.
    config: ServeConfig,
    clock: Arc<dyn Clock>,
    /// For the binary: its flags after `serve` and the listeners, its environment (`None`:
    /// removed), the command it runs through, and its listen addresses (gRPC, admin).
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    through: Vec<OsString>,
    listen: [String; 2],
    /// The first setting made that only one of the two kinds of server takes, so that the
    /// other kind refuses to start rather than leave it out.
    in_process_only: Option<&'static str>,
    binary_only: Option<&'static str>,
}

impl Default for ServerBuilder {
    fn default() -> ServerBuilder {
        ServerBuilder::new()
    }
}

impl ServerBuilder {
    /// A server with its state in a fresh temp dir, on loopback ports the OS picks.
    pub fn new() -> ServerBuilder {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().join("state");
        ServerBuilder {
            config: config(&state_dir),
            state_dir,
            dir: Arc::new(dir),
            clock: Arc::new(SystemClock::new()),
            args: Vec::new(),
            env: Vec::new(),
            through: Vec::new(),
            listen: ["127.0.0.1:0".into(), "127.0.0.1:0".into()],
            in_process_only: None,
            binary_only: None,
        }
    }

    /// The builder's temp dir, for the test's own files; removed with the last server started
    /// from it.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Where the server keeps its state: `state` in [`ServerBuilder::dir`] (made by the
    /// server, not here), unless [`ServerBuilder::state_dir`] says otherwise.
    pub fn state_path(&self) -> &Path {
        &self.state_dir
    }

    /// Keeps the state (and the clock filter's memory) in `dir` instead.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> ServerBuilder {
        self.state_dir = dir.into();
        if let SlotSource::Standalone(standalone) = &mut self.config.slot_source {
            standalone.state_dir = self.state_dir.clone();
        }
        self.config.clock_memory_dir = Some(self.state_dir.clone());
        self
    }

    /// Standalone on worker slot `slot` (`--worker-id`), in this process or the binary.
    pub fn slot(mut self, slot: u32) -> ServerBuilder {
        if let SlotSource::Standalone(standalone) = &mut self.config.slot_source {
            standalone.slots = vec![slot];
        }
        self.flags(["--worker-id".to_string(), slot.to_string()]);
        self
    }

    /// The strict clock policy (`--max-clock-drift-ms 0`): a small step back is waited out,
    /// a larger one refused, never minted through.
    pub fn strict(mut self) -> ServerBuilder {
        self.config.max_clock_drift = Duration::ZERO;
        self.flags(["--max-clock-drift-ms", "0"]);
        self
    }

    /// gRPC over TLS with the certificate `server`; with `client_ca`, only clients with a
    /// certificate that CA signed (mutual TLS).
    pub fn tls(mut self, server: &CertFiles, client_ca: Option<&Path>) -> ServerBuilder {
        self.config.tls =
            Some(GrpcTls { cert: server.cert.clone(), key: server.key.clone(), client_ca: client_ca.map(Into::into) });
        self.flags([
            OsStr::new("--tls-cert"),
            server.cert.as_os_str(),
            OsStr::new("--tls-key"),
            server.key.as_os_str(),
        ]);
        if let Some(ca) = client_ca {
            self.flags([OsStr::new("--tls-client-ca"), ca.as_os_str()]);
        }
        self
    }

    /// In this process only: a clock of the test's (a [`ManualClock`], one that stalls) in
    /// place of the system's.
    pub fn clock(mut self, clock: impl Clock) -> ServerBuilder {
        self.clock = Arc::new(clock);
        self.in_process_only.get_or_insert("a clock of the test's");
        self
    }

    /// In this process only: `change` made to the configuration ([`config`]'s, with the
    /// state dir set), for what no other method sets.
    pub fn config(mut self, change: impl FnOnce(&mut ServeConfig)) -> ServerBuilder {
        change(&mut self.config);
        self.in_process_only.get_or_insert("a change to the configuration");
        self
    }

    /// The binary only: etcd mode on `endpoints` (comma-separated) under `prefix`.
    pub fn etcd(self, endpoints: &str, prefix: &str) -> ServerBuilder {
        self.args(["--etcd-endpoints", endpoints, "--etcd-prefix", prefix])
    }

    /// The binary only: more flags.
    pub fn args<I, S>(mut self, args: I) -> ServerBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.flags(args);
        self.binary_only.get_or_insert("a flag");
        self
    }

    /// Flags for the binary, which a server in this process has in its configuration.
    fn flags(&mut self, args: impl IntoIterator<Item = impl AsRef<OsStr>>) {
        self.args.extend(args.into_iter().map(|arg| arg.as_ref().to_os_string()));
    }

    /// The binary only: the environment variable `name` set to `value`.
    pub fn env(mut self, name: &str, value: impl AsRef<OsStr>) -> ServerBuilder {
        self.env.push((name.into(), Some(value.as_ref().to_os_string())));
        self.binary_only.get_or_insert("an environment variable");
        self
    }

    /// The binary only: the environment variable `name` removed.
    pub fn env_remove(mut self, name: &str) -> ServerBuilder {
        self.env.push((name.into(), None));
        self.binary_only.get_or_insert("an environment variable");
        self
    }

    /// The binary only: its wall clock offset from real time by what `clock_file` says
    /// (libfaketime, re-read at every call), its monotonic clock left alone.
    pub fn faketime(self, clock_file: &Path) -> ServerBuilder {
        self.env("LD_PRELOAD", libfaketime())
            .env("FAKETIME_TIMESTAMP_FILE", clock_file)
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env_remove("FAKETIME")
    }

    /// The binary only: run through `launcher` (a program and its arguments, then the
    /// binary's path and its own), which must exec it so the child's pid is snowmint's.
    pub fn through<I, S>(mut self, launcher: I) -> ServerBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.through = launcher.into_iter().map(|arg| arg.as_ref().to_os_string()).collect();
        self.binary_only.get_or_insert("a launcher");
        self
    }

    /// The binary only: `hostname` as the kernel hostname it sees (as a pod's, `snowmint-3`),
    /// in a UTS namespace of its own. Needs UTS namespaces (see `fleet::can_set_hostname`).
    pub fn hostname(self, hostname: &str) -> ServerBuilder {
        // unshare and sh exec in turn, so the child's pid is snowmint's own.
        self.through(["unshare", "--uts", "--", "sh", "-c", "hostname \"$0\" && exec \"$@\"", hostname])
    }

    /// The binary only: listen on `grpc` and `admin` rather than loopback ports the OS picks.
    pub fn listen(mut self, grpc: &str, admin: &str) -> ServerBuilder {
        self.listen = [grpc.into(), admin.into()];
        self.binary_only.get_or_insert("a listen address");
        self
    }

    /// Starts the server in this process, on loopback ports the OS picks.
    pub async fn start(&self) -> TestServer {
        if let Some(setting) = self.binary_only {
            panic!("{setting} is for the binary: spawn() the server rather than start() it");
        }
        let held = (self.dir.clone(), self.state_dir.clone());
        TestServer::start(self.config.clone(), self.clock.clone(), held).await
    }

    /// Starts the server in this process on a manual clock standing at this host's wall time
    /// now, moved by the test alone: the server, and its clock.
    pub async fn start_on_manual_clock(&self) -> (TestServer, ManualClock) {
        let clock = ManualClock::new(SystemClock::new().wall_ms());
        (self.clone().clock(clock.clone()).start().await, clock)
    }

    /// Starts `snowmint serve` and waits until it listens.
    pub fn spawn(&self) -> Process {
        let mut process = Process::listening(self.command(true));
        process.held = Some((self.dir.clone(), self.state_dir.clone()));
        process
    }

    /// Runs `snowmint serve`, expecting it to exit (a start that fails) within
    /// [`EXIT_LIMIT`]: (exit code, stderr). A start that runs instead fails the test.
    pub fn run_to_exit(&self) -> (i32, String) {
        self.run_to_exit_within(EXIT_LIMIT)
    }

    /// [`ServerBuilder::run_to_exit`] within `limit`.
    pub fn run_to_exit_within(&self, limit: Duration) -> (i32, String) {
        let Output { code, stderr, .. } = output_within(self.command(false), limit);
        (code, stderr)
    }

    /// The binary's command line, with JSON logs or the default text ones.
    fn command(&self, json_logs: bool) -> Command {
        if let Some(setting) = self.in_process_only {
            panic!("{setting} is for a server in this process: start() it rather than run the binary");
        }
        let mut command = match self.through.split_first() {
            None => Command::new(binary()),
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(binary());
                command
            }
        };
        for (name, value) in &self.env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command.args(["serve", "--listen", &self.listen[0], "--admin-listen", &self.listen[1]]);
        if json_logs {
            command.args(["--log-format", "json"]);
        }
        command.arg("--state-dir").arg(&self.state_dir).args(&self.args);
        command
    }
}

/// libfaketime's multi-threaded library, from Debian's `faketime`.
pub fn libfaketime() -> PathBuf {
    let candidates = std::fs::read_dir("/usr/lib")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .chain([PathBuf::from("/usr/lib/faketime/libfaketimeMT.so.1")]);
    for candidate in candidates {
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("libfaketimeMT.so.1 not found (Debian package faketime; scripts/check installs it)");
}

/// The default configuration of a server in this process, with its state in `state_dir`.
fn config(state_dir: &Path) -> ServeConfig {
    let layout = Layout::default_snowmint();
    ServeConfig {
        slot_source: SlotSource::Standalone(StandaloneConfig {
            state_dir: state_dir.to_path_buf(),
            slots: vec![5],
            accept_missing_state: false,
        }),
        layout,
        reservation_window: Duration::from_secs(3),
        max_batch: 65_536,
        max_outstanding_ids: 4_194_304,
        max_clock_back: Duration::from_millis(5),
        max_clock_drift: Duration::from_secs(10),
        forward_jump_confirm: Duration::from_secs(10),
        max_wait: Duration::from_secs(1),
        fair_quantum: snowmint::minter::FAIR_QUANTUM,
        forward_jump_threshold: Duration::from_secs(1),
        max_fleet_skew: Duration::from_secs(30),
        shutdown_grace: Duration::from_secs(5),
        history_retention: Some(snowmint::history::DEFAULT_RETENTION),
        history_max_segments: 100_000,
        clock_memory_dir: Some(state_dir.to_path_buf()),
        tls: None,
        limits: snowmint::server::Limits::default(),
        opaque: None,
        sequences: snowmint::server::SequencesSettings::default(),
        tenants: None,
    }
}

/// A server running in this process; told to stop when dropped.
pub struct TestServer {
    pub grpc: SocketAddr,
    pub admin: SocketAddr,
    pub shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<Result<(), snowmint::server::ServeError>>>,
    /// The builder's temp dir, held while the server runs, and the state dir.
    held: (Arc<TempDir>, PathBuf),
}

impl TestServer {
    /// Starts a server with `config` and `clock` on loopback ports the OS picks, holding
    /// `held`.
    async fn start(config: ServeConfig, clock: Arc<dyn Clock>, held: (Arc<TempDir>, PathBuf)) -> TestServer {
        let grpc_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc = grpc_listener.local_addr().unwrap();
        let admin = admin_listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(snowmint::server::run(config, grpc_listener, admin_listener, clock, shutdown.clone()));
        TestServer { grpc, admin, shutdown, task: Some(task), held }
    }

    pub async fn client(&self) -> IdServiceClient<Channel> {
        client(self.grpc).await
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// The temp dir of the builder that started the server, for the test's own files.
    pub fn dir(&self) -> &Path {
        self.held.0.path()
    }

    /// Where the server keeps its state.
    pub fn state_path(&self) -> &Path {
        &self.held.1
    }

    /// Stops the server gracefully and waits for it to finish.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        let task = self.task.take().expect("the server runs");
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("server stops within 10 s")
            .expect("server task")
            .expect("server ran cleanly");
    }

    /// The body of an admin endpoint, with its status code.
    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        http_get(self.admin, path).await
    }

    /// The value of a metric line (name with labels, exactly as exported).
    pub async fn metric(&self, series: &str) -> f64 {
        metric_value(&self.admin_get("/metrics").await.1, series)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The snowmint binary, run as a child process with JSON logs. Killed when dropped, or when
/// the test binary dies.
pub struct Process {
    pub child: Child,
    pub grpc: SocketAddr,
    pub admin: SocketAddr,
    /// Log lines after the listening line, as they arrive.
    pub logs: mpsc::Receiver<String>,
    /// Log lines before the listening line, not yet drained.
    early: Vec<String>,
    /// The builder's temp dir and the state dir (none for a container). Last, so the child
    /// is killed before the dir can be removed.
    held: Option<(Arc<TempDir>, PathBuf)>,
}

impl Process {
    /// Starts `command`, a complete `snowmint serve --log-format json ...` (or a container
    /// that runs one), and waits until it listens.
    pub fn listening(mut command: Command) -> Process {
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = Child::spawn(command).expect("spawn snowmint");
        let stderr = child.stderr().unwrap();
        let (tx, logs) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        loop {
            let line = match logs.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => line,
                Err(_) => {
                    child.kill();
                    panic!("snowmint did not start; output:\n{}", seen.join("\n"));
                }
            };
            if let Ok(json) = serde_json::from_str::<serde_json::Value>(&line)
                && let (Some(grpc), Some(admin)) = (json["grpc_addr"].as_str(), json["admin_addr"].as_str())
            {
                return Process {
                    grpc: grpc.parse().unwrap(),
                    admin: admin.parse().unwrap(),
                    child,
                    logs,
                    early: seen,
                    held: None,
                };
            }
            seen.push(line);
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Where the process keeps its state.
    pub fn state_path(&self) -> &Path {
        &self.held.as_ref().expect("a process started by a builder").1
    }

    /// Sends the signal named as `kill -s` takes it (`TERM`, `KILL`, `STOP`, ...).
    pub fn signal(&self, signal: &str) {
        self.child.signal(child::signal_number(signal));
    }

    /// Waits for the process to exit, at most `limit`; its exit status. Async, so the
    /// test's own clients keep running meanwhile.
    pub async fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait() {
                return status;
            }
            if start.elapsed() >= limit {
                let logs = self.drain_logs().join("\n");
                panic!("process did not exit within {limit:?}; what it logged since it listened:\n{logs}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Log lines received so far and not drained before, those before the listening line
    /// included.
    pub fn drain_logs(&mut self) -> Vec<String> {
        let mut lines = std::mem::take(&mut self.early);
        lines.extend(self.logs.try_iter());
        lines
    }

    /// Waits, at most `limit`, for a log line containing `needle`; the lines drained up to
    /// and with it.
    pub async fn wait_for_log(&mut self, needle: &str, limit: Duration) -> Vec<String> {
        let start = std::time::Instant::now();
        let mut lines = self.drain_logs();
        while !lines.iter().any(|line| line.contains(needle)) {
            assert!(start.elapsed() < limit, "no log line with {needle:?} within {limit:?}:\n{}", lines.join("\n"));
            tokio::time::sleep(Duration::from_millis(20)).await;
            lines.extend(self.drain_logs());
        }
        lines
    }

    pub async fn client(&self) -> IdServiceClient<Channel> {
        client(self.grpc).await
    }

    /// The status code of `/readyz`.
    pub async fn admin_ready(&self) -> u16 {
        http_get(self.admin, "/readyz").await.0
    }

    /// The value of a metric line (name with labels, exactly as exported).
    pub async fn metric(&self, series: &str) -> f64 {
        metric_value(&http_get(self.admin, "/metrics").await.1, series)
    }
}
