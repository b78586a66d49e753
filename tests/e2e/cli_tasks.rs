//! `todoctl` end to end, task by task: add, start, done, cancel, reopen,
//! retry and dependencies, each recorded in the history with its reason and
//! actor; failed and cancelled dependencies blocking by failure; and the
//! dependency graph as a tree and as Graphviz dot.
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
use serde_json::json;
use todod_e2e::cli::{ids, run_cmd, strings, task, Env};

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
    // The edge made with the task carries the reason it was made with.
    assert!(
        has(&format!(
            " {build} dependency_added {design} by todoctl (reason: needs the design)"
        )),
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
                e["reason"].as_str().unwrap_or(""),
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
    // Which task failed, not only how many.
    assert!(
        status.contains(&format!("\n  failed:\n    [!] {compile}  Compile")),
        "{status}"
    );
    let summary = env.json(&["status", plan]);
    assert_eq!(ids(&summary["failed"]), [compile.as_str()]);
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
