//! The cluster benchmark's scenario, small enough for CI: one generation
//! over 64 endpoints of the fast mock, 8 requests in flight on each (512 in
//! all), 20,000 records streamed, with a kill -9 of the real daemon in the
//! middle. Behaviour, not speed (that is `cargo bench --bench cluster`'s):
//! every record exactly once with the answer its prompt gets, and the
//! requests spread within ±20 % of even over the endpoints.
use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use todod_e2e::fast_mock::{expected_content, FastMock, FastSettings};
use todod_e2e::gen::write_prompts;
use todod_e2e::{create_generation, kill_while_running, wait_task, RealDaemon};

const ENDPOINTS: usize = 64;
const PER_ENDPOINT: usize = 8;
const RECORDS: usize = 20_000;
const TOKENS: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_over_64_endpoints_is_exactly_once_and_even() {
    let mock = FastMock::start(
        ENDPOINTS,
        FastSettings {
            latency: Duration::from_millis(20),
            tokens: TOKENS,
            chunk: 3,
            tokens_per_second: 0.0,
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("prompts.jsonl");
    write_prompts(&prompts, RECORDS, false);
    let out = dir.path().join("out.jsonl");
    let spec = json!({
        "prompts": prompts, "output": out, "failures": dir.path().join("failures.jsonl"),
        "endpoints": mock.urls, "model": "mock-model", "max_tokens": TOKENS,
        "stream": true, "concurrency": ENDPOINTS * PER_ENDPOINT,
    });
    let state = tempfile::tempdir().unwrap();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create_generation(&mut c, "cluster", spec.to_string()).await;
    let kill = kill_while_running(
        &mut daemon,
        state.path(),
        "cluster",
        &id,
        None,
        Duration::from_millis(150),
    )
    .await;
    assert!(kill.is_some(), "the kill did not land inside the run");
    let mut c = daemon.client().await;
    let task = wait_task(&mut c, "cluster", &id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);

    // Every prompt once, with its own answer.
    let text = std::fs::read_to_string(&out).unwrap();
    let mut seen = BTreeSet::new();
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let id = r["id"].as_str().unwrap();
        assert!(seen.insert(id.to_string()), "{id} written twice");
        let question = r["messages"][0]["content"].as_str().unwrap();
        assert_eq!(
            r["content"].as_str().unwrap(),
            expected_content(question, TOKENS),
            "{id}"
        );
    }
    assert_eq!(seen.len(), RECORDS);
    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    assert_eq!(result["records"], RECORDS);
    assert_eq!(result["failed"], 0);

    // The requests spread over the endpoints as the picker means them to:
    // each within ±20 % of even (the requests the kill cut off included).
    let counts = mock.counts();
    let total: u64 = counts.iter().sum();
    assert!(total >= RECORDS as u64, "{total}");
    let even = total as f64 / ENDPOINTS as f64;
    for (i, n) in counts.iter().enumerate() {
        let off = (*n as f64 - even).abs() / even;
        assert!(
            off <= 0.2,
            "endpoint {i}: {n} of {total} ({:.0} % off even)",
            off * 100.0
        );
    }
    daemon.terminate();
}
