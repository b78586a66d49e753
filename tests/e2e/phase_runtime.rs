//! The phase runtime under the ways runs end badly: paused and cancelled and
//! started again at random while running, a run that panics, a disk that
//! fills up, a dead endpoint, failures under and over the limit, and retries
//! that send exactly the failed prompts again.
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use todod::server::Options;
use todod_e2e::gen::{self, assert_result_matches, prompt_texts, write_prompts, written};
use todod_e2e::lossy_fs::LossyFs;
use todod_e2e::mock_openai::{MockOpenAi, Settings};
use todod_e2e::rng::TestRng;
use todod_e2e::{
    create_generation, proto, transition, wait_task, Client, ClosedPort, RealDaemon, TestDaemon,
};

fn finished(t: &proto::Task) -> bool {
    t.status == "completed" || t.status == "failed"
}

async fn get(c: &mut Client, id: &str) -> proto::Task {
    c.get_task(proto::GetTaskRequest { id: id.into() })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_cancelling_and_starting_at_random_loses_and_repeats_nothing() {
    const PROMPTS: usize = 2_000;
    const TOGGLES: usize = 100;
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(20),
        keep_bodies: false,
        ..Settings::default()
    })
    .await;
    let state = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    write_prompts(&data.path().join("prompts.jsonl"), PROMPTS, false);
    let daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let mut rng = TestRng::new("pausing_cancelling_and_starting_at_random");
    let id = create_generation(
        &mut c,
        "p",
        gen::spec(data.path(), &mock.url, 8).to_string(),
    )
    .await;
    let mut toggles = 0;
    while toggles < TOGGLES {
        tokio::time::sleep(Duration::from_millis(rng.below(40))).await;
        let now = get(&mut c, &id).await;
        if finished(&now) {
            break;
        }
        // Pause (the task waits for a start), or cancel and start again.
        let sequence: &[&str] = if rng.chance(0.5) {
            &["pending", "in_progress"]
        } else {
            &["cancelled", "in_progress"]
        };
        for to in sequence {
            if let Err(e) = c.transition_task(transition(&id, to)).await {
                // The run may have completed in between: then nothing moves.
                assert!(
                    finished(&get(&mut c, &id).await),
                    "{to}: {e} ({})",
                    rng.replay()
                );
                break;
            }
        }
        toggles += 1;
    }
    let task = wait_task(&mut c, "p", &id, finished).await;
    assert_eq!(
        task.status,
        "completed",
        "{} ({})",
        task.error,
        rng.replay()
    );
    let files = written(data.path(), &prompt_texts(PROMPTS));
    assert_eq!(files.ids.len(), PROMPTS, "{}", rng.replay());
    assert!(
        files.ids.values().all(|n| *n == 1),
        "a record twice after {toggles} toggles ({})",
        rng.replay()
    );
    assert_result_matches(
        &task,
        &files,
        &format!("{toggles} toggles ({})", rng.replay()),
    );
    println!(
        "{toggles} pause/cancel toggles; {} requests",
        mock.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_panics_fails_its_task_with_the_message() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let state = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    write_prompts(&data.path().join("prompts.jsonl"), 50, false);
    let daemon = RealDaemon::spawn_env(
        state.path(),
        &[],
        &[("TODOD_FAILPOINTS", "pipeline.write=panic@7")],
    );
    let mut c = daemon.client().await;
    let id = create_generation(
        &mut c,
        "p",
        gen::spec(data.path(), &mock.url, 2).to_string(),
    )
    .await;
    let task = wait_task(&mut c, "p", &id, finished).await;
    assert_eq!(task.status, "failed");
    assert!(task.error.contains("crashed"), "{}", task.error);
    assert!(
        task.error.contains("failpoint pipeline.write"),
        "{}",
        task.error
    );
    // The daemon itself goes on serving.
    c.list_plans(proto::ListPlansRequest::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_the_run_and_retry_after_freeing_space_loses_nothing() {
    // 40 records a second, a checkpoint a second: the disk fills after
    // some of them are committed, well before all 300 are written.
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(100),
        ..Settings::default()
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    write_prompts(&data.path().join("prompts.jsonl"), 300, false);
    let disk = LossyFs::new();
    disk.set_space(Some(30_000));
    let options = || Options {
        fs: Some(Arc::new(disk.clone())),
        ..Options::default()
    };
    let daemon = TestDaemon::start_with(options()).await;
    let mut c = daemon.client().await;
    let id = create_generation(
        &mut c,
        "p",
        gen::spec(data.path(), &mock.url, 4).to_string(),
    )
    .await;
    let task = wait_task(&mut c, "p", &id, finished).await;
    assert_eq!(task.status, "failed");
    assert!(task.error.contains("No space left"), "{}", task.error);
    let committed = task.progress.map_or(0, |p| p.done);
    assert!(
        committed > 0 && committed < 300,
        "{committed} records committed before the disk filled: nothing to resume from"
    );
    // What was committed is in the file (a torn line past it is cut).
    let path = data.path().join("out.jsonl");
    let lines = disk
        .read(&path)
        .unwrap()
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    assert!(
        lines >= committed as usize,
        "{committed} records committed, {lines} lines in the file"
    );

    disk.set_space(None);
    let before = mock.requests();
    c.transition_task(transition(&id, "pending")).await.unwrap();
    let task = wait_task(&mut c, "p", &id, finished).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    // The retry went on from the checkpoint: no committed prompt was asked
    // again (but for the failed run's last requests, at most 4, still on
    // their way to the server when it ended).
    assert!(
        mock.requests() - before <= 300 - committed as usize + 4,
        "{} requests on retry, {committed} of 300 were committed",
        mock.requests() - before
    );
    let out = String::from_utf8(disk.read(&path).unwrap()).unwrap();
    let mut ids: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids.len(), 300);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 300, "a record twice");
    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    assert_eq!(result["records"], 300);
    assert_eq!(task.progress.map_or(0, |p| p.done), 300);
    println!("{committed} records were committed before the disk filled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_endpoint_fails_the_generation_with_the_counts() {
    let dead = ClosedPort::new();
    let data = tempfile::tempdir().unwrap();
    write_prompts(&data.path().join("prompts.jsonl"), 12, false);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let mut spec = gen::spec(data.path(), &dead.url(), 4);
    spec["max_attempts"] = json!(1);
    let id = create_generation(&mut c, "p", spec.to_string()).await;
    // A task that waits for it must stay blocked.
    let after = c
        .create_task(proto::CreateTaskRequest {
            plan: "p".into(),
            content: "use the completions".into(),
            depends_on: vec![id.clone()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let task = wait_task(&mut c, "p", &id, finished).await;
    assert_eq!(task.status, "failed");
    assert!(
        task.error.contains("12 of 12 prompts failed"),
        "{}",
        task.error
    );
    assert!(task.error.contains("cannot connect"), "{}", task.error);
    let files = written(data.path(), &prompt_texts(12));
    assert_eq!((files.records, files.failed), (0, 12));
    let after = get(&mut c, &after.id).await;
    assert_eq!(after.readiness, "blocked_by_failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_sends_exactly_the_failed_prompts_again() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let data = tempfile::tempdir().unwrap();
    write_prompts(&data.path().join("prompts.jsonl"), 100, false);
    let refused: Vec<String> = [3, 41, 77]
        .iter()
        .map(|i| format!("question {i}"))
        .collect();
    mock.refuse(refused.clone());
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;

    // Under the limit (3% of 10%): completes, and says how many failed.
    let mut spec = gen::spec(data.path(), &mock.url, 4);
    spec["max_failed_share"] = json!(0.1);
    let id = create_generation(&mut c, "p", spec.to_string()).await;
    let task = wait_task(&mut c, "p", &id, finished).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let files = written(data.path(), &prompt_texts(100));
    assert_eq!((files.records, files.failed), (97, 3));
    assert_result_matches(&task, &files, "first pass");
    let failures = std::fs::read_to_string(data.path().join("out.jsonl.failures.jsonl")).unwrap();
    for line in failures.lines() {
        let f: Value = serde_json::from_str(line).unwrap();
        assert!(f["messages"].is_array(), "a failure keeps its prompt: {f}");
        assert!(f["line"].as_u64().is_some(), "and its line: {f}");
    }

    // Reopened, the task sends exactly the three failed prompts again.
    mock.refuse([]);
    let before = mock.requests();
    c.transition_task(transition(&id, "pending")).await.unwrap();
    let task = wait_task(&mut c, "p", &id, |t| {
        finished(t) && t.result_json.contains("\"passes\":2")
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let resent: Vec<String> = mock.inputs()[before..].to_vec();
    let mut sorted = resent.clone();
    sorted.sort();
    let mut want = refused.clone();
    want.sort();
    assert_eq!(sorted, want, "the retry sent {resent:?}");
    let files = written(data.path(), &prompt_texts(100));
    assert_eq!((files.records, files.failed), (100, 0));
    assert!(files.ids.values().all(|n| *n == 1));
    assert_result_matches(&task, &files, "after the retry pass");
    assert!(data
        .path()
        .join("out.jsonl.failures.jsonl.pass-0.jsonl")
        .exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_limit_fails_and_retry_finishes_the_job() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let data = tempfile::tempdir().unwrap();
    write_prompts(&data.path().join("prompts.jsonl"), 50, false);
    let refused: Vec<String> = (0..10).map(|i| format!("question {}", i * 5)).collect();
    mock.refuse(refused.clone());
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let id = create_generation(
        &mut c,
        "p",
        gen::spec(data.path(), &mock.url, 4).to_string(),
    )
    .await;
    let task = wait_task(&mut c, "p", &id, finished).await;
    assert_eq!(task.status, "failed");
    assert!(
        task.error.contains("10 of 50 prompts failed (20.0%"),
        "{}",
        task.error
    );
    mock.refuse([]);
    let before = mock.requests();
    c.transition_task(transition(&id, "pending")).await.unwrap();
    let task = wait_task(&mut c, "p", &id, |t| {
        finished(t) && t.result_json.contains("\"passes\":2")
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    assert_eq!(mock.requests() - before, 10);
    let files = written(data.path(), &prompt_texts(50));
    assert_eq!((files.records, files.failed), (50, 0));
    assert_result_matches(&task, &files, "after retry");
}

/// An archived plan's phase tasks are not run (nor resumed) until the plan
/// is restored: archiving stops the work, it does not just hide it. The
/// daemon starts on a store holding a ready generation in an archived plan;
/// while a generation of another plan runs to its end beside it, the
/// archived one stays pending and writes nothing; restored, it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_runs_no_phase_task_of_an_archived_plan() {
    use todod_domain::Kind;
    use todod_store::{Store, WriteContext};
    let mock = MockOpenAi::start(Settings::default()).await;
    let (shelved_data, live_data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for data in [&shelved_data, &live_data] {
        write_prompts(&data.path().join("prompts.jsonl"), 20, false);
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_for_test(dir.path()).await.unwrap();
    let ctx = WriteContext::default();
    store.create_plan("shelved", "", &ctx).await.unwrap();
    let spec = gen::spec(shelved_data.path(), &mock.url, 2).to_string();
    let task =
        todod_e2e::stored_phase_task(&store, "shelved", Kind::named("generation"), &spec).await;
    store.archive_plan("shelved", false, &ctx).await.unwrap();
    store.close().await;

    let daemon = TestDaemon::start_in(dir, Options::default()).await;
    let mut c = daemon.client().await;
    let live = create_generation(
        &mut c,
        "live",
        gen::spec(live_data.path(), &mock.url, 2).to_string(),
    )
    .await;
    let ran = wait_task(&mut c, "live", &live, finished).await;
    assert_eq!(ran.status, "completed", "{}", ran.error);
    // The daemon has looked for work since it started, and passed it over.
    let id = task.to_string();
    let shelved = get(&mut c, &id).await;
    assert_eq!(shelved.status, "pending", "a task of an archived plan ran");
    assert!(shelved.progress.is_none(), "{:?}", shelved.progress);
    assert!(
        !shelved_data.path().join("out.jsonl").exists(),
        "a task of an archived plan wrote its output"
    );

    c.restore_plan(proto::PlanChangeRequest {
        name: "shelved".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let ran = wait_task(&mut c, "shelved", &id, finished).await;
    assert_eq!(ran.status, "completed", "{}", ran.error);
    let files = written(shelved_data.path(), &prompt_texts(20));
    assert_result_matches(&ran, &files, "restored");
    daemon.stop().await;
}
