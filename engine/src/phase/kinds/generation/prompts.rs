//! Reading a prompt file line by line: each line becomes a prompt or a
//! rejection with its line number and reason. Nothing here holds more than
//! one line, so a file of any size streams through.
use std::borrow::Cow;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use todod_inference::Api;
use todod_format::messages::{self, Request, ToolArguments};

/// Lines longer than this are rejected without being read.
pub const MAX_LINE_BYTES: usize = crate::phase::lines::MAX_PROMPT_LINE_BYTES;

/// One usable line.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub id: String,
    /// Its line in the prompt file (for a retry, the line the failed prompt
    /// came from, which the failures file keeps).
    pub line: u64,
    /// `messages` for chat, the `prompt` string for completions, as the JSON
    /// text the line had: sent on without being rebuilt.
    pub input: Box<RawValue>,
    /// For chat, the line's own request fields (`messages::REQUEST_FIELDS`),
    /// sent with its request as they came.
    pub fields: Vec<(&'static str, Box<RawValue>)>,
}

/// A line that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub line: u64,
    pub reason: String,
}

/// The fields of a prompt line todod reads; the rest is skipped unparsed.
#[derive(Default)]
struct Fields<'a> {
    id: Option<Value>,
    line: Option<Value>,
    messages: Option<&'a RawValue>,
    prompt: Option<&'a RawValue>,
    request: [Option<&'a RawValue>; 4],
}

struct FieldsSeed<'f>(&'f str);

impl<'de> DeserializeSeed<'de> for FieldsSeed<'_> {
    type Value = Fields<'de>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Fields<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldsSeed<'_> {
    type Value = Fields<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
        let mut fields = Fields::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            // As a JSON object reads: the last of a repeated key wins.
            if key == self.0 {
                fields.id = Some(map.next_value()?);
            } else if key == "messages" {
                fields.messages = Some(map.next_value()?);
            } else if key == "prompt" {
                fields.prompt = Some(map.next_value()?);
            } else if key == "line" {
                fields.line = Some(map.next_value()?);
            } else if let Some(i) = messages::REQUEST_FIELDS.iter().position(|k| *k == key) {
                fields.request[i] = Some(map.next_value()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(fields)
    }
}

/// Parses line `line` (1-based) of a prompt file for `api`; the id comes from
/// `id_field`, or else is the line number. With `carry_line`, a `line` field
/// of the record names its original line (a failures file being retried).
pub fn parse(
    bytes: &[u8],
    line: u64,
    api: Api,
    id_field: &str,
    carry_line: bool,
) -> Result<Prompt, Rejected> {
    let reject = |reason: String| Rejected { line, reason };
    // Read field by field (a prompt's big parts stay raw JSON text).
    let text = crate::phase::lines::line_text(bytes).map_err(reject)?;
    let mut de = serde_json::Deserializer::from_str(text);
    let fields = FieldsSeed(id_field)
        .deserialize(&mut de)
        .and_then(|f| de.end().map(|()| f))
        .map_err(|e| {
            if e.is_data() {
                reject("not a JSON object".into())
            } else {
                reject(format!("not JSON: {e}"))
            }
        })?;
    let id = match &fields.id {
        None => format!("line-{line}"),
        Some(v) => crate::phase::lines::id_text(v)
            .ok_or_else(|| reject(format!("{id_field} is {v}, not a string or number")))?,
    };
    let mut request_fields = Vec::new();
    let input = match api {
        Api::Chat => {
            let raw = fields
                .messages
                .ok_or_else(|| reject("messages: expected a non-empty array".into()))?;
            // A raw value can hold what a JSON tree refuses (a number out
            // of range, nesting past serde_json's limit): a reject, as any
            // line that cannot be read.
            let tree = |raw: &RawValue, field: &str| -> Result<Value, Rejected> {
                serde_json::from_str(raw.get())
                    .map_err(|e| reject(format!("{field}: not JSON that can be read ({e})")))
            };
            let messages = tree(raw, "messages")?;
            messages::check_messages(&messages, "messages", ToolArguments::Object)
                .map_err(reject)?;
            let mut object = serde_json::Map::new();
            for (key, raw) in messages::REQUEST_FIELDS.iter().zip(fields.request) {
                if let Some(raw) = raw.filter(|r| r.get() != "null") {
                    object.insert((*key).to_string(), tree(raw, key)?);
                    request_fields.push((*key, raw.to_owned()));
                }
            }
            Request::read(&object, "").map_err(reject)?;
            raw
        }
        Api::Completions => match fields.prompt {
            Some(raw) if raw.get().starts_with('"') => raw,
            _ => return Err(reject("prompt: expected a string".into())),
        },
    };
    let line = match fields.line.as_ref().and_then(Value::as_u64) {
        Some(original) if carry_line => original,
        _ => line,
    };
    Ok(Prompt {
        id,
        line,
        input: input.to_owned(),
        fields: request_fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(line: &str) -> Result<Prompt, Rejected> {
        parse(line.as_bytes(), 7, Api::Chat, "id", false)
    }

    #[test]
    fn good_lines_become_prompts() {
        let p = chat(r#"{"id": "a", "messages": [{"role": "user", "content": "hi"}]}"#).unwrap();
        assert_eq!(p.id, "a");
        let p = chat(r#"{"messages": [{"role": "user", "content": "hi"}]}"#).unwrap();
        assert_eq!(p.id, "line-7");
        let p = parse(
            br#"{"id": 5, "prompt": "once"}"#,
            1,
            Api::Completions,
            "id",
            false,
        )
        .unwrap();
        assert_eq!((p.id.as_str(), p.input.get()), ("5", "\"once\""));
    }

    #[test]
    fn agentic_lines_keep_their_request_fields_as_they_came() {
        let line = r#"{"id": "t", "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
             "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "r"}],
            "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto",
            "parallel_tool_calls": null, "other": 1}"#;
        let p = chat(line).unwrap();
        let fields: Vec<(&str, &str)> = p.fields.iter().map(|(k, v)| (*k, v.get())).collect();
        assert_eq!(
            fields,
            [
                (
                    "tools",
                    r#"[{"type": "function", "function": {"name": "f"}}]"#
                ),
                ("tool_choice", r#""auto""#)
            ]
        );
        let deep = format!(
            r#"{{"messages": [{{"role": "user", "content": "q", "k": {}{}}}]}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let err = chat(&deep).unwrap_err();
        assert!(err.reason.contains("messages: not JSON"), "{}", err.reason);
        for (line, words) in [
            (
                r#"{"messages": [{"role": "user", "content": "q"}], "tools": "f"}"#,
                "tools: expected a list",
            ),
            (
                r#"{"messages": [{"role": "tool", "content": "q"}]}"#,
                "messages[0].tool_call_id",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "q"}], "parallel_tool_calls": 1}"#,
                "parallel_tool_calls",
            ),
            // What a raw read takes and a JSON tree refuses: a reject of the
            // line, never a panic of the run.
            (
                r#"{"messages": [{"role": "user", "content": "q", "k": 1e400}]}"#,
                "messages: not JSON that can be read",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "q"}], "tools": [1e999]}"#,
                "tools: not JSON that can be read",
            ),
        ] {
            let err = chat(line).unwrap_err();
            assert!(err.reason.contains(words), "{line}: {}", err.reason);
        }
    }

    #[test]
    fn bad_lines_are_rejected_with_a_reason() {
        for (line, words) in [
            ("", "blank"),
            ("   ", "blank"),
            ("not json", "not JSON"),
            ("[1, 2]", "not a JSON object"),
            (
                r#"{"id": null, "messages": [{"role": "user", "content": "x"}]}"#,
                "not a string or number",
            ),
            (r#"{"id": "a"}"#, "messages"),
            (
                r#"{"id": "a", "messages": [{"role": "wizard", "content": "x"}]}"#,
                "unknown role",
            ),
            (
                r#"{"id": "a", "messages": [{"role": "user", "content": 5}]}"#,
                "content",
            ),
        ] {
            let err = chat(line).unwrap_err();
            assert!(err.reason.contains(words), "{line:?}: {}", err.reason);
            assert_eq!(err.line, 7);
        }
        assert!(parse(b"\xff\xfe", 1, Api::Chat, "id", false)
            .unwrap_err()
            .reason
            .contains("UTF-8"));
        let retried = br#"{"id": "a", "line": 40, "prompt": "x", "failure": {}}"#;
        assert_eq!(
            parse(retried, 2, Api::Completions, "id", true)
                .unwrap()
                .line,
            40
        );
        assert_eq!(
            parse(retried, 2, Api::Completions, "id", false)
                .unwrap()
                .line,
            2
        );
    }
}
