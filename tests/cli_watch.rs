//! `todoctl watch` end to end: events printed as they happen, as JSON or
//! text, for one plan or all, from a sequence number, and across a restart of
//! a daemon serving a Unix socket.
//!
//! The real CLI binary against the real `todod` binary, driven the way a
//! person (or an agent's shell tool) drives it: arguments, stdin, stdout,
//! stderr and the exit code.
//!
//! Every test starts its own daemon on an ephemeral loopback port with its own
//! state directory, so the tests run in parallel. `--addr` and `TODOD_ADDR`
//! are always set, and the other `TODOD_*` variables are cleared, so nothing
//! from the environment (or a default port) leaks in. The harness is
//! `todod_e2e::cli` (`tests/support/cli.rs`).
use std::process::Stdio;

use serde_json::{json, Value};
use todod_e2e::cli::{
    await_line, lines_of, run_cmd, spawn_unix_daemon, spawn_watch, strings, todoctl_at, Env,
    Spawned,
};

#[test]
fn watch_prints_events_as_they_happen() {
    let env = Env::start();
    let plan = "watched";
    let out = env.write(plan, &json!([{"content": "Alpha"}, {"content": "Beta"}]));
    let [alpha, beta] = <[String; 2]>::try_from(strings(&out["created"])).expect("two");
    env.write("elsewhere", &json!([{"content": "Unrelated"}]));

    let (watch, lines) = spawn_watch(&env, &["--json", "watch", "-p", plan]);
    // From the beginning: the history so far, one compact JSON object a line.
    let parse = |line: &str| -> Value {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    };
    let first = parse(&await_line(&lines, "the first event", |_| true));
    assert_eq!(first["plan"], plan);
    let mut last_seq = first["seq"].as_i64().expect("seq");
    // Wait until the history is replayed (Beta's creation), so what comes
    // next is live.
    let created = await_line(&lines, "Beta's task_created", |l| {
        let e = parse(l);
        assert_eq!(e["plan"], plan, "only the watched plan: {l}");
        let seq = e["seq"].as_i64().expect("seq");
        assert!(seq > last_seq, "seq increases: {l}");
        last_seq = seq;
        e["type"] == "task_created" && e["task_id"] == beta.as_str()
    });
    assert!(created.starts_with('{') && !created.contains('\n'));

    // A change made by another todoctl shows up.
    env.ok(&[
        "--client-name",
        "mover",
        "start",
        &alpha,
        "--reason",
        "watch me",
    ]);
    let line = await_line(&lines, "Alpha's status change", |l| {
        parse(l)["type"] == "status_changed"
    });
    let e = parse(&line);
    assert_eq!(e["task_id"], alpha.as_str());
    assert_eq!(e["from_status"], "pending");
    assert_eq!(e["to_status"], "in_progress");
    assert_eq!(e["actor"], "mover");
    assert_eq!(e["reason"], "watch me");
    assert!(e["seq"].as_i64().unwrap() > last_seq);
    assert!(e["plan_revision"].as_i64().unwrap() >= 2);
    assert!(!e["at"].as_str().unwrap().is_empty());

    // Changes to another plan do not; the next line is this plan's again.
    env.write("elsewhere", &json!([{"content": "Unrelated 2"}]));
    env.ok(&["dep", "add", &beta, &alpha]);
    let line = await_line(&lines, "the dependency", |_| true);
    let e = parse(&line);
    assert_eq!(e["type"], "dependency_added", "{line}");
    assert_eq!(e["task_id"], beta.as_str());
    assert_eq!(e["new_value"], alpha.as_str());

    // Ctrl-C ends the watch cleanly.
    let status = watch.interrupt();
    assert!(status.success(), "watch exits 0 on SIGINT: {status}");
}

#[test]
fn watch_in_text_form_and_from_a_sequence_number() {
    let env = Env::start();
    let out = env.write("a", &json!([{"content": "One"}]));
    let one = strings(&out["created"])[0].clone();
    let history = env.json(&["show", &one]);
    let last = history["events"].as_array().unwrap().last().unwrap()["seq"]
        .as_i64()
        .unwrap()
        .to_string();

    // Every plan, text lines, only what comes after --after.
    let (watch, lines) = spawn_watch(&env, &["watch", "--after", &last]);
    env.ok(&["--client-name", "texter", "done", &one, "--reason", "easy"]);
    let line = await_line(&lines, "the status change", |_| true);
    assert!(line.starts_with('#'), "{line}");
    assert!(
        line.ends_with(&format!(
            " a {one} status_changed pending -> completed by texter (reason: easy)"
        )),
        "{line}"
    );
    env.ok(&["plan", "create", "b"]);
    let line = await_line(&lines, "plan b's creation", |_| true);
    assert!(line.ends_with(" b - plan_created by todoctl"), "{line}");
    watch.interrupt();
}

#[test]
fn watch_over_a_unix_socket_survives_a_daemon_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    let socket = dir.path().join("todod.sock");
    let addr = format!("unix:{}", socket.display());
    let ctl = |args: &[&str], stdin: Option<&[u8]>| {
        let mut cmd = todoctl_at(&addr, None);
        cmd.args(args);
        run_cmd(cmd, stdin)
    };
    let parse = |line: &str| -> Value {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    };

    let daemon = spawn_unix_daemon(&state, &socket);
    let run = ctl(
        &["--json", "write", "-p", "u"],
        Some(br#"[{"content": "Survive a restart"}]"#),
    );
    assert_eq!(run.code, 0, "{run:#?}");
    let id = strings(&parse(&run.stdout)["created"])[0].clone();

    let mut cmd = todoctl_at(&addr, None);
    cmd.args(["--json", "watch", "-p", "u"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn watch");
    let lines = lines_of(child.stdout.take().expect("stdout"));
    let warnings = lines_of(child.stderr.take().expect("stderr"));
    let watch = Spawned(Some(child));
    await_line(&lines, "the task's creation", |l| {
        parse(l)["type"] == "task_created"
    });

    // The daemon stops: the watch says so on stderr and keeps trying.
    let status = daemon.signal_and_wait(libc::SIGTERM);
    assert!(status.success(), "todod stops cleanly: {status}");
    await_line(&warnings, "the interruption", |l| {
        l.starts_with("todoctl: watch interrupted")
    });
    let run = ctl(&["status"], None);
    run.refused(5);

    // Back on the same socket and database: a change made now is followed.
    let daemon = spawn_unix_daemon(&state, &socket);
    let run = ctl(&["start", &id, "--reason", "after the restart"], None);
    assert_eq!(run.code, 0, "{run:#?}");
    let line = await_line(&lines, "the status change", |_| true);
    let e = parse(&line);
    assert_eq!(
        e["type"], "status_changed",
        "nothing replayed twice: {line}"
    );
    assert_eq!(e["task_id"], id.as_str());
    assert_eq!(e["reason"], "after the restart");
    await_line(&warnings, "the reconnection", |l| {
        l.starts_with("todoctl: reconnected, following from seq")
    });

    assert!(watch.interrupt().success());
    assert!(daemon.signal_and_wait(libc::SIGTERM).success());
}
