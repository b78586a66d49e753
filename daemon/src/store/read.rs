//! Read queries. They run on the reader pool, or inside a write transaction when
//! a write answers with the state it committed.
use std::collections::HashMap;

use sqlx::{Row, SqliteConnection};

use super::views::{TaskRow, EVENT_COLUMNS};
use super::{Error, EventView, PlanSummary, PlanView, Store, TaskPage, TaskView};
use crate::domain::{self, Kind, Readiness, Status, TaskId};

/// SQL twins of `domain::readiness`, for counting and filtering without loading
/// every task. `store::tests` checks that they agree with the domain rule.
const HAS_INCOMPLETE_DEP: &str = "EXISTS (SELECT 1 FROM dependencies d JOIN tasks u \
     ON u.id = d.depends_on WHERE d.task_id = t.id AND u.status <> 'completed')";
const HAS_FAILED_DEP: &str = "EXISTS (SELECT 1 FROM dependencies d JOIN tasks u \
     ON u.id = d.depends_on WHERE d.task_id = t.id AND u.status IN ('failed', 'cancelled'))";

fn readiness_sql(readiness: Readiness) -> String {
    match readiness {
        Readiness::Ready => format!("(t.status = 'pending' AND NOT {HAS_INCOMPLETE_DEP})"),
        Readiness::Blocked => {
            format!("(t.status = 'pending' AND {HAS_INCOMPLETE_DEP} AND NOT {HAS_FAILED_DEP})")
        }
        Readiness::BlockedByFailure => format!("(t.status = 'pending' AND {HAS_FAILED_DEP})"),
    }
}

/// Largest page a listing returns.
pub const MAX_PAGE_SIZE: usize = 10_000;
const DEFAULT_PAGE_SIZE: usize = 1_000;

#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub plan: String,
    pub statuses: Vec<Status>,
    pub kinds: Vec<Kind>,
    pub readiness: Vec<Readiness>,
    pub include_archived: bool,
    pub page_size: usize,
    pub page_token: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Empty means every plan (only for watching).
    pub plan: String,
    pub task: Option<TaskId>,
    pub after_seq: i64,
    pub limit: usize,
}

fn json_list<T: ToString>(items: &[T]) -> String {
    serde_json::Value::from(items.iter().map(ToString::to_string).collect::<Vec<_>>()).to_string()
}

fn encode_page_token(task: &TaskView) -> String {
    format!("{}.{}", task.position, task.id.0)
}

fn decode_page_token(token: &str) -> Result<(i64, i64), Error> {
    let bad = || domain::Error::invalid("page_token", "is not a token this server issued");
    let (position, id) = token.split_once('.').ok_or_else(bad)?;
    Ok((
        position.parse().map_err(|_| bad())?,
        id.parse().map_err(|_| bad())?,
    ))
}

pub(super) async fn plan_by_name(
    conn: &mut SqliteConnection,
    name: &str,
) -> Result<Option<(i64, PlanView)>, Error> {
    let row = sqlx::query(
        "SELECT id, name, title, revision, created_at, updated_at FROM plans WHERE name = ?",
    )
    .bind(name)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|r| Ok((r.try_get("id")?, PlanView::from_row(&r)?)))
        .transpose()
}

pub(super) async fn require_plan(
    conn: &mut SqliteConnection,
    name: &str,
) -> Result<(i64, PlanView), Error> {
    plan_by_name(conn, name)
        .await?
        .ok_or_else(|| domain::Error::plan_not_found(name).into())
}

/// One JSON array per task (see `TaskRow`), dependencies and their statuses
/// included. sqlx hands SQLite rows over one at a time through a channel, about
/// a microsecond or two each; building one JSON document in SQLite and decoding
/// it with serde lists a 100,000-task plan several times faster.
const TASK_JSON: &str = "json_array(t.id, p.name, t.status, t.priority, t.content, t.kind, \
     t.position, t.spec, t.progress, t.result, t.error, t.revision, t.archived_at, \
     t.created_at, t.updated_at, t.started_at, t.finished_at, \
     json((SELECT json_group_array(json_array(d.depends_on, u.status) ORDER BY d.depends_on) \
           FROM dependencies d JOIN tasks u ON u.id = d.depends_on WHERE d.task_id = t.id)))";

const LIST_ORDER: &str = "t.position, t.id";

/// Tasks matching `condition` (over `tasks t` and `plans p`), in `order`.
async fn tasks_where(
    conn: &mut SqliteConnection,
    condition: &str,
    order: &str,
    binds: &[&str],
    limit: i64,
) -> Result<Vec<TaskView>, Error> {
    let sql = format!(
        "SELECT json_group_array(json(task) ORDER BY n) FROM ( \
         SELECT {TASK_JSON} AS task, row_number() OVER (ORDER BY {order}) AS n \
         FROM tasks t JOIN plans p ON p.id = t.plan_id \
         WHERE {condition} ORDER BY {order} LIMIT {limit})"
    );
    let mut query = sqlx::query_scalar::<_, String>(&sql);
    for bind in binds {
        query = query.bind(*bind);
    }
    let json = query.fetch_one(&mut *conn).await?;
    let rows: Vec<TaskRow> = serde_json::from_str(&json)
        .map_err(|e| Error::Corrupt(format!("task listing did not decode: {e}")))?;
    rows.into_iter().map(TaskRow::into_view).collect()
}

pub(super) async fn task_by_id(conn: &mut SqliteConnection, id: TaskId) -> Result<TaskView, Error> {
    let id_text = id.0.to_string();
    tasks_where(conn, "t.id = ?", LIST_ORDER, &[&id_text], 1)
        .await?
        .pop()
        .ok_or_else(|| domain::Error::task_not_found(id).into())
}

/// Live tasks of a plan in list order: the list as an agent sees it.
pub(super) async fn live_tasks(
    conn: &mut SqliteConnection,
    plan_id: i64,
) -> Result<Vec<TaskView>, Error> {
    let plan_id = plan_id.to_string();
    tasks_where(
        conn,
        "t.plan_id = ? AND t.archived_at IS NULL",
        LIST_ORDER,
        &[&plan_id],
        i64::MAX,
    )
    .await
}

impl Store {
    pub async fn get_plan(&self, name: &str) -> Result<PlanView, Error> {
        let mut conn = self.reader.acquire().await?;
        Ok(require_plan(&mut conn, name).await?.1)
    }

    pub async fn list_plans(&self) -> Result<Vec<PlanView>, Error> {
        let rows = sqlx::query(
            "SELECT name, title, revision, created_at, updated_at FROM plans ORDER BY name",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(PlanView::from_row).collect()
    }

    /// Counts per status and readiness, plus up to `limit` tasks in each of
    /// in_progress, ready (high priority first) and blocked.
    pub async fn plan_summary(&self, name: &str, limit: usize) -> Result<PlanSummary, Error> {
        let mut conn = self.reader.acquire().await?;
        let (plan_id, plan) = require_plan(&mut conn, name).await?;
        let rows = sqlx::query(
            "SELECT status, COUNT(*) FROM tasks \
             WHERE plan_id = ? AND archived_at IS NULL GROUP BY status",
        )
        .bind(plan_id)
        .fetch_all(&mut *conn)
        .await?;
        let mut counted: HashMap<String, i64> = HashMap::new();
        for row in rows {
            counted.insert(row.try_get(0)?, row.try_get(1)?);
        }
        let counts = Status::ALL
            .iter()
            .map(|s| (*s, counted.get(s.as_str()).copied().unwrap_or(0)))
            .collect();
        let readiness_counts = format!(
            "SELECT COALESCE(SUM({ready}), 0), COALESCE(SUM({failed}), 0) FROM tasks t \
             WHERE t.plan_id = ? AND t.archived_at IS NULL AND t.status = 'pending'",
            ready = readiness_sql(Readiness::Ready),
            failed = readiness_sql(Readiness::BlockedByFailure),
        );
        let row = sqlx::query(&readiness_counts)
            .bind(plan_id)
            .fetch_one(&mut *conn)
            .await?;
        let ready: i64 = row.try_get(0)?;
        let blocked_by_failure: i64 = row.try_get(1)?;
        let pending = counted.get("pending").copied().unwrap_or(0);

        let mut summary = PlanSummary {
            plan: Some(plan),
            counts,
            ready,
            blocked: pending - ready - blocked_by_failure,
            blocked_by_failure,
            ..PlanSummary::default()
        };
        if limit > 0 {
            let id = plan_id.to_string();
            let live = "t.plan_id = ? AND t.archived_at IS NULL";
            summary.in_progress_tasks = tasks_where(
                &mut conn,
                &format!("{live} AND t.status = 'in_progress'"),
                LIST_ORDER,
                &[&id],
                limit as i64,
            )
            .await?;
            // Priority first, then list order; a small, separate ordering.
            summary.ready_tasks = tasks_where(
                &mut conn,
                &format!("{live} AND {}", readiness_sql(Readiness::Ready)),
                "CASE t.priority WHEN 'high' THEN 0 WHEN 'medium' THEN 1 ELSE 2 END, \
                 t.position, t.id",
                &[&id],
                limit as i64,
            )
            .await?;
            summary.blocked_tasks = tasks_where(
                &mut conn,
                &format!("{live} AND t.status = 'pending' AND {HAS_INCOMPLETE_DEP}"),
                LIST_ORDER,
                &[&id],
                limit as i64,
            )
            .await?;
        }
        Ok(summary)
    }

    pub async fn get_task(&self, id: TaskId) -> Result<TaskView, Error> {
        let mut conn = self.reader.acquire().await?;
        task_by_id(&mut conn, id).await
    }

    pub async fn read_todos(&self, plan: &str) -> Result<(PlanView, Vec<TaskView>), Error> {
        // One read transaction, so the list and the revision agree. Dropping
        // it (a cancelled call) rolls back, leaving the connection clean.
        let mut tx = self.reader.begin().await?;
        let (plan_id, plan) = require_plan(&mut tx, plan).await?;
        let tasks = live_tasks(&mut tx, plan_id).await?;
        tx.commit().await?;
        Ok((plan, tasks))
    }

    pub async fn list_tasks(&self, filter: &TaskFilter) -> Result<TaskPage, Error> {
        let page_size = match filter.page_size {
            0 => DEFAULT_PAGE_SIZE,
            n => n.min(MAX_PAGE_SIZE),
        };
        let after = filter
            .page_token
            .as_deref()
            .map(decode_page_token)
            .transpose()?;
        let mut tx = self.reader.begin().await?;
        let (plan_id, plan) = require_plan(&mut tx, &filter.plan).await?;
        let mut condition = String::from("t.plan_id = ?");
        let mut binds = vec![plan_id.to_string()];
        if !filter.include_archived {
            condition.push_str(" AND t.archived_at IS NULL");
        }
        if !filter.statuses.is_empty() {
            condition.push_str(" AND t.status IN (SELECT value FROM json_each(?))");
            binds.push(json_list(&filter.statuses));
        }
        if !filter.kinds.is_empty() {
            condition.push_str(" AND t.kind IN (SELECT value FROM json_each(?))");
            binds.push(json_list(&filter.kinds));
        }
        if !filter.readiness.is_empty() {
            let any: Vec<String> = filter.readiness.iter().map(|r| readiness_sql(*r)).collect();
            condition.push_str(&format!(" AND ({})", any.join(" OR ")));
        }
        if let Some((position, id)) = after {
            condition.push_str(" AND (t.position, t.id) > (?, ?)");
            binds.push(position.to_string());
            binds.push(id.to_string());
        }
        let bind_refs: Vec<&str> = binds.iter().map(String::as_str).collect();
        let mut tasks = tasks_where(
            &mut tx,
            &condition,
            LIST_ORDER,
            &bind_refs,
            page_size as i64 + 1,
        )
        .await?;
        let next_page_token = if tasks.len() > page_size {
            tasks.truncate(page_size);
            tasks.last().map(encode_page_token)
        } else {
            None
        };
        tx.commit().await?;
        Ok(TaskPage {
            tasks,
            next_page_token,
            plan_revision: plan.revision,
        })
    }

    /// Events in sequence order after `after_seq`, of one plan, one task, or all.
    pub async fn list_events(&self, filter: &EventFilter) -> Result<Vec<EventView>, Error> {
        let limit = match filter.limit {
            0 => DEFAULT_PAGE_SIZE,
            n => n.min(MAX_PAGE_SIZE),
        } as i64;
        let mut conn = self.reader.acquire().await?;
        let base = format!("SELECT {EVENT_COLUMNS} FROM events e JOIN plans p ON p.id = e.plan_id");
        let rows = if let Some(task) = filter.task {
            // Existence check, so an unknown task is NOT_FOUND, not an empty list.
            task_by_id(&mut conn, task).await?;
            sqlx::query(&format!(
                "{base} WHERE e.task_id = ? AND e.seq > ? ORDER BY e.seq LIMIT ?"
            ))
            .bind(task.0)
            .bind(filter.after_seq)
            .bind(limit)
            .fetch_all(&mut *conn)
            .await?
        } else if filter.plan.is_empty() {
            sqlx::query(&format!("{base} WHERE e.seq > ? ORDER BY e.seq LIMIT ?"))
                .bind(filter.after_seq)
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?
        } else {
            let (plan_id, _) = require_plan(&mut conn, &filter.plan).await?;
            sqlx::query(&format!(
                "{base} WHERE e.plan_id = ? AND e.seq > ? ORDER BY e.seq LIMIT ?"
            ))
            .bind(plan_id)
            .bind(filter.after_seq)
            .bind(limit)
            .fetch_all(&mut *conn)
            .await?
        };
        rows.iter().map(EventView::from_row).collect()
    }
}
