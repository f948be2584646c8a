//! Hosts on a network of their own: one network namespace per host (`ip netns`, Debian's
//! iproute2), each with one veth into a bridge that lives in a namespace of its own too, and
//! its own address in 10.77.0.0/24. Nothing is added to the namespace the tests run in:
//! every address stays inside the namespaces made here. Faults are nftables rules (Debian's
//! nftables) in one host's namespace, so they touch that host's traffic only.
//!
//! The namespaces carry this process's pid in their names. They are removed when the
//! [`Net`] is dropped, also when its test panics; a test binary killed outright leaves them
//! behind, and the next [`Net::new`] removes those whose process is gone.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Why this machine cannot run the namespace tests, if it cannot: creating a namespace
/// needs CAP_SYS_ADMIN (root, outside a container that drops it), and the faults need `nft`.
pub fn unavailable() -> Option<String> {
    let probe = format!("smprobe{}", std::process::id());
    let created = run_quiet(&["ip", "netns", "add", &probe]);
    if let Err(e) = created {
        return Some(format!("`ip netns add` is not permitted here ({e})"));
    }
    let _ = run_quiet(&["ip", "netns", "del", &probe]);
    if let Err(e) = run_quiet(&["nft", "--version"]) {
        return Some(format!("nft (Debian's nftables) is missing ({e})"));
    }
    None
}

fn run_quiet(args: &[&str]) -> Result<(), String> {
    let output = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("{}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim()))
    }
}

fn run(args: &[&str]) {
    run_quiet(args).unwrap_or_else(|e| panic!("{e}"));
}

/// A host on the network.
#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    /// Its network namespace.
    pub ns: String,
    /// Its address (10.77.0.x).
    pub ip: String,
}

impl Host {
    /// `program` to run in this host's namespace (`ip netns exec`, which execs it: the
    /// child's pid is the program's own).
    pub fn command(&self, program: impl Into<PathBuf>) -> Command {
        let [ip, args @ ..] = self.launcher();
        let mut command = Command::new(ip);
        command.args(args).arg(program.into());
        command
    }

    /// What runs a program in this host's namespace, the program and its arguments after it
    /// (as [`super::ServerBuilder::through`] takes it).
    pub fn launcher(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.ns]
    }

    /// An nftables command in this host's namespace (`nft` and its arguments).
    fn nft(&self, rule: &str) {
        run(&["ip", "netns", "exec", &self.ns, "nft", rule]);
    }

    /// Drops every packet between this host and `peers`, both ways.
    pub fn cut_from(&self, peers: &[&Host]) {
        self.ensure_table();
        for peer in peers {
            self.nft(&format!("add rule inet fault input ip saddr {} drop", peer.ip));
            self.nft(&format!("add rule inet fault output ip daddr {} drop", peer.ip));
        }
    }

    /// Drops what `peers` send this host; what it sends them still arrives.
    pub fn deaf_to(&self, peers: &[&Host]) {
        self.ensure_table();
        for peer in peers {
            self.nft(&format!("add rule inet fault input ip saddr {} drop", peer.ip));
        }
    }

    /// Removes every fault rule of this host.
    pub fn heal(&self) {
        let _ = run_quiet(&["ip", "netns", "exec", &self.ns, "nft", "delete table inet fault"]);
    }

    fn ensure_table(&self) {
        self.nft("add table inet fault");
        self.nft("add chain inet fault input { type filter hook input priority 0 ; policy accept ; }");
        self.nft("add chain inet fault output { type filter hook output priority 0 ; policy accept ; }");
    }
}

/// A bridge and its hosts.
pub struct Net {
    prefix: String,
    pub hosts: Vec<Host>,
}

impl Net {
    /// The hosts `names`, each in its own namespace on one bridge, addresses 10.77.0.10 on.
    pub fn new(names: &[&str]) -> Net {
        remove_orphans();
        let prefix = format!("smt{}", std::process::id());
        let mut net = Net { prefix: prefix.clone(), hosts: Vec::new() };
        let bridge_ns = format!("{prefix}-br");
        run(&["ip", "netns", "add", &bridge_ns]);
        run(&["ip", "-n", &bridge_ns, "link", "add", "br0", "type", "bridge"]);
        run(&["ip", "-n", &bridge_ns, "link", "set", "br0", "up"]);
        for (i, name) in names.iter().enumerate() {
            let ns = format!("{prefix}-{name}");
            let ip = format!("10.77.0.{}", 10 + i);
            run(&["ip", "netns", "add", &ns]);
            // Both ends are made in the namespaces: nothing appears in the tests' own.
            let port = format!("p{i}");
            run(&["ip", "-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns", &bridge_ns]);
            run(&["ip", "-n", &bridge_ns, "link", "set", &port, "master", "br0", "up"]);
            run(&["ip", "-n", &ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
            net.hosts.push(Host { name: name.to_string(), ns, ip });
        }
        net
    }

    pub fn host(&self, name: &str) -> &Host {
        self.hosts.iter().find(|h| h.name == name).unwrap_or_else(|| panic!("no host {name}"))
    }

    /// Removes every fault rule on every host.
    pub fn heal_all(&self) {
        for host in &self.hosts {
            host.heal();
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        remove_with_prefix(&format!("{}-", self.prefix));
    }
}

/// Every namespace whose name starts with `prefix`.
fn remove_with_prefix(prefix: &str) {
    let Ok(output) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if name.starts_with(prefix) {
            let _ = run_quiet(&["ip", "netns", "del", name]);
        }
    }
}

/// Namespaces left by test processes that no longer run.
fn remove_orphans() {
    let Ok(output) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name.strip_prefix("smt").and_then(|rest| rest.split('-').next()) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run_quiet(&["ip", "netns", "del", name]);
        }
    }
}

/// Runs `f` on a thread of its own inside `host`'s namespace, on a single-threaded tokio
/// runtime: every socket it opens belongs to that namespace (a socket's namespace is its
/// creating thread's). For clients that must reach hosts on the network.
pub fn spawn_in<F, Fut, T>(host: &Host, f: F) -> std::thread::JoinHandle<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
    T: Send + 'static,
{
    let path = format!("/var/run/netns/{}", host.ns);
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        use std::os::fd::AsRawFd;
        // SAFETY: setns only switches this thread's network namespace to the one `file` names.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(f())
    })
}
