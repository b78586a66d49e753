//! What a client can make the daemon do, tried as a hostile or sloppy client
//! would: no file the daemon did not create is cut or written into, no
//! secret leaves but in the request header it was meant for, and a phase
//! task's outcome belongs to its run.
use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use todod_e2e::gen::{self, prompt_texts, write_prompts, written};
use todod_e2e::mock_openai::{MockOpenAi, Settings};
use todod_e2e::{
    create_generation, item, proto, read_readiness, snapshot, todod_command, transition, wait_task,
    write_request, Client, RealDaemon, Target,
};
use tonic::Code;

/// sha256 of every file under `dir` (recursively), by path.
fn checksums(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            let path = entry.path();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                // The shared-memory index is rewritten by readers; it holds
                // no data of its own.
                if path.extension().is_some_and(|e| e == "db-shm") || path.ends_with("todod.db-shm")
                {
                    continue;
                }
                let digest = Sha256::digest(std::fs::read(&path).unwrap());
                out.insert(path, todod_engine::phase::files::hex(&digest));
            }
        }
    }
    out
}

fn generation(plan: &str, spec: Value) -> proto::CreateTaskRequest {
    proto::CreateTaskRequest {
        plan: plan.into(),
        content: "generate".into(),
        kind: "generation".into(),
        spec_json: spec.to_string(),
        ..Default::default()
    }
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_that_are_not_the_tasks_own_are_refused_and_left_alone() {
    let state = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    c.write_todos(write_request("p", vec![item("", "a", "", "")]))
        .await
        .unwrap();
    let prompts = data.path().join("prompts.jsonl");
    write_prompts(&prompts, 3, false);
    let existing = data.path().join("earlier-results.jsonl");
    std::fs::write(&existing, "{\"id\": \"p0\", \"content\": \"keep me\"}\n").unwrap();
    let link = data.path().join("link.jsonl");
    std::os::unix::fs::symlink(&existing, &link).unwrap();
    let directory = data.path().join("a-directory");
    std::fs::create_dir(&directory).unwrap();
    let fifo = data.path().join("fifo");
    mkfifo(&fifo);
    let state_dir = state.path();
    let base = |output: &Path| {
        json!({
            "prompts": prompts, "output": output, "model": "m",
            "endpoints": ["http://127.0.0.1:1"], "auto_start": false,
        })
    };
    let with = |mut spec: Value, key: &str, value: Value| {
        spec[key] = value;
        spec
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, Value, Code, &str)> = vec![
        ("the daemon's database", base(&state_dir.join("todod.db")), Code::InvalidArgument, "state directory"),
        ("the database, with overwrite", with(base(&state_dir.join("todod.db")), "overwrite", json!(true)), Code::InvalidArgument, "state directory"),
        ("its WAL", with(base(&state_dir.join("todod.db-wal")), "overwrite", json!(true)), Code::InvalidArgument, "state directory"),
        ("its token", with(base(&state_dir.join("token")), "overwrite", json!(true)), Code::InvalidArgument, "state directory"),
        ("a new file in the state directory", base(&state_dir.join("new.jsonl")), Code::InvalidArgument, "state directory"),
        ("the state directory by ..", base(&data.path().join("..").join(state_dir.file_name().unwrap()).join("x")), Code::InvalidArgument, ". or .."),
        ("failures into the database", with(base(&data.path().join("o1")), "failures", json!(state_dir.join("todod.db"))), Code::InvalidArgument, "spec.failures"),
        ("rejects into the WAL", with(base(&data.path().join("o2")), "rejects", json!(state_dir.join("todod.db-wal"))), Code::InvalidArgument, "spec.rejects"),
        ("an existing file", base(&existing), Code::AlreadyExists, "earlier-results.jsonl already exists"),
        ("a symlink", with(base(&link), "overwrite", json!(true)), Code::InvalidArgument, "symbolic link"),
        ("a directory", with(base(&directory), "overwrite", json!(true)), Code::InvalidArgument, "not a regular file"),
        ("a FIFO", with(base(&fifo), "overwrite", json!(true)), Code::InvalidArgument, "not a regular file"),
        ("the prompts themselves", with(base(&prompts), "overwrite", json!(true)), Code::InvalidArgument, "is also the input"),
        ("the output twice", with(base(&data.path().join("o3")), "failures", json!(data.path().join("o3"))), Code::InvalidArgument, "is also spec.output"),
        ("a directory that is not there", base(&data.path().join("missing/out.jsonl")), Code::InvalidArgument, "cannot be used"),
    ];
    let before_files = (checksums(state.path()), checksums(data.path()));
    let before = snapshot(&mut c).await;
    for (name, spec, code, needle) in cases {
        let err = c
            .create_task(generation("p", spec))
            .await
            .expect_err(&format!("{name}: should be refused"));
        assert_eq!(err.code(), code, "{name}: {}", err.message());
        assert!(
            err.message().contains(needle),
            "{name}: {:?} should say {needle:?}",
            err.message()
        );
    }
    assert_eq!(snapshot(&mut c).await, before, "the store changed");
    assert_eq!(
        (checksums(state.path()), checksums(data.path())),
        before_files,
        "a file changed"
    );

    // Two tasks cannot share an output.
    let ok = base(&data.path().join("out.jsonl"));
    c.create_task(generation("p", ok.clone())).await.unwrap();
    let err = c.create_task(generation("p", ok)).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{}", err.message());
    assert!(
        err.message().contains("is written by task"),
        "{}",
        err.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_output_stops_the_resume_and_is_not_cut() {
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(25),
        ..Settings::default()
    })
    .await;
    let state = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    write_prompts(&data.path().join("prompts.jsonl"), 400, false);
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create_generation(
        &mut c,
        "p",
        gen::spec(data.path(), &mock.url, 2).to_string(),
    )
    .await;
    wait_task(&mut c, "p", &id, |t| {
        t.progress.as_ref().is_some_and(|p| p.done >= 10)
    })
    .await;
    daemon.kill9();
    // Someone puts another file of the same name in its place, longer than
    // what was committed.
    let out = data.path().join("out.jsonl");
    std::fs::remove_file(&out).unwrap();
    let other = "someone else's data\n".repeat(5_000);
    std::fs::write(&out, &other).unwrap();

    let daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let task = wait_task(&mut c, "p", &id, |t| t.status == "failed").await;
    assert!(
        task.error.contains("replaced by another file"),
        "{}",
        task.error
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        other,
        "the other file was touched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_its_run_completes_or_fails_a_phase_task() {
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(40),
        ..Settings::default()
    })
    .await;
    let state = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    write_prompts(&data.path().join("prompts.jsonl"), 200, false);
    let daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    c.write_todos(write_request("p", vec![item("", "a plain task", "", "")]))
        .await
        .unwrap();
    let id = create_generation(
        &mut c,
        "p",
        gen::spec(data.path(), &mock.url, 2).to_string(),
    )
    .await;
    let running = wait_task(&mut c, "p", &id, |t| {
        t.status == "in_progress" && t.progress.is_some()
    })
    .await;

    let plan_revision = |c: &mut Client| {
        let mut c = c.clone();
        async move {
            c.get_plan(proto::GetPlanRequest {
                name: "p".into(),
                highlight_limit: 0,
            })
            .await
            .unwrap()
            .into_inner()
            .plan
            .unwrap()
            .revision
        }
    };
    let revision = plan_revision(&mut c).await;
    for to in ["completed", "failed"] {
        let err = c.transition_task(transition(&id, to)).await.unwrap_err();
        assert_eq!(
            err.code(),
            Code::FailedPrecondition,
            "{to}: {}",
            err.message()
        );
        assert!(err.message().contains("only its run"), "{}", err.message());
        let read = c
            .read_todos(proto::ReadTodosRequest { plan: "p".into() })
            .await
            .unwrap()
            .into_inner();
        let mut items: Vec<proto::TodoItem> = read
            .todos
            .iter()
            .map(|t| item(&t.id, &t.content, &t.status, &t.priority))
            .collect();
        let phase = items.iter_mut().find(|i| i.id == id).unwrap();
        phase.status = to.into();
        let err = c
            .write_todos(write_request("p", items.clone()))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
        assert!(
            err.message().contains("may not change its status"),
            "{}",
            err.message()
        );
        let phase = items.iter_mut().find(|i| i.id == id).unwrap();
        phase.status = String::new();
        phase.content = "renamed by a list".into();
        let err = c.write_todos(write_request("p", items)).await.unwrap_err();
        assert!(
            err.message().contains("may not change its content"),
            "{}",
            err.message()
        );
    }
    assert_eq!(
        plan_revision(&mut c).await,
        revision,
        "a refused call changed the plan"
    );
    let spec_change = proto::UpdateTaskRequest {
        id: id.clone(),
        spec_json: Some(
            gen::spec(data.path(), &mock.url, 2)
                .as_object()
                .map(|o| {
                    let mut o = o.clone();
                    o.insert("model".into(), json!("another-model"));
                    Value::Object(o).to_string()
                })
                .unwrap(),
        ),
        ..Default::default()
    };
    let err = c.update_task(spec_change).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(err.message().contains("spec.model"), "{}", err.message());
    // A change that cannot affect the output is fine.
    let mut safe = gen::spec(data.path(), &mock.url, 2);
    safe["concurrency"] = json!(3);
    c.update_task(proto::UpdateTaskRequest {
        id: id.clone(),
        spec_json: Some(safe.to_string()),
        ..Default::default()
    })
    .await
    .unwrap();

    // Pausing and cancelling still work, and the run goes on after.
    let paused = c
        .transition_task(transition(&id, "pending"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(paused.status, "pending");
    c.transition_task(transition(&id, "in_progress"))
        .await
        .unwrap();
    c.transition_task(transition(&id, "cancelled"))
        .await
        .unwrap();
    c.transition_task(transition(&id, "in_progress"))
        .await
        .unwrap();
    let task = wait_task(&mut c, "p", &id, |t| {
        t.status == "completed" || t.status == "failed"
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let files = written(data.path(), &prompt_texts(200));
    assert_eq!(files.records, 200);
    assert!(files.ids.values().all(|n| *n == 1));
    assert!(running.started_at <= task.finished_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_goes_only_into_the_request_header() {
    const SECRET: &str = "sk-test-0f9e8d7c6b5a4-never-print-me";
    let mock = MockOpenAi::start(Settings::default()).await;
    let state = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    write_prompts(&data.path().join("prompts.jsonl"), 20, false);
    let log = data.path().join("todod.log");
    let mut command = todod_command(
        state.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--socket",
            "none",
            "--secret-env",
            "MY_INFERENCE_KEY",
        ],
    );
    command
        .env("RUST_LOG", "debug")
        .env("TODOD_SECRET_KEY", SECRET)
        .env("MY_INFERENCE_KEY", SECRET)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("TODOD_SECRET_BROKEN", "sk-abc\r\nX-Injected: 1")
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
    let mut child = command.spawn().unwrap();
    let addr = read_readiness(&mut BufReader::new(child.stdout.take().unwrap()));
    let token = std::fs::read_to_string(state.path().join("token")).unwrap();
    let target = Target {
        url: format!("http://{addr}"),
        token: Some(token.trim().to_string()),
    };
    let mut c = todod_e2e::connect(&target).await;
    c.write_todos(write_request("p", vec![])).await.unwrap();

    let spec = |key: &str, extra: Value| {
        let mut s = gen::spec(data.path(), &mock.url, 4);
        s["api_key_env"] = json!(key);
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let refused = [
        (
            "AWS_SECRET_ACCESS_KEY",
            json!({}),
            "not a variable this daemon exposes",
        ),
        ("PATH", json!({}), "not a variable this daemon exposes"),
        ("TODOD_SECRET_UNSET", json!({}), "not set"),
        ("TODOD_SECRET_BROKEN", json!({}), "control characters"),
        (
            "TODOD_SECRET_KEY",
            json!({"endpoints": ["http://10.1.2.3:8000"]}),
            "clear text",
        ),
    ];
    for (key, extra, needle) in refused {
        let err = c
            .create_task(generation("p", spec(key, extra)))
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Code::InvalidArgument,
            "{key}: {}",
            err.message()
        );
        assert!(err.message().contains(needle), "{key}: {}", err.message());
        assert!(!err.message().contains(SECRET));
    }
    // Over plain http off this machine, only when the spec says so.
    let mut ok = spec(
        "TODOD_SECRET_KEY",
        json!({"endpoints": ["http://10.1.2.3:8000"], "send_key_over_http": true, "auto_start": false}),
    );
    ok["output"] = json!(data.path().join("never.jsonl"));
    c.create_task(generation("p", ok)).await.unwrap();

    let id = c
        .create_task(generation("p", spec("MY_INFERENCE_KEY", json!({}))))
        .await
        .unwrap()
        .into_inner()
        .id;
    let task = wait_task(&mut c, "p", &id, |t| {
        t.status == "completed" || t.status == "failed"
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let sent = mock.authorizations();
    assert_eq!(sent.len(), 20);
    assert!(
        sent.iter().all(|a| a == &format!("Bearer {SECRET}")),
        "{sent:?}"
    );

    // Now look everywhere else: the views a person reads...
    let views: Vec<Vec<&str>> = vec![
        vec!["status"],
        vec!["--json", "status"],
        vec!["list", "-p", "p"],
        vec!["--json", "list", "-p", "p"],
        vec!["show", &id],
        vec!["--json", "show", &id],
        vec!["graph", "-p", "p"],
        vec!["read", "-p", "p"],
        vec!["plan", "list"],
    ];
    for view in views {
        let out = std::process::Command::new(todod_e2e::binary("todoctl"))
            .args(["--addr", &target.url])
            .args(&view)
            .env("TODOD_STATE_DIR", state.path())
            .env("HOME", "/nonexistent")
            .env_remove("TODOD_TOKEN")
            .output()
            .unwrap();
        assert!(out.status.success(), "{view:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains(SECRET), "{view:?} shows the key");
    }
    // ... the daemon's own files, its log at debug level, and the outputs.
    assert!(child.kill().is_ok());
    let _ = child.wait();
    for dir in [state.path(), data.path()] {
        for (path, _) in checksums(dir) {
            let bytes = std::fs::read(&path).unwrap();
            let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
            assert!(!found, "{} holds the key", path.display());
        }
    }
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains("DEBUG"), "the log ran at debug level");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_op_write_back_commits_nothing_with_a_phase_task_in_the_plan() {
    let daemon = todod_e2e::TestDaemon::start().await;
    let mut c = daemon.client().await;
    let data = tempfile::tempdir().unwrap();
    write_prompts(&data.path().join("prompts.jsonl"), 2, false);
    c.write_todos(write_request(
        "p",
        vec![item("", "a", "", ""), item("", "b", "", "")],
    ))
    .await
    .unwrap();
    let mut spec = gen::spec(data.path(), "http://127.0.0.1:1", 1);
    spec["auto_start"] = json!(false);
    c.create_task(generation("p", spec)).await.unwrap();
    // A list written after it: its new item lands next to the phase task.
    c.write_todos(write_request(
        "p",
        vec![
            item("t1", "a", "", ""),
            item("t2", "b", "", ""),
            item("", "c", "", ""),
        ],
    ))
    .await
    .unwrap();
    for _ in 0..3 {
        let read = c
            .read_todos(proto::ReadTodosRequest { plan: "p".into() })
            .await
            .unwrap()
            .into_inner();
        let events_before = c
            .list_events(proto::ListEventsRequest {
                plan: "p".into(),
                limit: 10_000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .events
            .len();
        let items = read
            .todos
            .iter()
            .map(|t| item(&t.id, &t.content, &t.status, &t.priority))
            .collect();
        let written = c
            .write_todos(write_request("p", items))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            written.plan.unwrap().revision,
            read.plan.clone().unwrap().revision
        );
        assert_eq!(written.todos, read.todos);
        let events_after = c
            .list_events(proto::ListEventsRequest {
                plan: "p".into(),
                limit: 10_000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .events
            .len();
        assert_eq!(events_after, events_before, "a no-op write recorded events");
    }
}

#[tokio::test]
async fn invalid_utf8_is_an_invalid_argument_that_names_the_field() {
    #[derive(Clone, PartialEq, prost::Message)]
    struct RawCreatePlan {
        #[prost(bytes = "vec", tag = "1")]
        name: Vec<u8>,
    }
    let daemon = todod_e2e::TestDaemon::start().await;
    let channel = tonic::transport::Channel::from_shared(daemon.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let err = grpc
        .unary::<RawCreatePlan, proto::Plan, _>(
            tonic::Request::new(RawCreatePlan {
                name: vec![b'p', 0xff, 0xfe],
            }),
            http::uri::PathAndQuery::from_static("/todod.v1.Todos/CreatePlan"),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(
        err.message().starts_with("name: invalid string"),
        "{}",
        err.message()
    );
}
