//! The generated gRPC types of `proto/snowmint/v1/snowmint.proto` and its file descriptor
//! set, served by reflection.

#![allow(clippy::all, missing_docs)]

tonic::include_proto!("snowmint.v1");

/// The encoded file descriptor set of the snowmint API.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("snowmint_descriptor");
