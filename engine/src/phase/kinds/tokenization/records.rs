//! What one input line becomes: the text or conversation it holds, then its
//! tokens and loss mask. A conversation is rendered with the target model's
//! chat template, and the tokens trained on are found from the rendered
//! text's spans: a trained assistant turn is what rendering the conversation
//! up to and including it adds to rendering it up to the turn's generation
//! prompt (so the span holds the answer and its end-of-turn tokens, not the
//! `<|im_start|>assistant` header), and a token is trained on when it starts
//! inside such a span. Where a template renders a turn differently once it
//! is no longer the last (Qwen3's empty think block), the turn is found in
//! the whole rendering against a sentinel instead (`span_in_place`). Tool
//! calls are part of their assistant turn's span; tool results, system and
//! user turns never are.
use serde_json::{json, Map, Value};

use super::spec::{AnswerIds, Mode, Reasoning, TokenizationSpec, TrainOn};
use todod_format::messages::{self, Request};
use crate::phase::model::Templates;
use todod_format::token_ids::first_difference;
use todod_format::tokenizer::Tokenizer;

/// A usable input line.
#[derive(Debug, Clone)]
pub struct Record {
    pub id: String,
    pub body: Body,
    /// The generation stopped at its token limit.
    pub length_finish: bool,
    /// The ids the model generated for the answer, as its server returned
    /// them (a generation's `token_ids`).
    pub generated: Option<Vec<u32>>,
    /// The prompt's ids as the server tokenized them: (count, sha256).
    pub prompt_ids: Option<(usize, String)>,
}

#[derive(Debug, Clone)]
pub enum Body {
    Text(String),
    /// Messages in the chat API's shape, the answer to train on included,
    /// and the tools (and documents) the conversation had.
    Conversation(Vec<Value>, Box<Request>),
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
        /// The answer's ids against the ids its model generated, for a
        /// record that kept them.
        drift: Option<Drift>,
        /// The answer's ids are the ids its model generated
        /// (`answer_ids: "generated"`).
        from_generated: bool,
    },
    /// Valid, but left out by the spec's rules; the reason is a stable word.
    Dropped { id: String, reason: &'static str },
    /// Could not be tokenized (the template refused it, ...).
    Refused { id: String, reason: String },
}

/// The text of a turn the template is asked to render around, to find
/// where the turn is in the rendering.
const SENTINEL: &str = "\u{1}todod-turn\u{1}";

/// A record's trained ids against the ids its model generated.
#[derive(Debug, Clone, PartialEq)]
pub struct Drift {
    /// Where the answer's trained ids part from the generated ones, if
    /// they do.
    pub answer: Option<todod_proto::results::DriftExample>,
    /// Whether the prompt, rendered and tokenized here, has the ids the
    /// server had (by count and hash), when the record says.
    pub prompt_same: Option<bool>,
}

/// Ids either side of a difference an example shows.
const EXAMPLE_BEFORE: usize = 3;
const EXAMPLE_AFTER: usize = 8;

/// What differs at `at`: a few ids either side, from both, and the
/// rendered text from the first trained id that differs.
fn example(
    id: &str,
    at: usize,
    generated: &[u32],
    trained: &[u32],
    trained_text: &str,
) -> todod_proto::results::DriftExample {
    let window = |ids: &[u32]| {
        ids[at.saturating_sub(EXAMPLE_BEFORE).min(ids.len())..(at + EXAMPLE_AFTER).min(ids.len())]
            .to_vec()
    };
    todod_proto::results::DriftExample {
        id: id.to_string(),
        index: at as u64,
        generated: window(generated),
        trained: window(trained),
        trained_text: todod_domain::model::clip(trained_text),
    }
}

fn text_of(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str)
}

/// Parses one line into a record for `mode`; `Err` is why it is rejected.
pub fn parse(bytes: &[u8], number: u64, spec: &TokenizationSpec) -> Result<Record, String> {
    let object = crate::phase::lines::json_object(bytes)?;
    let id = crate::phase::lines::record_id(&object, "id", number)?;
    let length_finish = text_of(object.get("finish_reason")) == Some("length");
    let messages = |key: &str| -> Result<Vec<Value>, String> {
        let value = object.get(key).unwrap_or(&Value::Null);
        messages::check_messages(value, key, spec.tool_arguments)?;
        Ok(value.as_array().cloned().unwrap_or_default())
    };
    let request = Request::read(&object, "")?;
    let body = if let Some(content) = object.get("content") {
        // A generation's record: its prompt, and the answer it got (text,
        // tool calls, or both).
        let content = content
            .as_str()
            .ok_or("content: expected a string")?
            .to_string();
        let calls = match object.get("tool_calls") {
            None | Some(Value::Null) => None,
            Some(calls) => {
                let answer = json!([{"role": "assistant", "tool_calls": calls}]);
                messages::check_messages(&answer, "answer", spec.tool_arguments)
                    .map_err(|e| e.replacen("answer[0].", "", 1))?;
                Some(calls.clone())
            }
        };
        match spec.mode {
            Mode::Completion if calls.is_some() => {
                return Err(
                    "tool_calls: a tool-call answer has no text to train on in mode completion; tokenize it in mode conversation"
                        .into(),
                )
            }
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
                if let Some(calls) = calls {
                    answer.insert("tool_calls".into(), calls);
                }
                turns.push(Value::Object(answer));
                Body::Conversation(turns, Box::new(request))
            }
        }
    } else if object.contains_key("messages") {
        let mut turns = messages("messages")?;
        if spec.reasoning == Reasoning::Drop {
            for turn in &mut turns {
                if let Some(turn) = turn.as_object_mut() {
                    turn.remove("reasoning_content");
                    turn.remove("reasoning");
                }
            }
        }
        match spec.mode {
            Mode::Conversation => Body::Conversation(turns, Box::new(request)),
            Mode::Completion => {
                let last = turns
                    .iter()
                    .rev()
                    .find(|m| m["role"] == "assistant")
                    .ok_or("messages: no assistant message to take the completion from")?;
                if messages::has_tool_calls(last) {
                    return Err("messages: the last assistant turn is a tool call, with no text to train on in mode completion; use mode conversation"
                        .into());
                }
                Body::Text(messages::text(last.get("content")))
            }
        }
    } else if let (Some(prompt), Some(completion)) = (
        text_of(object.get("prompt")),
        text_of(object.get("completion")),
    ) {
        match spec.mode {
            Mode::Completion => Body::Text(completion.to_string()),
            Mode::Conversation => Body::Conversation(
                vec![
                    json!({"role": "user", "content": prompt}),
                    json!({"role": "assistant", "content": completion}),
                ],
                Box::new(request),
            ),
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
    let generated = match object.get("token_ids") {
        None | Some(Value::Null) => None,
        Some(ids) => Some(
            serde_json::from_value::<Vec<u32>>(ids.clone())
                .map_err(|_| "token_ids: expected an array of token ids (0 to 4294967295)")?,
        ),
    };
    let prompt_ids = match object.get("prompt_token_ids") {
        None | Some(Value::Null) => None,
        Some(ids) => match (ids["count"].as_u64(), ids["sha256"].as_str()) {
            (Some(count), Some(sha256)) => Some((count as usize, sha256.to_string())),
            _ => return Err("prompt_token_ids: expected {count, sha256}".into()),
        },
    };
    Ok(Record {
        id,
        body,
        length_finish,
        generated,
        prompt_ids,
    })
}

/// What tokenizing needs, shared by the worker threads.
pub struct Tokenizing {
    pub tokenizer: std::sync::Arc<dyn Tokenizer>,
    pub template: Option<Templates>,
    pub variables: Map<String, Value>,
    pub now: todod_format::chat_template::Clock,
    pub eos: Option<u32>,
    pub spec: TokenizationSpec,
}

impl Tokenizing {
    fn render(
        &self,
        messages: &[Value],
        request: &Request,
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let templates = self
            .template
            .as_ref()
            .expect("conversation mode has a template");
        let conversation = crate::phase::model::Conversation {
            messages,
            request,
            add_generation_prompt,
        };
        templates
            .render(
                conversation,
                self.spec.tool_arguments,
                &self.variables,
                self.now,
            )
            .map_err(|e| format!("the chat template refused it: {e}"))
    }

    /// The byte spans of `full` that are the trained assistant turns.
    fn spans(
        &self,
        turns: &[Value],
        request: &Request,
        full: &str,
    ) -> Result<Vec<(usize, usize)>, String> {
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
            let prefix = self.render(&turns[..i], request, true)?;
            let upto = if i + 1 == turns.len() {
                full.to_string()
            } else {
                self.render(&turns[..=i], request, false)?
            };
            if !upto.starts_with(&prefix) || !full.starts_with(&upto) {
                // Templates that render the last turn apart (Qwen3 gives
                // the last assistant turn an empty think block) are told
                // apart in the whole rendering instead.
                if let Some(span) = self.span_in_place(turns, request, full, i) {
                    spans.push(span);
                    continue;
                }
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

    /// The span of assistant turn `i` found in the whole rendering: the
    /// turn is replaced by a bare sentinel turn and rendered again; when
    /// the only difference between the two renderings is the turn's body
    /// against the sentinel, that body is the turn's text, and it is
    /// followed by the template's end of turn (what it writes after a last
    /// assistant turn's text), which is trained on too.
    fn span_in_place(
        &self,
        turns: &[Value],
        request: &Request,
        full: &str,
        i: usize,
    ) -> Option<(usize, usize)> {
        let bare = json!({"role": "assistant", "content": SENTINEL});
        let mut replaced = turns.to_vec();
        replaced[i] = bare.clone();
        let other = self.render(&replaced, request, false).ok()?;
        let start = common_prefix(full.as_bytes(), other.as_bytes());
        let suffix = common_prefix(
            full.as_bytes()[start..].iter().rev(),
            other.as_bytes()[start..].iter().rev(),
        );
        let (end, other_end) = (full.len() - suffix, other.len() - suffix);
        if start > end || other.get(start..other_end) != Some(SENTINEL) {
            return None;
        }
        let end_of_turn = self.end_of_turn(&turns[..i], request)?;
        if !full.is_char_boundary(start) || !full[end..].starts_with(&end_of_turn) {
            return None;
        }
        Some((start, end + end_of_turn.len()))
    }

    /// What the template writes after the text of a last assistant turn
    /// that follows `before` (`<|im_end|>\n`): the turn is a bare sentinel,
    /// and what follows the sentinel is the end of turn.
    fn end_of_turn(&self, before: &[Value], request: &Request) -> Option<String> {
        let mut last = before.to_vec();
        last.push(json!({"role": "assistant", "content": SENTINEL}));
        let alone = self.render(&last, request, false).ok()?;
        Some(alone[alone.rfind(SENTINEL)? + SENTINEL.len()..].to_string())
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
            // A tool-call answer with no text is an answer.
            Body::Conversation(turns, _) => turns.last().is_some_and(|m| {
                m["role"] == "assistant"
                    && messages::text(m.get("content")).trim().is_empty()
                    && !messages::has_tool_calls(m)
            }),
        };
        if empty && self.spec.drop_empty {
            return Outcome::Dropped {
                id,
                reason: "empty",
            };
        }
        let generated = record.generated.as_deref();
        let mut drift = None;
        let mut from_generated = false;
        let (mut ids, mut mask, straddling) = match &record.body {
            Body::Text(text) => match self.tokenizer.encode(text, generated.is_some()) {
                Ok(enc) => {
                    let n = enc.ids.len();
                    // The answer's text holds no stop token; the ids the
                    // model generated may end with the one it stopped at.
                    let generated = generated
                        .map(|g| without_stop_token(g, &enc.ids, !record.length_finish));
                    if let Some(generated) = generated {
                        let mut trained = enc.ids.clone();
                        trained.extend(self.eos.filter(|_| self.spec.add_eos));
                        let answer = first_difference(&trained, generated).map(|at| {
                            let from = enc.offsets.get(at).map_or(text.len(), |o| o.0);
                            let rest = String::from_utf8_lossy(&text.as_bytes()[from..]);
                            example(&id, at, generated, &trained, &rest)
                        });
                        drift = Some(Drift {
                            answer,
                            prompt_same: None,
                        });
                    }
                    match generated.filter(|_| self.spec.answer_ids == AnswerIds::Generated) {
                        Some(generated) => {
                            from_generated = true;
                            (generated.to_vec(), vec![1u8; generated.len()], 0)
                        }
                        None => (enc.ids, vec![1u8; n], 0),
                    }
                }
                Err(e) => {
                    return Outcome::Refused {
                        id,
                        reason: e.to_string(),
                    }
                }
            },
            Body::Conversation(turns, request) => {
                let full = match self.render(turns, request, false) {
                    Ok(full) => full,
                    Err(reason) => return Outcome::Refused { id, reason },
                };
                let spans = match self.spans(turns, request, &full) {
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
                if let (Some(generated), Some(&answer_span)) = (generated, spans.last()) {
                    drift = Some(self.drift(
                        &id,
                        &enc,
                        &full,
                        answer_span,
                        generated,
                        record.prompt_ids.as_ref(),
                    ));
                }
                match generated.filter(|_| self.spec.answer_ids == AnswerIds::Generated) {
                    Some(generated) => {
                        let answer_span = *spans.last().expect("a span per trained turn");
                        let last_answer = turns.len() - 1;
                        let Some(end_of_turn) = self.end_of_turn(&turns[..last_answer], request)
                        else {
                            return Outcome::Refused {
                                id,
                                reason: "answer_ids generated: the template's end of turn \
                                         cannot be told apart"
                                    .into(),
                            };
                        };
                        let framing = match self.tokenizer.encode(&end_of_turn, false) {
                            Ok(framing) => framing.ids,
                            Err(e) => {
                                return Outcome::Refused {
                                    id,
                                    reason: e.to_string(),
                                }
                            }
                        };
                        from_generated = true;
                        let (ids, mask) = with_generated_answer(
                            &enc,
                            mask,
                            answer_span,
                            generated,
                            &framing,
                        );
                        (ids, mask, straddling)
                    }
                    None => (enc.ids, mask, straddling),
                }
            }
        };
        if self.spec.add_eos {
            // Generated ids end with the EOS the model stopped at, when it did.
            let generated_it = from_generated
                && matches!(record.body, Body::Text(_))
                && ids.last() == self.eos.as_ref();
            if let Some(eos) = self.eos.filter(|_| !generated_it) {
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
            drift,
            from_generated,
        }
    }

    /// The answer's trained ids (those that start in its span, its
    /// end-of-turn framing included) against the ids its model generated;
    /// and the ids before the span (the prompt and the generation prompt,
    /// what the server tokenized) against the prompt's count and hash.
    fn drift(
        &self,
        id: &str,
        enc: &todod_format::tokenizer::Encoded,
        full: &str,
        (start, end): (usize, usize),
        generated: &[u32],
        prompt_ids: Option<&(usize, String)>,
    ) -> Drift {
        let first = enc.offsets.partition_point(|o| o.0 < start);
        let last = enc.offsets.partition_point(|o| o.0 < end);
        let trained = &enc.ids[first..last];
        let answer = first_difference(trained, generated).map(|at| {
            let from = enc.offsets.get(first + at).map_or(end, |o| o.0).min(end);
            // Offsets may fall inside a character (tiktoken's).
            let rest = String::from_utf8_lossy(&full.as_bytes()[from..end]);
            example(id, at, generated, trained, &rest)
        });
        let prompt_same = prompt_ids.map(|(count, sha256)| {
            let prompt = &enc.ids[..first];
            prompt.len() == *count && todod_format::token_ids::sha256_of(prompt) == *sha256
        });
        Drift {
            answer,
            prompt_same,
        }
    }
}

/// The `generated` ids of a text answer without the stop token the model
/// ended on: when it `stopped` (not at its token limit) and the ids are the
/// text's `content` ids and one more.
fn without_stop_token<'a>(generated: &'a [u32], content: &[u32], stopped: bool) -> &'a [u32] {
    match generated.split_last() {
        Some((_, answer)) if stopped && answer == content => answer,
        _ => generated,
    }
}

/// The ids of a rendered conversation (`enc`, its loss `mask`) with the
/// answer's (the tokens that start in `span`) replaced by the ids the model
/// `generated` and the template's end of turn (`framing`) after them, all
/// trained on; the end of turn's first id is left out when the model
/// generated it (it stopped at it).
fn with_generated_answer(
    enc: &todod_format::tokenizer::Encoded,
    mask: Vec<u8>,
    (start, end): (usize, usize),
    generated: &[u32],
    framing: &[u32],
) -> (Vec<u32>, Vec<u8>) {
    let first = enc.offsets.partition_point(|o| o.0 < start);
    let last = enc.offsets.partition_point(|o| o.0 < end);
    let framing = match (generated.last(), framing.first()) {
        (Some(a), Some(b)) if a == b => &framing[1..],
        _ => framing,
    };
    let answer = generated.len() + framing.len();
    let mut ids = Vec::with_capacity(first + answer + enc.ids.len() - last);
    ids.extend_from_slice(&enc.ids[..first]);
    ids.extend_from_slice(generated);
    ids.extend_from_slice(framing);
    ids.extend_from_slice(&enc.ids[last..]);
    let mut trained = Vec::with_capacity(ids.len());
    trained.extend_from_slice(&mask[..first]);
    trained.resize(first + answer, 1);
    trained.extend_from_slice(&mask[last..]);
    (ids, trained)
}

/// How many leading items two sequences share.
fn common_prefix<T: PartialEq>(
    a: impl IntoIterator<Item = T>,
    b: impl IntoIterator<Item = T>,
) -> usize {
    a.into_iter().zip(b).take_while(|(x, y)| x == y).count()
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

    fn spec(mode: &str) -> TokenizationSpec {
        TokenizationSpec::parse(
            &json!({"input": "/in.jsonl", "tokenizer": "/m", "output_prefix": "/out/t", "mode": mode})
                .to_string(),
        )
        .unwrap()
    }

    #[test]
    fn agentic_records_read_into_turns_with_their_calls_and_tools() {
        let conversation = spec("conversation");
        let record = json!({"id": "r", "messages": [{"role": "user", "content": "q"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "content": "", "tool_calls": [{"id": "c", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}], "finish_reason": "tool_calls"});
        let read = parse(record.to_string().as_bytes(), 1, &conversation).unwrap();
        let Body::Conversation(turns, request) = read.body else {
            panic!("a conversation")
        };
        assert_eq!(turns[1]["tool_calls"], record["tool_calls"]);
        assert_eq!(request.tools, Some(record["tools"].clone()));
        // Mode completion has no text to train a tool call on.
        let refused = parse(record.to_string().as_bytes(), 1, &spec("completion")).unwrap_err();
        assert!(refused.contains("tool_calls"), "{refused}");
        for (line, words) in [
            (
                json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant",
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}]}]}),
                "messages[1].tool_calls[0].function.arguments: not JSON",
            ),
            (
                json!({"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}]}),
                "messages[1].tool_call_id: missing",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}),
                "an image_url part",
            ),
            (
                json!({"messages": [{"role": "user", "content": "q"}], "tools": "f"}),
                "tools: expected a list",
            ),
            (
                json!({"messages": [{"role": "user", "content": "q"}], "content": "",
                       "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}),
                "tool_calls[0].function.name",
            ),
        ] {
            let err = parse(line.to_string().as_bytes(), 1, &conversation).unwrap_err();
            assert!(err.contains(words), "{line}: {err}");
        }
    }

    #[test]
    fn a_records_generated_ids_are_read_and_bad_ones_refused() {
        let conversation = spec("conversation");
        let line = json!({"id": "r", "messages": [{"role": "user", "content": "q"}],
            "content": "a", "token_ids": [7, 2], "prompt_token_ids": {"count": 3, "sha256": "ab"}});
        let read = parse(line.to_string().as_bytes(), 1, &conversation).unwrap();
        assert_eq!(read.generated, Some(vec![7, 2]));
        assert_eq!(read.prompt_ids, Some((3, "ab".to_string())));
        for (bad, words) in [
            (json!({"token_ids": [1, -1]}), "token_ids: expected an array"),
            (json!({"token_ids": "7 2"}), "token_ids: expected an array"),
            (json!({"prompt_token_ids": [1, 2]}), "prompt_token_ids: expected {count, sha256}"),
        ] {
            let mut line = line.clone();
            for (k, v) in bad.as_object().unwrap() {
                line[k] = v.clone();
            }
            let err = parse(line.to_string().as_bytes(), 1, &conversation).unwrap_err();
            assert!(err.contains(words), "{line}: {err}");
        }
    }

    #[test]
    fn a_generated_answer_replaces_the_rendered_one_with_the_end_of_turn_after_it() {
        // "<p>" "q" | "a" "b" "<e>" "\n" : the answer's span is bytes 4..10.
        let enc = todod_format::tokenizer::Encoded {
            ids: vec![10, 11, 20, 21, 2, 3],
            offsets: vec![(0, 3), (3, 4), (4, 5), (5, 6), (6, 9), (9, 10)],
        };
        let mask = vec![0, 0, 1, 1, 1, 1];
        // The model stopped at the end of turn (2): the framing's own 2 is
        // not written twice.
        let (ids, trained) = with_generated_answer(&enc, mask.clone(), (4, 10), &[20, 22, 23, 2], &[2, 3]);
        assert_eq!(ids, vec![10, 11, 20, 22, 23, 2, 3]);
        assert_eq!(trained, vec![0, 0, 1, 1, 1, 1, 1]);
        // Cut at its token limit: the whole end of turn follows.
        let (ids, trained) = with_generated_answer(&enc, mask, (4, 10), &[20, 22], &[2, 3]);
        assert_eq!(ids, vec![10, 11, 20, 22, 2, 3]);
        assert_eq!(trained, vec![0, 0, 1, 1, 1, 1]);
    }

    #[test]
    fn a_text_answers_stop_token_is_not_part_of_its_ids() {
        assert_eq!(without_stop_token(&[5, 6, 2], &[5, 6], true), &[5, 6]);
        // Cut at the limit: the last id is the answer's own.
        assert_eq!(without_stop_token(&[5, 6, 2], &[5, 6], false), &[5, 6, 2]);
        // The ids differ before the end: left as they are, to be counted.
        assert_eq!(without_stop_token(&[5, 7, 2], &[5, 6], true), &[5, 7, 2]);
        assert_eq!(without_stop_token(&[], &[], true), &[] as &[u32]);
    }

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
