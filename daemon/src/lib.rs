//! todod: a durable, SQLite-backed todo graph served over gRPC, whose phase
//! tasks the daemon runs itself.
//!
//! Layers, from the inside out: [`domain`] (the rules, no I/O), [`store`]
//! (SQLite), [`api`] (gRPC), [`server`] (listeners and shutdown), [`config`]
//! (where state lives). The binary in `main.rs` only wires them together.
pub mod api;
pub mod backup;
pub mod chat_template;
pub mod config;
pub mod domain;
pub mod failpoint;
pub mod http;
pub mod inference;
pub mod messages;
pub mod phase;
pub mod plan_file;
pub mod scheduler;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod tokenizer;

#[cfg(test)]
pub(crate) mod test_fixtures;

/// The gRPC types, generated in the `todod-proto` crate that clients share.
pub use todod_proto as proto;
