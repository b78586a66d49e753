//! The ids a model generated, kept and checked (issue 48 parts 1 and 2): a
//! generation asks the server that says it is vLLM for them and keeps them
//! in each record (the answer's ids whole, the prompt's as count and hash),
//! streamed or not; a tokenization compares the ids it trains on for each
//! answer with them, counts the records that differ, shows the first
//! differences, and fails past `max_drift_share`; a server of another kind
//! is not asked, and `token_ids: "off"` asks nothing.
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use todod_e2e::fixtures::fixture;
use todod_e2e::mock_openai::{
    expected_content, expected_tool_calls, Dialect, Fault, MockOpenAi, MockTokenIds, Settings,
};
use todod_e2e::mock_token_ids as ids;
use todod_e2e::{create_phase, Client, TestDaemon};
use todod_e2e::{json_lines, result_of, run_phase_to_end};

const HERMES: &str = "chat_templates/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja";

/// `n` prompts offering a tool (the Hermes tool-use template wants
/// tools), every other one with `tool_choice: "none"`: the mock answers
/// those with text, the others with a call.
fn write_prompts(path: &Path, n: usize) -> Vec<Value> {
    let tool = json!({"type": "function", "function": {"name": "search",
        "description": "Searches the web", "parameters": {"type": "object",
        "properties": {"query": {"type": "string"}, "call": {"type": "integer"}},
        "required": ["query"]}}});
    let prompts: Vec<Value> = (0..n)
        .map(|i| {
            let mut line = json!({"id": format!("p{i}"), "tools": [tool],
                "messages": [{"role": "user", "content": format!("question {i} about rivers")}]});
            if i % 2 == 0 {
                line["tool_choice"] = json!("none");
            }
            line
        })
        .collect();
    let text: String = prompts.iter().map(|p| format!("{p}\n")).collect();
    std::fs::write(path, text).unwrap();
    prompts
}

fn generation(dir: &Path, url: &str, stream: bool, name: &str) -> Value {
    json!({"prompts": dir.join("prompts.jsonl"), "output": dir.join(format!("{name}.jsonl")),
           "endpoints": [url], "model": "mock-model", "max_tokens": 64, "concurrency": 8,
           "max_attempts": 3, "stream": stream})
}

fn tokenization(input: &Path, prefix: &Path) -> Value {
    json!({"input": input, "tokenizer": fixture("smollm2"), "output_prefix": prefix,
           "chat_template": fixture(HERMES), "mode": "conversation", "threads": 2})
}

/// What the mock's generated ids for `prompt` are, in `mode`.
fn expected_ids(prompt: &Value, mode: MockTokenIds) -> Vec<u32> {
    let mut body = json!({"messages": prompt["messages"], "tools": prompt["tools"]});
    if !prompt["tool_choice"].is_null() {
        body["tool_choice"] = prompt["tool_choice"].clone();
    }
    let input = prompt["messages"][0]["content"].as_str().unwrap();
    let text = ids::generated_text(&expected_content(input), &expected_tool_calls(&body), mode);
    ids::generated_ids(&text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_ids_are_kept_streamed_or_not_and_the_training_tokens_equal_them() {
    let mode = MockTokenIds::Hermes;
    let mock = MockOpenAi::start(Settings {
        dialect: Dialect::Vllm,
        token_ids: Some(mode),
        ..Settings::default()
    })
    .await;
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let prompts = write_prompts(&dir.path().join("prompts.jsonl"), 40);
    for stream in [false, true] {
        let name = if stream { "streamed" } else { "whole" };
        let task = run_phase_to_end(
            &mut c,
            name,
            "generation",
            &generation(dir.path(), &mock.url, stream, name),
        )
        .await;
        assert_eq!(task.status, "completed", "{name}: {}", task.error);
        let kept = &result_of(&task)["token_ids"];
        assert_eq!(kept["records_with_ids"], 40, "{name}: {kept}");
        assert_eq!(kept["with_prompt_hash"], 40, "{name}");
        assert_eq!(kept["incomplete"], 0, "{name}");
        assert_eq!(
            kept["endpoints"][&mock.url], "vllm: asked",
            "{name}: {kept}"
        );
        let records = json_lines(&dir.path().join(format!("{name}.jsonl")));
        assert_eq!(records.len(), 40);
        for record in &records {
            let prompt = &prompts[record["id"].as_str().unwrap()[1..]
                .parse::<usize>()
                .unwrap()];
            let want = expected_ids(prompt, mode);
            let got: Vec<u32> = serde_json::from_value(record["token_ids"].clone()).unwrap();
            assert_eq!(
                got, want,
                "{name} {}: the ids the server generated",
                record["id"]
            );
            let prompt_ids = ids::prompt_ids(prompt["messages"][0]["content"].as_str().unwrap());
            assert_eq!(record["prompt_token_ids"]["count"], prompt_ids.len());
            assert_eq!(
                record["prompt_token_ids"]["sha256"],
                todod_format::token_ids::sha256_of(&prompt_ids)
            );
        }
        assert_eq!(
            records
                .iter()
                .filter(|r| r["tool_calls"].is_array())
                .count(),
            20
        );

        let tokens = run_phase_to_end(
            &mut c,
            &format!("tok-{name}"),
            "tokenization",
            &tokenization(
                &dir.path().join(format!("{name}.jsonl")),
                &dir.path().join(format!("tok-{name}")),
            ),
        )
        .await;
        assert_eq!(
            tokens.status,
            "completed",
            "{name}: {} {:?}",
            tokens.error,
            json_lines(&dir.path().join(format!("tok-{name}.rejects.jsonl"))).first()
        );
        let drift = &result_of(&tokens)["drift"];
        assert_eq!(drift["checked"], 40, "{name}: {drift}");
        assert_eq!(drift["differing"], 0, "{name}: {drift}");
        assert_eq!(drift["examples"], json!([]), "{name}");
        // The mock says the prompt's ids are those of the input text alone,
        // not of the rendered prompt: every prompt differs, and is counted.
        assert_eq!(drift["prompts_checked"], 40, "{name}");
        assert_eq!(drift["prompts_differing"], 40, "{name}");
    }
    // Each run asked the server what it is once.
    assert_eq!(mock.model_lists(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_drift_is_counted_and_shown_and_fails_the_run_past_max_drift_share() {
    let mode = MockTokenIds::HermesCompactArguments;
    let mock = MockOpenAi::start(Settings {
        dialect: Dialect::Vllm,
        token_ids: Some(mode),
        ..Settings::default()
    })
    .await;
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let prompts = write_prompts(&dir.path().join("prompts.jsonl"), 40);
    let task = run_phase_to_end(
        &mut c,
        "gen",
        "generation",
        &generation(dir.path(), &mock.url, false, "out"),
    )
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let output = dir.path().join("out.jsonl");

    let tokens = run_phase_to_end(
        &mut c,
        "tok",
        "tokenization",
        &tokenization(&output, &dir.path().join("tok")),
    )
    .await;
    assert_eq!(tokens.status, "completed", "{}", tokens.error);
    let drift = &result_of(&tokens)["drift"];
    // The answers with tool calls were generated as {"query":"..."}, the
    // template writes {"query": "..."}: those 20 differ, the 20 plain
    // answers do not.
    assert_eq!(drift["checked"], 40, "{drift}");
    assert_eq!(drift["differing"], 20, "{drift}");
    assert!(
        tokens
            .summary
            .contains("20 of 40 train on other ids than their model generated"),
        "the status page's line: {}",
        tokens.summary
    );
    let examples = drift["examples"].as_array().unwrap();
    assert_eq!(examples.len(), 5, "a few are shown: {drift}");
    for example in examples {
        let id = example["id"].as_str().unwrap();
        let prompt = &prompts[id[1..].parse::<usize>().unwrap()];
        assert!(
            prompt["tool_choice"].is_null(),
            "{id} made no tool call: {example}"
        );
        // The generated ids part from the trained ones where the arguments'
        // JSON begins its spacing: the trained text goes on from there.
        let generated = expected_ids(prompt, mode);
        let at = example["index"].as_u64().unwrap() as usize;
        assert_eq!(
            example["generated"][EXAMPLE_BEFORE.min(at)],
            generated[at],
            "{example}"
        );
        assert_ne!(example["generated"], example["trained"], "{example}");
        let text = example["trained_text"].as_str().unwrap();
        assert!(
            text.contains(r#"": "#) || text.starts_with(' '),
            "{example}"
        );
    }

    let mut strict = tokenization(&output, &dir.path().join("tok-strict"));
    strict["max_drift_share"] = json!(0.25);
    let failed = run_phase_to_end(&mut c, "tok-strict", "tokenization", &strict).await;
    assert_eq!(failed.status, "failed");
    assert!(
        failed.error.contains("20 of 40 records (50.0 %)")
            && failed.error.contains("max_drift_share 0.25"),
        "{}",
        failed.error
    );
    // Training on the generated ids: every answer's trained ids are the
    // ids the model generated, then the template's newline after its end
    // of turn; the prompt's ids are the rendered ones, as before.
    let rendered_rows = parquet_of(&mut c, &output, dir.path(), "rendered", "rendered").await;
    let generated_rows = parquet_of(&mut c, &output, dir.path(), "generated", "generated").await;
    let newline = ids::smollm2().encode("\n", false).unwrap().ids;
    for (rendered, generated) in rendered_rows.iter().zip(&generated_rows) {
        let id = &rendered.0;
        assert_eq!(id, &generated.0);
        let prompt = &prompts[id[1..].parse::<usize>().unwrap()];
        let mut want = expected_ids(prompt, mode);
        want.extend(&newline);
        assert_eq!(trained(generated), want, "{id}");
        let untrained = |row: &todod_e2e::parquet_rows::Row| -> Vec<i32> {
            row.1
                .iter()
                .zip(&row.3)
                .filter(|(_, &l)| l == -100)
                .map(|(&t, _)| t)
                .collect()
        };
        assert_eq!(
            untrained(rendered),
            untrained(generated),
            "{id}: the prompt is rendered"
        );
        if prompt["tool_choice"].is_null() {
            assert_ne!(trained(rendered), want, "{id}: a planted drift");
        } else {
            assert_eq!(trained(rendered), want, "{id}: no drift");
        }
    }

    let mut lenient = tokenization(&output, &dir.path().join("tok-lenient"));
    lenient["max_drift_share"] = json!(0.5);
    let passed = run_phase_to_end(&mut c, "tok-lenient", "tokenization", &lenient).await;
    assert_eq!(passed.status, "completed", "{}", passed.error);
}

/// The Parquet rows of a tokenization of `input` with `answer_ids`.
async fn parquet_of(
    c: &mut Client,
    input: &Path,
    dir: &Path,
    name: &str,
    answer_ids: &str,
) -> Vec<todod_e2e::parquet_rows::Row> {
    let prefix = dir.join(format!("tok-{name}"));
    let mut spec = tokenization(input, &prefix);
    spec["answer_ids"] = json!(answer_ids);
    spec["formats"] = json!(["megatron", "parquet"]);
    let task = run_phase_to_end(c, &format!("tok-{name}"), "tokenization", &spec).await;
    assert_eq!(task.status, "completed", "{name}: {}", task.error);
    let from_generated = &result_of(&task)["answers_from_generated_ids"];
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}.manifest.json", prefix.display())).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["answer_ids"], answer_ids);
    if answer_ids == "generated" {
        assert_eq!(from_generated, 40, "{}", task.result_json);
        assert_eq!(manifest["answers_from_generated_ids"], 40);
    } else {
        assert!(from_generated.is_null(), "{}", task.result_json);
    }
    let mut rows = todod_e2e::parquet_rows::read_parquet(&PathBuf::from(format!(
        "{}.parquet",
        prefix.display()
    )));
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

/// The ids a row trains on (labels other than -100).
fn trained(row: &todod_e2e::parquet_rows::Row) -> Vec<u32> {
    row.1
        .iter()
        .zip(&row.3)
        .filter(|(_, &label)| label != -100)
        .map(|(&t, _)| t as u32)
        .collect()
}

/// How many ids before the first difference an example shows.
const EXAMPLE_BEFORE: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_another_kind_is_not_asked_and_off_asks_nothing() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 6);
    let task = run_phase_to_end(
        &mut c,
        "auto",
        "generation",
        &generation(dir.path(), &mock.url, true, "auto"),
    )
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let kept = &result_of(&task)["token_ids"];
    assert_eq!(kept["records_with_ids"], 0, "{kept}");
    let how = kept["endpoints"][&mock.url].as_str().unwrap();
    assert!(
        how.starts_with("other: not asked") && how.contains("\"mock\""),
        "{how}"
    );
    assert!(json_lines(&dir.path().join("auto.jsonl"))
        .iter()
        .all(|r| r.get("token_ids").is_none()));
    assert_eq!(mock.model_lists(), 1);

    let mut off = generation(dir.path(), &mock.url, true, "off");
    off["token_ids"] = json!("off");
    let task = run_phase_to_end(&mut c, "off", "generation", &off).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    assert!(
        result_of(&task).get("token_ids").is_none(),
        "{}",
        task.result_json
    );
    assert_eq!(mock.model_lists(), 1, "off asks no server what it is");
    assert!(mock
        .bodies()
        .iter()
        .all(|b| b.get("return_token_ids").is_none()));

    // A tokenization held to max_drift_share with nothing to check fails,
    // and says why.
    let mut held = tokenization(&dir.path().join("auto.jsonl"), &dir.path().join("tok-held"));
    held["max_drift_share"] = json!(0.1);
    let failed = run_phase_to_end(&mut c, "tok-held", "tokenization", &held).await;
    assert_eq!(failed.status, "failed");
    assert!(
        failed.error.contains("no record kept the ids"),
        "{}",
        failed.error
    );

    // Endpoints of two kinds get one body: neither is asked, and each says so.
    let vllm = MockOpenAi::start(Settings {
        dialect: Dialect::Vllm,
        token_ids: Some(MockTokenIds::Hermes),
        ..Settings::default()
    })
    .await;
    let mut mixed = generation(dir.path(), &mock.url, false, "mixed");
    mixed["endpoints"] = json!([vllm.url, mock.url]);
    let task = run_phase_to_end(&mut c, "mixed", "generation", &mixed).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let kept = &result_of(&task)["token_ids"];
    assert_eq!(kept["records_with_ids"], 0, "{kept}");
    let how = kept["endpoints"][&vllm.url].as_str().unwrap();
    assert!(
        how.contains("not asked: the endpoints are not all asked alike (vllm, other)"),
        "{how}"
    );
    assert!(vllm
        .bodies()
        .iter()
        .all(|b| b.get("return_token_ids").is_none()));

    let mut bad = generation(dir.path(), &mock.url, true, "bad");
    bad["token_ids"] = json!("always");
    let refused = create_phase(&mut c, "bad", "generation", &bad.to_string(), &[])
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("token_ids"), "{refused}");
    let mut contradictory =
        tokenization(&dir.path().join("auto.jsonl"), &dir.path().join("tok-bad"));
    contradictory["answer_ids"] = json!("generated");
    contradictory["reasoning"] = json!("drop");
    let refused = create_phase(
        &mut c,
        "tok-bad",
        "tokenization",
        &contradictory.to_string(),
        &[],
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("spec.answer_ids"), "{refused}");
}

/// vLLM's and SGLang's answers as they are today (issue 48 part 4): the
/// reasoning in `reasoning` (vLLM) or `reasoning_content` (SGLang) lands in
/// each record; the ids in vLLM's places, streamed or not, and in SGLang's
/// (`response_token_ids`, the prompt's in the choice) when not streamed;
/// a streamed chat is not asked of SGLang, which would refuse it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_dialect_lands_its_reasoning_and_ids_in_the_records() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let prompts = write_prompts(&dir.path().join("prompts.jsonl"), 8);
    for dialect in [Dialect::Vllm, Dialect::Sglang] {
        let mock = MockOpenAi::start(Settings {
            dialect,
            token_ids: Some(MockTokenIds::Hermes),
            ..Settings::default()
        })
        .await;
        for stream in [false, true] {
            let name = format!("{dialect:?}-{stream}").to_lowercase();
            mock.push(std::iter::repeat_n(Fault::Reasoning, prompts.len()));
            let task = run_phase_to_end(
                &mut c,
                &name,
                "generation",
                &generation(dir.path(), &mock.url, stream, &name),
            )
            .await;
            assert_eq!(task.status, "completed", "{name}: {}", task.error);
            let result = result_of(&task);
            assert_eq!(result["failed"], 0, "{name}: {result}");
            let records = json_lines(&dir.path().join(format!("{name}.jsonl")));
            assert_eq!(records.len(), prompts.len(), "{name}");
            for record in &records {
                let prompt = &prompts[record["id"].as_str().unwrap()[1..]
                    .parse::<usize>()
                    .unwrap()];
                let input = prompt["messages"][0]["content"].as_str().unwrap();
                assert_eq!(
                    record["reasoning"],
                    format!("thinking about {input}"),
                    "{name}"
                );
                assert_eq!(record["content"], expected_content(input), "{name}");
            }
            let kept = &result["token_ids"];
            let how = kept["endpoints"][&mock.url].as_str().unwrap();
            let asked = !(dialect == Dialect::Sglang && stream);
            if asked {
                assert_eq!(how, format!("{}: asked", dialect.owned_by()), "{name}");
                assert_eq!(kept["records_with_ids"], prompts.len(), "{name}: {kept}");
                assert_eq!(kept["with_prompt_hash"], prompts.len(), "{name}: {kept}");
                for record in &records {
                    let got: Vec<u32> =
                        serde_json::from_value(record["token_ids"].clone()).unwrap();
                    let input = record["messages"][0]["content"].as_str().unwrap();
                    assert_eq!(got, ids::generated_ids(&expected_content(input)), "{name}");
                }
            } else {
                assert!(
                    how.starts_with("sglang: not asked") && how.contains("streamed"),
                    "{how}"
                );
                assert_eq!(kept["records_with_ids"], 0, "{name}: {kept}");
            }
        }
    }
}
