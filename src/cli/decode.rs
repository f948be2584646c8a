//! `snowmint decode`: splits an ID into its time, worker and sequence, offline, with
//! snowmint's layout (from the same flags as `serve`) or another system's by name; a UUIDv7
//! snowmint minted is read back into the ID it was made from first. Given where the slot
//! history lives (`--etcd-endpoints`, or `--state-dir`), it also says which holder minted
//! the ID.

use clap::Args;
use snowmint::layout::{Layout, rfc3339_ms};
use snowmint::proto::Provenance;
use snowmint::rpc::service::{decode, lookup, provenance_of};
use snowmint::uuid7;

use super::flags::{HistoryArgs, LayoutArgs};

#[derive(Debug, Clone, Args)]
pub struct DecodeArgs {
    /// The ID, in decimal or 0x-prefixed hex; a UUIDv7 snowmint minted (8-4-4-4-12 hex
    /// digits); with --opaque-key-file, an opaque ID's string form.
    pub id: String,
    /// A named layout (twitter, discord, instagram, sonyflake); snowmint's own by default.
    #[arg(long = "layout", value_name = "NAME")]
    pub layout_name: Option<String>,
    #[command(flatten)]
    pub own: LayoutArgs,
    #[command(flatten)]
    pub history: HistoryArgs,
    /// Print JSON (the ID as a string).
    #[arg(long)]
    pub json: bool,
    /// Reveal <ID>, an opaque ID's string form, with this key file first (as `serve` reads it).
    #[arg(long)]
    pub opaque_key_file: Option<std::path::PathBuf>,
}

fn parse_id(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|e| format!("not a 64-bit unsigned ID ({e})"))
}

/// Prints the decoded ID; `Err` is the one line to exit with.
pub async fn run(args: &DecodeArgs) -> Result<(), String> {
    let own = matches!(args.layout_name.as_deref(), None | Some("snowmint"));
    let layout = match args.layout_name.as_deref() {
        None | Some("snowmint") => args.own.widths()?,
        Some(name) => Layout::named(name).map_err(|e| e.to_string())?,
    };
    // A UUID's text form reads as nothing else; without a key, a long argument with hyphens
    // can only have meant a UUID.
    let uuid = uuid7::parse_text(&args.id);
    let id = match (&uuid, &args.opaque_key_file) {
        (Ok(uuid), _) => {
            uuid7::check_layout(&layout).map_err(|e| e.to_string())?;
            uuid7::decode(&layout, *uuid).map_err(|e| e.to_string())?.id
        }
        (Err(_), Some(path)) => super::opaque::reveal(path, &args.id)?,
        (Err(e), None) if args.id.len() >= 32 && args.id.contains('-') => return Err(e.to_string()),
        (Err(_), None) => parse_id(&args.id).map_err(|e| format!("{:?} is {e}", args.id))?,
    };
    let mut decoded = decode(id, &layout).map_err(|e| e.to_string())?;
    if uuid.is_ok() {
        decoded.uuid_text = args.id.to_lowercase();
    }
    if let Some(book) = args.history.book().await? {
        let found = if own {
            lookup(&*book, decoded.worker_id, decoded.unix_ms).await.map_err(|e| e.to_string())?
        } else {
            Err(format!("decoded with layout {}, not snowmint's: no slot history covers it", layout.name))
        };
        decoded.provenance = Some(provenance_of(found));
    }
    if args.json {
        let json = serde_json::json!({
            "id": decoded.id.to_string(),
            "unix_ms": decoded.unix_ms.to_string(),
            "time": decoded.time,
            "worker_id": decoded.worker_id,
            "sequence": decoded.sequence,
            "layout": decoded.layout,
            "uuid": (!decoded.uuid_text.is_empty()).then_some(&decoded.uuid_text),
            "provenance": decoded.provenance.as_ref().map(provenance_json),
        });
        println!("{json}");
    } else {
        let uuid = if decoded.uuid_text.is_empty() { String::new() } else { format!("uuid={} ", decoded.uuid_text) };
        println!(
            "{uuid}id={} time={} unix_ms={} worker_id={} sequence={} layout={}",
            decoded.id, decoded.time, decoded.unix_ms, decoded.worker_id, decoded.sequence, decoded.layout
        );
        if let Some(p) = &decoded.provenance {
            if p.found {
                println!(
                    "minted by host={} pod={} pid={} version={} lease={:x} claimed_at={} floor={} last_reservation={} record={}",
                    p.hostname,
                    if p.pod.is_empty() { "-" } else { &p.pod },
                    p.pid,
                    p.version,
                    p.lease,
                    rfc3339_ms(p.claimed_at_ms),
                    rfc3339_ms(p.floor_ms),
                    if p.last_reservation_ms == 0 { "open".into() } else { rfc3339_ms(p.last_reservation_ms) },
                    p.record
                );
            } else {
                println!("provenance: none on record: {}", p.reason);
            }
        }
    }
    Ok(())
}

/// Provenance as JSON: Unix ms as numbers, absent values left out.
fn provenance_json(p: &Provenance) -> serde_json::Value {
    if !p.found {
        return serde_json::json!({ "found": false, "reason": p.reason });
    }
    serde_json::json!({
        "found": true,
        "record": p.record,
        "worker_id": p.worker_id,
        "hostname": p.hostname,
        "pod": (!p.pod.is_empty()).then_some(&p.pod),
        "pid": p.pid,
        "version": p.version,
        "started_at_ms": p.started_at_ms,
        "lease": format!("{:x}", p.lease),
        "claimed_at_ms": p.claimed_at_ms,
        "floor_ms": p.floor_ms,
        "last_reservation_ms": (p.last_reservation_ms != 0).then_some(p.last_reservation_ms),
        "closed_at_ms": (p.closed_at_ms != 0).then_some(p.closed_at_ms),
    })
}
