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
    await_line, lines_of, run_cmd, spawn_unix_daemon, spawn_watch, spawn_watch_both, strings,
    todoctl_at, Env, Spawned,
};

#[test]
fn watch_prints_events_as_they_happen() {
    let env = Env::start();
    let plan = "watched";
    let out = env.write(plan, &json!([{"content": "Alpha"}, {"content": "Beta"}]));
    let [alpha, beta] = <[String; 2]>::try_from(strings(&out["created"])).expect("two");
    env.write("elsewhere", &json!([{"content": "Unrelated"}]));

    let (watch, lines) = spawn_watch(&env, &["--json", "watch", "-p", plan, "--from-start"]);
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
    cmd.args(["--json", "watch", "-p", "u", "--from-start"])
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

/// `watch TASK`: from now (none of the history), only that task's events,
/// and it ends when the task does, with `wait`'s exit code.
#[test]
fn watching_a_task_starts_now_and_ends_with_it() {
    let env = Env::start();
    let out = env.write("w", &json!([{"content": "Alpha"}, {"content": "Beta"}]));
    let [alpha, beta] = <[String; 2]>::try_from(strings(&out["created"])).expect("two");
    env.ok(&["start", &beta]);

    let (watch, lines, errors) = spawn_watch_both(&env, &["watch", &alpha]);
    // The readiness signal: it says what it follows, from when.
    let said = await_line(&errors, "what it follows", |_| true);
    assert_eq!(
        said,
        format!("todoctl: following task {alpha} from now, until it ends")
    );
    env.ok(&["start", &alpha]);
    env.ok(&["done", &beta]); // another task: not printed
    env.ok(&["done", &alpha]);
    let first = await_line(&lines, "the first line", |_| true);
    assert!(
        first.ends_with(&format!(
            " w {alpha} status_changed pending -> in_progress by todoctl"
        )),
        "history is not replayed, the next change is first: {first}"
    );
    let second = await_line(&lines, "the second line", |_| true);
    assert!(
        second.contains(&format!("{alpha} status_changed in_progress -> completed")),
        "{second}"
    );
    let last = await_line(&lines, "the outcome", |_| true);
    assert_eq!(last, format!("{alpha} completed"));
    let status = watch.wait_exit();
    assert_eq!(
        status.code(),
        Some(0),
        "a completed task ends the watch with 0"
    );

    // A task that fails ends it with 10; one already ended ends it at once.
    let out = env.write("w2", &json!([{"content": "Gamma"}]));
    let gamma = strings(&out["created"])[0].clone();
    env.ok(&["start", &gamma]);
    let (watch, lines, errors) = spawn_watch_both(&env, &["watch", &gamma]);
    await_line(&errors, "what it follows", |_| true);
    env.ok(&["fail", &gamma, "--reason", "disk gone"]);
    await_line(&lines, "the failure", |l| {
        l.contains("in_progress -> failed")
    });
    let last = await_line(&lines, "the outcome", |_| true);
    assert_eq!(last, format!("{gamma} failed: disk gone"));
    assert_eq!(watch.wait_exit().code(), Some(10));
    let run = env.run(&["watch", &gamma]);
    assert_eq!(run.code, 10, "{run:#?}");
    assert_eq!(run.stdout.trim(), format!("{gamma} failed: disk gone"));
}

/// `watch -p PLAN --json`: a JSON line per event, then the outcome, when
/// nothing in the plan can move any more.
#[test]
fn watching_a_plan_ends_when_its_work_has() {
    let env = Env::start();
    let out = env.write("pw", &json!([{"content": "One"}, {"content": "Two"}]));
    let [one, two] = <[String; 2]>::try_from(strings(&out["created"])).expect("two");
    let (watch, lines, errors) = spawn_watch_both(&env, &["--json", "watch", "-p", "pw"]);
    await_line(&errors, "what it follows", |l| {
        l.contains("plan pw from now")
    });
    env.ok(&["done", &one]);
    env.ok(&["cancel", &two]);
    let parse = |line: &str| -> Value {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    };
    let e = parse(&await_line(&lines, "one's completion", |_| true));
    assert_eq!(
        (e["task_id"].as_str(), e["to_status"].as_str()),
        (Some(one.as_str()), Some("completed"))
    );
    let e = parse(&await_line(&lines, "two's cancellation", |_| true));
    assert_eq!(e["to_status"], "cancelled");
    let outcome = parse(&await_line(&lines, "the outcome", |_| true));
    assert_eq!(outcome["outcome"], "cancelled");
    assert_eq!(outcome["tasks"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        watch.wait_exit().code(),
        Some(11),
        "a cancelled task: exit 11"
    );
}

/// A watched task that a todo list leaves out (archived) will not run: the
/// watch ends with 11, as `wait` does, not with 0.
#[test]
fn watching_a_task_that_is_archived_ends_as_cancelled() {
    let env = Env::start();
    let out = env.write("wa", &json!([{"content": "Alpha"}, {"content": "Beta"}]));
    let alpha = strings(&out["created"])[0].clone();
    let (watch, _lines, errors) = spawn_watch_both(&env, &["watch", &alpha]);
    await_line(&errors, "what it follows", |l| l.contains("from now"));
    env.write("wa", &json!([{"content": "Beta"}]));
    let said = await_line(&errors, "why it ended", |l| l.contains("archived"));
    assert!(said.contains(&format!("{alpha} was archived")), "{said}");
    assert_eq!(watch.wait_exit().code(), Some(11));
}
