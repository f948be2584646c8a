//! Where sequences' records live, behind one small protocol: a read, a compare-and-set on the
//! record's version, a create that never overwrites, and a listing.
//!
//! Two stores exist, beside the slots: [`super::etcd`] (`<prefix>/sequences/<name>`) and
//! [`super::file`] (`<state dir>/sequences/<name>.json`). A store that cannot tell whether a
//! write took effect answers [`Answer::Unknown`]; the segment machine then reads the record
//! back.

use serde::{Deserialize, Serialize};

use super::record::Record;
use super::segments::{Answer, Op};
use crate::store::{SessionId, Version};

/// Who serves an ordered sequence: the session (an etcd lease) its holder key is bound to,
/// and the address the other instances forward its calls to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldBy {
    pub session: SessionId,
    pub address: String,
}

/// A sequence as listed: its name, the version of its record, and the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub version: Version,
    pub record: Record,
}

/// What a create found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// The sequence is new, its record at this version.
    New(Version),
    /// A sequence of that name exists already (untouched).
    Exists(Record),
}

/// A sequence store. Calls for different names may run at once.
pub trait SequenceStore: Send + Sync + 'static {
    /// Carries out one operation of a segment machine on sequence `name`. Never panics on
    /// the store's failures: a read that failed, or a write of unknown outcome, is
    /// [`Answer::Unknown`]. With `holder`, a write applies only while that session holds the
    /// (ordered) sequence, else it is [`Answer::NotHolder`].
    fn call(&self, name: &str, op: Op, holder: Option<SessionId>) -> impl Future<Output = Answer> + Send;

    /// Makes `session` the holder of ordered sequence `name`, serving it at `address`, unless
    /// another session holds it: who holds it after the call.
    fn hold(
        &self,
        name: &str,
        session: SessionId,
        address: &str,
    ) -> impl Future<Output = Result<HeldBy, String>> + Send;

    /// Creates sequence `name` with `record`, unless it exists.
    fn create(&self, name: &str, record: &Record) -> impl Future<Output = Result<Created, String>> + Send;

    /// Every sequence, by name.
    fn list(&self) -> impl Future<Output = Result<Vec<Listed>, String>> + Send;
}
