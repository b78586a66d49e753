//! What a model directory, laid out as on the Hugging Face Hub, gives a phase:
//! its chat template (from `tokenizer_config.json`, or a `.jinja` file the
//! spec names), the special-token variables templates read (`bos_token`,
//! `eos_token`), and its tokenizer.
use std::path::Path;

use serde_json::{json, Map, Value};

use todod_format::chat_template::ChatTemplate;

/// The chat templates a phase renders with: the one asked for, and the
/// model's `tool_use` template, which transformers picks instead for a
/// conversation with tools when no template name was asked for and the
/// model ships named templates (Hermes, some Mistral and Cohere models).
pub struct Templates {
    pub default: ChatTemplate,
    pub tool_use: Option<ChatTemplate>,
}

impl Templates {
    /// The template for a conversation with (`true`) or without tools.
    pub fn pick(&self, has_tools: bool) -> &ChatTemplate {
        match (&self.tool_use, has_tools) {
            (Some(tool_use), true) => tool_use,
            _ => &self.default,
        }
    }

    /// What a pass holds its output to: the template's sha256, and the
    /// `tool_use` one's after it when there is one.
    pub fn identity(&self) -> String {
        match &self.tool_use {
            None => self.default.sha256().to_string(),
            Some(t) => format!("{} tool_use:{}", self.default.sha256(), t.sha256()),
        }
    }
}

/// How a phase renders one conversation: as transformers does with the
/// request's `tools` and `documents`, the messages normalised as vLLM hands
/// them to a text template, with the `tool_use` template for a conversation
/// with tools when the model has one. Plain `{role, content}` turns with no
/// tools take a shorter road to the same text.
pub struct Conversation<'a> {
    pub messages: &'a [Value],
    pub request: &'a todod_format::messages::Request,
    pub add_generation_prompt: bool,
}

impl Templates {
    pub fn render(
        &self,
        conversation: Conversation<'_>,
        arguments: todod_format::messages::ToolArguments,
        variables: &Map<String, Value>,
        now: todod_format::chat_template::Clock,
    ) -> Result<String, todod_format::chat_template::RenderError> {
        let Conversation {
            messages,
            request,
            add_generation_prompt,
        } = conversation;
        let template = self.pick(request.tools.is_some());
        if request.tools.is_none() && request.documents.is_none() {
            if let Some(plain) = plain_turns(messages) {
                return template.render_plain(&plain, add_generation_prompt, variables, now);
            }
        }
        let normalised = todod_format::messages::for_template(messages, arguments);
        template.render(&todod_format::chat_template::RenderInput {
            messages: &normalised,
            tools: request.tools.as_ref(),
            documents: request.documents.as_ref(),
            add_generation_prompt,
            variables,
            now,
        })
    }
}

/// `(role, content)` of each message when every one is exactly that and
/// its content a string: what `render_plain` takes.
fn plain_turns(messages: &[Value]) -> Option<Vec<(&str, &str)>> {
    messages
        .iter()
        .map(|m| {
            let m = m.as_object()?;
            if m.len() != 2 {
                return None;
            }
            Some((m.get("role")?.as_str()?, m.get("content")?.as_str()?))
        })
        .collect()
}

/// [`template`], with the model's `tool_use` template beside it when it
/// has one and neither a file nor a name was asked for.
pub fn templates(
    dir: Option<&Path>,
    file: Option<&Path>,
    name: Option<&str>,
) -> Result<Templates, String> {
    let default = template(dir, file, name)?;
    let tool_use = match (dir, file, name) {
        (Some(dir), None, None) if !dir.join("chat_template.jinja").is_file() => {
            match config(dir)? {
                Some(config) => {
                    match ChatTemplate::from_tokenizer_config(&config, Some("tool_use")) {
                        Ok((t, _)) => Some(t),
                        Err(todod_format::chat_template::TemplateError::NotFound { .. }) => None,
                        Err(e) => {
                            return Err(format!(
                                "{} (its tool_use template): {e}",
                                dir.join("tokenizer_config.json").display()
                            ))
                        }
                    }
                }
                None => None,
            }
        }
        _ => None,
    };
    Ok(Templates { default, tool_use })
}

/// `tokenizer_config.json` of a model directory, if it has one.
pub fn config(dir: &Path) -> Result<Option<Value>, String> {
    let path = dir.join("tokenizer_config.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{} is not JSON: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// A special token as tokenizer_config.json names it: a string, or an
/// object with its `content`.
fn token_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// The variables a template sees besides the messages: the model's special
/// tokens, then the spec's own (which win).
pub fn variables(config: Option<&Value>, extra: &Map<String, Value>) -> Map<String, Value> {
    let mut vars = Map::new();
    if let Some(config) = config {
        for key in [
            "bos_token",
            "eos_token",
            "unk_token",
            "sep_token",
            "pad_token",
            "cls_token",
            "mask_token",
        ] {
            if let Some(token) = token_text(config.get(key)) {
                vars.insert(key.into(), json!(token));
            }
        }
    }
    for (k, v) in extra {
        vars.insert(k.clone(), v.clone());
    }
    vars
}

/// The chat template: `file` if given, else the model directory's.
pub fn template(
    dir: Option<&Path>,
    file: Option<&Path>,
    name: Option<&str>,
) -> Result<ChatTemplate, String> {
    if let Some(path) = file {
        let source = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        return ChatTemplate::from_source(&source).map_err(|e| format!("{}: {e}", path.display()));
    }
    let dir = dir.ok_or("no chat template: give a model directory or a .jinja file")?;
    // A standalone chat_template.jinja wins over the config, as in transformers.
    let standalone = dir.join("chat_template.jinja");
    if standalone.is_file() {
        return template(None, Some(&standalone), name);
    }
    let config = config(dir)?.ok_or_else(|| {
        format!(
            "{} has no tokenizer_config.json (nor chat_template.jinja) to take the chat template from",
            dir.display()
        )
    })?;
    ChatTemplate::from_tokenizer_config(&config, name)
        .map(|(template, _)| template)
        .map_err(|e| format!("{}: {e}", dir.join("tokenizer_config.json").display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_with_tools_gets_the_models_tool_use_template() {
        let dir = tempfile::tempdir().unwrap();
        let config = json!({"chat_template": [
            {"name": "default", "template": "plain"},
            {"name": "tool_use", "template": "tools"},
        ]});
        std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
        let render = |t: &ChatTemplate| {
            t.render_plain(&[("user", "q")], false, &Map::new(), Default::default())
                .unwrap()
        };
        let both = templates(Some(dir.path()), None, None).unwrap();
        assert_eq!(render(both.pick(false)), "plain");
        assert_eq!(render(both.pick(true)), "tools");
        assert!(both.identity().contains(" tool_use:"));
        // A name asked for is the one used, tools or not.
        let named = templates(Some(dir.path()), None, Some("default")).unwrap();
        assert_eq!(render(named.pick(true)), "plain");
        assert_eq!(named.identity(), named.default.sha256());
    }
}
