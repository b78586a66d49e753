//! Parsing the todo list that `todoctl write` reads from stdin.
//!
//! Accepted shapes: a JSON array of items, or an object `{"todos": [...]}` (what
//! agent todo-write tools send). Each item is an object with `content` (string,
//! required) and optional `id`, `status`, `priority` (strings) and `depends_on`
//! / `dependsOn` (array of strings). `null` counts as absent. Other fields (such
//! as an agent's `activeForm`) are ignored. Every error names where it is, e.g.
//! `todos[2].content: expected a string, found a number`.
use serde_json::{Map, Value};
use todod_proto::TodoItem;

use crate::cli::{PRIORITIES, STATUSES};

/// Parses stdin bytes into todo items; the error message is ready for the user.
pub fn parse_todos(bytes: &[u8]) -> Result<Vec<TodoItem>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "stdin: invalid UTF-8 at byte {} (the todo list must be UTF-8 JSON)",
            e.valid_up_to()
        )
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(
            "stdin: empty input; expected a JSON array of todo items or {\"todos\": [...]}".into(),
        );
    }
    let value: Value = serde_json::from_str(text).map_err(|e| json_error("stdin", &e))?;
    todos_from_value(&value)
}

/// `stdin: invalid JSON at line 3 column 5: expected `,` or `}``.
pub fn json_error(source: &str, e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let reason = full.strip_suffix(&suffix).unwrap_or(&full);
    format!(
        "{source}: invalid JSON at line {} column {}: {reason}",
        e.line(),
        e.column()
    )
}

/// Validates the shape of an already parsed document.
pub fn todos_from_value(value: &Value) -> Result<Vec<TodoItem>, String> {
    let items = match value {
        Value::Array(items) => items,
        Value::Object(obj) => match obj.get("todos") {
            Some(Value::Array(items)) => items,
            Some(other) => return Err(format!("todos: expected an array, found {}", kind_of(other))),
            None => {
                return Err("stdin: expected a JSON array of todo items or an object with a \"todos\" array; \
                     the object has no \"todos\" field"
                    .into())
            }
        },
        other => {
            return Err(format!(
                "stdin: expected a JSON array of todo items or an object with a \"todos\" array, found {}",
                kind_of(other)
            ))
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| item_from_value(&format!("todos[{i}]"), item))
        .collect()
}

fn item_from_value(path: &str, value: &Value) -> Result<TodoItem, String> {
    let Value::Object(obj) = value else {
        return Err(format!(
            "{path}: expected an object with a \"content\" string, found {}",
            kind_of(value)
        ));
    };
    let content = match obj.get("content") {
        None | Some(Value::Null) => {
            return Err(format!(
                "{path}.content: missing (every item needs its text)"
            ))
        }
        Some(Value::String(s)) if s.trim().is_empty() => {
            return Err(format!("{path}.content: must not be empty"))
        }
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(format!(
                "{path}.content: expected a string, found {}",
                kind_of(other)
            ))
        }
    };
    let id = opt_string(obj, path, "id")?;
    let status = opt_string(obj, path, "status")?;
    check_one_of(path, "status", &status, &STATUSES)?;
    let priority = opt_string(obj, path, "priority")?;
    check_one_of(path, "priority", &priority, &PRIORITIES)?;
    let depends_on = match (obj.get("depends_on"), obj.get("dependsOn")) {
        (Some(a), Some(b)) if !a.is_null() && !b.is_null() => {
            return Err(format!(
                "{path}: give either \"depends_on\" or \"dependsOn\", not both"
            ))
        }
        (Some(v), _) if !v.is_null() => string_list(&format!("{path}.depends_on"), v)?,
        (_, Some(v)) if !v.is_null() => string_list(&format!("{path}.dependsOn"), v)?,
        _ => Vec::new(),
    };
    Ok(TodoItem {
        id,
        content,
        status,
        priority,
        depends_on,
        metadata_patch_json: String::new(),
    })
}

fn opt_string(obj: &Map<String, Value>, path: &str, field: &str) -> Result<String, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.trim().to_string()),
        Some(other) => Err(format!(
            "{path}.{field}: expected a string, found {}",
            kind_of(other)
        )),
    }
}

fn check_one_of(path: &str, field: &str, value: &str, allowed: &[&str]) -> Result<(), String> {
    if value.is_empty() || allowed.contains(&value) {
        return Ok(());
    }
    Err(format!(
        "{path}.{field}: {value:?} is not one of {}",
        allowed.join(", ")
    ))
}

fn string_list(path: &str, value: &Value) -> Result<Vec<String>, String> {
    let Value::Array(items) = value else {
        return Err(format!(
            "{path}: expected an array of task ids, found {}",
            kind_of(value)
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            Value::String(_) => Err(format!("{path}[{i}]: must not be empty")),
            other => Err(format!(
                "{path}[{i}]: expected a task id string, found {}",
                kind_of(other)
            )),
        })
        .collect()
}

fn kind_of(value: &Value) -> &'static str {
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

    fn err(input: &str) -> String {
        parse_todos(input.as_bytes()).expect_err("should fail")
    }

    #[test]
    fn accepts_a_bare_array() {
        let items = parse_todos(br#"[{"content": "a"}, {"id": "t2", "content": "b", "status": "completed", "priority": "high", "depends_on": ["t1"]}]"#)
            .expect("valid");
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].content, "a");
        assert_eq!(items[0].id, "");
        assert_eq!(items[0].status, "");
        assert_eq!(items[1].id, "t2");
        assert_eq!(items[1].status, "completed");
        assert_eq!(items[1].priority, "high");
        assert_eq!(items[1].depends_on, ["t1"]);
    }

    #[test]
    fn accepts_the_agent_object_shape_and_camel_case() {
        let input = r#"{"todos": [{"content": "x", "status": "in_progress", "activeForm": "Doing x", "dependsOn": ["t1", "t3"]}]}"#;
        let items = parse_todos(input.as_bytes()).expect("valid");
        assert_eq!(items[0].status, "in_progress");
        assert_eq!(items[0].depends_on, ["t1", "t3"]);
    }

    #[test]
    fn nulls_are_absent_and_empty_list_is_fine() {
        let items =
            parse_todos(br#"[{"id": null, "content": "x", "priority": null, "depends_on": null}]"#)
                .expect("valid");
        assert_eq!(items[0].id, "");
        assert!(parse_todos(b"[]").expect("valid").is_empty());
        assert!(parse_todos(b"\xef\xbb\xbf{\"todos\": []}")
            .expect("BOM ok")
            .is_empty());
    }

    #[test]
    fn invalid_utf8_names_the_byte() {
        let e = parse_todos(b"[{\"content\": \"caf\xe9\"}]").expect_err("bad utf-8");
        assert_eq!(
            e,
            "stdin: invalid UTF-8 at byte 17 (the todo list must be UTF-8 JSON)"
        );
    }

    #[test]
    fn invalid_json_names_line_and_column() {
        let e = err("[\n  {\"content\": \"a\"},\n  {\"content\" \"b\"}\n]");
        assert!(
            e.starts_with("stdin: invalid JSON at line 3 column 14: "),
            "{e}"
        );
        assert!(
            !e.ends_with("column 14"),
            "position must not be repeated: {e}"
        );
        assert!(err("").starts_with("stdin: empty input"));
    }

    #[test]
    fn wrong_shapes_name_the_path() {
        assert_eq!(
            err(r#"[{"content": "a"}, {"content": "b"}, {"content": 5}]"#),
            "todos[2].content: expected a string, found a number"
        );
        assert_eq!(
            err(r#"[{"status": "pending"}]"#),
            "todos[0].content: missing (every item needs its text)"
        );
        assert_eq!(
            err(r#"[{"content": "  "}]"#),
            "todos[0].content: must not be empty"
        );
        assert_eq!(
            err(r#"["a"]"#),
            "todos[0]: expected an object with a \"content\" string, found a string"
        );
        assert_eq!(
            err(r#"{"todos": {}}"#),
            "todos: expected an array, found an object"
        );
        assert!(err(r#"{"items": []}"#).contains("no \"todos\" field"));
        assert!(err("42").ends_with("found a number"));
        assert_eq!(
            err(r#"[{"content": "a", "id": 3}]"#),
            "todos[0].id: expected a string, found a number"
        );
        assert_eq!(
            err(r#"[{"content": "a", "depends_on": "t1"}]"#),
            "todos[0].depends_on: expected an array of task ids, found a string"
        );
        assert_eq!(
            err(r#"[{"content": "a", "dependsOn": [1]}]"#),
            "todos[0].dependsOn[0]: expected a task id string, found a number"
        );
        assert!(
            err(r#"[{"content": "a", "depends_on": [], "dependsOn": []}]"#).contains("not both")
        );
    }

    #[test]
    fn bad_enum_values_are_named() {
        assert_eq!(
            err(r#"[{"content": "a", "status": "done"}]"#),
            "todos[0].status: \"done\" is not one of pending, in_progress, completed, cancelled, failed"
        );
        assert!(err(r#"[{"content": "a", "priority": "urgent"}]"#)
            .starts_with("todos[0].priority: \"urgent\""));
    }
}
