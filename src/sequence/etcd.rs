//! Sequences in etcd: each record under `<prefix>/sequences/<name>`, its version the key's
//! mod_revision, every write a transaction that compares it.

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use tokio::sync::Mutex;

use super::record::Record;
use super::segments::{Answer, Op};
use super::store::{Created, Listed, SequenceStore};
use crate::store::StoreError;
use crate::store::Version;
use crate::store::etcd::{Endpoints, EtcdConfig};

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

    async fn read(&self, name: &str) -> Result<Option<(Version, Record)>, String> {
        let key = self.key(name);
        let response =
            self.etcd.lock().await.attempt("read sequence", |mut c| async move { c.get(key, None).await }).await?;
        response.kvs().first().map(|kv| parse(name, kv)).transpose()
    }

    async fn write(&self, name: &str, expect: Version, record: &Record) -> Answer {
        let key = self.key(name);
        let revision = match expect {
            Version::Absent => 0,
            Version::At(revision) => revision,
        };
        let txn = Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, revision)])
            .and_then([TxnOp::put(key.clone(), record.encode(), None)])
            .or_else([TxnOp::get(key, None)]);
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
        let now = response.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().first().map(|kv| parse(name, kv))),
            _ => None,
        });
        match now {
            Some(Some(Err(error))) => Answer::Unknown(error),
            Some(Some(Ok(current))) => Answer::Refused(Some(current)),
            Some(None) => Answer::Refused(None),
            None => Answer::Unknown("etcd refused a sequence write without saying what is stored".into()),
        }
    }
}

/// A key-value as a record at its version.
fn parse(name: &str, kv: &etcd_client::KeyValue) -> Result<(Version, Record), String> {
    let record = Record::decode(name, kv.value()).map_err(|e| e.to_string())?;
    Ok((Version::At(kv.mod_revision()), record))
}

impl SequenceStore for EtcdSequences {
    async fn call(&self, name: &str, op: Op) -> Answer {
        match op {
            Op::Read => match self.read(name).await {
                Ok(current) => Answer::Read(current),
                Err(error) => Answer::Unknown(error),
            },
            Op::Write { expect, record } => self.write(name, expect, &record).await,
        }
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
