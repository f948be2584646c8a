//! A real etcd (Debian's `etcd-server`) for tests: one node or a cluster of several members
//! on free loopback ports, each with a temp data dir; members can be killed, paused and
//! resumed. Every process is killed when the cluster is dropped, also when its start fails
//! part-way, and when the test binary dies.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::child::{Child, signal_number};

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// How many times a cluster start is made before its test fails.
const START_ATTEMPTS: usize = 3;

/// The etcd binary: `ETCD_BIN`, or `etcd` on the PATH.
fn etcd_binary() -> String {
    std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into())
}

pub struct Member {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    data_dir: PathBuf,
    /// etcd's own error output, appended across restarts: shown when the member fails.
    log: PathBuf,
    child: Option<Child>,
}

pub struct EtcdCluster {
    pub members: Vec<Member>,
    initial_cluster: String,
    /// Client TLS: (CA, server certificate) when clients must speak TLS with certificates.
    tls: Option<(PathBuf, super::tls::CertFiles)>,
    /// More flags for every member (`--quota-backend-bytes`, ...).
    args: Vec<String>,
    _dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `n` members and waits until the cluster answers.
    pub async fn start(n: usize) -> EtcdCluster {
        EtcdCluster::start_with(n, None).await
    }

    /// Like [`EtcdCluster::start`]; with `tls` (CA, server certificate) clients must connect
    /// over https with a certificate the CA signed.
    pub async fn start_with(n: usize, tls: Option<(PathBuf, super::tls::CertFiles)>) -> EtcdCluster {
        EtcdCluster::start_members(n, tls, |_| etcd_binary()).await
    }

    /// Starts `n` members with more etcd flags (`--quota-backend-bytes 4194304`), and waits
    /// until the cluster answers.
    pub async fn start_args(n: usize, args: &[&str]) -> EtcdCluster {
        EtcdCluster::start_all(n, None, |_| etcd_binary(), args).await
    }

    /// Starts `n` members, member `i` from the binary `binary(i)`, and waits until the
    /// cluster answers. Each member belongs to the cluster from the moment it is started, so
    /// a start that fails part-way (a member that cannot be started, a cluster that never
    /// becomes healthy) kills the members already running as it unwinds.
    pub async fn start_members(
        n: usize,
        tls: Option<(PathBuf, super::tls::CertFiles)>,
        binary: impl Fn(usize) -> String,
    ) -> EtcdCluster {
        EtcdCluster::start_all(n, tls, binary, &[]).await
    }

    async fn start_all(
        n: usize,
        tls: Option<(PathBuf, super::tls::CertFiles)>,
        binary: impl Fn(usize) -> String,
        args: &[&str],
    ) -> EtcdCluster {
        // A port found free can be taken by a parallel test before etcd binds it, and then
        // the member exits at once; such a start is made again on fresh ports and a fresh
        // data dir, a bounded number of times.
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            let mut cluster = EtcdCluster::new(n, tls.clone(), args);
            for i in 0..n {
                let child = cluster.spawn(&cluster.members[i], &binary(i));
                cluster.members[i].child = Some(child);
            }
            match cluster.healthy_within(Duration::from_secs(30)).await {
                Ok(()) => return cluster,
                Err(reason) => failures.push(format!("attempt {attempt}: {reason}")),
            }
            // Dropping the cluster kills the members of the failed attempt.
        }
        panic!("etcd cluster of {n} did not start:\n{}", failures.join("\n"));
    }

    /// `n` members on free ports with their data dirs in a new temp dir; none started yet.
    fn new(n: usize, tls: Option<(PathBuf, super::tls::CertFiles)>, args: &[&str]) -> EtcdCluster {
        let dir = tempfile::tempdir().unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_url: format!("{scheme}://127.0.0.1:{}", free_port()),
                peer_url: format!("http://127.0.0.1:{}", free_port()),
                data_dir: dir.path().join(format!("m{i}")),
                log: dir.path().join(format!("m{i}.log")),
                child: None,
            })
            .collect();
        let initial_cluster =
            members.iter().map(|m| format!("{}={}", m.name, m.peer_url)).collect::<Vec<_>>().join(",");
        let args = args.iter().map(|a| a.to_string()).collect();
        EtcdCluster { members, initial_cluster, tls, args, _dir: dir }
    }

    fn spawn(&self, member: &Member, binary: &str) -> Child {
        let mut command = Command::new(binary);
        if let Some((ca, server)) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&server.cert)
                .arg("--key-file")
                .arg(&server.key)
                .arg("--trusted-ca-file")
                .arg(ca)
                .arg("--client-cert-auth");
        }
        command
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(&member.data_dir)
            .args(["--listen-client-urls", &member.client_url, "--advertise-client-urls", &member.client_url])
            .args(["--listen-peer-urls", &member.peer_url, "--initial-advertise-peer-urls", &member.peer_url])
            .args(["--initial-cluster", &self.initial_cluster, "--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "snowmint-test"])
            // Fast elections, so a lost leader is replaced within about a second.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--log-level", "error", "--logger", "zap"])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(&member.log).unwrap());
        Child::spawn(command)
            .unwrap_or_else(|e| panic!("start {binary} (Debian package etcd-server; scripts/check installs it): {e}"))
    }

    /// All client URLs, comma-separated, as `--etcd-endpoints` takes them.
    pub fn endpoints(&self) -> String {
        self.members.iter().map(|m| m.client_url.as_str()).collect::<Vec<_>>().join(",")
    }

    /// Connect options for tests' own clients, with a client certificate under TLS.
    fn options(&self, timeout: Duration) -> etcd_client::ConnectOptions {
        let options = etcd_client::ConnectOptions::new().with_timeout(timeout).with_connect_timeout(timeout);
        match &self.tls {
            None => options,
            Some((ca, server)) => options.with_tls(
                etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(std::fs::read(ca).unwrap()))
                    .identity(etcd_client::Identity::from_pem(
                        std::fs::read(&server.cert).unwrap(),
                        std::fs::read(&server.key).unwrap(),
                    )),
            ),
        }
    }

    /// A client to the live members.
    pub async fn client(&self) -> etcd_client::Client {
        let live: Vec<&str> =
            self.members.iter().filter(|m| m.child.is_some()).map(|m| m.client_url.as_str()).collect();
        etcd_client::Client::connect(live, Some(self.options(Duration::from_secs(2)))).await.expect("etcd client")
    }

    /// Waits until every live member reports a leader.
    pub async fn wait_healthy(&mut self, limit: Duration) {
        if let Err(reason) = self.healthy_within(limit).await {
            panic!("{reason}");
        }
    }

    /// Waits until every live member reports a leader, at most `limit`; the reason, with
    /// the member's own error output, when one does not or exits.
    async fn healthy_within(&mut self, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        for i in 0..self.members.len() {
            while let Some(exited) = self.members[i].child.as_mut().map(|child| child.try_wait().is_some()) {
                let member = &self.members[i];
                let ok = async {
                    let options = self.options(Duration::from_millis(500));
                    let mut client = etcd_client::Client::connect([&member.client_url], Some(options)).await.ok()?;
                    let status = client.status().await.ok()?;
                    (status.leader() != 0).then_some(())
                }
                .await;
                if ok.is_some() {
                    break;
                }
                let failed = if exited {
                    Some("exited".to_string())
                } else {
                    (start.elapsed() >= limit).then(|| format!("not healthy within {limit:?}"))
                };
                if let Some(failed) = failed {
                    let log = std::fs::read_to_string(&member.log).unwrap_or_default();
                    let lines: Vec<&str> = log.lines().collect();
                    let tail = lines[lines.len().saturating_sub(10)..].join("\n");
                    return Err(format!("etcd member {} {failed}; its last lines:\n{tail}", member.name));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// The index of the current leader.
    pub async fn leader(&self) -> usize {
        for (i, member) in self.members.iter().enumerate().filter(|(_, m)| m.child.is_some()) {
            let options = self.options(Duration::from_secs(1));
            let Ok(mut client) = etcd_client::Client::connect([&member.client_url], Some(options)).await else {
                continue;
            };
            if let Ok(status) = client.status().await
                && status.leader() == status.header().map(|h| h.member_id()).unwrap_or(0)
            {
                return i;
            }
        }
        panic!("no leader found");
    }

    /// kill -9 of member `i`.
    pub fn kill(&mut self, i: usize) {
        // Dropping the child kills it and reaps it.
        self.members[i].child = None;
    }

    /// Starts a killed member again, on its data dir.
    pub fn restart(&mut self, i: usize) {
        if self.members[i].child.is_none() {
            let child = self.spawn(&self.members[i], &etcd_binary());
            self.members[i].child = Some(child);
        }
    }

    /// Saves a snapshot of the cluster's state to `path` (as `etcdctl snapshot save` does).
    pub async fn snapshot(&self, path: &std::path::Path) {
        let mut client = self.client().await;
        let mut stream = client.snapshot().await.expect("etcd snapshot");
        let mut bytes = Vec::new();
        while let Some(part) = stream.message().await.expect("etcd snapshot stream") {
            bytes.extend_from_slice(part.blob());
        }
        assert!(!bytes.is_empty(), "an empty snapshot");
        std::fs::write(path, bytes).unwrap();
    }

    /// Restores a one-member cluster from `snapshot`, as an operator does: the member is
    /// stopped, its data dir made anew from the snapshot (`etcdctl snapshot restore`, from
    /// Debian's `etcd-client`), and the member started again on it, on the same ports.
    pub async fn restore(&mut self, snapshot: &std::path::Path) {
        assert_eq!(self.members.len(), 1, "restore is for one-member clusters");
        self.kill(0);
        let member = &self.members[0];
        std::fs::remove_dir_all(&member.data_dir).unwrap();
        let output = Command::new(std::env::var("ETCDCTL_BIN").unwrap_or_else(|_| "etcdctl".into()))
            .env("ETCDCTL_API", "3")
            .args(["snapshot", "restore"])
            .arg(snapshot)
            .arg("--data-dir")
            .arg(&member.data_dir)
            .args(["--name", &member.name, "--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", "snowmint-test", "--initial-advertise-peer-urls", &member.peer_url])
            .output()
            .unwrap_or_else(|e| panic!("etcdctl (Debian package etcd-client; scripts/check installs it): {e}"));
        assert!(output.status.success(), "etcdctl snapshot restore: {}", String::from_utf8_lossy(&output.stderr));
        self.restart(0);
        self.wait_healthy(Duration::from_secs(30)).await;
    }

    fn signal(&self, i: usize, signal: &str) {
        if let Some(child) = &self.members[i].child {
            child.signal(signal_number(signal));
        }
    }

    /// SIGSTOP to every member.
    pub fn pause_all(&self) {
        (0..self.members.len()).for_each(|i| self.signal(i, "STOP"));
    }

    /// SIGCONT to every member.
    pub fn resume_all(&self) {
        (0..self.members.len()).for_each(|i| self.signal(i, "CONT"));
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        // A paused member is killed as well: SIGKILL needs no SIGCONT.
        for member in &mut self.members {
            member.child = None;
        }
    }
}

/// The value at `key`, if any.
pub async fn get(client: &mut etcd_client::Client, key: &str) -> Option<Vec<u8>> {
    client.get(key, None).await.unwrap().kvs().first().map(|kv| kv.value().to_vec())
}
