//! What the store hands out: plain snapshots of plans, tasks and events, decoded
//! from rows. The API layer converts them to protobuf.
use super::sql::Row;
use super::Error;
use todod_domain::{Kind, Priority, Readiness, Status, TaskId};

/// Columns `PlanView::from_row` reads.
pub(super) const PLAN_COLUMNS: &str =
    "id, name, title, revision, created_at, updated_at, archived_at";

#[derive(Debug, Clone, PartialEq)]
pub struct PlanView {
    pub name: String,
    pub title: String,
    pub revision: i64,
    pub created_at: i64,
    pub updated_at: i64,
    /// When it was archived; `None` while live.
    pub archived_at: Option<i64>,
}

impl PlanView {
    /// Decodes a row of `PLAN_COLUMNS` (after the plan's id in column 0).
    pub(super) fn from_row(row: &Row<'_>) -> Result<PlanView, Error> {
        Ok(PlanView {
            name: row.text(1)?.to_string(),
            title: row.text(2)?.to_string(),
            revision: row.int(3)?,
            created_at: row.int(4)?,
            updated_at: row.int(5)?,
            archived_at: row.opt_int(6)?,
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
    /// `None` unless pending and live.
    pub readiness: Option<Readiness>,
    pub blocked_by: Vec<TaskId>,
    pub spec: Option<String>,
    pub progress: Option<String>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub revision: i64,
    pub archived: bool,
    /// `None` in a `Detail::Basic` listing.
    pub created_at: Option<i64>,
    pub updated_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The task's schedule as a JSON object (`cron`, `timezone`, `action`,
    /// `next_fire_at`, `last_fired_at`), if it has one.
    pub schedule: Option<String>,
    /// Who works on it, as a client said.
    pub owner: Option<String>,
    /// The clients' JSON object (see `domain::annotations`).
    pub metadata: Option<String>,
    /// A running phase task: the attempt of the daemon run that holds it
    /// (`HOST-PID-NANOS.N`) and when its lease expires (Unix ms, on the
    /// database's clock; `None` before the first lease of an older daemon).
    pub lease: Option<(String, Option<i64>)>,
    /// The shards of a sharded phase task that runs have taken so far.
    pub shards: Vec<super::ShardRow>,
}

/// How much of each task a listing carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Detail {
    /// Every field.
    #[default]
    Full,
    /// What a list shows: no spec, result, error or timestamps, so that very
    /// large plans list fast.
    Basic,
}

impl TaskView {
    /// Decodes a row of `read::task_columns`. `plan` names the plan when the
    /// row leaves it out (basic listings).
    pub(super) fn from_row(row: &Row<'_>, plan: &str) -> Result<TaskView, Error> {
        let parse = |what: &str, text: &str| Error::Corrupt(format!("unknown {what} {text:?}"));
        let status: Status = row.parsed(2, "status")?;
        // Dependencies arrive as "id:status,id:status".
        let mut deps = Vec::new();
        for pair in row
            .opt_text(17)?
            .unwrap_or("")
            .split(',')
            .filter(|p| !p.is_empty())
        {
            let (id, dep_status) = pair
                .split_once(':')
                .ok_or_else(|| parse("dependency", pair))?;
            let id = id.parse().map_err(|_| parse("dependency", pair))?;
            let dep_status: Status = dep_status.parse().map_err(|_| parse("status", pair))?;
            deps.push((TaskId(id), dep_status));
        }
        let archived = row.opt_int(12)?.is_some();
        // An archived task is out of the plan: it waits for nothing.
        let (readiness, blocked_by) = match todod_domain::readiness(status, deps.iter().copied()) {
            Some((readiness, blockers)) if !archived => (Some(readiness), blockers),
            _ => (None, Vec::new()),
        };
        let owned = |text: Option<&str>| text.map(str::to_string);
        Ok(TaskView {
            id: TaskId(row.int(0)?),
            plan: row.opt_text(1)?.unwrap_or(plan).to_string(),
            status,
            priority: row.parsed(3, "priority")?,
            content: row.text(4)?.to_string(),
            kind: row.parsed(5, "kind")?,
            position: row.int(6)?,
            depends_on: deps.into_iter().map(|(id, _)| id).collect(),
            readiness,
            blocked_by,
            spec: owned(row.opt_text(7)?),
            progress: owned(row.opt_text(8)?),
            result: owned(row.opt_text(9)?),
            error: owned(row.opt_text(10)?),
            revision: row.int(11)?,
            archived,
            created_at: row.opt_int(13)?,
            updated_at: row.opt_int(14)?,
            started_at: row.opt_int(15)?,
            finished_at: row.opt_int(16)?,
            schedule: owned(row.opt_text(18)?),
            owner: owned(row.opt_text(19)?),
            metadata: owned(row.opt_text(20)?),
            // An expiry of 0: handed back at a clean stop; nobody holds it.
            lease: match (row.opt_text(21)?, row.opt_int(22)?) {
                (_, Some(0)) | (None, _) => None,
                (Some(holder), expires) => Some((holder.to_string(), expires)),
            },
            shards: Vec::new(),
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventView {
    pub seq: i64,
    pub plan: String,
    pub task_id: Option<TaskId>,
    /// What happened: `status_changed`, `progress`, `resumed`, ...
    pub event_type: String,
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
    pub(super) fn from_row(row: &Row<'_>) -> Result<EventView, Error> {
        let owned = |text: Option<&str>| text.map(str::to_string);
        Ok(EventView {
            seq: row.int(0)?,
            plan: row.text(1)?.to_string(),
            task_id: row.opt_int(2)?.map(TaskId),
            event_type: row.text(3)?.to_string(),
            from_status: owned(row.opt_text(4)?),
            to_status: owned(row.opt_text(5)?),
            old_value: owned(row.opt_text(6)?),
            new_value: owned(row.opt_text(7)?),
            actor: row.text(8)?.to_string(),
            reason: row.text(9)?.to_string(),
            at: row.int(10)?,
            plan_revision: row.int(11)?,
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
