//! The one message model every phase reads: chat messages as transformers
//! and vLLM take them. Plain logic, no I/O.
//!
//! A conversation is a list of JSON message objects, kept as they came:
//! any role of [`ROLES`], `content` as a string, null (or absent) or a list
//! of `{"type": "text", "text"}` parts, `tool_calls`, `tool_call_id`,
//! `name`, `reasoning_content` (or its alias `reasoning`), and every other
//! key, which the template gets as it was given. Beside the messages, a line
//! may carry `tools` (function schemas), `documents`, `tool_choice` and
//! `parallel_tool_calls` ([`Request`]).
//!
//! [`check_messages`] refuses only what cannot be a conversation (naming the
//! field and why); [`for_template`] is the normalisation vLLM applies before
//! a text template sees the messages, so that a rendering matches what the
//! served model was trained on: text parts joined with `"\n"`, null content
//! as `""`, tool-call `arguments` given as JSON text parsed into an object
//! (unless [`ToolArguments::Text`]: templates such as DeepSeek V3.1's print
//! them as text), and `reasoning` handed over as `reasoning_content`.
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The roles a message may have. Which of them a template renders is the
/// template's business: one that does not know a role says so by raising.
pub const ROLES: &[&str] = &[
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "ipython",
    "function",
];

/// Content-part types that carry something other than text.
const MEDIA_PARTS: &[&str] = &[
    "image_url",
    "image",
    "input_image",
    "input_audio",
    "audio",
    "audio_url",
    "video",
    "video_url",
    "file",
];

/// How tool-call `arguments` reach the template.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolArguments {
    /// Parsed into an object, as vLLM does for text templates (most
    /// templates print them with `tojson`).
    #[default]
    Object,
    /// As JSON text, for templates that print them as they are.
    Text,
}

/// The request fields a line may carry beside its messages, in the order a
/// request body has them.
pub const REQUEST_FIELDS: [&str; 4] = ["tools", "documents", "tool_choice", "parallel_tool_calls"];

/// What a request line carries beside its messages, each as it came.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    pub tools: Option<Value>,
    pub documents: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<Value>,
}

impl Request {
    /// The request fields of `object` (a line, or a Batch line's body),
    /// checked; a null field counts as absent.
    pub fn read(object: &Map<String, Value>, prefix: &str) -> Result<Request, String> {
        let get = |key: &str| object.get(key).filter(|v| !v.is_null()).cloned();
        let request = Request {
            tools: get("tools"),
            documents: get("documents"),
            tool_choice: get("tool_choice"),
            parallel_tool_calls: get("parallel_tool_calls"),
        };
        if let Some(tools) = &request.tools {
            check_tools(tools, &format!("{prefix}tools"))?;
        }
        if let Some(documents) = &request.documents {
            if !documents.is_array() {
                return Err(format!("{prefix}documents: expected a list of documents"));
            }
        }
        if let Some(p) = &request.parallel_tool_calls {
            if !p.is_boolean() {
                return Err(format!(
                    "{prefix}parallel_tool_calls: expected true or false"
                ));
            }
        }
        if let Some(choice) = &request.tool_choice {
            if !(choice.is_string() || choice.is_object()) {
                return Err(format!(
                    "{prefix}tool_choice: expected \"auto\", \"none\", \"required\" or \
                     {{\"type\": \"function\", \"function\": {{\"name\"}}}}"
                ));
            }
        }
        Ok(request)
    }

    /// The fields that are set, in the order a request body has them.
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, &Value)> {
        [
            ("tools", &self.tools),
            ("documents", &self.documents),
            ("tool_choice", &self.tool_choice),
            ("parallel_tool_calls", &self.parallel_tool_calls),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
    }

    /// Puts the set fields into `object` (an output line or a Batch body).
    pub fn insert_into(&self, object: &mut Map<String, Value>) {
        for (key, value) in self.fields() {
            object.insert(key.into(), value.clone());
        }
    }
}

/// Checks a `tools` value: a list of function schemas, either as the chat
/// API sends them (`{"type": "function", "function": {"name", ...}}`) or
/// bare (`{"name", "parameters", ...}`), as some datasets keep them.
pub fn check_tools(tools: &Value, field: &str) -> Result<(), String> {
    let list = tools
        .as_array()
        .ok_or_else(|| format!("{field}: expected a list of function schemas"))?;
    for (i, tool) in list.iter().enumerate() {
        let not_schema = || {
            format!(
                "{field}[{i}]: not a function schema ({{\"type\": \"function\", \"function\": \
                 {{\"name\", \"description\", \"parameters\"}}}})"
            )
        };
        let tool = tool.as_object().ok_or_else(not_schema)?;
        let function = match tool.get("type") {
            Some(Value::String(t)) if t == "function" => tool
                .get("function")
                .and_then(Value::as_object)
                .ok_or_else(not_schema)?,
            Some(Value::String(t)) => {
                return Err(format!(
                "{field}[{i}].type: {t:?} is not \"function\" (only function tools are rendered)"
            ))
            }
            Some(_) => return Err(not_schema()),
            None => tool,
        };
        if !function.get("name").is_some_and(Value::is_string) {
            return Err(format!(
                "{field}[{i}]: a function schema needs a \"name\" (a string)"
            ));
        }
        if let Some(p) = function.get("parameters") {
            if !p.is_object() {
                return Err(format!(
                    "{field}[{i}]: \"parameters\" must be a JSON Schema object"
                ));
            }
        }
    }
    Ok(())
}

/// Checks a list of messages; `field` names it in errors (`messages`,
/// `body.messages`). Nothing is changed: what is kept is what came.
pub fn check_messages(value: &Value, field: &str, arguments: ToolArguments) -> Result<(), String> {
    let list = value
        .as_array()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| format!("{field}: expected a non-empty array of messages"))?;
    for (i, message) in list.iter().enumerate() {
        check_message(message, &format!("{field}[{i}]"), arguments)?;
    }
    Ok(())
}

fn check_message(message: &Value, at: &str, arguments: ToolArguments) -> Result<(), String> {
    let message = message
        .as_object()
        .ok_or_else(|| format!("{at}: expected a message object"))?;
    let role = match message.get("role") {
        None => return Err(format!("{at}.role: missing")),
        Some(Value::String(role)) => role.as_str(),
        Some(_) => return Err(format!("{at}.role: expected a string")),
    };
    if !ROLES.contains(&role) {
        return Err(format!(
            "{at}.role: unknown role {role:?} (one of {})",
            ROLES.join(", ")
        ));
    }
    match message.get("content") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(Value::Array(parts)) => {
            for (j, part) in parts.iter().enumerate() {
                check_part(part, &format!("{at}.content[{j}]"))?;
            }
        }
        Some(_) => {
            return Err(format!(
                "{at}.content: expected a string, null or a list of content parts"
            ))
        }
    }
    for key in ["reasoning_content", "reasoning", "name", "tool_call_id"] {
        match message.get(key) {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(_) => return Err(format!("{at}.{key}: expected a string")),
        }
    }
    if role == "tool" && !message.get("tool_call_id").is_some_and(Value::is_string) {
        return Err(format!(
            "{at}.tool_call_id: missing (a tool turn names the call it answers)"
        ));
    }
    match message.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(calls)) => {
            if role != "assistant" {
                return Err(format!(
                    "{at}.tool_calls: only an assistant turn makes tool calls, not {role:?}"
                ));
            }
            for (k, call) in calls.iter().enumerate() {
                check_call(call, &format!("{at}.tool_calls[{k}]"), arguments)?;
            }
        }
        Some(_) => return Err(format!("{at}.tool_calls: expected a list of tool calls")),
    }
    Ok(())
}

fn check_part(part: &Value, at: &str) -> Result<(), String> {
    let part = part
        .as_object()
        .ok_or_else(|| format!("{at}: expected a content part object"))?;
    match part.get("type").and_then(Value::as_str) {
        Some("text") => match part.get("text") {
            Some(Value::String(_)) => Ok(()),
            _ => Err(format!("{at}.text: expected a string")),
        },
        Some(kind) if MEDIA_PARTS.contains(&kind) => Err(format!(
            "{at}: an {kind} part; todod renders text only (no images, audio or files yet)"
        )),
        Some(kind) => Err(format!(
            "{at}.type: {kind:?} is not a part type todod renders (text)"
        )),
        None => Err(format!("{at}.type: missing")),
    }
}

fn check_call(call: &Value, at: &str, arguments: ToolArguments) -> Result<(), String> {
    let call = call
        .as_object()
        .ok_or_else(|| format!("{at}: expected a tool call object"))?;
    if let Some(t) = call.get("type") {
        if t != "function" {
            return Err(format!("{at}.type: expected \"function\""));
        }
    }
    if !matches!(
        call.get("id"),
        None | Some(Value::Null) | Some(Value::String(_))
    ) {
        return Err(format!("{at}.id: expected a string"));
    }
    let function = call
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{at}.function: missing (a call names a function)"))?;
    if !function.get("name").is_some_and(Value::is_string) {
        return Err(format!("{at}.function.name: expected a string"));
    }
    match (function.get("arguments"), arguments) {
        (None | Some(Value::Object(_)), _) => Ok(()),
        (Some(Value::String(_)), ToolArguments::Text) => Ok(()),
        (Some(Value::String(text)), ToolArguments::Object) => {
            match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(_)) => Ok(()),
                Ok(_) => Err(format!(
                    "{at}.function.arguments: JSON, but not an object of arguments"
                )),
                Err(e) => Err(format!("{at}.function.arguments: not JSON ({e})")),
            }
        }
        (Some(_), _) => Err(format!(
            "{at}.function.arguments: expected a JSON object or its text"
        )),
    }
}

/// The text of a content value: a string, `""` for null, text parts joined
/// with `"\n"` (checked messages hold no other parts).
pub fn text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Whether a message makes tool calls.
pub fn has_tool_calls(message: &Value) -> bool {
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty())
}

/// The messages as a text template takes them (see the module's docs).
/// `messages` must have passed [`check_messages`].
pub fn for_template(messages: &[Value], arguments: ToolArguments) -> Value {
    Value::Array(messages.iter().map(|m| normalised(m, arguments)).collect())
}

fn normalised(message: &Value, arguments: ToolArguments) -> Value {
    let Some(object) = message.as_object() else {
        return message.clone();
    };
    let mut out = object.clone();
    match out.get("content") {
        Some(Value::String(_)) => {}
        content => {
            let joined = text(content);
            out.insert("content".into(), Value::String(joined));
        }
    }
    if !out.contains_key("reasoning_content") {
        if let Some(reasoning) = out.get("reasoning").filter(|r| r.is_string()).cloned() {
            out.insert("reasoning_content".into(), reasoning);
        }
    }
    if let Some(Value::Array(calls)) = out.get_mut("tool_calls") {
        for call in calls {
            let Some(function) = call.get_mut("function").and_then(Value::as_object_mut) else {
                continue;
            };
            let Some(args) = function.get_mut("arguments") else {
                continue;
            };
            match (&*args, arguments) {
                (Value::String(text), ToolArguments::Object) => {
                    if let Ok(parsed) = serde_json::from_str::<Value>(text) {
                        *args = parsed;
                    }
                }
                (Value::Object(_), ToolArguments::Text) => {
                    *args = Value::String(python_json(args));
                }
                _ => {}
            }
        }
    }
    Value::Object(out)
}

/// JSON text as Python's `json.dumps` writes it by default (`", "` and
/// `": "` between items, non-ASCII escaped): how an SDK turns an arguments
/// object into text.
pub fn python_json(value: &Value) -> String {
    crate::chat_template::python_json(value)
}

#[cfg(test)]
mod tests;
