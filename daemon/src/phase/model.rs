//! What a model directory, laid out as on the Hugging Face Hub, gives a phase:
//! its chat template (from `tokenizer_config.json`, or a `.jinja` file the
//! spec names), the special-token variables templates read (`bos_token`,
//! `eos_token`), and its tokenizer.
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::chat_template::ChatTemplate;

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
