//! Agentic data (tools, tool calls, tool results, reasoning, content parts)
//! through the phases, as a user runs them: the agentic prompt set adapted
//! with 8 real templates gives transformers' bytes (or the template's own
//! error) through the adaptation phase; its prompts keep their tools in
//! messages and Batch output; bad agentic lines are rejects with their
//! reason and nothing else changes; a generation keeps the tool calls it is
//! answered with, streamed or not, exactly once under kill -9; training
//! conversations tokenize with their tool calls trained on and their tool
//! results not; and a prompt set goes adaptation → generation →
//! tokenization with its tools and calls intact.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use todod_e2e::fixtures::fixture;
use todod_e2e::mock_openai::{
    expected_content, expected_tool_calls, input_of, Dialect, MockOpenAi, MockTokenIds, Settings,
};
use todod_e2e::mock_token_ids;
use todod_e2e::parquet_rows::read_parquet;
use todod_e2e::rng::TestRng;
use todod_e2e::{
    assert_kill_floor, create_phase, kill_repeatedly, proto, wait_task, RealDaemon, TestDaemon,
};
use todod_e2e::{json_lines, result_of, run_phase_to_end};
use todod_format::chat_template::{ChatTemplate, Clock, RenderInput};
use todod_format::tokenizer::Tokenizer;

/// The special tokens and clock transformers rendered the fixtures with.
fn fixture_render(template: &str, tool_arguments: &str) -> Value {
    json!({
        "chat_template": fixture(&format!("chat_templates/{template}")),
        "template_variables": {"bos_token": "<|bos|>", "eos_token": "<|eos|>",
                               "pad_token": "<|pad|>", "unk_token": "<|unk|>"},
        "now": "2026-01-15T09:30:00Z",
        "system_prompt": {"policy": "keep"},
        "trailing_assistant": "keep",
        "tool_arguments": tool_arguments,
        "max_rejected_share": 1.0,
    })
}

fn with(mut spec: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_agentic_rendering_comes_out_of_the_adaptation_phase_byte_for_byte() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let rows = json_lines(&fixture("prompts/tool_use_rendered.jsonl"));
    let mut by_template: HashMap<String, Vec<&Value>> = HashMap::new();
    for row in &rows {
        by_template
            .entry(row["template"].as_str().unwrap().to_string())
            .or_default()
            .push(row);
    }
    assert_eq!(by_template.len(), 8);
    // Rejects name their line.
    let ids: Vec<String> = json_lines(&fixture("prompts/tool_use.jsonl"))
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    let mut names: Vec<&String> = by_template.keys().collect();
    names.sort();
    for name in names {
        let rows = &by_template[name];
        let arguments = rows[0]["tool_arguments"].as_str().unwrap();
        let output = dir.path().join(format!("{name}.jsonl"));
        let rejects = dir.path().join(format!("{name}.rejects.jsonl"));
        let spec = with(
            fixture_render(name, arguments),
            json!({"input": fixture("prompts/tool_use.jsonl"), "output": output,
                   "rejects": rejects, "output_format": "rendered", "threads": 2}),
        );
        let task = run_phase_to_end(&mut c, name, "prompt_adaptation", &spec).await;
        assert_eq!(task.status, "completed", "{name}: {}", task.error);
        let written: HashMap<String, String> = json_lines(&output)
            .into_iter()
            .map(|l| {
                (
                    l["id"].as_str().unwrap().to_string(),
                    l["prompt"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let refused: HashMap<String, String> = json_lines(&rejects)
            .into_iter()
            .map(|r| {
                let line = r["line"].as_u64().unwrap() as usize;
                (
                    ids[line - 1].clone(),
                    r["reason"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let (mut rendered, mut raised) = (0, 0);
        for row in rows {
            let id = row["id"].as_str().unwrap();
            match (row.get("expected"), row.get("error")) {
                (Some(Value::String(want)), _) => {
                    rendered += 1;
                    let got = written
                        .get(id)
                        .unwrap_or_else(|| panic!("{name} {id}: rejected: {:?}", refused.get(id)));
                    assert_eq!(got, want, "{name} {id}");
                }
                (_, Some(Value::String(error))) => {
                    raised += 1;
                    // transformers says "TemplateError: <the template's words>".
                    let words = error.trim_start_matches("TemplateError: ");
                    let reason = refused
                        .get(id)
                        .unwrap_or_else(|| panic!("{name} {id}: rendered, expected {error}"));
                    assert!(reason.contains(words), "{name} {id}: {reason}");
                }
                _ => panic!("row without expected or error"),
            }
        }
        assert_eq!(written.len(), rendered, "{name}: nothing else written");
        assert_eq!(refused.len(), raised, "{name}: nothing else refused");
        let result = result_of(&task);
        assert_eq!(result["records"], rendered as u64, "{name}");
        assert_eq!(result["rejected"], raised as u64, "{name}");
        assert_eq!(result["tools"]["records_with_tools"], rendered as u64);
    }
}

/// The set's prompts (those that end with a user or tool turn).
fn prompts_of_the_set() -> Vec<Value> {
    json_lines(&fixture("prompts/tool_use.jsonl"))
        .into_iter()
        .filter(|l| l["messages"].as_array().unwrap().last().unwrap()["role"] != "assistant")
        .collect()
}

fn write_lines(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_keep_their_tools_and_calls_in_messages_and_batch_output() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let prompts = prompts_of_the_set();
    assert!(prompts.len() > 50, "{}", prompts.len());
    let input = dir.path().join("prompts.jsonl");
    // Each line also asks for a tool choice, which the output keeps.
    let asked: Vec<Value> = prompts
        .iter()
        .map(|p| {
            with(
                p.clone(),
                json!({"tool_choice": "auto", "parallel_tool_calls": true}),
            )
        })
        .collect();
    write_lines(&input, &asked);
    let keep = json!({"input": input, "system_prompt": {"policy": "keep"}, "threads": 2});
    let messages_out = dir.path().join("messages.jsonl");
    let task = run_phase_to_end(
        &mut c,
        "messages",
        "prompt_adaptation",
        &with(keep.clone(), json!({"output": messages_out})),
    )
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let written = json_lines(&messages_out);
    assert_eq!(
        written, asked,
        "messages output is the prompts as they came"
    );
    let calls: usize = asked
        .iter()
        .flat_map(|p| p["messages"].as_array().unwrap())
        .filter_map(|m| m["tool_calls"].as_array())
        .map(Vec::len)
        .sum();
    let result = result_of(&task);
    assert_eq!(result["tools"]["tool_calls"], calls as u64);
    assert_eq!(result["tools"]["records_with_tools"], asked.len() as u64);

    let batch_out = dir.path().join("batch.jsonl");
    let task = run_phase_to_end(
        &mut c,
        "batch",
        "prompt_adaptation",
        &with(
            keep,
            json!({"output": batch_out, "output_format": "batch",
                   "batch": {"model": "m", "params": {"max_tokens": 64}}}),
        ),
    )
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let batch = json_lines(&batch_out);
    assert_eq!(batch.len(), asked.len());
    for (line, prompt) in batch.iter().zip(&asked) {
        assert_eq!(line["custom_id"], prompt["id"]);
        let body = &line["body"];
        assert_eq!(body["messages"], prompt["messages"]);
        assert_eq!(body["tools"], prompt["tools"]);
        assert_eq!(body["tool_choice"], "auto");
        assert_eq!(body["parallel_tool_calls"], true);
        assert_eq!(
            (body["model"].as_str(), body["max_tokens"].as_u64()),
            (Some("m"), Some(64))
        );
    }
}

/// Good agentic lines and bad ones, each bad one with the words its reject
/// must say.
pub fn good_and_bad_agentic_lines() -> (Vec<Value>, Vec<(Value, &'static str)>) {
    let good: Vec<Value> = prompts_of_the_set().into_iter().take(6).collect();
    let base = good[0].clone();
    let mut bad_arguments = base.clone();
    bad_arguments["id"] = json!("bad-arguments");
    bad_arguments["messages"] = json!([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"city\": "}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]);
    let mut no_call_id = base.clone();
    no_call_id["id"] = json!("no-call-id");
    no_call_id["messages"] = json!([
        {"role": "user", "content": "q"},
        {"role": "tool", "content": "r"},
    ]);
    let mut image = base.clone();
    image["id"] = json!("image");
    image["messages"] = json!([{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]);
    let mut tools_not_schemas = base.clone();
    tools_not_schemas["id"] = json!("tools-not-schemas");
    tools_not_schemas["tools"] =
        json!([{"type": "function", "function": {"description": "no name"}}]);
    let mut tools_not_list = base;
    tools_not_list["id"] = json!("tools-not-list");
    tools_not_list["tools"] = json!({"get_weather": {}});
    let bad = vec![
        (
            bad_arguments,
            "messages[1].tool_calls[0].function.arguments: not JSON",
        ),
        (no_call_id, "messages[1].tool_call_id: missing"),
        (image, "messages[0].content[1]: an image_url part"),
        (
            tools_not_schemas,
            "tools[0]: a function schema needs a \"name\"",
        ),
        (tools_not_list, "tools: expected a list of function schemas"),
    ];
    (good, bad)
}

/// Writes good and bad lines interleaved; returns the file.
pub fn write_mixed(dir: &Path, good: &[Value], bad: &[(Value, &str)]) -> PathBuf {
    let mut all = Vec::new();
    for (i, g) in good.iter().enumerate() {
        all.push(g.clone());
        if let Some((b, _)) = bad.get(i) {
            all.push(b.clone());
        }
    }
    let path = dir.join("mixed.jsonl");
    write_lines(&path, &all);
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_agentic_lines_are_rejects_with_their_reason_and_the_rest_goes_through() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let (good, bad) = good_and_bad_agentic_lines();
    let input = write_mixed(dir.path(), &good, &bad);
    let output = dir.path().join("out.jsonl");
    let task = run_phase_to_end(
        &mut c,
        "mixed",
        "prompt_adaptation",
        &json!({"input": input, "output": output, "system_prompt": {"policy": "keep"},
                "max_rejected_share": 0.5}),
    )
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    assert_eq!(json_lines(&output), good, "the good lines, unchanged");
    let rejects = json_lines(&dir.path().join("out.jsonl.rejects.jsonl"));
    assert_eq!(rejects.len(), bad.len(), "{rejects:#?}");
    let input_lines = json_lines(&input);
    for (reject, (line, words)) in rejects.iter().zip(&bad) {
        let number = reject["line"].as_u64().unwrap() as usize;
        assert_eq!(input_lines[number - 1]["id"], line["id"]);
        let reason = reject["reason"].as_str().unwrap();
        assert!(reason.contains(words), "{}: {reason}", line["id"]);
    }
    assert_eq!(result_of(&task)["rejected"], bad.len() as u64);
}

/// A generation of `prompts` (in `dir/prompts.jsonl`) against `url`.
fn generation_spec(dir: &Path, url: &str, stream: bool) -> Value {
    json!({
        "prompts": dir.join("prompts.jsonl"), "output": dir.join("out.jsonl"),
        "endpoints": [url], "model": "mock-model", "max_tokens": 64,
        "concurrency": 8, "max_attempts": 3, "stream": stream,
    })
}

/// The request body the mock sees for a prompt line (what its answer is a
/// function of).
fn body_of(prompt: &Value) -> Value {
    let mut body = json!({"messages": prompt["messages"]});
    for key in ["tools", "tool_choice"] {
        if !prompt[key].is_null() {
            body[key] = prompt[key].clone();
        }
    }
    body
}

/// Holds each output record against its prompt: tool calls exactly as the
/// mock made them, the prompt's tools kept, every id once. Returns the
/// counts (records, tool-call answers, calls) the result must say.
fn check_records(out: &[Value], prompts: &[Value]) -> (u64, u64, u64) {
    let by_id: HashMap<&str, &Value> = prompts
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let (mut finishes, mut calls) = (0, 0);
    for record in out {
        let id = record["id"].as_str().unwrap();
        *seen
            .entry(
                by_id
                    .get_key_value(id)
                    .map(|(k, _)| *k)
                    .unwrap_or_else(|| panic!("{id}: not a prompt")),
            )
            .or_default() += 1;
        let prompt = by_id[id];
        let want = expected_tool_calls(&body_of(prompt));
        assert_eq!(record["messages"], prompt["messages"], "{id}");
        assert_eq!(record["tools"], prompt["tools"], "{id}");
        if want.is_empty() {
            assert!(record.get("tool_calls").is_none(), "{id}: {record}");
            let input = todod_e2e::mock_openai::input_of(&body_of(prompt));
            assert_eq!(record["content"], expected_content(&input), "{id}");
            assert_eq!(record["finish_reason"], "stop", "{id}");
        } else {
            assert_eq!(record["tool_calls"], Value::Array(want.clone()), "{id}");
            assert_eq!(
                record["content"], "",
                "{id}: a tool-call answer has no text"
            );
            assert_eq!(record["finish_reason"], "tool_calls", "{id}");
            finishes += 1;
            calls += want.len() as u64;
        }
    }
    assert_eq!(seen.len(), prompts.len(), "every prompt answered");
    assert!(seen.values().all(|n| *n == 1), "each once");
    (out.len() as u64, finishes, calls)
}

fn assert_counts(task: &proto::Task, counts: (u64, u64, u64)) {
    let result = result_of(task);
    assert_eq!(result["records"], counts.0, "{result}");
    assert_eq!(result["tool_call_finishes"], counts.1, "{result}");
    assert_eq!(result["tool_calls"], counts.2, "{result}");
    assert_eq!(
        task.progress.as_ref().map(|p| p.done as u64),
        Some(counts.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_keeps_the_tool_calls_it_is_answered_with_streamed_or_not() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let mut prompts = prompts_of_the_set();
    // One tool (a single call), tool_choice none (no call), no tools (text).
    prompts[0]["tools"] = json!([prompts[0]["tools"][0]]);
    prompts[1]["tool_choice"] = json!("none");
    prompts[2].as_object_mut().unwrap().remove("tools");
    for stream in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        write_lines(&dir.path().join("prompts.jsonl"), &prompts);
        let plan = format!("gen-stream-{stream}");
        let task = run_phase_to_end(
            &mut c,
            &plan,
            "generation",
            &generation_spec(dir.path(), &mock.url, stream),
        )
        .await;
        assert_eq!(task.status, "completed", "{}", task.error);
        let out = json_lines(&dir.path().join("out.jsonl"));
        let counts = check_records(&out, &prompts);
        assert_eq!(counts.1 as usize, prompts.len() - 2, "stream {stream}");
        assert!(counts.2 > counts.1, "parallel calls among them");
        assert_counts(&task, counts);
    }
    // Each request carried its prompt's tools and tool choice.
    let bodies = mock.bodies();
    assert_eq!(bodies.len(), 2 * prompts.len());
    for body in &bodies {
        let prompt = prompts
            .iter()
            .find(|p| p["messages"] == body["messages"])
            .expect("a prompt's messages");
        assert_eq!(body["tools"], prompt["tools"]);
        assert_eq!(body["tool_choice"], prompt["tool_choice"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_agentic_prompts_are_rejected_before_any_request() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let (good, bad) = good_and_bad_agentic_lines();
    let input = write_mixed(dir.path(), &good, &bad);
    std::fs::rename(&input, dir.path().join("prompts.jsonl")).unwrap();
    let task = run_phase_to_end(
        &mut c,
        "gen-bad",
        "generation",
        &generation_spec(dir.path(), &mock.url, true),
    )
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    check_records(&json_lines(&dir.path().join("out.jsonl")), &good);
    assert_eq!(mock.requests(), good.len(), "no request for a bad line");
    let rejects = json_lines(&dir.path().join("out.jsonl.rejects.jsonl"));
    assert_eq!(rejects.len(), bad.len());
    for (reject, (line, words)) in rejects.iter().zip(&bad) {
        let reason = reject["reason"].as_str().unwrap();
        assert!(reason.contains(words), "{}: {reason}", line["id"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_records_are_written_exactly_once_under_kill_9() {
    const COPIES: usize = 20;
    const KILLS: usize = 6;
    const MIN_KILLS: usize = 3;
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(40),
        keep_bodies: false,
        // The ids it generated too: the result's count of records that kept
        // them is held against the file after the kills.
        dialect: Dialect::Vllm,
        token_ids: Some(MockTokenIds::Hermes),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let set = prompts_of_the_set();
    let prompts: Vec<Value> = (0..COPIES)
        .flat_map(|copy| {
            set.iter().map(move |p| {
                with(
                    p.clone(),
                    json!({"id": format!("{}-{copy}", p["id"].as_str().unwrap())}),
                )
            })
        })
        .collect();
    write_lines(&dir.path().join("prompts.jsonl"), &prompts);
    let mut rng = TestRng::new("tool_call_records_are_written_exactly_once_under_kill_9");
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let spec = generation_spec(dir.path(), &mock.url, true);
    let id = create_phase(&mut c, "gen", "generation", &spec.to_string(), &[])
        .await
        .unwrap();
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
    let records = json_lines(&dir.path().join("out.jsonl"));
    let counts = check_records(&records, &prompts);
    assert_counts(&task, counts);
    // Every record kept the ids the mock generated for it, and the result
    // counts exactly the records of the file that hold them.
    let by_id: HashMap<&str, &Value> = prompts
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    for record in &records {
        let body = body_of(by_id[record["id"].as_str().unwrap()]);
        let text = mock_token_ids::generated_text(
            &expected_content(&input_of(&body)),
            &expected_tool_calls(&body),
            MockTokenIds::Hermes,
        );
        assert_eq!(
            record["token_ids"],
            json!(mock_token_ids::generated_ids(&text)),
            "{}",
            record["id"]
        );
    }
    let kept = &result_of(&task)["token_ids"];
    let with_ids = records.iter().filter(|r| r["token_ids"].is_array()).count();
    assert_eq!(kept["records_with_ids"], with_ids, "{kept}");
    assert_eq!(kept["records_with_ids"], records.len(), "{kept}");
    let with_hash = records
        .iter()
        .filter(|r| r["prompt_token_ids"].is_object())
        .count();
    assert_eq!(kept["with_prompt_hash"], with_hash, "{kept}");
    println!("{kills} kills, {} tool-call records, each once", counts.1);
}

fn smollm2() -> std::sync::Arc<dyn Tokenizer> {
    todod_format::tokenizer::load_dir(&fixture("smollm2"))
        .unwrap()
        .tokenizer
}

/// The byte ranges of `full` whose tokens are trained on (label not -100).
fn trained_ranges(tokenizer: &dyn Tokenizer, full: &str, labels: &[i64]) -> Vec<(usize, usize)> {
    let enc = tokenizer.encode(full, true).unwrap();
    assert_eq!(enc.offsets.len(), labels.len());
    enc.offsets
        .iter()
        .zip(labels)
        .filter(|(_, l)| **l != -100)
        .map(|(o, _)| *o)
        .collect()
}

fn text_of(full: &str, ranges: &[(usize, usize)]) -> String {
    let mut covered = vec![false; full.len()];
    for &(s, e) in ranges {
        covered[s..e].iter_mut().for_each(|c| *c = true);
    }
    let bytes: Vec<u8> = full
        .bytes()
        .zip(&covered)
        .filter(|(_, c)| **c)
        .map(|(b, _)| b)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The names of the calls an assistant turn makes.
fn call_names(turn: &Value) -> Vec<String> {
    turn["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

const QWEN3: &str = "Qwen-Qwen3-0.6B.jinja";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn training_conversations_train_on_their_tool_calls_and_never_on_tool_results() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    let training: Vec<Value> = json_lines(&fixture("prompts/tool_use.jsonl"))
        .into_iter()
        .filter(|l| l["messages"].as_array().unwrap().last().unwrap()["role"] == "assistant")
        .collect();
    assert!(training.len() > 50);
    let input = dir.path().join("train.jsonl");
    write_lines(&input, &training);
    // transformers' renderings of the whole conversations: what the tokens
    // must be of.
    let golden: HashMap<String, String> = json_lines(&fixture("prompts/tool_use_rendered.jsonl"))
        .into_iter()
        .filter(|r| r["template"] == QWEN3)
        .filter_map(|r| {
            Some((
                r["id"].as_str()?.to_string(),
                r["expected"].as_str()?.to_string(),
            ))
        })
        .collect();
    let prefix = dir.path().join("tok");
    let spec = json!({"input": input, "tokenizer": fixture("smollm2"), "output_prefix": prefix,
        "chat_template": fixture(&format!("chat_templates/{QWEN3}")),
        "mode": "conversation", "train_on": "all", "formats": ["parquet"], "threads": 2});
    let task = run_phase_to_end(&mut c, "tok", "tokenization", &spec).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let rows = read_parquet(&PathBuf::from(format!("{}.parquet", prefix.display())));
    assert_eq!(rows.len(), training.len());
    assert_eq!(result_of(&task)["records"], training.len() as u64);
    let tokenizer = smollm2();
    let (mut with_calls, mut trained_total) = (0, 0);
    for ((id, input_ids, _, labels), conversation) in rows.iter().zip(&training) {
        assert_eq!(id, conversation["id"].as_str().unwrap());
        let full = &golden[id];
        let ids: Vec<i32> = tokenizer
            .encode(full, false)
            .unwrap()
            .ids
            .iter()
            .map(|&i| i as i32)
            .collect();
        assert_eq!(
            input_ids, &ids,
            "{id}: the tokens of transformers' rendering"
        );
        // Every assistant turn is trained on (train_on all), from after its
        // header to its end; every tool result and user or system turn is
        // not.
        let header = "<|im_start|>";
        let starts: Vec<usize> = full.match_indices(header).map(|(at, _)| at).collect();
        let assistant: Vec<(usize, usize)> = starts
            .iter()
            .enumerate()
            .filter(|(_, &at)| full[at + header.len()..].starts_with("assistant\n"))
            .map(|(k, &at)| {
                let end = starts.get(k + 1).copied().unwrap_or(full.len());
                (at + header.len() + "assistant\n".len(), end)
            })
            .collect();
        let ranges = trained_ranges(&*tokenizer, full, labels);
        for &(s, _) in &ranges {
            assert!(
                assistant.iter().any(|&(a, b)| s >= a && s < b),
                "{id}: a trained token at {s} outside the assistant turns: {:?}",
                &full[s..]
            );
        }
        let trained = text_of(full, &ranges);
        let turns: Vec<&Value> = conversation["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .collect();
        assert_eq!(
            trained.matches("<|im_end|>").count(),
            turns.len(),
            "{id}: {trained:?}"
        );
        let names: Vec<String> = turns.iter().flat_map(|t| call_names(t)).collect();
        assert_eq!(
            trained.matches("<tool_call>").count(),
            names.len(),
            "{id}: {trained:?}"
        );
        for name in &names {
            assert!(
                trained.contains(&format!("\"name\": \"{name}\"")),
                "{id}: {name} in {trained:?}"
            );
        }
        assert!(
            !trained.contains("<tool_response>"),
            "{id}: a tool result trained on"
        );
        with_calls += usize::from(!names.is_empty());
        trained_total += labels.iter().filter(|&&l| l != -100).count();
    }
    assert!(with_calls > 0, "some conversations end with a tool call");
    assert_eq!(result_of(&task)["trained_tokens"], trained_total as u64);
}

/// Renders `messages` (+ `tools`) with the fixture template as the
/// tokenization must: normalised as vLLM hands them to a text template.
fn render_qwen3(messages: &Value, tools: Option<&Value>) -> String {
    let source = std::fs::read_to_string(fixture(&format!("chat_templates/{QWEN3}"))).unwrap();
    let template = ChatTemplate::from_source(&source).unwrap();
    let normalised = todod_format::messages::for_template(
        messages.as_array().unwrap(),
        todod_format::messages::ToolArguments::Object,
    );
    template
        .render(&RenderInput {
            messages: &normalised,
            tools,
            documents: None,
            add_generation_prompt: false,
            variables: &serde_json::Map::new(),
            now: Clock::at_unix(0),
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agentic_set_goes_through_adaptation_generation_and_tokenization_intact() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let dir = tempfile::tempdir().unwrap();
    // The whole set: the adaptation drops the trailing assistant turns of
    // the training conversations, so every line becomes a prompt.
    let prompts = dir.path().join("prompts.jsonl");
    let adapted = run_phase_to_end(
        &mut c,
        "adapt",
        "prompt_adaptation",
        &json!({"input": fixture("prompts/tool_use.jsonl"), "output": prompts,
                "system_prompt": {"policy": "keep"}, "threads": 2}),
    )
    .await;
    assert_eq!(adapted.status, "completed", "{}", adapted.error);
    let set = json_lines(&prompts);
    assert_eq!(set.len(), 200);
    let generated = run_phase_to_end(
        &mut c,
        "gen",
        "generation",
        &generation_spec(dir.path(), &mock.url, true),
    )
    .await;
    assert_eq!(generated.status, "completed", "{}", generated.error);
    let records = json_lines(&dir.path().join("out.jsonl"));
    let counts = check_records(&records, &set);
    assert_eq!(
        counts.1, 200,
        "every prompt offers tools: every answer is a call"
    );
    let prefix = dir.path().join("tok");
    let tokenized = run_phase_to_end(
        &mut c,
        "tok",
        "tokenization",
        &json!({"input": dir.path().join("out.jsonl"), "tokenizer": fixture("smollm2"),
                "output_prefix": prefix, "chat_template": fixture(&format!("chat_templates/{QWEN3}")),
                "mode": "conversation", "formats": ["parquet"], "threads": 2}),
    )
    .await;
    assert_eq!(tokenized.status, "completed", "{}", tokenized.error);
    assert_eq!(result_of(&tokenized)["records"], 200);
    let rows = read_parquet(&PathBuf::from(format!("{}.parquet", prefix.display())));
    let by_id: HashMap<&str, &Value> = records
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r))
        .collect();
    let tokenizer = smollm2();
    for (id, input_ids, _, labels) in &rows {
        let record = by_id[id.as_str()];
        // The answer is an assistant turn with the calls the model made.
        let mut messages = record["messages"].as_array().unwrap().clone();
        messages
            .push(json!({"role": "assistant", "content": "", "tool_calls": record["tool_calls"]}));
        let full = render_qwen3(&Value::Array(messages.clone()), record.get("tools"));
        assert!(
            full.contains("<tools>"),
            "{id}: the tools reach the template"
        );
        let ids: Vec<i32> = tokenizer
            .encode(&full, false)
            .unwrap()
            .ids
            .iter()
            .map(|&i| i as i32)
            .collect();
        assert_eq!(input_ids, &ids, "{id}");
        let trained = text_of(&full, &trained_ranges(&*tokenizer, &full, labels));
        let names = call_names(messages.last().unwrap());
        assert_eq!(
            trained.matches("<tool_call>").count(),
            names.len(),
            "{id}: {trained:?}"
        );
        for call in record["tool_calls"].as_array().unwrap() {
            // Qwen3 prints the parsed arguments with tojson.
            let args: Value =
                serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
            assert!(trained.contains(&format!(
                "\"name\": \"{}\"",
                call["function"]["name"].as_str().unwrap()
            )));
            assert!(
                trained.contains(&args["query"].to_string()),
                "{id}: {trained:?}"
            );
        }
        assert!(!trained.contains("<tool_response>"), "{id}");
    }
}
