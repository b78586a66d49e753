//! Test harness: the daemon in-process on an ephemeral port with a temporary
//! database, or the real binaries as separate processes.
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use todod::proto::todos_client::TodosClient;
use todod::server::{self, Listeners, Options};
use todod_store::Store;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::Channel;

pub use kill::{assert_kill_floor, kill_repeatedly, kill_while_running, run_killing_each, Kill};
pub use todod::proto;

pub mod browser;
pub mod cli;
pub mod daemons;
pub mod fast_mock;
pub mod fixtures;
pub mod gen;
mod kill;
pub mod llama_server;
pub mod lossy_fs;
pub mod lossy_proxy;
pub mod megatron;
pub mod mock_openai;
pub mod mock_token_ids;
pub mod parquet_rows;
pub mod rng;
pub mod scrape;

/// A client of the daemon, with the bearer token when the daemon wants one.
pub type Client = TodosClient<InterceptedService<Channel, Auth>>;

/// Adds `authorization: Bearer <token>` to every call, when there is a token.
#[derive(Clone, Default)]
pub struct Auth(Option<MetadataValue<Ascii>>);

impl Interceptor for Auth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// Where a daemon listens, and the token it wants.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub token: Option<String>,
}

impl From<&str> for Target {
    fn from(url: &str) -> Target {
        Target {
            url: url.to_string(),
            token: None,
        }
    }
}

impl From<String> for Target {
    fn from(url: String) -> Target {
        Target { url, token: None }
    }
}

impl From<&String> for Target {
    fn from(url: &String) -> Target {
        Target::from(url.as_str())
    }
}

impl From<&Target> for Target {
    fn from(target: &Target) -> Target {
        target.clone()
    }
}

/// The daemon's `run`, in this process, on 127.0.0.1:0 and a database in a temp dir.
pub struct TestDaemon {
    pub dir: TempDir,
    pub addr: SocketAddr,
    pub store: Store,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl TestDaemon {
    pub async fn start() -> TestDaemon {
        let dir = tempfile::tempdir().expect("temp dir");
        TestDaemon::start_in(dir, Options::default()).await
    }

    pub async fn start_with(options: Options) -> TestDaemon {
        let dir = tempfile::tempdir().expect("temp dir");
        TestDaemon::start_in(dir, options).await
    }

    /// Serves the database in `dir`, which is also its state directory:
    /// no phase file may live there.
    pub async fn start_in(dir: TempDir, mut options: Options) -> TestDaemon {
        if options.bounds.state_dir.is_none() {
            options.bounds.state_dir = Some(std::fs::canonicalize(dir.path()).expect("state dir"));
        }
        let store = Store::open_for_test(dir.path()).await.expect("open store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let listeners = Listeners {
            tcp: Some(listener),
            unix: None,
        };
        let serving = store.clone();
        let task = tokio::spawn(async move {
            server::run(serving, listeners, options, async {
                let _ = stopped.await;
            })
            .await
            .expect("server run");
        });
        TestDaemon {
            dir,
            addr,
            store,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn client(&self) -> Client {
        connect(&self.url()).await
    }

    /// Graceful stop; returns the temp dir so the same database can be reopened.
    pub async fn stop(mut self) -> TempDir {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task");
        }
        self.store.close().await;
        self.dir
    }

    pub async fn restart(self) -> TestDaemon {
        self.restart_with(Options::default()).await
    }

    pub async fn restart_with(self, options: Options) -> TestDaemon {
        let dir = self.stop().await;
        TestDaemon::start_in(dir, options).await
    }
}

pub async fn connect(target: impl Into<Target>) -> Client {
    let target = target.into();
    let url = target.url.clone();
    try_connect(target)
        .await
        .unwrap_or_else(|| panic!("cannot connect to the daemon at {url}"))
}

/// Like `connect`, for callers that expect the daemon may be gone.
pub async fn try_connect(target: impl Into<Target>) -> Option<Client> {
    let target = target.into();
    let channel = Channel::from_shared(target.url.clone())
        .expect("url")
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| eprintln!("connecting to {}: {e:?}", target.url))
        .ok()?;
    let auth = Auth(target.token.as_ref().map(|t| {
        let mut value: MetadataValue<Ascii> = format!("Bearer {t}").parse().expect("token");
        value.set_sensitive(true);
        value
    }));
    Some(
        TodosClient::with_interceptor(channel, auth)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX),
    )
}

/// Reads a todod's readiness line ("todod listening on ADDR") from its
/// stdout and returns ADDR; panics with what it read otherwise.
pub fn read_readiness(stdout: &mut impl BufRead) -> String {
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read todod stdout");
    match line.trim().strip_prefix("todod listening on ") {
        Some(addr) => addr.to_string(),
        None => panic!("todod did not report readiness: {line:?}"),
    }
}

/// Waits for a child to exit, at most `limit`; kills it and panics after.
/// The wait is a `poll` on the child's pidfd, so it wakes when the child
/// exits rather than at the next tick of a polling loop.
pub fn wait_with_timeout(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    if let Some(status) = child.try_wait().expect("wait for child") {
        return status;
    }
    // SAFETY: pidfd_open on the pid of a child we have not reaped; the fd
    // is ours and closed below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) } as i32;
    assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = limit.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd for the duration of the call.
    let ready = unsafe { libc::poll(&mut pollfd, 1, millis) };
    // SAFETY: closing the fd opened above, once.
    unsafe { libc::close(fd) };
    if ready <= 0 {
        let _ = child.kill();
        let _ = child.wait();
        panic!("process {} did not exit within {limit:?}", child.id());
    }
    child.wait().expect("wait for child")
}

/// The real `todod` on `state_dir` with `args`, its stdout piped for the
/// readiness line ("todod listening on ADDR").
pub fn todod_command(state_dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(binary("todod"));
    command.arg("--state-dir").arg(state_dir);
    // The suite on PostgreSQL: a schema of this state directory's, unless
    // the test names a database itself.
    if let Some(url) = Store::test_database_url(state_dir) {
        if !args.contains(&"--database") {
            command.arg("--database").arg(url);
        }
        // Several daemons may share a database there, so a daemon restarted
        // after a kill waits for its predecessor's leases to expire: short
        // ones keep the kill tests quick.
        if !args.contains(&"--lease") {
            command.args(["--lease", "3s"]);
        }
    }
    command
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// The URL of a PostgreSQL schema of `dir`'s for a test about PostgreSQL
/// alone; `None`, saying so, when the suite runs without a server
/// (`TODOD_TEST_DATABASE_URL`: CI's PostgreSQL step sets it).
pub fn postgres_only(dir: &Path) -> Option<String> {
    let url = Store::test_database_url(dir);
    if url.is_none() {
        eprintln!("no PostgreSQL server (TODOD_TEST_DATABASE_URL): not run");
    }
    url
}

/// True, and says so, when the suite runs against PostgreSQL
/// (`TODOD_TEST_DATABASE_URL`) and the test is about SQLite alone (`why`:
/// its file, its backups); the SQLite run covers it.
pub fn sqlite_only(why: &str) -> bool {
    let postgres = std::env::var("TODOD_TEST_DATABASE_URL").is_ok_and(|url| !url.is_empty());
    if postgres {
        eprintln!("about SQLite alone ({why}): not run against PostgreSQL");
    }
    postgres
}

/// A binary of this workspace, built by the README's test command (`cargo test --workspace --release`).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test --workspace --release`, which builds it",
        path.display()
    );
    path
}

/// The real `todod` binary, serving on an ephemeral loopback port.
pub struct RealDaemon {
    pub child: Child,
    pub addr: SocketAddr,
    pub state_dir: PathBuf,
    /// The token it generated into its state directory (or was given).
    pub token: Option<String>,
}

impl RealDaemon {
    pub fn spawn(state_dir: &Path) -> RealDaemon {
        RealDaemon::spawn_with(state_dir, &[])
    }

    pub fn spawn_with(state_dir: &Path, extra: &[&str]) -> RealDaemon {
        RealDaemon::spawn_env(state_dir, extra, &[])
    }

    /// With `extra` arguments and environment variables set for it alone.
    pub fn spawn_env(state_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> RealDaemon {
        let mut args = vec!["--listen", "127.0.0.1:0", "--socket", "none"];
        args.extend_from_slice(extra);
        let mut command = todod_command(state_dir, &args);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn todod");
        // The first stdout line is the readiness signal: "todod listening on ADDR".
        let stdout = child.stdout.take().expect("stdout");
        let addr = read_readiness(&mut BufReader::new(stdout));
        let addr = addr
            .parse()
            .unwrap_or_else(|_| panic!("todod reported {addr:?}, not a TCP address"));
        let token = std::fs::read_to_string(state_dir.join(todod::config::TOKEN_FILE))
            .ok()
            .map(|t| t.trim().to_string());
        RealDaemon {
            child,
            addr,
            state_dir: state_dir.to_path_buf(),
            token,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its address with its token.
    pub fn target(&self) -> Target {
        Target {
            url: self.url(),
            token: self.token.clone(),
        }
    }

    pub async fn client(&self) -> Client {
        match try_connect(self.target()).await {
            Some(client) => client,
            None => {
                // Say whether the process is still there, and in what state
                // (R running, S sleeping, T stopped, Z exited).
                let pid = self.child.id();
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .unwrap_or_else(|e| format!("unreadable: {e}"));
                panic!(
                    "cannot connect to todod pid {pid} at {}: /proc stat {stat}",
                    self.url()
                )
            }
        }
    }

    pub fn kill9(&mut self) {
        // SAFETY: sending a signal to our own child by pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: as above.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        self.child.wait().expect("wait todod")
    }
}

impl Drop for RealDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A todo item as an agent sends it.
pub fn item(id: &str, content: &str, status: &str, priority: &str) -> proto::TodoItem {
    proto::TodoItem {
        id: id.to_string(),
        content: content.to_string(),
        status: status.to_string(),
        priority: priority.to_string(),
        depends_on: vec![],
        metadata_patch_json: String::new(),
    }
}

/// A transition to `to`, with a reason.
pub fn transition(id: &str, to: &str) -> proto::TransitionTaskRequest {
    proto::TransitionTaskRequest {
        id: id.into(),
        to: to.into(),
        reason: "test".into(),
        ..Default::default()
    }
}

/// An edge: `task` depends on `on`.
pub fn dependency(task: &str, on: &str) -> proto::DependencyRequest {
    proto::DependencyRequest {
        task_id: task.into(),
        depends_on: on.into(),
        ..Default::default()
    }
}

pub fn write_request(plan: &str, todos: Vec<proto::TodoItem>) -> proto::WriteTodosRequest {
    proto::WriteTodosRequest {
        plan: plan.to_string(),
        todos,
        ..Default::default()
    }
}

/// Everything a client can observe of the store, for "nothing changed" checks.
pub async fn snapshot(client: &mut Client) -> String {
    let plans = client
        .list_plans(proto::ListPlansRequest {
            highlight_limit: 0,
            include_archived: true,
        })
        .await
        .expect("list plans")
        .into_inner();
    let mut out = format!("{plans:?}\n");
    for plan in plans.plans {
        let name = plan.plan.expect("plan").name;
        let tasks = client
            .list_tasks(proto::ListTasksRequest {
                plan: name.clone(),
                include_archived: true,
                page_size: 10_000,
                ..Default::default()
            })
            .await
            .expect("list tasks")
            .into_inner();
        out.push_str(&format!("{tasks:?}\n"));
        let events = client
            .list_events(proto::ListEventsRequest {
                plan: name,
                limit: 10_000,
                ..Default::default()
            })
            .await
            .expect("list events")
            .into_inner();
        out.push_str(&format!("{events:?}\n"));
    }
    out
}

/// Creates plan `plan` (if needed) and a `kind` task in it with `spec`,
/// depending on `after`; returns its id, or the daemon's refusal.
pub async fn create_phase(
    c: &mut Client,
    plan: &str,
    kind: &str,
    spec: &str,
    after: &[&str],
) -> Result<String, tonic::Status> {
    c.write_todos(write_request(plan, vec![])).await.unwrap();
    c.create_task(proto::CreateTaskRequest {
        plan: plan.into(),
        content: format!("{kind} task"),
        kind: kind.into(),
        spec_json: spec.into(),
        depends_on: after.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().id)
}

/// Creates plan `plan` (if needed) and a generation task in it; returns its id.
/// Applies a plan file; the ids of its steps' tasks, in graph order.
/// Creates a phase task of `kind` with `spec` in `plan` and waits until it
/// has completed or failed.
pub async fn run_phase_to_end(c: &mut Client, plan: &str, kind: &str, spec: &Value) -> proto::Task {
    let id = create_phase(c, plan, kind, &spec.to_string(), &[])
        .await
        .unwrap_or_else(|e| panic!("create {plan}: {e}"));
    wait_task(c, plan, &id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await
}

/// A task's result as JSON (`null` when it has none).
pub fn result_of(task: &proto::Task) -> Value {
    serde_json::from_str(&task.result_json).unwrap_or(Value::Null)
}

/// The JSON lines of a file (none when it is missing).
pub fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub async fn apply_plan(c: &mut Client, toml: &str) -> Vec<String> {
    c.apply_pipeline(proto::ApplyPipelineRequest {
        spec_toml: toml.to_string(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .steps
    .iter()
    .map(|s| s.task.as_ref().unwrap().id.clone())
    .collect()
}

pub async fn create_generation(c: &mut Client, plan: &str, spec: String) -> String {
    create_phase(c, plan, "generation", &spec, &[])
        .await
        .unwrap_or_else(|e| panic!("create: {e}"))
}

/// Asks `look` again at each new event of `plan` until it answers: the
/// plan's event stream is the signal, followed from now (subscribed before
/// the first look, so nothing falls in between). A stream that goes two
/// minutes without an event fails the caller, with `what` it waited for.
pub async fn until<T>(
    c: &mut Client,
    plan: &str,
    what: &str,
    mut look: impl AsyncFnMut(&mut Client) -> Option<T>,
) -> T {
    use futures::StreamExt;
    let mut events = c
        .watch_plan(proto::WatchPlanRequest {
            plan: plan.into(),
            from_now: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    loop {
        if let Some(found) = look(c).await {
            return found;
        }
        tokio::time::timeout(Duration::from_secs(120), events.next())
            .await
            .unwrap_or_else(|_| panic!("no event for two minutes while waiting for {what}"))
            .expect("the watch ended")
            .unwrap();
    }
}

/// Follows the plan's events until `done` holds for `task`; returns the task.
pub async fn wait_task(
    c: &mut Client,
    plan: &str,
    task: &str,
    done: impl Fn(&proto::Task) -> bool,
) -> proto::Task {
    until(c, plan, task, async |c: &mut Client| {
        let now = c
            .get_task(proto::GetTaskRequest { id: task.into() })
            .await
            .unwrap()
            .into_inner();
        done(&now).then_some(now)
    })
    .await
}

/// The events of `kind` of `task` so far.
pub async fn task_events(c: &mut Client, task: &str, kind: &str) -> Vec<proto::Event> {
    c.list_events(proto::ListEventsRequest {
        task_id: task.into(),
        limit: 10_000,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .events
    .into_iter()
    .filter(|e| e.r#type == kind)
    .collect()
}

/// The events of `kind` of `task`, once there are at least `n`.
pub async fn wait_events(
    c: &mut Client,
    plan: &str,
    task: &str,
    kind: &str,
    n: usize,
) -> Vec<proto::Event> {
    let what = format!("{n} {kind} events of {task}");
    until(c, plan, &what, async |c: &mut Client| {
        let found = task_events(c, task, kind).await;
        (found.len() >= n).then_some(found)
    })
    .await
}

/// A loopback port this test holds, bound but not listening: connecting to it
/// is refused, and no other process can take it while the test runs.
pub struct ClosedPort {
    fd: i32,
    pub port: u16,
}

impl ClosedPort {
    pub fn new() -> ClosedPort {
        // SAFETY: plain socket calls on a descriptor we own; the address
        // structure is fully initialised.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            assert!(fd >= 0, "socket");
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
            addr.sin_port = 0;
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let rc = libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len);
            assert_eq!(rc, 0, "bind");
            let mut bound: libc::sockaddr_in = std::mem::zeroed();
            let mut len = len;
            libc::getsockname(fd, &mut bound as *mut _ as *mut libc::sockaddr, &mut len);
            ClosedPort {
                fd,
                port: u16::from_be(bound.sin_port),
            }
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        ClosedPort::new()
    }
}

impl Drop for ClosedPort {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor we opened, once.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// A loopback listener this test holds and never answers: requests to it
/// hang until the client gives up.
pub struct SilentPort {
    _listener: std::net::TcpListener,
    pub url: String,
}

impl SilentPort {
    pub fn new() -> SilentPort {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        SilentPort {
            _listener: listener,
            url,
        }
    }
}

impl Default for SilentPort {
    fn default() -> Self {
        SilentPort::new()
    }
}

/// The `id` of every line of a JSONL file, in order.
pub fn ids(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["id"].as_str().unwrap().to_string()
        })
        .collect()
}

/// A generation task of `plan` with `spec`, left in progress by a run
/// `attempt` that died: what a daemon finds after a kill. Written straight
/// into `store`; returns the task.
pub async fn abandoned_generation(
    store: &Store,
    plan: &str,
    spec: &serde_json::Value,
    attempt: &str,
) -> todod_domain::TaskId {
    let spec = spec.to_string();
    abandoned_phase(
        store,
        plan,
        todod_domain::Kind::named("generation"),
        &spec,
        attempt,
    )
    .await
}

/// A pending phase task of `kind` in `plan`, written straight into `store`
/// (no spec checks beyond the shape; the plan must exist or be creatable).
pub async fn stored_phase_task(
    store: &Store,
    plan: &str,
    kind: todod_domain::Kind,
    spec: &str,
) -> todod_domain::TaskId {
    use todod_domain::Priority;
    use todod_store::{NewTask, WriteContext};
    let ctx = WriteContext {
        actor: "test".into(),
        ..Default::default()
    };
    store
        .create_task(
            &NewTask {
                plan: plan.into(),
                content: format!("a {kind} task"),
                priority: Priority::Medium,
                kind,
                spec: spec.to_string(),
                claims: vec![],
                depends_on: vec![],
                requires_dependency: None,
                owner: None,
                metadata: None,
            },
            &ctx,
        )
        .await
        .unwrap()
        .fresh()
        .unwrap()
        .id
}

/// A phase task of `kind` in `plan`, in progress and leased to `attempt`,
/// written straight into `store` (the plan must exist or be creatable).
pub async fn abandoned_phase(
    store: &Store,
    plan: &str,
    kind: todod_domain::Kind,
    spec: &str,
    attempt: &str,
) -> todod_domain::TaskId {
    use todod_domain::Status;
    use todod_store::WriteContext;
    let ctx = WriteContext {
        actor: "test".into(),
        ..Default::default()
    };
    let task = stored_phase_task(store, plan, kind, spec).await;
    store
        .transition(task, Status::InProgress, &ctx)
        .await
        .unwrap();
    assert!(
        store.take_lease(task, attempt).await.unwrap(),
        "{attempt} did not get the lease of {task}"
    );
    task
}

/// The venv's python; made by `scripts/mcp-client` when missing.
pub fn mcp_python() -> PathBuf {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/mcp-client");
    let out = Command::new(&script)
        .arg("python")
        .output()
        .expect("run scripts/mcp-client (needs bash and python3)");
    assert!(
        out.status.success(),
        "MCP CLIENT MISSING: scripts/mcp-client could not install PyPI's mcp package:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}
