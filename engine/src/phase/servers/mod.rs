//! Inference servers the daemon runs itself: a generation's or a
//! feasibility's `endpoints` may name a server of its spec
//! (`server:local`) instead of a URL, and the daemon starts it, calls it
//! ready only when the deep probe answers, watches it, restarts it when it
//! dies or stops answering, and stops it when no task needs it.
//!
//! One [`Servers`] per daemon keeps them: a server is one process group per
//! name and spec (the tasks that name the same one share it), its output
//! in `STATE/servers/KEY.log`, its pid in `STATE/servers/KEY.json`, which
//! the next daemon reads after a kill -9 to stop what was left running. What
//! happens to it is written in the history of each task that uses it.
mod probe;
mod process;
pub mod spec;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use todod_domain::TaskId;

use super::phase_store::PhaseStore;
pub use spec::{check_all, check_allowed, named, ServerSpec, ENDPOINT_PREFIX};

/// The longest wait between two restarts, however many came before.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How long a probe that failed waits for the process's exit, which the
/// failure may have been (the connection closes before the exit is reaped).
const EXIT_SETTLES: Duration = Duration::from_millis(500);

/// Deep probes in a row that must go unanswered before a ready server is
/// restarted.
const PROBES_MISSED: u32 = 2;

/// How soon a probe follows one that failed.
const PROBE_AGAIN: Duration = Duration::from_secs(1);

/// How often a starting server is asked whether it is ready.
const READY_POLL: Duration = Duration::from_millis(250);

/// Where a server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Starting,
    /// Answering; `generation` counts the starts that got this far.
    Ready {
        generation: u64,
    },
    /// Gone, to be started again.
    Restarting,
    /// Its restarts are spent: why, in words.
    GaveUp(String),
    Stopped,
}

/// The servers of one daemon.
#[derive(Clone)]
pub struct Servers {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    store: PhaseStore,
    table: Mutex<HashMap<String, Arc<Supervised>>>,
    /// True once what an earlier daemon left running is stopped.
    swept: watch::Receiver<bool>,
    shutdown: watch::Sender<bool>,
    loops: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    http: reqwest::Client,
    /// The daemon's runtime: a server outlives the run that started it
    /// (each run has a runtime of its own, dropped when the run ends).
    runtime: tokio::runtime::Handle,
    /// `todod_server_up` and `todod_server_restarts` by server.
    telemetry: todod_telemetry::Telemetry,
}

/// One server and its supervision.
struct Supervised {
    name: String,
    key: String,
    spec: ServerSpec,
    url: String,
    port: u16,
    state: watch::Sender<State>,
    /// The tasks that use it, with how many runs of each.
    users: watch::Sender<BTreeMap<TaskId, usize>>,
    /// What `todoctl servers` shows beside its state.
    status: Mutex<Status>,
    /// Its `todod_server_up` and `todod_server_restarts_total`.
    figures: todod_telemetry::ServerInstruments,
    /// A run's request failed on it: probe it now, not at the next turn.
    probe_now: tokio::sync::Notify,
    /// Numbers the deep probes as they start.
    probes_started: std::sync::atomic::AtomicU64,
    /// The number of the latest probe it answered, so that a run whose
    /// request failed learns whether the server is well after the failure
    /// (the failure is the record's) or not (it is restarted, and the
    /// request sent again): a probe started before the failure says
    /// nothing of it.
    probes_answered: watch::Sender<u64>,
    /// Set, under the table's lock, once it is to stop for want of users:
    /// a new use then waits for its end and starts another (never two at
    /// once, and never one whose stop is under way).
    retiring: std::sync::atomic::AtomicBool,
}

/// What a server's loop keeps for views.
#[derive(Debug, Default, Clone)]
struct Status {
    pid: u32,
    ready_since: Option<Instant>,
    restarts: u64,
    last_exit: String,
}

/// A server as `ListServers` shows it.
#[derive(Debug, Clone)]
pub struct ServerView {
    pub name: String,
    pub id: String,
    pub state: &'static str,
    pub pid: u32,
    pub url: String,
    pub uptime: Duration,
    pub restarts: u64,
    pub last_exit: String,
    pub tasks: Vec<TaskId>,
    pub devices: u32,
}

impl State {
    /// Its word in views.
    pub fn word(&self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Ready { .. } => "ready",
            State::Restarting => "restarting",
            State::GaveUp(_) => "given_up",
            State::Stopped => "stopped",
        }
    }
}

/// A task's use of a server; the server is stopped some time after the last
/// use is dropped.
pub struct ServerUse {
    server: Arc<Supervised>,
    task: TaskId,
}

impl Servers {
    /// The servers of a daemon whose state directory keeps their logs and
    /// records in `dir`. What an earlier daemon left running there is
    /// stopped first: no server starts before that is done. Called on the
    /// daemon's runtime, where the servers are then watched.
    pub fn new(store: PhaseStore, dir: PathBuf, telemetry: todod_telemetry::Telemetry) -> Servers {
        let runtime = tokio::runtime::Handle::current();
        let (swept_tx, swept) = watch::channel(false);
        let sweep_dir = dir.clone();
        runtime.spawn(async move {
            for stopped in process::stop_left_over(&sweep_dir).await {
                tracing::warn!(%stopped, "stopped a server an earlier daemon left running");
            }
            swept_tx.send_replace(true);
        });
        Servers {
            inner: Arc::new(Inner {
                dir,
                store,
                table: Mutex::new(HashMap::new()),
                swept,
                shutdown: watch::channel(false).0,
                loops: Mutex::new(Vec::new()),
                http: probe::client(),
                runtime,
                telemetry,
            }),
        }
    }

    /// Task `task`'s use of server `name`, started if it is not running.
    pub async fn acquire(
        &self,
        task: TaskId,
        name: &str,
        spec: &ServerSpec,
    ) -> Result<ServerUse, String> {
        let mut swept = self.inner.swept.clone();
        let _ = swept.wait_for(|done| *done).await;
        let key = spec.key(name);
        let server = loop {
            self.wait_retired(&key).await;
            let mut table = self.inner.table.lock().unwrap_or_else(|p| p.into_inner());
            if *self.inner.shutdown.borrow() {
                return Err("the daemon is stopping".into());
            }
            match table.get(&key) {
                Some(server) if !server.retiring.load(Ordering::Acquire) => break server.clone(),
                // It began to stop meanwhile: wait for its end again.
                Some(_) => continue,
                None => {}
            }
            let port =
                process::free_port().map_err(|e| format!("server {name}: no free port: {e}"))?;
            let server = Arc::new(Supervised {
                name: name.to_string(),
                key: key.clone(),
                spec: spec.clone(),
                url: format!("http://127.0.0.1:{port}/v1"),
                port,
                state: watch::channel(State::Starting).0,
                users: watch::channel(BTreeMap::new()).0,
                status: Default::default(),
                figures: self.inner.telemetry.server(name, &key),
                probe_now: Default::default(),
                probes_started: Default::default(),
                probes_answered: watch::channel(0).0,
                retiring: Default::default(),
            });
            table.insert(key.clone(), server.clone());
            let handle = self
                .inner
                .runtime
                .spawn(supervise(self.clone(), server.clone()));
            let mut loops = self.inner.loops.lock().unwrap_or_else(|p| p.into_inner());
            loops.retain(|h| !h.is_finished());
            loops.push(handle);
            break server;
        };
        server
            .users
            .send_modify(|users| *users.entry(task).or_default() += 1);
        Ok(ServerUse { server, task })
    }

    /// Waits until the server `key` that is stopping for want of users (if
    /// any) has stopped.
    async fn wait_retired(&self, key: &str) {
        loop {
            let retiring = {
                let table = self.inner.table.lock().unwrap_or_else(|p| p.into_inner());
                table
                    .get(key)
                    .filter(|s| s.retiring.load(Ordering::Acquire))
                    .cloned()
            };
            let Some(old) = retiring else { return };
            let mut state = old.state.subscribe();
            let _ = state
                .wait_for(|s| matches!(s, State::Stopped | State::GaveUp(_)))
                .await;
        }
    }

    /// Stops every server (the daemon is stopping) and waits for them.
    pub async fn stop_all(&self) {
        {
            // Under the table's lock: an `acquire` either saw the flag or
            // has its loop in `loops` already.
            let _table = self.inner.table.lock().unwrap_or_else(|p| p.into_inner());
            self.inner.shutdown.send_replace(true);
        }
        let loops =
            std::mem::take(&mut *self.inner.loops.lock().unwrap_or_else(|p| p.into_inner()));
        for handle in loops {
            let _ = handle.await;
        }
    }

    /// The servers this daemon runs now, by name.
    pub fn views(&self) -> Vec<ServerView> {
        let table = self.inner.table.lock().unwrap_or_else(|p| p.into_inner());
        let mut views: Vec<ServerView> = table
            .values()
            .map(|s| {
                let status = s.status.lock().unwrap_or_else(|p| p.into_inner()).clone();
                ServerView {
                    name: s.name.clone(),
                    id: s.key.clone(),
                    state: s.state.borrow().word(),
                    pid: status.pid,
                    url: s.url.clone(),
                    uptime: status.ready_since.map_or(Duration::ZERO, |t| t.elapsed()),
                    restarts: status.restarts,
                    last_exit: status.last_exit,
                    tasks: s.users.borrow().keys().copied().collect(),
                    devices: s.spec.devices,
                }
            })
            .collect();
        views.sort_by(|a, b| a.id.cmp(&b.id));
        views
    }

    /// Writes `what` in the history of each task that uses `server`.
    async fn note(&self, server: &Supervised, what: &str) {
        tracing::info!(server = %server.name, "{what}");
        let tasks: Vec<TaskId> = server.users.borrow().keys().copied().collect();
        for task in tasks {
            if let Err(error) = self.inner.store.note_server(task, &server.name, what).await {
                tracing::warn!(%task, %error, "cannot record a server's event");
            }
        }
    }

    /// Resolves once no task has used `server` for its `keep_idle_seconds`;
    /// it is then retiring (a new use waits for its end, then starts
    /// another).
    async fn idle(&self, server: &Arc<Supervised>) {
        let mut users = server.users.subscribe();
        let keep = Duration::from_secs(server.spec.keep_idle_seconds);
        loop {
            let _ = users.wait_for(BTreeMap::is_empty).await;
            if tokio::time::timeout(keep, users.wait_for(|u| !u.is_empty()))
                .await
                .is_ok()
            {
                continue;
            }
            let _table = self.inner.table.lock().unwrap_or_else(|p| p.into_inner());
            if server.users.borrow().is_empty() {
                server.retiring.store(true, Ordering::Release);
                tracing::info!(server = %server.name, "no task needs it: stopping it");
                return;
            }
        }
    }

    fn forget(&self, server: &Arc<Supervised>) {
        let mut table = self.inner.table.lock().unwrap_or_else(|p| p.into_inner());
        if table
            .get(&server.key)
            .is_some_and(|s| Arc::ptr_eq(s, server))
        {
            table.remove(&server.key);
        }
    }
}

impl Supervised {
    fn set_status(&self, change: impl FnOnce(&mut Status)) {
        change(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

impl Drop for ServerUse {
    fn drop(&mut self) {
        let task = self.task;
        self.server.users.send_modify(|users| {
            if let Some(n) = users.get_mut(&task) {
                *n -= 1;
                if *n == 0 {
                    users.remove(&task);
                }
            }
        });
    }
}

impl ServerUse {
    pub fn name(&self) -> &str {
        &self.server.name
    }

    /// Its base URL (`http://127.0.0.1:PORT/v1`): the port stays the same
    /// across restarts.
    pub fn url(&self) -> &str {
        &self.server.url
    }

    /// Waits until it is ready; its generation then, or why it never will be.
    pub async fn ready(&self) -> Result<u64, String> {
        let mut state = self.server.state.subscribe();
        let seen = state
            .wait_for(|s| matches!(s, State::Ready { .. } | State::GaveUp(_) | State::Stopped))
            .await
            .map(|s| s.clone())
            .unwrap_or(State::Stopped);
        match seen {
            State::Ready { generation } => Ok(generation),
            State::GaveUp(why) => Err(why),
            _ => Err(format!("server {}: stopped", self.server.name)),
        }
    }

    /// Whether it is still ready as of `generation` (not restarted since).
    pub fn still(&self, generation: u64) -> bool {
        *self.server.state.borrow() == State::Ready { generation }
    }

    /// A request sent to it at `generation` failed: whether the server is
    /// still well. It is probed at once (one probe for the failures that
    /// come together); the answer is a probe started after this and
    /// answered (true), or the server leaving that generation: it died, or
    /// its probes failed and it is being restarted (false). Waits no longer
    /// than the probes that would restart it take.
    pub async fn still_well(&self, generation: u64) -> bool {
        let server = &self.server;
        let mut answered = server.probes_answered.subscribe();
        let mut state = server.state.subscribe();
        // The next probe to start is the first that speaks of now.
        let next = server.probes_started.load(Ordering::Acquire) + 1;
        server.probe_now.notify_one();
        let probe = Duration::from_secs(server.spec.probe_timeout_seconds);
        let within = (probe + EXIT_SETTLES) * PROBES_MISSED + PROBE_AGAIN + Duration::from_secs(1);
        let left = async {
            let _ = state.wait_for(|s| *s != State::Ready { generation }).await;
        };
        let probed = async {
            let _ = answered.wait_for(|n| *n >= next).await;
        };
        let _ = tokio::time::timeout(within, async {
            tokio::select! {
                _ = left => {}
                _ = probed => {}
            }
        })
        .await;
        self.still(generation)
    }

    /// Resolves with the reason once it has given up.
    pub async fn given_up(&self) -> String {
        let mut state = self.server.state.subscribe();
        let seen = state
            .wait_for(|s| matches!(s, State::GaveUp(_)))
            .await
            .map(|s| s.clone());
        match seen {
            Ok(State::GaveUp(why)) => why,
            _ => std::future::pending().await,
        }
    }
}

/// Resolves once the daemon stops.
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// What ended a server's run, in words, with its log's end.
struct Failure {
    what: String,
    tail: String,
}

impl Failure {
    fn said(&self) -> String {
        if self.tail.is_empty() {
            self.what.clone()
        } else {
            format!("{}; its log ends:\n{}", self.what, self.tail)
        }
    }
}

/// How one start of a server ended.
enum Run {
    /// It failed (exited, never got ready, stopped answering).
    Failed(Failure),
    /// No task needed it any more, or the daemon stops: it was stopped.
    Done,
}

/// A server's life: started, made ready, watched, restarted within its
/// budget, stopped when unused. Whatever ends it, it is out of the table
/// before its end is told (a waiting `acquire` then starts a new one).
async fn supervise(servers: Servers, server: Arc<Supervised>) {
    let spec = &server.spec;
    let first_backoff = Duration::from_secs(spec.restart_backoff_seconds);
    let window = Duration::from_secs(spec.restart_window_seconds);
    let window_words = todod_proto::readable::duration(window.as_secs() as i64);
    let mut restarts: VecDeque<Instant> = VecDeque::new();
    let mut backoff = first_backoff;
    let mut generation = 0u64;
    let mut shutdown = servers.inner.shutdown.subscribe();
    let end = |state: State| {
        servers.forget(&server);
        server.state.send_replace(state);
    };
    loop {
        let mut ready_for = Duration::ZERO;
        let run = run_once(
            &servers,
            &server,
            &mut generation,
            &mut ready_for,
            &mut shutdown,
        )
        .await;
        server.figures.up.set(0);
        server.set_status(|s| {
            s.pid = 0;
            s.ready_since = None;
            if let Run::Failed(failure) = &run {
                s.last_exit = failure.said();
            }
        });
        let failure = match run {
            Run::Done => return end(State::Stopped),
            Run::Failed(failure) => failure,
        };
        // A server that ran well for a window starts its backoff afresh.
        if ready_for > window {
            backoff = first_backoff;
        }
        let now = Instant::now();
        restarts.push_back(now);
        while restarts
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            restarts.pop_front();
        }
        if restarts.len() > spec.max_restarts as usize {
            let budget = match spec.max_restarts {
                0 => "it may not be restarted (max_restarts 0)".to_string(),
                n => format!("its budget of {n} restart(s) within {window_words} is spent"),
            };
            let why = format!(
                "server {}: given up: {budget}; {}",
                server.name,
                failure.said()
            );
            servers.note(&server, &why).await;
            return end(State::GaveUp(why));
        }
        server.state.send_replace(State::Restarting);
        server.figures.restarts.inc();
        server.set_status(|s| s.restarts += 1);
        servers
            .note(
                &server,
                &format!(
                    "server {}: {}; restarting ({} of {} within {window_words}) in {}",
                    server.name,
                    failure.said(),
                    restarts.len(),
                    spec.max_restarts,
                    todod_proto::readable::duration(backoff.as_secs() as i64)
                ),
            )
            .await;
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = servers.idle(&server) => return end(State::Stopped),
            _ = stopping(&mut shutdown) => return end(State::Stopped),
        }
        backoff = (backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
    }
}

/// One start of the server, until it fails or is not needed; `ready_for`
/// is how long it was ready.
async fn run_once(
    servers: &Servers,
    server: &Arc<Supervised>,
    generation: &mut u64,
    ready_for: &mut Duration,
    shutdown: &mut watch::Receiver<bool>,
) -> Run {
    let spec = &server.spec;
    let started = Instant::now();
    let mut launched = match process::launch(spec, &server.key, server.port, &servers.inner.dir) {
        Ok(launched) => launched,
        Err(error) => {
            return Run::Failed(Failure {
                what: format!("cannot start {}: {error}", spec.command[0]),
                tail: String::new(),
            })
        }
    };
    server.set_status(|s| s.pid = launched.pid);
    servers
        .note(
            server,
            &format!(
                "server {}: started, pid {}, at {}, its output in {}",
                server.name,
                launched.pid,
                server.url,
                launched.log.display()
            ),
        )
        .await;
    let http = &servers.inner.http;
    // One wait for the whole start: made again per turn, its timer would
    // start again each time.
    let idle = servers.idle(server);
    tokio::pin!(idle);
    let ready_within = Duration::from_secs(spec.ready_timeout_seconds);
    // Starting: until the deep probe answers.
    loop {
        tokio::select! {
            status = launched.child.wait() => {
                launched.reap();
                return Run::Failed(Failure {
                    what: format!("{} before it was ready", process::describe(status.ok())),
                    tail: launched.log_tail(),
                });
            }
            _ = &mut idle => {
                launched.stop(spec.stop_grace()).await;
                return Run::Done;
            }
            _ = stopping(shutdown) => {
                launched.stop(spec.stop_grace()).await;
                return Run::Done;
            }
            _ = tokio::time::sleep(READY_POLL) => {}
        }
        let left = ready_within.saturating_sub(started.elapsed());
        if left.is_zero() {
            launched.stop(spec.stop_grace()).await;
            return Run::Failed(Failure {
                what: format!(
                    "not ready within {} (ready_timeout_seconds)",
                    todod_proto::readable::duration(ready_within.as_secs() as i64)
                ),
                tail: launched.log_tail(),
            });
        }
        let within = left.min(Duration::from_secs(spec.probe_timeout_seconds));
        if probe::deep(http, &server.url, within).await.is_ok() {
            break;
        }
    }
    *generation += 1;
    let ready_at = Instant::now();
    server.set_status(|s| s.ready_since = Some(ready_at));
    server.figures.up.set(1);
    server.state.send_replace(State::Ready {
        generation: *generation,
    });
    servers
        .note(
            server,
            &format!(
                "server {}: ready after {:.1} s",
                server.name,
                started.elapsed().as_secs_f64()
            ),
        )
        .await;
    // Ready: watched until it fails or is not needed.
    let every = Duration::from_secs(spec.probe_every_seconds);
    let probe_within = Duration::from_secs(spec.probe_timeout_seconds);
    let mut unanswered = 0u32;
    let mut next_probe = every;
    let ended = loop {
        let probed = tokio::select! {
            status = launched.child.wait() => {
                launched.reap();
                break Run::Failed(Failure {
                    what: process::describe(status.ok()),
                    tail: launched.log_tail(),
                });
            }
            _ = &mut idle => {
                launched.stop(spec.stop_grace()).await;
                break Run::Done;
            }
            _ = stopping(shutdown) => {
                launched.stop(spec.stop_grace()).await;
                break Run::Done;
            }
            probed = async {
                // At its turn, or at once when a run's request failed; the
                // probe after one that failed keeps its second apart (a
                // failure meanwhile must not bring it closer).
                if unanswered == 0 {
                    tokio::select! {
                        _ = tokio::time::sleep(next_probe) => {}
                        _ = server.probe_now.notified() => {}
                    }
                } else {
                    tokio::time::sleep(PROBE_AGAIN).await;
                }
                let number = server.probes_started.fetch_add(1, Ordering::AcqRel) + 1;
                (number, probe::deep(http, &server.url, probe_within).await)
            } => probed,
        };
        let (number, probed) = probed;
        let Err(why) = probed else {
            unanswered = 0;
            next_probe = every;
            server
                .probes_answered
                .send_modify(|n| *n = (*n).max(number));
            continue;
        };
        // A failed probe is followed soon by the next.
        next_probe = PROBE_AGAIN;
        // A probe cut by the process's end is that end.
        if let Ok(status) = tokio::time::timeout(EXIT_SETTLES, launched.child.wait()).await {
            launched.reap();
            break Run::Failed(Failure {
                what: process::describe(status.ok()),
                tail: launched.log_tail(),
            });
        }
        // One probe may wait behind a full server's queue; two in a row
        // unanswered is a wedged engine or a frozen process.
        unanswered += 1;
        if unanswered < PROBES_MISSED {
            tracing::warn!(server = %server.name, %why, "a deep probe failed; probing again");
            continue;
        }
        // Not ready from now: a run's failed request need not wait for the
        // stop to learn it.
        server.state.send_replace(State::Restarting);
        let status = launched.stop(spec.stop_grace()).await;
        break Run::Failed(Failure {
            what: format!(
                "the deep probe failed {PROBES_MISSED} times in a row (last: {why}); stopped it \
                 ({})",
                process::describe(status)
            ),
            tail: launched.log_tail(),
        });
    };
    *ready_for = ready_at.elapsed();
    if matches!(ended, Run::Failed(_)) {
        server.state.send_replace(State::Restarting);
    }
    ended
}

/// The servers a run's spec names, attached: its endpoints with each
/// `server:NAME` replaced by that server's URL, once every server is ready.
pub struct Attached {
    uses: Vec<ServerUse>,
}

impl Attached {
    /// Nothing attached: a run whose endpoints are all URLs.
    pub fn none() -> Attached {
        Attached { uses: Vec::new() }
    }

    pub fn is_empty(&self) -> bool {
        self.uses.is_empty()
    }

    /// Waits until every server is ready; their generations then, or why
    /// one never will be.
    pub async fn ready(&self) -> Result<Vec<u64>, String> {
        let mut generations = Vec::with_capacity(self.uses.len());
        for server in &self.uses {
            generations.push(server.ready().await?);
        }
        Ok(generations)
    }

    /// A request sent at `generations` failed: whether every server is
    /// still well (see [`ServerUse::still_well`]).
    pub async fn still_well(&self, generations: &[u64]) -> bool {
        let asked = self
            .uses
            .iter()
            .zip(generations)
            .map(|(server, generation)| server.still_well(*generation));
        futures::future::join_all(asked)
            .await
            .into_iter()
            .all(|well| well)
    }

    /// Whether no server restarted (or went down) since `generations`.
    pub fn still(&self, generations: &[u64]) -> bool {
        self.uses.iter().zip(generations).all(|(s, g)| s.still(*g))
    }

    /// Resolves with the reason once a server has given up.
    pub async fn given_up(&self) -> String {
        if self.uses.is_empty() {
            return std::future::pending().await;
        }
        let waits = self.uses.iter().map(|s| Box::pin(s.given_up()));
        futures::future::select_all(waits).await.0
    }
}

/// Attaches the servers `endpoints` name (from `servers`) for task `task`,
/// waits until they are ready, and gives the endpoints as URLs.
pub async fn attach(
    all: &Servers,
    task: TaskId,
    endpoints: &[String],
    servers: &BTreeMap<String, ServerSpec>,
) -> Result<(Vec<String>, Attached), String> {
    let mut urls = Vec::with_capacity(endpoints.len());
    let mut uses: Vec<ServerUse> = Vec::new();
    for endpoint in endpoints {
        match named(endpoint) {
            Some(name) => {
                let spec = servers.get(name).ok_or_else(|| {
                    format!("endpoint {endpoint}: the spec defines no server {name}")
                })?;
                let server = match uses.iter().find(|u| u.name() == name) {
                    Some(server) => server.url().to_string(),
                    None => {
                        let server = all.acquire(task, name, spec).await?;
                        let url = server.url().to_string();
                        uses.push(server);
                        url
                    }
                };
                urls.push(server);
            }
            None => urls.push(endpoint.clone()),
        }
    }
    let attached = Attached { uses };
    attached.ready().await?;
    Ok((urls, attached))
}
