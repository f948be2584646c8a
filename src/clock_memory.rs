//! What the clock filter knew of this host's wall clock, kept across restarts.
//!
//! The forward-jump filter ([`crate::clock_filter`]) judges each reading against what it
//! accepted before. A new process has accepted nothing, so it would take a jumped clock as
//! its first reading and follow it at once: a restart in the middle of a jump would drag the
//! minting time and the reservations ahead. So the filter's reference,
//! the highest offset of the wall clock over the host's boot-time clock, is written to a small
//! file in the state directory, and a later process of the same boot (the kernel's
//! `boot_id`) starts from it. After a reboot the boot-time clock starts again and the offset
//! means nothing: the file is ignored (etcd mode still has the fleet's clock check).
//!
//! The file is a hint, never a condition for minting: one that is missing, unreadable or of
//! another boot leaves the filter to start afresh, as it always did. It is replaced whole
//! (temp file and rename) and not fsynced: what it guards against is a process that dies, and
//! the page cache survives that; a power cut reboots the host, which ignores the file anyway.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The file's name in the state directory.
pub const FILE_NAME: &str = "clock.json";

/// What is kept: the boot it belongs to, and the offset on that boot's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Saved {
    boot_id: String,
    /// The highest offset of the wall clock (Unix µs) over the host's boot-time clock (µs
    /// since boot) that the filter accepted.
    wall_over_boot_us: i64,
}

/// The clock filter's memory in one state directory, for one boot of the host.
#[derive(Debug, Clone)]
pub struct ClockMemory {
    path: PathBuf,
    boot_id: String,
    /// Where the filter's boot time starts on the host's boot-time clock.
    origin: Duration,
}

impl ClockMemory {
    /// The memory in `dir` for this boot, given the filter's origin on the host's boot-time
    /// clock; `None` where the host says nothing of its boot (not Linux).
    pub fn for_this_boot(dir: &Path, origin: Duration) -> Option<ClockMemory> {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        Some(ClockMemory::new(dir, boot_id.trim(), origin))
    }

    /// The memory in `dir` for the boot `boot_id` (tests name their own boots).
    pub fn new(dir: &Path, boot_id: &str, origin: Duration) -> ClockMemory {
        ClockMemory { path: dir.join(FILE_NAME), boot_id: boot_id.to_string(), origin }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn origin_us(&self) -> i64 {
        self.origin.as_micros().min(i64::MAX as u128) as i64
    }

    /// The offset an earlier process of this boot left, on this filter's boot time: `None`
    /// when there is none, it is of another boot, or it cannot be read.
    pub fn load(&self) -> Option<i64> {
        let bytes = std::fs::read(&self.path).ok()?;
        let saved: Saved = serde_json::from_slice(&bytes).ok()?;
        // The filter's boot time is the host's less the origin: its offsets are larger by it.
        (saved.boot_id == self.boot_id).then(|| saved.wall_over_boot_us.saturating_add(self.origin_us()))
    }

    /// Keeps `high_offset_us` (on this filter's boot time) for a later process of this boot.
    pub fn save(&self, high_offset_us: i64) -> std::io::Result<()> {
        let saved =
            Saved { boot_id: self.boot_id.clone(), wall_over_boot_us: high_offset_us.saturating_sub(self.origin_us()) };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let temp = self.path.with_extension(format!("json.{}.tmp", std::process::id()));
        std::fs::write(&temp, serde_json::to_vec(&saved).expect("memory serializes"))?;
        std::fs::rename(&temp, &self.path).inspect_err(|_| {
            let _ = std::fs::remove_file(&temp);
        })
    }
}

/// How far the filter's reference must move before it is written again: well inside the jump
/// threshold, so that a later process judges jumps against nearly the same reference, and
/// far above a slewing clock's drift, so that the file is not rewritten every second.
pub const SAVE_AFTER_US: i64 = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_process_of_the_same_boot_gets_the_offset_on_its_own_boot_time() {
        let dir = tempfile::tempdir().unwrap();
        let first = ClockMemory::new(dir.path(), "boot-a", Duration::from_secs(100));
        assert_eq!(first.load(), None, "nothing saved yet");
        first.save(1_700_000_000_000_000).unwrap();
        // The next process started 50 s later on the host's boot clock: its own boot time
        // reads 50 s less for the same instant, so the offset is 50 s more.
        let second = ClockMemory::new(dir.path(), "boot-a", Duration::from_secs(150));
        assert_eq!(second.load(), Some(1_700_000_000_000_000 + 50_000_000));
        // After a reboot the offset means nothing.
        let rebooted = ClockMemory::new(dir.path(), "boot-b", Duration::from_secs(5));
        assert_eq!(rebooted.load(), None);
    }

    #[test]
    fn an_unreadable_file_is_no_memory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), b"{not json").unwrap();
        assert_eq!(ClockMemory::new(dir.path(), "boot-a", Duration::ZERO).load(), None);
        // Saving replaces it, and leaves no temp file behind.
        let memory = ClockMemory::new(dir.path(), "boot-a", Duration::ZERO);
        memory.save(42).unwrap();
        assert_eq!(memory.load(), Some(42));
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
    }

    #[test]
    fn a_missing_directory_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let memory = ClockMemory::new(&dir.path().join("state"), "boot-a", Duration::ZERO);
        memory.save(7).unwrap();
        assert_eq!(memory.load(), Some(7));
    }
}
