//! `todoctl` end to end, used the way an agent uses it: write the list, list
//! it and read the status screen; create, list and show plans; and stop
//! reading output early (a closed pipe).
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
use std::io::{BufRead, BufReader};
use std::process::Stdio;

use serde_json::{json, Value};
use todod_e2e::cli::{count, finish, ids, is_task_id, strings, task, Env};

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
    assert_eq!(
        r["readiness"],
        serde_json::Value::Null,
        "absent: not pending"
    );
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
