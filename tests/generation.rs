//! The generation phase end to end: the daemon runs it against the mock
//! server, writes every prompt exactly once, rejects bad lines, can be
//! cancelled and retried from its checkpoint, and survives SIGKILL.
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use todod_e2e::mock_openai::{expected_content, Fault, MockOpenAi, Settings};
use todod_e2e::{create_generation, proto, transition, wait_task, Client, RealDaemon, TestDaemon};

fn write_prompts(path: &Path, n: usize, bad_lines: bool) {
    let mut text = String::new();
    for i in 0..n {
        let line = json!({"id": format!("p{i}"), "messages": [{"role": "user", "content": format!("question {i}")}]});
        text.push_str(&format!("{line}\n"));
        if bad_lines && i == n / 2 {
            text.push('\n'); // blank
            text.push_str("not json\n");
            text.push_str("{\"id\": \"w\", \"messages\": \"hello\"}\n");
            text.push_str(
                "{\"id\": \"p0\", \"messages\": [{\"role\": \"user\", \"content\": \"dup\"}]}\n",
            );
            text.push_str(&format!(
                "{{\"id\": \"big\", \"prompt\": \"{}\"}}\n",
                "x".repeat(2 << 20)
            ));
        }
    }
    let mut bytes = text.into_bytes();
    if bad_lines {
        bytes.extend_from_slice(b"{\"id\": \"\xff\xfe\"}\n");
    }
    std::fs::write(path, bytes).unwrap();
}

fn spec(dir: &Path, url: &str, concurrency: usize) -> String {
    json!({
        "prompts": dir.join("prompts.jsonl"),
        "output": dir.join("out.jsonl"),
        "endpoints": [url],
        "model": "mock-model",
        "params": {"temperature": 0.0},
        "max_tokens": 32,
        "concurrency": concurrency,
        "max_attempts": 3,
    })
    .to_string()
}

async fn create(c: &mut Client, spec: String) -> String {
    create_generation(c, "gen", spec).await
}

/// Follows the plan's events until `task` reaches one of `statuses`.
async fn wait_status(c: &mut Client, task: &str, statuses: &[&str]) -> proto::Task {
    wait_task(c, "gen", task, |t| statuses.contains(&t.status.as_str())).await
}

/// Ids in the output and failures files, with how often each appears; every
/// line must be JSON, and every output record the mock's answer.
fn written(dir: &Path, prompts: &HashMap<String, String>) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for name in ["out.jsonl", "out.jsonl.failures.jsonl"] {
        let Ok(text) = std::fs::read_to_string(dir.join(name)) else {
            continue;
        };
        for line in text.lines() {
            let record: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: {line:?}: {e}"));
            let id = record["id"].as_str().unwrap().to_string();
            if name == "out.jsonl" {
                assert_eq!(record["content"], expected_content(&prompts[&id]), "{id}");
                assert_eq!(record["finish_reason"], "stop");
            }
            *seen.entry(id).or_default() += 1;
        }
    }
    seen
}

fn prompt_texts(n: usize) -> HashMap<String, String> {
    (0..n)
        .map(|i| (format!("p{i}"), format!("question {i}")))
        .collect()
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
    let seen = written(dir.path(), &prompt_texts(40));
    assert_eq!(seen.len(), 40);
    assert!(seen.values().all(|n| *n == 1));
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
    let requests_at_cancel = mock.requests();

    // Nothing runs while cancelled: the run stopped.
    c.transition_task(transition(&id, "pending")).await.unwrap(); // retry
    let task = wait_status(&mut c, &id, &["completed", "failed"]).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let seen = written(dir.path(), &prompt_texts(60));
    assert_eq!(seen.len(), 60);
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
    // The retry did not start from zero: committed prompts were not asked again.
    assert!(
        mock.requests() - requests_at_cancel <= 60 - done_at_cancel as usize + 4,
        "{} requests after the cancel, {done_at_cancel} were done",
        mock.requests() - requests_at_cancel
    );
}

/// The torture test: the real daemon, killed with SIGKILL at random moments,
/// restarted each time, with no client call to resume it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_survives_repeated_kill_9_with_every_record_once() {
    const PROMPTS: usize = 3000;
    const KILLS: usize = 20;
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(40),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), PROMPTS, false);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut rng = seed | 1;
    let mut random = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    println!("generation torture seed {seed}");

    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create(&mut c, spec(dir.path(), &mock.url, 8)).await;
    let mut kills = 0;
    while kills < KILLS {
        tokio::time::sleep(Duration::from_millis(100 + random(800))).await;
        daemon.kill9();
        kills += 1;
        daemon = RealDaemon::spawn(state.path());
        c = daemon.client().await;
        let now = c
            .get_task(proto::GetTaskRequest { id: id.clone() })
            .await
            .unwrap()
            .into_inner();
        if now.status == "completed" {
            break;
        }
    }
    let task = wait_status(&mut c, &id, &["completed", "failed"]).await;
    assert_eq!(task.status, "completed", "{} (seed {seed})", task.error);
    let seen = written(dir.path(), &prompt_texts(PROMPTS));
    for i in 0..PROMPTS {
        assert_eq!(
            seen.get(&format!("p{i}")),
            Some(&1),
            "p{i} (seed {seed}, {kills} kills)"
        );
    }
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
    assert!(resumed >= 1, "no resumed event (seed {seed})");
    assert!(events
        .iter()
        .all(|e| e.r#type != "resumed" || e.actor == "todod"));
    println!(
        "{kills} kills, {resumed} resumes, {PROMPTS} records, each exactly once; {} requests",
        mock.requests()
    );
    assert!(
        kills >= KILLS,
        "the run finished after only {kills} kills; make it longer"
    );
}
