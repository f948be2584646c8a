//! `snowmint fence`: the step of etcd's restore procedure that keeps the promise across it.
//!
//! etcd restored from a snapshot holds reservations older than what was minted after the
//! snapshot. Instances that talked to etcd since notice it on their next request and fence the
//! fleet themselves; an instance that starts fresh after the restore cannot tell. The fence
//! written here makes every later claim of a slot whose reservation predates it take the
//! fence as its floor: nothing is minted on it before a time past anything minted under the
//! lost state. Run it once the restored etcd is up, before the fleet reaches it.

use std::time::Duration;

use clap::Args;
use snowmint::layout::rfc3339_ms;

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
