//! todod, the server: the gRPC API and the HTTP routes over the store, the
//! scheduler, backups, and the listeners and shutdown that `main.rs` wires
//! together. The layers below it are crates of their own: `todod-domain`
//! (the rules, no I/O), `todod-store` (SQLite and PostgreSQL),
//! `todod-telemetry` (the instruments), `todod-engine` (the phase kinds the
//! daemon runs) and `todod-proto` (the wire types clients share).
pub mod api;
pub mod backup;
pub mod config;
pub mod http;
pub mod restore;
pub mod scheduler;
pub mod server;

/// The gRPC types, generated in the `todod-proto` crate that clients share.
pub use todod_proto as proto;
