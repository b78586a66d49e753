//! Text already rendered with a chat template, read back into messages, for
//! the template families whose rendering can be inverted: ChatML (Qwen,
//! QwQ, SmolLM), Llama 3 and Mistral `[INST]`. Each parser reads the text by
//! the family's grammar, then writes what it read back in that grammar and
//! requires the same bytes: a text that does not parse exactly is rejected,
//! never guessed. Plain logic, no I/O.
use serde::{Deserialize, Serialize};

/// A turn read back from rendered text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Chatml,
    Llama3,
    Mistral,
}

/// The family a rendered text looks like, from its opening tokens.
pub fn detect(text: &str) -> Option<Family> {
    if text.starts_with("<|im_start|>") {
        Some(Family::Chatml)
    } else if text.starts_with("<|begin_of_text|><|start_header_id|>")
        || text.starts_with("<|start_header_id|>")
    {
        Some(Family::Llama3)
    } else if ["<s>[INST]", "<s>[SYSTEM_PROMPT]", "[INST]", "<s> [INST]"]
        .iter()
        .any(|p| text.starts_with(p))
    {
        Some(Family::Mistral)
    } else {
        None
    }
}

/// Reads `text` back into the messages it was rendered from. The generation
/// prompt at its end, if any, is left out: the target template adds its own.
pub fn parse(text: &str, family: Family) -> Result<Vec<Message>, String> {
    let (messages, rebuilt) = match family {
        Family::Chatml => chatml(text)?,
        Family::Llama3 => llama3(text)?,
        Family::Mistral => mistral(text)?,
    };
    if rebuilt != text {
        return Err(format!(
            "text: it does not read back exactly as {family:?} (the parsed turns render to \
             different bytes), so it is not taken apart by guessing"
        ));
    }
    if messages.is_empty() {
        return Err("text: no turn in it".into());
    }
    Ok(messages)
}

/// `<|im_start|>ROLE\nCONTENT<|im_end|>\n` turns, then optionally
/// `<|im_start|>assistant\n` and a think block (Qwen3 with thinking off,
/// QwQ).
fn chatml(text: &str) -> Result<(Vec<Message>, String), String> {
    const START: &str = "<|im_start|>";
    const END: &str = "<|im_end|>\n";
    let mut messages = Vec::new();
    let mut rebuilt = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let body = rest
            .strip_prefix(START)
            .ok_or("text: a ChatML turn must start with <|im_start|>")?;
        let (role, after) = body
            .split_once('\n')
            .ok_or("text: a ChatML role must end with a newline")?;
        match after.find(END) {
            Some(end) => {
                let content = &after[..end];
                messages.push(Message {
                    role: role.to_string(),
                    content: content.to_string(),
                });
                rebuilt.push_str(&format!("{START}{role}\n{content}{END}"));
                rest = &after[end + END.len()..];
            }
            None => {
                // An open turn: the generation prompt.
                let suffix = after;
                if role != "assistant"
                    || !["", "<think>\n\n</think>\n\n", "<think>\n"].contains(&suffix)
                {
                    return Err("text: something after the last ChatML turn is not a \
                                generation prompt"
                        .into());
                }
                rebuilt.push_str(&format!("{START}assistant\n{suffix}"));
                rest = "";
            }
        }
    }
    Ok((messages, rebuilt))
}

/// `<|begin_of_text|>` then `<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>`
/// blocks, then optionally the open assistant header. The first system
/// block's knowledge-date preamble, which Llama 3.1+ templates always write,
/// is not part of the system message.
fn llama3(text: &str) -> Result<(Vec<Message>, String), String> {
    const BOS: &str = "<|begin_of_text|>";
    const HEAD: &str = "<|start_header_id|>";
    const MID: &str = "<|end_header_id|>\n\n";
    const EOT: &str = "<|eot_id|>";
    let mut rebuilt = String::with_capacity(text.len());
    let mut rest = text;
    if let Some(after) = rest.strip_prefix(BOS) {
        rebuilt.push_str(BOS);
        rest = after;
    }
    let mut messages = Vec::new();
    while !rest.is_empty() {
        let body = rest
            .strip_prefix(HEAD)
            .ok_or("text: a Llama 3 turn must start with <|start_header_id|>")?;
        let (role, after) = body
            .split_once(MID)
            .ok_or("text: a Llama 3 header must end with <|end_header_id|> and a blank line")?;
        match after.find(EOT) {
            Some(end) => {
                let content = &after[..end];
                rebuilt.push_str(&format!("{HEAD}{role}{MID}{content}{EOT}"));
                messages.push(Message {
                    role: role.to_string(),
                    content: content.to_string(),
                });
                rest = &after[end + EOT.len()..];
            }
            None if role == "assistant" && after.is_empty() => {
                rebuilt.push_str(&format!("{HEAD}assistant{MID}"));
                rest = "";
            }
            None => return Err("text: a Llama 3 turn is not closed by <|eot_id|>".into()),
        }
    }
    if let Some(first) = messages.first_mut().filter(|m| m.role == "system") {
        let mut content = first.content.as_str();
        content = content
            .strip_prefix("Environment: ipython\n")
            .unwrap_or(content);
        if let Some(dated) = content.strip_prefix("Cutting Knowledge Date: ") {
            let after = dated
                .split_once("\n\n")
                .map(|(_, s)| s)
                .ok_or("text: the Llama 3 date preamble does not end with a blank line")?;
            first.content = after.to_string();
        }
        if first.content.is_empty() {
            messages.remove(0);
        }
    }
    Ok((messages, rebuilt))
}

/// `<s>` then an optional `[SYSTEM_PROMPT]S[/SYSTEM_PROMPT]`, then
/// `[INST]U[/INST]` turns each optionally followed by `A</s>`; contents
/// with or without the spaces older templates put around them.
fn mistral(text: &str) -> Result<(Vec<Message>, String), String> {
    let mut rebuilt = String::with_capacity(text.len());
    let mut rest = text;
    if let Some(after) = rest.strip_prefix("<s>") {
        rebuilt.push_str("<s>");
        rest = after;
    }
    let mut messages = Vec::new();
    if let Some(after) = rest.strip_prefix("[SYSTEM_PROMPT]") {
        let (system, after) = after
            .split_once("[/SYSTEM_PROMPT]")
            .ok_or("text: [SYSTEM_PROMPT] is not closed")?;
        rebuilt.push_str(&format!("[SYSTEM_PROMPT]{system}[/SYSTEM_PROMPT]"));
        messages.push(Message {
            role: "system".into(),
            content: system.to_string(),
        });
        rest = after;
    }
    let spaced = rest.starts_with(" [INST]") || rest.starts_with("[INST] ");
    while !rest.is_empty() {
        let (lead, body) = if let Some(b) = rest.strip_prefix(" [INST]") {
            (" [INST]", b)
        } else if let Some(b) = rest.strip_prefix("[INST]") {
            ("[INST]", b)
        } else {
            return Err("text: a Mistral turn must start with [INST]".into());
        };
        let (user, after) = body
            .split_once("[/INST]")
            .ok_or("text: [INST] is not closed by [/INST]")?;
        let user_content = if spaced { user.trim() } else { user };
        rebuilt.push_str(lead);
        rebuilt.push_str(user);
        rebuilt.push_str("[/INST]");
        messages.push(Message {
            role: "user".into(),
            content: user_content.to_string(),
        });
        rest = after;
        if rest.is_empty() {
            break;
        }
        let (answer, after) = rest
            .split_once("</s>")
            .ok_or("text: an answer after [/INST] is not closed by </s>")?;
        rebuilt.push_str(answer);
        rebuilt.push_str("</s>");
        messages.push(Message {
            role: "assistant".into(),
            content: if spaced { answer.trim() } else { answer }.to_string(),
        });
        rest = after;
    }
    Ok((messages, rebuilt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turns(messages: &[Message]) -> Vec<(&str, &str)> {
        messages
            .iter()
            .map(|m| (m.role.as_str(), m.content.as_str()))
            .collect()
    }

    #[test]
    fn chatml_reads_back_with_or_without_a_think_prompt() {
        let text = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
        assert_eq!(detect(text), Some(Family::Chatml));
        let m = parse(text, Family::Chatml).unwrap();
        assert_eq!(turns(&m), [("system", "Be brief."), ("user", "Hi!")]);
        assert!(parse("<|im_start|>user\nHi!<|im_end|>\ntrailing", Family::Chatml).is_err());
        assert!(parse("<|im_start|>user\nHi!", Family::Chatml).is_err());
    }

    #[test]
    fn llama3_drops_its_date_preamble() {
        let text = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 15 Jan 2026\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
        let m = parse(text, Family::Llama3).unwrap();
        assert_eq!(turns(&m), [("system", "Be brief."), ("user", "Hi!")]);
        let no_system = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 15 Jan 2026\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>";
        assert_eq!(
            turns(&parse(no_system, Family::Llama3).unwrap()),
            [("user", "Hi!")]
        );
    }

    #[test]
    fn mistral_reads_turns_and_a_system_prompt() {
        let text = "<s>[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi![/INST]Hello.</s>[INST]2+2?[/INST]";
        let m = parse(text, Family::Mistral).unwrap();
        assert_eq!(
            turns(&m),
            [
                ("system", "Be brief."),
                ("user", "Hi!"),
                ("assistant", "Hello."),
                ("user", "2+2?")
            ]
        );
        let spaced = "<s>[INST] Hi! [/INST] Hello.</s>[INST] 2+2? [/INST]";
        let m = parse(spaced, Family::Mistral).unwrap();
        assert_eq!(
            turns(&m),
            [("user", "Hi!"), ("assistant", "Hello."), ("user", "2+2?")]
        );
        assert!(parse("<s>[INST]Hi![/INST]Hello.", Family::Mistral).is_err());
    }
}
