//! `--json` output: the API's messages as the proto crate serialises them
//! (`todod_proto::json`: derived from the proto, so no field is left out or
//! drifts), shaped for jq: a spec, a result, metadata and a progress detail
//! are nested objects (`spec`, `result`, `metadata`, `progress.detail`),
//! counts are a map by status, and a time or text that is absent is null.
use serde::Serialize;
use serde_json::{json, Value};
use todod_proto::{Event, Plan, PlanSummary, Task, WriteTodosResponse};

/// Any API message as JSON.
fn of(message: &impl Serialize) -> Value {
    serde_json::to_value(message).unwrap_or(Value::Null)
}

pub fn plan(p: &Plan) -> Value {
    of(p)
}

pub fn task(t: &Task) -> Value {
    of(t)
}

pub fn tasks(ts: &[Task]) -> Value {
    Value::Array(ts.iter().map(task).collect())
}

pub fn summary(s: &PlanSummary) -> Value {
    of(s)
}

pub fn event(e: &Event) -> Value {
    of(e)
}

pub fn write_response(r: &WriteTodosResponse) -> Value {
    of(r)
}

/// A task as a todo item, the shape `todoctl write` reads back.
pub fn todo_item(t: &Task) -> Value {
    json!({
        "id": t.id,
        "content": t.content,
        "status": t.status,
        "priority": t.priority,
        "depends_on": t.depends_on,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_keys_mirror_the_proto() {
        let t = Task {
            id: "t1".into(),
            depends_on: vec!["t0".into()],
            ..Default::default()
        };
        let v = task(&t);
        assert_eq!(v["id"], "t1");
        assert_eq!(v["depends_on"], json!(["t0"]));
        assert_eq!(v["progress"], Value::Null);
        assert!(v.get("blocked_by").is_some() && v.get("finished_at").is_some());
        // Every field of the message is there: nothing is mapped by hand.
        assert!(
            v.get("schedule").is_some() && v.get("owner").is_some(),
            "{v}"
        );
    }

    #[test]
    fn json_held_as_text_is_nested_and_absent_is_null() {
        let t = Task {
            id: "t1".into(),
            spec_json: r#"{"model": "m"}"#.into(),
            result_json: r#"{"records": 3}"#.into(),
            progress: Some(Box::new(todod_proto::Progress {
                done: 3,
                detail_json: r#"{"stage": "decided"}"#.into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let v = task(&t);
        assert_eq!(v["spec"]["model"], "m");
        assert_eq!(v["result"]["records"], 3);
        assert_eq!(v["progress"]["detail"]["stage"], "decided");
        assert_eq!(v["error"], Value::Null);
        assert_eq!(v["started_at"], Value::Null);
        let s = PlanSummary {
            counts: vec![todod_proto::StatusCount {
                status: "pending".into(),
                count: 2,
            }],
            ..Default::default()
        };
        assert_eq!(summary(&s)["counts"]["pending"], 2);
    }

    #[test]
    fn todo_items_round_trip_through_the_write_parser() {
        let t = Task {
            id: "t1".into(),
            content: "a".into(),
            status: "pending".into(),
            priority: "low".into(),
            ..Default::default()
        };
        let parsed = crate::todo_input::todos_from_value(&json!([todo_item(&t)])).expect("valid");
        assert_eq!(parsed[0].id, "t1");
        assert_eq!(parsed[0].priority, "low");
    }
}
