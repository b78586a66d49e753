//! Inference servers the daemon runs itself (issue 45 parts 1, 2 and 6), on
//! the real llama-server that `scripts/local-backend` builds: a generation
//! whose endpoint is `server:local` gets a server started and made ready by
//! the deep probe; a kill -9 of the server, or a SIGSTOP, restarts it and no
//! prompt is lost or written twice; past its restart budget the task fails
//! naming the server, keeps what it committed, and a retry finishes it; a
//! kill -9 of the daemon leaves no second server; a program the operator
//! did not allow is refused with PERMISSION_DENIED and nothing is created.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use todod_e2e::gen::write_prompts;
use todod_e2e::{
    create_phase, proto, task_events, transition, until, wait_task, Client, RealDaemon, TestDaemon,
};

/// `scripts/local-backend`, whose `serve` becomes llama-server.
fn local_backend() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/local-backend"))
        .unwrap()
}

/// A generation of `dir/prompts.jsonl` on a server the daemon runs.
fn spec(dir: &Path, server: Value) -> Value {
    json!({
        "prompts": dir.join("prompts.jsonl"),
        "output": dir.join("out.jsonl"),
        "endpoints": ["server:local"],
        "model": "SmolLM2",
        "params": {"temperature": 0.0},
        "max_tokens": 8,
        "concurrency": 4,
        "max_attempts": 3,
        "servers": {"local": server},
    })
}

/// llama-server through `scripts/local-backend serve`, watched closely.
fn llama(max_restarts: u32) -> Value {
    json!({
        "command": [local_backend(), "serve", "--port", "{port}", "--parallel", "4", "--threads", "1"],
        "max_restarts": max_restarts,
        "restart_backoff_seconds": 0,
        "probe_every_seconds": 1,
        "probe_timeout_seconds": 5,
        "stop_grace_seconds": 5,
        "keep_idle_seconds": 0,
    })
}

/// The pid of the server the daemon in `state` runs now, from its record.
fn server_pid(state: &Path) -> Option<i32> {
    let dir = state.join("servers");
    let entries = std::fs::read_dir(dir).ok()?;
    let pids: Vec<i32> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
        .filter_map(|v| v["pid"].as_i64())
        .map(|p| p as i32)
        .collect();
    assert!(pids.len() <= 1, "more than one server recorded: {pids:?}");
    pids.first().copied()
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

fn signal(pid: i32, signal: i32) {
    // SAFETY: a signal to a process by pid.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// The reasons of the task's `server` events.
async fn server_events(c: &mut Client, task: &str) -> Vec<String> {
    task_events(c, task, "server")
        .await
        .into_iter()
        .map(|e| e.reason)
        .collect()
}

/// Waits until the task's server events hold `n` that contain `what`.
async fn wait_server_events(
    c: &mut Client,
    plan: &str,
    task: &str,
    what: &str,
    n: usize,
) -> Vec<String> {
    let label = format!("{n} server events saying {what:?}");
    until(c, plan, &label, async |c: &mut Client| {
        let events = server_events(c, task).await;
        (events.iter().filter(|e| e.contains(what)).count() >= n).then_some(events)
    })
    .await
}

/// How often each id is in the output and failures files together.
fn ids_written(dir: &Path) -> (HashMap<String, usize>, usize, usize) {
    let mut ids = HashMap::new();
    let out = todod_e2e::json_lines(&dir.join("out.jsonl"));
    let failed = todod_e2e::json_lines(&dir.join("out.jsonl.failures.jsonl"));
    for record in out.iter().chain(&failed) {
        *ids.entry(record["id"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    (ids, out.len(), failed.len())
}

/// Creates a generation of `spec` in plan `plan`; its id.
async fn start_generation(c: &mut Client, plan: &str, spec: &Value) -> String {
    create_phase(c, plan, "generation", &spec.to_string(), &[])
        .await
        .unwrap_or_else(|e| panic!("create in {plan}: {e}"))
}

/// Waits until task `id` has completed or failed.
async fn ended(c: &mut Client, plan: &str, id: &str) -> proto::Task {
    wait_task(c, plan, id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await
}

/// Waits until the run has committed three rounds of its concurrency
/// beyond what it has now (so that the requests a restart sent again are
/// answered before the next disruption: one request meeting several is
/// another test's case); the task must still be running (so what comes
/// next lands mid-run).
async fn wait_progress_past(c: &mut Client, plan: &str, id: &str) {
    let now = c
        .get_task(proto::GetTaskRequest { id: id.into() })
        .await
        .unwrap()
        .into_inner()
        .progress
        .map_or(0, |p| p.done);
    let task = wait_task(c, plan, id, |t| {
        t.status != "in_progress" || t.progress.as_ref().is_some_and(|p| p.done > now + 12)
    })
    .await;
    assert_eq!(
        task.status, "in_progress",
        "ended before the next disruption: {}",
        task.error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_the_daemon_runs_comes_back_after_kills_and_a_freeze_and_no_prompt_is_lost_or_doubled(
) {
    if todod_e2e::sqlite_only("about the server's processes; the SQLite run covers it") {
        return;
    }
    const PROMPTS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    write_prompts(&dir.path().join("prompts.jsonl"), PROMPTS, false);
    let script = local_backend().display().to_string();
    let daemon = RealDaemon::spawn_with(&state, &["--allow-server-command", &script]);
    let mut c = daemon.client().await;
    // Four restarts allowed: three kills and a freeze; the fifth failure
    // spends the budget.
    let id = start_generation(&mut c, "srv", &spec(dir.path(), llama(4))).await;
    for kill in 1..=3 {
        wait_server_events(&mut c, "srv", &id, "ready after", kill).await;
        wait_progress_past(&mut c, "srv", &id).await;
        let pid = server_pid(&state).expect("a server recorded");
        signal(pid, libc::SIGKILL);
        wait_server_events(
            &mut c,
            "srv",
            &id,
            "local: killed by signal 9 (SIGKILL)",
            kill,
        )
        .await;
    }
    // Frozen: it answers nothing, and only the deep probe can tell.
    wait_server_events(&mut c, "srv", &id, "ready after", 4).await;
    // /metrics says so too: up, three restarts.
    let metrics = reqwest::get(format!("{}/metrics", daemon.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let figure = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && l.contains("server=\"local\""))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_string)
    };
    // ListServers (`todoctl servers`) likewise, with its process.
    let listed = c
        .list_servers(proto::ListServersRequest {})
        .await
        .unwrap()
        .into_inner()
        .servers;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].state, "ready");
    assert_eq!(listed[0].restarts, 3);
    assert_eq!(Some(listed[0].pid as i32), server_pid(&state));
    assert_eq!(listed[0].tasks, std::slice::from_ref(&id));
    // The status page shows its events in the phase's section.
    let page = reqwest::Client::new()
        .get(format!("{}/plans/srv", daemon.url()))
        .bearer_auth(daemon.token.clone().unwrap_or_default())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("server local: killed by signal 9 (SIGKILL)<"),
        "{page}"
    );
    assert!(page.contains("server local: ready after"), "{page}");
    // And `todoctl status` beside the plan's phases.
    let token = daemon.token.clone();
    let status = todod_e2e::cli::run_at(&daemon.url(), token.as_deref(), &["status", "srv"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let line = format!("    local  ready  pid {}  ", listed[0].pid);
    assert!(status.stdout.contains(&line), "{}", status.stdout);
    assert!(
        status.stdout.contains("3 restarts  (t1)"),
        "{}",
        status.stdout
    );
    assert!(
        status
            .stdout
            .contains("      last exit: killed by signal 9 (SIGKILL)"),
        "{}",
        status.stdout
    );
    assert!(
        listed[0].last_exit.starts_with("killed by signal 9"),
        "{:?}",
        listed[0].last_exit
    );
    assert_eq!(
        figure("todod_server_restarts_total").as_deref(),
        Some("3"),
        "{metrics}"
    );
    assert_eq!(figure("todod_server_up").as_deref(), Some("1"), "{metrics}");
    wait_progress_past(&mut c, "srv", &id).await;
    let frozen = server_pid(&state).unwrap();
    signal(frozen, libc::SIGSTOP);
    let events = wait_server_events(&mut c, "srv", &id, "the deep probe failed", 1).await;
    assert!(
        !alive(frozen),
        "the frozen server {frozen} was not stopped: {events:#?}"
    );
    // One more kill is past the budget: the task fails naming the server.
    wait_server_events(&mut c, "srv", &id, "ready after", 5).await;
    wait_progress_past(&mut c, "srv", &id).await;
    signal(server_pid(&state).unwrap(), libc::SIGKILL);
    let failed = wait_task(&mut c, "srv", &id, |t| t.status != "in_progress").await;
    assert_eq!(failed.status, "failed");
    for said in [
        "server local",
        "budget of 4 restart(s)",
        "killed by signal 9",
    ] {
        assert!(
            failed.error.contains(said),
            "{said:?} not in {:?}",
            failed.error
        );
    }
    // What it committed stays, each prompt once.
    let committed = failed.progress.clone().unwrap();
    let (ids, records, failures) = ids_written(dir.path());
    assert!(ids.values().all(|n| *n == 1), "an id written twice");
    assert!(
        records as i64 >= committed.done,
        "{records} lines, {} committed",
        committed.done
    );
    assert_eq!(failures, 0, "a restart turned requests into failures");
    let events = server_events(&mut c, &id).await;
    let killed = events
        .iter()
        .filter(|e| e.starts_with("server local: killed by signal 9"))
        .count();
    // Three restarted; the fourth kill is in the event that gave up.
    assert_eq!(killed, 3, "{events:#?}");
    let gave_up = events.iter().filter(|e| e.contains("given up")).count();
    assert_eq!(gave_up, 1, "{events:#?}");
    assert!(
        events.iter().any(|e| e.contains("restarting (3 of 4")),
        "{events:#?}"
    );

    // A retry starts a server afresh and finishes from the checkpoint.
    c.transition_task(transition(&id, "pending")).await.unwrap();
    let task = ended(&mut c, "srv", &id).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let (ids, records, failures) = ids_written(dir.path());
    assert_eq!(ids.len(), PROMPTS);
    assert!(ids.values().all(|n| *n == 1), "an id written twice");
    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    assert_eq!(result["records"], records as u64);
    assert_eq!(result["failed"], failures as u64);
    assert_eq!(failures, 0);
    // No task needs it now: it is stopped (keep_idle_seconds 0), and its
    // record goes with it. Nothing is recorded then (no task uses it), so
    // the record is looked at until it is gone.
    let last = server_pid(&state);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while server_pid(&state).is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server still runs, unused"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(pid) = last {
        assert!(!alive(pid), "its record is gone, the server {pid} is not");
    }
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_while_its_server_runs_leaves_one_server_after_the_restart() {
    if todod_e2e::sqlite_only("about the server's processes; the SQLite run covers it") {
        return;
    }
    const PROMPTS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    write_prompts(&dir.path().join("prompts.jsonl"), PROMPTS, false);
    let script = local_backend().display().to_string();
    let mut daemon = RealDaemon::spawn_with(&state, &["--allow-server-command", &script]);
    let mut c = daemon.client().await;
    let mut server = llama(2);
    server["keep_idle_seconds"] = json!(600);
    let id = start_generation(&mut c, "srv", &spec(dir.path(), server)).await;
    wait_server_events(&mut c, "srv", &id, "ready after", 1).await;
    wait_progress_past(&mut c, "srv", &id).await;
    let first = server_pid(&state).unwrap();
    daemon.kill9();
    assert!(
        alive(first),
        "the server went with the daemon: nothing to find"
    );

    let mut daemon = RealDaemon::spawn_with(&state, &["--allow-server-command", &script]);
    let mut c = daemon.client().await;
    let task = ended(&mut c, "srv", &id).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    assert!(
        !alive(first),
        "the first daemon's server {first} still runs"
    );
    let started: Vec<String> = server_events(&mut c, &id)
        .await
        .into_iter()
        .filter(|e| e.contains("started, pid"))
        .collect();
    assert_eq!(started.len(), 2, "{started:#?}");
    let (ids, _, failures) = ids_written(dir.path());
    assert_eq!(ids.len(), PROMPTS);
    assert!(ids.values().all(|n| *n == 1), "an id written twice");
    assert_eq!(failures, 0);
    // Kept while idle (keep_idle_seconds), as `todoctl servers` says; it
    // goes with a clean stop of the daemon, and its record with it.
    let second = server_pid(&state).expect("the idle server kept");
    let token = daemon.token.clone();
    let listed = todod_e2e::cli::run_at(&daemon.url(), token.as_deref(), &["servers"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let row = listed.stdout.lines().nth(1).unwrap_or_default().to_string();
    assert!(row.starts_with("local  ready  "), "{}", listed.stdout);
    assert!(row.contains(&format!("  {second}  ")), "{}", listed.stdout);
    assert!(row.ends_with("(idle)"), "{}", listed.stdout);
    assert!(daemon.terminate().success());
    assert_eq!(
        server_pid(&state),
        None,
        "a server recorded after a clean stop"
    );
    assert!(
        !alive(second),
        "the server {second} outlived its daemon's clean stop"
    );
}

#[tokio::test]
async fn a_server_that_always_dies_spends_its_budget_and_the_task_fails_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 10, false);
    let bounds = todod_engine::phase::Boundaries::default()
        .allowing_server_commands(&[PathBuf::from("/bin/sh")])
        .unwrap();
    let daemon = TestDaemon::start_with(todod::server::Options {
        bounds,
        ..Default::default()
    })
    .await;
    let mut c = daemon.client().await;
    let dying = json!({
        "command": ["/bin/sh", "-c", "echo 'cannot load the model' >&2; exit 3", "{port}"],
        "max_restarts": 2,
        "restart_backoff_seconds": 0,
    });
    let id = start_generation(&mut c, "die", &spec(dir.path(), dying)).await;
    let task = ended(&mut c, "die", &id).await;
    assert_eq!(task.status, "failed");
    for said in [
        "server local",
        "budget of 2 restart(s)",
        "exited with code 3",
        "cannot load the model",
    ] {
        assert!(
            task.error.contains(said),
            "{said:?} not in {:?}",
            task.error
        );
    }
    let events = server_events(&mut c, &id).await;
    let restarting = events.iter().filter(|e| e.contains("restarting (")).count();
    assert_eq!(restarting, 2, "{events:#?}");
    assert!(
        !dir.path().join("out.jsonl").exists()
            || todod_e2e::json_lines(&dir.path().join("out.jsonl")).is_empty()
    );
}

#[tokio::test]
async fn a_program_the_operator_did_not_allow_is_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 10, false);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let refused = create_phase(
        &mut c,
        "deny",
        "generation",
        &spec(dir.path(), llama(1)).to_string(),
        &[],
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("spec.servers.local.command[0]"),
        "{}",
        refused.message()
    );
    assert!(
        refused.message().contains("--allow-server-command"),
        "{}",
        refused.message()
    );

    // The same through a plan file: refused whole, naming the file's path.
    let plan = format!(
        r#"
plan = "deny-file"
output_dir = "{out}"
phases = ["generation"]

[model]
name = "SmolLM2"
endpoints = ["server:local"]

[prompts]
path = "{prompts}"

[servers.local]
command = ["{script}", "serve", "--port", "{{port}}"]
"#,
        out = dir.path().join("out").display(),
        prompts = dir.path().join("prompts.jsonl").display(),
        script = local_backend().display(),
    );
    let refused = c
        .apply_pipeline(proto::ApplyPipelineRequest {
            spec_toml: plan,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("servers.local.command[0]"),
        "{}",
        refused.message()
    );
    for plan in ["deny", "deny-file"] {
        let tasks = c
            .list_tasks(proto::ListTasksRequest {
                plan: plan.into(),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner().tasks.len())
            .unwrap_or(0);
        assert_eq!(tasks, 0, "{plan}: a task was created");
    }
}

/// vLLM's engine dead behind a `/health` of 200 (vLLM #7633): the test
/// server answers 10 completions, then fails every one with a 500
/// EngineDeadError; started again, it answers them all. Its timer's probe is
/// an hour away: the run's first failures have it probed at once, two
/// failed probes restart it, and the requests that failed go again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_dead_behind_a_healthy_health_is_restarted_at_its_first_failures() {
    const PROMPTS: usize = 60;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), PROMPTS, false);
    let script = std::fs::canonicalize(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("support/servers/engine_dead.py"),
    )
    .unwrap();
    let bounds = todod_engine::phase::Boundaries::default()
        .allowing_server_commands(std::slice::from_ref(&script))
        .unwrap();
    let daemon = TestDaemon::start_with(todod::server::Options {
        bounds,
        ..Default::default()
    })
    .await;
    let mut c = daemon.client().await;
    let starts = dir.path().join("starts.txt");
    let dead = json!({
        "command": [script, "--port", "{port}", "--state", starts, "--healthy", "10"],
        "restart_backoff_seconds": 0,
        "probe_every_seconds": 3600,
        "probe_timeout_seconds": 5,
        "keep_idle_seconds": 0,
    });
    let mut spec = spec(dir.path(), dead);
    spec["stream"] = json!(false);
    spec["max_attempts"] = json!(2);
    let id = start_generation(&mut c, "dead", &spec).await;
    let task = ended(&mut c, "dead", &id).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let events = server_events(&mut c, &id).await;
    assert!(
        events
            .iter()
            .any(|e| e.contains("the deep probe failed 2 times in a row")
                && e.contains("EngineDeadError")),
        "{events:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(&starts).unwrap(),
        "2",
        "{events:#?}"
    );
    // Every prompt once, answered by the server that worked; none failed
    // for the dead engine.
    let (ids, records, failures) = ids_written(dir.path());
    assert_eq!(ids.len(), PROMPTS);
    assert!(ids.values().all(|n| *n == 1), "an id written twice");
    assert_eq!((records, failures), (PROMPTS, 0));
    for record in todod_e2e::json_lines(&dir.path().join("out.jsonl")) {
        let id = record["id"].as_str().unwrap();
        let n = id.trim_start_matches('p');
        assert_eq!(record["content"], format!("answer to question {n}"));
    }
}
