//! Generated gRPC types for `todod.v1`. They stay at the API edge: `api::convert`
//! turns them into domain types by hand.
#![allow(clippy::all, missing_docs)]

tonic::include_proto!("todod.v1");

/// Encoded descriptors of `todod.v1`, served by gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("todod_v1_descriptor");
