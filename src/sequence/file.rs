//! Sequences in the state dir (standalone mode): each record in `sequences/<name>.json`
//! with a revision counter (its version), written whole and durably (a temp file, fsync,
//! rename, fsync of the dir) before the write is answered.
//!
//! One process uses a state dir (the slots' lock files see to it), so writes compare under a
//! lock of this process; `snowmint sequence create` from another process only ever adds a
//! file, by a hard link that fails when the name is taken, never overwriting one.

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::record::{Record, check_name};
use super::segments::{Answer, Op};
use super::store::{Created, HeldBy, Listed, SequenceStore};
use crate::store::{SessionId, Version};

/// What a sequence's file holds.
#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    /// Counts the writes: the version a write compares.
    revision: i64,
    record: Record,
}

/// The sequences of one state dir.
pub struct FileSequences {
    dir: PathBuf,
    /// Held across each read-compare-write, so that writes of this process compare in turn.
    lock: Arc<Mutex<()>>,
}

impl FileSequences {
    /// The sequences under `state_dir` (the dir `sequences/` in it is made on the first create).
    pub fn new(state_dir: &Path) -> FileSequences {
        FileSequences { dir: state_dir.join("sequences"), lock: Arc::new(Mutex::new(())) }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// Runs blocking file work off the runtime's threads.
    async fn blocking<T: Send + 'static>(
        work: impl FnOnce() -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        tokio::task::spawn_blocking(work).await.map_err(|e| format!("a sequence file task failed: {e}"))?
    }
}

/// The record in `path`, at its revision; `None` when there is no such file.
fn read(name: &str, path: &Path) -> Result<Option<(Version, Record)>, String> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("sequence file {}: {e}", path.display())),
    };
    let saved: Saved =
        serde_json::from_slice(&bytes).map_err(|e| format!("sequence file {} is corrupt: {e}", path.display()))?;
    let record = Record::decode(name, &serde_json::to_vec(&saved.record).expect("a record serializes"))
        .map_err(|e| format!("sequence file {}: {e}", path.display()))?;
    Ok(Some((Version::At(saved.revision), record)))
}

/// Writes `saved` to a new temp file beside `path`, synced; returns the temp file's path.
fn temp_file(path: &Path, saved: &Saved) -> Result<PathBuf, String> {
    let dir = path.parent().expect("a sequence file has a dir");
    fs::create_dir_all(dir).map_err(|e| format!("sequences dir {}: {e}", dir.display()))?;
    static TEMPS: AtomicU64 = AtomicU64::new(0);
    let temp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().unwrap().to_string_lossy(),
        std::process::id(),
        TEMPS.fetch_add(1, Ordering::Relaxed)
    ));
    let io = |e: std::io::Error| format!("sequence file {}: {e}", temp.display());
    let mut file = File::create(&temp).map_err(io)?;
    file.write_all(&serde_json::to_vec_pretty(saved).expect("a record serializes")).map_err(io)?;
    file.sync_all().map_err(io)?;
    Ok(temp)
}

fn sync_dir(dir: &Path) -> Result<(), String> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| format!("sequences dir {}: {e}", dir.display()))
}

impl SequenceStore for FileSequences {
    /// One process uses a state dir: it holds every ordered sequence, so `holder` adds nothing.
    async fn call(&self, name: &str, op: Op, _holder: Option<SessionId>) -> Answer {
        check_name(name).expect("sequence names are checked before they reach the store");
        let (name, path) = (name.to_string(), self.path(name));
        let _turn = self.lock.clone().lock_owned().await;
        let answer = Self::blocking(move || {
            let current = read(&name, &path)?;
            Ok(match op {
                Op::Read => Answer::Read(current),
                Op::Write { expect, over, record } => match current {
                    Some((version, stored)) if version == expect && stored == over => {
                        let Version::At(revision) = version else { unreachable!("a file's version is a revision") };
                        let temp = temp_file(&path, &Saved { revision: revision + 1, record })?;
                        // Past this point the write may be in place: an error is of unknown outcome.
                        fs::rename(&temp, &path).map_err(|e| format!("sequence file {}: {e}", path.display()))?;
                        sync_dir(path.parent().unwrap())?;
                        Answer::Written(Version::At(revision + 1))
                    }
                    other => Answer::Refused(other),
                },
            })
        })
        .await;
        answer.unwrap_or_else(Answer::Unknown)
    }

    async fn hold(&self, _name: &str, session: SessionId, address: &str) -> Result<HeldBy, String> {
        Ok(HeldBy { session, address: address.to_string() })
    }

    async fn create(&self, name: &str, record: &Record) -> Result<Created, String> {
        check_name(name).map_err(|e| e.to_string())?;
        let (name, path, record) = (name.to_string(), self.path(name), record.clone());
        Self::blocking(move || {
            let temp = temp_file(&path, &Saved { revision: 1, record })?;
            let linked = fs::hard_link(&temp, &path);
            let _ = fs::remove_file(&temp);
            match linked {
                Ok(()) => {
                    sync_dir(path.parent().unwrap())?;
                    Ok(Created::New(Version::At(1)))
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match read(&name, &path)? {
                    Some((_, record)) => Ok(Created::Exists(record)),
                    None => Err(format!("sequence file {} exists and cannot be read", path.display())),
                },
                Err(e) => Err(format!("sequence file {}: {e}", path.display())),
            }
        })
        .await
    }

    async fn list(&self) -> Result<Vec<Listed>, String> {
        let dir = self.dir.clone();
        Self::blocking(move || {
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(format!("sequences dir {}: {e}", dir.display())),
            };
            let mut listed = Vec::new();
            for entry in entries {
                let path = entry.map_err(|e| format!("sequences dir {}: {e}", dir.display()))?.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".json")) else {
                    continue;
                };
                if check_name(name).is_err() {
                    continue;
                }
                if let Some((version, record)) = read(name, &path)? {
                    listed.push(Listed { name: name.to_string(), version, record });
                }
            }
            listed.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(listed)
        })
        .await
    }
}
