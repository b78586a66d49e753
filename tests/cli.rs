//! `todoctl` end to end: the real CLI binary against the real `todod` binary,
//! driven the way a person (or an agent's shell tool) drives it: arguments,
//! stdin, stdout, stderr and the exit code.
//!
//! Every test starts its own daemon on an ephemeral loopback port with its own
//! state directory, so the tests run in parallel. `--addr` and `TODOD_ADDR`
//! are always set, and the other `TODOD_*` variables are cleared, so nothing
//! from the environment (or a default port) leaks in.
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;
use todod_e2e::{binary, RealDaemon};

/// Only a safety net: nothing below waits this long unless something hangs.
const SAFETY_TIMEOUT: Duration = Duration::from_secs(30);

/// What one `todoctl` run left behind.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts the exit code and that stderr is exactly one plain
    /// `todoctl: ...` line (no Debug dump of a gRPC status); returns the message.
    fn refused(&self, code: i32) -> &str {
        assert_eq!(self.code, code, "expected exit {code}: {self:#?}");
        assert!(self.stdout.is_empty(), "nothing on stdout: {self:#?}");
        let message = self
            .stderr
            .strip_prefix("todoctl: ")
            .and_then(|m| m.strip_suffix('\n'))
            .unwrap_or_else(|| panic!("stderr is not one `todoctl: ` line: {self:#?}"));
        assert!(!message.contains('\n'), "one line only: {self:#?}");
        for noise in [
            "Status {",
            "MetadataMap",
            "details: [",
            "source: Some",
            "Error {",
        ] {
            assert!(
                !message.contains(noise),
                "plain message expected: {message}"
            );
        }
        message
    }
}

fn kill(pid: u32, signal: i32) {
    // SAFETY: sending a signal to a child process of ours, by its pid.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

/// Waits for a spawned todoctl, feeding it `stdin`, with the safety timeout.
fn finish(mut child: Child, stdin: Option<Vec<u8>>) -> Run {
    let pid = child.id();
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("stdin piped");
        // A refused input may make todoctl exit before reading all of it.
        std::thread::spawn(move || {
            let _ = pipe.write_all(&bytes);
        });
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(SAFETY_TIMEOUT) {
        Ok(output) => output.expect("wait for todoctl"),
        Err(_) => {
            kill(pid, libc::SIGKILL);
            panic!("todoctl did not finish within {SAFETY_TIMEOUT:?}");
        }
    };
    Run {
        code: output.status.code().expect("todoctl exited (not killed)"),
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    }
}

/// `todoctl` with only the given address, token and environment.
fn todoctl_at(addr: &str, token: Option<&str>) -> Command {
    let mut cmd = Command::new(binary("todoctl"));
    for var in ["TODOD_TOKEN", "TODOD_PLAN", "TODOD_CLIENT", "TODOD_ADDR"] {
        cmd.env_remove(var);
    }
    cmd.env("TODOD_ADDR", addr).arg("--addr").arg(addr);
    if let Some(token) = token {
        cmd.arg("--token").arg(token);
    }
    cmd
}

fn run_cmd(mut cmd: Command, stdin: Option<&[u8]>) -> Run {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn todoctl");
    finish(child, stdin.map(<[u8]>::to_vec))
}

/// One daemon of this test's own, and `todoctl` pointed at it.
struct Env {
    daemon: RealDaemon,
    token: Option<String>,
    _dir: TempDir,
}

impl Env {
    fn start() -> Env {
        Env::start_with(&[])
    }

    /// `extra` goes to todod; todoctl sends no token until one is set.
    fn start_with(extra: &[&str]) -> Env {
        let dir = tempfile::tempdir().expect("temp dir");
        let daemon = RealDaemon::spawn_with(dir.path(), extra);
        Env {
            daemon,
            token: None,
            _dir: dir,
        }
    }

    fn addr(&self) -> String {
        self.daemon.url()
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = todoctl_at(&self.addr(), self.token.as_deref());
        cmd.args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Run {
        run_cmd(self.cmd(args), None)
    }

    fn run_stdin(&self, args: &[&str], stdin: &[u8]) -> Run {
        run_cmd(self.cmd(args), Some(stdin))
    }

    /// Runs a command that must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let run = self.run(args);
        assert_eq!(run.code, 0, "todoctl {args:?} failed: {run:#?}");
        assert!(run.stderr.is_empty(), "todoctl {args:?} warned: {run:#?}");
        run.stdout
    }

    /// `todoctl --json ARGS`, parsed.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.ok(&all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
    }

    /// `todoctl --json write -p PLAN` with `todos` on stdin; must succeed.
    fn write(&self, plan: &str, todos: &Value) -> Value {
        let input = serde_json::to_vec(todos).expect("serialise");
        let run = self.run_stdin(&["--json", "write", "-p", plan], &input);
        assert_eq!(run.code, 0, "write {todos}: {run:#?}");
        serde_json::from_str(&run.stdout).expect("write --json prints JSON")
    }

    /// `todoctl add CONTENT -p PLAN ...`: prints just the new id.
    fn add(&self, plan: &str, content: &str, extra: &[&str]) -> String {
        let mut args = vec!["add", content, "-p", plan];
        args.extend_from_slice(extra);
        let id = self.ok(&args).trim().to_string();
        assert!(is_task_id(&id), "add prints the id, got {id:?}");
        id
    }

    /// Everything todoctl can observe of the store, for "nothing changed".
    fn snapshot(&self) -> String {
        let mut out = self.ok(&["--json", "plan", "list"]);
        let plans = serde_json::from_str::<Value>(&out).expect("plan list JSON")["plans"]
            .as_array()
            .expect("plans")
            .iter()
            .map(|p| p["plan"]["name"].as_str().expect("name").to_string())
            .collect::<Vec<_>>();
        for plan in plans {
            out += &self.ok(&["--json", "list", "-p", &plan, "--all"]);
            out += &self.ok(&["--json", "status", &plan, "--limit", "100"]);
            let tasks = self.json(&["list", "-p", &plan, "--all"]);
            for t in tasks["tasks"].as_array().expect("tasks") {
                out += &self.ok(&["--json", "show", t["id"].as_str().expect("id")]);
            }
        }
        out
    }
}

fn is_task_id(s: &str) -> bool {
    s.strip_prefix('t')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

fn ids(tasks: &Value) -> Vec<String> {
    tasks
        .as_array()
        .expect("an array of tasks")
        .iter()
        .map(|t| t["id"].as_str().expect("id").to_string())
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

fn task<'a>(tasks: &'a Value, id: &str) -> &'a Value {
    tasks
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {tasks}"))
}

fn count(summary: &Value, status: &str) -> i64 {
    summary["counts"]
        .as_array()
        .expect("counts")
        .iter()
        .find(|c| c["status"] == status)
        .unwrap_or_else(|| panic!("no count for {status}"))["count"]
        .as_i64()
        .expect("count")
}

#[test]
fn write_list_and_status_like_an_agent() {
    let env = Env::start();
    let plan = "session-1";

    // First write: a bare array, as some agents send it.
    let first = env.write(
        plan,
        &json!([
            {"content": "Read the code", "status": "in_progress", "priority": "high"},
            {"content": "Write the fix"},
            {"content": "Run the tests", "status": "pending"},
            {"content": "Update the changelog", "priority": "low"},
        ]),
    );
    let created = strings(&first["created"]);
    assert_eq!(created.len(), 4, "{first}");
    assert!(created.iter().all(|id| is_task_id(id)), "{created:?}");
    assert_eq!(ids(&first["todos"]), created);
    assert_eq!(first["plan"]["name"], plan);
    assert_eq!(first["plan"]["revision"], 2);
    let [read, fix, tests, changelog] = <[String; 4]>::try_from(created).expect("four");

    let listed = env.json(&["list", "-p", plan]);
    assert_eq!(listed["plan"], plan);
    assert_eq!(listed["plan_revision"], 2);
    let tasks = &listed["tasks"];
    assert_eq!(
        ids(tasks),
        [
            read.as_str(),
            fix.as_str(),
            tests.as_str(),
            changelog.as_str()
        ]
    );
    let r = task(tasks, &read);
    assert_eq!(r["content"], "Read the code");
    assert_eq!(r["status"], "in_progress");
    assert_eq!(r["priority"], "high");
    assert_eq!(r["readiness"], "");
    assert_eq!(r["kind"], "todo");
    assert_eq!(r["plan"], plan);
    for id in [&fix, &tests, &changelog] {
        assert_eq!(task(tasks, id)["status"], "pending");
        assert_eq!(task(tasks, id)["readiness"], "ready");
    }
    assert_eq!(task(tasks, &fix)["priority"], "medium");
    assert_eq!(task(tasks, &changelog)["priority"], "low");

    // The text table shows the same.
    let table = env.ok(&["list", "-p", plan]);
    assert_eq!(table.lines().count(), 4, "{table}");
    let first_line = table.lines().next().unwrap();
    assert!(first_line.starts_with(&format!("[~] {read}")), "{table}");
    assert!(first_line.contains("in_progress") && first_line.contains("Read the code"));

    // Second write: the agent's object shape, no ids at all (matched by
    // content), an extra field agents send, a dependency, a new item, and the
    // changelog item left out (archived).
    let second = env.write(
        plan,
        &json!({"todos": [
            {"content": "Read the code", "status": "completed", "activeForm": "Reading the code"},
            {"content": "Write the fix", "status": "in_progress", "activeForm": "Writing the fix"},
            {"content": "Run the tests", "status": "pending", "dependsOn": [fix]},
            {"content": "Ask for review", "priority": "high"},
        ]}),
    );
    let created = strings(&second["created"]);
    assert_eq!(created.len(), 1, "only the new item is created: {second}");
    let review = created[0].clone();
    assert_eq!(strings(&second["archived"]), [changelog.as_str()]);
    assert_eq!(
        ids(&second["todos"]),
        [read.as_str(), fix.as_str(), tests.as_str(), review.as_str()]
    );
    assert_eq!(second["plan"]["revision"], 3);

    let listed = env.json(&["list", "-p", plan]);
    let tasks = &listed["tasks"];
    assert_eq!(
        ids(tasks),
        [read.as_str(), fix.as_str(), tests.as_str(), review.as_str()]
    );
    assert_eq!(task(tasks, &read)["status"], "completed");
    assert_eq!(
        task(tasks, &read)["priority"],
        "high",
        "unchanged when omitted"
    );
    assert_eq!(task(tasks, &fix)["status"], "in_progress");
    let t = task(tasks, &tests);
    assert_eq!(t["readiness"], "blocked");
    assert_eq!(strings(&t["depends_on"]), [fix.as_str()]);
    assert_eq!(strings(&t["blocked_by"]), [fix.as_str()]);
    assert_eq!(task(tasks, &review)["readiness"], "ready");

    // The archived item is kept, and shown with --all.
    let all = env.json(&["list", "-p", plan, "--all"]);
    assert_eq!(all["tasks"].as_array().unwrap().len(), 5);
    assert_eq!(task(&all["tasks"], &changelog)["archived"], true);
    assert_eq!(task(&all["tasks"], &read)["archived"], false);

    // Filters.
    let ready = env.json(&["list", "-p", plan, "--ready"]);
    assert_eq!(ids(&ready["tasks"]), [review.as_str()]);
    let blocked = env.json(&["list", "-p", plan, "--blocked"]);
    assert_eq!(ids(&blocked["tasks"]), [tests.as_str()]);
    let some = env.json(&["list", "-p", plan, "--status", "completed,in_progress"]);
    assert_eq!(ids(&some["tasks"]), [read.as_str(), fix.as_str()]);

    // The status screen: plan, counts, in progress, ready next, blocked with blockers.
    let status = env.ok(&["status", plan]);
    let lines: Vec<&str> = status.lines().collect();
    assert!(
        lines[0].starts_with(&format!("plan {plan}  revision 3")),
        "{status}"
    );
    assert!(
        status.contains("\n  4 tasks: 2 pending, 1 in_progress, 1 completed\n"),
        "{status}"
    );
    assert!(
        status.contains("\n  1 ready, 1 blocked, 0 blocked by failure\n"),
        "{status}"
    );
    assert!(
        status.contains(&format!("\n  in progress:\n    [~] {fix}  Write the fix\n")),
        "{status}"
    );
    assert!(
        status.contains(&format!(
            "\n  ready next:\n    [ ] {review}  Ask for review  (high)\n"
        )),
        "{status}"
    );
    assert!(
        status.contains(&format!(
            "\n  blocked:\n    {tests} blocked by {fix}: Run the tests\n"
        )),
        "{status}"
    );
    // `-p PLAN` is the same screen as the positional PLAN.
    assert_eq!(env.ok(&["status", "-p", plan]), status);

    let summary = env.json(&["status", plan]);
    assert_eq!(summary["plan"]["name"], plan);
    assert_eq!(summary["plan"]["revision"], 3);
    assert_eq!(summary["total"], 4);
    assert_eq!(count(&summary, "pending"), 2);
    assert_eq!(count(&summary, "in_progress"), 1);
    assert_eq!(count(&summary, "completed"), 1);
    assert_eq!(count(&summary, "cancelled"), 0);
    assert_eq!(count(&summary, "failed"), 0);
    assert_eq!(summary["ready_count"], 1);
    assert_eq!(summary["blocked_count"], 1);
    assert_eq!(summary["blocked_by_failure_count"], 0);
    assert_eq!(ids(&summary["in_progress"]), [fix.as_str()]);
    assert_eq!(ids(&summary["ready"]), [review.as_str()]);
    assert_eq!(ids(&summary["blocked"]), [tests.as_str()]);
    assert_eq!(
        strings(&summary["blocked"][0]["blocked_by"]),
        [fix.as_str()]
    );

    // Without a plan: every plan.
    let everything = env.json(&["status"]);
    assert_eq!(everything["plans"].as_array().unwrap().len(), 1);
    assert_eq!(everything["plans"][0]["plan"]["name"], plan);
    assert!(env.ok(&["status"]).starts_with(&format!("plan {plan}")));

    // `read --json` prints the very shape `write` takes: a round trip that
    // names every task by id keeps the list as it is.
    let read_back = env.json(&["read", "-p", plan]);
    assert_eq!(read_back["revision"], 3);
    let again = env.write(plan, &json!({"todos": read_back["todos"]}));
    assert_eq!(
        ids(&again["todos"]),
        [read.as_str(), fix.as_str(), tests.as_str(), review.as_str()]
    );
    assert!(strings(&again["created"]).is_empty());
    assert!(strings(&again["archived"]).is_empty());
    assert_eq!(
        again["plan"]["revision"], 3,
        "a no-op write is not a change"
    );
    assert_eq!(
        env.json(&["read", "-p", plan])["todos"],
        read_back["todos"],
        "an unchanged list changes nothing"
    );
}

#[test]
fn task_commands_record_history_with_reason_and_actor() {
    let env = Env::start();
    let plan = "release";
    // Unlike `write`, `add` needs an existing plan.
    let message = env
        .run(&["add", "Design the API", "-p", plan])
        .refused(3)
        .to_string();
    assert_eq!(message, format!("plan {plan} not found"));
    env.ok(&["plan", "create", plan]);
    let design = env.add(plan, "Design the API", &["--priority", "high"]);
    let build = env.add(
        plan,
        "Build it",
        &["--after", &design, "--reason", "needs the design"],
    );
    let added = env.json(&["add", "Document it", "-p", plan, "--priority", "low"]);
    let docs = added["id"].as_str().expect("id").to_string();
    assert_eq!(added["status"], "pending");
    assert_eq!(added["priority"], "low");
    assert_eq!(added["readiness"], "ready");

    let b = env.json(&["show", &build]);
    assert_eq!(b["task"]["status"], "pending");
    assert_eq!(b["task"]["readiness"], "blocked");
    assert_eq!(strings(&b["task"]["depends_on"]), [design.as_str()]);

    // Transitions print "id: from -> to", and record reason and actor.
    let out = env.ok(&[
        "--client-name",
        "alice",
        "start",
        &design,
        "--reason",
        "picked it up",
    ]);
    assert_eq!(out, format!("{design}: pending -> in_progress\n"));
    let out = env.ok(&["--client-name", "alice", "done", &design]);
    assert_eq!(out, format!("{design}: in_progress -> completed\n"));
    let b = env.json(&["show", &build]);
    assert_eq!(b["task"]["readiness"], "ready");

    // The actor can come from TODOD_CLIENT too.
    let mut cmd = env.cmd(&["start", &build, "--reason", "go"]);
    cmd.env("TODOD_CLIENT", "bob");
    let run = run_cmd(cmd, None);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(run.stdout, format!("{build}: pending -> in_progress\n"));

    // dep add / dep rm.
    let out = env.ok(&[
        "dep",
        "add",
        &docs,
        &build,
        "--reason",
        "document what exists",
    ]);
    assert_eq!(
        out,
        format!("{docs} now depends on {build} (dependencies: {build})\n")
    );
    let d = env.json(&["show", &docs]);
    assert_eq!(d["task"]["readiness"], "blocked");
    assert_eq!(strings(&d["task"]["blocked_by"]), [build.as_str()]);
    let out = env.ok(&["dep", "rm", &docs, &build]);
    assert_eq!(
        out,
        format!("{docs} no longer depends on {build} (dependencies: none)\n")
    );
    let d = env.json(&["dep", "add", &docs, &design]);
    assert_eq!(strings(&d["depends_on"]), [design.as_str()]);
    assert_eq!(d["readiness"], "ready", "design is completed");

    // cancel, then reopen (restore) it.
    let out = env.ok(&["cancel", &docs, "--reason", "out of scope"]);
    assert_eq!(out, format!("{docs}: pending -> cancelled\n"));
    let out = env.ok(&["reopen", &docs, "--reason", "back in scope"]);
    assert_eq!(out, format!("{docs}: cancelled -> pending (ready)\n"));

    // A task fails through the agent's list (todoctl has no `fail`): read the
    // list, change one status, write it back.
    let mut list = env.json(&["read", "-p", plan]);
    for item in list["todos"].as_array_mut().unwrap() {
        if item["id"] == build.as_str() {
            item["status"] = json!("failed");
        }
    }
    let input = serde_json::to_vec(&list).unwrap();
    let run = env.run_stdin(
        &[
            "--client-name",
            "agent-7",
            "write",
            "-p",
            plan,
            "--reason",
            "compiler crashed",
        ],
        &input,
    );
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(run.stdout.contains(&format!("[!] {build}")), "{run:#?}");
    assert!(run.stdout.contains(&format!("plan {plan} at revision")));

    // `retry` only applies to a failed task, `reopen` only to a finished one.
    let refused = env.run(&["retry", &docs]);
    assert_eq!(
        refused.refused(4),
        format!("{docs} is pending; `retry` applies to a failed task")
    );
    let refused = env.run(&["reopen", &build]);
    assert_eq!(
        refused.refused(4),
        format!("{build} is failed; `reopen` applies to a completed or cancelled task")
    );
    let out = env.ok(&[
        "--client-name",
        "carol",
        "retry",
        &build,
        "--reason",
        "flaky runner",
    ]);
    assert_eq!(out, format!("{build}: failed -> pending (ready)\n"));

    // Reopen a completed task: its pending dependents become blocked again.
    let out = env.ok(&["reopen", &design, "--reason", "API review found a gap"]);
    assert_eq!(out, format!("{design}: completed -> pending (ready)\n"));
    let b = env.json(&["show", &build]);
    assert_eq!(b["task"]["readiness"], "blocked");

    // show: every field and the whole history, with reasons and actors.
    let shown = env.ok(&["show", &build]);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[0], format!("[ ] {build}  Build it"), "{shown}");
    assert!(
        shown.contains(&format!("\n  plan        {plan}\n")),
        "{shown}"
    );
    assert!(
        shown.contains("\n  status      pending (blocked)\n"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("\n  depends on  {design}\n")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("\n  blocked by  {design}\n")),
        "{shown}"
    );
    let history: Vec<&str> = shown
        .split_once("\nhistory:\n")
        .expect("a history section")
        .1
        .lines()
        .collect();
    let has = |needle: &str| history.iter().any(|l| l.contains(needle));
    assert!(
        has(&format!(
            " {build} task_created Build it (pending) by todoctl (reason: needs the design)"
        )),
        "{shown}"
    );
    assert!(
        has(&format!(
            " {build} dependency_added {design} by todoctl (reason: needs the design)"
        )) || has(&format!(" {build} dependency_added {design} by todoctl")),
        "{shown}"
    );
    assert!(
        has(" status_changed pending -> in_progress by bob (reason: go)"),
        "{shown}"
    );
    assert!(
        has(" status_changed in_progress -> failed by agent-7 (reason: compiler crashed)"),
        "{shown}"
    );
    assert!(
        has(" status_changed failed -> pending by carol (reason: flaky runner)"),
        "{shown}"
    );
    // Oldest first: #seq numbers increase.
    let seqs: Vec<i64> = history
        .iter()
        .map(|l| {
            l.trim()
                .strip_prefix('#')
                .and_then(|s| s.split(' ').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("event line without #seq: {l}"))
        })
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{shown}");

    let d = env.json(&["show", &design]);
    let events = d["events"].as_array().expect("events");
    let status_changes: Vec<(&str, &str, &str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "status_changed")
        .map(|e| {
            (
                e["from_status"].as_str().unwrap(),
                e["to_status"].as_str().unwrap(),
                e["actor"].as_str().unwrap(),
                e["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        status_changes,
        [
            ("pending", "in_progress", "alice", "picked it up"),
            ("in_progress", "completed", "alice", ""),
            ("completed", "pending", "todoctl", "API review found a gap"),
        ]
    );
    assert!(events.iter().all(|e| e["task_id"] == design.as_str()));
    assert!(events.iter().all(|e| e["plan"] == plan));

    let docs_shown = env.ok(&["show", &docs]);
    for needle in [
        format!("{docs} dependency_added {build} by todoctl (reason: document what exists)"),
        format!("{docs} dependency_removed {build} by todoctl"),
        "status_changed pending -> cancelled by todoctl (reason: out of scope)".to_string(),
        "status_changed cancelled -> pending by todoctl (reason: back in scope)".to_string(),
    ] {
        assert!(docs_shown.contains(&needle), "{needle:?} in {docs_shown}");
    }
}

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
    assert!(message.contains("\"42\" is not a task id"), "{message}");
    let message = env
        .run(&["add", "x", "-p", "bad plan!"])
        .refused(2)
        .to_string();
    assert!(message.starts_with("plan: "), "{message}");
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
fn failed_and_cancelled_dependencies_block_by_failure() {
    let env = Env::start();
    let plan = "chain";
    let out = env.write(
        plan,
        &json!([
            {"content": "Compile", "status": "in_progress"},
            {"content": "Test"},
            {"content": "Deploy"},
        ]),
    );
    let [compile, test, deploy] = <[String; 3]>::try_from(strings(&out["created"])).expect("3");
    env.ok(&["dep", "add", &test, &compile]);
    env.ok(&["dep", "add", &deploy, &test]);
    env.write(
        plan,
        &json!([
            {"id": compile, "content": "Compile", "status": "failed"},
            {"id": test, "content": "Test"},
            {"id": deploy, "content": "Deploy"},
        ]),
    );

    let status = env.ok(&["status", plan]);
    assert!(
        status.contains("\n  3 tasks: 2 pending, 1 failed\n"),
        "{status}"
    );
    assert!(
        status.contains("\n  0 ready, 1 blocked, 1 blocked by failure\n"),
        "{status}"
    );
    assert!(
        status.contains(&format!(
            "\n  blocked:\n  ! {test} blocked by failure of {compile}: Test\n    {deploy} blocked by {test}: Deploy\n"
        )),
        "{status}"
    );
    let listed = env.json(&["list", "-p", plan, "--blocked"]);
    assert_eq!(ids(&listed["tasks"]), [test.as_str(), deploy.as_str()]);
    assert_eq!(
        task(&listed["tasks"], &test)["readiness"],
        "blocked_by_failure"
    );
    assert_eq!(task(&listed["tasks"], &deploy)["readiness"], "blocked");
    let table = env.ok(&["list", "-p", plan]);
    assert!(
        table.contains(&format!("[!] {compile}  medium  failed ")),
        "{table}"
    );
    let dot = env.ok(&["graph", "-p", plan, "--dot"]);
    assert!(
        dot.contains(&format!(
            "\"{test}\" [label=\"{test}\\nTest\", fillcolor=orange"
        )),
        "{dot}"
    );

    let message = env.run(&["start", &test]).refused(4).to_string();
    assert!(
        message.ends_with(&format!("blocked by {compile} (failed)")),
        "{message}"
    );

    // Retried, the failure no longer blocks: the dependent waits again.
    env.ok(&["retry", &compile]);
    let t = env.json(&["show", &test]);
    assert_eq!(t["task"]["readiness"], "blocked");
    // Cancelled work blocks by failure too, until it is restored.
    env.ok(&["cancel", &compile]);
    let t = env.json(&["show", &test]);
    assert_eq!(t["task"]["readiness"], "blocked_by_failure");
    assert_eq!(strings(&t["task"]["blocked_by"]), [compile.as_str()]);
    env.ok(&["reopen", &compile]);
    env.ok(&["start", &compile]);
    env.ok(&["done", &compile]);
    let t = env.json(&["show", &test]);
    assert_eq!(t["task"]["readiness"], "ready");
    assert_eq!(env.json(&["status", plan])["ready_count"], 1);
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

#[test]
fn graph_prints_a_tree_and_graphviz_dot() {
    let env = Env::start();
    let plan = "build";
    let out = env.write(
        plan,
        &json!([
            {"content": "Fetch sources"},
            {"content": "Compile"},
            {"content": "Test"},
            {"content": "Package"},
            {"content": "Write \"release\" notes"},
        ]),
    );
    let [fetch, compile, test, package, notes] =
        <[String; 5]>::try_from(strings(&out["created"])).expect("five");
    env.ok(&["dep", "add", &compile, &fetch]);
    env.ok(&["dep", "add", &test, &compile]);
    env.ok(&["dep", "add", &package, &compile]);
    env.ok(&["dep", "add", &package, &test]);
    env.ok(&["start", &fetch]);
    env.ok(&["done", &fetch]);
    env.ok(&["start", &compile]);

    let tree = env.ok(&["graph", "-p", plan]);
    let expected = format!(
        "\
[x] {fetch} Fetch sources
`-- [~] {compile} Compile
    |-- [ ] {test} Test
    |   `-- [ ] {package} Package
    `-- [ ] {package} Package (see above)
[ ] {notes} Write \"release\" notes
"
    );
    assert_eq!(tree, expected);

    let dot = env.ok(&["graph", "-p", plan, "--dot"]);
    let lines: Vec<&str> = dot.lines().collect();
    assert_eq!(lines[0], format!("digraph \"{plan}\" {{"), "{dot}");
    assert_eq!(*lines.last().unwrap(), "}", "{dot}");
    assert_eq!(dot.matches('{').count(), dot.matches('}').count(), "{dot}");
    let mut edges: Vec<&str> = lines
        .iter()
        .filter(|l| l.contains("->"))
        .map(|l| l.trim())
        .collect();
    edges.sort_unstable();
    let mut expected = vec![
        format!("\"{fetch}\" -> \"{compile}\";"),
        format!("\"{compile}\" -> \"{test}\";"),
        format!("\"{compile}\" -> \"{package}\";"),
        format!("\"{test}\" -> \"{package}\";"),
    ];
    expected.sort_unstable();
    assert_eq!(edges, expected, "{dot}");
    for id in [&fetch, &compile, &test, &package, &notes] {
        let node = lines
            .iter()
            .find(|l| l.trim_start().starts_with(&format!("\"{id}\" [label=")))
            .unwrap_or_else(|| panic!("no node for {id}: {dot}"));
        assert!(node.trim_end().ends_with("];"), "{node}");
    }
    // Quotes in content are escaped, so the file stays valid dot.
    assert!(
        dot.contains("Write \\\"release\\\" notes"),
        "escaped quotes: {dot}"
    );
    // Every statement between the braces ends with `;`.
    for line in &lines[1..lines.len() - 1] {
        assert!(line.trim_end().ends_with(';'), "{line:?} in {dot}");
    }

    let g = env.json(&["graph", "-p", plan]);
    let mut edges: Vec<(String, String)> = g["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["from"].as_str().unwrap().to_string(),
                e["to"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    edges.sort();
    let mut expected = vec![
        (fetch.clone(), compile.clone()),
        (compile.clone(), test.clone()),
        (compile.clone(), package.clone()),
        (test.clone(), package.clone()),
    ];
    expected.sort();
    assert_eq!(edges, expected);

    // --dot and --json do not mix, whichever comes first.
    let run = env.run(&["graph", "-p", plan, "--dot", "--json"]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(run.stdout.is_empty(), "{run:#?}");
    let message = env
        .run(&["--json", "graph", "-p", plan, "--dot"])
        .refused(2)
        .to_string();
    assert!(message.contains("--dot and --json"), "{message}");
}

/// The lines a child prints, as they come, over a channel.
fn lines_of(stream: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Reads lines until one satisfies `want`; panics after the safety timeout.
fn await_line(
    rx: &mpsc::Receiver<String>,
    what: &str,
    mut want: impl FnMut(&str) -> bool,
) -> String {
    let deadline = Instant::now() + SAFETY_TIMEOUT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if want(&line) => return line,
            Ok(line) => seen.push(line),
            Err(e) => panic!("no line with {what} ({e:?}); saw {seen:#?}"),
        }
    }
}

/// A spawned process that is killed if the test fails before it ends.
struct Spawned(Option<Child>);

impl Spawned {
    /// SIGINT (Ctrl-C), then the exit status, with the safety timeout.
    fn interrupt(self) -> ExitStatus {
        self.signal_and_wait(libc::SIGINT)
    }

    fn signal_and_wait(mut self, signal: i32) -> ExitStatus {
        let mut child = self.0.take().expect("child");
        let pid = child.id();
        kill(pid, signal);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        match rx.recv_timeout(SAFETY_TIMEOUT) {
            Ok(status) => status.expect("wait"),
            Err(_) => {
                kill(pid, libc::SIGKILL);
                panic!("process {pid} ignored signal {signal}");
            }
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn_watch(env: &Env, args: &[&str]) -> (Spawned, mpsc::Receiver<String>) {
    let mut cmd = env.cmd(args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().expect("spawn todoctl watch");
    let lines = lines_of(child.stdout.take().expect("stdout"));
    (Spawned(Some(child)), lines)
}

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

/// The real `todod` serving only a Unix socket; returns once it is listening.
fn spawn_unix_daemon(state_dir: &Path, socket: &Path) -> Spawned {
    let mut child = Command::new(binary("todod"))
        .arg("--state-dir")
        .arg(state_dir)
        .args(["--listen", "none", "--socket"])
        .arg(socket)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn todod");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read todod stdout");
    assert_eq!(
        line.trim_end(),
        format!("todod listening on unix:{}", socket.display())
    );
    Spawned(Some(child))
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
    let env = Env::start_with(&["--token", "s3cret"]);
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
    cmd.args(["--token", "guess"]);
    let message = run_cmd(cmd, None).refused(6).to_string();
    assert!(message.contains("check --token"), "{message}");

    // The right token, as a flag or from TODOD_TOKEN.
    let mut cmd = env.cmd(&["--token", "s3cret", "write", "-p", plan]);
    cmd.env_remove("TODOD_TOKEN");
    let run = run_cmd(cmd, Some(br#"[{"content": "Secret work"}]"#));
    assert_eq!(run.code, 0, "{run:#?}");
    let mut cmd = env.cmd(&["--json", "list", "-p", plan]);
    cmd.env("TODOD_TOKEN", "s3cret");
    let run = run_cmd(cmd, None);
    assert_eq!(run.code, 0, "{run:#?}");
    let listed: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(listed["tasks"][0]["content"], "Secret work");

    // The token is never echoed back.
    let mut cmd = env.cmd(&["status", "nope"]);
    cmd.args(["--token", "s3cret"]);
    let run = run_cmd(cmd, None);
    assert!(!run.stderr.contains("s3cret"), "{run:#?}");
    run.refused(3);

    let authed = Env {
        token: Some("s3cret".into()),
        ..env
    };
    assert!(authed.ok(&["status", plan]).contains("1 task: 1 pending"));
}

#[test]
fn plans_can_be_created_listed_and_shown() {
    let env = Env::start();
    assert_eq!(
        env.ok(&["status"]),
        "no plans yet (create one with `todoctl plan create NAME` or `todoctl write --plan NAME`)\n"
    );
    assert_eq!(
        env.ok(&["plan", "create", "q3", "--title", "Q3 goals"]),
        "created plan q3\n"
    );
    let p = env.json(&["plan", "create", "q4"]);
    assert_eq!(p["name"], "q4");
    assert_eq!(p["revision"], 1, "creating the plan is its first change");
    env.add("q3", "Ship it", &[]);

    let table = env.ok(&["plan", "list"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["PLAN", "TASKS", "DONE", "READY", "REV", "TITLE"]);
    let q3: Vec<&str> = lines
        .iter()
        .find(|l| l.starts_with("q3"))
        .expect("q3 row")
        .split_whitespace()
        .collect();
    assert_eq!(q3[..4], ["q3", "1", "0/1", "1"], "{table}");
    assert_eq!(q3[5..], ["Q3", "goals"], "{table}");
    assert!(lines.iter().any(|l| l.starts_with("q4")), "{table}");

    let shown = env.ok(&["plan", "show", "q3"]);
    assert!(
        shown.starts_with("plan q3 \"Q3 goals\"  revision"),
        "{shown}"
    );
    assert_eq!(shown, env.ok(&["status", "q3"]));
}

#[test]
fn output_into_a_closed_pipe_is_not_an_error() {
    let env = Env::start();
    let items: Vec<Value> = (0..5000)
        .map(|i| json!({"content": format!("item {i}")}))
        .collect();
    env.write("big", &Value::Array(items));
    // Like `todoctl list -p big | head -1`: the reader goes away early.
    let mut cmd = env.cmd(&["list", "-p", "big"]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("item 0"), "{first}");
    // stdout is closed here (the reader was dropped).
    let run = finish(child, None);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(run.stderr.is_empty(), "{run:#?}");

    // The whole list, over several pages, in order and without repeats.
    let listed = env.json(&["list", "-p", "big"]);
    let tasks = listed["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 5000);
    for (i, t) in tasks.iter().enumerate() {
        assert_eq!(t["content"], format!("item {i}"));
    }
    let unique: std::collections::HashSet<String> = ids(&listed["tasks"]).into_iter().collect();
    assert_eq!(unique.len(), 5000);
}
