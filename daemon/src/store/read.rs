//! Read queries. They run on the reader pool, or inside a write transaction when
//! a write answers with the state it committed.
use std::collections::HashMap;

use sqlx::{Row, SqliteConnection};

use super::bulk;
use super::views::{Detail, EVENT_COLUMNS};
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
    pub detail: Detail,
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

/// The columns `TaskView::from_bulk_row` reads, in order. A basic listing
/// selects NULL for the heavy or repetitive ones.
fn task_columns(detail: Detail) -> &'static str {
    match detail {
        Detail::Full => {
            "t.id, p.name, t.status, t.priority, t.content, t.kind, t.position, t.spec, \
             t.progress, t.result, t.error, t.revision, t.archived_at, t.created_at, \
             t.updated_at, t.started_at, t.finished_at, CASE WHEN t.dependency_count > 0 \
             THEN (SELECT group_concat(d.depends_on || ':' || u.status, ',' ORDER BY \
             d.depends_on) FROM dependencies d JOIN tasks u ON u.id = d.depends_on \
             WHERE d.task_id = t.id) END"
        }
        Detail::Basic => {
            "t.id, NULL, t.status, t.priority, t.content, t.kind, t.position, NULL, \
             t.progress, NULL, NULL, t.revision, t.archived_at, NULL, NULL, NULL, NULL, \
             CASE WHEN t.dependency_count > 0 THEN (SELECT group_concat(d.depends_on || ':' \
             || u.status, ',' ORDER BY d.depends_on) FROM dependencies d JOIN tasks u \
             ON u.id = d.depends_on WHERE d.task_id = t.id) END"
        }
    }
}

/// How a listing is sorted: list order, or ready-next order (priority first).
#[derive(Clone, Copy)]
enum Order {
    List,
    PriorityFirst,
}

impl Order {
    fn sql(self) -> &'static str {
        match self {
            Order::List => "t.position, t.id",
            Order::PriorityFirst => {
                "CASE t.priority WHEN 'high' THEN 0 WHEN 'medium' THEN 1 ELSE 2 END, \
                 t.position, t.id"
            }
        }
    }
}

/// What a task query selects, filters and sorts; `condition` ranges over
/// `tasks t` joined with `plans p`.
struct TaskQuery<'a> {
    condition: &'a str,
    binds: &'a [&'a str],
    order: Order,
    detail: Detail,
    limit: i64,
    /// Fills the plan name of basic rows.
    plan: &'a str,
}

async fn tasks_where(
    conn: &mut SqliteConnection,
    q: TaskQuery<'_>,
) -> Result<Vec<TaskView>, Error> {
    let sql = format!(
        "SELECT {columns} FROM tasks t JOIN plans p ON p.id = t.plan_id \
         WHERE {condition} ORDER BY {order} LIMIT {limit}",
        columns = task_columns(q.detail),
        condition = q.condition,
        order = q.order.sql(),
        limit = q.limit,
    );
    bulk::read_rows(conn, &sql, q.binds, |row| {
        TaskView::from_bulk_row(row, q.plan)
    })
    .await
}

pub(super) async fn task_by_id(conn: &mut SqliteConnection, id: TaskId) -> Result<TaskView, Error> {
    let id_text = id.0.to_string();
    let query = TaskQuery {
        condition: "t.id = ?",
        binds: &[&id_text],
        order: Order::List,
        detail: Detail::Full,
        limit: 1,
        plan: "",
    };
    tasks_where(conn, query)
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
    let query = TaskQuery {
        condition: "t.plan_id = ? AND t.archived_at IS NULL",
        binds: &[&plan_id],
        order: Order::List,
        detail: Detail::Full,
        limit: i64::MAX,
        plan: "",
    };
    tasks_where(conn, query).await
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
            let id = [id.as_str()];
            let lists = [
                (format!("{live} AND t.status = 'in_progress'"), Order::List),
                // Ready next: high priority first, then list order.
                (
                    format!("{live} AND {}", readiness_sql(Readiness::Ready)),
                    Order::PriorityFirst,
                ),
                (
                    format!("{live} AND t.status = 'pending' AND {HAS_INCOMPLETE_DEP}"),
                    Order::List,
                ),
            ];
            let mut found = Vec::with_capacity(lists.len());
            for (condition, order) in &lists {
                let query = TaskQuery {
                    condition,
                    binds: &id,
                    order: *order,
                    detail: Detail::Full,
                    limit: limit as i64,
                    plan: name,
                };
                found.push(tasks_where(&mut conn, query).await?);
            }
            summary.blocked_tasks = found.pop().unwrap_or_default();
            summary.ready_tasks = found.pop().unwrap_or_default();
            summary.in_progress_tasks = found.pop().unwrap_or_default();
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
        let query = TaskQuery {
            condition: &condition,
            binds: &bind_refs,
            order: Order::List,
            detail: filter.detail,
            limit: page_size as i64 + 1,
            plan: &plan.name,
        };
        let mut tasks = tasks_where(&mut tx, query).await?;
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
