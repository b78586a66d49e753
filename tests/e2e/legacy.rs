//! A generation that todod 0.1 was running when it was upgraded: its
//! checkpoint (file lengths and the ids written) is taken over by the phase
//! runtime without losing or repeating a record; its failures, which did not
//! keep their prompts, are sent again.
use std::time::Duration;

use serde_json::json;
use todod_e2e::gen::{self, assert_result_matches, prompt_texts, write_prompts, written};
use todod_e2e::mock_openai::{expected_content, MockOpenAi, Settings};
use todod_e2e::{abandoned_generation, wait_task, RealDaemon};
use todod_store::{Store, WriteContext};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_of_an_earlier_todod_is_taken_over() {
    if todod_e2e::sqlite_only("the earlier todod wrote SQLite files") {
        return;
    }
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(1),
        ..Settings::default()
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_prompts(&data.path().join("prompts.jsonl"), 300, false);
    // What todod 0.1 left: 100 records, 10 failures, then a torn record
    // appended after the last commit.
    let mut out = String::new();
    for i in 0..100 {
        let record = json!({"id": format!("p{i}"), "content": expected_content(&format!("question {i}")),
            "reasoning": null, "finish_reason": "stop",
            "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6},
            "model": "mock-model", "endpoint": mock.url, "latency_ms": 3, "attempts": 1});
        out.push_str(&format!("{record}\n"));
    }
    let committed_out = out.len() as u64;
    out.push_str("{\"id\": \"p100\", \"content\": \"half a rec");
    let mut failures = String::new();
    for i in 100..110 {
        let f = json!({"id": format!("p{i}"), "error": "HTTP 503: busy", "attempts": 8,
            "endpoint": mock.url});
        failures.push_str(&format!("{f}\n"));
    }
    std::fs::write(data.path().join("out.jsonl"), &out).unwrap();
    std::fs::write(data.path().join("out.jsonl.failures.jsonl"), &failures).unwrap();
    std::fs::write(data.path().join("out.jsonl.rejects.jsonl"), "").unwrap();
    {
        let db = state.path().join("todod.db");
        let store = Store::open(&db).await.unwrap();
        let ctx = WriteContext::default();
        store.create_plan("p", "", &ctx).await.unwrap();
        let spec = gen::spec(data.path(), &mock.url, 4);
        let task = abandoned_generation(&store, "p", &spec, "old-run.1").await;
        store.close().await;
        // The old checkpoint tables, written as 0.1 wrote them.
        let pool = sqlx::SqlitePool::connect(&format!("sqlite:{}", db.display()))
            .await
            .unwrap();
        let offsets = json!([committed_out, failures.len(), 0]).to_string();
        sqlx::query(
            "INSERT INTO phase_checkpoints (task_id, offsets, updated_at) VALUES (?, ?, 0)",
        )
        .bind(task.0)
        .bind(offsets)
        .execute(&pool)
        .await
        .unwrap();
        for i in 0..110 {
            sqlx::query("INSERT INTO phase_records (task_id, record_id) VALUES (?, ?)")
                .bind(task.0)
                .bind(format!("p{i}"))
                .execute(&pool)
                .await
                .unwrap();
        }
        pool.close().await;
    }

    let daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let task = wait_task(&mut c, "p", "t1", |t| {
        t.status == "completed" || t.status == "failed"
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let files = written(data.path(), &prompt_texts(300));
    assert_eq!(files.ids.len(), 300);
    assert!(files.ids.values().all(|n| *n == 1), "{files:?}");
    assert_eq!((files.records, files.failed), (300, 0));
    assert_result_matches(&task, &files, "after taking over");
    // Only what was not written before was asked for: 200 new prompts and the
    // 10 failed ones.
    assert_eq!(mock.requests(), 200);
}
