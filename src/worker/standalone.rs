//! Standalone mode: a static worker ID and reservations in a local state file.
//!
//! The state file `worker-<id>.json` in the state dir records the layout and the time up to
//! which this worker may have minted. It is written atomically (temp file, fsync, rename,
//! fsync of the dir) before minting reaches a time, and extended in the background, so the
//! hot path never waits on the disk in steady state. A lock file keeps two processes from
//! using one worker's state at once. A missing file means a first start; an unreadable or
//! corrupt one stops the start, because resetting it could repeat IDs.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, oneshot, watch};

use super::{Grant, Minted, WorkerError, WorkerSource, WorkerState};
use crate::clock::Clock;
use crate::layout::{Layout, rfc3339_ms};
use crate::metrics::Metrics;

/// The format version of the state file.
const STATE_VERSION: u32 = 1;

/// What the state file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedState {
    pub version: u32,
    pub worker_id: u32,
    pub layout: Layout,
    /// Unix ms up to which this worker may have minted.
    pub reserved_until_ms: i64,
    /// The same, for people reading the file.
    pub reserved_until: String,
    pub saved_at: String,
}

/// A worker's state file, locked for this process.
#[derive(Debug)]
pub struct StateFile {
    dir: PathBuf,
    path: PathBuf,
    worker_id: u32,
    /// Held for the life of the process: the OS drops the lock when it dies.
    _lock: File,
}

impl StateFile {
    /// Locks and reads the state of `worker_id` in `dir` (created if missing). `None` when
    /// there is no state file yet.
    ///
    /// A state file missing from a dir this worker used before (its lock file is there) is
    /// an error unless `accept_missing`: the IDs minted before may not be covered.
    pub fn open(
        dir: &Path,
        worker_id: u32,
        accept_missing: bool,
    ) -> Result<(StateFile, Option<SavedState>), WorkerError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| WorkerError::StateIo { path, source }
        };
        fs::create_dir_all(dir).map_err(io(dir))?;
        let lock_path = dir.join(format!("worker-{worker_id}.lock"));
        let used_before = lock_path.exists();
        let lock =
            OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(WorkerError::StateLocked {
                    dir: dir.display().to_string(),
                    worker_id,
                    lock: lock_path.display().to_string(),
                });
            }
            Err(fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }
        let path = dir.join(format!("worker-{worker_id}.json"));
        let file = StateFile { dir: dir.to_path_buf(), path, worker_id, _lock: lock };
        let saved = file.read()?;
        if saved.is_none() && used_before && !accept_missing {
            return Err(WorkerError::StateMissing { path: file.path.display().to_string(), worker_id });
        }
        Ok((file, saved))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<Option<SavedState>, WorkerError> {
        let text = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(WorkerError::StateIo { path: self.path.display().to_string(), source }),
        };
        let corrupt = |reason: String| WorkerError::StateCorrupt {
            path: self.path.display().to_string(),
            reason,
            worker_id: self.worker_id,
        };
        let saved: SavedState = serde_json::from_slice(&text).map_err(|e| corrupt(e.to_string()))?;
        if saved.version != STATE_VERSION {
            return Err(corrupt(format!("version {} (this build reads {STATE_VERSION})", saved.version)));
        }
        if saved.worker_id != self.worker_id {
            return Err(corrupt(format!("it belongs to worker {}", saved.worker_id)));
        }
        Ok(Some(saved))
    }

    /// Writes `state` durably: temp file, fsync, rename over the old file, fsync the dir.
    pub fn write(&self, state: &SavedState) -> std::io::Result<()> {
        let tmp = self.dir.join(format!("worker-{}.json.tmp", self.worker_id));
        let mut file = File::create(&tmp)?;
        file.write_all(&serde_json::to_vec_pretty(state).expect("state serializes"))?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, &self.path)?;
        // Invariant 6: the new state is durable only once the directory entry is too.
        File::open(&self.dir)?.sync_all()
    }
}

/// Settings of standalone mode.
#[derive(Debug, Clone)]
pub struct StandaloneConfig {
    pub state_dir: PathBuf,
    pub worker_id: u32,
    /// How far ahead of the clock reservations reach.
    pub window: Duration,
    pub layout: Layout,
    /// Start even though the state file of a worker that ran here before is missing.
    pub accept_missing_state: bool,
}

fn saved_state(config: &StandaloneConfig, reserved_until_ms: i64, now_ms: i64) -> SavedState {
    SavedState {
        version: STATE_VERSION,
        worker_id: config.worker_id,
        layout: config.layout.clone(),
        reserved_until_ms,
        reserved_until: rfc3339_ms(reserved_until_ms),
        saved_at: rfc3339_ms(now_ms),
    }
}

/// Opens the state file, writes the first reservation and starts the task that extends it.
pub async fn start(
    config: StandaloneConfig,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
) -> Result<WorkerSource, WorkerError> {
    let max = config.layout.max_worker();
    if u64::from(config.worker_id) > max {
        return Err(WorkerError::WorkerOutOfRange {
            worker_id: config.worker_id.into(),
            worker_bits: config.layout.worker_bits,
            max,
        });
    }
    let (file, saved) = StateFile::open(&config.state_dir, config.worker_id, config.accept_missing_state)?;
    let floor_ms = match &saved {
        Some(saved) if saved.layout != config.layout => {
            return Err(WorkerError::LayoutMismatch {
                saved_at: file.path().display().to_string(),
                saved: saved.layout.to_string(),
                configured: config.layout.to_string(),
            });
        }
        Some(saved) => Some(saved.reserved_until_ms),
        None if config.accept_missing_state => {
            tracing::warn!(path = %file.path().display(), "state file missing; start accepted deliberately (--accept-missing-state): minting follows the clock, with no saved reservation to stay above");
            None
        }
        None => {
            tracing::warn!(path = %file.path().display(), "no state file: first start for this worker in this state dir");
            None
        }
    };
    let window_ms = config.window.as_millis() as i64;
    let now = clock.wall_ms();
    let reserved_ms = floor_ms.unwrap_or(now).max(now) + window_ms;
    let file = Arc::new(file);
    write_blocking(&file, saved_state(&config, reserved_ms, now))
        .await
        .map_err(|source| WorkerError::StateIo { path: file.path().display().to_string(), source })?;
    metrics.reservation_writes.with_label_values(&["ok"]).inc();
    metrics.worker_id.set(config.worker_id.into());
    metrics.lease_valid.set(1);
    metrics.reservation_headroom_seconds.set((reserved_ms - now) as f64 / 1000.0);
    tracing::info!(
        worker_id = config.worker_id,
        state_file = %file.path().display(),
        floor = floor_ms.map(rfc3339_ms),
        reserved_until = %rfc3339_ms(reserved_ms),
        "standalone worker ready"
    );

    let grant = Grant { worker_id: config.worker_id, generation: 1, floor_ms, reserved_ms, lease_deadline: None };
    let (state_tx, state) = watch::channel(WorkerState::Held(grant));
    let extend_now = Arc::new(Notify::new());
    let (finish, finish_rx) = oneshot::channel();
    let task =
        tokio::spawn(extend_loop(config, clock, metrics, file, state_tx, extend_now.clone(), finish_rx, floor_ms));
    Ok(WorkerSource { state, extend_now, finish, task })
}

async fn write_blocking(file: &Arc<StateFile>, state: SavedState) -> std::io::Result<()> {
    let file = file.clone();
    tokio::task::spawn_blocking(move || file.write(&state)).await.expect("state write task panicked")
}

/// Extends the reservation every third of the window (or at once when the minter asks),
/// and writes the final one when the server stops.
#[allow(clippy::too_many_arguments)]
async fn extend_loop(
    config: StandaloneConfig,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    file: Arc<StateFile>,
    state_tx: watch::Sender<WorkerState>,
    extend_now: Arc<Notify>,
    mut finish: oneshot::Receiver<Minted>,
    floor_ms: Option<i64>,
) {
    let window_ms = config.window.as_millis() as i64;
    let period = config.window / 3;
    let reserved = |state: &watch::Sender<WorkerState>| match &*state.borrow() {
        WorkerState::Held(grant) => grant.reserved_ms,
        WorkerState::Unheld { .. } => i64::MIN,
    };
    let mut failing = false;
    loop {
        tokio::select! {
            minted = &mut finish => {
                // The minter has stopped: nothing past its last tick was minted, so the
                // reservation can shrink to that, and never below the inherited floor. If
                // what it minted is unknown, the saved reservation stays.
                let Ok(Minted::UpTo(last)) = minted else {
                    tracing::warn!("the minter did not report what it minted; the saved reservation stays");
                    break;
                };
                let Some(final_ms) = last.max(floor_ms) else { break };
                let now = clock.wall_ms();
                match write_blocking(&file, saved_state(&config, final_ms, now)).await {
                    Ok(()) => tracing::info!(reserved_until = %rfc3339_ms(final_ms), "final reservation saved"),
                    Err(e) => tracing::error!(error = %e, path = %file.path().display(), "could not save the final reservation; the saved one still covers every ID minted"),
                }
                break;
            }
            _ = tokio::time::sleep(period) => {}
            _ = extend_now.notified() => {}
        }
        let now = clock.wall_ms();
        let current = reserved(&state_tx);
        let target = now + window_ms;
        if target - current >= period.as_millis() as i64 {
            match write_blocking(&file, saved_state(&config, target, now)).await {
                Ok(()) => {
                    metrics.reservation_writes.with_label_values(&["ok"]).inc();
                    state_tx.send_modify(|state| {
                        if let WorkerState::Held(grant) = state {
                            grant.reserved_ms = grant.reserved_ms.max(target);
                        }
                    });
                    if failing {
                        tracing::info!(path = %file.path().display(), "reservation writes work again");
                        failing = false;
                    }
                }
                Err(e) => {
                    metrics.reservation_writes.with_label_values(&["failed"]).inc();
                    if !failing {
                        tracing::error!(error = %e, path = %file.path().display(), "reservation write failed; minting stops when the current reservation runs out");
                        failing = true;
                    }
                }
            }
        }
        metrics.reservation_headroom_seconds.set((reserved(&state_tx) - clock.wall_ms()) as f64 / 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> StandaloneConfig {
        StandaloneConfig {
            state_dir: dir.to_path_buf(),
            worker_id: 3,
            window: Duration::from_secs(3),
            layout: Layout::default_snowmint(),
            accept_missing_state: false,
        }
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let (file, saved) = StateFile::open(dir.path(), 3, false).unwrap();
        assert_eq!(saved, None);
        let state = saved_state(&config(dir.path()), 1_800_000_000_000, 1_799_999_997_000);
        file.write(&state).unwrap();
        drop(file);
        let (_file, saved) = StateFile::open(dir.path(), 3, false).unwrap();
        assert_eq!(saved, Some(state));
    }

    #[test]
    fn a_second_process_cannot_take_the_same_worker_state() {
        let dir = tempfile::tempdir().unwrap();
        let (_held, _) = StateFile::open(dir.path(), 3, false).unwrap();
        let err = StateFile::open(dir.path(), 3, false).unwrap_err();
        assert!(matches!(err, WorkerError::StateLocked { worker_id: 3, .. }), "{err}");
        // Another worker's state in the same dir is independent.
        StateFile::open(dir.path(), 4, false).unwrap();
    }

    #[test]
    fn a_state_file_missing_from_a_used_dir_stops_the_start_unless_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let (file, _) = StateFile::open(dir.path(), 3, false).unwrap();
        file.write(&saved_state(&config(dir.path()), 1_800_000_000_000, 1_799_999_997_000)).unwrap();
        drop(file);
        fs::remove_file(dir.path().join("worker-3.json")).unwrap();
        let err = StateFile::open(dir.path(), 3, false).unwrap_err();
        assert!(matches!(err, WorkerError::StateMissing { worker_id: 3, .. }), "{err}");
        assert!(err.to_string().contains("--accept-missing-state"), "{err}");
        let (_, saved) = StateFile::open(dir.path(), 3, true).unwrap();
        assert_eq!(saved, None);
    }

    /// The final reservation shrinks to what the minter reports, and stays when what it
    /// minted is unknown (a failed minter), so it always covers every ID issued.
    #[tokio::test]
    async fn the_final_reservation_shrinks_only_to_what_was_reported() {
        use crate::clock::ManualClock;
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_800_000_000_000);
        let read = |dir: &Path| -> i64 {
            let saved: SavedState = serde_json::from_slice(&fs::read(dir.join("worker-3.json")).unwrap()).unwrap();
            saved.reserved_until_ms
        };
        let source = start(config(dir.path()), Arc::new(clock.clone()), Metrics::new()).await.unwrap();
        assert_eq!(read(dir.path()), 1_800_000_003_000);
        source.finish(Minted::UpTo(Some(1_800_000_000_500))).await;
        assert_eq!(read(dir.path()), 1_800_000_000_500);

        // The next run reserves past that floor; a failed minter leaves the reservation whole.
        let source = start(config(dir.path()), Arc::new(clock.clone()), Metrics::new()).await.unwrap();
        assert_eq!(read(dir.path()), 1_800_000_003_500);
        source.finish(Minted::Unknown).await;
        assert_eq!(read(dir.path()), 1_800_000_003_500, "an unknown mint shrank the reservation");

        // Never below the floor a previous run left, even when this run minted nothing.
        let source = start(config(dir.path()), Arc::new(clock.clone()), Metrics::new()).await.unwrap();
        source.finish(Minted::UpTo(None)).await;
        assert_eq!(read(dir.path()), 1_800_000_003_500);
    }

    #[test]
    fn corrupt_or_truncated_state_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker-3.json");
        for content in ["", "{\"version\":1,", "not json", "{\"version\":9}"] {
            fs::write(&path, content).unwrap();
            let err = StateFile::open(dir.path(), 3, false).unwrap_err();
            assert!(matches!(err, WorkerError::StateCorrupt { .. }), "{content:?}: {err}");
            assert!(err.to_string().contains("never reset"), "{err}");
        }
    }
}
