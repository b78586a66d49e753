//! The one place that turns accepted changes into rows and events. Every write
//! operation ends here, inside its `BEGIN IMMEDIATE` transaction, so the history
//! is exactly the list of changes that were committed.
use std::collections::HashMap;

use sqlx::SqliteConnection;

use super::{Error, WriteContext};
use crate::domain::{Change, TaskId};

/// What applying a batch did.
#[derive(Debug, Default)]
pub(super) struct Applied {
    pub revision: i64,
    /// Real ids of the tasks created, by provisional id.
    pub created: HashMap<TaskId, TaskId>,
    /// The newest event written, if any.
    pub last_seq: Option<i64>,
}

impl Applied {
    pub fn real(&self, id: TaskId) -> TaskId {
        self.created.get(&id).copied().unwrap_or(id)
    }
}

/// A plan-level event: the plan's creation.
pub(super) async fn record_plan_created(
    conn: &mut SqliteConnection,
    plan_id: i64,
    ctx: &WriteContext,
    now: i64,
) -> Result<i64, Error> {
    Ok(sqlx::query_scalar(
        "INSERT INTO events (plan_id, type, actor, reason, at, plan_revision) \
         VALUES (?, 'plan_created', ?, ?, ?, 0) RETURNING seq",
    )
    .bind(plan_id)
    .bind(&ctx.actor)
    .bind(&ctx.reason)
    .bind(now)
    .fetch_one(&mut *conn)
    .await?)
}

#[derive(Default)]
struct EventFields<'a> {
    from_status: Option<&'a str>,
    to_status: Option<&'a str>,
    old_value: Option<String>,
    new_value: Option<String>,
}

/// Applies `changes` to plan `plan_id` at `revision`, bumping it once.
pub(super) async fn apply(
    conn: &mut SqliteConnection,
    plan_id: i64,
    revision: i64,
    changes: &[Change],
    ctx: &WriteContext,
    now: i64,
) -> Result<Applied, Error> {
    let mut applied = Applied {
        revision,
        ..Applied::default()
    };
    if changes.is_empty() {
        return Ok(applied);
    }
    applied.revision = revision + 1;
    sqlx::query("UPDATE plans SET revision = ?, updated_at = ? WHERE id = ?")
        .bind(applied.revision)
        .bind(now)
        .bind(plan_id)
        .execute(&mut *conn)
        .await?;

    let mut events = Vec::with_capacity(changes.len());
    for change in changes {
        let (kind, fields) = match change {
            Change::Created {
                id,
                content,
                priority,
                kind,
                position,
                spec,
            } => {
                let real: i64 = sqlx::query_scalar(
                    "INSERT INTO tasks (plan_id, content, status, priority, kind, position, spec, \
                     created_at, updated_at) VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?) RETURNING id",
                )
                .bind(plan_id)
                .bind(content)
                .bind(priority.as_str())
                .bind(kind.as_str())
                .bind(position)
                .bind(spec)
                .bind(now)
                .bind(now)
                .fetch_one(&mut *conn)
                .await?;
                applied.created.insert(*id, TaskId(real));
                (
                    "task_created",
                    EventFields {
                        to_status: Some("pending"),
                        new_value: Some(content.clone()),
                        ..Default::default()
                    },
                )
            }
            Change::ContentChanged { id, old, new } => {
                update_task(conn, applied.real(*id), "content = ?", new, now).await?;
                (
                    "content_changed",
                    EventFields {
                        old_value: Some(old.clone()),
                        new_value: Some(new.clone()),
                        ..Default::default()
                    },
                )
            }
            Change::PriorityChanged { id, old, new } => {
                update_task(conn, applied.real(*id), "priority = ?", new.as_str(), now).await?;
                (
                    "priority_changed",
                    EventFields {
                        old_value: Some(old.to_string()),
                        new_value: Some(new.to_string()),
                        ..Default::default()
                    },
                )
            }
            Change::SpecChanged { id, old, new } => {
                sqlx::query(
                    "UPDATE tasks SET spec = ?, revision = revision + 1, updated_at = ? WHERE id = ?",
                )
                .bind(new)
                .bind(now)
                .bind(applied.real(*id).0)
                .execute(&mut *conn)
                .await?;
                (
                    "spec_changed",
                    EventFields {
                        old_value: old.clone(),
                        new_value: new.clone(),
                        ..Default::default()
                    },
                )
            }
            Change::Moved { id, position } => {
                sqlx::query("UPDATE tasks SET position = ? WHERE id = ?")
                    .bind(position)
                    .bind(applied.real(*id).0)
                    .execute(&mut *conn)
                    .await?;
                continue;
            }
            Change::StatusChanged { id, from, to } => {
                // started_at marks the latest start; finished_at the latest end.
                sqlx::query(
                    "UPDATE tasks SET status = ?1, revision = revision + 1, updated_at = ?2, \
                     started_at = CASE WHEN ?1 = 'in_progress' THEN ?2 ELSE started_at END, \
                     finished_at = CASE WHEN ?1 IN ('completed', 'failed', 'cancelled') THEN ?2 \
                                   ELSE NULL END, \
                     error = CASE WHEN ?1 = 'failed' THEN error ELSE NULL END \
                     WHERE id = ?3",
                )
                .bind(to.as_str())
                .bind(now)
                .bind(applied.real(*id).0)
                .execute(&mut *conn)
                .await?;
                (
                    "status_changed",
                    EventFields {
                        from_status: Some(from.as_str()),
                        to_status: Some(to.as_str()),
                        ..Default::default()
                    },
                )
            }
            Change::DependencyAdded { id, depends_on } => {
                sqlx::query("INSERT INTO dependencies (task_id, depends_on) VALUES (?, ?)")
                    .bind(applied.real(*id).0)
                    .bind(applied.real(*depends_on).0)
                    .execute(&mut *conn)
                    .await?;
                touch(conn, applied.real(*id), now).await?;
                (
                    "dependency_added",
                    EventFields {
                        new_value: Some(applied.real(*depends_on).to_string()),
                        ..Default::default()
                    },
                )
            }
            Change::DependencyRemoved { id, depends_on } => {
                sqlx::query("DELETE FROM dependencies WHERE task_id = ? AND depends_on = ?")
                    .bind(applied.real(*id).0)
                    .bind(applied.real(*depends_on).0)
                    .execute(&mut *conn)
                    .await?;
                touch(conn, applied.real(*id), now).await?;
                (
                    "dependency_removed",
                    EventFields {
                        old_value: Some(applied.real(*depends_on).to_string()),
                        ..Default::default()
                    },
                )
            }
            Change::Archived { id } => {
                sqlx::query(
                    "UPDATE tasks SET archived_at = ?1, revision = revision + 1, updated_at = ?1 \
                     WHERE id = ?2",
                )
                .bind(now)
                .bind(id.0)
                .execute(&mut *conn)
                .await?;
                ("archived", EventFields::default())
            }
            Change::Restored { id } => {
                sqlx::query(
                    "UPDATE tasks SET archived_at = NULL, revision = revision + 1, updated_at = ? \
                     WHERE id = ?",
                )
                .bind(now)
                .bind(id.0)
                .execute(&mut *conn)
                .await?;
                ("restored", EventFields::default())
            }
        };
        events.push(serde_json::json!([
            applied.real(change.task()).0,
            kind,
            fields.from_status,
            fields.to_status,
            fields.old_value,
            fields.new_value,
        ]));
    }
    if !events.is_empty() {
        // One statement for all of the write's events; json_each keeps their order.
        let seqs: Vec<i64> = sqlx::query_scalar(
            "INSERT INTO events (plan_id, task_id, type, from_status, to_status, old_value, \
             new_value, actor, reason, at, plan_revision) \
             SELECT ?1, e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, \
             e.value ->> 4, e.value ->> 5, ?2, ?3, ?4, ?5 FROM json_each(?6) e \
             ORDER BY e.key RETURNING seq",
        )
        .bind(plan_id)
        .bind(&ctx.actor)
        .bind(&ctx.reason)
        .bind(now)
        .bind(applied.revision)
        .bind(serde_json::Value::Array(events).to_string())
        .fetch_all(&mut *conn)
        .await?;
        applied.last_seq = seqs.into_iter().max();
    }
    Ok(applied)
}

async fn update_task(
    conn: &mut SqliteConnection,
    id: TaskId,
    assignment: &str,
    value: &str,
    now: i64,
) -> Result<(), Error> {
    sqlx::query(&format!(
        "UPDATE tasks SET {assignment}, revision = revision + 1, updated_at = ? WHERE id = ?"
    ))
    .bind(value)
    .bind(now)
    .bind(id.0)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn touch(conn: &mut SqliteConnection, id: TaskId, now: i64) -> Result<(), Error> {
    sqlx::query("UPDATE tasks SET revision = revision + 1, updated_at = ? WHERE id = ?")
        .bind(now)
        .bind(id.0)
        .execute(&mut *conn)
        .await?;
    Ok(())
}
