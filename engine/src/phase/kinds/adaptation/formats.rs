//! The shapes prompt sets arrive in, read into one: an id and a list of
//! messages. Plain logic, no I/O.
//!
//! - OpenAI messages: `{id, messages, tools?, tool_choice?, ...}`, messages
//!   as [`todod_format::messages`] reads them (tool calls, tool results, parts)
//! - OpenAI Batch API request lines: `{custom_id, method, url, body: {messages | prompt, tools?, ...}}`
//! - ShareGPT: `{id?, conversations: [{from: system|human|gpt|function_call|observation|..., value}], tools?}`
//! - Alpaca: `{instruction, input, output}`
//! - a plain prompt: `{id?, prompt}`
//! - text already rendered with a chat template: `{id, text}` (see `rendered`)
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::rendered::{self, Family};
use todod_format::messages::{self, Request, ToolArguments};

/// Which shape a line had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Openai,
    Batch,
    Sharegpt,
    Alpaca,
    Prompt,
    Rendered,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Openai => "openai",
            Format::Batch => "batch",
            Format::Sharegpt => "sharegpt",
            Format::Alpaca => "alpaca",
            Format::Prompt => "prompt",
            Format::Rendered => "rendered",
        }
    }
}

/// One prompt, whatever shape it came in: its messages in the chat API's
/// shape (see [`todod_format::messages`]) and the tools and options beside them.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    pub id: String,
    pub format: Format,
    pub messages: Vec<Value>,
    pub request: Request,
}

/// How lines are read: the format (or detected per line), how unknown
/// ShareGPT roles map, and which template family rendered text comes from.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    pub format: Option<Format>,
    pub role_map: BTreeMap<String, String>,
    pub family: Option<Family>,
    pub tool_arguments: ToolArguments,
}

/// The id of a line that names none: its line number, as a generation
/// names such a prompt (`line-N`), stable for the file.
pub fn derived_id(number: u64) -> String {
    format!("line-{number}")
}

/// The format of a parsed line, from its fields.
pub fn detect(object: &Map<String, Value>) -> Option<Format> {
    detect_by(|key| object.contains_key(key))
}

/// The format of a line whose fields `has` names.
fn detect_by(has: impl Fn(&str) -> bool) -> Option<Format> {
    if has("custom_id") && has("body") {
        Some(Format::Batch)
    } else if has("conversations") {
        Some(Format::Sharegpt)
    } else if has("instruction") {
        Some(Format::Alpaca)
    } else if has("messages") {
        Some(Format::Openai)
    } else if has("text") {
        Some(Format::Rendered)
    } else if has("prompt") {
        Some(Format::Prompt)
    } else {
        None
    }
}

/// The id of a line as the format names it, for finding duplicates before
/// the pass starts.
/// The id a line names, if any (a line without one is told apart by its
/// number).
///
/// The survey reads every line before the pass, so this skims it: the
/// fields `detect` looks at are only noted, the two ids kept, nothing else
/// built. It agrees with a full parse (a repeated key: the last one counts).
pub fn line_id(bytes: &[u8], reading: &Reading) -> Option<String> {
    let skim = Skim::of(bytes)?;
    let format = reading.format.or_else(|| skim.detect())?;
    let id = if format == Format::Batch {
        skim.custom_id
    } else {
        skim.id
    };
    id.as_ref().and_then(crate::phase::lines::id_text)
}

/// A JSON value read and dropped, checked as a full parse checks it (string
/// escapes, number ranges, nesting depth) but with nothing built: serde's
/// `IgnoredAny` skips without those checks, and a line a full parse refuses
/// must not lend its id to the survey.
struct Checked;

impl<'de> serde::Deserialize<'de> for Checked {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Checked, D::Error> {
        d.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> serde::de::Visitor<'de> for CheckedVisitor {
    type Value = Checked;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_borrowed_str<E>(self, _: &'de str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_string<E>(self, _: String) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_none<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_key::<std::borrow::Cow<'de, str>>()?.is_some() {
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

/// What `line_id` needs of a line: which of `detect`'s fields it has, and
/// its ids.
#[derive(Default)]
struct Skim {
    keys: u8,
    id: Option<Value>,
    custom_id: Option<Value>,
}

const DETECTED: [&str; 7] = [
    "custom_id",
    "body",
    "conversations",
    "instruction",
    "messages",
    "text",
    "prompt",
];

impl Skim {
    fn of(bytes: &[u8]) -> Option<Skim> {
        use serde::de::{Deserializer, MapAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Skim;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skim, A::Error> {
                let mut skim = Skim::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if let Some(i) = DETECTED.iter().position(|k| *k == key) {
                        skim.keys |= 1 << i;
                    }
                    match &*key {
                        "id" => skim.id = Some(map.next_value()?),
                        "custom_id" => skim.custom_id = Some(map.next_value()?),
                        _ => {
                            map.next_value::<Checked>()?;
                        }
                    }
                }
                Ok(skim)
            }
        }
        // Skipped strings are not checked for UTF-8; a full parse would
        // refuse the line, so this does too.
        let text = std::str::from_utf8(bytes).ok()?;
        let mut de = serde_json::Deserializer::from_str(text);
        let skim = de.deserialize_map(V).ok()?;
        de.end().ok()?;
        Some(skim)
    }

    fn has(&self, key: &str) -> bool {
        DETECTED
            .iter()
            .position(|k| *k == key)
            .is_some_and(|i| self.keys & (1 << i) != 0)
    }

    /// `detect`, on the noted fields.
    fn detect(&self) -> Option<Format> {
        detect_by(|key| self.has(key))
    }
}

fn id_of(object: &Map<String, Value>, format: Format, number: u64) -> Result<String, String> {
    let key = if format == Format::Batch {
        "custom_id"
    } else {
        "id"
    };
    match object.get(key) {
        None if format == Format::Batch => Err("custom_id: missing".into()),
        None => Ok(derived_id(number)),
        Some(v) => crate::phase::lines::id_text(v)
            .ok_or_else(|| format!("{key} is {v}, not a string or number")),
    }
}

fn string(value: &Value, field: &str) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{field}: expected a string"))
}

/// A chat API's messages, checked and kept as they came.
fn chat_messages(
    value: Option<&Value>,
    field: &str,
    reading: &Reading,
) -> Result<Vec<Value>, String> {
    let value = value.unwrap_or(&Value::Null);
    messages::check_messages(value, field, reading.tool_arguments)?;
    Ok(value.as_array().cloned().unwrap_or_default())
}

fn plain(role: &str, content: String) -> Value {
    json!({"role": role, "content": content})
}

/// ShareGPT's speaker names, as the common converters map them.
fn sharegpt_role(from: &str, map: &BTreeMap<String, String>) -> Option<String> {
    if let Some(to) = map.get(from) {
        return Some(to.clone());
    }
    match from {
        "system" => Some("system"),
        "human" | "user" => Some("user"),
        "gpt" | "assistant" | "chatgpt" | "bing" | "bard" => Some("assistant"),
        "tool" | "function" | "observation" | "function_response" => Some("tool"),
        _ => None,
    }
    .map(str::to_string)
}

/// ShareGPT's `tools`: a list, or the JSON text of one (LLaMA-Factory),
/// of function schemas; bare ones get the chat API's wrapper, as the
/// converters of such sets hand them to a template.
fn sharegpt_tools(value: Option<&Value>) -> Result<Option<Value>, String> {
    let tools = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) if text.trim().is_empty() => return Ok(None),
        Some(Value::String(text)) => {
            serde_json::from_str(text).map_err(|e| format!("tools: the text is not JSON ({e})"))?
        }
        Some(other) => other.clone(),
    };
    messages::check_tools(&tools, "tools")?;
    let wrapped = tools
        .as_array()
        .into_iter()
        .flatten()
        .map(|tool| {
            if tool.get("type").is_some() {
                tool.clone()
            } else {
                json!({"type": "function", "function": tool})
            }
        })
        .collect();
    Ok(Some(Value::Array(wrapped)))
}

/// A `function_call` turn's calls (LLaMA-Factory: the JSON text of one
/// `{name, arguments}` or a list of them), with ids made from the turn.
fn sharegpt_calls(value: &str, turn: usize) -> Result<Vec<Value>, String> {
    let at = format!("conversations[{turn}].value");
    let parsed: Value = serde_json::from_str(value)
        .map_err(|e| format!("{at}: a function_call turn holds no JSON call ({e})"))?;
    let calls = match parsed {
        Value::Array(calls) => calls,
        one => vec![one],
    };
    calls
        .into_iter()
        .enumerate()
        .map(|(k, call)| {
            let name = call
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{at}: call {k} names no function (\"name\")"))?;
            let arguments = match call.get("arguments").or_else(|| call.get("parameters")) {
                None | Some(Value::Null) => "{}".to_string(),
                Some(Value::String(text)) => text.clone(),
                Some(object) => messages::python_json(object),
            };
            Ok(json!({
                "id": format!("call_{turn}_{k}"), "type": "function",
                "function": {"name": name, "arguments": arguments},
            }))
        })
        .collect()
}

/// A ShareGPT conversation's turns as messages: `function_call` turns
/// become assistant tool calls, and the tool results after them answer
/// those calls in order. A tool turn with no call before it (Hermes style,
/// the call written in the assistant's text) is kept as a tool turn.
fn sharegpt(object: &Map<String, Value>, reading: &Reading) -> Result<Vec<Value>, String> {
    let turns = object
        .get("conversations")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty())
        .ok_or("conversations: expected a non-empty array of turns")?;
    let mut out: Vec<Value> = Vec::with_capacity(turns.len());
    let mut pending: std::collections::VecDeque<String> = Default::default();
    for (i, t) in turns.iter().enumerate() {
        let from = string(
            t.get("from").unwrap_or(&Value::Null),
            &format!("conversations[{i}].from"),
        )?;
        let value = string(
            t.get("value").unwrap_or(&Value::Null),
            &format!("conversations[{i}].value"),
        )?;
        if from == "function_call" && !reading.role_map.contains_key(&from) {
            let calls = sharegpt_calls(&value, i)?;
            pending.extend(
                calls
                    .iter()
                    .filter_map(|c| c["id"].as_str().map(str::to_string)),
            );
            out.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
            continue;
        }
        let role = sharegpt_role(&from, &reading.role_map).ok_or_else(|| {
            format!("conversations[{i}].from: unknown role {from:?} (map it with role_map)")
        })?;
        let mut message = plain(&role, value);
        if role == "tool" {
            if let Some(id) = pending.pop_front() {
                message["tool_call_id"] = json!(id);
            }
        } else {
            pending.clear();
        }
        out.push(message);
    }
    Ok(out)
}

/// Reads one line into a conversation, or why not.
pub fn read(bytes: &[u8], number: u64, reading: &Reading) -> Result<Conversation, String> {
    let object = crate::phase::lines::json_object(bytes)?;
    let format =
        match reading.format.or_else(|| detect(&object)) {
            Some(f) => f,
            None => return Err(
                "no messages, conversations, instruction, custom_id/body, prompt or text: not a \
                 prompt set format todod reads"
                    .into(),
            ),
        };
    let id = id_of(&object, format, number)?;
    let mut request = Request::default();
    let messages = match format {
        Format::Openai => {
            request = Request::read(&object, "")?;
            chat_messages(object.get("messages"), "messages", reading)?
        }
        Format::Batch => {
            let body = object
                .get("body")
                .and_then(Value::as_object)
                .ok_or("body: expected the request body object")?;
            request = Request::read(body, "body.")?;
            if let Some(messages) = body.get("messages") {
                chat_messages(Some(messages), "body.messages", reading)?
            } else if let Some(prompt) = body.get("prompt") {
                vec![plain("user", string(prompt, "body.prompt")?)]
            } else {
                return Err("body: no messages or prompt".into());
            }
        }
        Format::Sharegpt => {
            request.tools = sharegpt_tools(object.get("tools"))?;
            sharegpt(&object, reading)?
        }
        Format::Alpaca => {
            let instruction = string(
                object.get("instruction").unwrap_or(&Value::Null),
                "instruction",
            )?;
            let input = match object.get("input") {
                None | Some(Value::Null) => String::new(),
                Some(v) => string(v, "input")?,
            };
            // As the Alpaca recipe joins them: the instruction, then the input.
            let content = if input.trim().is_empty() {
                instruction
            } else {
                format!("{instruction}\n\n{input}")
            };
            vec![plain("user", content)]
        }
        Format::Prompt => vec![plain(
            "user",
            string(object.get("prompt").unwrap_or(&Value::Null), "prompt")?,
        )],
        Format::Rendered => {
            let text = string(object.get("text").unwrap_or(&Value::Null), "text")?;
            let family = reading
                .family
                .or_else(|| rendered::detect(&text))
                .ok_or("text: not rendered with a chat template todod can read back (ChatML, Llama 3, Mistral [INST])")?;
            rendered::parse(&text, family)?
                .into_iter()
                .map(|m| plain(&m.role, m.content))
                .collect()
        }
    };
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        if !messages::ROLES.contains(&role) {
            return Err(format!("messages[{i}].role: unknown role {role:?}"));
        }
    }
    Ok(Conversation {
        id,
        format,
        messages,
        request,
    })
}

#[cfg(test)]
mod skim_tests {
    use super::*;

    /// The id a full parse finds, as `line_id` did before it skimmed.
    fn parsed_id(bytes: &[u8], reading: &Reading) -> Option<String> {
        let value: Value = serde_json::from_slice(bytes).ok()?;
        let object = value.as_object()?;
        let format = reading.format.or_else(|| detect(object))?;
        let key = if format == Format::Batch {
            "custom_id"
        } else {
            "id"
        };
        object.get(key).and_then(crate::phase::lines::id_text)
    }

    #[test]
    fn skimming_finds_the_id_a_full_parse_finds() {
        let mut lines: Vec<Vec<u8>> = [
            r#"{"id": "a", "messages": []}"#,
            r#"{"id": 7, "conversations": [{"from": "human", "value": "x", "id": "inner"}]}"#,
            r#"{"custom_id": "c", "body": {"id": "no"}, "id": "other"}"#,
            r#"{"custom_id": "c", "messages": [], "id": "d"}"#,
            r#"{"id": "first", "id": "last", "prompt": "p"}"#,
            r#"{"id": "", "text": "t"}"#,
            r#"{"id": null, "instruction": "i"}"#,
            r#"{"id": "x"}"#,
            r#"{"id": "x", "prompt": "p"} trailing"#,
            r#"["id", "x"]"#,
            r#"{"id": "x", "prompt": "#,
            r#"{"id": "s", "messages": [{"role": "user", "content": "\ud800"}]}"#,
            r#"{"id": "n", "prompt": 1e400}"#,
            r#"{"id": "k", "prompt": "p", "x": "\q"}"#,
            "",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        // Nested past serde_json's depth limit of 128.
        lines.push(
            format!(
                r#"{{"id": "deep", "prompt": "p", "x": {}{}}}"#,
                "[".repeat(200),
                "]".repeat(200)
            )
            .into_bytes(),
        );
        let prompts = todod_fixtures::fixture("prompts");
        for file in [
            "openai_messages.jsonl",
            "sharegpt.jsonl",
            "alpaca.jsonl",
            "qwen3_rendered.jsonl",
            "bad_lines.jsonl",
        ] {
            let bytes = std::fs::read(prompts.join(file))
                .unwrap_or_else(|e| panic!("FIXTURES MISSING: {file}: {e}"));
            lines.extend(bytes.split(|b| *b == b'\n').map(<[u8]>::to_vec));
        }
        for format in [None, Some(Format::Batch), Some(Format::Sharegpt)] {
            let reading = Reading {
                format,
                ..Reading::default()
            };
            for line in &lines {
                assert_eq!(
                    line_id(line, &reading),
                    parsed_id(line, &reading),
                    "{format:?}: {}",
                    String::from_utf8_lossy(line)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_str(line: &str) -> Result<Conversation, String> {
        read(line.as_bytes(), 7, &Reading::default())
    }

    #[test]
    fn every_format_reads_into_messages() {
        let want = vec![json!({"role": "user", "content": "hi"})];
        let openai =
            read_str(r#"{"id": "a", "messages": [{"role": "user", "content": "hi"}]}"#).unwrap();
        assert_eq!(
            (openai.id.as_str(), openai.format, &openai.messages),
            ("a", Format::Openai, &want)
        );
        let batch = read_str(r#"{"custom_id": "b", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}"#).unwrap();
        assert_eq!((batch.id.as_str(), batch.format), ("b", Format::Batch));
        let share = read_str(r#"{"id": "c", "conversations": [{"from": "human", "value": "hi"}]}"#)
            .unwrap();
        assert_eq!(share.messages, want);
        let alpaca = read_str(r#"{"instruction": "Sum", "input": "1 2", "output": "3"}"#).unwrap();
        assert_eq!(alpaca.messages[0]["content"], "Sum\n\n1 2");
        assert_eq!(alpaca.id, "line-7");
        let prompt = read_str(r#"{"prompt": "hi"}"#).unwrap();
        assert_eq!(prompt.messages, want);
    }

    #[test]
    fn bad_lines_say_why() {
        for (line, words) in [
            ("", "blank"),
            ("{oops", "not JSON"),
            ("[1]", "not a JSON object"),
            (r#"{"id": "x", "weird": 1}"#, "not a prompt set format"),
            (
                r#"{"id": "x", "conversations": [{"from": "wizard", "value": "hi"}]}"#,
                "unknown role",
            ),
            (
                r#"{"id": "x", "messages": [{"role": "tool", "content": "r"}]}"#,
                "messages[0].tool_call_id: missing",
            ),
            (
                r#"{"id": "x", "messages": [{"role": "user", "content": "q"}], "tools": [{"type": "function"}]}"#,
                "tools[0]: not a function schema",
            ),
            (
                r#"{"custom_id": "x", "body": {"messages": [{"role": "user", "content": "q"}], "tools": {}}}"#,
                "body.tools: expected a list",
            ),
            (
                r#"{"id": "x", "messages": [{"role": "user", "content": 5}]}"#,
                "expected a string",
            ),
            (
                r#"{"id": null, "messages": [{"role": "user", "content": "x"}]}"#,
                "not a string or number",
            ),
        ] {
            let err = read_str(line).unwrap_err();
            assert!(err.contains(words), "{line:?}: {err}");
        }
        let mut reading = Reading::default();
        reading.role_map.insert("wizard".into(), "assistant".into());
        let ok = read(
            br#"{"id": "x", "conversations": [{"from": "human", "value": "a"}, {"from": "wizard", "value": "b"}]}"#,
            1,
            &reading,
        )
        .unwrap();
        assert_eq!(ok.messages[1]["role"], "assistant");
    }

    #[test]
    fn tools_and_options_come_along_from_every_format_that_has_them() {
        let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
        let line = json!({"id": "a", "messages": [{"role": "user", "content": "q"}],
            "tools": tools, "tool_choice": "auto", "parallel_tool_calls": false});
        let openai = read_str(&line.to_string()).unwrap();
        assert_eq!(openai.request.tools.as_ref(), Some(&tools));
        assert_eq!(openai.request.tool_choice, Some(json!("auto")));
        assert_eq!(openai.request.parallel_tool_calls, Some(json!(false)));
        let batch = json!({"custom_id": "b", "body": {"messages": [{"role": "user", "content": "q"}],
            "tools": tools, "tool_choice": "required"}});
        let batch = read_str(&batch.to_string()).unwrap();
        assert_eq!(batch.request.tools.as_ref(), Some(&tools));
        assert_eq!(batch.request.tool_choice, Some(json!("required")));
    }

    #[test]
    fn sharegpt_function_calls_become_tool_calls_answered_in_order() {
        // LLaMA-Factory's shape: tools as JSON text of bare schemas.
        let line = json!({"id": "s", "tools": "[{\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}]",
        "conversations": [
            {"from": "human", "value": "q"},
            {"from": "function_call", "value": "[{\"name\": \"f\", \"arguments\": {\"x\": 1}}, {\"name\": \"f\", \"arguments\": \"{}\"}]"},
            {"from": "observation", "value": "r0"},
            {"from": "observation", "value": "r1"},
            {"from": "gpt", "value": "done"},
        ]});
        let c = read_str(&line.to_string()).unwrap();
        assert_eq!(
            c.request.tools,
            Some(
                json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])
            )
        );
        assert_eq!(c.messages[1]["role"], "assistant");
        assert_eq!(c.messages[1]["content"], Value::Null);
        let calls = c.messages[1]["tool_calls"].as_array().unwrap();
        assert_eq!(
            calls[0]["function"],
            json!({"name": "f", "arguments": "{\"x\": 1}"})
        );
        assert_eq!(c.messages[2]["tool_call_id"], calls[0]["id"]);
        assert_eq!(c.messages[3]["tool_call_id"], calls[1]["id"]);
        todod_format::messages::check_messages(
            &Value::Array(c.messages.clone()),
            "messages",
            ToolArguments::Object,
        )
        .unwrap();
        let bad = json!({"conversations": [{"from": "human", "value": "q"},
            {"from": "function_call", "value": "not json"}]});
        assert!(read_str(&bad.to_string())
            .unwrap_err()
            .contains("conversations[1].value"));
    }
}
