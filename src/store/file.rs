//! The file store: static worker IDs, each with its reservation in a local state file.
//!
//! `worker-<id>.json` in the state dir records the layout, the time up to which the worker
//! may have minted, and a revision counter (the [`Version`] conditional writes name). It is
//! written atomically (temp file, fsync, rename, fsync of the dir), and a worker's writes land
//! in the order they were issued: a write whose call timed out goes on in its thread, and is
//! dropped once a later one has begun ([`order`]). A lock file keeps two
//! processes from using one worker's state at once; the lock is held until the session
//! closes. A missing file means a first start, unless the lock file shows that one may have
//! existed ([`FRESH`]); an unreadable or corrupt one stops the start, because resetting it
//! could repeat IDs. The claim never expires: the session has no TTL.
//!
//! What the store decides needs no file, and lives apart so that the simulator runs it too:
//! [`rules`] (the answers that touch no file, the revision each file is known to be at) and
//! [`order`] (which of a file's writes may land). This module does the I/O around them.

pub mod order;
pub mod rules;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::{Outcome, Reply, Request, SlotRead, Store, StoreError, Stored, Version, Write};
use crate::layout::{Layout, Slot, rfc3339_ms};
use order::{Ticket, Tickets, Turn, Turns};
use rules::Revisions;

/// The format version of the state file.
const STATE_VERSION: u32 = 1;

/// What a lock file holds while no state file can have existed beside it: this build writes
/// it into a lock file it creates, and replaces it ([`USED`]) before the first state file is
/// renamed into place, or as soon as a start finds one. Only a lock file holding exactly
/// this lets a missing state file pass for a first start; any other content (an older
/// build's empty lock file, one cut short) means a state file may have existed and is gone.
const FRESH: &[u8] = b"snowmint: no state file written for this worker here yet\n";

/// What a lock file holds once a state file may exist beside it.
const USED: &[u8] = b"snowmint: this worker's state file was written or found here\n";

/// What the state file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedState {
    pub version: u32,
    /// Stored under its first name, `worker_id`, which every state file already written has.
    #[serde(rename = "worker_id")]
    pub slot: Slot,
    pub layout: Layout,
    /// Unix ms up to which this worker may have minted.
    pub reserved_until_ms: i64,
    /// The same, for people reading the file.
    pub reserved_until: String,
    pub saved_at: String,
    /// Counts the writes: the version a conditional write names. Files written before it
    /// existed read as revision 0.
    #[serde(default)]
    pub revision: i64,
}

/// What the writes of one worker share, under its lock.
#[derive(Debug)]
struct Shared {
    /// Whose turn it is to begin, or to rename into place.
    turns: Turns,
    /// The lock file still says [`FRESH`].
    fresh: bool,
}

/// A worker's state file, locked for this process.
#[derive(Debug)]
pub struct StateFile {
    dir: PathBuf,
    path: PathBuf,
    slot: Slot,
    /// Held while the file is in use: the OS drops the lock when the process dies.
    _lock: File,
    /// Hands out each write's place in line ([`Ticket`]), in the order writes are issued.
    tickets: Tickets,
    /// A std mutex, held only while a write creates its temp file or renames it into place,
    /// never across an await.
    shared: Mutex<Shared>,
    /// Tests stall a write at a chosen step with it.
    #[cfg(test)]
    hook: tests::Hook,
}

impl StateFile {
    /// Locks and reads the state of `slot` in `dir` (created if missing). `None` when
    /// there is no state file yet.
    ///
    /// A state file missing from a dir where it may have existed (the lock file is there, and
    /// not [`FRESH`]) is an error unless `accept_missing`: the IDs minted before may not be
    /// covered.
    pub fn open(dir: &Path, slot: Slot, accept_missing: bool) -> Result<(StateFile, Option<SavedState>), StoreError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| StoreError::StateIo { path, source }
        };
        fs::create_dir_all(dir).map_err(|e| unwritable(dir, dir, e))?;
        let lock_path = dir.join(format!("worker-{slot}.lock"));
        let (lock, created) = open_lock(&lock_path).map_err(|e| unwritable(dir, &lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(StoreError::StateLocked {
                    dir: dir.display().to_string(),
                    slot,
                    lock: lock_path.display().to_string(),
                });
            }
            Err(fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }
        // Only the lock's holder writes its content. Killed before this, the lock file stays
        // empty, which reads as used: the old, safe refusal.
        let fresh = if created { mark(&lock, FRESH) } else { is_fresh(&lock) }.map_err(io(&lock_path))?;
        let path = dir.join(format!("worker-{slot}.json"));
        let file = StateFile {
            dir: dir.to_path_buf(),
            path,
            slot,
            _lock: lock,
            tickets: Tickets::default(),
            shared: Mutex::new(Shared { turns: Turns::default(), fresh }),
            #[cfg(test)]
            hook: tests::Hook::default(),
        };
        let saved = file.read();
        if fresh && !matches!(saved, Ok(None)) {
            // A state file is there, readable or not: should it go missing, refuse.
            file.mark_used().map_err(io(&lock_path))?;
        }
        let saved = saved?;
        match (&saved, fresh) {
            (None, false) if !accept_missing => {
                return Err(StoreError::StateMissing { path: file.path.display().to_string(), slot });
            }
            (None, false) => tracing::warn!(
                path = %file.path.display(),
                "state file missing; start accepted deliberately (--accept-missing-state)"
            ),
            (None, true) => {
                tracing::info!(path = %file.path.display(), "no state file: first start for this worker in this state dir")
            }
            (Some(_), _) => {}
        }
        Ok((file, saved))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn corrupt(&self, reason: String) -> StoreError {
        StoreError::StateCorrupt { path: self.path.display().to_string(), reason, slot: self.slot }
    }

    fn read(&self) -> Result<Option<SavedState>, StoreError> {
        let text = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StoreError::StateIo { path: self.path.display().to_string(), source }),
        };
        let saved: SavedState = serde_json::from_slice(&text).map_err(|e| self.corrupt(e.to_string()))?;
        if saved.version != STATE_VERSION {
            return Err(self.corrupt(format!("version {} (this build reads {STATE_VERSION})", saved.version)));
        }
        if saved.slot != self.slot {
            return Err(self.corrupt(format!("it belongs to worker {}", saved.slot)));
        }
        Ok(Some(saved))
    }

    /// The place in line of the next write; take it when the write is issued.
    pub fn ticket(&self) -> Ticket {
        self.tickets.issue()
    }

    /// Writes `state` durably: temp file, fsync, rename over the old file, fsync the dir.
    /// Fails, touching nothing, when a write with a later ticket began first.
    pub fn write(&self, ticket: Ticket, state: &SavedState) -> std::io::Result<()> {
        let result = self.write_steps(ticket, state);
        #[cfg(test)]
        self.hook.at(tests::Step::Returned { ok: result.is_ok() }, state);
        result
    }

    fn write_steps(&self, ticket: Ticket, state: &SavedState) -> std::io::Result<()> {
        #[cfg(test)]
        self.hook.at(tests::Step::Begun, state);
        let tmp = self.dir.join(format!("worker-{}.json.tmp", self.slot));
        let mut file = {
            let _turn = self.turn(ticket, Turn::Begin)?;
            // A new inode for every write: an earlier write still under way (its call timed
            // out, its thread goes on) writes on into its own file, unlinked here, never into
            // this one, which becomes the live state file.
            match fs::remove_file(&tmp) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => File::create_new(&tmp)?,
            }
        };
        #[cfg(test)]
        self.hook.at(tests::Step::TempCreated, state);
        file.write_all(&serde_json::to_vec_pretty(state).expect("state serializes"))?;
        file.sync_all()?;
        drop(file);
        #[cfg(test)]
        self.hook.at(tests::Step::TempSynced, state);
        {
            let mut shared = self.turn(ticket, Turn::Rename)?;
            if shared.fresh {
                // Before a state file can exist, the lock file stops saying there is none.
                self.mark_used()?;
                shared.fresh = false;
            }
            fs::rename(&tmp, &self.path)?;
        }
        // Invariant 6: the new state is durable only once the directory entry is too.
        File::open(&self.dir)?.sync_all()
    }

    /// Takes `ticket`'s turn to begin, or to rename, under the lock, by the rule of
    /// [`Turns::take`]: the state file only ever receives the latest write to have begun. A
    /// write that finds a later one begun is dropped, and it fails: its caller, if still
    /// waiting, learns that it did not land.
    fn turn(&self, ticket: Ticket, turn: Turn) -> std::io::Result<std::sync::MutexGuard<'_, Shared>> {
        // Plain values, each changed in one step: a panic elsewhere cannot leave them torn.
        let mut shared = self.shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        shared.turns.take(ticket, turn).map_err(|order::Superseded| {
            std::io::Error::other(format!(
                "dropped: a later write of worker {} began while this one was under way",
                self.slot
            ))
        })?;
        Ok(shared)
    }

    /// Records in the lock file that a state file may exist, durably.
    fn mark_used(&self) -> std::io::Result<()> {
        mark(&self._lock, USED).map(|_| ())
    }
}

/// The error of the first write into the state dir `dir` (at `path`): a dir this process may
/// not write says who this process is and who owns the dir, one on a read-only file system
/// (a container whose state volume is not mounted) says to mount one; any other error is
/// given as it is.
fn unwritable(dir: &Path, path: &Path, source: std::io::Error) -> StoreError {
    use std::os::unix::fs::MetadataExt as _;
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let why = match source.kind() {
        std::io::ErrorKind::ReadOnlyFilesystem => {
            "it is on a read-only file system: mount a writable volume there".into()
        }
        std::io::ErrorKind::PermissionDenied => {
            // SAFETY: getuid and getgid always succeed and touch no memory.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            // The dir, or the nearest of its parents that exists, when it could not be made.
            let owner = dir.ancestors().find_map(|p| fs::metadata(p).ok().map(|m| (p, m))).map(|(p, m)| {
                let which =
                    if p == dir { "the dir".to_string() } else { format!("{}, where it would be made,", p.display()) };
                format!("{which} is owned by uid {}, gid {}, mode {:o}", m.uid(), m.gid(), m.mode() & 0o7777)
            });
            format!(
                "this process runs as uid {uid}, gid {gid}{}: make it writable by this user (on Kubernetes, with the pod's fsGroup)",
                owner.map(|o| format!(", and {o}")).unwrap_or_default()
            )
        }
        _ => return StoreError::StateIo { path: path.display().to_string(), source },
    };
    StoreError::StateDirUnwritable { dir: dir.display().to_string(), why, source }
}

/// What a state file read as `saved` holds for a store of `layout` (`None`: no file).
fn stored(saved: Option<&SavedState>, layout: &Layout) -> Stored {
    match saved {
        None => Stored::Absent,
        Some(saved) if saved.layout != *layout => {
            Stored::Corrupt { reason: format!("another layout: {}", saved.layout) }
        }
        Some(saved) => Stored::Reserved { until_ms: saved.reserved_until_ms, version: Version::At(saved.revision) },
    }
}

/// Opens the lock file, creating it if missing; whether it was created.
fn open_lock(path: &Path) -> std::io::Result<(File, bool)> {
    match OpenOptions::new().read(true).write(true).create_new(true).open(path) {
        Ok(lock) => Ok((lock, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok((OpenOptions::new().read(true).write(true).open(path)?, false))
        }
        Err(e) => Err(e),
    }
}

/// Whether the lock file says [`FRESH`].
fn is_fresh(mut lock: &File) -> std::io::Result<bool> {
    let mut content = Vec::new();
    lock.seek(SeekFrom::Start(0))?;
    lock.read_to_end(&mut content)?;
    Ok(content == FRESH)
}

/// Replaces the lock file's content with `content`, durably; whether it is now [`FRESH`].
fn mark(mut lock: &File, content: &[u8]) -> std::io::Result<bool> {
    lock.set_len(0)?;
    lock.seek(SeekFrom::Start(0))?;
    lock.write_all(content)?;
    lock.sync_all()?;
    Ok(content == FRESH)
}

/// Settings of standalone mode.
#[derive(Debug, Clone)]
pub struct StandaloneConfig {
    pub state_dir: PathBuf,
    /// The static worker IDs, each with its own state file.
    pub slots: Vec<Slot>,
    /// Start even though the state file of a worker that ran here before is missing.
    pub accept_missing_state: bool,
}

/// The file store: one locked state file per worker ID.
#[derive(Debug)]
pub struct FileStore {
    layout: Layout,
    files: BTreeMap<Slot, Arc<StateFile>>,
    /// The revision each file is known to be at.
    known: Revisions,
}

impl FileStore {
    /// Locks and reads every worker's state file. Fails, touching nothing, when a worker ID
    /// does not fit the layout, a state is locked, missing from a dir it was used in, corrupt,
    /// or records another layout.
    pub fn open(config: &StandaloneConfig, layout: &Layout) -> Result<FileStore, StoreError> {
        let max = layout.max_worker();
        let mut files = BTreeMap::new();
        let mut known = Revisions::default();
        for &slot in &config.slots {
            if u64::from(slot) > max {
                return Err(StoreError::WorkerOutOfRange { slot: slot.into(), worker_bits: layout.worker_bits, max });
            }
            let (file, saved) = StateFile::open(&config.state_dir, slot, config.accept_missing_state)?;
            if let Some(saved) = saved.as_ref().filter(|saved| saved.layout != *layout) {
                return Err(StoreError::LayoutMismatch {
                    saved_at: file.path().display().to_string(),
                    saved: saved.layout.to_string(),
                    configured: layout.to_string(),
                });
            }
            known.read(slot, &stored(saved.as_ref(), layout));
            files.insert(slot, Arc::new(file));
        }
        Ok(FileStore { layout: layout.clone(), files, known })
    }

    /// The path of a worker's state file.
    pub fn path(&self, slot: Slot) -> Option<&Path> {
        self.files.get(&slot).map(|f| f.path())
    }

    async fn read(&mut self, slots: &[Slot]) -> Result<Vec<SlotRead>, String> {
        let mut reads = Vec::new();
        for &slot in slots {
            let Some(file) = self.files.get(&slot).cloned() else {
                return Err(format!("worker {slot} is not one of this instance's"));
            };
            let location = file.path().display().to_string();
            let result = tokio::task::spawn_blocking(move || file.read()).await.map_err(|e| e.to_string())?;
            let stored = match result {
                Ok(saved) => stored(saved.as_ref(), &self.layout),
                Err(StoreError::StateCorrupt { reason, .. }) => Stored::Corrupt { reason },
                Err(e) => return Err(e.to_string()),
            };
            self.known.read(slot, &stored);
            reads.push(SlotRead { slot, location, stored, claim_version: None });
        }
        Ok(reads)
    }

    async fn write(&mut self, writes: Vec<Write>) -> Reply {
        // The compare is all or none: a write names the revision it replaces, and one stale
        // refuses them all before any file is touched. The writes are not: one file after
        // another, each atomic; a failure partway leaves the earlier ones written, and says
        // the outcome is unknown, so the keeper reads every slot of the request again.
        let stale = self.known.stale(&writes);
        if !stale.is_empty() {
            return match self.read(&stale).await {
                Ok(current) => Reply::WriteRefused { not_ours: Vec::new(), current },
                Err(error) => Reply::Failed { error, outcome: Outcome::NotApplied },
            };
        }
        let mut versions = Vec::new();
        for write in writes {
            let Some(file) = self.files.get(&write.slot).cloned() else {
                return Reply::WriteRefused { not_ours: vec![write.slot], current: Vec::new() };
            };
            let revision = self.known.next(write.slot);
            let state = SavedState {
                version: STATE_VERSION,
                slot: write.slot,
                layout: self.layout.clone(),
                reserved_until_ms: write.until_ms,
                reserved_until: rfc3339_ms(write.until_ms),
                saved_at: rfc3339_ms(write.wall_ms),
                revision,
            };
            let path = file.path().display().to_string();
            // The ticket now, in the order of the calls: should this call time out, its
            // write cannot land after the next one.
            let ticket = file.ticket();
            let written = tokio::task::spawn_blocking(move || file.write(ticket, &state)).await;
            let error = match written {
                Ok(Ok(())) => {
                    versions.push((write.slot, self.known.written(write.slot, revision)));
                    continue;
                }
                Ok(Err(e)) => e.to_string(),
                Err(e) => e.to_string(),
            };
            // Part of the write may be on disk: the revision is unknown until read.
            let outcome = Outcome::Unknown;
            self.known.failed(write.slot, outcome);
            return Reply::Failed { error: format!("state file {path}: {error}"), outcome };
        }
        Reply::Written(versions)
    }
}

impl Store for FileStore {
    async fn call(&mut self, request: Request) -> Reply {
        match request {
            Request::ReadReservations { slots, .. } => match self.read(&slots).await {
                Ok(reads) => Reply::reservations(reads),
                Err(error) => Reply::Failed { error, outcome: Outcome::NotApplied },
            },
            Request::WriteReservations { writes, .. } => self.write(writes).await,
            request => {
                if let Request::CloseSession { .. } = request {
                    // Unlock: the next run may take the state at once.
                    self.files.clear();
                }
                let slots: Vec<Slot> = self.files.keys().copied().collect();
                rules::answer(&request, &slots).expect("a request that touches no state file")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Where a write is.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Step {
        /// Called, before it touches anything.
        Begun,
        /// Its temp file exists, empty.
        TempCreated,
        /// Its temp file is written and fsynced, not yet renamed into place.
        TempSynced,
        /// It returns, successfully or not.
        Returned { ok: bool },
    }

    /// A test's code for each step of a write, run on the write's own thread.
    type StepFn = dyn Fn(Step, &SavedState) + Send + Sync;

    /// What a test runs at each step of a write.
    #[derive(Default)]
    pub(super) struct Hook(Option<Arc<StepFn>>);

    impl std::fmt::Debug for Hook {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(if self.0.is_some() { "Hook(set)" } else { "Hook(none)" })
        }
    }

    impl Hook {
        pub(super) fn at(&self, step: Step, state: &SavedState) {
            if let Some(hook) = &self.0 {
                hook(step, state);
            }
        }
    }

    fn state(slot: Slot, reserved_until_ms: i64, revision: i64) -> SavedState {
        SavedState {
            version: STATE_VERSION,
            slot,
            layout: Layout::default_snowmint(),
            reserved_until_ms,
            reserved_until: rfc3339_ms(reserved_until_ms),
            saved_at: rfc3339_ms(reserved_until_ms - 3_000),
            revision,
        }
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let (file, saved) = StateFile::open(dir.path(), 3, false).unwrap();
        assert_eq!(saved, None);
        let state = state(3, 1_800_000_000_000, 4);
        file.write(file.ticket(), &state).unwrap();
        drop(file);
        let (_file, saved) = StateFile::open(dir.path(), 3, false).unwrap();
        assert_eq!(saved, Some(state));
    }

    #[test]
    fn files_without_a_revision_read_as_revision_zero() {
        let dir = tempfile::tempdir().unwrap();
        let mut json = serde_json::to_value(state(3, 1_800_000_000_000, 0)).unwrap();
        json.as_object_mut().unwrap().remove("revision");
        fs::write(dir.path().join("worker-3.json"), json.to_string()).unwrap();
        let (_file, saved) = StateFile::open(dir.path(), 3, false).unwrap();
        assert_eq!(saved.unwrap().revision, 0);
    }

    #[test]
    fn a_state_dir_that_refuses_the_first_write_says_why_in_one_line() {
        use std::io::ErrorKind;
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("worker-0.lock");
        // SAFETY: as in `unwritable`.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let owner = fs::metadata(dir.path()).unwrap();

        let line = unwritable(dir.path(), &lock, ErrorKind::PermissionDenied.into()).to_string();
        for needed in [
            format!("state dir {} cannot be written", dir.path().display()),
            format!("this process runs as uid {uid}, gid {gid}"),
            format!("the dir is owned by uid {}, gid {}, mode {:o}", owner.uid(), owner.gid(), owner.mode() & 0o7777),
            "fsGroup".into(),
        ] {
            assert!(line.contains(&needed), "no {needed:?} in: {line}");
        }
        // A dir that could not be made: the parent it would be made in.
        let missing = dir.path().join("a/b");
        let line = unwritable(&missing, &missing, ErrorKind::PermissionDenied.into()).to_string();
        let needed = format!("{}, where it would be made, is owned by uid {}", dir.path().display(), owner.uid());
        assert!(line.contains(&needed), "no {needed:?} in: {line}");

        let line = unwritable(dir.path(), &lock, ErrorKind::ReadOnlyFilesystem.into()).to_string();
        assert!(line.contains("on a read-only file system: mount a writable volume there"), "{line}");
        // Any other error, as it is.
        let err = unwritable(dir.path(), &lock, ErrorKind::StorageFull.into());
        assert!(matches!(err, StoreError::StateIo { ref path, .. } if path.ends_with("worker-0.lock")), "{err}");
    }

    #[test]
    fn a_second_process_cannot_take_the_same_worker_state() {
        let dir = tempfile::tempdir().unwrap();
        let (_held, _) = StateFile::open(dir.path(), 3, false).unwrap();
        let err = StateFile::open(dir.path(), 3, false).unwrap_err();
        assert!(matches!(err, StoreError::StateLocked { slot: 3, .. }), "{err}");
        // Another worker's state in the same dir is independent.
        StateFile::open(dir.path(), 4, false).unwrap();
    }

    #[test]
    fn a_state_file_missing_from_a_used_dir_stops_the_start_unless_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let (file, _) = StateFile::open(dir.path(), 3, false).unwrap();
        file.write(file.ticket(), &state(3, 1_800_000_000_000, 1)).unwrap();
        drop(file);
        fs::remove_file(dir.path().join("worker-3.json")).unwrap();
        let err = StateFile::open(dir.path(), 3, false).unwrap_err();
        assert!(matches!(err, StoreError::StateMissing { slot: 3, .. }), "{err}");
        assert!(err.to_string().contains("--accept-missing-state"), "{err}");
        let (_, saved) = StateFile::open(dir.path(), 3, true).unwrap();
        assert_eq!(saved, None);
    }

    /// A start that took the lock and died (or failed on another
    /// worker) before its first write left nothing a later start must cover.
    #[test]
    fn a_start_that_wrote_nothing_leaves_a_first_start() {
        let dir = tempfile::tempdir().unwrap();
        let (file, _) = StateFile::open(dir.path(), 3, false).unwrap();
        drop(file);
        assert!(dir.path().join("worker-3.lock").exists());
        let (file, saved) = StateFile::open(dir.path(), 3, false).unwrap();
        assert_eq!(saved, None);
        // Once a write landed, a missing state file is refused.
        file.write(file.ticket(), &state(3, 1_800_000_000_000, 1)).unwrap();
        drop(file);
        fs::remove_file(dir.path().join("worker-3.json")).unwrap();
        let err = StateFile::open(dir.path(), 3, false).unwrap_err();
        assert!(matches!(err, StoreError::StateMissing { slot: 3, .. }), "{err}");
    }

    /// An older build's lock file is empty whether or not it ever wrote: a missing state
    /// file beside it is refused, as before.
    #[test]
    fn an_older_builds_lock_file_still_guards_a_missing_state() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("worker-3.lock"), "").unwrap();
        let err = StateFile::open(dir.path(), 3, false).unwrap_err();
        assert!(matches!(err, StoreError::StateMissing { slot: 3, .. }), "{err}");
    }

    /// A state file found at a start, readable or not, counts as written: should it go
    /// missing later, the start is refused.
    #[test]
    fn a_state_file_found_at_a_start_guards_against_its_loss() {
        for content in [serde_json::to_string(&state(3, 1_800_000_000_000, 4)).unwrap(), "not json".to_string()] {
            let dir = tempfile::tempdir().unwrap();
            fs::write(dir.path().join("worker-3.json"), &content).unwrap();
            drop(StateFile::open(dir.path(), 3, false));
            fs::remove_file(dir.path().join("worker-3.json")).unwrap();
            let err = StateFile::open(dir.path(), 3, false).unwrap_err();
            assert!(matches!(err, StoreError::StateMissing { slot: 3, .. }), "{content}: {err}");
        }
    }

    #[test]
    fn corrupt_or_truncated_state_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker-3.json");
        for content in ["", "{\"version\":1,", "not json", "{\"version\":9}"] {
            fs::write(&path, content).unwrap();
            let err = StateFile::open(dir.path(), 3, false).unwrap_err();
            assert!(matches!(err, StoreError::StateCorrupt { .. }), "{content:?}: {err}");
            assert!(err.to_string().contains("never reset"), "{err}");
        }
    }

    /// A write names the revision it replaces: one naming an older revision is refused and
    /// the file keeps the newer value.
    #[tokio::test]
    async fn a_write_over_a_stale_revision_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config =
            StandaloneConfig { state_dir: dir.path().to_path_buf(), slots: vec![3], accept_missing_state: false };
        let mut store = FileStore::open(&config, &Layout::default_snowmint()).unwrap();
        let write = |until_ms, expect| Write {
            slot: 3,
            until_ms,
            expect: Some(expect),
            wall_ms: until_ms - 3_000,
            idle: false,
            claim_version: None,
        };
        let reply = store
            .call(Request::WriteReservations {
                session: 1,
                writes: vec![write(1_800_000_005_000, Version::Absent)],
                check_claim: true,
            })
            .await;
        assert_eq!(reply, Reply::Written(vec![(3, Version::At(1))]));
        let reply = store
            .call(Request::WriteReservations {
                session: 1,
                writes: vec![write(1_800_000_009_000, Version::At(1))],
                check_claim: true,
            })
            .await;
        assert_eq!(reply, Reply::Written(vec![(3, Version::At(2))]));
        // A late write naming revision 1 must not lower the reservation.
        let reply = store
            .call(Request::WriteReservations {
                session: 1,
                writes: vec![write(1_800_000_006_000, Version::At(1))],
                check_claim: true,
            })
            .await;
        let Reply::WriteRefused { not_ours, current } = reply else { panic!("{reply:?}") };
        assert!(not_ours.is_empty());
        assert_eq!(current[0].stored, Stored::Reserved { until_ms: 1_800_000_009_000, version: Version::At(2) });
    }

    /// A write of several slots: the compare is all or none, the writes one file after
    /// another (as the store's docs say). A failure at the second file leaves the first
    /// written and is reported as of unknown outcome.
    #[tokio::test]
    async fn a_write_of_several_slots_that_fails_partway_says_its_outcome_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let config =
            StandaloneConfig { state_dir: dir.path().to_path_buf(), slots: vec![3, 4], accept_missing_state: false };
        let mut store = FileStore::open(&config, &Layout::default_snowmint()).unwrap();
        let writes = |until_ms, expect: [Version; 2]| Request::WriteReservations {
            session: 1,
            writes: [3, 4]
                .into_iter()
                .zip(expect)
                .map(|(slot, expect)| Write {
                    slot,
                    until_ms,
                    expect: Some(expect),
                    wall_ms: until_ms - 3_000,
                    idle: false,
                    claim_version: None,
                })
                .collect(),
            check_claim: true,
        };
        let reply = store.call(writes(1_800_000_005_000, [Version::Absent; 2])).await;
        assert_eq!(reply, Reply::Written(vec![(3, Version::At(1)), (4, Version::At(1))]));
        let read = |store: &FileStore| store.files.values().map(|f| f.read().unwrap().unwrap()).collect::<Vec<_>>();

        // One stale version refuses both, touching neither file.
        let reply = store.call(writes(1_800_000_007_000, [Version::At(1), Version::Absent])).await;
        assert!(matches!(reply, Reply::WriteRefused { .. }), "{reply:?}");
        assert!(read(&store).iter().all(|s| s.reserved_until_ms == 1_800_000_005_000));

        // Worker 4's file cannot be written (a directory where its temp file goes).
        fs::create_dir(dir.path().join("worker-4.json.tmp")).unwrap();
        let reply = store.call(writes(1_800_000_009_000, [Version::At(1); 2])).await;
        assert!(matches!(reply, Reply::Failed { outcome: Outcome::Unknown, .. }), "{reply:?}");
        let on_disk: Vec<i64> = read(&store).iter().map(|s| s.reserved_until_ms).collect();
        assert_eq!(on_disk, [1_800_000_009_000, 1_800_000_005_000]);
    }

    /// What a stalled write did, as its hook saw it.
    struct Stall {
        reached: mpsc::Receiver<()>,
        release: mpsc::Sender<()>,
        returned: mpsc::Receiver<bool>,
    }

    /// Makes the write of `until_ms` stall at `step` until released.
    fn stall_write(file: &mut StateFile, until_ms: i64, step: Step) -> Stall {
        let (reached_tx, reached) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let (returned_tx, returned) = mpsc::channel();
        let release_rx = Mutex::new(release_rx);
        let (reached_tx, returned_tx) = (Mutex::new(reached_tx), Mutex::new(returned_tx));
        file.hook = Hook(Some(Arc::new(move |at, state: &SavedState| {
            if state.reserved_until_ms != until_ms {
                return;
            }
            if at == step {
                reached_tx.lock().unwrap().send(()).unwrap();
                // Bounded: a test that fails elsewhere must not leave a thread stuck here.
                let _ = release_rx.lock().unwrap().recv_timeout(Duration::from_secs(30));
            }
            if let Step::Returned { ok } = at {
                let _ = returned_tx.lock().unwrap().send(ok);
            }
        })));
        Stall { reached, release, returned }
    }

    /// A write that stalls past the driver's call timeout (its future
    /// dropped, its blocking thread going on) and the next write, which completes: wherever
    /// the first one stalled, the file keeps the newer reservation and the stale write
    /// fails, never lands.
    #[tokio::test]
    async fn a_write_that_stalls_past_its_timeout_never_lands_over_a_newer_one() {
        const LIMIT: Duration = Duration::from_secs(10);
        for step in [Step::Begun, Step::TempCreated, Step::TempSynced] {
            let dir = tempfile::tempdir().unwrap();
            let config =
                StandaloneConfig { state_dir: dir.path().to_path_buf(), slots: vec![3], accept_missing_state: false };
            let mut store = FileStore::open(&config, &Layout::default_snowmint()).unwrap();
            let write = |until_ms, expect| Request::WriteReservations {
                session: 1,
                writes: vec![Write {
                    slot: 3,
                    until_ms,
                    expect: Some(expect),
                    wall_ms: until_ms - 3_000,
                    idle: false,
                    claim_version: None,
                }],
                check_claim: true,
            };
            let reply = store.call(write(1_800_000_005_000, Version::Absent)).await;
            assert_eq!(reply, Reply::Written(vec![(3, Version::At(1))]));

            let stall = stall_write(Arc::get_mut(store.files.get_mut(&3).unwrap()).unwrap(), 1_800_000_007_000, step);
            // As the driver does: the call gets a timeout, after which its future is dropped.
            let timed_out =
                tokio::time::timeout(Duration::from_millis(50), store.call(write(1_800_000_007_000, Version::At(1))))
                    .await;
            assert!(timed_out.is_err(), "{step:?}: the stalled write answered: {timed_out:?}");
            stall.reached.recv_timeout(LIMIT).unwrap();

            // The keeper reads again (the outcome is unknown), then writes the next reservation.
            let read = store.call(Request::ReadReservations { slots: vec![3], linearizable: true }).await;
            let Reply::Reservations { reads, .. } = read else { panic!("{read:?}") };
            let Some(version) = reads[0].stored.version() else { panic!("{reads:?}") };
            let reply = store.call(write(1_800_000_009_000, version)).await;
            let Reply::Written(versions) = reply else { panic!("{step:?}: {reply:?}") };

            stall.release.send(()).unwrap();
            let landed = stall.returned.recv_timeout(LIMIT).unwrap();
            let on_disk = StateFile::read(&store.files[&3]);
            assert!(!landed, "{step:?}: the stale write reported success; the file holds {on_disk:?}");
            let on_disk = on_disk.unwrap().unwrap();
            assert_eq!(
                (on_disk.reserved_until_ms, Version::At(on_disk.revision)),
                (1_800_000_009_000, versions[0].1),
                "{step:?}: the stale write landed over the newer one"
            );
        }
    }
}
