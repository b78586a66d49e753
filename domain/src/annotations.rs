//! What clients attach to a task besides its content: an `owner` (the agent or
//! person working on it) and `metadata`, a JSON object the daemon keeps but
//! never interprets (an agent's `activeForm`, a description, its own keys).
//!
//! Metadata changes arrive as patches (JSON merge patch, RFC 7396, at the top
//! level): a key set to a value is set, a key set to `null` is removed, keys
//! the patch does not name are kept. So two writers touching different keys
//! never undo each other.
use serde_json::{Map, Value};

use super::change::Change;
use super::error::Error;
use super::model::TaskId;

pub const MAX_OWNER_CHARS: usize = 128;
/// The stored object, encoded: room for notes, not for files.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;

/// A JSON object, parsed from a client's text.
pub type Patch = Map<String, Value>;

/// An owner as stored: trimmed, `None` when empty (empty clears it).
pub fn validate_owner(field: &str, owner: &str) -> Result<Option<String>, Error> {
    let owner = owner.trim();
    if owner.chars().count() > MAX_OWNER_CHARS {
        return Err(Error::invalid(
            field,
            format!("is longer than {MAX_OWNER_CHARS} characters"),
        ));
    }
    if owner.chars().any(char::is_control) {
        return Err(Error::invalid(field, "must not contain control characters"));
    }
    Ok(Some(owner.to_string()).filter(|o| !o.is_empty()))
}

/// A metadata patch: a JSON object, or empty text for no change.
pub fn parse_patch(field: &str, text: &str) -> Result<Option<Patch>, Error> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(patch)) => Ok(Some(patch)),
        Ok(other) => Err(Error::invalid(
            field,
            format!("must be a JSON object, not {}", json_type(&other)),
        )),
        Err(e) => Err(Error::invalid(field, format!("is not JSON: {e}"))),
    }
}

/// The metadata after `patch`: `None` when no key is left.
pub fn apply_patch(
    field: &str,
    stored: Option<&str>,
    patch: &Patch,
) -> Result<Option<String>, Error> {
    let mut object = match stored.map(serde_json::from_str::<Value>) {
        None => Map::new(),
        Some(Ok(Value::Object(object))) => object,
        // Only this module writes the column, always an object.
        Some(_) => {
            return Err(Error::invalid(
                field,
                "the stored metadata is not an object",
            ))
        }
    };
    for (key, value) in patch {
        match value {
            Value::Null => object.remove(key),
            value => object.insert(key.clone(), value.clone()),
        };
    }
    if object.is_empty() {
        return Ok(None);
    }
    let text = Value::Object(object).to_string();
    if text.len() > MAX_METADATA_BYTES {
        return Err(Error::invalid(
            field,
            format!(
                "would make the task's metadata {} bytes; at most {MAX_METADATA_BYTES} are kept",
                text.len()
            ),
        ));
    }
    Ok(Some(text))
}

/// The change `patch` makes to task `id`'s metadata `stored`, if it makes
/// one; `field` names the patch in an error.
pub fn metadata_change(
    field: &str,
    id: TaskId,
    stored: Option<&str>,
    patch: &Patch,
) -> Result<Option<Change>, Error> {
    let metadata = apply_patch(field, stored, patch)?;
    Ok(
        (metadata.as_deref() != stored).then(|| Change::MetadataChanged {
            id,
            old: stored.map(str::to_string),
            new: metadata,
        }),
    )
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(text: &str) -> Patch {
        parse_patch("m", text).unwrap().unwrap()
    }

    #[test]
    fn a_patch_sets_removes_and_keeps_keys() {
        let stored = apply_patch("m", None, &patch(r#"{"a":1,"b":"x"}"#)).unwrap();
        assert_eq!(stored.as_deref(), Some(r#"{"a":1,"b":"x"}"#));
        let stored = apply_patch("m", stored.as_deref(), &patch(r#"{"a":null,"c":[1]}"#)).unwrap();
        assert_eq!(stored.as_deref(), Some(r#"{"b":"x","c":[1]}"#));
        let cleared =
            apply_patch("m", stored.as_deref(), &patch(r#"{"b":null,"c":null}"#)).unwrap();
        assert_eq!(cleared, None);
    }

    #[test]
    fn patches_are_objects_and_bounded() {
        assert_eq!(parse_patch("m", " ").unwrap(), None);
        let err = parse_patch("metadata", "[1]").unwrap_err().to_string();
        assert_eq!(err, "metadata: must be a JSON object, not an array");
        assert!(parse_patch("m", "{")
            .unwrap_err()
            .to_string()
            .starts_with("m: is not JSON"));
        let big = patch(&format!(r#"{{"k":"{}"}}"#, "x".repeat(MAX_METADATA_BYTES)));
        assert!(apply_patch("m", None, &big).is_err());
    }

    #[test]
    fn owners_are_trimmed_and_plain() {
        assert_eq!(
            validate_owner("o", " agent-1 ").unwrap().as_deref(),
            Some("agent-1")
        );
        assert_eq!(validate_owner("o", "  ").unwrap(), None);
        assert!(validate_owner("o", "a\u{1b}[31m").is_err());
        assert!(validate_owner("o", &"x".repeat(MAX_OWNER_CHARS + 1)).is_err());
    }
}
