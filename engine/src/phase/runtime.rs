//! The phase runtime: runs phase tasks as they become ready, resumes the ones
//! an earlier daemon run left in progress, stops the ones a client pauses or
//! cancels, and records how each run ended.
//!
//! It wakes on every committed event and once a second. Each run has its own
//! attempt token, stamped on the task; the store refuses a checkpoint, a
//! progress report or an end from an attempt that no longer holds the task, in
//! the same transaction. A task is not started again until its previous run
//! has ended, so two runs never write the same files. A run that panics fails
//! its task with the panic's message; a run whose end cannot be recorded
//! retries with backoff instead of being started again.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::files::SharedFs;
use super::lease_keeper::{renew_every, LeaseKeeper};
use super::reach::Unreached;
use super::units::{self, Look, Mine, Start, Unit};
use super::{kinds, Boundaries, Ended, RunContext};
use crate::phase::PhaseStore;
use todod_domain::{Status, TaskId};
use todod_store::{Error as StoreError, PhaseTask, ShardRow};

/// Phase runs at once; more wait their turn.
pub const MAX_RUNNING: usize = 4;
const TICK: Duration = Duration::from_secs(1);
/// How long after a commit the runtime looks: the commits of a burst (an
/// agent's writes, a run's checkpoints) then cost one look between them, not
/// a read beside each write.
const LOOK_AFTER: Duration = Duration::from_millis(10);
const LONGEST_BACKOFF: Duration = Duration::from_secs(60);
/// A unique id for this daemon run, which says where it runs to an
/// operator reading who holds a task: `HOST-PID-NANOS`.
pub fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let host: String = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .take(64)
        .collect();
    let host = if host.is_empty() { "host".into() } else { host };
    format!("{host}-{}-{nanos:x}", std::process::id())
}

/// A new attempt token of this daemon run: `RUN.N`.
fn new_attempt(run_id: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{run_id}.{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// What the runtime needs besides the store.
#[derive(Clone)]
pub struct Settings {
    pub run_id: String,
    pub fs: SharedFs,
    pub bounds: Arc<Boundaries>,
    /// Shared with the scheduler, which holds a run to re-measure.
    pub gates: super::gate::Gates,
    /// The instruments the runs update.
    pub telemetry: todod_telemetry::Telemetry,
    /// The inference servers the daemon runs for the runs' specs.
    pub servers: super::servers::Servers,
}

/// A run in the table: its attempt and the switch that stops it.
struct Running {
    attempt: String,
    stop: watch::Sender<bool>,
    /// When its lease was taken, on this machine's monotonic clock.
    taken: tokio::time::Instant,
}

/// Starts what `start` says, if the store agrees; the run's unit and
/// attempt when it started one.
async fn begin(store: &PhaseStore, start: Start, run_id: &str) -> Option<(Unit, String)> {
    let attempt = new_attempt(run_id);
    let (unit, taken) = match start {
        Start::Begin(unit) => (
            unit,
            store
                .start_phase(unit.task, Some(&attempt))
                .await
                .map(|_| true),
        ),
        Start::Open(task) => {
            let opened = store.start_phase(task, None).await;
            if let Err(error) = opened {
                if !matches!(error, StoreError::Rule(_) | StoreError::Fenced { .. }) {
                    tracing::warn!(%task, %error, "cannot start phase");
                }
            }
            return None;
        }
        Start::Take(unit) => (unit, store.take_lease(unit.task, &attempt).await),
        Start::TakeShard(unit) => {
            let shard = unit.shard.expect("a shard's unit");
            (unit, store.take_shard(unit.task, shard, &attempt).await)
        }
    };
    match taken {
        Ok(true) => Some((unit, attempt)),
        Ok(false) => None,
        // Another change won the race (the task was cancelled or a
        // dependency reopened, or another daemon on a shared database
        // started it): nothing to start.
        Err(StoreError::Rule(_) | StoreError::Fenced { .. }) => None,
        Err(error) => {
            tracing::warn!(%unit, %error, "cannot start phase");
            None
        }
    }
}

/// Runs until `shutdown` turns true; then stops every run, leaving them to be
/// resumed by the next daemon.
pub async fn run(store: PhaseStore, settings: Settings, mut shutdown: watch::Receiver<bool>) {
    let mut committed = store.subscribe();
    let mut running: HashMap<Unit, Running> = HashMap::new();
    let mut active: JoinSet<Unit> = JoinSet::new();
    let mut unreached = Unreached::default();
    // The leases of this daemon's runs, renewed well before they end (on a
    // database several daemons share, an expired one is taken).
    let leases = LeaseKeeper::start(store.clone(), settings.run_id.clone());
    // Looks at least this often: a run whose lease may have lapsed is
    // stopped within a third of the term.
    let tick = TICK.min(renew_every(&store));
    loop {
        leases.set_runs(running.len());
        if store.is_shared() {
            for (unit, run) in &running {
                if leases.lapsed(&store, run.taken) && !*run.stop.borrow() {
                    tracing::error!(%unit, attempt = %run.attempt,
                        "the run's lease may have expired (renewals failed for a whole term); stopping it");
                    let _ = run.stop.send(true);
                }
            }
        }
        // Stopping: start nothing more; the select below stops the runs.
        let tasks = if *shutdown.borrow() {
            Ok(Vec::new())
        } else {
            store.runnable_phase_tasks().await
        };
        match tasks {
            Ok(tasks) => {
                let table = (&mut running, &mut active, &mut unreached);
                look(&store, &settings, &tasks, table).await
            }
            Err(error) => tracing::error!(%error, "cannot list phase tasks"),
        }
        tokio::select! {
            _ = committed.changed() => {
                tokio::select! {
                    _ = tokio::time::sleep(LOOK_AFTER) => {}
                    _ = super::stopped(&mut shutdown) => {}
                }
                committed.borrow_and_update();
            }
            _ = tokio::time::sleep(tick) => {}
            Some(ended) = active.join_next() => {
                match ended {
                    Ok(unit) => { running.remove(&unit); }
                    // run_one catches panics; a join error means it was aborted.
                    Err(error) => tracing::error!(%error, "a phase run was lost"),
                }
            }
            _ = super::stopped(&mut shutdown) => {
                for run in running.values() {
                    let _ = run.stop.send(true);
                }
                // The runs stop at their next checkpoint; the keeper renews
                // their leases meanwhile, or another daemon would take a task
                // whose run is still finishing its last checkpoint here.
                while active.join_next().await.is_some() {}
                drop(leases);
                // Stopped at their last checkpoints: handed back at once,
                // not when the leases would have expired.
                if let Err(error) = store.release_leases(&settings.run_id).await {
                    tracing::warn!(%error, "cannot hand the runs' leases back");
                }
                return;
            }
        }
    }
}

/// One look at the phase tasks: stops the runs whose unit moved on (paused,
/// cancelled, taken) or that this daemon should hand back, and starts what
/// is to run.
async fn look(
    store: &PhaseStore,
    settings: &Settings,
    tasks: &[PhaseTask],
    (running, active, unreached): (
        &mut HashMap<Unit, Running>,
        &mut JoinSet<Unit>,
        &mut Unreached,
    ),
) {
    let sharded: Vec<TaskId> = tasks
        .iter()
        .filter(|t| t.status == Status::InProgress && units::shards_in(&t.spec) > 1)
        .map(|t| t.id)
        .collect();
    let mut shards: HashMap<TaskId, Vec<ShardRow>> = HashMap::new();
    match store.shards_of(&sharded).await {
        Ok(rows) => {
            for (task, row) in rows {
                shards.entry(task).or_default().push(row);
            }
        }
        Err(error) => {
            tracing::error!(%error, "cannot list the shards of phase tasks");
            return;
        }
    }
    // Tell runs whose unit moved on to stop; they stay in the table until
    // they have ended.
    for (unit, run) in running.iter() {
        if !units::holds(*unit, &run.attempt, tasks, &shards) {
            let _ = run.stop.send(true);
        }
    }
    let (daemons, cannot_reach) = sharers(store, &sharded).await;
    unreached.keep_only(&tasks.iter().map(|t| t.id).collect());
    // Tasks this daemon found out of reach take none of its room (copied
    // only then: the look runs after every burst of commits).
    let reachable: std::borrow::Cow<[PhaseTask]> =
        if tasks.iter().any(|t| unreached.out_of_reach(t.id)) {
            tasks
                .iter()
                .filter(|t| !unreached.out_of_reach(t.id))
                .cloned()
                .collect()
        } else {
            tasks.into()
        };
    let mine: Vec<Mine> = running
        .iter()
        .map(|(unit, run)| Mine {
            unit: *unit,
            stopping: *run.stop.borrow(),
        })
        .collect();
    let (starts, stops) = units::plan(&Look {
        tasks: &reachable,
        shards: &shards,
        mine: &mine,
        daemons,
        cannot_reach: &cannot_reach,
        shared: store.is_shared(),
        run_id: &settings.run_id,
        room: MAX_RUNNING.saturating_sub(running.len()),
    });
    for unit in stops {
        if let Some(run) = running.get(&unit) {
            tracing::info!(%unit, daemons, "more daemons share the task: handing this shard back");
            let _ = run.stop.send(true);
        }
    }
    for start in starts {
        let task = match start {
            Start::Begin(u) | Start::Take(u) | Start::TakeShard(u) => u.task,
            Start::Open(task) => task,
        };
        let Some(task) = tasks.iter().find(|t| t.id == task) else {
            continue;
        };
        // On a shared database, a daemon that cannot reach the task's
        // directories leaves it (and its shards) to the others.
        if !unreached.may_claim(store, task.id, &settings.run_id).await {
            continue;
        }
        // The lease's term is counted from inside the write, after this.
        let taken = tokio::time::Instant::now();
        let Some((unit, attempt)) = begin(store, start, &settings.run_id).await else {
            continue;
        };
        let (stop, stopped) = watch::channel(false);
        let context = RunContext {
            task: task.id,
            kind: task.kind,
            attempt: attempt.clone(),
            shard: unit.shard,
            spec: task.spec.clone(),
            store: store.clone(),
            stop: stopped,
            fs: settings.fs.clone(),
            bounds: settings.bounds.clone(),
            gates: settings.gates.clone(),
            telemetry: settings.telemetry.clone(),
            servers: settings.servers.clone(),
        };
        running.insert(
            unit,
            Running {
                attempt,
                stop,
                taken,
            },
        );
        active.spawn(run_one(task.kind, context));
    }
}

/// How many daemons share the shards of the `sharded` tasks: those alive
/// on a shared database (this one counted), and by task those of them
/// that said they cannot reach it.
async fn sharers(store: &PhaseStore, sharded: &[TaskId]) -> (usize, HashMap<TaskId, usize>) {
    if !store.is_shared() || sharded.is_empty() {
        return (1, HashMap::new());
    }
    let daemons = match store.live_daemons().await {
        Ok(n) => n.max(1),
        Err(error) => {
            tracing::warn!(%error, "cannot count the daemons alive");
            1
        }
    };
    let away = store
        .unreachable_daemons(sharded)
        .await
        .unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot count the daemons out of reach");
            HashMap::new()
        });
    (daemons, away)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

/// One attempt of a task of `kind`, as its kind runs it.
async fn run_kind(kind: todod_domain::Kind, context: RunContext) -> Ended {
    match kinds::get(kind) {
        Some(k) => k.run(context).await,
        None => Ended::broke_off(format!("{kind} tasks are not run by the daemon")),
    }
}

/// Runs the attempt on a thread of its own, with a single-threaded runtime:
/// its requests, their connections and its committer then wake each other
/// without crossing threads, which on a busy run is most of its CPU. A run
/// with more requests in flight than one core keeps up with (its kind says:
/// `PhaseKind::threads`) gets a runtime of that many threads instead. The
/// API and the store stay on the daemon's runtime. `Err` is a panic's
/// message.
async fn on_own_thread(kind: todod_domain::Kind, context: RunContext) -> Result<Ended, String> {
    let threads = match kinds::get(kind) {
        Some(k) => k.threads(&context).await,
        None => 1,
    };
    let (done, ended) = tokio::sync::oneshot::channel();
    let name = match context.shard {
        Some(shard) => format!("{kind}-{}-{}", context.task, shard.index),
        None => format!("{kind}-{}", context.task),
    };
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        let mut builder = if threads > 1 {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(threads);
            b
        } else {
            tokio::runtime::Builder::new_current_thread()
        };
        let runtime = match builder.enable_all().build() {
            Ok(runtime) => runtime,
            Err(e) => {
                let _ = done.send(Ok(Ended::broke_off(format!(
                    "cannot start the run's runtime: {e}"
                ))));
                return;
            }
        };
        let run = std::panic::AssertUnwindSafe(run_kind(kind, context)).catch_unwind();
        let ended = if threads > 1 {
            // On a runtime of several threads, the run itself (its committer
            // above all) goes on one of them: polled by `block_on` it would
            // sit on this thread, one more beside the workers, and every
            // record a request hands it would wake it across threads (a
            // futex and a context switch per record at 16k in flight).
            match runtime.block_on(runtime.spawn(run)) {
                Ok(ended) => ended,
                Err(e) => Err(if e.is_panic() {
                    e.into_panic()
                } else {
                    Box::new("the run was cancelled")
                }),
            }
        } else {
            runtime.block_on(run)
        };
        let _ = done.send(ended.map_err(|payload| panic_message(&*payload)));
    });
    if let Err(e) = spawned {
        return Ok(Ended::broke_off(format!(
            "cannot start the run's thread: {e}"
        )));
    }
    ended
        .await
        .unwrap_or_else(|_| Err("the run's thread ended without a word".into()))
}

/// Tells the kinds of the tasks `context.task` depends on that it is
/// completing with `result` (before the completion is committed, so that a
/// kill in between has the next run tell them again). What they do with it
/// (a feasibility writes its report again) never fails the task.
async fn tell_dependencies(context: &RunContext, kind: todod_domain::Kind, result: &str) {
    let task = match context.store.get_task(context.task).await {
        Ok(task) => task,
        Err(error) => {
            tracing::warn!(task = %context.task, %error, "cannot read the task to tell its dependencies");
            return;
        }
    };
    for dep in task.depends_on {
        let Ok(dependency) = context.store.get_task(dep).await else {
            continue;
        };
        let Some(dep_kind) = kinds::get(dependency.kind) else {
            continue;
        };
        if let Err(error) = dep_kind
            .dependent_completed(
                &context.store,
                context.fs.as_ref(),
                dep,
                (context.task, kind, result),
            )
            .await
        {
            tracing::warn!(task = %dep, dependent = %context.task, %error, "a dependency could not take its dependent's result");
        }
    }
}

/// Runs one attempt and records its end. Returns its unit once the run is
/// over and its end recorded (or refused), so that the unit can be started
/// again.
async fn run_one(kind: todod_domain::Kind, context: RunContext) -> Unit {
    let id = context.task;
    let unit = Unit {
        task: id,
        shard: context.shard,
    };
    tracing::info!(%unit, %kind, attempt = %context.attempt, "phase run starts");
    let ended = match on_own_thread(kind, context.clone()).await {
        Ok(ended) => ended,
        Err(message) => {
            tracing::error!(task = %id, %message, "phase run panicked");
            Ended::broke_off(format!(
                "the {kind} run crashed (a bug in todod): {message}"
            ))
        }
    };
    let (outcome, result, state) = match ended {
        Ended::Completed { result, state } => (Ok(()), Some(result), state),
        Ended::Failed { error, state } => {
            tracing::warn!(task = %id, %error, "phase run failed");
            (Err(error), None, state)
        }
        Ended::Refused {
            error,
            result,
            state,
        } => {
            tracing::warn!(task = %id, %error, "phase run refused");
            (Err(error), Some(result), state)
        }
        Ended::Stopped => {
            tracing::info!(%unit, "phase run stopped; resumable from its checkpoint");
            // Stopped at its last checkpoint: another daemon may take it on
            // at once (a shard handed back to share the work out, above all).
            if context.store.is_shared() {
                if let Err(error) = context.store.release_attempt(id, &context.attempt).await {
                    tracing::warn!(%unit, %error, "cannot hand the stopped run's lease back");
                }
            }
            return unit;
        }
    };
    if let (Ok(()), Some(result), None) = (&outcome, &result, context.shard) {
        tell_dependencies(&context, kind, result).await;
    }
    let state = state.map(|s| s.to_json());
    let mut wait = Duration::from_secs(1);
    let mut stop = context.stop.clone();
    loop {
        match context
            .store
            .finish_phase(
                id,
                &context.attempt,
                outcome.clone(),
                result.as_deref(),
                state.as_deref(),
            )
            .await
        {
            Ok(()) => {
                tracing::info!(%unit, ok = outcome.is_ok(), "phase run ended");
                return unit;
            }
            Err(StoreError::Fenced { .. }) => return unit,
            Err(error) => {
                tracing::error!(%unit, %error, ?wait, "cannot record the end of a phase run; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = super::stopped(&mut stop) => return unit,
                }
                wait = (wait * 2).min(LONGEST_BACKOFF);
            }
        }
    }
}
