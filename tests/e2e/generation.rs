//! The generation phase end to end: the daemon runs it against the mock
//! server, writes every prompt exactly once, rejects bad lines, can be
//! cancelled and retried from its checkpoint, and survives SIGKILL.
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use todod_e2e::gen::{self, assert_result_matches, prompt_texts, write_prompts, written};
use todod_e2e::mock_openai::{Fault, MockOpenAi, Settings};
use todod_e2e::rng::TestRng;
use todod_e2e::{
    assert_kill_floor, create_generation, kill_repeatedly, proto, transition, wait_task, Client,
    RealDaemon, TestDaemon,
};

fn spec(dir: &Path, url: &str, concurrency: usize) -> String {
    gen::spec(dir, url, concurrency).to_string()
}

async fn create(c: &mut Client, spec: String) -> String {
    create_generation(c, "gen", spec).await
}

/// Follows the plan's events until `task` reaches one of `statuses`.
async fn wait_status(c: &mut Client, task: &str, statuses: &[&str]) -> proto::Task {
    wait_task(c, "gen", task, |t| statuses.contains(&t.status.as_str())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_writes_every_prompt_once_and_rejects_bad_lines() {
    let mock = MockOpenAi::start(Settings::default()).await;
    mock.push([
        Fault::Status {
            code: 503,
            retry_after: None,
        },
        Fault::CloseWithoutDone,
    ]);
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 40, true);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let id = create(&mut c, spec(dir.path(), &mock.url, 4)).await;
    let task = wait_status(&mut c, &id, &["completed", "failed"]).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    assert_eq!(result["records"], 40);
    assert_eq!(result["rejected"], 6);
    let files = written(dir.path(), &prompt_texts(40));
    assert_eq!(files.ids.len(), 40);
    assert!(files.ids.values().all(|n| *n == 1));
    assert_result_matches(&task, &files, "one run");
    let rejects = std::fs::read_to_string(dir.path().join("out.jsonl.rejects.jsonl")).unwrap();
    let reasons: Vec<String> = rejects
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["reason"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for words in [
        "blank",
        "not JSON",
        "messages",
        "duplicate id",
        "bytes",
        "UTF-8",
    ] {
        assert!(
            reasons.iter().any(|r| r.contains(words)),
            "{words}: {reasons:?}"
        );
    }
    // Rejected lines are counted apart: they are neither done nor expected.
    let progress = task.progress.unwrap();
    assert_eq!(
        (
            progress.done,
            progress.total,
            progress.failed,
            progress.rejected
        ),
        (40, 40, 0, 6)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_run_and_retry_continues_from_the_checkpoint() {
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(100),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 60, false);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let id = create(&mut c, spec(dir.path(), &mock.url, 2)).await;

    // Wait for the first checkpoint, then cancel.
    let mut events = c
        .watch_plan(proto::WatchPlanRequest {
            plan: "gen".into(),
            after_seq: 0,
            from_now: false,
        })
        .await
        .unwrap()
        .into_inner();
    loop {
        let e = events.next().await.unwrap().unwrap();
        if e.r#type == "progress" {
            break;
        }
    }
    c.transition_task(transition(&id, "cancelled"))
        .await
        .unwrap();
    let task = wait_status(&mut c, &id, &["cancelled"]).await;
    let done_at_cancel = task.progress.unwrap().done;
    assert!(done_at_cancel < 60, "cancelled too late to test anything");
    // Nothing runs while cancelled: past the requests in flight at the
    // cancel (at most the concurrency, 100 ms each), the mock hears nothing
    // more and the output file does not change, for as long as we care to
    // wait.
    let requests_at_cancel = mock.requests();
    let out = dir.path().join("out.jsonl");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let file_at_cancel = std::fs::read(&out).unwrap();
    // What the run committed is in the file (a line past it is redone).
    let lines_at_cancel = file_at_cancel.iter().filter(|&&b| b == b'\n').count();
    assert!(
        lines_at_cancel >= done_at_cancel as usize,
        "{done_at_cancel} records committed, {lines_at_cancel} lines in the file"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        mock.requests() <= requests_at_cancel + 2,
        "{} requests after the cancel",
        mock.requests() - requests_at_cancel
    );
    assert!(
        std::fs::read(&out).unwrap() == file_at_cancel,
        "written while cancelled: {} bytes, {} at the cancel",
        std::fs::metadata(&out).unwrap().len(),
        file_at_cancel.len()
    );
    let requests_at_cancel = mock.requests();
    let task = wait_status(&mut c, &id, &["cancelled"]).await;
    assert_eq!(
        task.progress.unwrap().done,
        done_at_cancel,
        "committed while cancelled"
    );

    c.transition_task(transition(&id, "pending")).await.unwrap(); // restore
    let task = wait_status(&mut c, &id, &["completed", "failed"]).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let files = written(dir.path(), &prompt_texts(60));
    assert_eq!(files.ids.len(), 60);
    assert!(files.ids.values().all(|n| *n == 1), "{files:?}");
    assert_result_matches(&task, &files, "after cancel and retry");
    // The retry did not start from zero: committed prompts were not asked again.
    assert!(
        mock.requests() - requests_at_cancel <= 60 - done_at_cancel as usize + 4,
        "{} requests after the cancel, {done_at_cancel} were done",
        mock.requests() - requests_at_cancel
    );
}

/// The torture test: the real daemon, killed with SIGKILL at random moments
/// inside the run (each after the run committed progress past the last
/// kill), restarted each time, with no client call to resume it. It kills
/// until the run has ended or the kills are done, and at least `MIN_KILLS`
/// must have landed mid-run; what it asserts is that every record is there
/// once and that the counts a user reads match the files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_survives_repeated_kill_9_with_every_record_once() {
    // About 200 records a second, a checkpoint a second, and each kill only
    // after the run committed past the last: a run of 25 s takes more kills
    // than the floor, however the moments fall.
    const PROMPTS: usize = 5000;
    const KILLS: usize = 20;
    const MIN_KILLS: usize = 8;
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(40),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), PROMPTS, false);
    let mut rng = TestRng::new("generation_survives_repeated_kill_9");

    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create(&mut c, spec(dir.path(), &mock.url, 8)).await;
    let kills = kill_repeatedly(&mut daemon, state.path(), "gen", &id, KILLS, || {
        Duration::from_millis(rng.below(400))
    })
    .await;
    let mut c = daemon.client().await;
    let kills = assert_kill_floor(&kills, MIN_KILLS, &rng.replay());
    let task = wait_status(&mut c, &id, &["completed", "failed"]).await;
    assert_eq!(
        task.status,
        "completed",
        "{} ({})",
        task.error,
        rng.replay()
    );
    let files = written(dir.path(), &prompt_texts(PROMPTS));
    for i in 0..PROMPTS {
        assert_eq!(
            files.ids.get(&format!("p{i}")),
            Some(&1),
            "p{i} ({}, {kills} kills)",
            rng.replay()
        );
    }
    assert_result_matches(
        &task,
        &files,
        &format!("after {kills} kills ({})", rng.replay()),
    );
    // Each restart resumed the run by itself, and said so in the history.
    let events = c
        .list_events(proto::ListEventsRequest {
            task_id: id.clone(),
            limit: 10_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    let resumed = events.iter().filter(|e| e.r#type == "resumed").count();
    assert!(
        resumed >= kills,
        "{resumed} resumed events after {kills} kills ({})",
        rng.replay()
    );
    assert!(events
        .iter()
        .all(|e| e.r#type != "resumed" || e.actor == "todod"));
    println!(
        "{kills} kills, {resumed} resumes, {PROMPTS} records, each exactly once; {} requests",
        mock.requests()
    );
}
