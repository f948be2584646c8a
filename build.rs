//! Generates the gRPC code for `proto/snowmint/v1/snowmint.proto` and the file
//! descriptor set served by reflection. Uses the protoc vendored by `protoc-bin-vendored`,
//! so no protoc needs to be installed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Without these, any file of the package (a client's, a test's) reruns the script and
    // rebuilds the crate.
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-changed=build.rs");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("snowmint_descriptor.bin"))
        .compile_with_config(config, &["proto/snowmint/v1/snowmint.proto"], &["proto"])?;
    Ok(())
}
