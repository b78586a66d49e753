//! `--json` output: proto messages as JSON with the proto field names as keys,
//! shaped for jq: a spec, a result and a progress detail are nested objects
//! (`spec`, `result`, `progress.detail`), not JSON strings inside JSON;
//! counts are a map by status; a time or text that is absent is null.
//! prost types do not derive `Serialize`, so the mapping is spelled out here.
use serde_json::{json, Value};
use todod_proto::{Event, Plan, PlanSummary, Progress, Task, WriteTodosResponse};

/// Empty text (proto3's absent) as null.
fn text(s: &str) -> Value {
    if s.is_empty() {
        Value::Null
    } else {
        Value::String(s.to_string())
    }
}

/// A JSON document held as text, nested; null when empty, the text itself
/// when it is not JSON (it always is, from this daemon).
fn nested(s: &str) -> Value {
    if s.trim().is_empty() {
        return Value::Null;
    }
    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string()))
}

pub fn plan(p: &Plan) -> Value {
    json!({
        "name": p.name,
        "title": text(&p.title),
        "revision": p.revision,
        "created_at": text(&p.created_at),
        "updated_at": text(&p.updated_at),
        "archived_at": text(&p.archived_at),
    })
}

fn opt_plan(p: Option<&Plan>) -> Value {
    p.map_or(Value::Null, plan)
}

pub fn progress(p: &Progress) -> Value {
    json!({
        "done": p.done,
        "failed": p.failed,
        "total": p.total,
        "tokens": p.tokens,
        "rate_per_second": p.rate_per_second,
        "eta_seconds": p.eta_seconds,
        "message": text(&p.message),
        "rejected": p.rejected,
        "detail": nested(&p.detail_json),
    })
}

pub fn task(t: &Task) -> Value {
    json!({
        "id": t.id,
        "plan": t.plan,
        "content": t.content,
        "status": t.status,
        "priority": t.priority,
        "kind": t.kind,
        "position": t.position,
        "depends_on": t.depends_on,
        "readiness": t.readiness,
        "blocked_by": t.blocked_by,
        "spec": nested(&t.spec_json),
        "owner": text(&t.owner),
        "metadata": nested(&t.metadata_json),
        "progress": t.progress.as_ref().map_or(Value::Null, progress),
        "result": nested(&t.result_json),
        "error": text(&t.error),
        "revision": t.revision,
        "archived": t.archived,
        "created_at": text(&t.created_at),
        "updated_at": text(&t.updated_at),
        "started_at": text(&t.started_at),
        "finished_at": text(&t.finished_at),
    })
}

pub fn tasks(ts: &[Task]) -> Value {
    Value::Array(ts.iter().map(task).collect())
}

pub fn summary(s: &PlanSummary) -> Value {
    json!({
        "plan": opt_plan(s.plan.as_ref()),
        "counts": s.counts.iter().map(|c| (c.status.clone(), json!(c.count))).collect::<serde_json::Map<_, _>>(),
        "ready_count": s.ready_count,
        "blocked_count": s.blocked_count,
        "blocked_by_failure_count": s.blocked_by_failure_count,
        "total": s.total,
        "in_progress": tasks(&s.in_progress),
        "ready": tasks(&s.ready),
        "blocked": tasks(&s.blocked),
    })
}

pub fn event(e: &Event) -> Value {
    json!({
        "seq": e.seq,
        "plan": e.plan,
        "task_id": e.task_id,
        "type": e.r#type,
        "from_status": e.from_status,
        "to_status": e.to_status,
        "old_value": e.old_value,
        "new_value": e.new_value,
        "actor": e.actor,
        "reason": e.reason,
        "at": e.at,
        "plan_revision": e.plan_revision,
    })
}

pub fn write_response(r: &WriteTodosResponse) -> Value {
    json!({
        "plan": opt_plan(r.plan.as_ref()),
        "todos": tasks(&r.todos),
        "created": r.created,
        "archived": r.archived,
    })
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
    }

    #[test]
    fn json_held_as_text_is_nested_and_absent_is_null() {
        let t = Task {
            id: "t1".into(),
            spec_json: r#"{"model": "m"}"#.into(),
            result_json: r#"{"records": 3}"#.into(),
            progress: Some(Progress {
                done: 3,
                detail_json: r#"{"stage": "decided"}"#.into(),
                ..Default::default()
            }),
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
