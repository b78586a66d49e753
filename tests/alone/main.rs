//! Tests that time the machine: a real server's throughput and a
//! projection's interval held against a run's wall time. They are a test
//! binary of their own, which cargo runs before (never beside) the e2e
//! binary, and each holds `MACHINE` while it runs, so no other test shares
//! the machine with their timings.
mod feasibility_intervals;
mod real_server;
mod real_server_sweep;

/// Held for the whole of each test here: one at a time.
static MACHINE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
