//! `--json` output: proto messages as JSON with the proto field names as keys.
//! prost types do not derive `Serialize`, so the mapping is spelled out here.
use serde_json::{json, Value};
use todod::proto::{Event, Plan, PlanSummary, Progress, Task, WriteTodosResponse};

pub fn plan(p: &Plan) -> Value {
    json!({
        "name": p.name,
        "title": p.title,
        "revision": p.revision,
        "created_at": p.created_at,
        "updated_at": p.updated_at,
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
        "message": p.message,
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
        "spec_json": t.spec_json,
        "progress": t.progress.as_ref().map_or(Value::Null, progress),
        "result_json": t.result_json,
        "error": t.error,
        "revision": t.revision,
        "archived": t.archived,
        "created_at": t.created_at,
        "updated_at": t.updated_at,
        "started_at": t.started_at,
        "finished_at": t.finished_at,
    })
}

pub fn tasks(ts: &[Task]) -> Value {
    Value::Array(ts.iter().map(task).collect())
}

pub fn summary(s: &PlanSummary) -> Value {
    json!({
        "plan": opt_plan(s.plan.as_ref()),
        "counts": s.counts.iter().map(|c| json!({"status": c.status, "count": c.count})).collect::<Vec<_>>(),
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
