//! `todoctl` end to end, when things go wrong: refused operations, local
//! usage errors, an unreachable daemon, bad `write` input, writes the daemon
//! refuses, and a daemon that wants a token. Each exits with its documented
//! code and one plain `todoctl: ...` line on stderr, and changes nothing.
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
use std::process::Command;

use serde_json::{json, Value};
use todod_e2e::binary;
use todod_e2e::cli::{run_cmd, strings, todoctl_at, Env};

#[test]
fn refused_operations_exit_with_the_documented_code_and_a_plain_message() {
    let env = Env::start();
    let plan = "p";
    env.ok(&["plan", "create", plan]);
    let first = env.add(plan, "First", &[]);
    let second = env.add(plan, "Second", &["--after", &first]);

    // Starting a task whose dependency is pending: 4, naming the blocker.
    let run = env.run(&["start", &second]);
    let message = run.refused(4);
    assert!(message.contains(&second), "{message}");
    assert!(
        message.contains(&format!("blocked by {first} (pending)")),
        "{message}"
    );
    let run = env.run(&["done", &second]);
    assert!(run.refused(4).contains(&format!("blocked by {first}")));

    // A cycle: 4, naming the cycle.
    let run = env.run(&["dep", "add", &first, &second]);
    let message = run.refused(4);
    assert!(message.contains("cycle"), "{message}");

    // An illegal move: completed work cannot be cancelled.
    env.ok(&["start", &first]);
    env.ok(&["done", &first]);
    let message = env.run(&["cancel", &first]).refused(4).to_string();
    assert!(
        message.contains("cannot move from completed to cancelled"),
        "{message}"
    );
    // Reopening work a started task stands on.
    env.ok(&["start", &second]);
    let message = env.run(&["reopen", &first]).refused(4).to_string();
    assert!(message.contains("dependents have started"), "{message}");
    assert!(message.contains(&second), "{message}");

    // Unknown task or plan: 3.
    for args in [
        vec!["show", "t9999"],
        vec!["start", "t9999"],
        vec!["done", "t9999"],
        vec!["retry", "t9999"],
        vec!["dep", "add", "t9999", &first],
    ] {
        let run = env.run(&args);
        let message = run.refused(3);
        assert!(message.contains("t9999"), "{args:?}: {message}");
        assert!(message.contains("not found"), "{args:?}: {message}");
    }
    for args in [
        vec!["list", "-p", "no-such-plan"],
        vec!["status", "no-such-plan"],
        vec!["graph", "-p", "no-such-plan"],
        vec!["read", "-p", "no-such-plan"],
        vec!["watch", "-p", "no-such-plan"],
    ] {
        let message = env.run(&args).refused(3).to_string();
        assert!(message.contains("no-such-plan"), "{args:?}: {message}");
    }

    // Malformed input the daemon rejects (INVALID_ARGUMENT): 2, naming the field.
    let message = env.run(&["show", "42"]).refused(2).to_string();
    assert!(
        message.starts_with("TASK: \"42\" is not a task id"),
        "{message}"
    );
    assert!(!message.contains("leave id empty"), "API words: {message}");
    // ... in the command's own words, not the API's field names.
    let message = env
        .run(&["add", "x", "-p", "bad plan!"])
        .refused(2)
        .to_string();
    assert!(message.starts_with("--plan: "), "{message}");
    let message = env
        .run(&["add", "x", "-p", "p", "--kind", "generation"])
        .refused(2)
        .to_string();
    assert!(message.starts_with("--spec: "), "{message}");
    // Already exists: 4.
    env.ok(&["plan", "create", "other", "--title", "Other things"]);
    let message = env.run(&["plan", "create", "other"]).refused(4).to_string();
    assert!(message.contains("already exists"), "{message}");

    // Usage errors from the argument parser: 2.
    for args in [
        vec!["list"],
        vec!["list", "-p", plan, "--status", "done"],
        vec!["add", "x", "-p", plan, "--priority", "urgent"],
        vec!["frobnicate"],
    ] {
        let run = env.run(&args);
        assert_eq!(run.code, 2, "{args:?}: {run:#?}");
        assert!(run.stdout.is_empty());
        assert!(run.stderr.contains("error:"), "{args:?}: {run:#?}");
    }
    let message = env.run(&["add", "  ", "-p", plan]).refused(2).to_string();
    assert!(message.contains("CONTENT must not be empty"), "{message}");
    let message = env
        .run(&["add", "x", "-p", plan, "--spec", "[1]"])
        .refused(2)
        .to_string();
    assert_eq!(message, "--spec: expected a JSON object");
}

#[test]
fn local_usage_errors_are_caught_before_dialling() {
    // Nothing listens here; every one of these fails before connecting.
    let dir = tempfile::tempdir().expect("temp dir");
    let addr = format!("unix:{}", dir.path().join("none.sock").display());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--client-name", "b\u{f8}b", "status"],
            "--client-name must be non-empty printable ASCII",
        ),
        (
            vec!["--token", "two words", "status"],
            "--token must be printable ASCII without spaces",
        ),
        (
            vec!["--addr", "https://todo.example:443", "status"],
            "https is not supported",
        ),
        (
            vec!["--addr", "ftp://todo.example", "status"],
            "expected http://HOST:PORT or unix:/path/to/todod.sock",
        ),
        (vec!["--addr", "unix:", "status"], "missing socket path"),
        (
            vec!["add", "x", "-p", "p", "--spec", "@/nonexistent/spec.json"],
            "--spec @/nonexistent/spec.json: cannot read the file",
        ),
    ];
    for (args, words) in cases {
        let mut cmd = Command::new(binary("todoctl"));
        for var in ["TODOD_TOKEN", "TODOD_PLAN", "TODOD_CLIENT"] {
            cmd.env_remove(var);
        }
        // `--addr` is given at most once: as the case's own, or this one.
        cmd.env("TODOD_ADDR", &addr);
        cmd.args(&args);
        let run = run_cmd(cmd, None);
        let message = run.refused(2);
        assert!(message.contains(words), "{args:?}: {message}");
    }
}

#[test]
fn an_unreachable_daemon_exits_5_and_names_the_address() {
    // A Unix socket that does not exist.
    let dir = tempfile::tempdir().expect("temp dir");
    let sock = dir.path().join("todod.sock");
    let addr = format!("unix:{}", sock.display());
    for args in [
        vec!["status"],
        vec!["list", "-p", "p"],
        vec!["start", "t1"],
        vec!["watch", "-p", "p"],
    ] {
        let mut cmd = todoctl_at(&addr, None);
        cmd.args(&args);
        let run = run_cmd(cmd, None);
        let message = run.refused(5);
        assert!(
            message.starts_with(&format!("cannot reach todod at {addr}: ")),
            "{args:?}: {message}"
        );
        assert!(message.contains("is the daemon running?"), "{message}");
    }
    // Input is checked before dialling: bad input is still a usage error.
    let mut cmd = todoctl_at(&addr, None);
    cmd.args(["write", "-p", "p"]);
    let message = run_cmd(cmd, Some(b"[{\"content\": 1}]"))
        .refused(2)
        .to_string();
    assert!(message.starts_with("todos[0].content"), "{message}");
    // A valid write to nowhere is 5.
    let mut cmd = todoctl_at(&addr, None);
    cmd.args(["write", "-p", "p"]);
    run_cmd(cmd, Some(b"[{\"content\": \"a\"}]")).refused(5);

    // A TCP address where a daemon was and is no more.
    let mut env = Env::start();
    let addr = env.addr();
    env.ok(&["plan", "create", "p"]);
    let status = env.daemon.terminate();
    assert!(status.success(), "todod stops cleanly on SIGTERM: {status}");
    let message = env.run(&["status"]).refused(5).to_string();
    assert!(
        message.starts_with(&format!("cannot reach todod at {addr}: ")),
        "{message}"
    );
    assert!(
        message.to_lowercase().contains("refused"),
        "names the cause: {message}"
    );
}

/// Bad stdin for `todoctl write`, and the words the message must contain.
fn bad_inputs() -> Vec<(&'static str, Vec<u8>, Vec<&'static str>)> {
    vec![
        (
            "invalid JSON",
            b"[{\"content\": \"a\",}]".to_vec(),
            vec!["stdin: invalid JSON at line 1 column"],
        ),
        (
            "invalid JSON on a later line",
            b"[\n  {\"content\": \"a\"}\n  {\"content\": \"b\"}\n]".to_vec(),
            vec!["stdin: invalid JSON at line 3 column 3"],
        ),
        (
            "invalid UTF-8",
            b"[{\"content\": \"caf\xe9\"}]".to_vec(),
            vec!["stdin: invalid UTF-8 at byte 17"],
        ),
        (
            "content is a number",
            b"[{\"content\": \"a\"}, {\"content\": 42}]".to_vec(),
            vec!["todos[1].content: expected a string, found a number"],
        ),
        (
            "unknown status",
            br#"{"todos": [{"content": "a", "status": "done"}]}"#.to_vec(),
            vec!["todos[0].status: \"done\" is not one of pending, in_progress"],
        ),
        (
            "unknown priority",
            br#"[{"content": "a", "priority": "urgent"}]"#.to_vec(),
            vec!["todos[0].priority: \"urgent\" is not one of high, medium, low"],
        ),
        (
            "missing content",
            br#"[{"status": "pending"}]"#.to_vec(),
            vec!["todos[0].content: missing"],
        ),
        (
            "wrong top-level shape",
            br#"{"items": []}"#.to_vec(),
            vec!["no \"todos\" field"],
        ),
        ("a bare number", b"42".to_vec(), vec!["found a number"]),
        (
            "dependencies as a string",
            br#"[{"content": "a", "depends_on": "t1"}]"#.to_vec(),
            vec!["todos[0].depends_on: expected an array of task ids, found a string"],
        ),
        ("empty input", Vec::new(), vec!["stdin: empty input"]),
        (
            "only whitespace",
            b" \n\t\n".to_vec(),
            vec!["stdin: empty input"],
        ),
    ]
}

#[test]
fn bad_write_input_exits_2_and_changes_nothing() {
    let env = Env::start();
    let plan = "careful";
    let out = env.write(
        plan,
        &json!([{"content": "Keep me", "status": "in_progress"}, {"content": "Me too"}]),
    );
    // Revision 1 is the plan's creation, 2 the write.
    assert_eq!(out["plan"]["revision"], 2);
    let before = env.snapshot();

    for (what, input, words) in bad_inputs() {
        for target in [plan, "brand-new-plan"] {
            let run = env.run_stdin(&["write", "-p", target], &input);
            let message = run.refused(2);
            for word in &words {
                assert!(message.contains(word), "{what}: {word:?} in {message:?}");
            }
        }
    }
    // The same with --json: errors stay plain text on stderr.
    let run = env.run_stdin(&["--json", "write", "-p", plan], b"[{\"content\": 1}]");
    run.refused(2);

    assert_eq!(env.snapshot(), before, "the store is unchanged");
    assert_eq!(env.json(&["status", plan])["plan"]["revision"], 2);
    env.run(&["status", "brand-new-plan"]).refused(3);
}

#[test]
fn writes_the_daemon_refuses_change_nothing() {
    let env = Env::start();
    let plan = "strict";
    let out = env.write(
        plan,
        &json!([{"content": "First"}, {"content": "Second"}, {"content": "Third"}]),
    );
    let [first, second, third] = <[String; 3]>::try_from(strings(&out["created"])).expect("3");
    env.write(
        plan,
        &json!([
            {"id": first, "content": "First"},
            {"id": second, "content": "Second", "depends_on": [first]},
            {"id": third, "content": "Third"},
        ]),
    );
    let other = env.write("other", &json!([{"content": "Elsewhere"}]));
    let elsewhere = strings(&other["created"])[0].clone();
    let revision = env.json(&["status", plan])["plan"]["revision"]
        .as_i64()
        .unwrap();
    let before = env.snapshot();

    let cases: Vec<(Value, Vec<&str>, i32, Vec<String>)> = vec![
        (
            json!([{"id": "t9999", "content": "Ghost"}]),
            vec![],
            3,
            vec!["t9999".into(), "todos[0].id".into()],
        ),
        (
            json!([{"id": "7", "content": "First"}]),
            vec![],
            2,
            vec!["todos[0].id".into(), "not a task id".into()],
        ),
        (
            json!([{"id": first, "content": "First", "depends_on": [elsewhere]}]),
            vec![],
            2,
            vec!["todos[0].depends_on".into(), elsewhere.clone()],
        ),
        (
            // pending -> failed is never legal.
            json!([{"id": first, "content": "First", "status": "failed"}, {"content": "New"}]),
            vec![],
            4,
            vec![first.clone(), "cannot move from pending to failed".into()],
        ),
        (
            // Starting Second while First is pending; the new item must not be created.
            json!([
                {"content": "Brand new"},
                {"id": first, "content": "First renamed"},
                {"id": second, "content": "Second", "status": "in_progress"},
                {"id": third, "content": "Third"},
            ]),
            vec![],
            4,
            vec![second.clone(), format!("blocked by {first}")],
        ),
        (
            // A cycle.
            json!([
                {"id": first, "content": "First", "depends_on": [second]},
                {"id": second, "content": "Second"},
                {"id": third, "content": "Third"},
            ]),
            vec![],
            4,
            vec!["cycle".into()],
        ),
        (
            // A stale revision.
            json!([{"content": "First"}]),
            vec!["--expected-revision", "1"],
            4,
            vec![format!("at revision {revision}, not 1")],
        ),
        (
            // The same id twice.
            json!([{"id": first, "content": "First"}, {"id": first, "content": "First"}]),
            vec![],
            2,
            vec!["todos[1].id".into(), "more than once".into()],
        ),
    ];
    for (todos, extra, code, words) in cases {
        let mut args = vec!["write", "-p", plan];
        args.extend(extra);
        let input = serde_json::to_vec(&todos).unwrap();
        let run = env.run_stdin(&args, &input);
        let message = run.refused(code);
        for word in &words {
            assert!(
                message.contains(word.as_str()),
                "{todos}: {word:?} in {message:?}"
            );
        }
    }
    assert_eq!(
        env.snapshot(),
        before,
        "every refused write changed nothing"
    );

    // The right revision goes through.
    let rev = revision.to_string();
    let run = env.run_stdin(
        &["write", "-p", plan, "--expected-revision", &rev],
        br#"[{"content": "First"}, {"content": "Second"}, {"content": "Third"}]"#,
    );
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout
            .ends_with(&format!("\nplan {plan} at revision {revision}\n")),
        "a no-op write at the right revision: {run:#?}"
    );
}

#[test]
fn a_token_daemon_wants_the_token() {
    let env = Env::start_with(&["--token", "s3cret-s3cret-s3cret"]);
    let plan = "private";

    // No token: 6, with a hint.
    for args in [vec!["status"], vec!["list", "-p", plan], vec!["watch"]] {
        let message = env.run(&args).refused(6).to_string();
        assert!(message.contains("--token"), "{args:?}: {message}");
    }
    let message = env
        .run_stdin(&["write", "-p", plan], br#"[{"content": "a"}]"#)
        .refused(6)
        .to_string();
    assert!(message.contains("bearer token"), "{message}");

    // A wrong token: 6 too.
    let mut cmd = env.cmd(&["status"]);
    cmd.args(["--token", "guess-guess-guess-guess"]);
    let message = run_cmd(cmd, None).refused(6).to_string();
    assert!(message.contains("check --token"), "{message}");

    // The right token, as a flag or from TODOD_TOKEN.
    let mut cmd = env.cmd(&["--token", "s3cret-s3cret-s3cret", "write", "-p", plan]);
    cmd.env_remove("TODOD_TOKEN");
    let run = run_cmd(cmd, Some(br#"[{"content": "Secret work"}]"#));
    assert_eq!(run.code, 0, "{run:#?}");
    let mut cmd = env.cmd(&["--json", "list", "-p", plan]);
    cmd.env("TODOD_TOKEN", "s3cret-s3cret-s3cret");
    let run = run_cmd(cmd, None);
    assert_eq!(run.code, 0, "{run:#?}");
    let listed: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(listed["tasks"][0]["content"], "Secret work");

    // The token is never echoed back.
    let mut cmd = env.cmd(&["status", "nope"]);
    cmd.args(["--token", "s3cret-s3cret-s3cret"]);
    let run = run_cmd(cmd, None);
    assert!(!run.stderr.contains("s3cret-s3cret-s3cret"), "{run:#?}");
    run.refused(3);

    let authed = Env {
        token: Some("s3cret-s3cret-s3cret".into()),
        ..env
    };
    assert!(authed.ok(&["status", plan]).contains("1 task: 1 pending"));
}
