//! Sharded generations on one daemon: the shards run at once, each with its
//! own checkpoint and part files; the task completes once every shard has,
//! with its files put together from the parts and a manifest, and counts
//! that are the sum of its shards'. (Several daemons sharing the shards:
//! `several_daemons.rs`, on PostgreSQL.)
use std::time::Duration;

use serde_json::Value;
use todod_e2e::gen::{self, assert_parts_make_the_whole, assert_result_matches, prompt_texts};
use todod_e2e::mock_openai::{MockOpenAi, Settings};
use todod_e2e::rng::TestRng;
use todod_e2e::{
    assert_kill_floor, create_generation, kill_repeatedly, task_events, wait_task, RealDaemon,
    TestDaemon,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_generation_runs_its_shards_and_puts_their_parts_together() {
    const PROMPTS: usize = 300;
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(5),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    gen::write_prompts(&dir.path().join("prompts.jsonl"), PROMPTS, true);
    let mut spec = gen::spec(dir.path(), &mock.url, 6);
    spec["shards"] = 3.into();
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let id = create_generation(&mut c, "gen", spec.to_string()).await;
    let task = wait_task(&mut c, "gen", &id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let prompts = prompt_texts(PROMPTS);
    let parts = assert_parts_make_the_whole(dir.path(), &prompts, 3);
    let files = gen::written(dir.path(), &prompts);
    assert_eq!(files, parts, "the whole against its parts");
    assert_eq!(files.ids.len(), PROMPTS);
    assert!(files.ids.values().all(|n| *n == 1));
    assert_result_matches(&task, &files, "sharded");
    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    assert_eq!(result["shards"], 3);
    // Every shard took its share: line n is shard (n - 1) mod 3's.
    for index in 0..3 {
        let part = gen::written_part(dir.path(), &prompts, index);
        assert!(
            (95..=110).contains(&(part.records + part.rejected)),
            "shard {index}: {part:?}"
        );
    }
    assert_eq!(task_events(&mut c, &id, "shard_done").await.len(), 3);
    let progress = task.progress.unwrap();
    assert_eq!(progress.done as usize, PROMPTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_spec_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    gen::write_prompts(&dir.path().join("prompts.jsonl"), 3, false);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    for bad in [0, 65, -1] {
        let mut spec = gen::spec(dir.path(), "http://127.0.0.1:9", 4);
        spec["shards"] = bad.into();
        let refused = todod_e2e::create_phase(&mut c, "gen", "generation", &spec.to_string(), &[])
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{bad}");
        assert!(
            refused.message().contains("shards"),
            "{}",
            refused.message()
        );
    }
    // The CPU kinds that shard are held to the same range; a filter does
    // not shard, and says why.
    let input = dir.path().join("prompts.jsonl");
    let specs = [
        (
            "prompt_adaptation",
            serde_json::json!({"input": input, "output": dir.path().join("a.jsonl"), "shards": 65}),
        ),
        (
            "tokenization",
            serde_json::json!({"input": input, "output_prefix": dir.path().join("t"),
            "tokenizer": todod_e2e::fixtures::fixture("smollm2"), "shards": 0}),
        ),
        (
            "filter",
            serde_json::json!({"input": input, "output": dir.path().join("f.jsonl"), "shards": 2}),
        ),
    ];
    for (kind, spec) in specs {
        let refused = todod_e2e::create_phase(&mut c, "gen", kind, &spec.to_string(), &[])
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{kind}");
        assert!(
            refused.message().contains("spec.shards"),
            "{kind}: {}",
            refused.message()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_generation_survives_repeated_kill_9_with_every_record_once() {
    const PROMPTS: usize = 4000;
    const KILLS: usize = 10;
    const MIN_KILLS: usize = 4;
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(40),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    gen::write_prompts(&dir.path().join("prompts.jsonl"), PROMPTS, false);
    let mut rng = TestRng::new("a_sharded_generation_survives_repeated_kill_9");
    let mut spec = gen::spec(dir.path(), &mock.url, 9);
    spec["shards"] = 3.into();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create_generation(&mut c, "gen", spec.to_string()).await;
    let kills = kill_repeatedly(&mut daemon, state.path(), "gen", &id, KILLS, || {
        Duration::from_millis(rng.below(400))
    })
    .await;
    let kills = assert_kill_floor(&kills, MIN_KILLS, &rng.replay());
    let mut c = daemon.client().await;
    let task = wait_task(&mut c, "gen", &id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(
        task.status,
        "completed",
        "{} ({})",
        task.error,
        rng.replay()
    );
    let prompts = prompt_texts(PROMPTS);
    let parts = assert_parts_make_the_whole(dir.path(), &prompts, 3);
    let files = gen::written(dir.path(), &prompts);
    assert_eq!(files, parts);
    for i in 0..PROMPTS {
        assert_eq!(
            files.ids.get(&format!("p{i}")),
            Some(&1),
            "p{i} ({})",
            rng.replay()
        );
    }
    assert_result_matches(&task, &files, &format!("after {kills} kills"));
    println!("{kills} kills; {PROMPTS} records over 3 shards, each exactly once");
}

/// A shard refuses to take its share of a prompts file that is not the one
/// the other shards surveyed (appended to since): line n would not be the
/// same record in every shard. Eight shards on one daemon run four at a
/// time, so the last four survey after the append.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_refuses_a_prompts_file_changed_since_the_others_surveyed_it() {
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(40),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("prompts.jsonl");
    gen::write_prompts(&prompts, 2000, false);
    let mut spec = gen::spec(dir.path(), &mock.url, 8);
    spec["shards"] = 8.into();
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let id = create_generation(&mut c, "gen", spec.to_string()).await;
    wait_task(&mut c, "gen", &id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
            || t.progress.as_ref().is_some_and(|p| p.done > 0)
    })
    .await;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&prompts)
        .unwrap();
    std::io::Write::write_all(
        &mut file,
        b"{\"id\": \"late\", \"messages\": [{\"role\": \"user\", \"content\": \"late\"}]}\n",
    )
    .unwrap();
    drop(file);
    let task = wait_task(&mut c, "gen", &id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(task.status, "failed", "{task:?}");
    assert!(
        task.error.contains("is not the file shard") && task.error.contains("Restore it"),
        "{}",
        task.error
    );
}
