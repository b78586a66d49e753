//! `todoctl wait`, `edit`, `fail`, `plan archive` and `completions`. `wait` blocks until the
//! task (or the plan) has ended, and its exit code says how: 0 completed, 10
//! failed or stuck behind a failure, 11 cancelled, 124 the timeout passed
//! first. The real CLI against the real daemon; harness in
//! `tests/support/cli.rs`.
use std::process::Stdio;

use serde_json::json;
use todod_e2e::cli::{finish, strings, Env};
use todod_e2e::ClosedPort;

#[test]
fn a_task_is_waited_for_and_the_exit_code_says_how_it_ended() {
    let env = Env::start();
    env.ok(&["plan", "create", "w"]);
    let a = env.add("w", "First", &[]);
    let b = env.add("w", "Second", &[]);

    // Still open when the timeout passes: 124, and it says so.
    let run = env.run(&["wait", &a, "--timeout", "300ms"]);
    assert_eq!(run.code, 124, "{run:#?}");
    assert!(run.stderr.contains("had not ended"), "{run:#?}");

    // Blocked until the task completes, then 0.
    let waiting = env
        .cmd(&["wait", &a])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    env.ok(&["start", &a]);
    env.ok(&["done", &a]);
    let run = finish(waiting, None);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(run.stdout.trim(), format!("{a} completed"));

    // Cancelled: 11, with nothing on stderr (the outcome is on stdout).
    env.ok(&["cancel", &b]);
    let run = env.run(&["wait", &b]);
    assert_eq!(
        (run.code, run.stdout.trim()),
        (11, &*format!("{b} cancelled"))
    );
    assert!(run.stderr.is_empty(), "{run:#?}");

    // --json says it too.
    let run = env.run(&["--json", "wait", &a]);
    let out: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(out["outcome"], "completed");
}

#[test]
fn a_plan_ends_when_nothing_can_move_and_a_failure_says_which() {
    let env = Env::start();
    let dead = ClosedPort::new();
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("p.jsonl");
    std::fs::write(
        &prompts,
        "{\"id\": \"a\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n",
    )
    .unwrap();
    env.ok(&["plan", "create", "gen"]);
    let spec = json!({
        "prompts": prompts, "output": dir.path().join("out.jsonl"),
        "endpoints": [dead.url()], "model": "m", "max_attempts": 1,
    });
    let generation = env.add(
        "gen",
        "Generate",
        &["--kind", "generation", "--spec", &spec.to_string()],
    );
    let after = env.add("gen", "Use the completions", &["--after", &generation]);

    // Every prompt fails against a dead endpoint: the generation fails, the
    // task after it can no longer run, and the plan has ended: 10.
    let run = env.run(&["wait", "-p", "gen", "--timeout", "60s"]);
    assert_eq!(run.code, 10, "{run:#?}");
    assert!(
        run.stdout.contains(&format!("{generation} failed")),
        "{run:#?}"
    );
    assert!(
        run.stdout.contains(&format!("{after} cannot run")),
        "{run:#?}"
    );
}

#[test]
fn completions_are_generated_for_bash_zsh_and_fish_without_a_daemon() {
    // No daemon at all: completions need none.
    let addr = format!(
        "http://{}",
        ClosedPort::new().url().trim_start_matches("http://")
    );
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef todoctl"),
        ("fish", "complete -c todoctl"),
    ] {
        let run = todod_e2e::cli::run_cmd(
            {
                let mut cmd = todod_e2e::cli::todoctl_at(&addr, None);
                cmd.args(["completions", shell]);
                cmd
            },
            None,
        );
        assert_eq!(run.code, 0, "{shell}: {run:#?}");
        assert!(run.stdout.contains(marker), "{shell}: no {marker:?}");
        for verb in ["wait", "schedule", "apply"] {
            assert!(run.stdout.contains(verb), "{shell} completes no {verb}");
        }
    }
}

#[test]
fn the_manual_page_is_generated_without_a_daemon() {
    let addr = format!(
        "http://{}",
        ClosedPort::new().url().trim_start_matches("http://")
    );
    let run = todod_e2e::cli::run_at(&addr, None, &["man"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(run.stdout.contains(".TH todoctl 1"), "not a manual page");
    for verb in ["wait", "schedule", "status"] {
        assert!(run.stdout.contains(verb), "the page names no {verb}");
    }
}

#[test]
fn edit_changes_what_it_is_told_and_fail_wants_a_reason() {
    let env = Env::start();
    env.ok(&["plan", "create", "e"]);
    let t = env.add("e", "Wrong words", &[]);
    let run = env.run(&["edit", &t]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(run.stderr.contains("nothing to change"), "{run:#?}");
    env.ok(&[
        "edit",
        &t,
        "--content",
        "Right words",
        "--priority",
        "high",
        "--reason",
        "typo",
    ]);
    let shown = env.json(&["show", &t]);
    assert_eq!(shown["task"]["content"], "Right words");
    assert_eq!(shown["task"]["priority"], "high");

    // A spec for a plain task is refused by the daemon, naming the field.
    let run = env.run(&["edit", &t, "--spec", "{\"x\": 1}"]);
    assert_ne!(run.code, 0, "{run:#?}");

    env.ok(&["start", &t]);
    let run = env.run(&["fail", &t]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(run.stderr.contains("--reason"), "{run:#?}");
    env.ok(&["fail", &t, "--reason", "the disk is gone"]);
    let run = env.run(&["wait", &t]);
    assert_eq!(run.code, 10, "{run:#?}");
}

#[test]
fn a_failure_two_steps_up_ends_the_wait_of_a_task_and_of_its_plan() {
    let env = Env::start();
    env.ok(&["plan", "create", "chain"]);
    let a = env.add("chain", "First", &[]);
    let b = env.add("chain", "Second", &["--after", &a]);
    let c = env.add("chain", "Third", &["--after", &b]);
    env.ok(&["start", &a]);
    // Waiting on the last task, written as a person might (`t003`).
    let written = format!("t{:03}", c.trim_start_matches('t'));
    let waiting = env
        .cmd(&["wait", &written, "--timeout", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    env.ok(&["fail", &a, "--reason", "broken"]);
    let run = finish(waiting, None);
    assert_eq!(run.code, 10, "{run:#?}");
    assert!(run.stdout.contains("cannot run"), "{run:#?}");
    let run = env.run(&["wait", "-p", "chain", "--timeout", "60s"]);
    assert_eq!(run.code, 10, "{run:#?}");
    for id in [&a, &b, &c] {
        assert!(run.stdout.contains(id.as_str()), "{id}: {run:#?}");
    }
}

#[test]
fn a_plan_is_archived_out_of_the_way_and_restored() {
    let env = Env::start();
    let out = env.write(
        "old",
        &json!([{"content": "Build", "status": "in_progress"}]),
    );
    let build = strings(&out["created"])[0].clone();
    let run = env.run(&["plan", "archive", "old"]);
    assert_eq!(run.code, 4, "{run:#?}");
    assert!(
        run.stderr.contains(&format!("in progress ({build})")),
        "{run:#?}"
    );
    env.ok(&["done", &build]);
    let said = env.ok(&["plan", "archive", "old", "--reason", "shipped"]);
    assert!(said.contains("plan old archived"), "{said}");
    // Out of status and plan list, there with --all; closed to changes.
    let listed = env.ok(&["plan", "list"]);
    assert_eq!(
        listed.trim(),
        "no live plans (1 archived: todoctl plan list --all)"
    );
    let all = env.ok(&["plan", "list", "--all"]);
    assert!(all.contains("old (archived)"), "{all}");
    let status = env.json(&["status"]);
    assert_eq!(
        status["plans"].as_array().map(Vec::len),
        Some(0),
        "{status}"
    );
    let run = env.run(&["add", "-p", "old", "More"]);
    assert_eq!(run.code, 4, "{run:#?}");
    assert!(run.stderr.contains("plan old is archived"), "{run:#?}");
    let shown = env.json(&["plan", "show", "old"]);
    assert!(shown["plan"]["archived_at"].is_string(), "{shown}");
    env.ok(&["plan", "restore", "old"]);
    env.ok(&["add", "-p", "old", "More"]);
    assert!(env.ok(&["plan", "list"]).contains("old "));
}

#[test]
fn ping_says_whether_the_daemon_serves_and_waits_for_one_that_starts_late() {
    let env = Env::start();
    env.ok(&["plan", "create", "p1"]);
    let out = env.ok(&["ping"]);
    assert!(
        out.starts_with(&format!("todod serving at {}: 1 plan (", env.addr())),
        "{out}"
    );
    let answer = env.json(&["ping"]);
    assert_eq!(answer["serving"], json!(true), "{answer}");
    assert_eq!(answer["plans"], json!(1), "{answer}");

    // It answered, with a refusal: no waiting changes that, so --wait gives up at once.
    let refused = todod_e2e::cli::run_at(
        &env.addr(),
        Some("not-the-token-0123456789"),
        &["ping", "--wait", "10m"],
    );
    assert_eq!(refused.code, 6, "{refused:#?}");

    // Nothing listens yet: unreachable (5) at once without --wait ...
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("late.sock");
    let addr = format!("unix:{}", socket.display());
    let run = todod_e2e::cli::run_at(&addr, None, &["ping"]);
    assert_eq!(run.code, 5, "{run:#?}");
    assert!(run.stderr.contains("cannot reach todod"), "{run:#?}");

    // ... and with --wait, the answer of a daemon started after it asked.
    let state = tempfile::tempdir().unwrap();
    ping_a_daemon_started_after_it(
        &addr,
        state.path(),
        &["--listen", "none", "--socket", socket.to_str().unwrap()],
    );
}

#[test]
fn ping_waits_over_tcp_for_a_daemon_whose_token_is_written_after_it_asked() {
    // As README's example runs it: todoctl asks before the daemon has
    // started, so before the token it reads from the state directory exists.
    let state = tempfile::tempdir().unwrap();
    let port = ClosedPort::new().port; // free again once dropped
    let addr = format!("http://127.0.0.1:{port}");
    ping_a_daemon_started_after_it(
        &addr,
        state.path(),
        &["--listen", &format!("127.0.0.1:{port}"), "--socket", "none"],
    );
}

#[test]
fn ping_does_not_take_a_daemon_that_never_answers_for_one_that_serves() {
    // Connections are accepted (the kernel's backlog) but nothing answers:
    // each try gives up, and ping says the daemon does not serve.
    let silent = todod_e2e::SilentPort::new();
    let run = todod_e2e::cli::run_at(&silent.url, Some("0123456789abcdef"), &["ping"]);
    assert_eq!(run.code, 5, "{run:#?}");
    assert!(
        run.stderr.contains("did not answer a read within 10s")
            || run.stderr.contains("cannot reach todod"),
        "{run:#?}"
    );
}

/// `todoctl ping --wait 10m` at `addr` (finding the token in `state`),
/// started before the daemon is; then the daemon on `state` with
/// `daemon_args`. Asserts that ping ended saying the daemon serves.
fn ping_a_daemon_started_after_it(addr: &str, state: &std::path::Path, daemon_args: &[&str]) {
    let waiting = {
        let mut cmd = todod_e2e::cli::todoctl_at(addr, None);
        cmd.env("TODOD_STATE_DIR", state)
            .args(["ping", "--wait", "10m"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };
    let mut daemon = todod_e2e::todod_command(state, daemon_args)
        .spawn()
        .unwrap();
    let run = finish(waiting, None);
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout
            .starts_with(&format!("todod serving at {addr}: 0 plans")),
        "{run:#?}"
    );
}
