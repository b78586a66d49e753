//! The real `todoctl` binary against an in-process mock of the Todos service:
//! transport (TCP and Unix socket), metadata, paging, exit codes, watch resume.
// tonic::Status is the error type of the service contract the mock implements.
#![allow(clippy::result_large_err)]
use std::pin::Pin;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use todod_proto::todos_server::{Todos, TodosServer};
use todod_proto::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tonic::{Request, Response, Status};

type R<T> = Result<Response<T>, Status>;

#[derive(Default)]
struct Seen {
    clients: Vec<String>,
    auth: Vec<String>,
    calls: Vec<String>,
    watch_after: Vec<i64>,
    written: Vec<TodoItem>,
}

#[derive(Clone, Default)]
struct Mock {
    seen: Arc<Mutex<Seen>>,
    token: Option<String>,
}

fn task(id: &str, status: &str, readiness: &str, deps: &[&str], blocked_by: &[&str]) -> Task {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Task {
        id: id.into(),
        plan: "p".into(),
        content: format!("do {id}"),
        status: status.into(),
        priority: "medium".into(),
        kind: "todo".into(),
        position: id[1..].parse().unwrap_or(0),
        readiness: readiness.into(),
        depends_on: strings(deps),
        blocked_by: strings(blocked_by),
        ..Default::default()
    }
}

fn tasks() -> Vec<Task> {
    let mut t2 = task("t2", "in_progress", "", &["t1"], &[]);
    t2.progress = Some(Box::new(Progress {
        done: 500,
        total: 1000,
        ..Default::default()
    }));
    vec![
        task("t1", "completed", "", &[], &[]),
        t2,
        task("t3", "pending", "blocked", &["t1", "t2"], &["t2"]),
        task("t4", "failed", "", &[], &[]),
        task("t5", "pending", "blocked_by_failure", &["t4"], &["t4"]),
    ]
}

fn event(seq: i64) -> Event {
    Event {
        seq,
        plan: "p".into(),
        task_id: "t1".into(),
        r#type: "content_changed".into(),
        ..Default::default()
    }
}

impl Mock {
    fn check<T>(&self, name: &str, req: &Request<T>) -> Result<(), Status> {
        let md = req.metadata();
        let get = |k: &str| {
            md.get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let mut seen = self.seen.lock().expect("lock");
        seen.clients.push(get("x-todod-client"));
        seen.auth.push(get("authorization"));
        seen.calls.push(name.to_string());
        match &self.token {
            Some(t) if get("authorization") != format!("Bearer {t}") => {
                Err(Status::unauthenticated("missing or wrong token"))
            }
            _ => Ok(()),
        }
    }

    fn summary(&self) -> PlanSummary {
        let all = tasks();
        PlanSummary {
            plan: Some(Plan {
                name: "p".into(),
                title: "The plan".into(),
                revision: 9,
                ..Default::default()
            }),
            counts: ["pending", "in_progress", "completed", "cancelled", "failed"]
                .iter()
                .map(|s| StatusCount {
                    status: s.to_string(),
                    count: all.iter().filter(|t| t.status == *s).count() as i64,
                })
                .collect(),
            total: 5,
            blocked_count: 1,
            blocked_by_failure_count: 1,
            in_progress: vec![all[1].clone()],
            blocked: vec![all[2].clone(), all[4].clone()],
            ..Default::default()
        }
    }
}

#[tonic::async_trait]
impl Todos for Mock {
    async fn set_schedule(&self, _: Request<todod_proto::SetScheduleRequest>) -> R<Task> {
        Err(Status::unimplemented("no"))
    }

    async fn backup(
        &self,
        _: Request<todod_proto::BackupRequest>,
    ) -> R<todod_proto::BackupResponse> {
        Err(Status::unimplemented("no"))
    }

    async fn list_kinds(&self, req: Request<ListKindsRequest>) -> R<ListKindsResponse> {
        self.check("list_kinds", &req)?;
        let kind = |name: &str, phase: bool| KindInfo {
            name: name.into(),
            phase,
            ..Default::default()
        };
        Ok(Response::new(ListKindsResponse {
            kinds: vec![kind("todo", false), kind("generation", true)],
        }))
    }

    async fn list_servers(
        &self,
        req: Request<todod_proto::ListServersRequest>,
    ) -> R<todod_proto::ListServersResponse> {
        self.check("list_servers", &req)?;
        Ok(Response::new(todod_proto::ListServersResponse {
            servers: vec![todod_proto::ServerInfo {
                name: "local".into(),
                id: "local-0123456789ab".into(),
                state: "ready".into(),
                pid: 4242,
                url: "http://127.0.0.1:41237/v1".into(),
                uptime_seconds: 312,
                restarts: 3,
                last_exit: "killed by signal 9 (SIGKILL); its log ends:\nthe end".into(),
                tasks: vec!["t3".into()],
                devices: 8,
            }],
        }))
    }

    async fn open_page(&self, req: Request<OpenPageRequest>) -> R<OpenPageResponse> {
        self.check("open_page", &req)?;
        let plan = &req.get_ref().plan;
        if plan == "missing" {
            return Err(Status::not_found("plan missing not found"));
        }
        Ok(Response::new(OpenPageResponse {
            url: format!("http://127.0.0.1:1/login?code=c0de&next=%2Fplans%2F{plan}"),
            expires_at: "2026-12-03T10:05:00Z".into(),
        }))
    }

    async fn apply_pipeline(
        &self,
        _: Request<todod_proto::ApplyPipelineRequest>,
    ) -> R<todod_proto::ApplyPipelineResponse> {
        Err(Status::unimplemented("no"))
    }

    async fn write_todos(&self, req: Request<WriteTodosRequest>) -> R<WriteTodosResponse> {
        self.check("write_todos", &req)?;
        let req = req.into_inner();
        self.seen.lock().expect("lock").written = req.todos.clone();
        let todos = req
            .todos
            .iter()
            .enumerate()
            .map(|(i, item)| Task {
                id: format!("t{}", i + 10),
                content: item.content.clone(),
                status: "pending".into(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(WriteTodosResponse {
            plan: Some(Plan {
                name: req.plan,
                revision: 2,
                ..Default::default()
            }),
            todos,
            created: vec!["t10".into()],
            archived: vec![],
        }))
    }
    async fn read_todos(&self, req: Request<ReadTodosRequest>) -> R<ReadTodosResponse> {
        self.check("read_todos", &req)?;
        Ok(Response::new(ReadTodosResponse {
            plan: None,
            todos: tasks(),
        }))
    }
    async fn create_plan(&self, req: Request<CreatePlanRequest>) -> R<Plan> {
        self.check("create_plan", &req)?;
        Err(Status::already_exists("plan p already exists"))
    }
    async fn archive_plan(&self, _: Request<todod_proto::PlanChangeRequest>) -> R<Plan> {
        Err(Status::unimplemented("no"))
    }
    async fn restore_plan(&self, _: Request<todod_proto::PlanChangeRequest>) -> R<Plan> {
        Err(Status::unimplemented("no"))
    }
    async fn get_plan(&self, req: Request<GetPlanRequest>) -> R<PlanSummary> {
        self.check("get_plan", &req)?;
        Ok(Response::new(self.summary()))
    }
    async fn list_plans(&self, req: Request<ListPlansRequest>) -> R<ListPlansResponse> {
        self.check("list_plans", &req)?;
        Ok(Response::new(ListPlansResponse {
            plans: vec![self.summary()],
        }))
    }
    async fn create_task(&self, req: Request<CreateTaskRequest>) -> R<Task> {
        self.check("create_task", &req)?;
        let r = req.into_inner();
        if r.content == "bad" {
            return Err(Status::invalid_argument("content: must not be \"bad\""));
        }
        Ok(Response::new(Task {
            id: "t6".into(),
            content: r.content,
            depends_on: r.depends_on,
            spec_json: r.spec_json,
            ..Default::default()
        }))
    }
    async fn get_task(&self, req: Request<GetTaskRequest>) -> R<Task> {
        self.check("get_task", &req)?;
        let id = req.into_inner().id;
        tasks()
            .into_iter()
            .find(|t| t.id == id)
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("task {id} not found")))
    }
    async fn list_tasks(&self, req: Request<ListTasksRequest>) -> R<ListTasksResponse> {
        self.check("list_tasks", &req)?;
        // Two tasks per page, whatever page_size says, to exercise paging.
        let start: usize = req.into_inner().page_token.parse().unwrap_or(0);
        let all = tasks();
        let end = (start + 2).min(all.len());
        let next = if end < all.len() {
            end.to_string()
        } else {
            String::new()
        };
        Ok(Response::new(ListTasksResponse {
            tasks: all[start..end].to_vec(),
            next_page_token: next,
            plan_revision: 9,
        }))
    }
    async fn update_task(&self, req: Request<UpdateTaskRequest>) -> R<Task> {
        self.check("update_task", &req)?;
        Err(Status::unimplemented("no"))
    }
    async fn transition_task(&self, req: Request<TransitionTaskRequest>) -> R<Task> {
        self.check("transition_task", &req)?;
        let r = req.into_inner();
        if r.id == "t3" && r.to == "completed" {
            return Err(Status::failed_precondition(
                "t3 has unfinished dependencies: t2",
            ));
        }
        let mut t = tasks()
            .into_iter()
            .find(|t| t.id == r.id)
            .ok_or_else(|| Status::not_found("no"))?;
        t.status = r.to;
        t.readiness = if t.status == "pending" {
            "ready".into()
        } else {
            String::new()
        };
        Ok(Response::new(t))
    }
    async fn add_dependency(&self, req: Request<DependencyRequest>) -> R<Task> {
        self.check("add_dependency", &req)?;
        Err(Status::failed_precondition(
            "the edge would close a cycle: t1 -> t3 -> t1",
        ))
    }
    async fn remove_dependency(&self, req: Request<DependencyRequest>) -> R<Task> {
        self.check("remove_dependency", &req)?;
        Ok(Response::new(task("t3", "pending", "ready", &["t1"], &[])))
    }
    async fn list_events(&self, req: Request<ListEventsRequest>) -> R<ListEventsResponse> {
        self.check("list_events", &req)?;
        let r = req.into_inner();
        let limit = if r.limit <= 0 {
            1000
        } else {
            i64::from(r.limit)
        };
        // 1500 events in all, so the client has to follow last_seq.
        let events: Vec<Event> = (r.after_seq + 1..=(r.after_seq + limit).min(1500))
            .map(event)
            .collect();
        let last_seq = events.last().map_or(r.after_seq, |e| e.seq);
        Ok(Response::new(ListEventsResponse { events, last_seq }))
    }
    type WatchPlanStream = Pin<Box<dyn Stream<Item = Result<Event, Status>> + Send>>;
    async fn watch_plan(&self, req: Request<WatchPlanRequest>) -> R<Self::WatchPlanStream> {
        self.check("watch_plan", &req)?;
        let after = req.into_inner().after_seq;
        let first = {
            let mut seen = self.seen.lock().expect("lock");
            seen.watch_after.push(after);
            seen.watch_after.len() == 1
        };
        let stream: Self::WatchPlanStream = if first {
            // Three events, then the stream breaks.
            let items = (after + 1..=after + 3)
                .map(|s| Ok(event(s)))
                .chain([Err(Status::unavailable("daemon restarting"))]);
            Box::pin(futures::stream::iter(items.collect::<Vec<_>>()))
        } else {
            // One repeated event (must be skipped), two new ones, then stay open.
            let items = [after, after + 1, after + 2]
                .into_iter()
                .map(|s| Ok(event(s)));
            Box::pin(futures::StreamExt::chain(
                futures::stream::iter(items.collect::<Vec<_>>()),
                futures::stream::pending(),
            ))
        };
        Ok(Response::new(stream))
    }
}

struct Daemon {
    seen: Arc<Mutex<Seen>>,
    addr: String,
    _dir: tempfile::TempDir,
}

async fn start(unix: bool, token: Option<&str>) -> Daemon {
    let mock = Mock {
        token: token.map(String::from),
        ..Default::default()
    };
    let seen = mock.seen.clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = tonic::transport::Server::builder().add_service(TodosServer::new(mock));
    let addr = if unix {
        let path = dir.path().join("todod.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind unix");
        tokio::spawn(
            server.serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
        );
        format!("unix:{}", path.display())
    } else {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind tcp");
        let local = listener.local_addr().expect("addr");
        tokio::spawn(
            server.serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        format!("http://{local}")
    };
    Daemon {
        seen,
        addr,
        _dir: dir,
    }
}

fn todoctl(addr: &str, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_todoctl"));
    for var in ["TODOD_ADDR", "TODOD_TOKEN", "TODOD_PLAN", "TODOD_CLIENT"] {
        cmd.env_remove(var);
    }
    cmd.arg("--addr").arg(addr).args(args).kill_on_drop(true);
    cmd
}

async fn run(addr: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    use tokio::io::AsyncWriteExt;
    let mut cmd = todoctl(addr, args);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn todoctl");
    let mut pipe = child.stdin.take().expect("stdin");
    pipe.write_all(stdin.unwrap_or_default())
        .await
        .expect("write stdin");
    drop(pipe);
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("todoctl finished")
        .expect("output")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test]
async fn status_over_unix_socket_sends_metadata() {
    let d = start(true, None).await;
    let out = run(
        &d.addr,
        &["--client-name", "agent-7", "--token", "s3cret", "status"],
        None,
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("[~] t2  do t2  [#####-----] 50% 500/1000"),
        "{stdout}"
    );
    assert!(stdout.contains("    t3 blocked by t2: do t3"), "{stdout}");
    assert!(
        stdout.contains("  ! t5 blocked by failure of t4: do t5"),
        "{stdout}"
    );
    let seen = d.seen.lock().expect("lock");
    assert_eq!(seen.clients, ["agent-7"]);
    assert_eq!(seen.auth, ["Bearer s3cret"]);
}

#[tokio::test]
async fn open_prints_a_one_time_login_url() {
    let d = start(false, Some("s3cret")).await;
    let out = run(&d.addr, &["--token", "s3cret", "open", "p"], None).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("http://127.0.0.1:1/login?code=c0de&next=%2Fplans%2Fp\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("works once, until 2026-12-03T10:05:00Z"),
        "{stdout}"
    );
    let out = run(&d.addr, &["--token", "s3cret", "--json", "open"], None).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["expires_at"], "2026-12-03T10:05:00Z");
    let out = run(&d.addr, &["--token", "s3cret", "open", "missing"], None).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn list_follows_every_page_over_tcp() {
    let d = start(false, None).await;
    let out = run(&d.addr, &["--json", "list", "-p", "p"], None).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let ids: Vec<&str> = v["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, ["t1", "t2", "t3", "t4", "t5"]);
    assert_eq!(v["tasks"][1]["progress"]["total"], 1000);
    assert_eq!(d.seen.lock().expect("lock").clients, ["todoctl"; 3]);
}

#[tokio::test]
async fn show_pages_through_history() {
    let d = start(true, None).await;
    let out = run(&d.addr, &["--json", "show", "t1"], None).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["events"].as_array().map(Vec::len), Some(1500));
    assert_eq!(v["task"]["status"], "completed");
}

#[tokio::test]
async fn exit_codes_follow_the_grpc_status() {
    let d = start(true, None).await;
    let cases: [(&[&str], i32, &str); 6] = [
        (&["show", "t99"], 3, "todoctl: task t99 not found\n"),
        (
            &["done", "t3"],
            4,
            "todoctl: t3 has unfinished dependencies: t2\n",
        ),
        (
            &["retry", "t2"],
            4,
            "todoctl: t2 is in_progress; `retry` applies to a failed task\n",
        ),
        (
            &["plan", "create", "p"],
            4,
            "todoctl: plan p already exists\n",
        ),
        (
            &["add", "bad", "-p", "p"],
            2,
            "todoctl: CONTENT: must not be \"bad\"\n",
        ),
        (
            &["add", "x", "-p", "p", "--spec", "[1]"],
            2,
            "todoctl: --spec: expected a JSON object\n",
        ),
    ];
    for (args, code, stderr) in cases {
        let out = run(&d.addr, args, None).await;
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stderr), stderr, "{args:?}");
    }
    let out = run(&d.addr, &["start", "t3"], None).await;
    assert_eq!(text(&out.stdout), "t3: pending -> in_progress\n");
    let out = run(&d.addr, &["retry", "t4"], None).await;
    assert_eq!(text(&out.stdout), "t4: failed -> pending (ready)\n");
    let out = run(&d.addr, &["dep", "rm", "t3", "t2"], None).await;
    assert_eq!(
        text(&out.stdout),
        "t3 no longer depends on t2 (dependencies: t1)\n"
    );
}

#[tokio::test]
async fn unauthenticated_and_unreachable() {
    let d = start(true, Some("s3cret")).await;
    let out = run(&d.addr, &["status"], None).await;
    assert_eq!(out.status.code(), Some(6));
    assert!(
        text(&out.stderr).starts_with("todoctl: missing or wrong token (the daemon wants a token"),
        "{}",
        text(&out.stderr)
    );

    // A socket path that cannot exist: nothing can be listening there.
    let missing = tempfile::tempdir().unwrap();
    let addr = format!("unix:{}", missing.path().join("no.sock").display());
    let out = run(&addr, &["status"], None).await;
    assert_eq!(out.status.code(), Some(5));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!("todoctl: cannot reach todod at {addr}: ")),
        "{stderr}"
    );
    assert!(
        stderr
            .trim_end()
            .ends_with("(is the daemon running? start it with `todod`)"),
        "{stderr}"
    );
}

#[tokio::test]
async fn write_checks_input_before_calling_the_daemon() {
    let d = start(true, None).await;
    let out = run(
        &d.addr,
        &["write", "-p", "p"],
        Some(b"[\n {\"content\": 5}\n]"),
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "todoctl: todos[0].content: expected a string, found a number\n"
    );
    let out = run(&d.addr, &["write", "-p", "p"], Some(b"{\"todos\": [\xff]}")).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("todoctl: stdin: invalid UTF-8 at byte 11"),
        "{}",
        text(&out.stderr)
    );
    assert!(d.seen.lock().expect("lock").calls.is_empty());

    let input = br#"{"todos": [{"content": "a", "status": "in_progress", "activeForm": "A-ing", "dependsOn": ["t1"]}]}"#;
    let out = run(
        &d.addr,
        &["--json", "write", "-p", "p", "--reason", "sync"],
        Some(input),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["created"], serde_json::json!(["t10"]));
    let written = d.seen.lock().expect("lock").written.clone();
    assert_eq!(written[0].depends_on, ["t1"]);
    assert_eq!(written[0].status, "in_progress");
}

#[tokio::test]
async fn graph_tree_and_dot() {
    let d = start(true, None).await;
    let out = run(&d.addr, &["graph", "-p", "p"], None).await;
    let expected = "\
[x] t1 do t1
|-- [~] t2 do t2
|   `-- [ ] t3 do t3
`-- [ ] t3 do t3 (see above)
[!] t4 do t4
`-- [ ] t5 do t5
";
    assert_eq!(text(&out.stdout), expected);
    let out = run(&d.addr, &["graph", "-p", "p", "--dot"], None).await;
    assert!(text(&out.stdout).contains("  \"t4\" -> \"t5\";\n"));
}

#[tokio::test]
async fn watch_resumes_from_the_last_seq_after_a_break() {
    let d = start(true, None).await;
    let mut cmd = todoctl(&d.addr, &["--json", "watch", "-p", "p", "--after", "10"]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seqs = Vec::new();
    while seqs.len() < 5 {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("in time")
            .expect("read")
            .expect("a line");
        let v: serde_json::Value = serde_json::from_str(&line).expect("one JSON object per line");
        seqs.push(v["seq"].as_i64().expect("seq"));
    }
    assert_eq!(seqs, [11, 12, 13, 14, 15]);
    assert_eq!(d.seen.lock().expect("lock").watch_after, [10, 13]);
    let pid = child.id().expect("pid").to_string();
    let kill = tokio::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .await
        .expect("kill");
    assert!(kill.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits")
        .expect("status");
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn servers_lists_each_server_with_its_state_restarts_and_last_exit() {
    let d = start(false, Some("s3cret")).await;
    let out = run(&d.addr, &["--token", "s3cret", "servers"], None).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("NAME   STATE  PID   URL"), "{stdout}");
    assert!(
        lines[1].starts_with("local  ready  4242  http://127.0.0.1:41237/v1  5m12s"),
        "{stdout}"
    );
    assert!(lines[1].ends_with("3         t3"), "{stdout}");
    assert_eq!(
        lines[2],
        "local (local-0123456789ab): last exit: killed by signal 9 (SIGKILL); its log ends:"
    );
    let out = run(&d.addr, &["--token", "s3cret", "--json", "servers"], None).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["servers"][0]["restarts"], 3);
    assert_eq!(
        json["servers"][0]["last_exit"],
        "killed by signal 9 (SIGKILL); its log ends:\nthe end"
    );
}
