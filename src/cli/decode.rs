//! `snowmint decode`: splits an ID into its time, worker and sequence, offline, with
//! snowmint's layout (from the same flags as `serve`) or another system's by name.

use clap::Args;
use snowmint::layout::Layout;
use snowmint::service::decode;

use super::flags::LayoutArgs;

#[derive(Debug, Clone, Args)]
pub struct DecodeArgs {
    /// The ID, in decimal or 0x-prefixed hex; with --opaque-key-file, an opaque ID's string form.
    pub id: String,
    /// A named layout (twitter, discord, instagram, sonyflake); snowmint's own by default.
    #[arg(long = "layout", value_name = "NAME")]
    pub layout_name: Option<String>,
    #[command(flatten)]
    pub own: LayoutArgs,
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
pub fn run(args: &DecodeArgs) -> Result<(), String> {
    let layout = match &args.layout_name {
        None => args.own.widths()?,
        Some(name) if name == "snowmint" => args.own.widths()?,
        Some(name) => Layout::named(name).map_err(|e| e.to_string())?,
    };
    let id = match &args.opaque_key_file {
        Some(path) => super::opaque::reveal(path, &args.id)?,
        None => parse_id(&args.id).map_err(|e| format!("{:?} is {e}", args.id))?,
    };
    let decoded = decode(id, &layout).map_err(|e| e.to_string())?;
    if args.json {
        let json = serde_json::json!({
            "id": decoded.id.to_string(),
            "unix_ms": decoded.unix_ms.to_string(),
            "time": decoded.time,
            "worker_id": decoded.worker_id,
            "sequence": decoded.sequence,
            "layout": decoded.layout,
        });
        println!("{json}");
    } else {
        println!(
            "id={} time={} unix_ms={} worker_id={} sequence={} layout={}",
            decoded.id, decoded.time, decoded.unix_ms, decoded.worker_id, decoded.sequence, decoded.layout
        );
    }
    Ok(())
}
