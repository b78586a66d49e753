//! What one input line becomes: the text or conversation it holds, then its
//! tokens and loss mask. A conversation is rendered with the target model's
//! chat template, and the tokens trained on are found from the rendered
//! text's spans: a trained assistant turn is what rendering the conversation
//! up to and including it adds to rendering it up to the turn's generation
//! prompt (so the span holds the answer and its end-of-turn tokens, not the
//! `<|im_start|>assistant` header), and a token is trained on when it starts
//! inside such a span.
use serde_json::{json, Map, Value};

use super::spec::{Mode, Reasoning, TokenizationSpec, TrainOn};
use crate::chat_template::{ChatTemplate, RenderInput};
use crate::tokenizer::Tokenizer;

/// A usable input line.
#[derive(Debug, Clone)]
pub struct Record {
    pub id: String,
    pub body: Body,
    /// The generation stopped at its token limit.
    pub length_finish: bool,
}

#[derive(Debug, Clone)]
pub enum Body {
    Text(String),
    /// Messages in the chat API's shape, the answer to train on included.
    Conversation(Vec<Value>),
}

/// A tokenized record, or why it was set aside.
#[derive(Debug, Clone)]
pub enum Outcome {
    Tokens {
        id: String,
        ids: Vec<u32>,
        /// 1 where the loss is taken.
        mask: Vec<u8>,
        /// Tokens that cross the edge of a trained span.
        straddling: u32,
    },
    /// Valid, but left out by the spec's rules; the reason is a stable word.
    Dropped { id: String, reason: &'static str },
    /// Could not be tokenized (the template refused it, ...).
    Refused { id: String, reason: String },
}

fn text_of(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str)
}

/// Parses one line into a record for `mode`; `Err` is why it is rejected.
pub fn parse(bytes: &[u8], number: u64, spec: &TokenizationSpec) -> Result<Record, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not valid UTF-8".to_string())?;
    if text.trim().is_empty() {
        return Err("blank line".into());
    }
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(object) = value else {
        return Err("not a JSON object".into());
    };
    let id = match object.get("id") {
        None => format!("line-{number}"),
        Some(v) => crate::phase::lines::id_text(v)
            .ok_or_else(|| format!("id is {v}, not a string or number"))?,
    };
    let length_finish = text_of(object.get("finish_reason")) == Some("length");
    let messages = |key: &str| -> Result<Vec<Value>, String> {
        match object.get(key) {
            Some(Value::Array(m)) if !m.is_empty() => {
                for (i, message) in m.iter().enumerate() {
                    if !message.get("role").is_some_and(Value::is_string) {
                        return Err(format!("{key}[{i}].role: expected a string"));
                    }
                }
                Ok(m.clone())
            }
            _ => Err(format!("{key}: expected a non-empty array of messages")),
        }
    };
    let body = if let Some(content) = object.get("content") {
        // A generation's record: its prompt, and the answer it got.
        let content = content
            .as_str()
            .ok_or("content: expected a string")?
            .to_string();
        match spec.mode {
            Mode::Completion => Body::Text(content),
            Mode::Conversation => {
                let mut turns = if object.contains_key("messages") {
                    messages("messages")?
                } else if let Some(prompt) = text_of(object.get("prompt")) {
                    vec![json!({"role": "user", "content": prompt})]
                } else {
                    return Err(
                        "a record with content needs its messages or prompt (generate \
                                with keep_prompt, the default)"
                            .into(),
                    );
                };
                let mut answer = Map::new();
                answer.insert("role".into(), json!("assistant"));
                answer.insert("content".into(), json!(content));
                if spec.reasoning == Reasoning::Keep {
                    if let Some(r) = text_of(object.get("reasoning")).filter(|r| !r.is_empty()) {
                        answer.insert("reasoning_content".into(), json!(r));
                    }
                }
                turns.push(Value::Object(answer));
                Body::Conversation(turns)
            }
        }
    } else if object.contains_key("messages") {
        let turns = messages("messages")?;
        match spec.mode {
            Mode::Conversation => Body::Conversation(turns),
            Mode::Completion => Body::Text(
                turns
                    .iter()
                    .rev()
                    .find(|m| m["role"] == "assistant")
                    .and_then(|m| m["content"].as_str())
                    .ok_or("messages: no assistant message to take the completion from")?
                    .to_string(),
            ),
        }
    } else if let (Some(prompt), Some(completion)) = (
        text_of(object.get("prompt")),
        text_of(object.get("completion")),
    ) {
        match spec.mode {
            Mode::Completion => Body::Text(completion.to_string()),
            Mode::Conversation => Body::Conversation(vec![
                json!({"role": "user", "content": prompt}),
                json!({"role": "assistant", "content": completion}),
            ]),
        }
    } else if let Some(text) = text_of(object.get("text")) {
        match spec.mode {
            Mode::Completion => Body::Text(text.to_string()),
            Mode::Conversation => {
                return Err("a text record has no turns to render; use mode completion".into())
            }
        }
    } else {
        return Err(
            "no content (with messages or prompt), messages, prompt and completion, or text".into(),
        );
    };
    Ok(Record {
        id,
        body,
        length_finish,
    })
}

/// What tokenizing needs, shared by the worker threads.
pub struct Tokenizing {
    pub tokenizer: std::sync::Arc<dyn Tokenizer>,
    pub template: Option<ChatTemplate>,
    pub variables: Map<String, Value>,
    pub now: crate::chat_template::Clock,
    pub eos: Option<u32>,
    pub spec: TokenizationSpec,
}

impl Tokenizing {
    fn render(&self, messages: &[Value], add_generation_prompt: bool) -> Result<String, String> {
        let template = self
            .template
            .as_ref()
            .expect("conversation mode has a template");
        let messages = Value::Array(messages.to_vec());
        template
            .render(&RenderInput {
                messages: &messages,
                tools: None,
                documents: None,
                add_generation_prompt,
                variables: &self.variables,
                now: self.now,
            })
            .map_err(|e| format!("the chat template refused it: {e}"))
    }

    /// The byte spans of `full` that are the trained assistant turns.
    fn spans(&self, turns: &[Value], full: &str) -> Result<Vec<(usize, usize)>, String> {
        let assistant: Vec<usize> = turns
            .iter()
            .enumerate()
            .filter(|(_, m)| m["role"] == "assistant")
            .map(|(i, _)| i)
            .collect();
        let trained: Vec<usize> = match (self.spec.train_on, assistant.last()) {
            (_, None) => return Err("no assistant turn to train on".into()),
            (TrainOn::Last, Some(&last)) => vec![last],
            (TrainOn::All, Some(_)) => assistant,
        };
        let mut spans = Vec::with_capacity(trained.len());
        for i in trained {
            let prefix = self.render(&turns[..i], true)?;
            let upto = if i + 1 == turns.len() {
                full.to_string()
            } else {
                self.render(&turns[..=i], false)?
            };
            if !upto.starts_with(&prefix) || !full.starts_with(&upto) {
                return Err(format!(
                    "the chat template renders the conversation before turn {i} differently \
                     once that turn is added, so the turn's tokens cannot be told apart{}",
                    if self.spec.train_on == TrainOn::All {
                        "; try train_on: last"
                    } else {
                        ""
                    }
                ));
            }
            spans.push((prefix.len(), upto.len()));
        }
        Ok(spans)
    }

    /// Tokenizes one record.
    pub fn tokenize(&self, record: Record) -> Outcome {
        let id = record.id;
        if record.length_finish && self.spec.drop_length_finishes {
            return Outcome::Dropped {
                id,
                reason: "length_finish",
            };
        }
        let empty = match &record.body {
            Body::Text(t) => t.trim().is_empty(),
            Body::Conversation(turns) => turns.last().is_some_and(|m| {
                m["role"] == "assistant"
                    && m["content"].as_str().is_some_and(|c| c.trim().is_empty())
            }),
        };
        if empty && self.spec.drop_empty {
            return Outcome::Dropped {
                id,
                reason: "empty",
            };
        }
        let (mut ids, mut mask, straddling) = match &record.body {
            Body::Text(text) => match self.tokenizer.encode(text, false) {
                Ok(enc) => {
                    let n = enc.ids.len();
                    (enc.ids, vec![1u8; n], 0)
                }
                Err(e) => {
                    return Outcome::Refused {
                        id,
                        reason: e.to_string(),
                    }
                }
            },
            Body::Conversation(turns) => {
                let full = match self.render(turns, false) {
                    Ok(full) => full,
                    Err(reason) => return Outcome::Refused { id, reason },
                };
                let spans = match self.spans(turns, &full) {
                    Ok(spans) => spans,
                    Err(reason) => return Outcome::Refused { id, reason },
                };
                let enc = match self.tokenizer.encode(&full, true) {
                    Ok(enc) => enc,
                    Err(e) => {
                        return Outcome::Refused {
                            id,
                            reason: e.to_string(),
                        }
                    }
                };
                let (mask, straddling) = mask_of(&enc.offsets, &spans);
                (enc.ids, mask, straddling)
            }
        };
        if self.spec.add_eos {
            if let Some(eos) = self.eos {
                ids.push(eos);
                mask.push(1);
            }
        }
        if let Some(max) = self.spec.max_length {
            if ids.len() > max && self.spec.drop_over_length {
                return Outcome::Dropped {
                    id,
                    reason: "over_length",
                };
            }
        }
        Outcome::Tokens {
            id,
            ids,
            mask,
            straddling,
        }
    }
}

/// The loss mask of tokens at byte `offsets` against trained `spans`, and how
/// many tokens cross a span's edge.
pub fn mask_of(offsets: &[(usize, usize)], spans: &[(usize, usize)]) -> (Vec<u8>, u32) {
    let mut straddling = 0;
    let mask = offsets
        .iter()
        .map(|&(start, end)| {
            let mut inside = false;
            for &(s, e) in spans {
                if start >= s && start < e {
                    inside = true;
                }
                if (start < s && end > s) || (start < e && end > e) {
                    straddling += 1;
                }
            }
            u8::from(inside)
        })
        .collect();
    (mask, straddling)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_trained_on_when_they_start_in_a_span() {
        let offsets = [(0, 5), (5, 9), (9, 12), (12, 20), (20, 21)];
        let (mask, straddling) = mask_of(&offsets, &[(9, 20)]);
        assert_eq!(mask, vec![0, 0, 1, 1, 0]);
        assert_eq!(straddling, 0);
        let (mask, straddling) = mask_of(&offsets, &[(10, 20)]);
        assert_eq!(mask, vec![0, 0, 0, 1, 0]);
        assert_eq!(straddling, 1);
    }
}
