//! Hand-written conversions between protobuf messages and domain/store types.
//! Validation of client input happens here, so every error names its field.

use crate::proto;
use crate::proto::results::ProgressCounts;
use todod_domain::annotations;
use todod_domain::model::{validate_content, validate_plan_name};
use todod_domain::todo_list::TodoItem;
use todod_domain::{Error, Kind, Priority, Readiness, Status, TaskId};
use todod_store::{Detail, EventView, PlanSummary, PlanView, TaskView};

/// Most items one `WriteTodos` may carry.
pub const MAX_TODO_ITEMS: usize = 10_000;

pub fn time(ms: i64) -> String {
    todod_domain::time::rfc3339(ms)
}

fn optional_time(ms: Option<i64>) -> String {
    ms.map(time).unwrap_or_default()
}

pub fn plan_name(field: &str, name: &str) -> Result<String, Error> {
    validate_plan_name(field, name)?;
    Ok(name.to_string())
}

pub fn task_id(field: &str, id: &str) -> Result<TaskId, Error> {
    if id.trim().is_empty() {
        return Err(Error::invalid(field, "is required"));
    }
    TaskId::parse(field, id)
}

pub fn task_ids(field: &str, ids: &[String]) -> Result<Vec<TaskId>, Error> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| task_id(&format!("{field}[{i}]"), id))
        .collect()
}

/// Empty means `default`; anything else must be a known value.
fn optional<T>(
    field: &str,
    text: &str,
    parse: fn(&str, &str) -> Result<T, Error>,
) -> Result<Option<T>, Error> {
    if text.is_empty() {
        Ok(None)
    } else {
        parse(field, text).map(Some)
    }
}

pub fn status(field: &str, text: &str) -> Result<Status, Error> {
    optional(field, text, Status::parse)?.ok_or_else(|| Error::invalid(field, "is required"))
}

pub fn priority_or(field: &str, text: &str, default: Priority) -> Result<Priority, Error> {
    Ok(optional(field, text, Priority::parse)?.unwrap_or(default))
}

pub fn kind_or_todo(field: &str, text: &str) -> Result<Kind, Error> {
    Ok(optional(field, text, todod_engine::phase::kinds::parse)?.unwrap_or(Kind::TODO))
}

pub fn statuses(field: &str, texts: &[String]) -> Result<Vec<Status>, Error> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| Status::parse(&format!("{field}[{i}]"), t))
        .collect()
}

pub fn kinds(field: &str, texts: &[String]) -> Result<Vec<Kind>, Error> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| todod_engine::phase::kinds::parse(&format!("{field}[{i}]"), t))
        .collect()
}

pub fn readiness(field: &str, texts: &[String]) -> Result<Vec<Readiness>, Error> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| Readiness::parse(&format!("{field}[{i}]"), t))
        .collect()
}

/// "" or "full" for every field; "basic" for what a list shows.
pub fn detail(field: &str, text: &str) -> Result<Detail, Error> {
    match text {
        "" | "full" => Ok(Detail::Full),
        "basic" => Ok(Detail::Basic),
        other => Err(Error::invalid(
            field,
            format!("unknown view {other:?}; expected full or basic"),
        )),
    }
}

pub fn todo_items(items: &[proto::TodoItem]) -> Result<Vec<TodoItem>, Error> {
    if items.len() > MAX_TODO_ITEMS {
        return Err(Error::invalid(
            "todos",
            format!(
                "has {} items; at most {MAX_TODO_ITEMS} are allowed",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let at = |name: &str| format!("todos[{i}].{name}");
            Ok(TodoItem {
                id: if item.id.trim().is_empty() {
                    None
                } else {
                    // An agent's own numbering ("1", "2") must not address
                    // another task: say how to add an item instead.
                    Some(TaskId::parse(&at("id"), &item.id).map_err(|e| match e {
                        Error::Invalid { field, reason } => Error::Invalid {
                            field,
                            reason: format!("{reason}; leave id empty for a new item"),
                        },
                        other => other,
                    })?)
                },
                content: validate_content(&at("content"), &item.content)?,
                status: optional(&at("status"), &item.status, Status::parse)?,
                priority: optional(&at("priority"), &item.priority, Priority::parse)?,
                depends_on: if item.depends_on.is_empty() {
                    None
                } else {
                    Some(task_ids(&at("depends_on"), &item.depends_on)?)
                },
                metadata: annotations::parse_patch(
                    &at("metadata_patch_json"),
                    &item.metadata_patch_json,
                )?,
            })
        })
        .collect()
}

pub fn plan(view: PlanView) -> proto::Plan {
    proto::Plan {
        name: view.name,
        title: view.title,
        revision: view.revision,
        created_at: time(view.created_at),
        updated_at: time(view.updated_at),
        archived_at: optional_time(view.archived_at),
    }
}

fn progress(json: &str) -> Option<proto::Progress> {
    let counts = ProgressCounts::parse(json)?;
    let count = |n: Option<u64>| n.unwrap_or(0) as i64;
    Some(proto::Progress {
        done: count(counts.done),
        failed: count(counts.failed),
        total: count(counts.total),
        tokens: count(counts.tokens),
        rate_per_second: counts.rate_per_second.unwrap_or(0.0),
        eta_seconds: counts.eta_seconds.unwrap_or(0),
        rejected: count(counts.rejected),
        message: counts.message.unwrap_or_default(),
        detail_json: json.to_string(),
    })
}

pub fn task(view: TaskView) -> proto::Task {
    // What the task's kind makes of its result, for `status`.
    let summary = match (
        todod_engine::phase::kinds::get(view.kind),
        view.result.as_deref(),
    ) {
        (Some(kind), Some(result)) => kind.view(result).map(|v| v.summary),
        _ => None,
    };
    proto::Task {
        id: view.id.to_string(),
        plan: view.plan,
        content: view.content,
        // as_str, not Display: a 100k-task listing converts each of these.
        status: view.status.as_str().to_owned(),
        priority: view.priority.as_str().to_owned(),
        kind: view.kind.as_str().to_owned(),
        position: view.position,
        depends_on: view.depends_on.iter().map(ToString::to_string).collect(),
        readiness: view
            .readiness
            .map(|r| r.as_str().to_owned())
            .unwrap_or_default(),
        blocked_by: view.blocked_by.iter().map(ToString::to_string).collect(),
        spec_json: view.spec.unwrap_or_default(),
        progress: view.progress.as_deref().and_then(progress).map(Box::new),
        result_json: view.result.unwrap_or_default(),
        error: view.error.unwrap_or_default(),
        revision: view.revision,
        archived: view.archived,
        created_at: optional_time(view.created_at),
        updated_at: optional_time(view.updated_at),
        started_at: optional_time(view.started_at),
        finished_at: optional_time(view.finished_at),
        schedule: view.schedule.as_deref().and_then(schedule).map(Box::new),
        owner: view.owner.unwrap_or_default(),
        metadata_json: view.metadata.unwrap_or_default(),
        summary: summary.unwrap_or_default(),
        lease: view.lease.map(|(holder, expires)| {
            Box::new(proto::Lease {
                holder,
                expires_at: optional_time(expires),
            })
        }),
        shards: view
            .shards
            .into_iter()
            .map(|row| proto::Shard {
                index: row.shard.index,
                of: row.shard.of,
                // An expiry of 0: handed back (done, or its daemon stopped).
                lease: match (row.lease_owner, row.expires_at) {
                    (Some(holder), expires) if expires != Some(0) && !row.done => {
                        Some(proto::Lease {
                            holder,
                            expires_at: optional_time(expires),
                        })
                    }
                    _ => None,
                },
                done: row.done,
            })
            .collect(),
    }
}

/// The kinds a task may be, from the phase table.
pub fn kind_infos() -> Vec<proto::KindInfo> {
    let todo = proto::KindInfo {
        name: Kind::TODO.to_string(),
        summary: "a plain task of a todo list: its status, priority and dependencies are \
                  the clients' to move"
            .into(),
        phase: false,
        plan_section: String::new(),
        actions: vec![todod_domain::schedule::Action::Reopen.as_str().into()],
        output_fields: Vec::new(),
    };
    std::iter::once(todo)
        .chain(
            todod_engine::phase::kinds::TABLE
                .iter()
                .map(|k| proto::KindInfo {
                    name: k.name().into(),
                    summary: k.summary_line().into(),
                    phase: true,
                    plan_section: k.step().map(|s| s.section.to_string()).unwrap_or_default(),
                    actions: k.actions().iter().map(|a| a.as_str().to_string()).collect(),
                    output_fields: k.output_fields().iter().map(|f| f.to_string()).collect(),
                }),
        )
        .collect()
}

/// A stored schedule (JSON object) as the API gives it.
fn schedule(json: &str) -> Option<proto::Schedule> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    Some(proto::Schedule {
        cron: text("cron"),
        timezone: text("timezone"),
        action: text("action"),
        next_fire_at: optional_time(v["next_fire_at"].as_i64()),
        last_fired_at: optional_time(v["last_fired_at"].as_i64()),
    })
}

pub fn tasks(views: Vec<TaskView>) -> Vec<proto::Task> {
    views.into_iter().map(task).collect()
}

pub fn summary(view: PlanSummary) -> proto::PlanSummary {
    let total = view.total();
    proto::PlanSummary {
        plan: view.plan.map(plan),
        counts: view
            .counts
            .iter()
            .map(|(status, count)| proto::StatusCount {
                status: status.to_string(),
                count: *count,
            })
            .collect(),
        ready_count: view.ready,
        blocked_count: view.blocked,
        blocked_by_failure_count: view.blocked_by_failure,
        total,
        in_progress: tasks(view.in_progress_tasks),
        ready: tasks(view.ready_tasks),
        blocked: tasks(view.blocked_tasks),
    }
}

pub fn event(view: EventView) -> proto::Event {
    proto::Event {
        seq: view.seq,
        plan: view.plan,
        task_id: view.task_id.map(|t| t.to_string()).unwrap_or_default(),
        r#type: view.event_type,
        from_status: view.from_status.unwrap_or_default(),
        to_status: view.to_status.unwrap_or_default(),
        old_value: view.old_value.unwrap_or_default(),
        new_value: view.new_value.unwrap_or_default(),
        actor: view.actor,
        reason: view.reason,
        at: time(view.at),
        plan_revision: view.plan_revision,
    }
}
