//! Generates the gRPC code for `proto/snowmint/v1/snowmint.proto`, the file descriptor set
//! served by reflection, and the proto3 JSON mapping of its messages (pbjson's serde impls,
//! for the Connect protocol's JSON). Uses the protoc vendored by `protoc-bin-vendored`, so no
//! protoc needs to be installed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Without these, any file of the package (a client's, a test's) reruns the script and
    // rebuilds the crate.
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-changed=build.rs");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptor_path = out_dir.join("snowmint_descriptor.bin");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure().file_descriptor_set_path(&descriptor_path).compile_with_config(
        config,
        &["proto/snowmint/v1/snowmint.proto"],
        &["proto"],
    )?;
    // Fields a newer client sends that this server does not know are ignored, as in binary
    // protobuf, so the API can grow without breaking older servers.
    pbjson_build::Builder::new()
        .register_descriptors(&std::fs::read(&descriptor_path)?)?
        .ignore_unknown_fields()
        .build(&[".snowmint.v1"])?;
    Ok(())
}
