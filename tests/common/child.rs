//! Child processes that cannot outlive the test that started them, nor hang it.
//!
//! Every child (snowmint, etcd, Prometheus) starts in its own process group, with the kernel
//! asked to SIGKILL it when its parent dies (`PR_SET_PDEATHSIG`), and its group is killed
//! when its [`Child`] is dropped: a test that panics, or a test binary that is itself killed,
//! leaves nothing running. Every wait for a child has a limit, so a child that should exit
//! but runs on fails its test instead of hanging it.
//!
//! The kernel sends the parent-death signal when the *thread* that forked the child ends,
//! not the process. Tests start children from short-lived threads (the test harness runs
//! each test on its own, and some tests start processes in parallel threads), so every
//! child is forked by one thread that lives as long as the test binary.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

type SpawnRequest = (Command, mpsc::SyncSender<std::io::Result<std::process::Child>>);

/// The one thread that forks every child, for as long as the test binary runs.
fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("child-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the thread that forks children");
        tx
    })
}

/// A child process in its own process group; its group is killed when it is dropped, and
/// the kernel kills it if this test binary dies first.
pub struct Child {
    inner: std::process::Child,
    /// Set once the child has been reaped: its pid, and so its group id, may be reused.
    status: Option<ExitStatus>,
}

impl Child {
    /// Starts `command` in its own process group, to be killed with this test binary.
    pub fn spawn(mut command: Command) -> std::io::Result<Child> {
        let parent = std::process::id() as libc::pid_t;
        command.process_group(0);
        // SAFETY: the closure runs between fork and exec, and calls only prctl, getppid and
        // errno reads, which are async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before the request took effect.
                if libc::getppid() != parent {
                    return Err(std::io::Error::other("the test binary is gone"));
                }
                Ok(())
            });
        }
        let (reply, spawned) = mpsc::sync_channel(1);
        spawner().send((command, reply)).expect("the spawner thread runs");
        let inner = spawned.recv().expect("the spawner thread answers")?;
        Ok(Child { inner, status: None })
    }

    pub fn id(&self) -> u32 {
        self.inner.id()
    }

    pub fn stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.inner.stdout.take()
    }

    pub fn stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.inner.stderr.take()
    }

    pub fn stdin(&mut self) -> Option<std::process::ChildStdin> {
        self.inner.stdin.take()
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) to the child, unless it was reaped already.
    pub fn signal(&self, signal: libc::c_int) {
        if self.status.is_none() {
            // SAFETY: kill has no memory effects; the pid is our unreaped child's.
            let sent = unsafe { libc::kill(self.inner.id() as libc::pid_t, signal) };
            assert_eq!(sent, 0, "kill({}, {signal}): {}", self.inner.id(), std::io::Error::last_os_error());
        }
    }

    /// The exit status, if the child has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.inner.try_wait().expect("wait for a child");
        }
        self.status
    }

    /// Waits for the child to exit, at most `limit`; `None` if it still runs.
    pub fn wait_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the child's whole process group and reaps the child.
    pub fn kill(&mut self) {
        if self.status.is_none() {
            // SAFETY: as in `signal`. Until the child is reaped its pid, which is its group's
            // id, cannot be reused, so this reaches only its own group.
            unsafe { libc::kill(-(self.inner.id() as libc::pid_t), libc::SIGKILL) };
            self.status = self.inner.wait().ok();
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a child that ran to completion printed.
#[derive(Debug)]
pub struct Output {
    /// The exit code; -1 when a signal ended it.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `command` to completion, at most `limit`; panics (after killing it) with what it
/// printed if it is still running then.
pub fn output_within(mut command: Command, limit: Duration) -> Output {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let shown = format!("{command:?}");
    let mut child = Child::spawn(command).expect("start a child process");
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = read(Box::new(child.stdout().unwrap()));
    let stderr = read(Box::new(child.stderr().unwrap()));
    let status = child.wait_within(limit);
    // Killed or not, the group is gone after this, and the pipes close.
    child.kill();
    let output = Output { code: -1, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() };
    match status {
        Some(status) => Output { code: status.code().unwrap_or(-1), ..output },
        None => panic!(
            "{shown} was still running after {limit:?}; killed. stdout:\n{}\nstderr:\n{}",
            output.stdout, output.stderr
        ),
    }
}

/// The number of a signal named as `kill -s` takes it (`TERM`, `KILL`, ...).
pub fn signal_number(name: &str) -> libc::c_int {
    match name {
        "TERM" => libc::SIGTERM,
        "KILL" => libc::SIGKILL,
        "INT" => libc::SIGINT,
        "STOP" => libc::SIGSTOP,
        "CONT" => libc::SIGCONT,
        "HUP" => libc::SIGHUP,
        _ => panic!("no signal {name} in the tests' list"),
    }
}
