//! The todod gRPC API as a client needs it: the generated `todod.v1` types
//! and stubs, the codec both ends use, and where a daemon on this machine
//! keeps its state (socket, token), without the daemon's own dependencies
//! (SQLite, HTTP clients, tokenizers).
//!
//! The generated types stay at the API edge: the daemon's `api::convert`
//! turns them into domain types by hand.
#![allow(clippy::all, missing_docs)]

pub mod codec;
pub mod json;
pub mod lease;
pub mod local;
pub mod readable;
pub mod results;

tonic::include_proto!("todod.v1");

/// Encoded descriptors of `todod.v1`, served by gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("todod_v1_descriptor");
