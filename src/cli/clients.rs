//! `snowmint next` and `snowmint batch`: the small clients, one call to a running server
//! through `snowmint-client`, the IDs (with `--opaque`, opaque IDs' string forms; with
//! `--uuid`, UUIDv7s' text forms) printed one a line. With `--token`, the call carries it, for
//! a server with a tenants' policy; a refusal over the tenant's quota is waited out once, as the
//! client does.

use clap::Args;
use snowmint_client::{Client, ClientError};

#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The server's gRPC URL.
    #[arg(long, env = "SNOWMINT_ADDR", default_value = "http://127.0.0.1:50051")]
    pub addr: String,
    /// Ask for opaque IDs (of a server with --opaque-key-file) and print their string forms.
    #[arg(long, conflicts_with = "uuid")]
    pub opaque: bool,
    /// Ask for UUIDv7s made from new IDs, and print their text forms.
    #[arg(long)]
    pub uuid: bool,
    /// A bearer token for a server with a tenants' policy (`authorization: Bearer <token>`).
    #[arg(long, env = "SNOWMINT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct BatchArgs {
    /// How many IDs (or UUIDs).
    pub count: u32,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Prints one ID; `Err` is the one line to exit with.
pub async fn next(args: &ClientArgs) -> Result<(), String> {
    let client = connect(args)?;
    if args.uuid {
        let uuid = client.next_uuid().await.map_err(|e| failed(&args.addr, &e))?;
        println!("{uuid}");
        return Ok(());
    }
    if args.opaque {
        let opaque = client.next_opaque().await.map_err(|e| failed(&args.addr, &e))?;
        println!("{opaque}");
        return Ok(());
    }
    let id = client.next_id().await.map_err(|e| failed(&args.addr, &e))?;
    println!("{id}");
    Ok(())
}

/// Prints `count` IDs, one a line; `Err` is the one line to exit with.
pub async fn batch(args: &BatchArgs) -> Result<(), String> {
    let client = connect(&args.client)?;
    let lines: Vec<String> = if args.client.uuid {
        let uuids = client.batch_uuids(args.count).await.map_err(|e| failed(&args.client.addr, &e))?;
        uuids.iter().map(ToString::to_string).collect()
    } else if args.client.opaque {
        let opaque = client.batch_opaque(args.count).await.map_err(|e| failed(&args.client.addr, &e))?;
        opaque.iter().map(ToString::to_string).collect()
    } else {
        let ids = client.batch(args.count).await.map_err(|e| failed(&args.client.addr, &e))?;
        ids.iter().map(ToString::to_string).collect()
    };
    let mut out = String::with_capacity(lines.len() * 20);
    for line in lines {
        out.push_str(&line);
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}

fn connect(args: &ClientArgs) -> Result<Client, String> {
    let builder = Client::builder([&args.addr]);
    let builder = match &args.token {
        Some(token) => builder.token(token),
        None => builder,
    };
    builder.connect().map_err(|e| format!("--token or --addr: {e}"))
}

/// The line for a failed call: the server's own status when it answered one, otherwise
/// what the attempts ran into.
fn failed(addr: &str, error: &ClientError) -> String {
    match error {
        ClientError::Rejected(status) => format!("{:?}: {}", status.code(), status.message()),
        error => format!("{addr}: {error}"),
    }
}
