//! `snowmint fence`: the step of etcd's restore procedure that keeps the promise across it.
//!
//! etcd restored from a snapshot holds reservations older than what was minted after the
//! snapshot. Instances that talked to etcd since notice it on their next request and fence the
//! fleet themselves; an instance that starts fresh after the restore cannot tell. The fence
//! written here makes every later claim of a slot whose reservation predates it take the
//! fence as its floor: nothing is minted on it before a time past anything minted under the
//! lost state. Run it once the restored etcd is up, before the fleet reaches it.
//!
//! Named sequences have no clock to fence by: values issued after the snapshot are known only
//! by how many there could have been. With sequences under the prefix the fence asks for that
//! number (`--sequence-skip`, 0 said outright when none were used since the snapshot) and
//! moves every sequence that far up, before it sets the slots' fence; without it, it refuses
//! and changes nothing.

use std::time::Duration;

use clap::Args;
use snowmint::layout::rfc3339_ms;
use snowmint::sequence::etcd::EtcdSequences;
use snowmint::sequence::{Answer, Op, SequenceStore as _};
use snowmint::store::etcd::EtcdConfig;

use super::flags::{EtcdArgs, parse_ms};

#[derive(Debug, Clone, Args)]
pub struct FenceArgs {
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// How far past now the fence reaches, in ms: the fleet's --lease-ttl, --max-clock-drift-ms,
    /// --reservation-window-ms and --max-fleet-skew-ms added up (their defaults make 53 s).
    #[arg(long, default_value = "53000", value_parser = parse_ms)]
    pub for_ms: Duration,
    /// Why, for the logs and refusals of the instances that meet the fence.
    #[arg(long, default_value = "etcd was restored from a snapshot (snowmint fence)")]
    pub reason: String,
    /// How many values every named sequence moves up: at least the values issued since the
    /// snapshot (the increase of snowmint_named_sequence_values_issued_total since then, with
    /// the segments held unused). Required when the prefix has sequences.
    #[arg(long)]
    pub sequence_skip: Option<u64>,
}

/// How many times a sequence's move is tried against instances writing it meanwhile.
const MOVE_ATTEMPTS: usize = 5;

/// Moves every sequence under the prefix `skip` values up, each by a compare-and-set on the
/// record it read. Returns how many it moved.
async fn move_sequences(config: &EtcdConfig, skip: Option<u64>) -> Result<usize, String> {
    let store = EtcdSequences::connect(config).await.map_err(|e| e.to_string())?;
    let listed = store.list().await.map_err(|e| format!("cannot list the sequences under {}: {e}", config.prefix))?;
    if listed.is_empty() {
        return Ok(0);
    }
    let Some(skip) = skip else {
        let names: Vec<&str> = listed.iter().map(|l| l.name.as_str()).collect();
        return Err(format!(
            "{} has named sequences ({}): say how far to move them with --sequence-skip N, N at least the values issued since the snapshot (0 when none were); nothing was changed",
            config.prefix,
            names.join(", ")
        ));
    };
    for sequence in &listed {
        let (mut version, mut record) = (sequence.version, sequence.record.clone());
        let mut moved = None;
        for _ in 0..MOVE_ATTEMPTS {
            let fenced = record.fence(skip);
            let write = Op::Write { expect: version, over: record.clone(), record: fenced.clone() };
            match store.call(&sequence.name, write, None).await {
                Answer::Written(_) => {
                    moved = Some(fenced);
                    break;
                }
                Answer::Refused(Some((now_version, now))) => (version, record) = (now_version, now),
                Answer::Refused(None) => return Err(format!("sequence {:?} vanished while fenced", sequence.name)),
                Answer::Unknown(error) => {
                    return Err(format!("moving sequence {:?}: {error}; run the fence again", sequence.name));
                }
                Answer::Read(_) | Answer::NotHolder => unreachable!("a write without a holder is answered as a write"),
            }
        }
        let Some(fenced) = moved else {
            return Err(format!(
                "sequence {:?} kept changing under {MOVE_ATTEMPTS} attempts: is the fleet running? fence before it reaches etcd",
                sequence.name
            ));
        };
        println!(
            "sequence {} moved from {} to {} (fenced {} times)",
            sequence.name, record.next, fenced.next, fenced.fenced
        );
    }
    Ok(listed.len())
}

/// Sets the fence; `Err` (the process exits 1) when etcd refuses or cannot be reached.
pub async fn run(args: &FenceArgs) -> Result<(), String> {
    if args.etcd.etcd_endpoints.is_empty() {
        return Err("fence needs --etcd-endpoints: a standalone server's state dir has no fleet to fence".into());
    }
    if args.for_ms.is_zero() {
        return Err("--for-ms must be more than 0".into());
    }
    let config = args.etcd.config(String::new())?;
    move_sequences(&config, args.sequence_skip).await?;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let until_ms = now_ms.saturating_add(args.for_ms.as_millis().min(i64::MAX as u128) as i64);
    snowmint::store::etcd::set_fence(&config, until_ms, &args.reason).await.map_err(|e| e.to_string())?;
    println!(
        "fence set at {}/fence until {}: claims of slots whose reservation is older take no floor below it",
        config.prefix,
        rfc3339_ms(until_ms)
    );
    Ok(())
}
