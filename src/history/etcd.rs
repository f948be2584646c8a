//! Slot history in etcd mode: one JSON record per claim under
//! `<prefix>/history/<slot>/<name>`, with no lease (records outlive their writers). A close
//! is a compare-and-set on the record's mod_revision, so the holder's own close and a
//! successor's never overwrite each other: whichever lands first stays.
//!
//! Sequences' segment records live under `<prefix>/history/sequences/<sequence>/<name>`,
//! each written only by its holder, and read a page at a time (a busy sequence has many).
//! The slots' listing reads only the keys that start with a digit, so it never sees them.

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};
use tokio::sync::Mutex;

use super::segment::{SegmentEntry, SegmentRecord, name_start};
use super::{Book, Entry, HistoryError, Record};
use crate::layout::Slot;
use crate::store::etcd::{Endpoints, EtcdConfig};

/// The history under one etcd prefix, on its own connections (never the keeper's).
pub struct EtcdBook {
    prefix: String,
    etcd: Mutex<Endpoints>,
}

impl EtcdBook {
    /// Sets up the connections (they connect on first use).
    pub async fn connect(config: &EtcdConfig) -> Result<EtcdBook, HistoryError> {
        let etcd = Endpoints::connect(config).await.map_err(|e| HistoryError::Unavailable(e.to_string()))?;
        Ok(EtcdBook { prefix: config.prefix.clone(), etcd: Mutex::new(etcd) })
    }

    fn slot_prefix(&self, slot: Option<Slot>) -> String {
        match slot {
            Some(slot) => format!("{}/history/{slot}/", self.prefix),
            None => format!("{}/history/", self.prefix),
        }
    }

    fn key(&self, record: &Record) -> String {
        format!("{}{}", self.slot_prefix(Some(record.slot)), record.name())
    }

    /// Where the segment records of `sequence` (of every sequence: `None`) are.
    fn sequence_prefix(&self, sequence: Option<&str>) -> String {
        match sequence {
            Some(sequence) => format!("{}/history/sequences/{sequence}/", self.prefix),
            None => format!("{}/history/sequences/", self.prefix),
        }
    }

    fn segment_key(&self, record: &SegmentRecord) -> String {
        format!("{}{}", self.sequence_prefix(Some(&record.sequence)), record.name())
    }

    /// Every key-value under `prefix`, in key order, read `PAGE` at a time.
    async fn get_all(&self, prefix: String) -> Result<Vec<etcd_client::KeyValue>, HistoryError> {
        const PAGE: usize = 1_000;
        let end = prefix_end(&prefix);
        let mut from = prefix.into_bytes();
        let mut all = Vec::new();
        loop {
            let options = GetOptions::new().with_range(end.clone()).with_limit(PAGE as i64);
            let page = self.read(from.clone(), options).await?;
            let Some(last) = page.last() else { break };
            from = [last.key(), b"\0"].concat();
            let full = page.len() == PAGE;
            all.extend(page);
            if !full {
                break;
            }
        }
        Ok(all)
    }

    /// The records under `prefix`, the oldest first; at most `limit`.
    async fn get(&self, prefix: String, limit: Option<usize>) -> Result<Vec<etcd_client::KeyValue>, HistoryError> {
        let mut options = GetOptions::new().with_prefix();
        if let Some(limit) = limit {
            options = options.with_limit(limit as i64);
        }
        self.read(prefix, options).await
    }

    /// The record at exactly `key`, if any.
    async fn get_key(&self, key: String) -> Result<Option<etcd_client::KeyValue>, HistoryError> {
        Ok(self.read(key, GetOptions::new()).await?.into_iter().next())
    }

    /// One read of `key` with `options`.
    async fn read(
        &self,
        key: impl Into<Vec<u8>>,
        options: GetOptions,
    ) -> Result<Vec<etcd_client::KeyValue>, HistoryError> {
        let key = key.into();
        let mut etcd = self.etcd.lock().await;
        let got = etcd
            .attempt("read history", |mut c| async move { c.get(key, Some(options)).await })
            .await
            .map_err(HistoryError::Unavailable)?;
        Ok(got.kvs().to_vec())
    }
}

/// The end of the range of keys that start with `prefix` (its last byte, plus one).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    let last = end.last_mut().expect("a history prefix is never empty");
    *last += 1;
    end
}

fn parse(kv: &etcd_client::KeyValue) -> Result<Entry, HistoryError> {
    let location = String::from_utf8_lossy(kv.key()).into_owned();
    match serde_json::from_slice(kv.value()) {
        Ok(record) => Ok(Entry { location, record }),
        Err(e) => Err(HistoryError::Corrupt { location, reason: e.to_string() }),
    }
}

fn parse_segment(kv: &etcd_client::KeyValue) -> Result<SegmentEntry, HistoryError> {
    let location = String::from_utf8_lossy(kv.key()).into_owned();
    match serde_json::from_slice(kv.value()) {
        Ok(record) => Ok(SegmentEntry { location, record }),
        Err(e) => Err(HistoryError::Corrupt { location, reason: e.to_string() }),
    }
}

#[tonic::async_trait]
impl Book for EtcdBook {
    async fn append(&self, record: &Record) -> Result<String, HistoryError> {
        let key = self.key(record);
        let value = serde_json::to_string(record).expect("records serialize");
        let put = key.clone();
        let mut etcd = self.etcd.lock().await;
        etcd.attempt("write history", |mut c| async move { c.put(put, value, None).await })
            .await
            .map_err(HistoryError::Unavailable)?;
        Ok(key)
    }

    async fn close(&self, record: &Record, closed: &Record) -> Result<bool, HistoryError> {
        let key = self.key(record);
        let Some(kv) = self.get_key(key.clone()).await? else {
            // Pruned, or never written (its append failed): write the closed record.
            self.append(closed).await?;
            return Ok(true);
        };
        if !parse(&kv)?.record.is_open() {
            return Ok(false);
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision())])
            .and_then([TxnOp::put(key, serde_json::to_string(closed).expect("records serialize"), None)]);
        let mut etcd = self.etcd.lock().await;
        let response = etcd
            .attempt("close history record", |mut c| async move { c.txn(txn).await })
            .await
            .map_err(HistoryError::Unavailable)?;
        // Refused: someone closed it between the read and the write.
        Ok(response.succeeded())
    }

    async fn list(&self, slot: Option<Slot>) -> Result<(Vec<Entry>, Vec<HistoryError>), HistoryError> {
        let mut entries = Vec::new();
        let mut unreadable = Vec::new();
        let kvs = match slot {
            Some(slot) => self.get(self.slot_prefix(Some(slot)), None).await?,
            // Slots' keys only: `<prefix>/history/0` up to `<prefix>/history/9...` (':' follows
            // '9'), leaving out `<prefix>/history/sequences/`.
            None => {
                let all = self.slot_prefix(None);
                self.read(format!("{all}0"), GetOptions::new().with_range(format!("{all}:"))).await?
            }
        };
        for kv in kvs {
            match parse(&kv) {
                Ok(entry) => entries.push(entry),
                Err(e) => unreadable.push(e),
            }
        }
        // Keys sort as text: slot 10 before slot 2. Order by slot number, then name.
        entries.sort_by(|a, b| (a.record.slot, &a.location).cmp(&(b.record.slot, &b.location)));
        Ok((entries, unreadable))
    }

    async fn prune(&self, slot: Slot, before_ms: i64, limit: usize) -> Result<usize, HistoryError> {
        let mut pruned = 0;
        for kv in self.get(self.slot_prefix(Some(slot)), Some(limit)).await? {
            let Ok(entry) = parse(&kv) else { continue };
            if entry.record.closed_at_ms.is_none_or(|closed| closed >= before_ms) {
                continue;
            }
            // Only the version read: a record rewritten meanwhile is left for next time.
            let txn = Txn::new()
                .when([Compare::mod_revision(kv.key().to_vec(), CompareOp::Equal, kv.mod_revision())])
                .and_then([TxnOp::delete(kv.key().to_vec(), None)]);
            let mut etcd = self.etcd.lock().await;
            let response = etcd
                .attempt("prune history", |mut c| async move { c.txn(txn).await })
                .await
                .map_err(HistoryError::Unavailable)?;
            pruned += usize::from(response.succeeded());
        }
        Ok(pruned)
    }

    async fn write_segment(&self, record: &SegmentRecord) -> Result<String, HistoryError> {
        let key = self.segment_key(record);
        let value = serde_json::to_string(record).expect("records serialize");
        let put = key.clone();
        let mut etcd = self.etcd.lock().await;
        etcd.attempt("write segment history", |mut c| async move { c.put(put, value, None).await })
            .await
            .map_err(HistoryError::Unavailable)?;
        Ok(key)
    }

    async fn list_segments(
        &self,
        sequence: Option<&str>,
    ) -> Result<(Vec<SegmentEntry>, Vec<HistoryError>), HistoryError> {
        let mut entries = Vec::new();
        let mut unreadable = Vec::new();
        for kv in self.get_all(self.sequence_prefix(sequence)).await? {
            match parse_segment(&kv) {
                Ok(entry) => entries.push(entry),
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
        let prefix = self.sequence_prefix(Some(sequence));
        let end = format!("{prefix}{}", name_start(value.saturating_add(1)));
        let options =
            GetOptions::new().with_range(end).with_sort(SortTarget::Key, SortOrder::Descend).with_limit(limit as i64);
        let mut entries = Vec::new();
        let mut unreadable = Vec::new();
        for kv in self.read(prefix, options).await?.iter().rev() {
            match parse_segment(kv) {
                Ok(entry) => entries.push(entry),
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
        let prefix = self.sequence_prefix(Some(sequence));
        let count = {
            let options = GetOptions::new().with_prefix().with_count_only();
            let key = prefix.clone();
            let mut etcd = self.etcd.lock().await;
            let got = etcd
                .attempt("count segment history", |mut c| async move { c.get(key, Some(options)).await })
                .await
                .map_err(HistoryError::Unavailable)?;
            usize::try_from(got.count()).unwrap_or(usize::MAX)
        };
        let beyond_kept = count.saturating_sub(keep);
        let kvs = self.get(prefix, Some(limit + 1)).await?;
        // The last one read may be the sequence's highest: kept.
        for (i, kv) in kvs.iter().enumerate().take(kvs.len().saturating_sub(1)) {
            let Ok(entry) = parse_segment(kv) else { continue };
            if entry.record.last_claimed_ms() >= before_ms && i >= beyond_kept {
                continue;
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(kv.key().to_vec(), CompareOp::Equal, kv.mod_revision())])
                .and_then([TxnOp::delete(kv.key().to_vec(), None)]);
            let mut etcd = self.etcd.lock().await;
            let response = etcd
                .attempt("prune segment history", |mut c| async move { c.txn(txn).await })
                .await
                .map_err(HistoryError::Unavailable)?;
            pruned += usize::from(response.succeeded());
        }
        Ok(pruned)
    }

    fn describe(&self) -> String {
        self.slot_prefix(None)
    }
}
