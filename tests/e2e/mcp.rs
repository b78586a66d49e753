//! `todoctl mcp` driven by the official Python MCP client (PyPI's `mcp`,
//! installed by `scripts/mcp-client`, which `.ci/run` runs first) over stdio,
//! against a real daemon: the checks in `mcp_agents.py`, then what the daemon
//! holds, read back over gRPC.
use std::path::PathBuf;
use std::process::Command;

use todod_e2e::{binary, mcp_python, proto, TestDaemon};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_keep_their_lists_in_todod_through_mcp() {
    let python = mcp_python();
    let daemon = TestDaemon::start().await;
    let project = tempfile::tempdir().unwrap();
    // The project's plan is named after the directory holding .git.
    let root = project.path().join("agents-project");
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join("src/deep")).unwrap();

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp_agents.py");
    let url = daemon.url();
    let cwd = root.join("src/deep");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .arg(binary("todoctl"))
            .arg(url)
            .arg(cwd)
            .arg(binary("todod"))
            .output()
            .expect("run mcp_agents.py")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mcp_agents.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let held: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("a summary line")).unwrap();

    let mut c = daemon.client().await;
    let read = |plan: &str| proto::ReadTodosRequest { plan: plan.into() };
    // What each agent shape wrote is the plan's list, under the ids it was told.
    for shape in ["opencode", "claude", "codex", "gemini"] {
        let plan = held[shape]["plan"].as_str().unwrap();
        let list = c.read_todos(read(plan)).await.unwrap().into_inner();
        let ids: Vec<&str> = list.todos.iter().map(|t| t.id.as_str()).collect();
        let told: Vec<&str> = held[shape]["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(ids, told, "{shape}");
    }
    // The project plan remembers its directory.
    let plan = c
        .get_plan(proto::GetPlanRequest {
            name: "agents-project".into(),
            highlight_limit: 1,
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap();
    assert_eq!(plan.title, root.display().to_string());
    // Claude's activeForm is kept as the task's metadata.
    let claude = c
        .read_todos(read("claude-list"))
        .await
        .unwrap()
        .into_inner();
    let meta: serde_json::Value = serde_json::from_str(&claude.todos[1].metadata_json).unwrap();
    assert_eq!(meta["activeForm"], "Fixing failures");
    // Codex's explanation is the reason of the events its write made.
    let events = c
        .list_events(proto::ListEventsRequest {
            plan: "codex-list".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    assert!(events
        .iter()
        .any(|e| e.r#type == "task_created" && e.reason == "split the work"));
    // The MCP client's own name is the actor of what it changed.
    assert!(
        events.iter().all(|e| e.actor == "mcp:agents-test"),
        "{events:?}"
    );

    // The dependency the task tools made is a real edge; the blocker completed.
    let b = c
        .get_task(proto::GetTaskRequest {
            id: held["tasks"]["b"].as_str().unwrap().into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(b.depends_on, [held["tasks"]["a"].as_str().unwrap()]);
    assert_eq!(
        (b.status.as_str(), b.owner.as_str()),
        ("in_progress", "subagent-1")
    );
    let deleted = c
        .get_task(proto::GetTaskRequest {
            id: held["tasks"]["c"].as_str().unwrap().into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.status, "cancelled");

    // Two writers at once: every item of both is in the list, once.
    let shared = c
        .read_todos(read("shared-list"))
        .await
        .unwrap()
        .into_inner();
    let mut contents: Vec<&str> = shared.todos.iter().map(|t| t.content.as_str()).collect();
    contents.sort();
    let expected: Vec<&str> = held["shared"]["contents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(contents, expected);
    eprintln!(
        "two writers: {} conflicts resolved by merging",
        held["shared"]["conflicts"]
    );
}
