//! Agentic data (tools, tool calls, tool results, reasoning, content parts)
//! through the phases, as a user runs them: the agentic prompt set adapted
//! with 8 real templates gives transformers' bytes (or the template's own
//! error) through the adaptation phase; its prompts keep their tools in
//! messages and Batch output; bad agentic lines are rejects with their
//! reason and nothing else changes.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use todod_e2e::fixtures::fixture;
use todod_e2e::{create_phase, proto, wait_task, Client, TestDaemon};

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn run_phase(c: &mut Client, plan: &str, kind: &str, spec: &Value) -> proto::Task {
    let id = create_phase(c, plan, kind, &spec.to_string(), &[])
        .await
        .unwrap_or_else(|e| panic!("create {plan}: {e}"));
    wait_task(c, plan, &id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await
}

fn result(task: &proto::Task) -> Value {
    serde_json::from_str(&task.result_json).unwrap_or(Value::Null)
}

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
    let rows = lines(&fixture("prompts/tool_use_rendered.jsonl"));
    let mut by_template: HashMap<String, Vec<&Value>> = HashMap::new();
    for row in &rows {
        by_template
            .entry(row["template"].as_str().unwrap().to_string())
            .or_default()
            .push(row);
    }
    assert_eq!(by_template.len(), 8);
    // Rejects name their line.
    let ids: Vec<String> = lines(&fixture("prompts/tool_use.jsonl"))
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
        let task = run_phase(&mut c, name, "prompt_adaptation", &spec).await;
        assert_eq!(task.status, "completed", "{name}: {}", task.error);
        let written: HashMap<String, String> = lines(&output)
            .into_iter()
            .map(|l| {
                (
                    l["id"].as_str().unwrap().to_string(),
                    l["prompt"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let refused: HashMap<String, String> = lines(&rejects)
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
        let result = result(&task);
        assert_eq!(result["records"], rendered as u64, "{name}");
        assert_eq!(result["rejected"], raised as u64, "{name}");
        assert_eq!(result["tools"]["records_with_tools"], rendered as u64);
    }
}

/// The set's prompts (those that end with a user or tool turn).
fn prompts_of_the_set() -> Vec<Value> {
    lines(&fixture("prompts/tool_use.jsonl"))
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
    let task = run_phase(
        &mut c,
        "messages",
        "prompt_adaptation",
        &with(keep.clone(), json!({"output": messages_out})),
    )
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let written = lines(&messages_out);
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
    let result = result(&task);
    assert_eq!(result["tools"]["tool_calls"], calls as u64);
    assert_eq!(result["tools"]["records_with_tools"], asked.len() as u64);

    let batch_out = dir.path().join("batch.jsonl");
    let task = run_phase(
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
    let batch = lines(&batch_out);
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
    let task = run_phase(
        &mut c,
        "mixed",
        "prompt_adaptation",
        &json!({"input": input, "output": output, "system_prompt": {"policy": "keep"},
                "max_rejected_share": 0.5}),
    )
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    assert_eq!(lines(&output), good, "the good lines, unchanged");
    let rejects = lines(&dir.path().join("out.jsonl.rejects.jsonl"));
    assert_eq!(rejects.len(), bad.len(), "{rejects:#?}");
    let input_lines = lines(&input);
    for (reject, (line, words)) in rejects.iter().zip(&bad) {
        let number = reject["line"].as_u64().unwrap() as usize;
        assert_eq!(input_lines[number - 1]["id"], line["id"]);
        let reason = reject["reason"].as_str().unwrap();
        assert!(reason.contains(words), "{}: {reason}", line["id"]);
    }
    assert_eq!(result(&task)["rejected"], bad.len() as u64);
}
