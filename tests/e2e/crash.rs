//! kill -9 of the real daemon while clients write: every acknowledged write is
//! there after the restart, every write is all-or-nothing, and SQLite's
//! integrity check passes.
use std::collections::HashMap;
use std::time::Duration;

use todod_e2e::{connect, item, proto, try_connect, write_request, RealDaemon, Target};

const ROUNDS: usize = 12;
const CLIENTS: usize = 4;

/// One client's plan: it appends `item n` and completes `item n-1` in the same
/// write, so a torn write would show as two pending items or a gap.
async fn writer(target: Target, plan: String, first_ack: Started) -> Vec<String> {
    let mut acked = Vec::new();
    let Some(mut c) = try_connect(target).await else {
        return acked;
    };
    let stored = match c
        .read_todos(proto::ReadTodosRequest { plan: plan.clone() })
        .await
    {
        Ok(read) => read.into_inner().todos,
        Err(e) if e.code() == tonic::Code::NotFound => vec![],
        Err(_) => return acked,
    };
    let mut todos: Vec<proto::TodoItem> = stored
        .into_iter()
        .map(|t| item(&t.id, &t.content, &t.status, ""))
        .collect();
    loop {
        let n = todos.len();
        if let Some(last) = todos.last_mut() {
            last.status = "completed".into();
        }
        todos.push(item("", &format!("item {n}"), "pending", ""));
        match c.write_todos(write_request(&plan, todos.clone())).await {
            Ok(reply) => {
                acked.push(format!("item {n}"));
                if acked.len() == 1 {
                    let _ = first_ack.send(());
                }
                todos = reply
                    .into_inner()
                    .todos
                    .into_iter()
                    .map(|t| item(&t.id, &t.content, &t.status, ""))
                    .collect();
            }
            Err(_) => return acked, // the daemon died; this write's fate is unknown
        }
    }
}

/// Each writer says once that it has had a write acknowledged.
type Started = tokio::sync::mpsc::UnboundedSender<()>;

/// What an acknowledged call must have left in the history: (task, event type, detail).
type Expected = (String, &'static str, String);

/// Every other write path, on a fresh plan per round: create a plan, then per
/// step create a task, make it depend on the previous one, start, rename and
/// complete the previous one, set its owner and metadata, and now and then
/// archive and restore the plan. Returns the events each acknowledged call implies.
async fn graph_writer(target: Target, plan: String, first_ack: Started) -> Vec<Expected> {
    let mut acked = Vec::new();
    let Some(mut c) = try_connect(target).await else {
        return acked;
    };
    let create = proto::CreatePlanRequest {
        name: plan.clone(),
        title: "crash".into(),
        ..Default::default()
    };
    if c.create_plan(create).await.is_err() {
        return acked;
    }
    acked.push((String::new(), "plan_created", String::new()));
    let _ = first_ack.send(());
    let mut previous: Option<String> = None;
    for n in 0.. {
        let new = proto::CreateTaskRequest {
            plan: plan.clone(),
            content: format!("op {n}"),
            ..Default::default()
        };
        let Ok(task) = c.create_task(new).await else {
            return acked;
        };
        let id = task.into_inner().id;
        acked.push((id.clone(), "task_created", format!("op {n}")));
        if let Some(prev) = previous.replace(id.clone()) {
            let dep = proto::DependencyRequest {
                task_id: id.clone(),
                depends_on: prev.clone(),
                ..Default::default()
            };
            if c.add_dependency(dep).await.is_err() {
                return acked;
            }
            acked.push((id.clone(), "dependency_added", prev.clone()));
            for (to, detail) in [("in_progress", "in_progress"), ("completed", "completed")] {
                if to == "completed" {
                    let rename = proto::UpdateTaskRequest {
                        id: prev.clone(),
                        content: Some(format!("op {} done", n - 1)),
                        ..Default::default()
                    };
                    if c.update_task(rename).await.is_err() {
                        return acked;
                    }
                    acked.push((
                        prev.clone(),
                        "content_changed",
                        format!("op {} done", n - 1),
                    ));
                }
                let step = proto::TransitionTaskRequest {
                    id: prev.clone(),
                    to: to.into(),
                    ..Default::default()
                };
                if c.transition_task(step).await.is_err() {
                    return acked;
                }
                acked.push((prev.clone(), "status_changed", detail.into()));
            }
            // The owner and metadata of a task, and the plan put away and
            // brought back: their writes too.
            let annotate = proto::UpdateTaskRequest {
                id: prev.clone(),
                owner: Some(format!("agent-{n}")),
                metadata_patch_json: Some(format!(r#"{{"step":{n}}}"#)),
                ..Default::default()
            };
            if c.update_task(annotate).await.is_err() {
                return acked;
            }
            acked.push((prev.clone(), "owner_changed", format!("agent-{n}")));
            acked.push((
                prev.clone(),
                "metadata_changed",
                format!(r#"{{"step":{n}}}"#),
            ));
            if n % 3 == 1 {
                let change = || proto::PlanChangeRequest {
                    name: plan.clone(),
                    ..Default::default()
                };
                if c.archive_plan(change()).await.is_err() {
                    return acked;
                }
                acked.push((String::new(), "plan_archived", String::new()));
                if c.restore_plan(change()).await.is_err() {
                    return acked;
                }
                acked.push((String::new(), "plan_restored", String::new()));
            }
        }
    }
    acked
}

async fn plan_not_found_is_empty(c: &mut todod_e2e::Client, plan: &str) -> Vec<proto::Task> {
    match c
        .read_todos(proto::ReadTodosRequest { plan: plan.into() })
        .await
    {
        Ok(r) => r.into_inner().todos,
        Err(e) if e.code() == tonic::Code::NotFound => vec![],
        Err(e) => panic!("read {plan}: {e}"),
    }
}

/// Everything acknowledged before any earlier kill is there, and every write
/// was applied whole: in a list writer's plan all items but the last are
/// completed and there is no gap; every acknowledged graph call left its event.
async fn verify(
    target: &Target,
    acked: &HashMap<String, Vec<String>>,
    graph_acked: &[(String, Vec<Expected>)],
    when: &str,
) {
    let mut c = connect(target).await;
    for k in 0..CLIENTS {
        let plan = format!("client-{k}");
        let todos = plan_not_found_is_empty(&mut c, &plan).await;
        let contents: Vec<&str> = todos.iter().map(|t| t.content.as_str()).collect();
        for (i, t) in todos.iter().enumerate() {
            assert_eq!(t.content, format!("item {i}"), "{when}: {plan} has a gap");
            let last = i + 1 == todos.len();
            let want = if last { "pending" } else { "completed" };
            assert_eq!(t.status, want, "{when}: {plan} has a torn write at {i}");
        }
        for a in acked.get(&plan).into_iter().flatten() {
            assert!(
                contents.contains(&a.as_str()),
                "{when}: acknowledged {a:?} of {plan} is lost"
            );
        }
    }
    for (plan, expected) in graph_acked {
        let events = c
            .list_events(proto::ListEventsRequest {
                plan: plan.clone(),
                limit: 10_000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .events;
        for (task, kind, detail) in expected {
            let found = events.iter().any(|e| {
                e.task_id == *task
                    && e.r#type == *kind
                    && [&e.new_value, &e.to_status, &String::new()].contains(&detail)
            });
            assert!(
                found,
                "{when}: acknowledged {kind} {task} {detail:?} of {plan} is lost"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9() {
    let mut rng = todod_e2e::rng::TestRng::new("acknowledged_writes_survive_kill_9");
    let seed = rng.replay();
    let dir = tempfile::tempdir().unwrap();
    let mut acked: HashMap<String, Vec<String>> = HashMap::new();
    let mut total_acked = 0;
    let mut graph_acked: Vec<(String, Vec<Expected>)> = Vec::new();

    for round in 0..ROUNDS {
        let mut daemon = RealDaemon::spawn(dir.path());
        let url = daemon.target();
        verify(
            &url,
            &acked,
            &graph_acked,
            &format!("round {round} ({seed})"),
        )
        .await;

        let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
        let writers: Vec<_> = (0..CLIENTS)
            .map(|k| tokio::spawn(writer(url.clone(), format!("client-{k}"), started.clone())))
            .collect();
        let graph_plan = format!("graph-{round}");
        let graph = tokio::spawn(graph_writer(url.clone(), graph_plan.clone(), started));
        // Once every writer has had a write acknowledged, pull the plug at a
        // random moment while they keep writing.
        for _ in 0..=CLIENTS {
            tokio::time::timeout(Duration::from_secs(60), starts.recv())
                .await
                .expect("a writer never got a write through")
                .expect("a writer ended before its first write");
        }
        tokio::time::sleep(Duration::from_millis(rng.below(150))).await;
        daemon.kill9();
        for (k, w) in writers.into_iter().enumerate() {
            let got = w.await.unwrap();
            assert!(
                !got.is_empty(),
                "round {round}: writer {k} had no write through"
            );
            total_acked += got.len();
            acked.entry(format!("client-{k}")).or_default().extend(got);
        }
        let got = graph.await.unwrap();
        total_acked += got.len();
        graph_acked.push((graph_plan, got));
    }

    // After the last kill: one more start, the same checks, a clean stop.
    let mut daemon = RealDaemon::spawn(dir.path());
    verify(
        &daemon.target(),
        &acked,
        &graph_acked,
        "after the last kill",
    )
    .await;
    assert!(daemon.terminate().success(), "todod did not stop cleanly");

    // And a look at the file itself.
    let store = todod_store::Store::open_for_test(dir.path()).await.unwrap();
    assert_eq!(store.integrity_check().await.unwrap(), "ok");
    store.close().await;
    println!("{ROUNDS} kills, {total_acked} acknowledged writes, none lost");
}
