//! The prompt-adaptation phase end to end, on the shared prompt fixtures:
//! one conversation set in four formats adapts to the same messages, text
//! rendered with Qwen3's template parses back into them and renders again
//! byte for byte, bad lines are rejected with their reasons, and kill -9
//! during a long adaptation leaves the output byte-identical.
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use todod_e2e::fixtures::fixture;
use todod_e2e::json_lines;
use todod_e2e::rng::TestRng;
use todod_e2e::{
    assert_kill_floor, create_phase, kill_repeatedly, proto, wait_task, Client, RealDaemon,
    TestDaemon,
};

async fn create(c: &mut Client, plan: &str, spec: &Value) -> String {
    create_phase(c, plan, "prompt_adaptation", &spec.to_string(), &[])
        .await
        .unwrap_or_else(|e| panic!("create: {e}"))
}

async fn ended(c: &mut Client, plan: &str, id: &str) -> proto::Task {
    wait_task(c, plan, id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await
}

/// Adapts `input` with `extra` spec fields into `dir/NAME.jsonl`; returns
/// the task and the output lines.
async fn adapt(
    c: &mut Client,
    dir: &Path,
    name: &str,
    input: PathBuf,
    extra: Value,
) -> (proto::Task, Vec<Value>) {
    let output = dir.join(format!("{name}.jsonl"));
    let mut spec = json!({"input": input, "output": output, "threads": 2});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    let id = create(c, name, &spec).await;
    let task = ended(c, name, &id).await;
    (task, json_lines(&output))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_conversation_set_in_four_formats_adapts_to_the_same_messages() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let keep = json!({"system_prompt": {"policy": "keep"}});
    let (openai_task, openai) = adapt(
        &mut c,
        dir.path(),
        "openai",
        fixture("prompts/openai_messages.jsonl"),
        keep.clone(),
    )
    .await;
    let (sharegpt_task, sharegpt) = adapt(
        &mut c,
        dir.path(),
        "sharegpt",
        fixture("prompts/sharegpt.jsonl"),
        keep.clone(),
    )
    .await;
    let (alpaca_task, alpaca) = adapt(
        &mut c,
        dir.path(),
        "alpaca",
        fixture("prompts/alpaca.jsonl"),
        keep.clone(),
    )
    .await;
    let mut rendered_spec = keep.clone();
    rendered_spec["rendered_family"] = json!("chatml");
    let (rendered_task, rendered) = adapt(
        &mut c,
        dir.path(),
        "rendered",
        fixture("prompts/qwen3_rendered.jsonl"),
        rendered_spec,
    )
    .await;
    for task in [&openai_task, &sharegpt_task, &alpaca_task, &rendered_task] {
        assert_eq!(task.status, "completed", "{}", task.error);
    }
    assert_eq!(openai.len(), 300);
    // ShareGPT and the rendered text give exactly the OpenAI messages, ids kept.
    assert_eq!(sharegpt, openai, "sharegpt");
    assert_eq!(
        rendered, openai,
        "qwen3_rendered parses back into its messages"
    );
    // Alpaca has no system prompt and no turns: its instruction, then its input.
    let source: Vec<Value> = json_lines(&fixture("prompts/alpaca.jsonl"));
    assert_eq!(alpaca.len(), 300);
    for ((adapted, line), messages) in alpaca.iter().zip(&source).zip(&openai) {
        let instruction = line["instruction"].as_str().unwrap();
        let input = line["input"].as_str().unwrap();
        let want = if input.is_empty() {
            instruction.to_string()
        } else {
            format!("{instruction}\n\n{input}")
        };
        assert_eq!(
            adapted["messages"],
            json!([{"role": "user", "content": want}])
        );
        let first_user = messages["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "user")
            .unwrap();
        assert_eq!(first_user["content"], instruction);
        assert!(adapted["id"].as_str().is_some_and(|id| !id.is_empty()));
    }
    // Counts in the result are the files' counts.
    let result: Value = serde_json::from_str(&openai_task.result_json).unwrap();
    assert_eq!(result["records"], 300);
    assert_eq!(result["formats"]["openai"], 300);
    let roles: usize = openai
        .iter()
        .map(|l| l["messages"].as_array().unwrap().len())
        .sum();
    let counted: u64 = result["roles"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(counted as usize, roles);
    assert_eq!(result["system_prompts"]["kept"], 149 + 38);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendering_with_qwen3s_template_gives_transformers_bytes() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let (task, rendered) = adapt(
        &mut c,
        dir.path(),
        "qwen3",
        fixture("prompts/openai_messages.jsonl"),
        json!({
            "output_format": "rendered",
            "chat_template": fixture("chat_templates/Qwen-Qwen3-0.6B.jinja"),
            "template_variables": {"enable_thinking": false},
            "system_prompt": {"policy": "keep"},
            "now": "2026-01-15",
        }),
    )
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let golden = json_lines(&fixture("prompts/qwen3_rendered.jsonl"));
    assert_eq!(rendered.len(), golden.len());
    for (ours, theirs) in rendered.iter().zip(&golden) {
        assert_eq!(ours["id"], theirs["id"]);
        assert_eq!(ours["prompt"], theirs["text"], "{}", ours["id"]);
    }
    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    let source = std::fs::read(fixture("chat_templates/Qwen-Qwen3-0.6B.jinja")).unwrap();
    use sha2::Digest;
    let sha: String = sha2::Sha256::digest(&source)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(result["template_sha256"], sha);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_keeps_n_lines_chosen_by_its_seed_the_same_on_every_run() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("prompts/sharegpt.jsonl");
    let run = |seed: u64| json!({"sample": {"count": 50, "seed": seed}});
    let (first_task, first) = adapt(&mut c, dir.path(), "first", input.clone(), run(7)).await;
    let (_, again) = adapt(&mut c, dir.path(), "again", input.clone(), run(7)).await;
    let (_, other) = adapt(&mut c, dir.path(), "other", input.clone(), run(8)).await;
    assert_eq!(first_task.status, "completed", "{}", first_task.error);
    assert_eq!(first.len(), 50);
    assert_eq!(first, again, "the same seed chooses the same lines");
    let ids = |v: &[Value]| -> std::collections::BTreeSet<String> {
        v.iter()
            .map(|l| l["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&first).len(), 50, "no line twice");
    assert_ne!(ids(&first), ids(&other), "another seed chooses others");
    // Kept in the input's order.
    let order: Vec<String> = std::fs::read_to_string(&input)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .filter(|id| ids(&first).contains(id))
        .collect();
    let written: Vec<String> = first
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(written, order);
    // The counts say what happened: 50 adapted, 250 left out, none rejected.
    let result: Value = serde_json::from_str(&first_task.result_json).unwrap();
    assert_eq!(result["records"], 50);
    assert_eq!(result["rejected"], 0);
    assert_eq!(result["sample"]["not_sampled"], 250, "{result}");
    let progress = first_task.progress.unwrap();
    assert_eq!(
        (progress.done, progress.total, progress.rejected),
        (50, 50, 0)
    );
    assert!(
        std::fs::read_to_string(dir.path().join("first.jsonl.rejects.jsonl"))
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_left_out_of_the_sample_makes_no_duplicate_of_a_sampled_one() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("twice.jsonl");
    std::fs::write(
        &input,
        concat!(
            r#"{"id": "a", "messages": [{"role": "user", "content": "first"}]}"#,
            "\n",
            r#"{"id": "a", "messages": [{"role": "user", "content": "second"}]}"#,
            "\n",
        ),
    )
    .unwrap();
    let mut picked = std::collections::BTreeSet::new();
    for seed in 1..=8u64 {
        let name = format!("seed{seed}");
        let (task, out) = adapt(
            &mut c,
            dir.path(),
            &name,
            input.clone(),
            json!({"sample": {"count": 1, "seed": seed}}),
        )
        .await;
        assert_eq!(task.status, "completed", "{seed}: {}", task.error);
        assert_eq!(out.len(), 1, "seed {seed}: {out:?}");
        let result: Value = serde_json::from_str(&task.result_json).unwrap();
        assert_eq!(result["rejected"], 0, "seed {seed}: {result}");
        picked.insert(
            out[0]["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    // Both lines were the sampled one for some seed: the second, too, is
    // kept, not rejected as a duplicate of the first.
    assert_eq!(picked.len(), 2, "{picked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_line_is_rejected_with_its_reason_and_the_good_ones_adapted() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let (task, adapted) = adapt(
        &mut c,
        dir.path(),
        "bad",
        fixture("prompts/bad_lines.jsonl"),
        json!({}),
    )
    .await;
    // 12 of 14 lines rejected: over the limit, so the phase fails with the
    // counts, and the pipeline stops before generation.
    let rejects = json_lines(&dir.path().join("bad.jsonl.rejects.jsonl"));
    let ids: Vec<&str> = adapted.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["ok1", "ok2"], "{rejects:#?}");
    assert_eq!(task.status, "failed");
    assert!(
        task.error.contains("12 of 14 lines were rejected"),
        "{}",
        task.error
    );
    let reasons: Vec<(u64, String)> = rejects
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap(),
                r["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expect = [
        (2, "blank"),
        (3, "blank"),
        (4, "not JSON"),
        (5, "object"),
        (6, "messages"),
        (7, "messages"),
        (8, "wizard"),
        (9, "content"),
        (10, "UTF-8"),
        (11, "duplicate"),
        (12, "bytes"),
        (13, "id"),
    ];
    assert_eq!(reasons.len(), expect.len(), "{reasons:#?}");
    for ((line, reason), (want_line, words)) in reasons.iter().zip(expect) {
        assert_eq!(*line, want_line, "{reasons:#?}");
        assert!(
            reason.contains(words),
            "line {line}: {reason:?} should say {words:?}"
        );
    }
}

/// `n` conversations from the fixtures, each with an id of its own.
fn write_many(path: &Path, n: usize) {
    let base = json_lines(&fixture("prompts/openai_messages.jsonl"));
    let mut text = String::new();
    for i in 0..n {
        let mut line = base[i % base.len()].clone();
        line["id"] = json!(format!("c{i}"));
        text.push_str(&format!("{line}\n"));
    }
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptation_killed_again_and_again_writes_the_same_bytes() {
    const LINES: usize = 160_000;
    // A sample, so that each resumed run must choose the same lines again.
    const SAMPLED: usize = 140_000;
    // Kill up to KILLS times; the run must have been killed at least
    // MIN_KILLS times for the test to mean anything. How many fit before the
    // run ends depends on the machine and the build, so the floor is well
    // below what this machine's release build reaches.
    const KILLS: usize = 20;
    const MIN_KILLS: usize = 8;
    let mut rng = TestRng::new("an_adaptation_killed_again_and_again");
    let data = tempfile::tempdir().unwrap();
    let input = data.path().join("prompts.jsonl");
    write_many(&input, LINES);
    let spec = |output: &Path| {
        json!({
            "input": input, "output": output, "output_format": "rendered",
            "chat_template": fixture("chat_templates/Qwen-Qwen3-0.6B.jinja"),
            "template_variables": {"enable_thinking": false}, "now": "2026-01-15",
            "threads": 2, "sample": {"count": SAMPLED, "seed": 3},
        })
    };
    let reference = data.path().join("reference.jsonl");
    let state = tempfile::tempdir().unwrap();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create(&mut c, "ref", &spec(&reference)).await;
    let expected = ended(&mut c, "ref", &id).await;
    assert_eq!(expected.status, "completed", "{}", expected.error);
    daemon.terminate();

    let killed = data.path().join("killed.jsonl");
    let state = tempfile::tempdir().unwrap();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create(&mut c, "kill", &spec(&killed)).await;
    // Each kill lands in the middle of the work: after this daemon has
    // committed something new, at a random moment.
    let kills = kill_repeatedly(&mut daemon, state.path(), "kill", &id, KILLS, || {
        Duration::from_millis(rng.below(50))
    })
    .await;
    let mut c = daemon.client().await;
    let task = ended(&mut c, "kill", &id).await;
    daemon.terminate();
    let kills = assert_kill_floor(&kills, MIN_KILLS, &rng.replay());
    assert_eq!(task.status, "completed", "{}", task.error);
    let (a, b) = (
        std::fs::read(&reference).unwrap(),
        std::fs::read(&killed).unwrap(),
    );
    assert!(
        a == b,
        "the output differs after {kills} kills ({})",
        rng.replay()
    );
    // The counts a person reads agree with the file, after the kills.
    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    assert_eq!(result["records"], SAMPLED);
    assert_eq!(result["sample"]["not_sampled"], LINES - SAMPLED);
    assert_eq!(b.iter().filter(|&&c| c == b'\n').count(), SAMPLED);
    let progress = task.progress.unwrap();
    assert_eq!(
        (progress.done, progress.total),
        (SAMPLED as i64, SAMPLED as i64)
    );
}

/// An adaptation split into three shards: each adapts its share of the
/// lines into its parts, and once all are done the output and rejects are
/// put together from the parts, with a manifest naming them. The records
/// and rejects are those one unsharded run writes (in shard order), and
/// the counts a user reads are the same, sample included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_adaptation_writes_the_records_one_run_writes() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    // Agentic conversations, ShareGPT ones and bad lines, in one file.
    let input = dir.path().join("mixed.jsonl");
    let mut bytes = Vec::new();
    for name in ["tool_use.jsonl", "sharegpt.jsonl", "bad_lines.jsonl"] {
        bytes.extend(std::fs::read(fixture(&format!("prompts/{name}"))).unwrap());
        if bytes.last() != Some(&b'\n') {
            bytes.push(b'\n');
        }
    }
    std::fs::write(&input, bytes).unwrap();
    let extra = json!({
        "target": fixture("smollm2"), "max_rejected_share": 1.0,
        "sample": {"count": 250, "seed": 3},
    });
    let (whole, expected) = adapt(&mut c, dir.path(), "whole", input.clone(), extra.clone()).await;
    assert_eq!(whole.status, "completed", "{}", whole.error);
    let mut sharded = extra.clone();
    sharded["shards"] = 3.into();
    let (task, got) = adapt(&mut c, dir.path(), "sharded", input, sharded).await;
    assert_eq!(task.status, "completed", "{}", task.error);

    let sorted = |v: &[Value]| {
        let mut lines: Vec<String> = v.iter().map(Value::to_string).collect();
        lines.sort();
        lines
    };
    assert_eq!(got.len(), expected.len());
    assert_eq!(
        sorted(&got),
        sorted(&expected),
        "not the records one run writes"
    );
    let rejects = |name: &str| json_lines(&dir.path().join(format!("{name}.jsonl.rejects.jsonl")));
    assert!(
        !rejects("whole").is_empty(),
        "the bad lines were not rejected"
    );
    assert_eq!(sorted(&rejects("sharded")), sorted(&rejects("whole")));

    // The whole is its parts, in shard order, and the manifest says so.
    let output = dir.path().join("sharded.jsonl");
    let mut joined = Vec::new();
    for index in 0..3 {
        let part = dir.path().join(format!("sharded.part-{index:04}.jsonl"));
        joined.extend(std::fs::read(part).unwrap());
    }
    assert_eq!(std::fs::read(&output).unwrap(), joined);
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("sharded.jsonl.manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["shards"], 3);
    assert_eq!(manifest["files"][0]["lines"], got.len());
    assert_eq!(manifest["files"][0]["parts"].as_array().unwrap().len(), 3);

    // The counts are one run's: the result but for its paths and shards.
    let result = |t: &proto::Task| -> Value {
        let mut v: Value = serde_json::from_str(&t.result_json).unwrap();
        let fields = v.as_object_mut().unwrap();
        for path in ["output", "rejects"] {
            assert!(fields.remove(path).is_some(), "{path}");
        }
        fields.remove("shards");
        fields.remove("parts");
        v
    };
    let told: Value = serde_json::from_str(&task.result_json).unwrap();
    assert_eq!(told["shards"], 3);
    assert_eq!(told["records"], got.len());
    assert_eq!(result(&task), result(&whole));
    let progress = task.progress.unwrap();
    assert_eq!(progress.done as usize, got.len());
}
