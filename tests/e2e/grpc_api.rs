//! The gRPC API end to end, against the daemon started in-process.
use futures::StreamExt;
use todod_e2e::{dependency as dep, item, proto, snapshot, transition, write_request, TestDaemon};
use tonic::{Code, Request};

#[tokio::test]
async fn agent_write_round_trip_matches_by_content_and_archives_missing_items() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;

    let mut req = Request::new(write_request(
        "session-1",
        vec![
            item("", "Read the code", "in_progress", "high"),
            item("", "Write the fix", "pending", "medium"),
            item("", "Run the tests", "", ""),
        ],
    ));
    req.metadata_mut()
        .insert("x-todod-client", "opencode".parse().unwrap());
    let first = c.write_todos(req).await.unwrap().into_inner();
    assert_eq!(first.created.len(), 3);
    // Creating the plan is revision 1; the write that created it, 2.
    assert_eq!(first.plan.as_ref().unwrap().revision, 2);
    let ids: Vec<String> = first.todos.iter().map(|t| t.id.clone()).collect();
    assert_eq!(first.todos[2].priority, "medium");
    assert_eq!(first.todos[2].readiness, "ready");

    // opencode sends no ids: the same content matches the same tasks.
    let second = c
        .write_todos(write_request(
            "session-1",
            vec![
                item("", "Read the code", "completed", "high"),
                item("", "Write the fix", "in_progress", "medium"),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(second.created.is_empty());
    assert_eq!(second.archived, vec![ids[2].clone()]);
    assert_eq!(second.todos.len(), 2);
    assert_eq!(second.todos[0].id, ids[0]);
    assert_eq!(second.todos[0].status, "completed");
    assert_eq!(second.plan.as_ref().unwrap().revision, 3);

    // The archived task keeps its history and is visible when asked for.
    let archived = c
        .get_task(proto::GetTaskRequest { id: ids[2].clone() })
        .await
        .unwrap()
        .into_inner();
    assert!(archived.archived);
    let events = c
        .list_events(proto::ListEventsRequest {
            task_id: ids[0].clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    let kinds: Vec<&str> = events.iter().map(|e| e.r#type.as_str()).collect();
    assert_eq!(kinds, ["task_created", "status_changed", "status_changed"]);
    assert_eq!(events[0].actor, "opencode");
    assert_eq!(events[2].from_status, "in_progress");
    assert_eq!(events[2].to_status, "completed");

    // Writing the same list again changes nothing, not even the revision.
    let again = c
        .write_todos(write_request(
            "session-1",
            vec![
                item(&ids[0], "Read the code", "completed", "high"),
                item(&ids[1], "Write the fix", "in_progress", "medium"),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.plan.unwrap().revision, 3);

    // Listing it again by id restores the archived task.
    let restored = c
        .write_todos(write_request(
            "session-1",
            vec![
                item(&ids[0], "Read the code", "", ""),
                item(&ids[1], "Write the fix", "", ""),
                item(&ids[2], "Run the tests", "", ""),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(restored.todos.len(), 3);
    let read = c
        .read_todos(proto::ReadTodosRequest {
            plan: "session-1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.todos, restored.todos);
    assert_eq!(read.plan, restored.plan);
}

#[tokio::test]
async fn phase_tasks_are_never_archived_by_an_agent_list() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    c.create_plan(proto::CreatePlanRequest {
        name: "run".into(),
        title: "100k completions".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let files = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(files.path()).unwrap();
    std::fs::write(dir.join("p.jsonl"), "").unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let phase = c
        .create_task(proto::CreateTaskRequest {
            plan: "run".into(),
            content: "generate completions".into(),
            kind: "generation".into(),
            spec_json: serde_json::json!({
                "prompts": dir.join("p.jsonl"), "output": dir.join("out.jsonl"), "model": "m",
                "endpoints": [format!("{endpoint}/")], "auto_start": false,
            })
            .to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    // Stored as checked: canonical paths, the default side files named, the
    // endpoint without its trailing slash.
    let stored: serde_json::Value = serde_json::from_str(&phase.spec_json).unwrap();
    assert_eq!(
        stored,
        serde_json::json!({
            "auto_start": false, "endpoints": [endpoint], "model": "m",
            "prompts": dir.join("p.jsonl"), "output": dir.join("out.jsonl"),
            "failures": dir.join("out.jsonl.failures.jsonl"),
            "rejects": dir.join("out.jsonl.rejects.jsonl"),
        })
    );
    let written = c
        .write_todos(write_request("run", vec![item("", "check output", "", "")]))
        .await
        .unwrap()
        .into_inner();
    assert!(written.archived.is_empty());
    assert_eq!(written.todos.len(), 2);
    assert!(written
        .todos
        .iter()
        .any(|t| t.id == phase.id && !t.archived));
}

#[tokio::test]
async fn dependencies_gate_starting_and_readiness_is_derived() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let w = c
        .write_todos(write_request(
            "p",
            vec![
                item("", "a", "", ""),
                item("", "b", "", ""),
                item("", "c", "", ""),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    let (a, b, cc) = (&w.todos[0].id, &w.todos[1].id, &w.todos[2].id);
    c.add_dependency(dep(b, a)).await.unwrap();
    let t = c.add_dependency(dep(cc, b)).await.unwrap().into_inner();
    assert_eq!(t.readiness, "blocked");
    assert_eq!(t.blocked_by, vec![b.clone()]);

    let err = c
        .transition_task(transition(b, "in_progress"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains(&format!("blocked by {a} (pending)")),
        "{}",
        err.message()
    );

    let err = c.add_dependency(dep(a, cc)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("cycle"), "{}", err.message());

    c.transition_task(transition(a, "in_progress"))
        .await
        .unwrap();
    c.transition_task(transition(a, "failed")).await.unwrap();
    let blocked = c
        .list_tasks(proto::ListTasksRequest {
            plan: "p".into(),
            readiness: vec!["blocked_by_failure".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(blocked.tasks.len(), 1);
    assert_eq!(&blocked.tasks[0].id, b);

    // Retry, finish a, then b may start; a may not be reopened while b runs.
    c.transition_task(transition(a, "pending")).await.unwrap();
    c.transition_task(transition(a, "completed")).await.unwrap();
    c.transition_task(transition(b, "in_progress"))
        .await
        .unwrap();
    let err = c
        .transition_task(transition(a, "pending"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("dependents have started"),
        "{}",
        err.message()
    );

    let summary = c
        .get_plan(proto::GetPlanRequest {
            name: "p".into(),
            highlight_limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(summary.total, 3);
    assert_eq!(summary.in_progress.len(), 1);
    assert_eq!(summary.blocked_count, 1);
    assert_eq!(summary.ready_count, 0);
    assert_eq!(&summary.blocked[0].id, cc);

    c.remove_dependency(dep(cc, b)).await.unwrap();
    let t = c
        .get_task(proto::GetTaskRequest { id: cc.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(t.readiness, "ready");
}

#[tokio::test]
async fn list_tasks_pages_through_a_plan_in_order() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let todos = (0..250)
        .map(|i| item("", &format!("task {i}"), "", ""))
        .collect();
    c.write_todos(write_request("big", todos)).await.unwrap();
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .list_tasks(proto::ListTasksRequest {
                plan: "big".into(),
                page_size: 100,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        seen.extend(page.tasks.into_iter().map(|t| t.content));
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    let expected: Vec<String> = (0..250).map(|i| format!("task {i}")).collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn a_watcher_gets_history_then_live_events_and_resumes_from_its_cursor() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    c.write_todos(write_request("w", vec![item("", "one", "", "")]))
        .await
        .unwrap();
    let mut stream = c
        .watch_plan(proto::WatchPlanRequest {
            plan: "w".into(),
            after_seq: 0,
            from_now: false,
        })
        .await
        .unwrap()
        .into_inner();
    let created = stream.next().await.unwrap().unwrap();
    assert_eq!(created.r#type, "plan_created");
    let task = stream.next().await.unwrap().unwrap();
    assert_eq!(task.r#type, "task_created");

    c.write_todos(write_request("w", vec![item("", "one", "in_progress", "")]))
        .await
        .unwrap();
    let live = stream.next().await.unwrap().unwrap();
    assert_eq!(live.r#type, "status_changed");
    assert_eq!(live.to_status, "in_progress");
    drop(stream);

    // While nobody watches, more happens; a watcher resuming from its last seq
    // gets exactly what it missed.
    c.write_todos(write_request("w", vec![item("", "one", "completed", "")]))
        .await
        .unwrap();
    let mut resumed = c
        .watch_plan(proto::WatchPlanRequest {
            plan: "w".into(),
            after_seq: live.seq,
            from_now: false,
        })
        .await
        .unwrap()
        .into_inner();
    let missed = resumed.next().await.unwrap().unwrap();
    assert_eq!(missed.seq, live.seq + 1);
    assert_eq!(missed.to_status, "completed");
}

#[tokio::test]
async fn stale_revisions_are_refused_and_current_ones_accepted() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let w = c
        .write_todos(write_request("r", vec![item("", "x", "", "")]))
        .await
        .unwrap()
        .into_inner();
    let rev = w.plan.unwrap().revision;
    let mut stale = write_request("r", vec![item("", "x", "in_progress", "")]);
    stale.expected_revision = rev + 5;
    let err = c.write_todos(stale).await.unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    let mut fresh = write_request("r", vec![item("", "x", "in_progress", "")]);
    fresh.expected_revision = rev;
    let ok = c.write_todos(fresh).await.unwrap().into_inner();
    assert_eq!(ok.plan.unwrap().revision, rev + 1);
}

#[tokio::test]
async fn everything_is_there_after_a_restart() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    c.write_todos(write_request(
        "keep",
        vec![
            item("", "a", "completed", "high"),
            item("", "b", "in_progress", ""),
        ],
    ))
    .await
    .unwrap();
    let before = todod_e2e::snapshot(&mut c).await;
    drop(c);
    let daemon = daemon.restart().await;
    let mut c = daemon.client().await;
    assert_eq!(todod_e2e::snapshot(&mut c).await, before);
    // And it keeps working: ids are not reused.
    let w = c
        .write_todos(write_request("keep", vec![item("", "c", "", "")]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(w.created, vec!["t3".to_string()]);
}

#[tokio::test]
async fn health_and_reflection_answer_without_the_proto_file() {
    use tonic_health_probe::*;
    let daemon = TestDaemon::start().await;
    assert_eq!(health_status(&daemon.url()).await, 1, "SERVING");

    // What grpcurl and grpcio do first: list services, then fetch the file
    // that defines the service.
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    let channel = tonic::transport::Channel::from_shared(daemon.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut reflection = ServerReflectionClient::new(channel);
    let requests = [
        MessageRequest::ListServices(String::new()),
        MessageRequest::FileContainingSymbol("todod.v1.Todos".into()),
    ]
    .map(|message| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(message),
    });
    let mut answers = reflection
        .server_reflection_info(futures::stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    match answers.next().await.unwrap().unwrap().message_response {
        Some(MessageResponse::ListServicesResponse(list)) => {
            let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
            assert!(names.contains(&"todod.v1.Todos"), "{names:?}");
            assert!(names.contains(&"grpc.health.v1.Health"), "{names:?}");
        }
        other => panic!("unexpected {other:?}"),
    }
    match answers.next().await.unwrap().unwrap().message_response {
        Some(MessageResponse::FileDescriptorResponse(files)) => {
            let file = String::from_utf8_lossy(&files.file_descriptor_proto[0]).into_owned();
            assert!(file.contains("todod/v1/todod.proto"), "{file}");
            assert!(file.contains("WriteTodos"), "{file}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

mod tonic_health_probe {
    /// Calls grpc.health.v1.Health/Check with a hand-encoded empty request, so the
    /// test depends on nothing generated from the daemon's own protos.
    pub async fn health_status(url: &str) -> i32 {
        use tonic::codegen::http::uri::PathAndQuery;
        let channel = tonic::transport::Channel::from_shared(url.to_string())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.unwrap();
        let codec = tonic_prost::ProstCodec::<Check, Reply>::default();
        let reply = grpc
            .unary(
                tonic::Request::new(Check {
                    service: String::new(),
                }),
                PathAndQuery::from_static("/grpc.health.v1.Health/Check"),
                codec,
            )
            .await
            .unwrap();
        reply.into_inner().status
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Check {
        #[prost(string, tag = "1")]
        pub service: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Reply {
        #[prost(int32, tag = "1")]
        pub status: i32,
    }
}

/// Owner and metadata: set at creation, patched key by key (null removes),
/// recorded in the history, and a bad patch changes nothing.
#[tokio::test]
async fn owner_and_metadata_are_kept_patched_and_recorded() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    c.create_plan(proto::CreatePlanRequest {
        name: "p".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let task = c
        .create_task(proto::CreateTaskRequest {
            plan: "p".into(),
            content: "Fix the parser".into(),
            owner: "agent-1".into(),
            metadata_json: r#"{"activeForm":"Fixing the parser","n":1}"#.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(task.owner, "agent-1");
    let meta: serde_json::Value = serde_json::from_str(&task.metadata_json).unwrap();
    assert_eq!(
        meta,
        serde_json::json!({"activeForm": "Fixing the parser", "n": 1})
    );

    let updated = c
        .update_task(proto::UpdateTaskRequest {
            id: task.id.clone(),
            owner: Some("".into()),
            metadata_patch_json: Some(r#"{"n":null,"description":"the CSV one"}"#.into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(updated.owner, "");
    let meta: serde_json::Value = serde_json::from_str(&updated.metadata_json).unwrap();
    assert_eq!(
        meta,
        serde_json::json!({"activeForm": "Fixing the parser", "description": "the CSV one"})
    );

    // A list write patches too, and a bad patch is refused whole.
    let written = c
        .write_todos(proto::WriteTodosRequest {
            plan: "p".into(),
            todos: vec![proto::TodoItem {
                id: task.id.clone(),
                content: "Fix the parser".into(),
                metadata_patch_json: r#"{"activeForm":"Testing the parser"}"#.into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(written.todos[0]
        .metadata_json
        .contains("Testing the parser"));
    let bad = c
        .write_todos(proto::WriteTodosRequest {
            plan: "p".into(),
            todos: vec![
                proto::TodoItem {
                    id: task.id.clone(),
                    content: "Fix the parser, renamed".into(),
                    ..Default::default()
                },
                proto::TodoItem {
                    content: "Another".into(),
                    metadata_patch_json: "[1, 2]".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(
        bad.message().contains("todos[1].metadata_patch_json") && bad.message().contains("object"),
        "{}",
        bad.message()
    );
    let bad = c
        .update_task(proto::UpdateTaskRequest {
            id: task.id.clone(),
            owner: Some("evil\u{1b}[2J".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().starts_with("owner:"), "{}", bad.message());
    let after = c
        .get_task(proto::GetTaskRequest {
            id: task.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(after.content, "Fix the parser");
    assert_eq!(after.metadata_json, written.todos[0].metadata_json);

    let events = c
        .list_events(proto::ListEventsRequest {
            task_id: task.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    let kinds: Vec<&str> = events.iter().map(|e| e.r#type.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "task_created",
            "owner_changed",
            "metadata_changed",
            "owner_changed",
            "metadata_changed",
            "metadata_changed"
        ]
    );
    assert_eq!(events[3].old_value, "agent-1");
}

/// A plan put away: out of the listings, closed to changes, open to reads,
/// refused while work runs, and back whole when restored.
#[tokio::test]
async fn an_archived_plan_is_kept_whole_and_closed_until_restored() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let written = c
        .write_todos(write_request(
            "old",
            vec![
                item("", "Build", "in_progress", ""),
                item("", "Ship", "", ""),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    let (build, ship) = (written.todos[0].id.clone(), written.todos[1].id.clone());
    c.write_todos(write_request("live", vec![item("", "Other", "", "")]))
        .await
        .unwrap();
    let archive = |name: &str| proto::PlanChangeRequest {
        name: name.into(),
        reason: "done with it".into(),
        ..Default::default()
    };

    // Work in progress: refused, naming it.
    let busy = c.archive_plan(archive("old")).await.unwrap_err();
    assert_eq!(busy.code(), Code::FailedPrecondition);
    assert!(busy.message().contains(&build), "{}", busy.message());
    c.transition_task(transition(&build, "completed"))
        .await
        .unwrap();

    let before = snapshot(&mut c).await;
    let plan = c.archive_plan(archive("old")).await.unwrap().into_inner();
    assert!(!plan.archived_at.is_empty());
    let listed = |include_archived| proto::ListPlansRequest {
        include_archived,
        ..Default::default()
    };
    let names = |r: proto::ListPlansResponse| -> Vec<String> {
        r.plans.into_iter().map(|s| s.plan.unwrap().name).collect()
    };
    assert_eq!(
        names(c.list_plans(listed(false)).await.unwrap().into_inner()),
        ["live"]
    );
    assert_eq!(
        names(c.list_plans(listed(true)).await.unwrap().into_inner()),
        ["live", "old"]
    );
    // Reads still work; every kind of change is refused and changes nothing.
    let summary = c
        .get_plan(proto::GetPlanRequest {
            name: "old".into(),
            highlight_limit: 5,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(summary.total, 2);
    let after_archive = snapshot(&mut c).await;
    let refusals = [
        c.write_todos(write_request("old", vec![item("", "New", "", "")]))
            .await
            .map(|_| ())
            .unwrap_err(),
        c.create_task(proto::CreateTaskRequest {
            plan: "old".into(),
            content: "New".into(),
            ..Default::default()
        })
        .await
        .map(|_| ())
        .unwrap_err(),
        c.transition_task(transition(&ship, "in_progress"))
            .await
            .map(|_| ())
            .unwrap_err(),
        c.update_task(proto::UpdateTaskRequest {
            id: ship.clone(),
            content: Some("Ship it".into()),
            ..Default::default()
        })
        .await
        .map(|_| ())
        .unwrap_err(),
        c.add_dependency(dep(&ship, &build))
            .await
            .map(|_| ())
            .unwrap_err(),
    ];
    for refused in refusals {
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
        assert!(
            refused.message().contains("archived"),
            "{}",
            refused.message()
        );
    }
    assert_eq!(
        snapshot(&mut c).await,
        after_archive,
        "refusals changed nothing"
    );
    assert_ne!(before, after_archive, "archiving is a change");
    // Archiving again changes nothing.
    let again = c.archive_plan(archive("old")).await.unwrap().into_inner();
    assert_eq!(again.revision, plan.revision);

    // Restored: open again, the same tasks, and the history says both.
    let restored = c.restore_plan(archive("old")).await.unwrap().into_inner();
    assert!(restored.archived_at.is_empty());
    c.transition_task(transition(&ship, "in_progress"))
        .await
        .unwrap();
    let events = c
        .list_events(proto::ListEventsRequest {
            plan: "old".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    let plan_events: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e.task_id.is_empty())
        .map(|e| (e.r#type.as_str(), e.reason.as_str()))
        .collect();
    assert_eq!(
        plan_events,
        [
            ("plan_created", ""),
            ("plan_archived", "done with it"),
            ("plan_restored", "done with it")
        ]
    );
    let unknown = c.archive_plan(archive("ghost")).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
}
