//! The token ids the mock server returns when asked (`return_token_ids`),
//! a test fixture: the ids SmolLM2's tokenizer gives the text a model
//! trained on the Hermes tool-use format would have generated for the
//! mock's answer, then `<|im_end|>`, the end of turn it stops at. A plain
//! answer is its content; a tool-call answer is each call as a
//! `<tool_call>` block, its arguments as Python's `json.dumps` spaces them
//! (what the Hermes template writes with `tojson`), or, for a planted
//! drift, without spaces. The prompt's ids are those of the input text
//! alone, not of a rendered prompt: a check of prompt ids finds them all
//! different, which is what a test of that check wants.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;
use todod_format::tokenizer::Tokenizer;

/// Which server the mock answers as: the shapes of its own protocol
/// definitions, at the versions named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// The mock's own: `/v1/models` says `owned_by: "mock"`; reasoning in
    /// `reasoning_content`; no ids.
    #[default]
    Mock,
    /// vLLM 0.11 and later: `owned_by: "vllm"`; reasoning in `reasoning`
    /// (`reasoning_content` was renamed in PR #27752 and removed in
    /// #33402); with `return_token_ids` (PR #22587), the prompt's ids
    /// beside the choices (a stream's first chunk) and each choice's
    /// `token_ids` (a stream chunk's own).
    Vllm,
    /// SGLang after PR #35225 (August 2026): `owned_by: "sglang"`;
    /// reasoning in `reasoning_content`; with `return_token_ids` (PR
    /// #30917) on a chat that is not streamed, each choice's
    /// `prompt_token_ids` and `response_token_ids`; a streamed chat that
    /// asks is refused with 400.
    Sglang,
}

impl Dialect {
    pub fn owned_by(self) -> &'static str {
        match self {
            Dialect::Mock => "mock",
            Dialect::Vllm => "vllm",
            Dialect::Sglang => "sglang",
        }
    }

    /// The field of a message (or delta) that holds the reasoning.
    pub fn reasoning_field(self) -> &'static str {
        match self {
            Dialect::Vllm => "reasoning",
            Dialect::Mock | Dialect::Sglang => "reasoning_content",
        }
    }
}

/// Which text the ids the mock returns are of (in its dialect's shape;
/// the mock's own dialect returns none). The reasoning an answer has is not
/// in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MockTokenIds {
    /// What a Hermes-format model generates for the mock's answer.
    Hermes,
    /// The same, the tool calls' arguments generated as `{"a":1}` while the
    /// template writes `{"a": 1}`: every tool-call record drifts.
    HermesCompactArguments,
}

/// SmolLM2's tokenizer (the repository's fixture), loaded once.
pub fn smollm2() -> &'static Arc<dyn Tokenizer> {
    static TOKENIZER: OnceLock<Arc<dyn Tokenizer>> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        todod_format::tokenizer::load_dir(&crate::fixtures::fixture("smollm2"))
            .expect("the smollm2 fixture loads")
            .tokenizer
    })
}

/// The arguments' JSON text as Python's `json.dumps` writes it (`", "`,
/// `": "`), or compact.
fn arguments_text(arguments: &str, compact: bool) -> String {
    let value: Value = serde_json::from_str(arguments).expect("the mock's arguments are JSON");
    if compact {
        return value.to_string();
    }
    fn spaced(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                out.push('{');
                for (i, (key, item)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push_str(": ");
                    spaced(item, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    spaced(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    spaced(&value, &mut out);
    out
}

/// The text a Hermes-format model generates for `content` or `calls`.
pub fn generated_text(content: &str, calls: &[Value], mode: MockTokenIds) -> String {
    if calls.is_empty() {
        return content.to_string();
    }
    let compact = mode == MockTokenIds::HermesCompactArguments;
    calls
        .iter()
        .map(|call| {
            let function = &call["function"];
            format!(
                "<tool_call>\n{{\"name\": \"{}\", \"arguments\": {}}}\n</tool_call>",
                function["name"].as_str().unwrap_or_default(),
                arguments_text(function["arguments"].as_str().unwrap_or("{}"), compact)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The ids of `text`, then the end of turn. Kept once made: the mock's
/// own tokenizing is then not what a benchmark of a run's cost measures.
pub fn generated_ids(text: &str) -> Vec<u32> {
    static MADE: OnceLock<Mutex<HashMap<String, Vec<u32>>>> = OnceLock::new();
    let made = MADE.get_or_init(Default::default);
    if let Some(ids) = made.lock().unwrap().get(text) {
        return ids.clone();
    }
    let tokenizer = smollm2();
    let mut ids = tokenizer.encode(text, false).expect("encodes").ids;
    let end = tokenizer.token_id("<|im_end|>");
    ids.push(end.expect("SmolLM2 has <|im_end|>"));
    made.lock().unwrap().insert(text.to_string(), ids.clone());
    ids
}

/// The ids the mock says the prompt had: the input text's.
pub fn prompt_ids(input: &str) -> Vec<u32> {
    static MADE: OnceLock<Mutex<HashMap<String, Vec<u32>>>> = OnceLock::new();
    let made = MADE.get_or_init(Default::default);
    if let Some(ids) = made.lock().unwrap().get(input) {
        return ids.clone();
    }
    let ids = smollm2().encode(input, false).expect("encodes").ids;
    made.lock().unwrap().insert(input.to_string(), ids.clone());
    ids
}

/// Puts the ids of a whole (not streamed) answer where the dialect's server
/// puts them.
pub fn put_whole(answer: &mut Value, dialect: Dialect, prompt: &[u32], generated: &[u32]) {
    let choice = &mut answer["choices"][0];
    match dialect {
        Dialect::Sglang => {
            choice["prompt_token_ids"] = serde_json::json!(prompt);
            choice["response_token_ids"] = serde_json::json!(generated);
        }
        Dialect::Vllm | Dialect::Mock => {
            choice["token_ids"] = serde_json::json!(generated);
            answer["prompt_token_ids"] = serde_json::json!(prompt);
        }
    }
}

/// `/v1/models` as the dialect's server answers it.
pub fn models_body(model: &str, dialect: Dialect) -> String {
    serde_json::json!({"object": "list", "data": [{"id": model, "object": "model",
        "created": 0, "owned_by": dialect.owned_by(), "root": model}]})
    .to_string()
}
