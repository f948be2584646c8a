//! `snowmint sequence create|list|show`: named sequences made and inspected where a server
//! keeps them: etcd (`--etcd-endpoints`, under `--etcd-prefix`) or a standalone server's
//! state dir (`--state-dir`). `show NAME --value V` also says which instance held V, from the
//! sequence's segment history ([`snowmint::history::segment`]).

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use snowmint::history::Book;
use snowmint::history::etcd::EtcdBook;
use snowmint::history::file::FileBook;
use snowmint::history::segment::{SegmentEntry, covering_segment};
use snowmint::layout::rfc3339_ms;
use snowmint::sequence::etcd::EtcdSequences;
use snowmint::sequence::file::FileSequences;
use snowmint::sequence::{Created, Listed, MAX_VALUE, Record, SequenceStore as _, check_name};

use super::flags::EtcdArgs;

#[derive(Debug, Clone, Args)]
pub struct SequenceArgs {
    #[command(subcommand)]
    pub command: SequenceCommand,
}

/// Where the sequences are, and how to print them: every subcommand's flags.
#[derive(Debug, Clone, Args)]
pub struct Where {
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// A standalone server's state dir (its sequences are under sequences/).
    #[arg(long, env = "SNOWMINT_STATE_DIR", default_value = "snowmint-state")]
    pub state_dir: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Subcommand)]
pub enum SequenceCommand {
    /// Create a sequence; an existing one is left as it is (and the command fails).
    Create {
        name: String,
        /// Its first value.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=MAX_VALUE))]
        start: u64,
        /// Its largest value.
        #[arg(long, default_value_t = MAX_VALUE, value_parser = clap::value_parser!(u64).range(1..=MAX_VALUE))]
        max: u64,
        /// Strictly increasing fleet-wide, in the order calls are answered: one instance at a
        /// time serves it (the others forward its calls), and clients never buffer it.
        #[arg(long)]
        ordered: bool,
        #[command(flatten)]
        at: Where,
    },
    /// List every sequence.
    List {
        #[command(flatten)]
        at: Where,
    },
    /// Show one sequence.
    Show {
        name: String,
        /// Also show which instance held this value: the segment history's record of it.
        #[arg(long)]
        value: Option<u64>,
        #[command(flatten)]
        at: Where,
    },
}

impl SequenceCommand {
    fn at(&self) -> &Where {
        match self {
            SequenceCommand::Create { at, .. } | SequenceCommand::List { at } | SequenceCommand::Show { at, .. } => at,
        }
    }
}

/// The store the flags name.
enum Store {
    Etcd(EtcdSequences),
    File(FileSequences),
}

impl Store {
    async fn open(args: &Where) -> Result<(Store, String), String> {
        if args.etcd.etcd_endpoints.is_empty() {
            let at = args.state_dir.join("sequences").display().to_string();
            return Ok((Store::File(FileSequences::new(&args.state_dir)), at));
        }
        let config = args.etcd.config(String::new())?;
        let at = format!("etcd {}/sequences/", config.prefix);
        Ok((Store::Etcd(EtcdSequences::connect(&config).await.map_err(|e| e.to_string())?), at))
    }

    async fn create(&self, name: &str, record: &Record) -> Result<Created, String> {
        match self {
            Store::Etcd(store) => store.create(name, record).await,
            Store::File(store) => store.create(name, record).await,
        }
    }

    async fn list(&self) -> Result<Vec<Listed>, String> {
        match self {
            Store::Etcd(store) => store.list().await,
            Store::File(store) => store.list().await,
        }
    }
}

/// The history beside the sequences the flags name.
async fn book(args: &Where) -> Result<Arc<dyn Book>, String> {
    if args.etcd.etcd_endpoints.is_empty() {
        return Ok(Arc::new(FileBook::new(&args.state_dir)));
    }
    let config = args.etcd.config(String::new())?;
    Ok(Arc::new(EtcdBook::connect(&config).await.map_err(|e| e.to_string())?))
}

/// How many records below a value `show --value` reads.
const LOOK_BACK: usize = 16;

/// The record of the segment that held `value` of sequence `name`, or why there is none.
async fn provenance(args: &Where, name: &str, record: &Record, value: u64) -> Result<SegmentEntry, String> {
    if value >= record.next {
        return Err(format!(
            "never issued: no segment has taken it yet (the sequence's next value is {})",
            record.next
        ));
    }
    let book = book(args).await?;
    // The records that start at or below it: the one holding it is among the highest, unless
    // records overlap (which the audit names).
    let (entries, _) =
        book.segments_at(name, value, LOOK_BACK).await.map_err(|e| format!("cannot read {}: {e}", book.describe()))?;
    covering_segment(&entries, name, value).cloned().ok_or_else(|| {
        format!(
            "no segment record of {name:?} in {} holds it: older than the history kept (--history-retention), kept by a server with history off (--history-retention 0) or under another etcd prefix or state dir, given back unused, or its record was never written (snowmint_history_writes_total)",
            book.describe()
        )
    })
}

fn provenance_json(found: &Result<SegmentEntry, String>) -> serde_json::Value {
    let entry = match found {
        Ok(entry) => entry,
        Err(reason) => return serde_json::json!({ "found": false, "reason": reason }),
    };
    let r = &entry.record;
    let held = r.held();
    serde_json::json!({
        "found": true,
        "record": entry.location,
        "from": held.start,
        "to": held.end - 1,
        "claimed_to": r.values.end - 1,
        "session": r.claim.session.to_string(),
        "claim": r.claim.number,
        "claims": r.claims,
        "hostname": r.holder.hostname,
        "pod": r.holder.pod,
        "pid": r.holder.pid,
        "version": r.holder.version,
        "started_at_ms": r.holder.started_at_ms,
        "claimed_at_ms": r.claimed_at_ms,
        "last_claimed_at_ms": r.last_claimed_ms(),
        "given_back_at_ms": r.given_back_at_ms,
    })
}

fn provenance_line(value: u64, found: &Result<SegmentEntry, String>) -> String {
    let entry = match found {
        Ok(entry) => entry,
        Err(reason) => return format!("value {value}: none on record: {reason}"),
    };
    let r = &entry.record;
    let held = r.held();
    format!(
        "value {value}: held by host={} pod={} pid={} version={} session={} claim={} claims={} values={}..={} claimed_at={} last_claimed_at={} record={}",
        r.holder.hostname,
        r.holder.pod.as_deref().unwrap_or("-"),
        r.holder.pid,
        r.holder.version,
        r.claim.session,
        r.claim.number,
        r.claims,
        held.start,
        held.end - 1,
        rfc3339_ms(r.claimed_at_ms),
        rfc3339_ms(r.last_claimed_ms()),
        entry.location
    )
}

fn json_of(name: &str, record: &Record) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "next": record.next,
        "max": record.max,
        "left": record.left(),
        "ordered": record.ordered,
    })
}

fn line_of(name: &str, record: &Record) -> String {
    let ordered = if record.ordered { ", ordered" } else { "" };
    format!("{name}: next value {}, maximum {}, {} left{ordered}", record.next, record.max, record.left())
}

/// Runs the subcommand; `Err` (the process exits 1) when it fails or finds nothing.
pub async fn run(args: &SequenceArgs) -> Result<(), String> {
    if let SequenceCommand::Create { name, .. } | SequenceCommand::Show { name, .. } = &args.command {
        check_name(name).map_err(|e| e.to_string())?;
    }
    let json = args.command.at().json;
    let (store, at) = Store::open(args.command.at()).await?;
    match &args.command {
        SequenceCommand::Create { name, start, max, ordered, .. } => {
            let record = Record::new(*start, *max, *ordered).map_err(|e| e.to_string())?;
            match store
                .create(name, &record)
                .await
                .map_err(|e| format!("cannot create sequence {name:?} in {at}: {e}"))?
            {
                Created::New(_) => {
                    if json {
                        println!("{}", json_of(name, &record));
                    } else {
                        let kind = if *ordered { "ordered " } else { "" };
                        println!("created {kind}sequence {name} in {at}: values from {start} to {max}");
                    }
                    Ok(())
                }
                Created::Exists(existing) => Err(format!(
                    "sequence {name:?} exists already in {at}, left as it is ({})",
                    line_of(name, &existing)
                )),
            }
        }
        SequenceCommand::List { .. } => {
            let listed = store.list().await.map_err(|e| format!("cannot list the sequences in {at}: {e}"))?;
            if json {
                let all: Vec<_> = listed.iter().map(|l| json_of(&l.name, &l.record)).collect();
                println!("{}", serde_json::Value::Array(all));
            } else if listed.is_empty() {
                println!("no sequences in {at}");
            } else {
                for l in &listed {
                    println!("{}", line_of(&l.name, &l.record));
                }
            }
            Ok(())
        }
        SequenceCommand::Show { name, value, at: flags } => {
            let listed = store.list().await.map_err(|e| format!("cannot read the sequences in {at}: {e}"))?;
            let Some(found) = listed.iter().find(|l| &l.name == name) else {
                return Err(format!("sequence {name:?} does not exist in {at}"));
            };
            let held = match value {
                Some(value) => Some((*value, provenance(flags, name, &found.record, *value).await)),
                None => None,
            };
            if json {
                let mut shown = json_of(name, &found.record);
                if let Some((value, held)) = &held {
                    shown["value"] = (*value).into();
                    shown["provenance"] = provenance_json(held);
                }
                println!("{shown}");
            } else {
                println!("{}", line_of(name, &found.record));
                if let Some((value, held)) = &held {
                    println!("{}", provenance_line(*value, held));
                }
            }
            Ok(())
        }
    }
}
