//! The `snowmint` binary: parses the command line ([`cli`]) and runs one command: the server
//! (the `snowmint` library), offline decoding, or a client of a running server
//! (`snowmint-client`).

mod cli;

use clap::Parser;

use cli::{Cli, Command};

/// mimalloc rather than the system allocator: every gRPC call allocates and frees a few
/// buffers, and under load glibc's malloc and free showed high in the profile (CHANGELOG.md
/// has the figures).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = Cli::parse();
    let result = runtime(&cli)
        .map_err(|e| format!("cannot start the async runtime: {e}"))
        .and_then(|runtime| runtime.block_on(run(cli)));
    if let Err(line) = result {
        eprintln!("snowmint: {line}");
        std::process::exit(1);
    }
}

/// The tokio runtime for a command: `serve` gets `--worker-threads` threads (one per core by
/// default), the others a multi-threaded default.
fn runtime(cli: &Cli) -> std::io::Result<tokio::runtime::Runtime> {
    let threads = match &cli.command {
        Command::Serve(args) => args.worker_threads,
        _ => 0,
    };
    let mut builder = match threads {
        // One thread: the single-threaded scheduler, which skips the work-stealing
        // bookkeeping that one thread has no use for.
        1 => tokio::runtime::Builder::new_current_thread(),
        0 => tokio::runtime::Builder::new_multi_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(n);
            builder
        }
    };
    builder.enable_all().build()
}

/// Runs a parsed command line; `Err` is the one line to print before exiting non-zero.
async fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Serve(args) => cli::serve::run(*args).await,
        Command::Decode(args) => cli::decode::run(&args).await,
        Command::Audit(args) => cli::audit::run(&args).await,
        Command::Fence(args) => cli::fence::run(&args).await,
        Command::Sequence(args) => cli::sequence::run(&args).await,
        Command::Token(args) => cli::token::run(&args),
        Command::Next(args) => cli::clients::next(&args).await,
        Command::Batch(args) => cli::clients::batch(&args).await,
        Command::Bench(args) => {
            let report = cli::bench::run(&args).await?;
            println!("{report}");
            report.verdict()
        }
    }
}
