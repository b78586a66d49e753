//! The phase-worker runtime: runs phase tasks as they become ready, resumes
//! the ones an earlier daemon run left in progress, stops the ones a client
//! cancels, and records how each run ended.
//!
//! It wakes on every committed event (a task became ready, was started or
//! cancelled) and once a second. Each run holds a lease stamped with this
//! daemon's run id; a task in progress under another run's id was left by a
//! daemon that died, and is resumed from its checkpoint.
use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::generation::{self, Ended, GenerationSpec};
use crate::domain::{Kind, Status, TaskId};
use crate::store::{PhaseTask, Store};

/// Phase runs at once; more wait their turn.
pub const MAX_RUNNING: usize = 4;
const TICK: Duration = Duration::from_secs(1);

/// A unique id for this daemon run.
pub fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}-{}", nanos, std::process::id())
}

/// Whether this runtime knows how to run a phase of `kind`.
fn runs(kind: Kind) -> bool {
    kind == Kind::Generation
}

fn auto_start(task: &PhaseTask) -> bool {
    serde_json::from_str::<serde_json::Value>(&task.spec)
        .ok()
        .and_then(|v| v.get("auto_start").and_then(serde_json::Value::as_bool))
        .unwrap_or(true)
}

/// Runs until `shutdown` turns true; then stops every run, leaving them to be
/// resumed by the next daemon.
pub async fn run(store: Store, run_id: String, mut shutdown: watch::Receiver<bool>) {
    let mut committed = store.subscribe();
    let mut running: HashMap<TaskId, watch::Sender<bool>> = HashMap::new();
    let mut active = JoinSet::new();
    loop {
        match store.runnable_phase_tasks().await {
            Ok(tasks) => {
                // Stop runs whose task is no longer in progress (cancelled...).
                running.retain(|id, stop| {
                    let live = tasks
                        .iter()
                        .any(|t| t.id == *id && t.status == Status::InProgress);
                    if !live {
                        let _ = stop.send(true);
                    }
                    live
                });
                for task in tasks.iter().filter(|t| runs(t.kind)) {
                    if running.len() >= MAX_RUNNING || running.contains_key(&task.id) {
                        continue;
                    }
                    let start = match task.status {
                        Status::InProgress => store.take_lease(task.id, &run_id).await,
                        Status::Pending if task.ready && auto_start(task) => {
                            store.start_phase(task.id, &run_id).await.map(|_| true)
                        }
                        _ => Ok(false),
                    };
                    match start {
                        Ok(true) => {
                            let (stop, stopped) = watch::channel(false);
                            running.insert(task.id, stop);
                            active.spawn(run_one(
                                store.clone(),
                                run_id.clone(),
                                task.clone(),
                                stopped,
                            ));
                        }
                        Ok(false) => {}
                        Err(error) => tracing::warn!(task = %task.id, %error, "cannot start phase"),
                    }
                }
            }
            Err(error) => tracing::error!(%error, "cannot list phase tasks"),
        }
        tokio::select! {
            _ = committed.changed() => {}
            _ = tokio::time::sleep(TICK) => {}
            Some(ended) = active.join_next() => {
                if let Ok(id) = ended {
                    running.remove(&id);
                }
            }
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => {
                for stop in running.values() {
                    let _ = stop.send(true);
                }
                while active.join_next().await.is_some() {}
                return;
            }
        }
    }
}

async fn run_one(
    store: Store,
    run_id: String,
    task: PhaseTask,
    stop: watch::Receiver<bool>,
) -> TaskId {
    let id = task.id;
    tracing::info!(task = %id, kind = %task.kind, "phase run starts");
    let ended = match GenerationSpec::parse(&task.spec) {
        Ok(spec) => generation::run(id, spec, store.clone(), stop).await,
        Err(error) => Ended::Failed(error),
    };
    let outcome = match ended {
        Ended::Done(result) => Ok(result),
        Ended::Failed(error) => Err(error),
        Ended::Stopped => {
            tracing::info!(task = %id, "phase run stopped; resumable from its checkpoint");
            return id;
        }
    };
    if let Err(error) = store.finish_phase(id, &run_id, outcome).await {
        tracing::error!(task = %id, %error, "cannot record the end of a phase run");
    }
    id
}
