//! A real PostgreSQL (Debian's `postgresql`) for tests: a fresh cluster in a temp dir,
//! listening on a free port of 127.0.0.1 only (its unix socket in the temp dir), stopped and
//! removed when dropped.
//!
//! PostgreSQL refuses to run as root, and tests run as root: then initdb and the server run
//! as the `postgres` system user the package creates (or `nobody`), which owns the data dir.
//! The user is switched by the [`Command`] itself, before the parent-death signal is set
//! (see [`super::child`]): a `setpriv` or `runuser` in between would change the credentials
//! after it is set, which clears it, and the server would outlive a killed test binary.
//! Every wait has a limit.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::child::{Child, Output, output_within};
use super::etcd::free_port;

/// How long initdb may take, and the server to accept connections.
const INITDB_LIMIT: Duration = Duration::from_secs(60);
const READY_LIMIT: Duration = Duration::from_secs(30);
/// How long a fast shutdown may take before the server is killed.
const STOP_LIMIT: Duration = Duration::from_secs(10);
/// How many ports are tried before the test fails (another process may take the free port
/// between its pick and the server's bind).
const START_ATTEMPTS: usize = 3;

/// The database superuser the cluster is made with; clients connect as it, trusted.
pub const USER: &str = "postgres";

/// A PostgreSQL server of the test's own. Stopped (then killed, if it does not stop in
/// time) when dropped, and its dir removed.
pub struct Postgres {
    pub port: u16,
    child: Child,
    /// The server's own log, shown when it fails.
    log: PathBuf,
    /// Last, so the server is gone before its dir is removed.
    dir: TempDir,
}

/// The newest PostgreSQL's `bin` dir under /usr/lib/postgresql (`<version>/bin` with
/// `initdb` and `postgres`).
pub fn bin_dir() -> PathBuf {
    let versions = std::fs::read_dir("/usr/lib/postgresql").into_iter().flatten().filter_map(|e| e.ok());
    versions
        .filter_map(|e| {
            let version: f64 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file()).then_some((version, bin))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, bin)| bin)
        .unwrap_or_else(|| {
            panic!(
                "no PostgreSQL server found (/usr/lib/postgresql/<version>/bin/initdb and postgres): \
                 install the Debian package postgresql (scripts/check installs it)"
            )
        })
}

/// The (uid, gid) to run PostgreSQL as: none when this process is not root; otherwise the
/// `postgres` user's, or `nobody`'s.
fn unprivileged_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    let ids = |name: &str| {
        passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            if fields.len() < 4 || fields[0] != name {
                return None;
            }
            Some((fields[2].parse().ok()?, fields[3].parse().ok()?))
        })
    };
    Some(
        ids("postgres")
            .or_else(|| ids("nobody"))
            .expect("a user postgres or nobody in /etc/passwd to run PostgreSQL as"),
    )
}

/// A command running `program` as `user` (when set), in `cwd`.
fn command_as(program: &Path, user: Option<(u32, u32)>, cwd: &Path) -> Command {
    let mut command = Command::new(program);
    if let Some((uid, gid)) = user {
        // std drops the supplementary groups too, as it switches from root.
        command.uid(uid).gid(gid);
    }
    command.current_dir(cwd).env_remove("PGDATA").env("LC_ALL", "C").stdin(Stdio::null());
    command
}

/// A dir owned by `user` (when set), readable by it alone.
fn private_dir(path: &Path, user: Option<(u32, u32)>) {
    std::fs::create_dir(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    }
}

impl Postgres {
    /// Makes a cluster in a fresh temp dir, starts its server on a free loopback port, and
    /// waits until it accepts connections.
    pub async fn start() -> Postgres {
        let (dir, user) = tokio::task::spawn_blocking(initdb).await.expect("initdb");
        for attempt in 1..=START_ATTEMPTS {
            let port = free_port();
            let (mut child, log) = spawn_server(dir.path(), user, port);
            let why = match wait_ready(&mut child, port).await {
                Ok(()) => return Postgres { port, child, log, dir },
                Err(why) => why,
            };
            stop(&mut child);
            let log = read_log(&log);
            let taken = log.contains("could not bind") || log.contains("Address already in use");
            if !taken || attempt == START_ATTEMPTS {
                panic!("PostgreSQL did not start on 127.0.0.1:{port}: {why}; its log:\n{log}");
            }
            // The port was taken meanwhile: the same cluster on another one.
        }
        unreachable!()
    }

    /// A connection string for this server's database `postgres`, over TCP.
    pub fn url(&self) -> String {
        url(self.port)
    }

    /// A client connected to the database `postgres`, as [`USER`].
    pub async fn client(&self) -> tokio_postgres::Client {
        match tokio::time::timeout(Duration::from_secs(15), try_client(self.port)).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => panic!("connect to PostgreSQL on port {}: {e}; its log:\n{}", self.port, self.log_text()),
            Err(_) => panic!("no connection to PostgreSQL on port {} within 15 s", self.port),
        }
    }

    /// What the server has logged so far.
    pub fn log_text(&self) -> String {
        read_log(&self.log)
    }

    /// The temp dir holding the cluster, removed when this is dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// A connection string for the database `postgres` on 127.0.0.1:`port`.
fn url(port: u16) -> String {
    format!("host=127.0.0.1 port={port} user={USER} dbname=postgres connect_timeout=10")
}

async fn try_client(port: u16) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(&url(port), tokio_postgres::NoTls).await?;
    // Ends when the client is dropped or the server goes away.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Waits until a client of the server `child` on `port` can run a query, at most
/// [`READY_LIMIT`]; why not, otherwise.
async fn wait_ready(child: &mut Child, port: u16) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let attempt = async { try_client(port).await?.simple_query("SELECT 1").await };
        let why = match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "a connection attempt got no answer within 5 s".into(),
        };
        if let Some(status) = child.try_wait() {
            return Err(format!("the server exited ({status}); last error: {why}"));
        }
        if start.elapsed() > READY_LIMIT {
            return Err(format!("not ready within {READY_LIMIT:?}: {why}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops the server `child`: a fast shutdown (SIGINT: sessions ended, shared memory
/// released), at most [`STOP_LIMIT`]; then its process group is killed in any case.
fn stop(child: &mut Child) {
    if child.try_wait().is_none() {
        child.signal(libc::SIGINT);
        child.wait_within(STOP_LIMIT);
    }
    child.kill();
}

fn read_log(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_else(|e| format!("({}: {e})", log.display()))
}

/// A temp dir (traversable by all) holding `data`, a new cluster made by initdb, owned by
/// the user the server will run as; and that user.
fn initdb() -> (TempDir, Option<(u32, u32)>) {
    let bin = bin_dir();
    let user = unprivileged_user();
    let dir = tempfile::Builder::new().prefix("snowmint-pg").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");
    private_dir(&data, user);
    private_dir(&dir.path().join("run"), user);
    let mut command = command_as(&bin.join("initdb"), user, dir.path());
    command.arg("--pgdata").arg(&data).args([
        "--username",
        USER,
        "--auth",
        "trust",
        "--encoding",
        "UTF8",
        "--locale",
        "C",
        "--no-sync",
    ]);
    let Output { code, stdout, stderr } = output_within(command, INITDB_LIMIT);
    assert_eq!(code, 0, "initdb failed:\n{stdout}\n{stderr}");
    (dir, user)
}

/// Starts the server of the cluster in `dir` on 127.0.0.1:`port`, its log in `dir`.
fn spawn_server(dir: &Path, user: Option<(u32, u32)>, port: u16) -> (Child, PathBuf) {
    let bin = bin_dir();
    let log = dir.join(format!("postgres-{port}.log"));
    let log_file = File::create(&log).unwrap();
    let mut command = command_as(&bin.join("postgres"), user, dir);
    command.arg("-D").arg(dir.join("data")).args(["-p", &port.to_string()]);
    let settings = [
        ("listen_addresses", "127.0.0.1".to_string()),
        ("unix_socket_directories", dir.join("run").display().to_string()),
        // A throwaway cluster: nothing needs to survive a crash.
        ("fsync", "off".into()),
        ("synchronous_commit", "off".into()),
        ("full_page_writes", "off".into()),
        ("max_connections", "20".into()),
        // Dynamic shared memory as files in the data dir, not in /dev/shm: nothing outside
        // the temp dir is left by a server killed with its test.
        ("dynamic_shared_memory_type", "mmap".into()),
        ("logging_collector", "off".into()),
    ];
    for (name, value) in settings {
        command.arg("-c").arg(format!("{name}={value}"));
    }
    command.stdout(log_file.try_clone().unwrap()).stderr(log_file);
    let child = Child::spawn(command).unwrap_or_else(|e| panic!("start {}: {e}", bin.join("postgres").display()));
    (child, log)
}
