//! Calls that can be retried: a mutation whose answer was lost on the way
//! back (a proxy in front of the daemon throws it away after the daemon
//! committed) is sent again with the same request id and gets the first
//! answer, changing nothing; the same id with another request is refused;
//! todoctl and the MCP server retry a lost answer by themselves.
use std::path::PathBuf;
use std::process::Command;

use todod_e2e::lossy_proxy::LossyProxy;
use todod_e2e::{binary, connect, mcp_python, proto, Client, TestDaemon};
use tonic::Code;

async fn tasks(c: &mut Client, plan: &str) -> Vec<proto::Task> {
    c.list_tasks(proto::ListTasksRequest {
        plan: plan.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .tasks
}

async fn events(c: &mut Client, plan: &str) -> Vec<proto::Event> {
    c.list_events(proto::ListEventsRequest {
        plan: plan.into(),
        limit: 10_000,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .events
}

fn create(plan: &str, content: &str, id: &str) -> proto::CreateTaskRequest {
    proto::CreateTaskRequest {
        plan: plan.into(),
        content: content.into(),
        request_id: id.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_whose_answer_was_lost_is_retried_into_the_first_answer() {
    let daemon = TestDaemon::start().await;
    let proxy = LossyProxy::start(&daemon.url()).await;
    let mut via = connect(&proxy.url).await;
    let mut direct = daemon.client().await;
    direct
        .create_plan(proto::CreatePlanRequest {
            name: "p".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    // CreateTask: the first answer is lost after the daemon committed.
    proxy.lose_next("CreateTask");
    let lost = via
        .create_task(create("p", "write the report", "r-1"))
        .await;
    assert_eq!(lost.unwrap_err().code(), Code::Unavailable);
    assert_eq!(proxy.lost(), ["CreateTask"]);
    let before = events(&mut direct, "p").await.len();
    let retried = via
        .create_task(create("p", "write the report", "r-1"))
        .await
        .unwrap()
        .into_inner();
    let again = direct
        .create_task(create("p", "write the report", "r-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(retried, again, "identical answers");
    let held = tasks(&mut direct, "p").await;
    assert_eq!(held.len(), 1, "one task: {held:?}");
    assert_eq!(held[0].id, retried.id);
    assert_eq!(held[0].revision, retried.revision);
    assert_eq!(
        events(&mut direct, "p").await.len(),
        before,
        "the retries changed nothing"
    );

    // The same id with another request is refused, naming the id.
    let other = direct
        .create_task(create("p", "something else", "r-1"))
        .await
        .unwrap_err();
    assert_eq!(other.code(), Code::AlreadyExists, "{other:?}");
    assert!(other.message().contains("r-1"), "{}", other.message());

    // WriteTodos: the list is written once; the retry says what it created.
    let todos = |id: &str| proto::WriteTodosRequest {
        plan: "list".into(),
        todos: ["a", "b", "c"]
            .iter()
            .map(|c| proto::TodoItem {
                content: c.to_string(),
                status: "pending".into(),
                ..Default::default()
            })
            .collect(),
        request_id: id.into(),
        ..Default::default()
    };
    proxy.lose_next("WriteTodos");
    assert!(via.write_todos(todos("w-1")).await.is_err());
    let first = via.write_todos(todos("w-1")).await.unwrap().into_inner();
    let second = direct.write_todos(todos("w-1")).await.unwrap().into_inner();
    assert_eq!(first, second);
    assert_eq!(first.created.len(), 3);
    assert_eq!(tasks(&mut direct, "list").await.len(), 3);

    // UpdateTask: a retry after later changes still gets the first answer,
    // and leaves the later changes alone.
    let id = retried.id.clone();
    let update = |content: &str, rid: &str| proto::UpdateTaskRequest {
        id: id.clone(),
        content: Some(content.into()),
        request_id: rid.into(),
        ..Default::default()
    };
    proxy.lose_next("UpdateTask");
    assert!(via.update_task(update("v2", "u-1")).await.is_err());
    let later = direct
        .update_task(update("v3", "u-2"))
        .await
        .unwrap()
        .into_inner();
    let replay = direct
        .update_task(update("v2", "u-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(replay.content, "v2", "the first answer");
    assert!(replay.revision < later.revision);
    let now = tasks(&mut direct, "p").await;
    assert_eq!(
        (now[0].content.as_str(), now[0].revision),
        ("v3", later.revision)
    );

    // Kept across a restart: the ids are in the database.
    let daemon = daemon.restart().await;
    let mut direct = daemon.client().await;
    let after_restart = direct
        .create_task(create("p", "write the report", "r-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(after_restart, again);
    assert_eq!(tasks(&mut direct, "p").await.len(), 1);

    // An id that is not one is refused by name.
    let bad = direct
        .create_task(create("p", "x", &"é".repeat(10)))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("request_id"), "{}", bad.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todoctl_retries_a_lost_answer_into_one_task() {
    let daemon = TestDaemon::start().await;
    let proxy = LossyProxy::start(&daemon.url()).await;
    let todoctl = |args: &[&str]| {
        let out = Command::new(binary("todoctl"))
            .args(["--addr", &proxy.url])
            .args(args)
            .env("HOME", "/nonexistent")
            .env_remove("TODOD_TOKEN")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    proxy.lose_next("CreatePlan");
    proxy.lose_next("CreateTask");
    let plan = tokio::task::block_in_place(|| todoctl(&["plan", "create", "p"]));
    assert_eq!(plan.0, Some(0), "{plan:?}");
    let add = tokio::task::block_in_place(|| todoctl(&["add", "once", "-p", "p"]));
    assert_eq!(add.0, Some(0), "{add:?}");
    assert_eq!(proxy.lost(), ["CreatePlan", "CreateTask"]);
    let mut c = daemon.client().await;
    let held = tasks(&mut c, "p").await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(add.1.trim(), held[0].id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_server_retries_a_lost_task_create_into_one_task() {
    let python = mcp_python();
    let daemon = TestDaemon::start().await;
    let proxy = LossyProxy::start(&daemon.url()).await;
    let project = tempfile::tempdir().unwrap();
    let root = project.path().join("lost-answer");
    std::fs::create_dir_all(root.join(".git")).unwrap();
    proxy.lose_next("CreateTask");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp_lost_answer.py");
    let url = proxy.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .arg(binary("todoctl"))
            .arg(url)
            .arg(root)
            .output()
            .expect("run mcp_lost_answer.py")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mcp_lost_answer.py failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(proxy.lost(), ["CreateTask"]);
    let told: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let mut c = daemon.client().await;
    let held = tasks(&mut c, "lost-answer").await;
    assert_eq!(held.len(), 1, "one task: {held:?}");
    assert_eq!(told["task"]["id"], held[0].id.as_str());
}
