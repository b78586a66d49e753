//! The tokenization phase end to end: a generation's output tokenized with
//! the target model's own tokenizer (SmolLM2's tokenizer.json, and a
//! tiktoken model laid out as Kimi K2's), read back from the Megatron
//! indexed dataset by an independent reader and from the Parquet file, loss
//! masks checked against the rendered text, and kill -9 during a long run.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use todod_e2e::fixtures::fixture;
use todod_e2e::rng::TestRng;
use todod_e2e::{
    assert_kill_floor, create_phase, kill_repeatedly, megatron, parquet_rows::read_parquet, proto,
    wait_task, Client, RealDaemon, TestDaemon,
};
use todod_format::chat_template::{ChatTemplate, Clock, RenderInput};
use todod_format::tokenizer::Tokenizer;

const WORDS: &[&str] = &[
    "the", "model", "answers", "a", "question", "about", "tokens", "and", "loss", "masks", "数据",
    "训练", "émigré", "naïve", "🙂", "42", "3.14", "x=y+1;", "\n", "  ", "Kimi", "SmolLM",
];

/// What the default spec does with generation records: those it keeps, and
/// how many it drops for ending at max_tokens and for being empty.
fn sorted_by_the_spec(records: &[Value]) -> (Vec<&Value>, usize, usize) {
    let length = |r: &Value| r["finish_reason"] == "length";
    let kept = records
        .iter()
        .filter(|r| !length(r) && r["content"] != "")
        .collect();
    let dropped_length = records.iter().filter(|r| length(r)).count();
    let dropped_empty = records
        .iter()
        .filter(|r| !length(r) && r["content"] == "")
        .count();
    (kept, dropped_length, dropped_empty)
}

fn sentence(rng: &mut TestRng, words: usize) -> String {
    let mut out = String::new();
    for i in 0..words {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    out
}

/// `n` records as a generation writes them (with its prompt kept); every
/// tenth has two turns before the answer, some ended at their length limit
/// and a few are empty.
fn write_generation_output(path: &Path, n: usize, rng: &mut TestRng) -> Vec<Value> {
    let mut text = String::new();
    let mut records = Vec::new();
    for i in 0..n {
        let mut messages = vec![json!({"role": "user", "content": sentence(rng, 3 + i % 7)})];
        if i % 10 == 3 {
            let earlier = sentence(rng, 4).trim_start().to_string();
            messages.push(json!({"role": "assistant", "content": earlier}));
            messages.push(json!({"role": "user", "content": sentence(rng, 5)}));
        }
        // No leading whitespace: a token would then join the template's
        // header to the answer, and straddle the edge of the trained span.
        let content = if i % 50 == 7 {
            String::new()
        } else {
            sentence(rng, 2 + i % 11).trim_start().to_string()
        };
        let finish = if i % 40 == 5 { "length" } else { "stop" };
        let record = json!({
            "id": format!("r{i}"), "line": i + 1, "messages": messages, "content": content,
            "reasoning": null, "finish_reason": finish,
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            "model": "m", "endpoint": "http://x", "latency_ms": 10, "attempts": 1,
        });
        text.push_str(&format!("{record}\n"));
        records.push(record);
    }
    std::fs::write(path, text).unwrap();
    records
}

async fn create(c: &mut Client, plan: &str, spec: &Value) -> String {
    create_phase(c, plan, "tokenization", &spec.to_string(), &[])
        .await
        .unwrap_or_else(|e| panic!("create: {e}"))
}

async fn finished(c: &mut Client, plan: &str, id: &str) -> proto::Task {
    let task = wait_task(c, plan, id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    task
}

/// A model directory, as the tests' own tokenizer and template.
struct Model {
    tokenizer: Arc<dyn Tokenizer>,
    template: ChatTemplate,
    variables: serde_json::Map<String, Value>,
}

fn model(dir: &Path) -> Model {
    let loaded = todod_format::tokenizer::load_dir(dir).unwrap();
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap())
            .unwrap();
    let (template, tokens) = ChatTemplate::from_tokenizer_config(&config, None).unwrap();
    let mut variables = serde_json::Map::new();
    tokens.insert_into(&mut variables);
    Model {
        tokenizer: loaded.tokenizer,
        template,
        variables,
    }
}

impl Model {
    fn render(&self, messages: &Value) -> String {
        self.template
            .render(&RenderInput {
                messages,
                tools: None,
                documents: None,
                add_generation_prompt: false,
                variables: &self.variables,
                now: Clock::at_unix(0),
            })
            .unwrap()
    }
}

/// The text of the tokens trained on: the union of the byte spans of the
/// tokens whose label is not -100 (a byte-level token holding part of a
/// character spans the whole character, so neighbours may overlap).
fn trained_text(model: &Model, full: &str, labels: &[i64]) -> String {
    let enc = model.tokenizer.encode(full, true).unwrap();
    assert_eq!(enc.ids.len(), labels.len());
    let mut covered = vec![false; full.len()];
    for (&(s, e), &l) in enc.offsets.iter().zip(labels) {
        if l != -100 {
            covered[s..e].iter_mut().for_each(|c| *c = true);
        }
    }
    let bytes: Vec<u8> = full
        .bytes()
        .zip(&covered)
        .filter(|(_, &c)| c)
        .map(|(b, _)| b)
        .collect();
    String::from_utf8(bytes).unwrap()
}

fn sha256(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(std::fs::read(path).unwrap());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn with(prefix: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", prefix.display()))
}

/// Tokenizes a generation's output with the model in `model_dir`; checks
/// every record in both formats and the trained text of every one; returns
/// the manifest.
async fn conversations_read_back(model_dir: &Path, end_of_turn: &str, train_on: &str) -> Value {
    let mut rng = TestRng::new("conversations_read_back");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("generated.jsonl");
    let records = write_generation_output(&input, 400, &mut rng);
    let prefix = dir.path().join("train");
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let spec = json!({
        "input": input, "tokenizer": model_dir, "output_prefix": prefix,
        "mode": "conversation", "train_on": train_on, "threads": 2,
    });
    let id = create(&mut c, "tok", &spec).await;
    let task = finished(&mut c, "tok", &id).await;
    let result: Value = serde_json::from_str(&task.result_json).unwrap();

    let model = model(model_dir);
    let (kept, dropped_length, dropped_empty) = sorted_by_the_spec(&records);
    assert_eq!(result["records"], kept.len(), "{result}");
    assert_eq!(
        result["dropped"]["length_finish"], dropped_length,
        "{result}"
    );
    assert_eq!(result["dropped"]["empty"], dropped_empty, "{result}");
    // What a person reads agrees: the dropped records are neither done nor
    // rejected, and not part of the total.
    let progress = task.progress.clone().unwrap();
    assert_eq!(progress.done, kept.len() as i64);
    assert_eq!(progress.total, kept.len() as i64);
    assert_eq!(progress.rejected, 0);
    let detail: Value = serde_json::from_str(&progress.detail_json).unwrap();
    assert_eq!(detail["dropped"], dropped_length + dropped_empty);

    let indexed = megatron::read(&prefix);
    assert_eq!(indexed.sequences.len(), kept.len());
    assert_eq!(
        indexed.documents,
        (0..=kept.len() as i64).collect::<Vec<_>>()
    );
    let rows = read_parquet(&with(&prefix, ".parquet"));
    assert_eq!(rows.len(), kept.len());
    let mut tokens = 0;
    let mut trained = 0;
    for ((record, sequence), (row_id, input_ids, attention, labels)) in
        kept.iter().zip(&indexed.sequences).zip(&rows)
    {
        assert_eq!(row_id, record["id"].as_str().unwrap());
        let mut messages = record["messages"].as_array().unwrap().clone();
        messages.push(json!({"role": "assistant", "content": record["content"]}));
        let full = model.render(&Value::Array(messages.clone()));
        let expected = model.tokenizer.encode(&full, false).unwrap().ids;
        assert_eq!(
            sequence, &expected,
            "{row_id}: the .bin holds the rendered text's ids"
        );
        assert_eq!(
            input_ids,
            &expected.iter().map(|&i| i as i32).collect::<Vec<_>>(),
            "{row_id}: parquet input_ids"
        );
        assert!(attention.iter().all(|&a| a == 1));
        for (label, id) in labels.iter().zip(input_ids) {
            assert!(
                *label == -100 || *label == i64::from(*id),
                "{row_id}: a label is its id or -100"
            );
        }
        // Exactly the trained assistant turns: their content and the
        // template's end of turn, nothing of the header or the prompt.
        let turns: Vec<&Value> = messages
            .iter()
            .filter(|m| m["role"] == "assistant")
            .collect();
        let trained_turns: Vec<&Value> = match train_on {
            "all" => turns,
            _ => vec![*turns.last().unwrap()],
        };
        let want: String = trained_turns
            .iter()
            .map(|m| format!("{}{end_of_turn}", m["content"].as_str().unwrap()))
            .collect();
        assert_eq!(
            trained_text(&model, &full, labels),
            want,
            "{row_id}: {full:?}"
        );
        tokens += expected.len();
        trained += labels.iter().filter(|&&l| l != -100).count();
    }
    assert_eq!(result["tokens"], tokens);
    assert_eq!(result["trained_tokens"], trained);
    assert_eq!(result["straddling_tokens"], 0);

    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(with(&prefix, ".manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["records"], kept.len());
    assert_eq!(manifest["tokens"], tokens);
    assert_eq!(manifest["masked_tokens"], tokens - trained);
    assert_eq!(
        manifest["tokenizer"]["identity"],
        todod_format::tokenizer::load_dir(model_dir)
            .unwrap()
            .identity
    );
    assert_eq!(manifest["chat_template_sha256"], model.template.sha256());
    for (name, file) in manifest["files"].as_object().unwrap() {
        let path = PathBuf::from(file["path"].as_str().unwrap());
        assert_eq!(file["sha256"], sha256(&path), "{name}");
    }
    let histogram: u64 = manifest["length_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["records"].as_u64().unwrap())
        .sum();
    assert_eq!(histogram, kept.len() as u64);
    // The rejects file says why each dropped record is not there.
    let rejects = std::fs::read_to_string(with(&prefix, ".rejects.jsonl")).unwrap();
    assert_eq!(rejects.lines().count(), dropped_length + dropped_empty);
    manifest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smollm2_conversations_read_back_with_the_last_turn_trained() {
    let manifest = conversations_read_back(&fixture("smollm2"), "<|im_end|>\n", "last").await;
    assert_eq!(manifest["dtype"], "uint16", "49k tokens fit in 16 bits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smollm2_conversations_train_on_every_assistant_turn() {
    conversations_read_back(&fixture("smollm2"), "<|im_end|>\n", "all").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kimi_style_conversations_read_back_through_tiktoken() {
    let manifest = conversations_read_back(&fixture("kimi_style"), "<|im_end|>", "last").await;
    assert_eq!(
        manifest["tokenizer"]["dir"],
        fixture("kimi_style")
            .canonicalize()
            .unwrap()
            .display()
            .to_string()
    );
}

/// The torture test: kill -9 of the real daemon at random moments during a
/// long tokenization; its files are byte for byte those of a run that was
/// never interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenization_killed_again_and_again_writes_the_same_bytes() {
    const RECORDS: usize = 100_000;
    // Up to KILLS kills; at least MIN_KILLS must land before the run ends
    // for the test to mean anything (how many fit depends on the machine).
    const KILLS: usize = 20;
    const MIN_KILLS: usize = 8;
    let mut rng = TestRng::new("a_tokenization_killed_again_and_again");
    let data = tempfile::tempdir().unwrap();
    let input = data.path().join("generated.jsonl");
    let records = write_generation_output(&input, RECORDS, &mut rng);
    let spec = |prefix: &Path| {
        json!({
            "input": input, "tokenizer": fixture("smollm2"), "output_prefix": prefix,
            "mode": "conversation", "threads": 2,
        })
    };

    // The reference: one run, never interrupted.
    let reference = data.path().join("reference");
    let state = tempfile::tempdir().unwrap();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create(&mut c, "ref", &spec(&reference)).await;
    let expected = finished(&mut c, "ref", &id).await;
    daemon.terminate();

    let killed = data.path().join("killed");
    let state = tempfile::tempdir().unwrap();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create(&mut c, "kill", &spec(&killed)).await;
    // Each kill lands in the middle of the work: after this daemon has
    // committed something new, at a random moment.
    let kills = kill_repeatedly(&mut daemon, state.path(), "kill", &id, KILLS, || {
        Duration::from_millis(rng.below(150))
    })
    .await;
    let mut c = daemon.client().await;
    let task = finished(&mut c, "kill", &id).await;
    daemon.terminate();
    let kills = assert_kill_floor(&kills, MIN_KILLS, &rng.replay());
    for suffix in [".bin", ".idx", ".parquet", ".rejects.jsonl"] {
        assert!(
            std::fs::read(with(&reference, suffix)).unwrap()
                == std::fs::read(with(&killed, suffix)).unwrap(),
            "{suffix} differs after {kills} kills ({})",
            rng.replay()
        );
    }
    // The result, the manifest and the progress tell the counts the files
    // and the input hold, read here by readers of their own.
    let (kept, dropped_length, dropped_empty) = sorted_by_the_spec(&records);
    let kept = kept.len();
    let indexed = megatron::read(&killed);
    let rows = read_parquet(&with(&killed, ".parquet"));
    assert_eq!(indexed.sequences.len(), kept);
    assert_eq!(rows.len(), kept);
    let tokens: u64 = indexed.sizes.iter().map(|&s| s as u64).sum();
    let trained = rows
        .iter()
        .map(|(_, _, _, labels)| labels.iter().filter(|&&l| l != -100).count() as u64)
        .sum::<u64>();
    let mut histogram: std::collections::BTreeMap<u64, u64> = Default::default();
    for &size in &indexed.sizes {
        let size = size as u64;
        let bucket = if size < 2 {
            0
        } else {
            63 - u64::from(size.leading_zeros())
        };
        *histogram.entry(bucket).or_default() += 1;
    }
    let rejects = std::fs::read_to_string(with(&killed, ".rejects.jsonl")).unwrap();
    assert_eq!(rejects.lines().count(), dropped_length + dropped_empty);

    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(with(&killed, ".manifest.json")).unwrap())
            .unwrap();
    for (name, told) in [("result", &result), ("manifest", &manifest)] {
        assert_eq!(told["records"], kept, "{name}: records");
        assert_eq!(told["tokens"], tokens, "{name}: tokens");
        assert_eq!(told["trained_tokens"], trained, "{name}: trained_tokens");
        assert_eq!(
            told["masked_tokens"],
            tokens - trained,
            "{name}: masked_tokens"
        );
        assert_eq!(
            told["dropped"]["length_finish"], dropped_length,
            "{name}: dropped"
        );
        assert_eq!(told["dropped"]["empty"], dropped_empty, "{name}: dropped");
        assert_eq!(told["rejected"], 0, "{name}: rejected");
    }
    assert_eq!(
        result["length_histogram"],
        json!(histogram
            .iter()
            .map(|(k, n)| json!([k, n]))
            .collect::<Vec<_>>()),
        "result: length_histogram"
    );
    assert_eq!(
        manifest["length_histogram"],
        json!(histogram
            .iter()
            .map(|(&k, &n)| {
                let (from, to) = match k {
                    0 => (0, 1),
                    _ => (1u64 << k, (1u64 << (k + 1)) - 1),
                };
                json!({"from": from, "to": to, "records": n})
            })
            .collect::<Vec<_>>()),
        "manifest: length_histogram"
    );
    for (name, file) in manifest["files"].as_object().unwrap() {
        let path = PathBuf::from(file["path"].as_str().unwrap());
        assert_eq!(file["sha256"], sha256(&path), "manifest: {name}");
    }
    // And the uninterrupted run told the same.
    let uninterrupted: Value = serde_json::from_str(&expected.result_json).unwrap();
    for key in ["records", "tokens", "trained_tokens", "dropped", "rejected"] {
        assert_eq!(uninterrupted[key], result[key], "{key}");
    }
    // What a person reads after the kills: every kept record done, and the
    // dropped ones neither done nor part of the total.
    let progress = task.progress.clone().unwrap();
    assert_eq!(
        (progress.done, progress.total, progress.rejected),
        (kept as i64, kept as i64, 0)
    );
}

/// A tokenization split into three shards and killed again and again: each
/// shard tokenizes its share into its parts of the token store, and once
/// all are done the store is put together and finished as one run's. It
/// holds exactly the records an uninterrupted, unsharded run holds (each
/// one's tokens, mask and labels the same), in shard order, with the same
/// counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_tokenization_through_kills_holds_what_one_run_holds() {
    const RECORDS: usize = 60_000;
    const SHARDS: usize = 3;
    const KILLS: usize = 8;
    const MIN_KILLS: usize = 3;
    let mut rng = TestRng::new("a_sharded_tokenization_through_kills");
    let data = tempfile::tempdir().unwrap();
    let input = data.path().join("generated.jsonl");
    let records = write_generation_output(&input, RECORDS, &mut rng);
    let spec = |prefix: &Path, shards: usize| {
        json!({
            "input": input, "tokenizer": fixture("smollm2"), "output_prefix": prefix,
            "mode": "conversation", "threads": 2, "shards": shards,
        })
    };
    let reference = data.path().join("reference");
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let id = create(&mut c, "ref", &spec(&reference, 1)).await;
    let expected = finished(&mut c, "ref", &id).await;
    drop(daemon);

    let sharded = data.path().join("sharded");
    let state = tempfile::tempdir().unwrap();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create(&mut c, "shards", &spec(&sharded, SHARDS)).await;
    let kills = kill_repeatedly(&mut daemon, state.path(), "shards", &id, KILLS, || {
        Duration::from_millis(rng.below(120))
    })
    .await;
    let mut c = daemon.client().await;
    let task = finished(&mut c, "shards", &id).await;
    daemon.terminate();
    let kills = assert_kill_floor(&kills, MIN_KILLS, &rng.replay());

    // Every record one run keeps, once, with the same tokens and labels.
    let whole = read_parquet(&with(&reference, ".parquet"));
    let rows = read_parquet(&with(&sharded, ".parquet"));
    let (kept, _, _) = sorted_by_the_spec(&records);
    assert_eq!(whole.len(), kept.len());
    assert_eq!(rows.len(), whole.len(), "after {kills} kills");
    let by_id: std::collections::HashMap<&str, _> =
        whole.iter().map(|row| (row.0.as_str(), row)).collect();
    let mut seen = std::collections::HashSet::new();
    for row in &rows {
        assert!(seen.insert(row.0.as_str()), "{} twice", row.0);
        assert_eq!(Some(&row), by_id.get(row.0.as_str()), "{}", row.0);
    }
    // In shard order: line n is shard (n - 1) mod 3's, and record `r{i}` is
    // on line i + 1.
    let shard_of = |id: &str| id[1..].parse::<usize>().unwrap() % SHARDS;
    assert!(
        rows.windows(2)
            .all(|w| shard_of(&w[0].0) <= shard_of(&w[1].0)),
        "not in shard order"
    );
    // The Megatron dataset holds the same sequences, in the Parquet's order.
    let indexed = megatron::read(&sharded);
    assert_eq!(indexed.sequences.len(), rows.len());
    for (sequence, row) in indexed.sequences.iter().zip(&rows) {
        let ids: Vec<u32> = row.1.iter().map(|&t| t as u32).collect();
        assert_eq!(sequence, &ids, "{}", row.0);
    }
    let rejects = |prefix: &Path| {
        let mut lines: Vec<String> = std::fs::read_to_string(with(prefix, ".rejects.jsonl"))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    };
    assert_eq!(rejects(&sharded), rejects(&reference));

    // The counts are one run's; the parts are named, and make the store.
    let counts = |t: &proto::Task| -> Value {
        let mut v: Value = serde_json::from_str(&t.result_json).unwrap();
        let fields = v.as_object_mut().unwrap();
        for path in [
            "bin", "idx", "manifest", "rejects", "parquet", "shards", "parts",
        ] {
            fields.remove(path);
        }
        v
    };
    assert_eq!(counts(&task), counts(&expected));
    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    assert_eq!(result["shards"], SHARDS);
    let parts: Value =
        serde_json::from_str(&std::fs::read_to_string(result["parts"].as_str().unwrap()).unwrap())
            .unwrap();
    for file in parts["files"].as_array().unwrap() {
        let path = PathBuf::from(file["path"].as_str().unwrap());
        assert_eq!(file["parts"].as_array().unwrap().len(), SHARDS, "{file}");
        assert_eq!(
            file["bytes"].as_u64().unwrap(),
            std::fs::metadata(&path).unwrap().len(),
            "{}",
            path.display()
        );
    }
    let progress = task.progress.unwrap();
    assert_eq!(progress.done as usize, kept.len());
}
