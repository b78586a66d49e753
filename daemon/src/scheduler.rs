//! The scheduler: fires task schedules when their slot comes, on a clock
//! that tests can drive. A firing that is late (the daemon was down) fires
//! once at start-up for all the slots it missed; each firing is an event.
//!
//! Actions: `reopen` sends a completed plain task back to pending (a
//! recurring chore); `probe` asks each endpoint of a phase task's spec
//! whether it answers (`/health`), and records what each said and how fast;
//! `remeasure` holds a running generation and measures its server again
//! (through the table, [`todod_engine::phase::kinds::remeasure`]). A
//! re-measurement takes a minute or more, so it runs beside the loop, and
//! its slot is not looked at again until it is recorded.
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::watch;

use todod_domain::schedule::{Action, Schedule};
use todod_domain::{Kind, TaskId};
use todod_engine::phase::gate::Gates;
use todod_engine::phase::PhaseStore;
use todod_store::{DueSchedule, FiringClaim, Store};

/// Where the scheduler reads the time, and how it waits for it.
pub trait Clock: Send + Sync + 'static {
    /// Unix milliseconds.
    fn now_ms(&self) -> i64;
    /// Resolves at `at_ms` on this clock, or earlier.
    fn sleep_until(&self, at_ms: i64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// The system's clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        todod_store::now_ms()
    }

    fn sleep_until(&self, at_ms: i64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let wait = (at_ms - self.now_ms()).clamp(0, 60_000) as u64;
        Box::pin(tokio::time::sleep(Duration::from_millis(wait)))
    }
}

/// A clock that moves only when told: schedules of minutes or days, tested
/// in milliseconds.
pub struct ManualClock {
    now: watch::Sender<i64>,
}

impl ManualClock {
    pub fn new(start_ms: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            now: watch::Sender::new(start_ms),
        })
    }

    pub fn set(&self, ms: i64) {
        self.now.send_replace(ms);
    }

    pub fn advance(&self, by: Duration) {
        self.now.send_modify(|now| *now += by.as_millis() as i64);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        *self.now.borrow()
    }

    fn sleep_until(&self, at_ms: i64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            let _ = rx.wait_for(|now| *now >= at_ms).await;
        })
    }
}

/// How often the scheduler looks again when nothing is due sooner.
const IDLE_LOOK: i64 = 60_000;
/// Commits (progress of a busy run) wake it at most this often.
const DEBOUNCE: Duration = Duration::from_millis(200);
/// How long the scheduler waits after a firing it could not record.
const ERROR_BACKOFF: Duration = Duration::from_secs(1);
/// How long an endpoint has to answer a probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the loop looks while a re-measurement's slot is due but taken.
const BUSY_LOOK: i64 = 1_000;

/// How long a claim on a firing lasts (several daemons on one database):
/// a probe's or a reopen's, and a re-measurement's, which holds the run for
/// a minute or more. A daemon that dies mid-firing leaves the slot to the
/// others after this.
const FIRING_TERM: Duration = Duration::from_secs(120);
const REMEASURE_TERM: Duration = Duration::from_secs(900);

/// Runs until `stop` turns true. `holder` is this daemon run's id: on a
/// database several daemons share, each firing is claimed by one of them
/// first (a re-measurement by the daemon whose run holds the task, since
/// it holds that run through its own gate).
pub async fn run(
    store: Store,
    clock: Arc<dyn Clock>,
    gates: Gates,
    telemetry: todod_telemetry::Telemetry,
    holder: String,
    mut stop: watch::Receiver<bool>,
) {
    let mut commits = store.subscribe();
    let http = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .ok();
    // Re-measurements under way, by task; aborted when the daemon stops
    // (their slots are then still due, and fire at the next start).
    let mut measuring = Measuring::default();
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        while let Some(done) = measuring.beside.try_join_next_with_id() {
            measuring.ended(done);
        }
        let now = clock.now_ms();
        let mut failed = false;
        let mut busy = false;
        match store.due_schedules(now).await {
            Ok(due) => {
                for schedule in due {
                    if measuring.tasks.contains(&schedule.task) || measuring.cooling(schedule.task)
                    {
                        busy = true;
                        continue;
                    }
                    let remeasure = schedule.action == Action::Remeasure.as_str();
                    let term = if remeasure {
                        REMEASURE_TERM
                    } else {
                        FIRING_TERM
                    };
                    let claimed = store
                        .claim_firing(
                            schedule.task,
                            schedule.next_fire_at,
                            &holder,
                            term,
                            remeasure,
                        )
                        .await;
                    // On a shared database the slots are counted on the
                    // database's clock: this daemon's may be off by this.
                    let offset = match claimed {
                        Ok(FiringClaim::Mine { database_now }) => {
                            database_now.map_or(0, |db| db - clock.now_ms())
                        }
                        // Another daemon fires it (or it is not due on the
                        // database's clock): look again later, not in a
                        // tight loop.
                        Ok(FiringClaim::Refused) => {
                            busy = true;
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(task = %schedule.task, error = %e, "cannot claim a schedule's firing");
                            failed = true;
                            continue;
                        }
                    };
                    // Only the kinds that take it have one (the API checks).
                    if remeasure {
                        let (store, clock, gates, telemetry) = (
                            store.clone(),
                            clock.clone(),
                            gates.clone(),
                            telemetry.clone(),
                        );
                        let task = schedule.task;
                        measuring.start(task, async move {
                            fire(
                                &store,
                                clock.as_ref(),
                                offset,
                                None,
                                &gates,
                                &telemetry,
                                &schedule,
                            )
                            .await
                        });
                        busy = true;
                        continue;
                    }
                    if let Err(e) = fire(
                        &store,
                        clock.as_ref(),
                        offset,
                        http.as_ref(),
                        &gates,
                        &telemetry,
                        &schedule,
                    )
                    .await
                    {
                        tracing::warn!(task = %schedule.task, error = %e, "schedule firing not recorded");
                        failed = true;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the schedules");
                failed = true;
            }
        }
        if failed {
            // The slot is still due: look again, but not in a tight loop
            // (a full disk, a busy database).
            tokio::select! {
                _ = tokio::time::sleep(ERROR_BACKOFF) => {}
                gone = stop.changed() => {
                    if gone.is_err() {
                        return;
                    }
                }
            }
            continue;
        }
        let next = store.next_schedule_slot().await.ok().flatten();
        let mut wake = next.map_or(now + IDLE_LOOK, |n| n.min(now + IDLE_LOOK));
        if busy {
            // The slot due is a re-measurement's, under way: look now and
            // then for the others, not in a tight loop.
            wake = wake.max(now + BUSY_LOOK);
        }
        let committed = tokio::select! {
            _ = clock.sleep_until(wake) => false,
            Some(done) = measuring.beside.join_next_with_id(), if !measuring.beside.is_empty() => {
                measuring.ended(done);
                continue;
            }
            _ = commits.changed() => true,
            gone = stop.changed() => {
                if gone.is_err() {
                    return;
                }
                continue;
            }
        };
        if committed {
            // A schedule may have been set: look again, but not at every
            // progress commit of a busy run.
            tokio::time::sleep(DEBOUNCE).await;
        }
    }
}

/// Firings that run beside the loop, and whose tasks they are.
#[derive(Default)]
struct Measuring {
    tasks: HashSet<TaskId>,
    by_join: std::collections::HashMap<tokio::task::Id, TaskId>,
    beside: tokio::task::JoinSet<Result<(), todod_store::Error>>,
    /// A re-measurement that could not be recorded is not tried again
    /// before this: each try holds the run.
    not_before: std::collections::HashMap<TaskId, Instant>,
}

/// How long after a re-measurement that could not be recorded the next try
/// waits.
const REMEASURE_BACKOFF: Duration = Duration::from_secs(60);

type Joined = Result<(tokio::task::Id, Result<(), todod_store::Error>), tokio::task::JoinError>;

impl Measuring {
    fn start(
        &mut self,
        task: TaskId,
        firing: impl Future<Output = Result<(), todod_store::Error>> + Send + 'static,
    ) {
        self.tasks.insert(task);
        let handle = self.beside.spawn(firing);
        self.by_join.insert(handle.id(), task);
    }

    fn cooling(&mut self, task: TaskId) -> bool {
        match self.not_before.get(&task) {
            Some(at) if Instant::now() < *at => true,
            Some(_) => {
                self.not_before.remove(&task);
                false
            }
            None => false,
        }
    }

    fn ended(&mut self, done: Joined) {
        let (id, result) = match done {
            Ok((id, result)) => (id, result.map_err(|e| e.to_string())),
            Err(e) => (e.id(), Err(e.to_string())),
        };
        if let Some(task) = self.by_join.remove(&id) {
            self.tasks.remove(&task);
            if let Err(e) = result {
                tracing::warn!(task = %task, error = %e, "re-measurement not recorded");
                self.not_before
                    .insert(task, Instant::now() + REMEASURE_BACKOFF);
            }
        }
    }
}

/// Fires `due` and records it. `offset`: the database's clock minus
/// `clock` (0 alone on a database), so that the slots it passed and the
/// next one are counted on the clock every daemon shares.
async fn fire(
    store: &Store,
    clock: &dyn Clock,
    offset: i64,
    http: Option<&reqwest::Client>,
    gates: &Gates,
    telemetry: &todod_telemetry::Telemetry,
    due: &DueSchedule,
) -> Result<(), todod_store::Error> {
    let now = clock.now_ms() + offset;
    let parsed = Action::parse("action", &due.action)
        .and_then(|action| Schedule::parse(&due.cron, &due.timezone, action, now));
    let schedule = match parsed {
        Ok(s) => s,
        Err(e) => {
            // Stored by an older daemon with other rules: stop it, say why.
            let outcome = json!({"error": e.to_string()});
            return store
                .record_firing(due.task, due.next_fire_at, None, &outcome, false)
                .await;
        }
    };
    let Some(firing) = schedule.due(due.next_fire_at, now) else {
        return Ok(());
    };
    let mut outcome = json!({
        "action": schedule.action.as_str(),
        "slot": todod_domain::time::rfc3339(firing.slot_ms),
        "missed_slots": firing.slots - 1,
        "next": firing.next_ms.map(todod_domain::time::rfc3339),
    });
    let mut reopen = false;
    let mut next_ms = firing.next_ms;
    match schedule.action {
        // Whether it is still completed is the store's to say, in the
        // firing's own transaction.
        Action::Reopen => reopen = due.kind == Kind::TODO,
        Action::Probe => {
            outcome["endpoints"] = probe(http, due.spec.as_deref()).await;
        }
        Action::Remeasure => {
            let found = todod_engine::phase::kinds::remeasure(
                &PhaseStore::new(store.clone()),
                gates,
                telemetry,
                due.task,
            )
            .await;
            if let (Value::Object(out), Value::Object(found)) = (&mut outcome, found) {
                out.extend(found);
            }
            // The next slot is the first after the measurement ended: a
            // measurement longer than the schedule's interval must not be
            // followed at once by another hold of the run.
            next_ms = schedule.next_after(clock.now_ms() + offset);
            outcome["next"] = json!(next_ms.map(todod_domain::time::rfc3339));
        }
    }
    tracing::info!(task = %due.task, action = schedule.action.as_str(), missed = firing.slots - 1, "schedule fired");
    store
        .record_firing(due.task, due.next_fire_at, next_ms, &outcome, reopen)
        .await
}

/// Each endpoint of a spec: does `/health` answer 2xx, and how fast.
async fn probe(http: Option<&reqwest::Client>, spec: Option<&str>) -> Value {
    let endpoints: Vec<String> = spec
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|v| v.get("endpoints").cloned())
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let Some(http) = http else {
        return json!({"error": "no HTTP client"});
    };
    let mut answers = Vec::new();
    for endpoint in endpoints {
        let url = format!("{}/health", endpoint.trim_end_matches('/'));
        let started = Instant::now();
        let answer = match http.get(&url).send().await {
            Ok(r) => json!({
                "endpoint": endpoint,
                "ok": r.status().is_success(),
                "status": r.status().as_u16(),
                "ms": started.elapsed().as_millis() as u64,
            }),
            Err(e) => json!({
                "endpoint": endpoint,
                "ok": false,
                "error": if e.is_timeout() { "timed out".to_string() } else if e.is_connect() { "cannot connect".to_string() } else { "request failed".to_string() },
                "ms": started.elapsed().as_millis() as u64,
            }),
        };
        answers.push(answer);
    }
    Value::Array(answers)
}
