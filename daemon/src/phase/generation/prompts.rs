//! Reading a prompt file line by line: each line becomes a prompt or a
//! rejection with its line number and reason. Nothing here holds more than
//! one line, so a file of any size streams through.
use serde_json::Value;

use crate::inference::Api;

/// Lines longer than this are rejected without being read.
pub const MAX_LINE_BYTES: usize = 1 << 20;
const ROLES: &[&str] = &["system", "user", "assistant", "tool", "developer"];

/// One usable line.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub id: String,
    /// Its line in the prompt file (for a retry, the line the failed prompt
    /// came from, which the failures file keeps).
    pub line: u64,
    /// `messages` for chat, the `prompt` string for completions.
    pub input: Value,
}

/// A line that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub line: u64,
    pub reason: String,
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
    let text = std::str::from_utf8(bytes).map_err(|_| reject("not valid UTF-8".into()))?;
    if text.trim().is_empty() {
        return Err(reject("blank line".into()));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| reject(format!("not JSON: {e}")))?;
    let object = value
        .as_object()
        .ok_or_else(|| reject("not a JSON object".into()))?;
    let id = match object.get(id_field) {
        None => format!("line-{line}"),
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(reject(format!(
                "{id_field} is {other}, not a string or number"
            )))
        }
    };
    let input = match api {
        Api::Chat => {
            let messages = object
                .get("messages")
                .and_then(Value::as_array)
                .filter(|m| !m.is_empty())
                .ok_or_else(|| reject("messages: expected a non-empty array".into()))?;
            for (i, message) in messages.iter().enumerate() {
                let role = message.get("role").and_then(Value::as_str);
                match role {
                    Some(role) if ROLES.contains(&role) => {}
                    Some(role) => {
                        return Err(reject(format!("messages[{i}].role: unknown role {role:?}")))
                    }
                    None => return Err(reject(format!("messages[{i}].role: missing"))),
                }
                if !message.get("content").is_some_and(Value::is_string) {
                    return Err(reject(format!("messages[{i}].content: expected a string")));
                }
            }
            Value::Array(messages.clone())
        }
        Api::Completions => match object.get("prompt") {
            Some(Value::String(prompt)) => Value::String(prompt.clone()),
            _ => return Err(reject("prompt: expected a string".into())),
        },
    };
    let line = match object.get("line").and_then(Value::as_u64) {
        Some(original) if carry_line => original,
        _ => line,
    };
    Ok(Prompt { id, line, input })
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
        assert_eq!((p.id.as_str(), p.input.as_str()), ("5", Some("once")));
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
