//! Bad input gets the right gRPC code, names what is wrong, and changes nothing.
use serde_json::json;
use todod_e2e::{dependency as dep, item, proto, snapshot, write_request, Client, TestDaemon};
use tonic::Code;

enum Call {
    Write(proto::WriteTodosRequest),
    CreatePlan(proto::CreatePlanRequest),
    CreateTask(proto::CreateTaskRequest),
    Update(proto::UpdateTaskRequest),
    Transition(proto::TransitionTaskRequest),
    AddDep(proto::DependencyRequest),
    RemoveDep(proto::DependencyRequest),
    GetPlan(proto::GetPlanRequest),
    GetTask(proto::GetTaskRequest),
    ListTasks(proto::ListTasksRequest),
    ListEvents(proto::ListEventsRequest),
    Watch(proto::WatchPlanRequest),
}

async fn call(c: &mut Client, call: Call) -> Result<(), tonic::Status> {
    match call {
        Call::Write(r) => c.write_todos(r).await.map(drop),
        Call::CreatePlan(r) => c.create_plan(r).await.map(drop),
        Call::CreateTask(r) => c.create_task(r).await.map(drop),
        Call::Update(r) => c.update_task(r).await.map(drop),
        Call::Transition(r) => c.transition_task(r).await.map(drop),
        Call::AddDep(r) => c.add_dependency(r).await.map(drop),
        Call::RemoveDep(r) => c.remove_dependency(r).await.map(drop),
        Call::GetPlan(r) => c.get_plan(r).await.map(drop),
        Call::GetTask(r) => c.get_task(r).await.map(drop),
        Call::ListTasks(r) => c.list_tasks(r).await.map(drop),
        Call::ListEvents(r) => c.list_events(r).await.map(drop),
        Call::Watch(r) => c.watch_plan(r).await.map(drop),
    }
}

fn with_deps(mut it: proto::TodoItem, deps: &[&str]) -> proto::TodoItem {
    it.depends_on = deps.iter().map(|d| d.to_string()).collect();
    it
}

fn transition(id: &str, to: &str) -> Call {
    Call::Transition(todod_e2e::transition(id, to))
}

#[tokio::test]
async fn bad_inputs_get_the_right_code_and_leave_the_store_unchanged() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    // The phase task's files live in the test's own directory, and its
    // endpoint is a port the test holds and never answers.
    let files = tempfile::tempdir().unwrap();
    let prompts = files.path().join("p.jsonl");
    std::fs::write(
        &prompts,
        "{\"id\": \"a\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n",
    )
    .unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let spec = serde_json::json!({
        "prompts": prompts, "output": files.path().join("o.jsonl"), "model": "m",
        "endpoints": [endpoint],
    });
    // Plan p: t1 completed <- t2 in_progress; t3 pending. Plan q: t4.
    let p = c
        .write_todos(write_request(
            "p",
            vec![
                item("", "a", "completed", "high"),
                item("", "b", "in_progress", ""),
                item("", "c", "", ""),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    c.add_dependency(dep("t2", "t1")).await.unwrap();
    c.write_todos(write_request("q", vec![item("", "d", "", "")]))
        .await
        .unwrap();
    // t5: a phase task of p that waits for t3.
    c.create_task(proto::CreateTaskRequest {
        plan: "p".into(),
        content: "generate".into(),
        kind: "generation".into(),
        spec_json: spec.to_string(),
        depends_on: vec!["t3".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let revision = c
        .get_plan(proto::GetPlanRequest {
            name: "p".into(),
            highlight_limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .plan
        .unwrap()
        .revision;
    assert!(revision > p.plan.unwrap().revision);
    let full = || {
        vec![
            item("t1", "a", "", ""),
            item("t2", "b", "", ""),
            item("t3", "c", "", ""),
        ]
    };
    let write = |todos: Vec<proto::TodoItem>| Call::Write(write_request("p", todos));

    // A generation spec that is fine but for one field.
    let gen = |key: &str, value: serde_json::Value| {
        let mut spec = spec.clone();
        spec["output"] = serde_json::json!(files.path().join("other.jsonl"));
        if value.is_null() {
            spec.as_object_mut().unwrap().remove(key);
        } else {
            spec[key] = value;
        }
        Call::CreateTask(proto::CreateTaskRequest {
            plan: "p".into(),
            content: "gen".into(),
            kind: "generation".into(),
            spec_json: spec.to_string(),
            ..Default::default()
        })
    };

    #[rustfmt::skip]
    let cases: Vec<(&str, Call, Code, &str)> = vec![
        ("prompts file missing", gen("prompts", json!(files.path().join("missing.jsonl"))), Code::InvalidArgument, "spec.prompts: "),
        ("prompts is a directory", gen("prompts", json!(files.path())), Code::InvalidArgument, "spec.prompts: "),
        ("prompts relative", gen("prompts", json!("p.jsonl")), Code::InvalidArgument, "spec.prompts: \"p.jsonl\" is relative"),
        ("output relative", gen("output", json!("out.jsonl")), Code::InvalidArgument, "spec.output: \"out.jsonl\" is relative"),
        ("file endpoint", gen("endpoints", json!(["file:///etc/passwd"])), Code::InvalidArgument, "spec.endpoints[0]: \"file:///etc/passwd\": the scheme must be http or https"),
        ("ftp endpoint", gen("endpoints", json!(["http://ok:1", "ftp://h/"])), Code::InvalidArgument, "spec.endpoints[1]"),
        ("endpoint not a URL", gen("endpoints", json!(["localhost:8000"])), Code::InvalidArgument, "spec.endpoints[0]"),
        ("endpoint with credentials", gen("endpoints", json!(["http://u:p@h:1"])), Code::InvalidArgument, "api_key_env"),
        ("negative concurrency", gen("concurrency", json!(-1)), Code::InvalidArgument, "spec.concurrency: must be between 1 and 65536 (got -1)"),
        ("zero concurrency", gen("concurrency", json!(0)), Code::InvalidArgument, "spec.concurrency: must be between 1 and 65536"),
        ("huge concurrency", gen("concurrency", json!(100000)), Code::InvalidArgument, "spec.concurrency: must be between 1 and 65536"),
        ("concurrency a word", gen("concurrency", json!("many")), Code::InvalidArgument, "spec.concurrency"),
        ("zero attempts", gen("max_attempts", json!(0)), Code::InvalidArgument, "spec.max_attempts: must be between 1 and 100"),
        ("zero max_tokens", gen("max_tokens", json!(0)), Code::InvalidArgument, "spec.max_tokens"),
        ("failed share over 1", gen("max_failed_share", json!(2.0)), Code::InvalidArgument, "spec.max_failed_share"),
        ("empty model", gen("model", json!(" ")), Code::InvalidArgument, "spec.model: must not be empty"),
        ("model missing", gen("model", serde_json::Value::Null), Code::InvalidArgument, "spec.model: is required"),
        ("model in params", gen("params", json!({"model": "x"})), Code::InvalidArgument, "spec.params.model"),
        ("unknown api", gen("api", json!("responses")), Code::InvalidArgument, "spec.api"),
        ("deadline of zero", gen("request_deadline_seconds", json!(0)), Code::InvalidArgument, "spec.request_deadline_seconds"),
        ("unknown field", gen("temprature", json!(1)), Code::InvalidArgument, "spec.temprature: unknown field"),
        ("key variable not exposed", gen("api_key_env", json!("HOME")), Code::InvalidArgument, "spec.api_key_env"),
        ("auto concurrency without feasibility", gen("concurrency", json!("auto")), Code::InvalidArgument, "feasibility"),
        ("empty content", write(vec![item("", "", "", "")]), Code::InvalidArgument, "todos[0].content"),
        ("blank content", write(vec![item("", " \n\t", "", "")]), Code::InvalidArgument, "todos[0].content"),
        ("content too long", write(vec![item("", &"x".repeat(5000), "", "")]), Code::InvalidArgument, "todos[0].content"),
        ("NUL in content", write(vec![item("", "a\0b", "", "")]), Code::InvalidArgument, "todos[0].content"),
        ("unknown status", write(vec![item("", "a", "done", "")]), Code::InvalidArgument, "todos[0].status"),
        ("unknown priority", write(vec![item("", "a", "", "urgent")]), Code::InvalidArgument, "todos[0].priority"),
        ("unknown id", write(vec![item("t999", "a", "", "")]), Code::NotFound, "t999"),
        ("malformed id", write(vec![item("task-one", "a", "", "")]), Code::InvalidArgument, "todos[0].id"),
        ("duplicate id", write(vec![item("t1", "a", "", ""), item("t1", "a", "", "")]), Code::InvalidArgument, "todos[1].id"),
        ("self dependency", write(vec![item("t1", "a", "", ""), item("t2", "b", "", ""), with_deps(item("t3", "c", "", ""), &["t3"])]), Code::InvalidArgument, "depends_on"),
        ("cycle in a list", write(vec![with_deps(item("t1", "a", "", ""), &["t3"]), item("t2", "b", "", ""), with_deps(item("t3", "c", "", ""), &["t2"])]), Code::FailedPrecondition, "cycle"),
        ("cross-plan id", write(vec![item("t4", "d", "", "")]), Code::InvalidArgument, "plan \"q\""),
        ("cross-plan dependency", write(vec![item("t1", "a", "", ""), item("t2", "b", "", ""), with_deps(item("t3", "c", "", ""), &["t4"])]), Code::InvalidArgument, "todos[2].depends_on[0]: t4 belongs to plan \"q\""),
        ("dependency on a missing task", write(vec![item("t1", "a", "", ""), item("t2", "b", "", ""), with_deps(item("t3", "c", "", ""), &["t999"])]), Code::NotFound, "t999 (todos[2].depends_on[0])"),
        ("leaving out what a phase task waits for", write(vec![item("t1", "a", "", ""), item("t2", "b", "", "")]), Code::FailedPrecondition, "phase task t5 depends on it"),
        ("refused write to a new plan", Call::Write(write_request("fresh", vec![item("", "x", "failed", "")])), Code::FailedPrecondition, "only a task in progress can fail"),
        ("huge unknown status", write(vec![item("", "a", &"x".repeat(100_000), "")]), Code::InvalidArgument, "todos[0].status"),
        ("spec on a plain task", Call::CreateTask(proto::CreateTaskRequest { plan: "p".into(), content: "x".into(), spec_json: "{}".into(), ..Default::default() }), Code::InvalidArgument, "spec_json: plain (todo) tasks take no spec"),
        ("event of a task in another plan", Call::ListEvents(proto::ListEventsRequest { plan: "q".into(), task_id: "t1".into(), ..Default::default() }), Code::NotFound, "t1 in plan q"),
        ("illegal transition", write(vec![item("t1", "a", "", ""), item("t2", "b", "", ""), item("t3", "c", "failed", "")]), Code::FailedPrecondition, "only a task in progress can fail"),
        ("start with unfinished dependency", write(vec![item("t1", "a", "", ""), item("t2", "b", "", ""), with_deps(item("t3", "c", "in_progress", ""), &["t2"])]), Code::FailedPrecondition, "blocked by t2"),
        ("reopen under a started dependent", write(vec![item("t1", "a", "pending", ""), item("t2", "b", "", ""), item("t3", "c", "", "")]), Code::FailedPrecondition, "dependents have started"),
        ("stale revision", Call::Write(proto::WriteTodosRequest { expected_revision: revision - 1, ..write_request("p", full()) }), Code::Aborted, "revision"),
        ("empty plan name", Call::Write(write_request("", full())), Code::InvalidArgument, "plan"),
        ("plan name with a space", Call::Write(write_request("my plan", full())), Code::InvalidArgument, "plan"),
        ("too many items", write((0..10_001).map(|i| item("", &i.to_string(), "", "")).collect()), Code::InvalidArgument, "todos"),
        ("oversized message", write(vec![item("", &"x".repeat(5 * 1024 * 1024), "", "")]), Code::OutOfRange, "the limit is: 4194304 bytes"),
        ("negative revision", Call::Write(proto::WriteTodosRequest { expected_revision: -1, ..write_request("p", full()) }), Code::InvalidArgument, "expected_revision"),
        ("plan exists", Call::CreatePlan(proto::CreatePlanRequest { name: "p".into(), title: String::new(), ..Default::default() }), Code::AlreadyExists, "plan p"),
        ("phase without spec", Call::CreateTask(proto::CreateTaskRequest { plan: "p".into(), content: "gen".into(), kind: "generation".into(), ..Default::default() }), Code::InvalidArgument, "spec_json"),
        ("spec not JSON", Call::CreateTask(proto::CreateTaskRequest { plan: "p".into(), content: "gen".into(), kind: "generation".into(), spec_json: "{prompts:".into(), ..Default::default() }), Code::InvalidArgument, "spec_json"),
        ("generation spec without endpoints", Call::CreateTask(proto::CreateTaskRequest { plan: "p".into(), content: "gen".into(), kind: "generation".into(), spec_json: r#"{"prompts": "/p", "output": "/o", "model": "m", "endpoints": []}"#.into(), ..Default::default() }), Code::InvalidArgument, "spec.endpoints: at least one"),
        ("generation spec with an unknown field", Call::CreateTask(proto::CreateTaskRequest { plan: "p".into(), content: "gen".into(), kind: "generation".into(), spec_json: r#"{"prompts": "/p", "output": "/o", "model": "m", "endpoints": ["http://x:1"], "temprature": 1}"#.into(), ..Default::default() }), Code::InvalidArgument, "spec.temprature: unknown field"),
        ("generation spec with a relative path", Call::CreateTask(proto::CreateTaskRequest { plan: "p".into(), content: "gen".into(), kind: "generation".into(), spec_json: r#"{"prompts": "prompts.jsonl", "output": "/o", "model": "m", "endpoints": ["http://x:1"]}"#.into(), ..Default::default() }), Code::InvalidArgument, "spec.prompts: \"prompts.jsonl\" is relative"),
        ("spec not an object", Call::CreateTask(proto::CreateTaskRequest { plan: "p".into(), content: "gen".into(), kind: "tokenization".into(), spec_json: "[1, 2]".into(), ..Default::default() }), Code::InvalidArgument, "spec_json"),
        ("unknown kind", Call::CreateTask(proto::CreateTaskRequest { plan: "p".into(), content: "x".into(), kind: "training".into(), ..Default::default() }), Code::InvalidArgument, "kind"),
        ("task in unknown plan", Call::CreateTask(proto::CreateTaskRequest { plan: "nope".into(), content: "x".into(), ..Default::default() }), Code::NotFound, "plan nope"),
        ("task with cross-plan dependency", Call::CreateTask(proto::CreateTaskRequest { plan: "p".into(), content: "x".into(), depends_on: vec!["t4".into()], ..Default::default() }), Code::InvalidArgument, "depends_on[0]"),
        ("update to empty content", Call::Update(proto::UpdateTaskRequest { id: "t3".into(), content: Some("  ".into()), ..Default::default() }), Code::InvalidArgument, "content"),
        ("update to unknown priority", Call::Update(proto::UpdateTaskRequest { id: "t3".into(), priority: Some("asap".into()), ..Default::default() }), Code::InvalidArgument, "priority"),
        ("update unknown task", Call::Update(proto::UpdateTaskRequest { id: "t77".into(), content: Some("x".into()), ..Default::default() }), Code::NotFound, "t77"),
        ("transition unknown task", transition("t99", "completed"), Code::NotFound, "t99"),
        ("transition to unknown status", transition("t3", "finished"), Code::InvalidArgument, "to"),
        ("transition without target", transition("t3", ""), Code::InvalidArgument, "to"),
        ("cancel completed work", transition("t1", "cancelled"), Code::FailedPrecondition, "reopen it first"),
        ("reopen under started dependent", transition("t1", "pending"), Code::FailedPrecondition, "t2 (in_progress)"),
        ("stale revision on a transition", Call::Transition(proto::TransitionTaskRequest { id: "t3".into(), to: "completed".into(), expected_revision: revision + 3, ..Default::default() }), Code::Aborted, "revision"),
        ("self edge", Call::AddDep(dep("t3", "t3")), Code::InvalidArgument, "itself"),
        ("cross-plan edge", Call::AddDep(dep("t3", "t4")), Code::InvalidArgument, "plan"),
        ("edge to missing task", Call::AddDep(dep("t3", "t404")), Code::NotFound, "t404"),
        ("cycle edge", Call::AddDep(dep("t1", "t2")), Code::FailedPrecondition, "cycle"),
        ("started task gains unfinished dependency", Call::AddDep(dep("t2", "t3")), Code::FailedPrecondition, "t2 is in_progress, so it cannot depend on t3, which is pending"),
        ("remove missing edge", Call::RemoveDep(dep("t3", "t1")), Code::NotFound, "t3 -> t1"),
        ("unknown plan", Call::GetPlan(proto::GetPlanRequest { name: "ghost".into(), highlight_limit: 0 }), Code::NotFound, "ghost"),
        ("malformed task id", Call::GetTask(proto::GetTaskRequest { id: "'; DROP TABLE tasks".into() }), Code::InvalidArgument, "id"),
        ("bad page token", Call::ListTasks(proto::ListTasksRequest { plan: "p".into(), page_token: "zzz".into(), ..Default::default() }), Code::InvalidArgument, "page_token"),
        ("unknown status filter", Call::ListTasks(proto::ListTasksRequest { plan: "p".into(), statuses: vec!["open".into()], ..Default::default() }), Code::InvalidArgument, "statuses[0]"),
        ("negative cursor", Call::ListEvents(proto::ListEventsRequest { plan: "p".into(), after_seq: -5, ..Default::default() }), Code::InvalidArgument, "after_seq"),
        ("watch unknown plan", Call::Watch(proto::WatchPlanRequest { plan: "ghost".into(), ..Default::default() }), Code::NotFound, "ghost"),
        ("watch from now and a cursor", Call::Watch(proto::WatchPlanRequest { plan: "p".into(), after_seq: 3, from_now: true }), Code::InvalidArgument, "from_now"),
    ];
    // Each case has a name of its own, so that a failure says which it is.
    let mut names: Vec<&str> = cases.iter().map(|case| case.0).collect();
    names.sort_unstable();
    let count = names.len();
    names.dedup();
    assert_eq!(names.len(), count, "two cases share a name");

    let before = snapshot(&mut c).await;
    for (name, request, code, needle) in cases {
        let err = call(&mut c, request)
            .await
            .expect_err(&format!("{name}: should be refused"));
        assert_eq!(err.code(), code, "{name}: {}", err.message());
        assert!(
            err.message().contains(needle),
            "{name}: message {:?} should mention {needle:?}",
            err.message()
        );
        assert!(
            !err.message().to_lowercase().contains("sqlite"),
            "{name}: leaks internals: {}",
            err.message()
        );
        assert!(
            err.message().len() < 1024,
            "{name}: a {}-byte message echoes too much input",
            err.message().len()
        );
        assert_eq!(snapshot(&mut c).await, before, "{name}: the store changed");
    }
}
