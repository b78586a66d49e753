//! The example plan (`examples/datagen.toml`) run sharded by three daemons
//! on one PostgreSQL database and one directory, as an operator would run
//! it on three machines: the adaptation, the generation and the
//! tokenization split into three shards each, a daemon killed (SIGKILL) in
//! the middle of the generation and another in the middle of the work
//! after it, each restarted. Every record comes out exactly once through
//! every phase, and the counts a user reads are what the files hold.
//! Without a server (`TODOD_TEST_DATABASE_URL`) it says so and stops.
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use todod_e2e::daemons::{daemon, daemon_index, done, poll, shard_holders, task};
use todod_e2e::fixtures::fixture;
use todod_e2e::mock_openai::{MockOpenAi, Settings};
use todod_e2e::rng::TestRng;
use todod_e2e::{ids, megatron, parquet_rows::read_parquet, proto, Client, RealDaemon};

/// The example plan as it is in the repository, pointed at `endpoint`,
/// `prompts` and `out` (its paths are relative to its own directory, which
/// a test cannot be in), with every phase that shards split in `shards`.
fn example_plan(endpoint: &str, prompts: &Path, out: &Path, shards: u32) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/datagen.toml"),
    )
    .unwrap();
    let replace = |text: String, from: &str, to: String| {
        assert!(text.contains(from), "the example no longer has {from:?}");
        text.replacen(from, &to, 1)
    };
    let text = replace(
        text,
        "output_dir = \"out/datagen\"",
        format!("output_dir = {:?}", out.display().to_string()),
    );
    let text = replace(
        text,
        "endpoints = [\"server:local\"]",
        format!("endpoints = [{endpoint:?}]"),
    );
    // The example's own server is the mock here: its [servers.local]
    // section goes.
    let start = text
        .find("\n[servers.local]\n")
        .expect("the example's server")
        + 1;
    let end = start
        + text[start..]
            .find("\n[sampling]")
            .expect("[sampling] after it");
    let text = format!("{}{}", &text[..start], &text[end + 1..]);
    let text = replace(
        text,
        "dir = \"../fixtures/smollm2\"",
        format!("dir = {:?}", fixture("smollm2").display().to_string()),
    );
    let text = replace(
        text,
        "path = \"../fixtures/prompts/sharegpt.jsonl\"",
        format!("path = {:?}", prompts.display().to_string()),
    );
    // All of the prompts given: the example samples 100 of its 300, and
    // this test needs thousands for its kills to land mid-run.
    let text = replace(text, "sample = 100\nseed = 1\n", String::new());
    let text = replace(
        text,
        "[generation]\n",
        format!("[generation]\nshards = {shards}\n"),
    );
    let text = replace(
        text,
        "[tokenization]\n",
        format!("[tokenization]\nshards = {shards}\n"),
    );
    format!("{text}\n[adaptation]\nshards = {shards}\n")
}

/// The example's ShareGPT prompts `rounds` times over, under new ids, each
/// question led by a dozen words of its own: the mock answers a question
/// with its text, so the answers differ enough for the filter to keep most
/// of them, and the tokenization has thousands of records to do.
fn many_prompts(path: &Path, rounds: usize, rng: &mut TestRng) -> usize {
    let shared = std::fs::read_to_string(fixture("prompts/sharegpt.jsonl")).unwrap();
    let mut text = String::new();
    let mut n = 0;
    for round in 0..rounds {
        for line in shared.lines() {
            let mut v: Value = serde_json::from_str(line).unwrap();
            v["id"] = Value::String(format!("r{round}-{}", v["id"].as_str().unwrap_or("x")));
            for turn in v["conversations"].as_array_mut().unwrap() {
                if turn["from"] == "human" {
                    let lead: Vec<String> =
                        (0..12).map(|_| format!("v{}", rng.below(500))).collect();
                    let question = turn["value"].as_str().unwrap_or_default();
                    turn["value"] = Value::String(format!("{} {question}", lead.join(" ")));
                }
            }
            text.push_str(&v.to_string());
            text.push('\n');
            n += 1;
        }
    }
    std::fs::write(path, text).unwrap();
    n
}

/// The ids a rejects file names (a line may have none).
fn ids_named(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["id"].as_str().map(str::to_string))
        .collect()
}

fn unique(path: &Path) -> BTreeSet<String> {
    let listed = ids(path);
    let set: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(set.len(), listed.len(), "{}: an id twice", path.display());
    set
}

fn result(t: &proto::Task) -> Value {
    serde_json::from_str(&t.result_json)
        .unwrap_or_else(|e| panic!("{}: result {:?}: {e}", t.kind, t.result_json))
}

/// Kills the daemon holding a shard of `step` (once it has done `at_least`
/// records and holds one), and starts it again on its state directory.
async fn kill_a_holder(
    c: &mut Client,
    daemons: &mut [RealDaemon],
    states: &[tempfile::TempDir],
    url: &str,
    step: &str,
    at_least: i64,
) -> usize {
    let running = poll(c, step, "a shard held", Duration::from_secs(300), |t| {
        matches!(t.status.as_str(), "completed" | "failed" | "cancelled")
            || (done(t) >= at_least && shard_holders(t).iter().any(Option::is_some))
    })
    .await;
    assert_eq!(
        running.status, "in_progress",
        "the {} ended before the kill: {:?}",
        running.kind, running.shards
    );
    let pid = shard_holders(&running)
        .into_iter()
        .flatten()
        .next()
        .unwrap();
    let victim = daemon_index(daemons, pid);
    daemons[victim].kill9();
    daemons[victim] = daemon(states[victim].path(), url, &[]);
    victim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_plan_runs_sharded_on_three_daemons_through_kills() {
    const SHARDS: u32 = 3;
    let shared = tempfile::tempdir().unwrap();
    let Some(url) = todod_e2e::postgres_only(shared.path()) else {
        return;
    };
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(20),
        keep_bodies: false,
        ..Settings::default()
    })
    .await;
    let mut rng = TestRng::new("the_example_plan_runs_sharded_on_three_daemons");
    let data = tempfile::tempdir().unwrap();
    let prompts = data.path().join("sharegpt.jsonl");
    let records = many_prompts(&prompts, 30, &mut rng);
    let out = data.path().join("out");
    let states: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut daemons: Vec<RealDaemon> = states.iter().map(|s| daemon(s.path(), &url, &[])).collect();
    let mut c = daemons[0].client().await;
    let steps =
        todod_e2e::apply_plan(&mut c, &example_plan(&mock.url, &prompts, &out, SHARDS)).await;
    let kinds: Vec<String> = {
        let mut kinds = Vec::new();
        for id in &steps {
            kinds.push(task(&mut c, id).await.kind);
        }
        kinds
    };
    assert_eq!(
        kinds,
        [
            "prompt_adaptation",
            "feasibility",
            "generation",
            "filter",
            "tokenization"
        ]
    );

    // A daemon killed in the middle of the generation, and restarted; then
    // one killed in the middle of the tokenization.
    let mut c = daemons[2].client().await;
    let first = kill_a_holder(&mut c, &mut daemons, &states, &url, &steps[2], 1000).await;
    let mut c = daemons[(first + 1) % 3].client().await;
    let second = kill_a_holder(&mut c, &mut daemons, &states, &url, &steps[4], 1).await;
    let mut c = daemons[(second + 1) % 3].client().await;
    let mut ended = Vec::new();
    for id in &steps {
        let t = poll(
            &mut c,
            id,
            "the plan's end",
            Duration::from_secs(600),
            |t| matches!(t.status.as_str(), "completed" | "failed"),
        )
        .await;
        assert_eq!(t.status, "completed", "{}: {}", t.kind, t.error);
        ended.push(t);
    }

    // Every prompt once through every phase, and the counts are the files'.
    let adapted = unique(&out.join("prompts.jsonl"));
    let rejected_prompts = ids(&out.join("prompts.rejects.jsonl")).len();
    assert_eq!(adapted.len() + rejected_prompts, records);
    assert_eq!(result(&ended[0])["records"], adapted.len());
    assert_eq!(result(&ended[0])["shards"], SHARDS);
    let completed = unique(&out.join("completions.jsonl"));
    assert_eq!(
        completed, adapted,
        "not every adapted prompt completed once"
    );
    assert_eq!(result(&ended[2])["records"], completed.len());
    assert_eq!(result(&ended[2])["shards"], SHARDS);
    let kept = unique(&out.join("completions.filtered.jsonl"));
    let filtered_out = unique(&out.join("completions.filtered.rejects.jsonl"));
    assert!(kept.is_disjoint(&filtered_out));
    assert_eq!(
        kept.union(&filtered_out).cloned().collect::<BTreeSet<_>>(),
        completed
    );
    assert!(kept.len() * 2 > completed.len(), "the filter kept few");
    assert_eq!(result(&ended[3])["records"], kept.len());
    assert_eq!(result(&ended[3])["removed"], filtered_out.len());
    let tokenized = result(&ended[4]);
    assert_eq!(tokenized["shards"], SHARDS);
    let rows = read_parquet(&out.join("train.parquet"));
    let row_ids: BTreeSet<String> = rows.iter().map(|r| r.0.clone()).collect();
    assert_eq!(row_ids.len(), rows.len(), "a record tokenized twice");
    // Every record kept is tokenized or left out (with its reason) once.
    let left_out = ids_named(&out.join("train.rejects.jsonl"));
    assert!(row_ids.is_disjoint(&left_out));
    assert_eq!(
        row_ids.union(&left_out).cloned().collect::<BTreeSet<_>>(),
        kept,
        "not every kept record tokenized or left out once"
    );
    assert!(
        rows.len() * 2 > kept.len(),
        "few records tokenized ({} of {})",
        rows.len(),
        kept.len()
    );
    assert_eq!(tokenized["records"], rows.len());
    let indexed = megatron::read(&out.join("train"));
    assert_eq!(indexed.sequences.len(), rows.len());
    for t in &ended {
        let told = result(t);
        let records = match t.kind.as_str() {
            "feasibility" => continue,
            "filter" => told["records"].as_u64().unwrap() + told["removed"].as_u64().unwrap(),
            _ => told["records"].as_u64().unwrap(),
        };
        let progress = t.progress.clone().unwrap_or_default();
        assert_eq!(progress.done as u64, records, "{}: progress", t.kind);
    }
    // Each kill was taken over: the shards the killed daemons held resumed.
    for step in [&steps[2], &steps[4]] {
        let resumed = todod_e2e::task_events(&mut c, step, "resumed").await;
        assert!(
            !resumed.is_empty(),
            "{step}: no shard taken over after the kill"
        );
    }
    eprintln!(
        "the example plan in {SHARDS} shards: {records} prompts, {} adapted, {} completed, {} \
         kept, {} tokenized; daemon {first} killed in the generation, daemon {second} in the \
         tokenization",
        adapted.len(),
        completed.len(),
        kept.len(),
        rows.len()
    );
}
