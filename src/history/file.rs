//! Slot history in standalone mode: one JSON file per record under
//! `<state dir>/history/<slot>/<name>.json`, each replaced whole (written beside it, then
//! renamed) so a crash leaves the old record or the new one, never half of one.

use crate::layout::Slot;
use std::path::{Path, PathBuf};

use super::{Book, Entry, HistoryError, Record};

/// The history of one state dir.
#[derive(Debug, Clone)]
pub struct FileBook {
    dir: PathBuf,
}

impl FileBook {
    /// The history kept in `state_dir`.
    pub fn new(state_dir: &Path) -> FileBook {
        FileBook { dir: state_dir.join("history") }
    }

    fn path(&self, record: &Record) -> PathBuf {
        self.dir.join(record.slot.to_string()).join(format!("{}.json", record.name()))
    }

    fn write(&self, record: &Record) -> Result<PathBuf, HistoryError> {
        let path = self.path(record);
        let unavailable = |e: std::io::Error| HistoryError::Unavailable(format!("{}: {e}", path.display()));
        std::fs::create_dir_all(path.parent().expect("a record's path has a parent")).map_err(unavailable)?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(record).expect("records serialize")).map_err(unavailable)?;
        std::fs::rename(&tmp, &path).map_err(unavailable)?;
        Ok(path)
    }

    fn read(path: &Path) -> Result<Record, HistoryError> {
        let location = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| HistoryError::Unavailable(format!("{location}: {e}")))?;
        serde_json::from_slice(&bytes).map_err(|e| HistoryError::Corrupt { location, reason: e.to_string() })
    }

    /// The record files of `slot` (every slot when `None`), sorted by slot and name.
    fn files(&self, slot: Option<Slot>) -> Result<Vec<PathBuf>, HistoryError> {
        let unavailable = |dir: &Path, e: std::io::Error| HistoryError::Unavailable(format!("{}: {e}", dir.display()));
        let slot_dirs = match slot {
            Some(slot) => vec![self.dir.join(slot.to_string())],
            None => match std::fs::read_dir(&self.dir) {
                Ok(dirs) => dirs.filter_map(Result::ok).map(|d| d.path()).filter(|p| p.is_dir()).collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(unavailable(&self.dir, e)),
            },
        };
        let mut files = Vec::new();
        for dir in slot_dirs {
            let Some(slot) = dir.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse::<Slot>().ok()) else {
                continue;
            };
            match std::fs::read_dir(&dir) {
                Ok(entries) => files.extend(
                    entries
                        .filter_map(Result::ok)
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "json"))
                        .map(|p| (slot, p)),
                ),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(unavailable(&dir, e)),
            }
        }
        files.sort();
        Ok(files.into_iter().map(|(_, p)| p).collect())
    }
}

#[tonic::async_trait]
impl Book for FileBook {
    async fn append(&self, record: &Record) -> Result<String, HistoryError> {
        Ok(self.write(record)?.display().to_string())
    }

    async fn close(&self, record: &Record, closed: &Record) -> Result<bool, HistoryError> {
        // One process holds a state dir (its lock): no one else writes here meanwhile.
        let current = FileBook::read(&self.path(record))?;
        if !current.is_open() {
            return Ok(false);
        }
        self.write(closed)?;
        Ok(true)
    }

    async fn list(&self, slot: Option<Slot>) -> Result<(Vec<Entry>, Vec<HistoryError>), HistoryError> {
        let mut entries = Vec::new();
        let mut unreadable = Vec::new();
        for path in self.files(slot)? {
            match FileBook::read(&path) {
                Ok(record) => entries.push(Entry { location: path.display().to_string(), record }),
                Err(e) => unreadable.push(e),
            }
        }
        Ok((entries, unreadable))
    }

    async fn prune(&self, slot: Slot, before_ms: i64, limit: usize) -> Result<usize, HistoryError> {
        let mut pruned = 0;
        for path in self.files(Some(slot))?.into_iter().take(limit) {
            if let Ok(record) = FileBook::read(&path)
                && record.closed_at_ms.is_some_and(|closed| closed < before_ms)
            {
                std::fs::remove_file(&path)
                    .map_err(|e| HistoryError::Unavailable(format!("{}: {e}", path.display())))?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }

    fn describe(&self) -> String {
        self.dir.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{ClosedBy, sample};

    #[tokio::test]
    async fn records_are_appended_closed_once_listed_and_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let book = FileBook::new(dir.path());
        assert!(book.list(None).await.unwrap().0.is_empty());
        let first = sample(3, 10, 1_000, 0, None);
        let second = sample(3, 11, 5_000, 2_000, None);
        let other = sample(4, 12, 1_500, 0, None);
        for r in [&second, &first, &other] {
            book.append(r).await.unwrap();
        }
        assert!(book.close(&first, &first.closed(2_000, 4_000, ClosedBy::Successor)).await.unwrap());
        // Closed already: a second close (the holder's own, late) leaves it as it is.
        assert!(!book.close(&first, &first.closed(1_900, 4_500, ClosedBy::Release)).await.unwrap());
        let (entries, unreadable) = book.list(None).await.unwrap();
        assert!(unreadable.is_empty());
        let pids: Vec<u32> = entries.iter().map(|e| e.record.holder.pid).collect();
        assert_eq!(pids, [10, 11, 12]);
        assert_eq!(entries[0].record.last_reservation_ms, Some(2_000));
        assert_eq!(entries[0].record.closed_by, Some(ClosedBy::Successor));
        assert_eq!(book.list(Some(4)).await.unwrap().0.len(), 1);

        // Only closed records older than the cut are pruned; open ones stay.
        assert_eq!(book.prune(3, 4_000, 16).await.unwrap(), 0);
        assert_eq!(book.prune(3, 4_001, 16).await.unwrap(), 1);
        assert_eq!(book.list(Some(3)).await.unwrap().0.len(), 1);

        // An unreadable record is reported beside the others, not fatal.
        std::fs::write(dir.path().join("history/4/0000000000001-1-1.json"), "{").unwrap();
        let (entries, unreadable) = book.list(Some(4)).await.unwrap();
        assert_eq!((entries.len(), unreadable.len()), (1, 1));
    }
}
