//! How the API's messages read as JSON (`todoctl --json`, the MCP server's
//! structured answers): the build script derives `Serialize` on every
//! message and points fields here, so a field added to the proto appears in
//! the JSON by itself. Shaped for jq: a `*_json` field is a nested object
//! under the name without the suffix (`spec`, `result`, `detail`,
//! `metadata`), a plan's counts are a map by status, and a text that proto3
//! leaves empty for "absent" is null.
use serde::ser::{SerializeMap, Serializer};

/// Empty text (proto3's absent) as null.
pub fn empty_as_null<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    if text.is_empty() {
        s.serialize_none()
    } else {
        s.serialize_str(text)
    }
}

/// A JSON document held as text, nested; null when empty, the text itself
/// when it is not JSON (it always is, from the daemon).
pub fn nested<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    if text.trim().is_empty() {
        return s.serialize_none();
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => serde::Serialize::serialize(&value, s),
        Err(_) => s.serialize_str(text),
    }
}

/// A plan's counts as `{"pending": 2, ...}`.
pub fn counts<S: Serializer>(counts: &[crate::StatusCount], s: S) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(counts.len()))?;
    for c in counts {
        map.serialize_entry(&c.status, &c.count)?;
    }
    map.end()
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::{PlanSummary, Progress, StatusCount, Task};

    #[test]
    fn json_held_as_text_is_nested_and_absent_is_null() {
        let t = Task {
            id: "t1".into(),
            depends_on: vec!["t0".into()],
            spec_json: r#"{"model": "m"}"#.into(),
            result_json: r#"{"records": 3}"#.into(),
            progress: Some(Box::new(Progress {
                done: 3,
                detail_json: r#"{"stage": "decided"}"#.into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["id"], "t1");
        assert_eq!(v["depends_on"], json!(["t0"]));
        assert_eq!(v["spec"]["model"], "m");
        assert_eq!(v["result"]["records"], 3);
        assert_eq!(v["progress"]["detail"]["stage"], "decided");
        assert_eq!(v["error"], Value::Null);
        assert_eq!(v["started_at"], Value::Null);
        assert_eq!(v["schedule"], Value::Null);
        assert_eq!(v["metadata"], Value::Null);
        assert!(v.get("spec_json").is_none(), "{v}");
        let s = PlanSummary {
            counts: vec![StatusCount {
                status: "pending".into(),
                count: 2,
            }],
            ..Default::default()
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["counts"], json!({"pending": 2}));
        assert_eq!(v["plan"], Value::Null);
    }
}
