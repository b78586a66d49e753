//! What the tools answer: a short text for the model to read, and the same
//! as structured JSON.
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};
use todod_proto::Task;

use super::session::Conflict;
use super::shapes::Shape;

/// A successful answer: text plus structured content.
pub fn answer(text: String, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

/// A tool error the model can act on.
pub fn refusal(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// The list, in the shape the agent wrote it.
pub fn list(shape: Shape, plan: &str, revision: i64, tasks: &[Task]) -> CallToolResult {
    answer(
        list_text(plan, revision, tasks),
        json!({
            shape.name_key(): plan,
            "revision": revision,
            shape.key(): tasks.iter().map(|t| shape.item(t)).collect::<Vec<_>>(),
        }),
    )
}

/// A full-list write that was refused, with the list as it is now.
pub fn conflict(shape: Shape, plan: &str, c: &Conflict) -> CallToolResult {
    let revision = c.current.plan.as_ref().map_or(0, |p| p.revision);
    let text = format!(
        "Not written: {}. Nothing was changed. The current list is below (revision \
         {revision}): merge your changes into it and write the whole list again, \
         with revision {revision}.\n\n{}",
        c.why,
        list_text(plan, revision, &c.current.todos)
    );
    let mut result = refusal(text);
    result.structured_content = Some(json!({
        "conflict": c.why,
        shape.name_key(): plan,
        "revision": revision,
        shape.key(): c.current.todos.iter().map(|t| shape.item(t)).collect::<Vec<_>>(),
    }));
    result
}

/// One line per task: id, status mark, content, and what holds it.
pub fn list_text(plan: &str, revision: i64, tasks: &[Task]) -> String {
    let mut out = format!(
        "Plan {plan:?}, revision {revision}: {} item(s). People see it with `todoctl status {plan}`.\n",
        tasks.len()
    );
    for t in tasks {
        out.push_str(&task_line(t));
        out.push('\n');
    }
    out
}

pub fn task_line(t: &Task) -> String {
    let mark = match t.status.as_str() {
        "completed" => "[x]",
        "in_progress" => "[>]",
        "cancelled" => "[-]",
        "failed" => "[!]",
        _ => "[ ]",
    };
    let mut line = format!("{} {mark} {} ({})", t.id, one_line(&t.content), t.status);
    if t.priority != "medium" && !t.priority.is_empty() {
        line.push_str(&format!(", {} priority", t.priority));
    }
    if !t.owner.is_empty() {
        line.push_str(&format!(", owner {}", one_line(&t.owner)));
    }
    if !t.blocked_by.is_empty() {
        line.push_str(&format!(", blocked by {}", t.blocked_by.join(", ")));
    }
    if t.kind != "todo" {
        line.push_str(&format!(", {} phase run by the daemon", t.kind));
        if let Some(p) = &t.progress {
            if p.total > 0 {
                line.push_str(&format!(", {}/{} done", p.done, p.total));
            }
            if p.failed > 0 {
                line.push_str(&format!(", {} failed", p.failed));
            }
        }
        if !t.error.is_empty() {
            line.push_str(&format!(", error: {}", one_line(&t.error)));
        }
    }
    line
}

/// Text from the daemon, on one line and free of control characters.
pub fn one_line(s: &str) -> String {
    crate::safe::escape(&crate::render::one_line(s)).into_owned()
}
