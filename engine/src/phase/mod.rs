//! Phase tasks the daemon runs itself.
//!
//! - [`kind`] is the seam a phase kind implements ([`kind::PhaseKind`]), and
//!   [`kinds`] the one table that lists them, a module each: the API, the
//!   runtime, the plan file and the scheduler ask the table, never a kind.
//! - [`runtime`] starts ready phase tasks, resumes the ones an earlier daemon
//!   run left in progress, stops the ones a client pauses or cancels, and
//!   records how each run ended. Each run has its own attempt token; the
//!   store refuses a checkpoint or an end from any other.
//! - [`record_pipeline`] is the exactly-once record pipeline the record phases stand
//!   on, over [`files`] (output files created exclusively, with identities),
//!   [`lines`] (bounded line reading, the input survey), [`cursor`] (which
//!   lines are committed) and [`state`] (the checkpoint document).
//! - [`plan_step`] is what a kind contributes to the plan file.
//! - [`phase_store`] is the store as the engine sees it ([`PhaseStore`]):
//!   only the reads and writes runs make, the one place that names the
//!   store's own type.
//! - One module per kind (`kinds/`) says how to read, process and write
//!   its records.
pub(crate) mod cpu_pass;
pub mod cursor;
pub mod files;
pub mod gate;
pub mod kind;
pub mod kinds;
pub(crate) mod lease_keeper;
pub mod lines;
pub(crate) mod model;
pub mod phase_store;
pub mod places;
pub(crate) mod plan_step;
pub(crate) mod reach;
pub mod record_pipeline;
pub mod runtime;
pub(crate) mod sample;
pub mod servers;
pub(crate) mod shards;
pub mod spec;
pub mod state;
pub(crate) mod units;

use std::sync::Arc;

use tokio::sync::watch;

pub use phase_store::PhaseStore;
pub use spec::Boundaries;
pub use state::PhaseState;
use todod_domain::TaskId;

/// What a phase run is given.
#[derive(Clone)]
pub struct RunContext {
    pub task: TaskId,
    /// The task's phase kind.
    pub kind: todod_domain::Kind,
    /// This run's token: the store takes checkpoints and the end only from it.
    pub attempt: String,
    /// The shard of the task this run runs, if the task is sharded; `None`
    /// runs the whole task (or, for a sharded one, assembles its shards).
    pub shard: Option<todod_domain::shards::Shard>,
    /// The task's spec, as the registry checked it at creation.
    pub spec: String,
    pub store: PhaseStore,
    /// Turns true when the run must stop (cancel, pause, shutdown).
    pub stop: watch::Receiver<bool>,
    pub fs: files::SharedFs,
    pub bounds: Arc<Boundaries>,
    /// Where a run that sends requests puts its gate (see [`gate`]).
    pub gates: gate::Gates,
    /// Where the run's requests and commits are counted for `/metrics`.
    pub telemetry: todod_telemetry::Telemetry,
    /// The inference servers the daemon runs for specs that name one.
    pub servers: servers::Servers,
}

/// How a run ended.
#[derive(Debug)]
pub enum Ended {
    /// The task completes with this result (JSON); `state`, if any, is
    /// committed with it.
    Completed {
        result: String,
        state: Option<PhaseState>,
    },
    /// The task fails with this error, in plain words. With a `state`, the
    /// failure is the verdict of a finished pass (committed with it); without,
    /// the run broke off and a retry resumes from the checkpoint.
    Failed {
        error: String,
        state: Option<PhaseState>,
    },
    /// The task fails with this error, and keeps the result that shows why
    /// (a feasibility no-go keeps its measurements).
    Refused {
        error: String,
        result: String,
        state: Option<PhaseState>,
    },
    /// Stopped from outside; resumable from the checkpoint.
    Stopped,
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

impl Ended {
    pub fn broke_off(error: impl Into<String>) -> Ended {
        Ended::Failed {
            error: error.into(),
            state: None,
        }
    }
}
