//! The whole pipeline on a real server: llama.cpp's `llama-server` serving
//! SmolLM2-135M on this machine's CPU (built by `scripts/local-backend`,
//! which `.ci/run` runs first). 100 of the 300 shared ShareGPT prompts (a
//! seeded sample, as README's example takes: a third of the generation's
//! time, and still long enough for a kill to land inside it) are adapted to SmolLM2's template, the server is measured and a verdict given, the
//! completions generated and tokenized into Megatron and Parquet files, with
//! a kill -9 of the daemon inside each phase that is caught running (at
//! least the sweep and the generation, which run long enough). Every
//! output is checked: each prompt once through every phase, and the
//! tokenized files against the tokenizer.
//!
//! Without a built server, `scripts/local-backend` builds it first (several
//! minutes, once per machine, cached outside the repository); if it cannot,
//! this test fails and says so: it never passes without having run.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use todod_e2e::fixtures::fixture;
use todod_e2e::llama_server::LlamaServer;
use todod_e2e::{ids, run_killing_each, RealDaemon};

fn plan_file(out: &Path, url: &str) -> String {
    format!(
        r#"
plan = "real"
output_dir = "{out}"

[model]
name = "smollm2"
endpoints = ["{url}"]
dir = "{dir}"

[prompts]
path = "{prompts}"
format = "sharegpt"
sample = 100
seed = 5

[sampling]
temperature = 0.7
seed = 11

[budget]
max_hours = 1.0

[feasibility]
seed = 3
max_concurrency = 8
window = {{ min_requests = 16, min_seconds = 4.0, max_seconds = 40.0 }}

[generation]
max_tokens = 48

[tokenization]
formats = ["megatron", "parquet"]
drop_length_finishes = false
"#,
        out = out.display(),
        dir = fixture("smollm2").display(),
        prompts = fixture("prompts/sharegpt.jsonl").display(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_pipeline_runs_on_llama_server_with_a_kill_in_each_phase() {
    let _alone = super::MACHINE.lock().await;
    let server = LlamaServer::start();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let out = dir.path().join("out");

    let mut daemon = RealDaemon::spawn(&state);
    let mut c = daemon.client().await;
    let tasks = todod_e2e::apply_plan(&mut c, &plan_file(&out, &server.url)).await;
    let (ended, kills) = run_killing_each(&mut daemon, &state, "real", &tasks).await;
    // The sweep and the generation run for many seconds on a real server: a
    // kill must have landed inside each, with work committed and not all of
    // it. The adaptation and tokenization of 100 records commit once and
    // end; `plan_apply` kills those mid-run, on inputs big enough to be.
    for (step, name) in [(1, "feasibility"), (2, "generation")] {
        assert!(
            kills.iter().any(|k| k.task == tasks[step]),
            "no kill landed inside the {name} run: {kills:?}"
        );
    }
    let result = |i: usize| -> Value { serde_json::from_str(&ended[i].result_json).unwrap() };

    // Adaptation: the 100 conversations of the sample, each once.
    let prompts = ids(&out.join("prompts.jsonl"));
    assert_eq!(prompts.len(), 100);
    assert_eq!(prompts.iter().collect::<BTreeSet<_>>().len(), 100);
    assert_eq!(result(0)["records"], prompts.len(), "{}", result(0));

    // Feasibility: a sweep, a level, a go.
    let feasibility = result(1);
    assert_eq!(feasibility["verdict"], "go", "{feasibility}");
    let chosen = feasibility["choice"]["concurrency"].as_u64().unwrap();
    assert!((1..=8).contains(&chosen));

    // Generation: every prompt once, answered or failed, never both.
    let completions = ids(&out.join("completions.jsonl"));
    let failures = ids(&out.join("completions.failures.jsonl"));
    let answered: BTreeSet<&String> = completions.iter().collect();
    assert_eq!(answered.len(), completions.len(), "a completion twice");
    assert!(failures.iter().all(|f| !answered.contains(f)));
    let all: BTreeSet<&String> = answered.iter().copied().chain(failures.iter()).collect();
    assert_eq!(all, prompts.iter().collect::<BTreeSet<_>>());
    let generation = result(2);
    assert_eq!(
        generation["records"],
        completions.len() as u64,
        "{generation}"
    );
    assert_eq!(generation["failed"], failures.len() as u64, "{generation}");

    // Tokenization: one sequence per completion, in the id order it wrote,
    // and each holds its completion's own tokens.
    let tokenized = result(3);
    let index = todod_e2e::megatron::read(&out.join("train"));
    let order: Vec<String> = std::fs::read_to_string(out.join("train.ids.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<String>(l).unwrap())
        .collect();
    assert_eq!(index.sequences.len(), order.len());
    assert_eq!(tokenized["records"], order.len() as u64, "{tokenized}");
    assert_eq!(
        order.iter().collect::<BTreeSet<_>>(),
        answered,
        "every completion tokenized once"
    );
    let text: BTreeMap<String, String> = std::fs::read_to_string(out.join("completions.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["id"].as_str().unwrap().to_string(),
                v["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    the_generated_ids_were_kept_and_checked(&out, &server.url, &generation, &tokenized);
    let tokenizer = todod_format::tokenizer::load_dir(&fixture("smollm2")).unwrap();
    for (id, sequence) in order.iter().zip(&index.sequences) {
        let content = text[id].as_str();
        if content.is_empty() {
            continue;
        }
        let own = tokenizer.tokenizer.encode(content, false).unwrap().ids;
        assert!(
            sequence.windows(own.len()).any(|w| w == own.as_slice()),
            "{id}: the completion's tokens are not in its sequence"
        );
    }
}

/// The generation asked llama.cpp's server for the ids it generated (its
/// log probabilities' ids) and every record kept them; the tokenization's
/// drift count is what the test finds itself in the Parquet file trainers
/// read: a record differs when the ids trained on (labels other than -100:
/// the answer and its end of turn) do not begin with the generated ids.
/// The differences are printed decoded, both sides, with the model's own
/// tokenizer.
fn the_generated_ids_were_kept_and_checked(
    out: &Path,
    url: &str,
    generation: &Value,
    tokenized: &Value,
) {
    let records: Vec<Value> = std::fs::read_to_string(out.join("completions.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kept = &generation["token_ids"];
    // A record whose server left out an id (llama.cpp does for a token
    // that ends inside a character) keeps none, and is counted apart.
    assert_eq!(
        kept["records_with_ids"].as_u64().unwrap() + kept["incomplete"].as_u64().unwrap(),
        records.len() as u64,
        "{kept}"
    );
    assert_eq!(kept["endpoints"][url], "llamacpp: asked", "{kept}");
    let generated: BTreeMap<String, Vec<u32>> = records
        .iter()
        .filter(|r| r.get("token_ids").is_some())
        .map(|r| {
            let ids: Vec<u32> = serde_json::from_value(r["token_ids"].clone()).unwrap();
            assert!(!ids.is_empty(), "{}: no ids", r["id"]);
            (r["id"].as_str().unwrap().to_string(), ids)
        })
        .collect();
    assert_eq!(
        generated.len() as u64,
        kept["records_with_ids"].as_u64().unwrap()
    );
    let decoder = tokenizers::Tokenizer::from_file(fixture("smollm2/tokenizer.json")).unwrap();
    let decode = |ids: &[u32]| decoder.decode(ids, false).unwrap();
    let rows = todod_e2e::parquet_rows::read_parquet(&out.join("train.parquet"));
    let mut differing = Vec::new();
    let mut checked = 0;
    for (id, input_ids, _, labels) in &rows {
        let Some(ids) = generated.get(id) else {
            continue;
        };
        checked += 1;
        let trained: Vec<u32> = input_ids
            .iter()
            .zip(labels)
            .filter(|(_, &label)| label != -100)
            .map(|(&t, _)| t as u32)
            .collect();
        if !trained.starts_with(ids) {
            differing.push(format!(
                "{id}: generated {:?}, trained {:?}",
                decode(ids),
                decode(&trained)
            ));
        }
    }
    let drift = &tokenized["drift"];
    eprintln!(
        "real_server: {} of {} records train on other tokens than llama-server generated \
         ({} returned incomplete ids){}",
        differing.len(),
        checked,
        kept["incomplete"],
        differing
            .iter()
            .take(3)
            .map(|d| format!("\n  {d}"))
            .collect::<String>()
    );
    assert_eq!(drift["checked"], checked, "{drift}");
    assert_eq!(
        drift["differing"],
        differing.len() as u64,
        "the tokenization's count against the test's own: {drift}\n{differing:#?}"
    );
}
