//! The one place that turns accepted changes into rows and events. Every write
//! operation ends here, inside its `BEGIN IMMEDIATE` transaction, so the history
//! is exactly the list of changes that were committed.
use std::collections::HashMap;

use super::sql::{Db, Dialect, Param};
use super::{Error, WriteContext};
use todod_domain::{Change, Status, TaskId};

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

/// A plan-level event (created, archived, restored) at `revision`.
pub(super) fn record_plan_event(
    db: &mut Db,
    plan_id: i64,
    event_type: &str,
    revision: i64,
    ctx: &WriteContext,
    now: i64,
) -> Result<i64, Error> {
    db.query_row(
        "INSERT INTO events (plan_id, type, actor, reason, at, plan_revision) \
         VALUES (?, ?, ?, ?, ?, ?) RETURNING seq",
        &[
            plan_id.into(),
            event_type.into(),
            (&ctx.actor).into(),
            (&ctx.reason).into(),
            now.into(),
            revision.into(),
        ],
        |row| row.int(0),
    )?
    .ok_or_else(super::sql::no_row)
}

/// An event before it is written: type, from/to status, old/new value.
struct EventFields<'a> {
    event_type: &'static str,
    from_status: Option<&'a str>,
    to_status: Option<&'a str>,
    old_value: Option<String>,
    new_value: Option<String>,
}

impl EventFields<'_> {
    fn of(event_type: &'static str) -> Self {
        EventFields {
            event_type,
            from_status: None,
            to_status: None,
            old_value: None,
            new_value: None,
        }
    }
}

/// Bumps a task's revision and `updated_at`, setting `assignments` too.
fn update_task(
    db: &mut Db,
    id: TaskId,
    assignments: &str,
    params: &[Param<'_>],
    now: i64,
) -> Result<(), Error> {
    let mut all = params.to_vec();
    all.push(now.into());
    all.push(id.0.into());
    let comma = if assignments.is_empty() { "" } else { ", " };
    db.execute(
        &format!(
            "UPDATE tasks SET {assignments}{comma}revision = revision + 1, updated_at = ? \
             WHERE id = ?"
        ),
        &all,
    )?;
    Ok(())
}

/// Applies `changes` to plan `plan_id` at `revision`, bumping it once.
pub(super) fn apply(
    db: &mut Db,
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
    db.execute(
        "UPDATE plans SET revision = ?, updated_at = ? WHERE id = ?",
        &[applied.revision.into(), now.into(), plan_id.into()],
    )?;

    let mut events = Vec::with_capacity(changes.len());
    for change in changes {
        let event = apply_change(db, plan_id, change, &mut applied, ctx, now)?;
        events.push(serde_json::json!([
            applied.real(change.task()).0,
            event.event_type,
            event.from_status,
            event.to_status,
            event.old_value,
            event.new_value,
        ]));
    }
    applied.last_seq = insert_events(db, plan_id, events, applied.revision, ctx, now)?;
    Ok(applied)
}

/// Makes one change's rows, and says what its event is.
fn apply_change<'c>(
    db: &mut Db,
    plan_id: i64,
    change: &'c Change,
    applied: &mut Applied,
    ctx: &WriteContext,
    now: i64,
) -> Result<EventFields<'c>, Error> {
    Ok(match change {
        Change::Created {
            id,
            content,
            priority,
            kind,
            position,
            spec,
        } => {
            let real = db
                .query_row(
                    "INSERT INTO tasks (plan_id, content, status, priority, kind, position, \
                     spec, created_at, updated_at) \
                     VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?) RETURNING id",
                    &[
                        plan_id.into(),
                        content.as_str().into(),
                        priority.as_str().into(),
                        kind.as_str().into(),
                        (*position).into(),
                        spec.as_deref().into(),
                        now.into(),
                        now.into(),
                    ],
                    |row| row.int(0),
                )?
                .ok_or_else(super::sql::no_row)?;
            applied.created.insert(*id, TaskId(real));
            EventFields {
                to_status: Some("pending"),
                new_value: Some(content.clone()),
                ..EventFields::of("task_created")
            }
        }
        Change::ContentChanged { id, old, new } => {
            update_task(db, applied.real(*id), "content = ?", &[new.into()], now)?;
            EventFields {
                old_value: Some(old.clone()),
                new_value: Some(new.clone()),
                ..EventFields::of("content_changed")
            }
        }
        Change::PriorityChanged { id, old, new } => {
            let params = [new.as_str().into()];
            update_task(db, applied.real(*id), "priority = ?", &params, now)?;
            EventFields {
                old_value: Some(old.to_string()),
                new_value: Some(new.to_string()),
                ..EventFields::of("priority_changed")
            }
        }
        Change::SpecChanged { id, old, new } => {
            let params = [new.as_deref().into()];
            update_task(db, applied.real(*id), "spec = ?", &params, now)?;
            EventFields {
                old_value: old.clone(),
                new_value: new.clone(),
                ..EventFields::of("spec_changed")
            }
        }
        Change::OwnerChanged { id, old, new } => {
            let params = [new.as_deref().into()];
            update_task(db, applied.real(*id), "owner = ?", &params, now)?;
            EventFields {
                old_value: old.clone(),
                new_value: new.clone(),
                ..EventFields::of("owner_changed")
            }
        }
        Change::MetadataChanged { id, old, new } => {
            let params = [new.as_deref().into()];
            update_task(db, applied.real(*id), "metadata = ?", &params, now)?;
            EventFields {
                old_value: old.clone(),
                new_value: new.clone(),
                ..EventFields::of("metadata_changed")
            }
        }
        Change::Moved { id, from, to } => {
            update_task(db, applied.real(*id), "position = ?", &[(*to).into()], now)?;
            EventFields {
                old_value: Some(from.to_string()),
                new_value: Some(to.to_string()),
                ..EventFields::of("moved")
            }
        }
        Change::StatusChanged { id, from, to } => {
            set_status(db, applied.real(*id), *to, ctx, now)?;
            EventFields {
                from_status: Some(from.as_str()),
                to_status: Some(to.as_str()),
                ..EventFields::of("status_changed")
            }
        }
        Change::DependencyAdded { id, depends_on } => {
            let (id, dep) = (applied.real(*id), applied.real(*depends_on));
            db.execute(
                "INSERT INTO dependencies (task_id, depends_on) VALUES (?, ?)",
                &[id.0.into(), dep.0.into()],
            )?;
            update_task(db, id, "", &[], now)?;
            EventFields {
                new_value: Some(dep.to_string()),
                ..EventFields::of("dependency_added")
            }
        }
        Change::DependencyRemoved { id, depends_on } => {
            let (id, dep) = (applied.real(*id), applied.real(*depends_on));
            db.execute(
                "DELETE FROM dependencies WHERE task_id = ? AND depends_on = ?",
                &[id.0.into(), dep.0.into()],
            )?;
            update_task(db, id, "", &[], now)?;
            EventFields {
                old_value: Some(dep.to_string()),
                ..EventFields::of("dependency_removed")
            }
        }
        Change::Archived { id } => {
            update_task(db, *id, "archived_at = ?", &[now.into()], now)?;
            EventFields::of("archived")
        }
        Change::Restored { id } => {
            update_task(db, *id, "archived_at = NULL", &[], now)?;
            EventFields::of("restored")
        }
        Change::ScheduleChanged { id, old, new } => {
            set_schedule(db, applied.real(*id), new.as_deref(), now)?;
            EventFields {
                old_value: old.clone(),
                new_value: new.clone(),
                ..EventFields::of("schedule_changed")
            }
        }
    })
}

/// A task's status set, with what goes with it: when it started and ended,
/// a failure's reason as its error, its lease let go, and a cancelled
/// phase task's output paths let go.
fn set_status(
    db: &mut Db,
    id: TaskId,
    to: Status,
    ctx: &WriteContext,
    now: i64,
) -> Result<(), Error> {
    // started_at marks the latest start; finished_at the latest end.
    // A task failed with a reason has it as its error (a phase
    // run writes its own over it).
    let to_text = to.as_str();
    update_task(
        db,
        id,
        "status = ?1, \
         started_at = CASE WHEN ?1 = 'in_progress' THEN ?2 ELSE started_at END, \
         finished_at = CASE WHEN ?1 IN ('completed', 'failed', 'cancelled') \
                       THEN ?2 ELSE NULL END, \
         error = CASE WHEN ?1 = 'failed' THEN COALESCE(error, NULLIF(?3, '')) \
                 ELSE NULL END, \
         lease_owner = CASE WHEN ?1 = 'in_progress' THEN lease_owner ELSE NULL END, \
         held = CASE WHEN ?1 = 'pending' AND status = 'in_progress' THEN 1 ELSE 0 END",
        &[to_text.into(), now.into(), ctx.reason.trim().into()],
        now,
    )?;
    // A cancelled phase task lets go of its output paths (the
    // store checked that a restore can take them back).
    db.execute(
        "UPDATE phase_outputs SET active = ? WHERE task_id = ?",
        &[i64::from(to != Status::Cancelled).into(), id.0.into()],
    )?;
    Ok(())
}

/// A task's schedule set (`new`, the change's JSON) or cleared (`None`).
fn set_schedule(db: &mut Db, id: TaskId, new: Option<&str>, now: i64) -> Result<(), Error> {
    match new {
        Some(json) => {
            let v: serde_json::Value = serde_json::from_str(json)
                .map_err(|_| super::sql::misuse("a schedule change is not JSON"))?;
            db.execute(
                "INSERT INTO schedules (task_id, cron, timezone, action, \
                 next_fire_at, created_at) VALUES (?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (task_id) DO UPDATE SET cron = excluded.cron, \
                 timezone = excluded.timezone, action = excluded.action, \
                 next_fire_at = excluded.next_fire_at",
                &[
                    id.0.into(),
                    v["cron"].as_str().unwrap_or_default().into(),
                    v["timezone"].as_str().unwrap_or_default().into(),
                    v["action"].as_str().unwrap_or_default().into(),
                    v["next_fire_at"].as_i64().into(),
                    now.into(),
                ],
            )?;
        }
        None => {
            db.execute("DELETE FROM schedules WHERE task_id = ?", &[id.0.into()])?;
        }
    }
    update_task(db, id, "", &[], now)?;
    Ok(())
}

/// Writes a change's events with one statement (`json_each` keeps their
/// order), at `revision`; gives the last sequence number.
fn insert_events(
    db: &mut Db,
    plan_id: i64,
    events: Vec<serde_json::Value>,
    revision: i64,
    ctx: &WriteContext,
    now: i64,
) -> Result<Option<i64>, Error> {
    let events = serde_json::Value::Array(events).to_string();
    let each = match db.dialect() {
        Dialect::Sqlite => {
            "e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, e.value ->> 4, \
             e.value ->> 5, ?, ?, ?, ? FROM json_each(?) e"
        }
        // Typed, since PostgreSQL's ->> gives text, and in array order.
        Dialect::Postgres => {
            "CAST(e.value ->> 0 AS BIGINT), e.value ->> 1, e.value ->> 2, e.value ->> 3, \
             e.value ->> 4, e.value ->> 5, CAST(? AS TEXT), CAST(? AS TEXT), \
             CAST(? AS BIGINT), CAST(? AS BIGINT) \
             FROM jsonb_array_elements(CAST(CAST(? AS TEXT) AS jsonb)) WITH ORDINALITY AS e(value, key)"
        }
    };
    let seqs = db.query(
        &format!(
            "INSERT INTO events (plan_id, task_id, type, from_status, to_status, old_value, \
             new_value, actor, reason, at, plan_revision) \
             SELECT CAST(? AS BIGINT), {each} ORDER BY e.key RETURNING seq"
        ),
        &[
            plan_id.into(),
            (&ctx.actor).into(),
            (&ctx.reason).into(),
            now.into(),
            revision.into(),
            (&events).into(),
        ],
        |row| row.int(0),
    )?;
    Ok(seqs.into_iter().max())
}
