//! The generated gRPC client and messages of `snowmint.v1`, for callers that want the raw
//! calls without the client's failover, coalescing or buffer.

#![allow(clippy::all, missing_docs)]

tonic::include_proto!("snowmint.v1");
