//! The `snowmint` binary: parses the command line and hands over to the library.

use clap::Parser;

/// mimalloc rather than the system allocator: every gRPC call allocates and frees a few
/// buffers, and under load glibc's malloc and free showed high in the profile (CHANGELOG.md
/// has the figures).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = snowmint::cli::Cli::parse();
    let result = snowmint::cli::runtime(&cli)
        .map_err(|e| format!("cannot start the async runtime: {e}"))
        .and_then(|runtime| runtime.block_on(snowmint::cli::main(cli)));
    if let Err(line) = result {
        eprintln!("snowmint: {line}");
        std::process::exit(1);
    }
}
