//! The `snowmint` binary: parses the command line and hands over to the library.

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = snowmint::cli::Cli::parse();
    if let Err(line) = snowmint::cli::main(cli).await {
        eprintln!("snowmint: {line}");
        std::process::exit(1);
    }
}
