//! The store as the engine sees it: [`PhaseStore`], a facade over
//! [`todod_store::Store`] that holds only what the runtime and the phase
//! kinds use (29 of the store's 67 public methods).
//!
//! The engine names `todod_store::Store` here and nowhere else, so a phase
//! that wants more of the store (the agent's todo list, plans, logins,
//! backups) does not compile until this file says why it may. Every method
//! passes straight through: the facade adds no state, no retry and no
//! second meaning, and the store's own documentation holds for each.
use std::collections::HashMap;
use std::time::Duration;

use todod_domain::shards::Shard;
use todod_domain::TaskId;
use todod_store::{Error, PhaseTask, ShardRow, Store, TaskView};
use tokio::sync::watch;

/// What the engine may ask of the store: task reads, phase leases and
/// shards, checkpoints, progress and ends, and the few events a run reads
/// back (calibrations, re-measurements, unreachable daemons), and the
/// fork of a frozen holder's files.
#[derive(Clone)]
pub struct PhaseStore {
    store: Store,
}

impl PhaseStore {
    /// The engine's view of `store` (a handle: clones share one database).
    pub fn new(store: Store) -> PhaseStore {
        PhaseStore { store }
    }

    // --- the graph, read ----------------------------------------------

    pub async fn get_task(&self, id: TaskId) -> Result<TaskView, Error> {
        self.store.get_task(id).await
    }

    pub async fn dependents(&self, id: TaskId) -> Result<Vec<TaskView>, Error> {
        self.store.dependents(id).await
    }

    /// The output paths task `id` has claimed.
    pub async fn task_claims(&self, id: TaskId) -> Result<Vec<String>, Error> {
        self.store.task_claims(id).await
    }

    /// True when several daemons may share this database (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        self.store.is_shared()
    }

    /// The sequence number of the newest committed event.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.store.subscribe()
    }

    // --- runs: start, leases, shards, end -----------------------------

    pub async fn runnable_phase_tasks(&self) -> Result<Vec<PhaseTask>, Error> {
        self.store.runnable_phase_tasks().await
    }

    pub async fn start_phase(&self, id: TaskId, attempt: Option<&str>) -> Result<TaskView, Error> {
        self.store.start_phase(id, attempt).await
    }

    /// How long a lease lasts before another daemon may take it over.
    pub fn lease(&self) -> Duration {
        self.store.lease()
    }

    pub async fn take_lease(&self, id: TaskId, attempt: &str) -> Result<bool, Error> {
        self.store.take_lease(id, attempt).await
    }

    pub async fn renew_leases(&self, run: &str) -> Result<usize, Error> {
        self.store.renew_leases(run).await
    }

    pub async fn release_leases(&self, run: &str) -> Result<usize, Error> {
        self.store.release_leases(run).await
    }

    pub async fn shards_of(&self, tasks: &[TaskId]) -> Result<Vec<(TaskId, ShardRow)>, Error> {
        self.store.shards_of(tasks).await
    }

    pub async fn shard_states(&self, task: TaskId) -> Result<Vec<(u32, Option<String>)>, Error> {
        self.store.shard_states(task).await
    }

    pub async fn take_shard(
        &self,
        task: TaskId,
        shard: Shard,
        attempt: &str,
    ) -> Result<bool, Error> {
        self.store.take_shard(task, shard, attempt).await
    }

    pub async fn release_attempt(&self, task: TaskId, attempt: &str) -> Result<(), Error> {
        self.store.release_attempt(task, attempt).await
    }

    pub async fn live_daemons(&self) -> Result<usize, Error> {
        self.store.live_daemons().await
    }

    pub async fn unreachable_daemons(
        &self,
        tasks: &[TaskId],
    ) -> Result<HashMap<TaskId, usize>, Error> {
        self.store.unreachable_daemons(tasks).await
    }

    pub async fn note_unreachable(
        &self,
        task: TaskId,
        run_id: &str,
        why: &str,
    ) -> Result<(), Error> {
        self.store.note_unreachable(task, run_id, why).await
    }

    /// A run took output files over from a process that still held them.
    pub async fn note_forked(
        &self,
        task: TaskId,
        attempt: &str,
        files: &[String],
    ) -> Result<(), Error> {
        self.store.note_forked(task, attempt, files).await
    }

    /// Something happened to server `name`, which `task` uses.
    pub async fn note_server(&self, task: TaskId, name: &str, what: &str) -> Result<(), Error> {
        self.store.note_server(task, name, what).await
    }

    pub async fn report_progress(
        &self,
        id: TaskId,
        attempt: &str,
        progress: &str,
    ) -> Result<(), Error> {
        self.store.report_progress(id, attempt, progress).await
    }

    pub async fn finish_phase(
        &self,
        id: TaskId,
        attempt: &str,
        outcome: Result<(), String>,
        result: Option<&str>,
        state: Option<&str>,
    ) -> Result<(), Error> {
        self.store
            .finish_phase(id, attempt, outcome, result, state)
            .await
    }

    // --- checkpoints ---------------------------------------------------

    pub async fn load_phase_state(
        &self,
        task: TaskId,
        shard: Option<u32>,
    ) -> Result<Option<String>, Error> {
        self.store.load_phase_state(task, shard).await
    }

    /// The checkpoint of a task written before checkpoints were documents.
    pub async fn legacy_checkpoint(
        &self,
        task: TaskId,
    ) -> Result<Option<(Vec<u64>, Vec<String>)>, Error> {
        self.store.legacy_checkpoint(task).await
    }

    pub async fn commit_phase_state(
        &self,
        task: TaskId,
        attempt: &str,
        state: &str,
        duplicates: Option<(u32, &[u64])>,
    ) -> Result<(), Error> {
        self.store
            .commit_phase_state(task, attempt, state, duplicates)
            .await
    }

    pub async fn commit_phase_batch(
        &self,
        task: TaskId,
        attempt: &str,
        state: &str,
        progress: Option<&str>,
        notice: Option<(&str, &str)>,
    ) -> Result<(), Error> {
        self.store
            .commit_phase_batch(task, attempt, state, progress, notice)
            .await
    }

    pub async fn phase_duplicates(
        &self,
        task: TaskId,
        pass: u32,
        from: u64,
    ) -> Result<Vec<u64>, Error> {
        self.store.phase_duplicates(task, pass, from).await
    }

    // --- events a run reads back ---------------------------------------

    pub async fn last_calibration(
        &self,
        id: TaskId,
        since_ms: i64,
    ) -> Result<Option<String>, Error> {
        self.store.last_calibration(id, since_ms).await
    }

    pub async fn last_remeasure(&self, id: TaskId, since_ms: i64) -> Result<Option<String>, Error> {
        self.store.last_remeasure(id, since_ms).await
    }

    pub async fn remeasure_held_ms(&self, id: TaskId, since_ms: i64) -> Result<i64, Error> {
        self.store.remeasure_held_ms(id, since_ms).await
    }
}
