//! `/metrics` read as Prometheus reads it (its own parser), against runs of
//! known size: the counters a scrape shows are the result's counts (after
//! kill -9 too: they restart from the checkpoint, not from zero), and the
//! request histograms counted every request the server saw.
use std::time::Duration;

use serde_json::Value;
use todod_e2e::gen::{self, prompt_texts, write_prompts, written};
use todod_e2e::mock_openai::{Fault, MockOpenAi, ServerMetrics, Settings};
use todod_e2e::scrape::{get, has, scrape, sum};
use todod_e2e::{create_generation, kill_while_running, until, wait_task, RealDaemon, TestDaemon};

fn result(task: &todod_e2e::proto::Task) -> Value {
    serde_json::from_str(&task.result_json).unwrap()
}

/// Follows `id`'s progress until the server figures it reports for
/// `endpoint` satisfy `ready`; returns them.
async fn server_figures_when(
    c: &mut todod_e2e::Client,
    id: &str,
    endpoint: &str,
    ready: fn(&Value) -> Option<bool>,
) -> Value {
    until(
        c,
        "gen",
        "the server's figures in the progress",
        async |c| {
            let task = c
                .get_task(todod_e2e::proto::GetTaskRequest { id: id.into() })
                .await
                .ok()?
                .into_inner();
            let detail: Value =
                serde_json::from_str(&task.progress.unwrap_or_default().detail_json).ok()?;
            let figures = detail["server"][endpoint].clone();
            ready(&figures)?.then_some(figures)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_counts_what_the_run_wrote_and_every_request_it_made() {
    const PROMPTS: usize = 300;
    let mock = MockOpenAi::start(Settings::default()).await;
    // One answer refused and retried, one stream cut short and retried.
    mock.push([
        Fault::Status {
            code: 503,
            retry_after: None,
        },
        Fault::CloseWithoutDone,
    ]);
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), PROMPTS, true);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let id = create_generation(
        &mut c,
        "gen",
        gen::spec(dir.path(), &mock.url, 4).to_string(),
    )
    .await;
    let task = wait_task(&mut c, "gen", &id, |t| t.status == "completed").await;
    let result = result(&task);
    let files = written(dir.path(), &prompt_texts(PROMPTS));

    let s = scrape(daemon.addr).await;
    let this = [("task", id.as_str()), ("kind", "generation")];
    let records = |outcome: &str| {
        sum(
            &s,
            "todod_phase_records_total",
            &[this[0], this[1], ("outcome", outcome)],
        )
    };
    assert_eq!(records("written"), files.records as f64);
    assert_eq!(records("failed"), files.failed as f64);
    assert_eq!(records("rejected"), files.rejected as f64);
    assert!(files.rejected > 0, "the bad lines were rejected");
    assert_eq!(
        sum(&s, "todod_phase_output_tokens_total", &this),
        result["tokens"].as_f64().unwrap()
    );
    assert_eq!(
        sum(&s, "todod_phase_input_tokens_total", &this),
        result["prompt_tokens"].as_f64().unwrap()
    );
    // Every request the server saw was counted once, by how it ended, and
    // timed once.
    let requests = mock.requests() as f64;
    assert_eq!(sum(&s, "todod_requests_total", &this), requests);
    assert_eq!(
        sum(&s, "todod_request_duration_seconds_count", &this),
        requests
    );
    assert_eq!(
        sum(
            &s,
            "todod_requests_total",
            &[this[0], ("outcome", "server_error")]
        ),
        1.0
    );
    assert_eq!(
        sum(
            &s,
            "todod_requests_total",
            &[this[0], ("outcome", "incomplete")]
        ),
        1.0
    );
    assert_eq!(sum(&s, "todod_request_retries_total", &this), 2.0);
    assert_eq!(sum(&s, "todod_requests_in_flight", &this), 0.0);
    assert!(sum(&s, "todod_checkpoint_commit_seconds_count", &this) >= 1.0);
    // Each record the files hold (an answer or a failure) waited for its
    // commit once; rejected lines are not answers.
    assert_eq!(
        sum(&s, "todod_record_commit_delay_seconds_count", &this),
        (files.records + files.failed) as f64
    );
    assert_eq!(
        sum(
            &s,
            "todod_tasks",
            &[
                ("plan", "gen"),
                ("kind", "generation"),
                ("status", "completed")
            ]
        ),
        1.0
    );
    assert!(sum(&s, "todod_store_write_seconds_count", &[]) > 0.0);
    assert!(sum(&s, "process_resident_memory_bytes", &[]) > 0.0);
    assert!(sum(&s, "process_open_fds", &[]) > 0.0);
    // No prompt id ever becomes a label.
    assert!(!s
        .iter()
        .any(|sample| sample.labels.values().any(|v| v.as_str() == Some("p0"))));
    // The server has no /metrics of its own: nothing made up for it.
    assert!(!has(&s, "todod_server_requests_running"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_restart_from_the_checkpoint_after_kill_9() {
    const PROMPTS: usize = 2500;
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(40),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), PROMPTS, false);
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create_generation(
        &mut c,
        "gen",
        gen::spec(dir.path(), &mock.url, 8).to_string(),
    )
    .await;
    let this = [("task", id.as_str()), ("kind", "generation")];
    let mut kills = Vec::new();
    for _ in 0..3 {
        let Some(kill) = kill_while_running(
            &mut daemon,
            state.path(),
            "gen",
            &id,
            kills.last(),
            Duration::from_millis(150),
        )
        .await
        else {
            break;
        };
        // The daemon after the kill shows at least what was committed
        // before it: its counters start from the checkpoint.
        let s = scrape(daemon.addr).await;
        let written = sum(
            &s,
            "todod_phase_records_total",
            &[this[0], ("outcome", "written")],
        );
        assert!(
            written >= kill.done as f64,
            "after a kill at {} done, a scrape says {written}",
            kill.done
        );
        kills.push(kill);
    }
    assert!(!kills.is_empty(), "no kill landed inside the run");
    let mut c = daemon.client().await;
    let task = wait_task(&mut c, "gen", &id, |t| t.status == "completed").await;
    let files = written(dir.path(), &prompt_texts(PROMPTS));
    let result = result(&task);
    assert_eq!(result["records"], files.records);
    let s = scrape(daemon.addr).await;
    let records = |outcome: &str| {
        sum(
            &s,
            "todod_phase_records_total",
            &[this[0], this[1], ("outcome", outcome)],
        )
    };
    assert_eq!(
        records("written"),
        files.records as f64,
        "{} kills",
        kills.len()
    );
    assert_eq!(records("failed"), files.failed as f64);
    assert_eq!(
        sum(&s, "todod_phase_output_tokens_total", &this),
        files.tokens as f64
    );
    // The input tokens too, as the records that were kept say them.
    let prompt_tokens: u64 = std::fs::read_to_string(dir.path().join("out.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let record: Value = serde_json::from_str(l).unwrap();
            record["usage"]["prompt_tokens"].as_u64().unwrap()
        })
        .sum();
    assert!(prompt_tokens > 0);
    assert_eq!(result["prompt_tokens"], prompt_tokens);
    assert_eq!(
        sum(&s, "todod_phase_input_tokens_total", &this),
        prompt_tokens as f64
    );
    println!(
        "{} kills at {:?} done; the last scrape: {} written",
        kills.len(),
        kills.iter().map(|k| k.done).collect::<Vec<_>>(),
        records("written")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_token_off_loopback() {
    const TOKEN: &str = "metrics-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let store = todod_store::Store::open_for_test(dir.path()).await.unwrap();
    // Every address of the machine: not loopback, even when reached by it.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = todod::server::Options {
        token: Some(TOKEN.into()),
        ..Default::default()
    };
    let mut bounds = options.bounds.clone();
    bounds.state_dir = Some(std::fs::canonicalize(dir.path()).unwrap());
    let options = todod::server::Options { bounds, ..options };
    let server = tokio::spawn(todod::server::run(
        store,
        todod::server::Listeners {
            tcp: Some(listener),
            unix: None,
        },
        options,
        async {
            let _ = stopped.await;
        },
    ));
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let (status, body) = get(addr, "/metrics", None).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("token"), "{body}");
    let (status, _) = get(addr, "/metrics", Some("wrong-token-0123456789")).await;
    assert_eq!(status, 401);
    let (status, body) = get(addr, "/metrics", Some(TOKEN)).await;
    assert_eq!(status, 200);
    assert!(!todod_e2e::scrape::parse(&body).is_empty());
    let (status, _) = get(addr, "/nothing", Some(TOKEN)).await;
    assert_eq!(status, 404);
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

/// A generation against a server with vLLM's `/metrics`: its running and
/// queued requests reach the progress and the daemon's own `/metrics`,
/// under todod's names, while the run goes; gone once it has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_own_figures_reach_progress_and_metrics() {
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(100),
        capacity: 2,
        metrics: ServerMetrics::Vllm,
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 400, false);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let id = create_generation(
        &mut c,
        "gen",
        gen::spec(dir.path(), &mock.url, 6).to_string(),
    )
    .await;
    // Six sent at once to a server that runs two: four queue there.
    let server = server_figures_when(&mut c, &id, &mock.url, |f| {
        Some(f["waiting"].as_f64()? > 0.0)
    })
    .await;
    assert_eq!(server["running"], 2.0, "{server}");
    // Between one answer and the next request, five may be in flight.
    let waiting = server["waiting"].as_f64().unwrap();
    assert!((1.0..=4.0).contains(&waiting), "{server}");
    assert_eq!(server["kv_cache_usage"], 0.6, "{server}");
    let s = scrape(daemon.addr).await;
    let endpoint = [("endpoint", mock.url.as_str())];
    assert_eq!(sum(&s, "todod_server_requests_running", &endpoint), 2.0);
    assert_eq!(sum(&s, "todod_server_kv_cache_usage_ratio", &endpoint), 0.6);
    assert!(
        sum(
            &s,
            "todod_server_metrics_scrapes_total",
            &[endpoint[0], ("outcome", "ok")]
        ) >= 1.0
    );
    wait_task(&mut c, "gen", &id, |t| t.status == "completed").await;
    let s = scrape(daemon.addr).await;
    assert!(
        !has(&s, "todod_server_requests_running"),
        "no run watches the server now"
    );
    assert!(mock.metrics_scrapes() >= 1);
}

/// A server without `/metrics`, and one whose `/metrics` is not the
/// format: the run goes on as before, nothing is made up, and the daemon
/// says how its scrapes went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_or_malformed_server_metrics_are_tolerated() {
    for shape in [ServerMetrics::Absent, ServerMetrics::Garbage] {
        let mock = MockOpenAi::start(Settings {
            metrics: shape,
            ..Settings::default()
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        write_prompts(&dir.path().join("prompts.jsonl"), 200, false);
        let daemon = TestDaemon::start().await;
        let mut c = daemon.client().await;
        let id = create_generation(
            &mut c,
            "gen",
            gen::spec(dir.path(), &mock.url, 4).to_string(),
        )
        .await;
        let task = wait_task(&mut c, "gen", &id, |t| t.status == "completed").await;
        assert_eq!(result(&task)["records"], 200, "{shape:?}");
        let detail: Value =
            serde_json::from_str(&task.progress.unwrap_or_default().detail_json).unwrap();
        assert!(detail.get("server").is_none(), "{shape:?}: {detail}");
        assert!(mock.metrics_scrapes() >= 1, "{shape:?}: the daemon looked");
        let s = scrape(daemon.addr).await;
        assert_eq!(
            sum(
                &s,
                "todod_server_metrics_scrapes_total",
                &[("endpoint", mock.url.as_str()), ("outcome", "absent")]
            ),
            mock.metrics_scrapes() as f64,
            "{shape:?}"
        );
        assert!(!has(&s, "todod_server_requests_running"), "{shape:?}");
    }
}

/// llama.cpp's server started with `--metrics` (as `scripts/local-backend`
/// starts it): its own figures reach the run's progress and `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_servers_own_metrics_are_read_during_a_real_run() {
    let server = todod_e2e::llama_server::LlamaServer::start();
    let dir = tempfile::tempdir().unwrap();
    // 48 prompts of 32 tokens, 8 at a time: about 15 s on two cores alone,
    // 40 s beside the other tests, against a scrape every 5 s (120 took
    // 116 s of the suite beside them, on the two cores every test shares).
    write_prompts(&dir.path().join("prompts.jsonl"), 48, false);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let id = create_generation(
        &mut c,
        "gen",
        gen::spec(dir.path(), &server.url, 8).to_string(),
    )
    .await;
    let seen = server_figures_when(&mut c, &id, &server.url, |f| {
        Some(f["running"].as_f64()? >= 1.0)
    })
    .await;
    assert!(seen["running"].as_f64().unwrap() <= 8.0, "{seen}");
    assert!(seen["waiting"].is_number(), "{seen}");
    let s = scrape(daemon.addr).await;
    let endpoint = [("endpoint", server.url.as_str())];
    assert!(has(&s, "todod_server_requests_running"), "{s:?}");
    assert!(
        sum(
            &s,
            "todod_server_metrics_scrapes_total",
            &[endpoint[0], ("outcome", "ok")]
        ) >= 1.0
    );
    let task = wait_task(&mut c, "gen", &id, |t| t.status == "completed").await;
    assert_eq!(result(&task)["records"], 48, "{}", task.error);
}

/// A run against a server that fails one request in ten: while it runs,
/// `todoctl status --json`, its screen and the status page show the
/// requests retried and failed by class over the last minute and the run;
/// once it ended, the result's counts are what the server counted, and the
/// history says once that the share failing passed the warning share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_by_class_are_shown_where_people_look_as_the_server_counted_them() {
    use todod_e2e::cli::todoctl_at;
    use todod_e2e::{connect, proto, Target};
    const PROMPTS: usize = 600;
    const TOKEN: &str = "retries-token-0123456789abcdef";
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(10),
        capacity: 4,
        keep_bodies: false,
        ..Settings::default()
    })
    .await;
    // Every tenth of the first 400 requests fails, four classes in turn.
    let classes = [
        (
            Fault::Status {
                code: 500,
                retry_after: None,
            },
            "server_error",
        ),
        (
            Fault::Status {
                code: 429,
                retry_after: None,
            },
            "rate_limited",
        ),
        (Fault::CloseWithoutDone, "incomplete"),
        (Fault::InvalidJson, "malformed"),
    ];
    let mut faults = Vec::new();
    let mut expected = std::collections::BTreeMap::<String, u64>::new();
    for i in 0..40 {
        faults.extend(std::iter::repeat_n(Fault::Ok, 9));
        let (fault, class) = &classes[i % classes.len()];
        faults.push(fault.clone());
        *expected.entry(class.to_string()).or_default() += 1;
    }
    mock.push(faults);
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), PROMPTS, true);
    let daemon = TestDaemon::start_with(todod::server::Options {
        token: Some(TOKEN.into()),
        ..Default::default()
    })
    .await;
    let mut c = connect(Target {
        url: daemon.url(),
        token: Some(TOKEN.into()),
    })
    .await;
    let mut spec = gen::spec(dir.path(), &mock.url, 4);
    spec["stream"] = true.into();
    // Retries enough that no prompt fails for good on faults alone.
    spec["max_attempts"] = 8.into();
    let id = create_generation(&mut c, "gen", spec.to_string()).await;
    let status_json = || {
        let run = todoctl_at(&daemon.url(), Some(TOKEN))
            .args(["--json", "status", "gen"])
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let value: Value = serde_json::from_slice(&run.stdout).unwrap();
        value["phases"][0].clone()
    };

    // Some faults seen: the server then takes nothing more, and the run
    // stands still at its last progress report.
    wait_task(&mut c, "gen", &id, |t| {
        let detail = t
            .progress
            .as_ref()
            .map(|p| p.detail_json.as_str())
            .unwrap_or("");
        todod_proto::results::ProgressCounts::parse(detail)
            .and_then(|p| p.requests)
            .is_some_and(|r| r.run.errored() >= 8)
    })
    .await;
    mock.set_capacity(0).await;
    // Answers that came before are committed within a checkpoint's time:
    // what is read is taken once the report stood still across the reads.
    let mut reads = 0;
    let (figures, screen, page) = loop {
        let before = status_json();
        let screen = todoctl_at(&daemon.url(), Some(TOKEN))
            .args(["status", "gen"])
            .output()
            .unwrap();
        let (status, page) = get(daemon.addr, "/plans/gen", Some(TOKEN)).await;
        assert_eq!(status, 200);
        let after = status_json();
        if before == after {
            assert_eq!(after["status"], "in_progress");
            let figures: todod_proto::results::RequestFigures =
                serde_json::from_value(after["progress"]["detail"]["requests"].clone()).unwrap();
            break (figures, String::from_utf8(screen.stdout).unwrap(), page);
        }
        reads += 1;
        assert!(reads < 100, "the progress report never stood still");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(figures.run.errored() >= 8, "{figures:?}");
    assert_eq!(
        figures.run.retried,
        figures.run.errored(),
        "every fault was retried"
    );
    assert!(
        figures.last_minute.sent > 0 && figures.window_seconds > 0.0,
        "{figures:?}"
    );
    let window = todod_proto::readable::duration(figures.window_seconds.round() as i64);
    assert!(
        screen.contains(&format!(
            "requests in the last {window}: {}",
            figures.last_minute.describe()
        )),
        "{screen}"
    );
    for shown in [
        format!("last {window}: {}", figures.last_minute.describe()),
        format!("the run: {}", figures.run.describe()),
    ] {
        assert!(page.contains(&shown), "{shown} not on the page:\n{page}");
    }

    // The run ends; its counts are the server's.
    mock.set_capacity(4).await;
    let task = wait_task(&mut c, "gen", &id, |t| t.status == "completed").await;
    let files = written(dir.path(), &prompt_texts(PROMPTS));
    assert_eq!((files.records, files.failed), (PROMPTS as u64, 0));
    let result: todod_proto::results::GenerationResult =
        todod_proto::results::parse(&task.result_json).unwrap();
    let counted = result.requests.expect("the result counts its requests");
    assert_eq!(
        counted.sent,
        mock.requests() as u64,
        "sent, as the server counted"
    );
    assert_eq!(
        counted.errors, expected,
        "failed by class, as the server was told to fail"
    );
    assert_eq!(counted.retried, 40);
    let phase = status_json();
    let last: todod_proto::results::RequestFigures =
        serde_json::from_value(phase["progress"]["detail"]["requests"].clone()).unwrap();
    assert_eq!(
        last.run, counted,
        "the last progress report and the result agree"
    );
    let (_, page) = get(daemon.addr, "/plans/gen", Some(TOKEN)).await;
    assert!(
        page.contains(&format!("requests: {}", counted.describe())),
        "{page}"
    );
    // /metrics counted the same.
    let s = scrape(daemon.addr).await;
    let this = [("task", id.as_str()), ("kind", "generation")];
    assert_eq!(sum(&s, "todod_request_retries_total", &this), 40.0);
    assert_eq!(
        sum(&s, "todod_requests_total", &this),
        mock.requests() as f64
    );

    // The history says it once.
    let events = c
        .list_events(proto::ListEventsRequest {
            plan: "gen".into(),
            task_id: id.clone(),
            limit: 10_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    let warned: Vec<_> = events.iter().filter(|e| e.r#type == "errors").collect();
    assert_eq!(warned.len(), 1, "{events:?}");
}
