//! Asking a server for the token ids it generated. Each server kind asks
//! its own way, and says what it is in `GET /v1/models` (`owned_by`):
//! - vLLM (`owned_by: "vllm"`, 0.10.2 and later, PR #22587):
//!   `return_token_ids: true` gives the prompt's ids beside the choices
//!   (`prompt_token_ids`, a stream's first chunk) and each choice's
//!   `token_ids` (a stream chunk's own);
//! - SGLang (`owned_by: "sglang"`, PR #30917): `return_token_ids: true` on a
//!   chat that is not streamed gives each choice's `prompt_token_ids` and
//!   `response_token_ids` (`token_ids` before PR #35225); a streamed chat
//!   with it is refused (PR #37365, which streams them, is not merged), so a
//!   stream does not ask;
//! - llama.cpp's server (`owned_by: "llamacpp"`): its chat answers carry
//!   the ids only in log probabilities (`logprobs.content[].id`), so it is
//!   asked for `logprobs` with one top entry, the least it returns ids with
//!   (`top_logprobs: 0` turns them off). It does not return the prompt's.
//!
//! Any other server is not asked unless the run says so: OpenAI's API
//! refuses a field it does not know.
use serde_json::{json, Map, Value};

use super::api::Api;

/// What a server says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerKind {
    Vllm,
    Sglang,
    LlamaCpp,
    /// Another `owned_by`, or none (the server's answer, or why there is
    /// none).
    Other(String),
}

impl ServerKind {
    /// From `GET /v1/models`'s answer.
    pub fn from_models(answer: &Value) -> ServerKind {
        let owner = answer["data"]
            .as_array()
            .and_then(|models| models.first())
            .and_then(|model| model["owned_by"].as_str());
        match owner {
            Some("vllm") => ServerKind::Vllm,
            Some("sglang") => ServerKind::Sglang,
            Some("llamacpp") => ServerKind::LlamaCpp,
            Some(other) => ServerKind::Other(format!("owned_by {other:?}")),
            None => ServerKind::Other("no owned_by in /v1/models".into()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            ServerKind::Vllm => "vllm",
            ServerKind::Sglang => "sglang",
            ServerKind::LlamaCpp => "llamacpp",
            ServerKind::Other(_) => "other",
        }
    }
}

/// The `/v1/models` URL of a base URL (with or without `/v1`).
pub(crate) fn models_url(base: &str) -> String {
    let base = base.trim().trim_end_matches('/');
    if base.ends_with("/v1") {
        format!("{base}/models")
    } else {
        format!("{base}/v1/models")
    }
}

/// The request fields that ask `kind` for its token ids, or why it is not
/// asked. `force` asks a server of another kind with vLLM's field.
pub fn ask(
    kind: &ServerKind,
    api: Api,
    stream: bool,
    force: bool,
) -> Result<Map<String, Value>, String> {
    let fields = match (kind, api) {
        (ServerKind::Vllm, _) => json!({"return_token_ids": true}),
        (ServerKind::Sglang, Api::Chat) if stream => {
            return Err("SGLang refuses return_token_ids on a streamed chat".into())
        }
        (ServerKind::Sglang, _) => json!({"return_token_ids": true}),
        (ServerKind::LlamaCpp, Api::Chat) => json!({"logprobs": true, "top_logprobs": 1}),
        (ServerKind::LlamaCpp, Api::Completions) => {
            return Err("llama.cpp's server is asked for ids on the chat API only".into())
        }
        (ServerKind::Other(_), _) if force => json!({"return_token_ids": true}),
        (ServerKind::Other(why), _) => {
            return Err(format!(
                "not known to return token ids ({why}); token_ids = \"on\" asks anyway"
            ))
        }
    };
    Ok(fields.as_object().expect("an object").clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_asked_its_own_way() {
        let models =
            |owner: &str| json!({"object": "list", "data": [{"id": "m", "owned_by": owner}]});
        assert_eq!(ServerKind::from_models(&models("vllm")), ServerKind::Vllm);
        assert_eq!(
            ServerKind::from_models(&models("sglang")),
            ServerKind::Sglang
        );
        assert_eq!(
            ServerKind::from_models(&models("llamacpp")),
            ServerKind::LlamaCpp
        );
        let openai = ServerKind::from_models(&models("openai"));
        assert_eq!(openai, ServerKind::Other("owned_by \"openai\"".into()));
        assert!(matches!(
            ServerKind::from_models(&json!({})),
            ServerKind::Other(_)
        ));

        let vllm = ask(&ServerKind::Vllm, Api::Chat, true, false).unwrap();
        assert_eq!(Value::Object(vllm), json!({"return_token_ids": true}));
        let sglang = ask(&ServerKind::Sglang, Api::Chat, false, false).unwrap();
        assert_eq!(Value::Object(sglang), json!({"return_token_ids": true}));
        assert!(ask(&ServerKind::Sglang, Api::Chat, true, false)
            .unwrap_err()
            .contains("streamed"));
        let llama = ask(&ServerKind::LlamaCpp, Api::Chat, true, false).unwrap();
        assert_eq!(
            Value::Object(llama),
            json!({"logprobs": true, "top_logprobs": 1})
        );
        assert!(ask(&ServerKind::LlamaCpp, Api::Completions, false, false).is_err());
        assert!(ask(&openai, Api::Chat, false, false)
            .unwrap_err()
            .contains("\"on\""));
        assert!(ask(&openai, Api::Chat, false, true).is_ok());
    }
}
