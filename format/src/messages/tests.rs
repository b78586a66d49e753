use std::collections::HashMap;

use serde_json::{json, Value};

use super::*;
use crate::chat_template::{ChatTemplate, Clock, RenderInput};

fn check(messages: Value) -> Result<(), String> {
    check_messages(&messages, "messages", ToolArguments::Object)
}

#[test]
fn agentic_messages_are_taken_as_they_come() {
    check(json!([
        {"role": "system", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": null, "reasoning": "hm",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "ok"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "g", "arguments": {"y": [2]}}}]},
        {"role": "developer", "content": "d", "extra": {"kept": true}},
    ]))
    .unwrap();
}

#[test]
fn what_cannot_be_a_conversation_is_refused_with_the_field() {
    for (messages, words) in [
        (json!([]), "messages: expected a non-empty array"),
        (json!([5]), "messages[0]: expected a message object"),
        (json!([{"content": "x"}]), "messages[0].role: missing"),
        (
            json!([{"role": "wizard", "content": "x"}]),
            "unknown role \"wizard\"",
        ),
        (
            json!([{"role": "user", "content": 42}]),
            "messages[0].content: expected a string",
        ),
        (
            json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]),
            "messages[0].content[0]: an image_url part; todod renders text only",
        ),
        (
            json!([{"role": "user", "content": [{"type": "text"}]}]),
            "messages[0].content[0].text",
        ),
        (
            json!([{"role": "tool", "content": "r"}]),
            "messages[0].tool_call_id: missing",
        ),
        (
            json!([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [
                {"id": "a", "function": {"name": "f", "arguments": "{\"x\": "}}]}]),
            "messages[1].tool_calls[0].function.arguments: not JSON",
        ),
        (
            json!([{"role": "assistant", "tool_calls": [{"id": "a", "function": {"arguments": "{}"}}]}]),
            "messages[0].tool_calls[0].function.name",
        ),
        (
            json!([{"role": "user", "content": "q", "tool_calls": []}]),
            "only an assistant turn makes tool calls",
        ),
        (
            json!([{"role": "assistant", "tool_calls": {"id": "a"}}]),
            "messages[0].tool_calls: expected a list",
        ),
    ] {
        let err = check(messages.clone()).unwrap_err();
        assert!(err.contains(words), "{messages}: {err}");
    }
    // Text arguments are not parsed for templates that print them as text.
    let text_args = json!([{"role": "assistant", "tool_calls": [
        {"id": "a", "function": {"name": "f", "arguments": "{\"x\": "}}]}]);
    check_messages(&text_args, "messages", ToolArguments::Text).unwrap();
}

#[test]
fn tools_must_be_a_list_of_function_schemas() {
    let wrapped =
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    check_tools(&wrapped, "tools").unwrap();
    check_tools(&json!([{"name": "f", "description": "bare"}]), "tools").unwrap();
    for (tools, words) in [
        (
            json!({"name": "f"}),
            "tools: expected a list of function schemas",
        ),
        (json!(["f"]), "tools[0]: not a function schema"),
        (
            json!([{"type": "function"}]),
            "tools[0]: not a function schema",
        ),
        (
            json!([{"type": "retrieval"}]),
            "tools[0].type: \"retrieval\"",
        ),
        (json!([{"description": "no name"}]), "needs a \"name\""),
        (json!([{"name": "f", "parameters": "x"}]), "parameters"),
    ] {
        let err = check_tools(&tools, "tools").unwrap_err();
        assert!(err.contains(words), "{tools}: {err}");
    }
}

#[test]
fn the_template_gets_what_vllm_hands_a_text_template() {
    let messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
        json!({"role": "assistant", "content": null, "reasoning": "r", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": \"é\"}"}}]}),
    ];
    let object = for_template(&messages, ToolArguments::Object);
    assert_eq!(object[0]["content"], "a\nb");
    assert_eq!(object[1]["content"], "");
    assert_eq!(object[1]["reasoning_content"], "r");
    // Parsed in the order given (a template's tojson keeps it).
    let args = &object[1]["tool_calls"][0]["function"]["arguments"];
    assert_eq!(
        args.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["z", "a"]
    );
    let text = for_template(
        &[json!({"role": "assistant", "tool_calls": [
        {"function": {"name": "f", "arguments": {"z": 1, "a": "é"}}}]})],
        ToolArguments::Text,
    );
    assert_eq!(
        text[0]["tool_calls"][0]["function"]["arguments"],
        "{\"z\": 1, \"a\": \"\\u00e9\"}"
    );
}

/// The time and special tokens transformers rendered the fixtures with.
fn fixture_input<'a>(
    messages: &'a Value,
    tools: Option<&'a Value>,
    add_generation_prompt: bool,
    variables: &'a Map<String, Value>,
) -> RenderInput<'a> {
    RenderInput {
        messages,
        tools,
        documents: None,
        add_generation_prompt,
        variables,
        now: Clock::Fixed(
            chrono::NaiveDateTime::parse_from_str("2026-01-15T09:30:00", "%Y-%m-%dT%H:%M:%S")
                .unwrap(),
        ),
    }
}

/// Every row of `tool_use_rendered.jsonl` (transformers' renderings of the
/// agentic set with 8 templates) from the set's conversations normalised
/// here: the bytes where it rendered, the template's own error where it
/// raised.
#[test]
fn the_agentic_set_renders_as_transformers_renders_it() {
    let prompts = todod_fixtures::fixture("prompts");
    let conversations: HashMap<String, Value> =
        std::fs::read_to_string(prompts.join("tool_use.jsonl"))
            .expect("FIXTURES MISSING: tool_use.jsonl")
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["id"].as_str().unwrap().to_string(), v)
            })
            .collect();
    let rows = std::fs::read_to_string(prompts.join("tool_use_rendered.jsonl"))
        .expect("FIXTURES MISSING: tool_use_rendered.jsonl");
    let templates_dir = todod_fixtures::fixture("chat_templates");
    let mut templates: HashMap<String, ChatTemplate> = HashMap::new();
    let variables: Map<String, Value> = json!({"bos_token": "<|bos|>", "eos_token": "<|eos|>",
        "pad_token": "<|pad|>", "unk_token": "<|unk|>"})
    .as_object()
    .unwrap()
    .clone();
    let (mut total, mut failures) = (0, Vec::new());
    for line in rows.lines() {
        total += 1;
        let row: Value = serde_json::from_str(line).unwrap();
        let name = row["template"].as_str().unwrap();
        let template = templates.entry(name.to_string()).or_insert_with(|| {
            let source = std::fs::read_to_string(templates_dir.join(name)).unwrap();
            ChatTemplate::from_source(&source).unwrap()
        });
        let conversation = &conversations[row["id"].as_str().unwrap()];
        let arguments: ToolArguments =
            serde_json::from_value(row["tool_arguments"].clone()).unwrap();
        check_messages(&conversation["messages"], "messages", arguments).unwrap();
        check_tools(&conversation["tools"], "tools").unwrap();
        let messages = for_template(conversation["messages"].as_array().unwrap(), arguments);
        let got = template.render(&fixture_input(
            &messages,
            Some(&conversation["tools"]),
            row["add_generation_prompt"].as_bool().unwrap(),
            &variables,
        ));
        let label = format!("{} / {name}", row["id"]);
        match (got, row.get("expected"), row.get("error")) {
            (Ok(text), Some(Value::String(want)), _) if text == *want => {}
            (
                Err(crate::chat_template::RenderError::Raised(message)),
                _,
                Some(Value::String(e)),
            ) if e.ends_with(&message) => {}
            (got, _, _) => failures.push(format!("{label}: got {got:?}")),
        }
    }
    assert_eq!(total, 1600);
    assert!(
        failures.is_empty(),
        "{} of {total} differ:\n{}",
        failures.len(),
        failures[..failures.len().min(5)].join("\n")
    );
}
