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

/// A task as `read::TASK_JSON` encodes it: one JSON array per task, with its
/// dependencies and their statuses, in this order.
#[derive(serde::Deserialize)]
pub(super) struct TaskRow(
    i64,
    String,
    String,
    String,
    String,
    String,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
    i64,
    i64,
    Option<i64>,
    Option<i64>,
    Vec<(i64, String)>,
);

impl TaskRow {
    pub(super) fn into_view(self) -> Result<TaskView, Error> {
        let parse = |what: &str, text: &str| Error::Corrupt(format!("unknown {what} {text:?}"));
        let status: Status = self.2.parse().map_err(|_| parse("status", &self.2))?;
        let mut deps = Vec::with_capacity(self.17.len());
        for (id, dep_status) in self.17 {
            let dep_status: Status = dep_status
                .parse()
                .map_err(|_| parse("status", &dep_status))?;
            deps.push((TaskId(id), dep_status));
        }
        let (readiness, blocked_by) = match crate::domain::readiness(status, deps.iter().copied()) {
            Some((readiness, blockers)) => (Some(readiness), blockers),
            None => (None, Vec::new()),
        };
        Ok(TaskView {
            id: TaskId(self.0),
            plan: self.1,
            content: self.4,
            status,
            priority: self.3.parse().map_err(|_| parse("priority", &self.3))?,
            kind: self.5.parse().map_err(|_| parse("kind", &self.5))?,
            position: self.6,
            depends_on: deps.into_iter().map(|(id, _)| id).collect(),
            readiness,
            blocked_by,
            spec: self.7,
            progress: self.8,
            result: self.9,
            error: self.10,
            revision: self.11,
            archived: self.12.is_some(),
            created_at: self.13,
            updated_at: self.14,
            started_at: self.15,
            finished_at: self.16,
        })
    }
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
