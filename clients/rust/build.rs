//! Generates the gRPC client code of `proto/snowmint/v1/snowmint.proto`, the repository's one
//! definition of the API, with the protoc vendored by `protoc-bin-vendored`.

use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new("proto");
    println!("cargo:rerun-if-changed={}", root.display());
    println!("cargo:rerun-if-changed=build.rs");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure().build_server(false).compile_with_config(
        config,
        &[root.join("snowmint/v1/snowmint.proto")],
        &[root.to_path_buf()],
    )?;
    Ok(())
}
