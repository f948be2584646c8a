//! The generated gRPC types of `proto/snowmint/v1/snowmint.proto`, their proto3 JSON mapping
//! (serde, by pbjson: 64-bit integers as strings, lowerCamelCase names, both spellings of a
//! name accepted), and the file descriptor set served by reflection.

#![allow(clippy::all, missing_docs)]

tonic::include_proto!("snowmint.v1");
include!(concat!(env!("OUT_DIR"), "/snowmint.v1.serde.rs"));

/// The encoded file descriptor set of the snowmint API.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("snowmint_descriptor");
