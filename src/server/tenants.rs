//! The policy and token files (`--policy-file`, `--token-file`): read at the start, where
//! anything wrong stops it, then read again every second and at SIGHUP. A change that reads
//! whole is put in force at once, for calls on connections already open too (a token removed
//! from the file stops working within a second); one that does not is logged with its file
//! and line, counted, and changes nothing: the rules in force stay. Each fault is logged and
//! counted once (again at SIGHUP), not every second while it lasts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, RESULT_FAILED, RESULT_OK};
use crate::rpc::gate::Gate;
use crate::tenant::{Policy, Rules, TokenFile};

/// How often the files are read again for a change.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// Where the rules come from, and the signal to read them again now (SIGHUP).
#[derive(Debug, Clone)]
pub struct TenantFiles {
    pub policy: PathBuf,
    /// Without one, no tenant may name a token.
    pub tokens: Option<PathBuf>,
    pub reload: Arc<Notify>,
}

/// The files' texts, as last read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Texts {
    policy: String,
    tokens: Option<String>,
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

impl TenantFiles {
    fn texts(&self) -> Result<Texts, String> {
        Ok(Texts { policy: read(&self.policy)?, tokens: self.tokens.as_deref().map(read).transpose()? })
    }

    /// The rules the texts make, or what is wrong, naming the file and line.
    fn rules(&self, texts: &Texts) -> Result<Rules, String> {
        let policy = Policy::parse(&texts.policy).map_err(|e| format!("{}: {e}", self.policy.display()))?;
        let tokens = match (&self.tokens, &texts.tokens) {
            (Some(path), Some(text)) => TokenFile::parse(text).map_err(|e| format!("{}: {e}", path.display()))?,
            _ => TokenFile::default(),
        };
        Rules::new(policy, tokens).map_err(|e| format!("{}: {e}", self.policy.display()))
    }

    /// Reads the files at the start: the gate, and what it was made from.
    pub fn load(&self, metrics: &Metrics) -> Result<(Arc<Gate>, Reloader), String> {
        let texts = self.texts()?;
        let rules = self.rules(&texts)?;
        let tenants = rules.policy().tenants().len();
        let tokens = texts.tokens.as_deref().map_or(0, |t| TokenFile::parse(t).map_or(0, |f| f.len()));
        tracing::info!(policy = %self.policy.display(), tenants, tokens, "tenants' policy in force");
        let gate = Gate::new(rules, metrics.clone());
        let reloader =
            Reloader { files: self.clone(), gate: gate.clone(), texts, unreadable: None, metrics: metrics.clone() };
        Ok((gate, reloader))
    }
}

/// Reads the files again while the server runs.
pub struct Reloader {
    files: TenantFiles,
    gate: Arc<Gate>,
    texts: Texts,
    /// Why the files could not be read at the last try, if they could not.
    unreadable: Option<String>,
    metrics: Metrics,
}

impl Reloader {
    /// Runs until `shutdown`: every [`RELOAD_EVERY`] a change is put in force, and at once on
    /// `reload` (SIGHUP), whether the texts changed or not.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut every = tokio::time::interval(RELOAD_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let asked = tokio::select! {
                () = shutdown.cancelled() => return,
                _ = every.tick() => false,
                () = self.files.reload.notified() => true,
            };
            self.reload(asked);
        }
    }

    fn reload(&mut self, asked: bool) {
        let texts = match self.files.texts() {
            Ok(texts) => {
                self.unreadable = None;
                texts
            }
            Err(error) => {
                // Logged once per fault (and at each SIGHUP), not every second it lasts.
                if asked || self.unreadable.as_ref() != Some(&error) {
                    self.failed(&error);
                }
                self.unreadable = Some(error);
                return;
            }
        };
        if texts == self.texts && !asked {
            return;
        }
        match self.files.rules(&texts) {
            Ok(rules) => {
                let tenants = rules.policy().tenants().len();
                self.gate.replace(rules);
                self.texts = texts;
                self.metrics.tenant_reloads.with_label_values(&[RESULT_OK]).inc();
                tracing::info!(tenants, on_signal = asked, "tenants' policy and tokens reloaded");
            }
            Err(error) => {
                // Logged once per change: the texts are kept, so the same fault is not
                // logged every second.
                self.texts = texts;
                self.failed(&error);
            }
        }
    }

    fn failed(&self, error: &str) {
        self.metrics.tenant_reloads.with_label_values(&[RESULT_FAILED]).inc();
        tracing::error!(%error, "the tenants' files were not reloaded: the rules in force stay");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_file_is_counted_once_per_fault_and_at_each_signal() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, "[tenant.a]\ncertificates = [\"CN=a\"]\nallow = [\"ids\"]\n").unwrap();
        let files = TenantFiles { policy: policy.clone(), tokens: None, reload: Arc::default() };
        let metrics = Metrics::new();
        let (_gate, mut reloader) = files.load(&metrics).unwrap();
        let failed = || metrics.tenant_reloads.with_label_values(&[RESULT_FAILED]).get();

        std::fs::remove_file(&policy).unwrap();
        for _ in 0..5 {
            reloader.reload(false);
        }
        assert_eq!(failed(), 1, "one fault, counted once");
        reloader.reload(true);
        assert_eq!(failed(), 2, "a SIGHUP says it again");
        std::fs::write(&policy, "[tenant.a]\ncertificates = [\"CN=b\"]\nallow = [\"ids\"]\n").unwrap();
        reloader.reload(false);
        assert_eq!(metrics.tenant_reloads.with_label_values(&[RESULT_OK]).get(), 1);
        std::fs::remove_file(&policy).unwrap();
        reloader.reload(false);
        assert_eq!(failed(), 3, "a fault after a good read is a new one");
    }
}
