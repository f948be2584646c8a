//! `snowmint sequence create|list|show`: named sequences made and inspected where a server
//! keeps them: etcd (`--etcd-endpoints`, under `--etcd-prefix`) or a standalone server's
//! state dir (`--state-dir`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
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
    format!("{name}: next value {}, maximum {}, {} left", record.next, record.max, record.left())
}

/// Runs the subcommand; `Err` (the process exits 1) when it fails or finds nothing.
pub async fn run(args: &SequenceArgs) -> Result<(), String> {
    if let SequenceCommand::Create { name, .. } | SequenceCommand::Show { name, .. } = &args.command {
        check_name(name).map_err(|e| e.to_string())?;
    }
    let json = args.command.at().json;
    let (store, at) = Store::open(args.command.at()).await?;
    match &args.command {
        SequenceCommand::Create { name, start, max, .. } => {
            let record = Record::new(*start, *max, false).map_err(|e| e.to_string())?;
            match store
                .create(name, &record)
                .await
                .map_err(|e| format!("cannot create sequence {name:?} in {at}: {e}"))?
            {
                Created::New(_) => {
                    if json {
                        println!("{}", json_of(name, &record));
                    } else {
                        println!("created sequence {name} in {at}: values from {start} to {max}");
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
        SequenceCommand::Show { name, .. } => {
            let listed = store.list().await.map_err(|e| format!("cannot read the sequences in {at}: {e}"))?;
            let Some(found) = listed.iter().find(|l| &l.name == name) else {
                return Err(format!("sequence {name:?} does not exist in {at}"));
            };
            if json {
                println!("{}", json_of(name, &found.record));
            } else {
                println!("{}", line_of(name, &found.record));
            }
            Ok(())
        }
    }
}
