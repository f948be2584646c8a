//! Slot history in standalone mode: one JSON file per record under
//! `<state dir>/history/<slot>/<name>.json`, each replaced whole (written beside it, then
//! renamed) so a crash leaves the old record or the new one, never half of one.
//!
//! Sequences' segment records are files too, under `<state dir>/history/sequences/<name>/`;
//! the slots' listing reads only the directories named by a slot number, so it never sees
//! them.

use crate::layout::Slot;
use std::path::{Path, PathBuf};

use super::segment::{SegmentEntry, SegmentRecord, name_start};
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

    /// Where the segment records of `sequence` (of every sequence: `None`) are.
    fn sequences_dir(&self, sequence: Option<&str>) -> PathBuf {
        let all = self.dir.join("sequences");
        sequence.map_or_else(|| all.clone(), |name| all.join(name))
    }

    fn segment_path(&self, record: &SegmentRecord) -> PathBuf {
        self.sequences_dir(Some(&record.sequence)).join(format!("{}.json", record.name()))
    }

    fn write(&self, record: &Record) -> Result<PathBuf, HistoryError> {
        let path = self.path(record);
        FileBook::write_json(&path, record)?;
        Ok(path)
    }

    /// Writes `value` whole at `path`: beside it first, then renamed over it.
    fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), HistoryError> {
        let unavailable = |e: std::io::Error| HistoryError::Unavailable(format!("{}: {e}", path.display()));
        std::fs::create_dir_all(path.parent().expect("a record's path has a parent")).map_err(unavailable)?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(value).expect("records serialize")).map_err(unavailable)?;
        std::fs::rename(&tmp, path).map_err(unavailable)
    }

    fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, HistoryError> {
        let location = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| HistoryError::Unavailable(format!("{location}: {e}")))?;
        serde_json::from_slice(&bytes).map_err(|e| HistoryError::Corrupt { location, reason: e.to_string() })
    }

    /// The `.json` files in `dir`, sorted by name; none when it does not exist.
    fn json_files(dir: &Path) -> Result<Vec<PathBuf>, HistoryError> {
        let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(HistoryError::Unavailable(format!("{}: {e}", dir.display()))),
        };
        files.sort();
        Ok(files)
    }

    /// The segment record files of `sequence` (every sequence when `None`), by sequence and
    /// name.
    fn segment_files(&self, sequence: Option<&str>) -> Result<Vec<PathBuf>, HistoryError> {
        let dirs = match sequence {
            Some(_) => vec![self.sequences_dir(sequence)],
            None => {
                let all = self.sequences_dir(None);
                let mut dirs: Vec<PathBuf> = match std::fs::read_dir(&all) {
                    Ok(dirs) => dirs.filter_map(Result::ok).map(|d| d.path()).filter(|p| p.is_dir()).collect(),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                    Err(e) => return Err(HistoryError::Unavailable(format!("{}: {e}", all.display()))),
                };
                dirs.sort();
                dirs
            }
        };
        let mut files = Vec::new();
        for dir in dirs {
            files.extend(FileBook::json_files(&dir)?);
        }
        Ok(files)
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
            files.extend(FileBook::json_files(&dir)?.into_iter().map(|p| (slot, p)));
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
        let current: Record = FileBook::read(&self.path(record))?;
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
            if let Ok(record) = FileBook::read::<Record>(&path)
                && record.closed_at_ms.is_some_and(|closed| closed < before_ms)
            {
                std::fs::remove_file(&path)
                    .map_err(|e| HistoryError::Unavailable(format!("{}: {e}", path.display())))?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }

    async fn write_segment(&self, record: &SegmentRecord) -> Result<String, HistoryError> {
        let path = self.segment_path(record);
        FileBook::write_json(&path, record)?;
        Ok(path.display().to_string())
    }

    async fn list_segments(
        &self,
        sequence: Option<&str>,
    ) -> Result<(Vec<SegmentEntry>, Vec<HistoryError>), HistoryError> {
        let mut entries = Vec::new();
        let mut unreadable = Vec::new();
        for path in self.segment_files(sequence)? {
            match FileBook::read(&path) {
                Ok(record) => entries.push(SegmentEntry { location: path.display().to_string(), record }),
                Err(e) => unreadable.push(e),
            }
        }
        Ok((entries, unreadable))
    }

    async fn segments_at(
        &self,
        sequence: &str,
        value: u64,
        limit: usize,
    ) -> Result<(Vec<SegmentEntry>, Vec<HistoryError>), HistoryError> {
        let end = name_start(value.saturating_add(1));
        let files = self.segment_files(Some(sequence))?;
        let below: Vec<&PathBuf> = files
            .iter()
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| *n < *end.as_str()))
            .collect();
        let mut entries = Vec::new();
        let mut unreadable = Vec::new();
        for path in &below[below.len().saturating_sub(limit)..] {
            match FileBook::read(path) {
                Ok(record) => entries.push(SegmentEntry { location: path.display().to_string(), record }),
                Err(e) => unreadable.push(e),
            }
        }
        Ok((entries, unreadable))
    }

    async fn prune_segments(
        &self,
        sequence: &str,
        before_ms: i64,
        keep: usize,
        limit: usize,
    ) -> Result<usize, HistoryError> {
        let mut pruned = 0;
        let files = self.segment_files(Some(sequence))?;
        let beyond_kept = files.len().saturating_sub(keep);
        // The last is the sequence's highest: kept.
        for (i, path) in files.iter().enumerate().take(files.len().saturating_sub(1)).take(limit) {
            if let Ok(record) = FileBook::read::<SegmentRecord>(path)
                && (record.last_claimed_ms() < before_ms || i < beyond_kept)
            {
                std::fs::remove_file(path)
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
    use crate::history::segment::sample_segment;
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

    #[tokio::test]
    async fn segment_records_round_trip_beside_the_slots_and_are_pruned_but_the_highest() {
        let dir = tempfile::tempdir().unwrap();
        let book = FileBook::new(dir.path());
        book.append(&sample(3, 10, 1_000, 0, None)).await.unwrap();
        let low = sample_segment("orders", 10, 1..101, 1_000).record;
        let high = sample_segment("orders", 11, 101..201, 2_000).record;
        let other = sample_segment("tickets", 12, 5..10, 1_500).record;
        for r in [&high, &other, &low] {
            book.write_segment(r).await.unwrap();
        }
        // A give-back rewrites the record in place.
        let back = high.given_back(150, 3_000);
        book.write_segment(&back).await.unwrap();
        let (all, unreadable) = book.list_segments(None).await.unwrap();
        assert!(unreadable.is_empty());
        let records: Vec<&SegmentRecord> = all.iter().map(|e| &e.record).collect();
        assert_eq!(records, [&low, &back, &other]);
        assert_eq!(book.list_segments(Some("tickets")).await.unwrap().0.len(), 1);
        assert!(book.list_segments(Some("nope")).await.unwrap().0.is_empty());
        // The highest records at or below a value, in value order.
        let at = |value, limit| {
            let book = book.clone();
            async move {
                let (entries, _) = book.segments_at("orders", value, limit).await.unwrap();
                entries.iter().map(|e| e.record.values.start).collect::<Vec<u64>>()
            }
        };
        assert_eq!(at(100, 16).await, [1]);
        assert_eq!(at(101, 16).await, [1, 101]);
        assert_eq!(at(150, 1).await, [101]);
        assert!(at(0, 16).await.is_empty());
        // The slots' listing sees only slots.
        let (slots, unreadable) = book.list(None).await.unwrap();
        assert_eq!((slots.len(), unreadable.len()), (1, 0));

        // Claimed before the cut, pruned; the sequence's highest never.
        assert_eq!(book.prune_segments("orders", 1_000, 100, 16).await.unwrap(), 0);
        assert_eq!(book.prune_segments("orders", 9_000, 100, 16).await.unwrap(), 1);
        let left: Vec<u64> =
            book.list_segments(Some("orders")).await.unwrap().0.iter().map(|e| e.record.values.start).collect();
        assert_eq!(left, [101]);
        assert_eq!(book.prune_segments("orders", 9_000, 100, 16).await.unwrap(), 0);

        std::fs::write(dir.path().join("history/sequences/tickets/0000000000000000001-0-0.json"), "{").unwrap();
        let (entries, unreadable) = book.list_segments(Some("tickets")).await.unwrap();
        assert_eq!((entries.len(), unreadable.len()), (1, 1));
    }
}
