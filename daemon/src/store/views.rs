//! What the store hands out: plain snapshots of plans, tasks and events, decoded
//! from rows. The API layer converts them to protobuf.
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

use super::Error;
use crate::domain::{Kind, Priority, Readiness, Status, TaskId};

#[derive(Debug, Clone, PartialEq)]
pub struct PlanView {
    pub name: String,
    pub title: String,
    pub revision: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

impl PlanView {
    pub(super) fn from_row(row: &SqliteRow) -> Result<PlanView, Error> {
        Ok(PlanView {
            name: row.try_get("name")?,
            title: row.try_get("title")?,
            revision: row.try_get("revision")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    pub id: TaskId,
    pub plan: String,
    pub content: String,
    pub status: Status,
    pub priority: Priority,
    pub kind: Kind,
    pub position: i64,
    pub depends_on: Vec<TaskId>,
    /// `None` unless pending.
    pub readiness: Option<Readiness>,
    pub blocked_by: Vec<TaskId>,
    pub spec: Option<String>,
    pub progress: Option<String>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub revision: i64,
    pub archived: bool,
    pub created_at: i64,
    pub updated_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// Columns every task query selects, in the order `TaskView::from_row` reads.
pub(super) const TASK_COLUMNS: &str = "t.id, p.name AS plan, t.content, t.status, t.priority, \
     t.kind, t.position, t.spec, t.progress, t.result, t.error, t.revision, t.archived_at, \
     t.created_at, t.updated_at, t.started_at, t.finished_at";

impl TaskView {
    /// Decodes a row of `TASK_COLUMNS`; dependencies and readiness are filled later.
    pub(super) fn from_row(row: &SqliteRow) -> Result<TaskView, Error> {
        Ok(TaskView {
            id: TaskId(row.try_get(0)?),
            plan: row.try_get(1)?,
            content: row.try_get(2)?,
            status: decode(row, 3, "status")?,
            priority: decode(row, 4, "priority")?,
            kind: decode(row, 5, "kind")?,
            position: row.try_get(6)?,
            depends_on: Vec::new(),
            readiness: None,
            blocked_by: Vec::new(),
            spec: row.try_get(7)?,
            progress: row.try_get(8)?,
            result: row.try_get(9)?,
            error: row.try_get(10)?,
            revision: row.try_get(11)?,
            archived: row.try_get::<Option<i64>, _>(12)?.is_some(),
            created_at: row.try_get(13)?,
            updated_at: row.try_get(14)?,
            started_at: row.try_get(15)?,
            finished_at: row.try_get(16)?,
        })
    }
}

fn decode<T: std::str::FromStr>(row: &SqliteRow, index: usize, what: &str) -> Result<T, Error> {
    let text: &str = row.try_get(index)?;
    text.parse()
        .map_err(|_| Error::Corrupt(format!("unknown {what} {text:?} in the database")))
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventView {
    pub seq: i64,
    pub plan: String,
    pub task_id: Option<TaskId>,
    pub kind: String,
    pub from_status: Option<String>,
    pub to_status: Option<String>,
    pub old_value: Option<String>,
    pub new_value: Option<String>,
    pub actor: String,
    pub reason: String,
    pub at: i64,
    pub plan_revision: i64,
}

pub(super) const EVENT_COLUMNS: &str = "e.seq, p.name AS plan, e.task_id, e.type, e.from_status, \
     e.to_status, e.old_value, e.new_value, e.actor, e.reason, e.at, e.plan_revision";

impl EventView {
    pub(super) fn from_row(row: &SqliteRow) -> Result<EventView, Error> {
        Ok(EventView {
            seq: row.try_get(0)?,
            plan: row.try_get(1)?,
            task_id: row.try_get::<Option<i64>, _>(2)?.map(TaskId),
            kind: row.try_get(3)?,
            from_status: row.try_get(4)?,
            to_status: row.try_get(5)?,
            old_value: row.try_get(6)?,
            new_value: row.try_get(7)?,
            actor: row.try_get(8)?,
            reason: row.try_get(9)?,
            at: row.try_get(10)?,
            plan_revision: row.try_get(11)?,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlanSummary {
    pub plan: Option<PlanView>,
    /// (status, count) for every status, in `Status::ALL` order.
    pub counts: Vec<(Status, i64)>,
    pub ready: i64,
    pub blocked: i64,
    pub blocked_by_failure: i64,
    pub in_progress_tasks: Vec<TaskView>,
    pub ready_tasks: Vec<TaskView>,
    pub blocked_tasks: Vec<TaskView>,
}

impl PlanSummary {
    pub fn total(&self) -> i64 {
        self.counts.iter().map(|(_, n)| n).sum()
    }
}

/// One page of a task listing.
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    pub tasks: Vec<TaskView>,
    pub next_page_token: Option<String>,
    pub plan_revision: i64,
}
