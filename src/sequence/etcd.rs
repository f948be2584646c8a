//! Sequences in etcd: each record under `<prefix>/sequences/<name>`, its version the key's
//! mod_revision, every write a transaction that compares it and the value it read (a
//! restore hands mod_revisions out again; see [`Op::Write`]). The holder of an ordered
//! sequence is `<prefix>/sequence-holders/<name>`, bound to the holder's lease (it goes when
//! the lease does), and each of the holder's writes also compares that the key is still
//! bound to its lease.

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use tokio::sync::Mutex;

use super::record::Record;
use super::segments::{Answer, Op};
use super::store::{Created, HeldBy, Listed, SequenceStore};
use crate::store::etcd::{Endpoints, EtcdConfig};
use crate::store::{SessionId, StoreError, Version};

/// The sequences of one etcd prefix.
pub struct EtcdSequences {
    prefix: String,
    etcd: Mutex<Endpoints>,
}

impl EtcdSequences {
    pub async fn connect(config: &EtcdConfig) -> Result<EtcdSequences, StoreError> {
        Ok(EtcdSequences { prefix: config.prefix.clone(), etcd: Mutex::new(Endpoints::connect(config).await?) })
    }

    fn dir(&self) -> String {
        format!("{}/sequences/", self.prefix)
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.dir())
    }

    fn holder_key(&self, name: &str) -> String {
        format!("{}/sequence-holders/{name}", self.prefix)
    }

    async fn read(&self, name: &str) -> Result<Option<(Version, Record)>, String> {
        let key = self.key(name);
        let response =
            self.etcd.lock().await.attempt("read sequence", |mut c| async move { c.get(key, None).await }).await?;
        response.kvs().first().map(|kv| parse(name, kv)).transpose()
    }

    /// Writes `record` if the stored one is still `over` at its version: the transaction
    /// compares the mod_revision and the value both, as [`Op::Write`] says why. The value is
    /// compared as [`Record::encode`] makes it; a record stored in other bytes that read as
    /// `over` at its version (written by another release) is compared again by those bytes.
    async fn write(
        &self,
        name: &str,
        (expect, over): (Version, &Record),
        record: &Record,
        holder: Option<SessionId>,
    ) -> Answer {
        let key = self.key(name);
        let revision = match expect {
            Version::Absent => 0,
            Version::At(revision) => revision,
        };
        let mut over_bytes = over.encode();
        for attempt in 0..2 {
            let mut compares = vec![
                Compare::mod_revision(key.clone(), CompareOp::Equal, revision),
                Compare::value(key.clone(), CompareOp::Equal, over_bytes.clone()),
            ];
            let mut reads = vec![TxnOp::get(key.clone(), None)];
            if let Some(session) = holder {
                let holder_key = self.holder_key(name);
                compares.push(Compare::lease(holder_key.clone(), CompareOp::Equal, session));
                reads.push(TxnOp::get(holder_key, None));
            }
            let put = TxnOp::put(key.clone(), record.encode(), None);
            let txn = Txn::new().when(compares).and_then([put]).or_else(reads);
            let response =
                match self.etcd.lock().await.attempt("write sequence", |mut c| async move { c.txn(txn).await }).await {
                    Ok(response) => response,
                    Err(error) => return Answer::Unknown(error),
                };
            if response.succeeded() {
                return match response.header() {
                    Some(header) => Answer::Written(Version::At(header.revision())),
                    None => Answer::Unknown("etcd answered a sequence write without its revision".into()),
                };
            }
            let mut gets = response.op_responses().into_iter().filter_map(|op| match op {
                TxnOpResponse::Get(get) => Some(get),
                _ => None,
            });
            let stored = gets.next().map(|get| get.kvs().first().cloned());
            if let Some(session) = holder {
                match gets.next() {
                    Some(get) if get.kvs().first().is_some_and(|kv| kv.lease() == session) => {}
                    Some(_) => return Answer::NotHolder,
                    None => {
                        return Answer::Unknown("etcd refused a sequence write without showing its holder".into());
                    }
                }
            }
            let stored = match stored {
                Some(Some(kv)) => kv,
                Some(None) => return Answer::Refused(None),
                None => return Answer::Unknown("etcd refused a sequence write without saying what is stored".into()),
            };
            let current = match parse(name, &stored) {
                Ok(current) => current,
                Err(error) => return Answer::Unknown(error),
            };
            let same_record = current == (expect, over.clone()) && stored.value() != over_bytes;
            if !(same_record && attempt == 0) {
                return Answer::Refused(Some(current));
            }
            over_bytes = stored.value().to_vec();
        }
        unreachable!("the second attempt answers")
    }
}

/// A key-value as a record at its version.
fn parse(name: &str, kv: &etcd_client::KeyValue) -> Result<(Version, Record), String> {
    let record = Record::decode(name, kv.value()).map_err(|e| e.to_string())?;
    Ok((Version::At(kv.mod_revision()), record))
}

impl SequenceStore for EtcdSequences {
    async fn call(&self, name: &str, op: Op, holder: Option<SessionId>) -> Answer {
        match op {
            Op::Read => match self.read(name).await {
                Ok(current) => Answer::Read(current),
                Err(error) => Answer::Unknown(error),
            },
            Op::Write { expect, over, record } => self.write(name, (expect, &over), &record, holder).await,
        }
    }

    async fn hold(&self, name: &str, session: SessionId, address: &str) -> Result<HeldBy, String> {
        let key = self.holder_key(name);
        let mine = HeldBy { session, address: address.to_string() };
        let value = serde_json::to_vec(&mine).expect("a holder serializes");
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), value, Some(PutOptions::new().with_lease(session)))])
            .or_else([TxnOp::get(key, None)]);
        let response = self.etcd.lock().await.attempt("hold sequence", |mut c| async move { c.txn(txn).await }).await?;
        if response.succeeded() {
            return Ok(mine);
        }
        for op in response.op_responses() {
            if let TxnOpResponse::Get(get) = op
                && let Some(kv) = get.kvs().first()
            {
                let held: HeldBy = serde_json::from_slice(kv.value())
                    .map_err(|e| format!("the holder of sequence {name:?} is not one: {e}"))?;
                // The lease the key is bound to is what holds it, whatever the value says.
                return Ok(HeldBy { session: kv.lease(), address: held.address });
            }
        }
        Err(format!("etcd refused to make this instance the holder of sequence {name:?} and showed no other"))
    }

    async fn create(&self, name: &str, record: &Record) -> Result<Created, String> {
        let key = self.key(name);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), record.encode(), None)])
            .or_else([TxnOp::get(key, None)]);
        let response =
            self.etcd.lock().await.attempt("create sequence", |mut c| async move { c.txn(txn).await }).await?;
        if response.succeeded() {
            let revision = response.header().map_or(0, |h| h.revision());
            return Ok(Created::New(Version::At(revision)));
        }
        for op in response.op_responses() {
            if let TxnOpResponse::Get(get) = op
                && let Some(kv) = get.kvs().first()
            {
                return parse(name, kv).map(|(_, record)| Created::Exists(record));
            }
        }
        Err(format!("etcd refused to create sequence {name:?} and showed nothing in its place"))
    }

    async fn list(&self) -> Result<Vec<Listed>, String> {
        let dir = self.dir();
        let prefix = dir.clone();
        let response = self
            .etcd
            .lock()
            .await
            .attempt(
                "list sequences",
                |mut c| async move { c.get(prefix, Some(GetOptions::new().with_prefix())).await },
            )
            .await?;
        let mut listed = Vec::new();
        for kv in response.kvs() {
            let name = kv.key_str().map_err(|e| e.to_string())?.strip_prefix(&dir).unwrap_or_default().to_string();
            let (version, record) = parse(&name, kv)?;
            listed.push(Listed { name, version, record });
        }
        listed.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(listed)
    }
}
