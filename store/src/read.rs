//! Read queries. The functions over `Db` also run inside write transactions,
//! so that a write answers with exactly the state it committed; the `Store`
//! methods run them on the reader pool, in one read transaction where the
//! answer must be consistent.
use std::collections::HashMap;

use super::sql::{Db, Dialect, Param};
use super::views::{Detail, EVENT_COLUMNS, PLAN_COLUMNS};
use super::{Error, EventView, PlanSummary, PlanView, Store, TaskPage, TaskView};
use todod_domain::{self as domain, Kind, Readiness, Status, TaskId};

/// SQL twins of `domain::readiness`, for counting and filtering without loading
/// every task. `store::tests` checks that they agree with the domain rule.
// Most tasks have no dependencies: the count (kept by triggers) answers
// for them without a subquery, which on a 100k-task plan is most of what
// `status` costs. CASE, not AND, so that the subquery is skipped in a value
// as well as in a WHERE. 0 or 1, never a bare boolean: PostgreSQL would
// not mix the two.
const HAS_INCOMPLETE_DEP: &str = "(CASE WHEN t.dependency_count = 0 THEN 0 WHEN EXISTS \
     (SELECT 1 FROM dependencies d JOIN tasks u ON u.id = d.depends_on \
     WHERE d.task_id = t.id AND u.status <> 'completed') THEN 1 ELSE 0 END)";
const HAS_FAILED_DEP: &str = "(CASE WHEN t.dependency_count = 0 THEN 0 WHEN EXISTS \
     (SELECT 1 FROM dependencies d JOIN tasks u ON u.id = d.depends_on \
     WHERE d.task_id = t.id AND u.status IN ('failed', 'cancelled')) THEN 1 ELSE 0 END)";

fn readiness_sql(readiness: Readiness) -> String {
    let pending = "t.status = 'pending' AND t.archived_at IS NULL";
    match readiness {
        Readiness::Ready => format!("({pending} AND {HAS_INCOMPLETE_DEP} = 0)"),
        Readiness::Blocked => {
            format!("({pending} AND {HAS_INCOMPLETE_DEP} = 1 AND {HAS_FAILED_DEP} = 0)")
        }
        Readiness::BlockedByFailure => format!("({pending} AND {HAS_FAILED_DEP} = 1)"),
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

pub(super) fn plan_by_name(db: &mut Db, name: &str) -> Result<Option<(i64, PlanView)>, Error> {
    db.query_row(
        &format!("SELECT {PLAN_COLUMNS} FROM plans WHERE name = ?"),
        &[name.into()],
        |row| Ok((row.int(0)?, PlanView::from_row(row)?)),
    )
}

pub(super) fn plan_by_id(db: &mut Db, id: i64) -> Result<PlanView, Error> {
    db.query_row(
        &format!("SELECT {PLAN_COLUMNS} FROM plans WHERE id = ?"),
        &[id.into()],
        PlanView::from_row,
    )?
    .ok_or_else(|| Error::Corrupt(format!("plan {id} vanished")))
}

pub(super) fn require_plan(db: &mut Db, name: &str) -> Result<(i64, PlanView), Error> {
    plan_by_name(db, name)?.ok_or_else(|| domain::Error::plan_not_found(name).into())
}

/// The columns `TaskView::from_row` reads, in order. A basic listing
/// selects NULL for the heavy or repetitive ones.
fn task_columns(detail: Detail, dialect: Dialect) -> String {
    // Dependencies as "id:status,..." and the schedule as compact JSON, the
    // same text from either database.
    let dependencies = format!(
        "CASE WHEN t.dependency_count > 0 THEN (SELECT {} FROM dependencies d \
         JOIN tasks u ON u.id = d.depends_on WHERE d.task_id = t.id) END",
        dialect.joined("d.depends_on || ':' || u.status", "d.depends_on")
    );
    let schedule = format!(
        "CASE WHEN s.task_id IS NOT NULL THEN {} END",
        dialect.json_object(&[
            ("cron", "s.cron"),
            ("timezone", "s.timezone"),
            ("action", "s.action"),
            ("next_fire_at", "s.next_fire_at"),
            ("last_fired_at", "s.last_fired_at"),
        ])
    );
    // Which daemon run holds a running phase task, and until when: looked
    // up for running tasks only, so that long listings pay nothing for it.
    let lease_owner = "CASE WHEN t.status = 'in_progress' THEN t.lease_owner END";
    let lease_expiry = "CASE WHEN t.status = 'in_progress' AND t.lease_owner IS NOT NULL THEN \
         (SELECT l.expires_at FROM phase_leases l WHERE l.task_id = t.id) END";
    match detail {
        Detail::Full => format!(
            "t.id, p.name, t.status, t.priority, t.content, t.kind, t.position, t.spec, \
             t.progress, t.result, t.error, t.revision, t.archived_at, t.created_at, \
             t.updated_at, t.started_at, t.finished_at, {dependencies}, {schedule}, \
             t.owner, t.metadata, {lease_owner}, {lease_expiry}"
        ),
        Detail::Basic => format!(
            "t.id, NULL, t.status, t.priority, t.content, t.kind, t.position, NULL, \
             t.progress, NULL, NULL, t.revision, t.archived_at, NULL, NULL, NULL, NULL, \
             {dependencies}, {schedule}, t.owner, t.metadata, {lease_owner}, {lease_expiry}"
        ),
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
    params: &'a [Param<'a>],
    order: Order,
    detail: Detail,
    limit: i64,
    /// Fills the plan name of basic rows.
    plan: &'a str,
}

fn tasks_where(db: &mut Db, q: TaskQuery<'_>) -> Result<Vec<TaskView>, Error> {
    let sql = format!(
        // The schedule is joined, not a subquery per row: a subquery opens
        // its cursors again for every task listed.
        "SELECT {columns} FROM tasks t JOIN plans p ON p.id = t.plan_id \
         LEFT JOIN schedules s ON s.task_id = t.id \
         WHERE {condition} ORDER BY {order} LIMIT {limit}",
        columns = task_columns(q.detail, db.dialect()),
        condition = q.condition,
        order = q.order.sql(),
        limit = q.limit,
    );
    // A listing's page of 10,000 tasks grown row by row is copied over and
    // over: bounded queries say their bound (see `Db::query_sized`).
    let at_most = match usize::try_from(q.limit) {
        Ok(limit) if limit <= MAX_PAGE_SIZE + 1 => limit,
        _ => 0,
    };
    let mut tasks = db.query_sized(&sql, q.params, at_most, |row| {
        TaskView::from_row(row, q.plan)
    })?;
    if matches!(q.detail, Detail::Full) {
        // Who holds which shard of the sharded phase tasks listed (phase
        // tasks are few; a listing of todos asks nothing more).
        let phases: Vec<TaskId> = tasks
            .iter()
            .filter(|t| t.kind != domain::Kind::TODO)
            .map(|t| t.id)
            .collect();
        if !phases.is_empty() {
            for (id, row) in super::shards::rows_of(db, &phases)? {
                if let Some(task) = tasks.iter_mut().find(|t| t.id == id) {
                    task.shards.push(row);
                }
            }
        }
    }
    Ok(tasks)
}

pub(super) fn task_by_id(db: &mut Db, id: TaskId) -> Result<TaskView, Error> {
    let query = TaskQuery {
        condition: "t.id = ?",
        params: &[id.0.into()],
        order: Order::List,
        detail: Detail::Full,
        limit: 1,
        plan: "",
    };
    tasks_where(db, query)?
        .pop()
        .ok_or_else(|| domain::Error::task_not_found(id).into())
}

/// Live tasks of a plan in list order: the list as an agent sees it.
pub(super) fn live_tasks(db: &mut Db, plan_id: i64) -> Result<Vec<TaskView>, Error> {
    let query = TaskQuery {
        condition: "t.plan_id = ? AND t.archived_at IS NULL",
        params: &[plan_id.into()],
        order: Order::List,
        detail: Detail::Full,
        limit: i64::MAX,
        plan: "",
    };
    tasks_where(db, query)
}

fn plan_summary(db: &mut Db, name: &str, limit: usize) -> Result<PlanSummary, Error> {
    let (plan_id, plan) = require_plan(db, name)?;
    let mut counted: HashMap<String, i64> = HashMap::new();
    db.query(
        "SELECT status, COUNT(*) FROM tasks WHERE plan_id = ? AND archived_at IS NULL \
         GROUP BY status",
        &[plan_id.into()],
        |row| {
            counted.insert(row.text(0)?.to_string(), row.int(1)?);
            Ok(())
        },
    )?;
    let counts = Status::ALL
        .iter()
        .map(|s| (*s, counted.get(s.as_str()).copied().unwrap_or(0)))
        .collect();
    // Only tasks with dependencies can wait (migrations: tasks_waiting);
    // every other pending task is ready.
    let waiting_counts = format!(
        "SELECT COALESCE(SUM({HAS_INCOMPLETE_DEP}), 0), COALESCE(SUM({HAS_FAILED_DEP}), 0) \
         FROM tasks t WHERE t.plan_id = ? AND t.archived_at IS NULL \
         AND t.status = 'pending' AND t.dependency_count > 0",
    );
    let (waiting, blocked_by_failure) = db
        .query_row(&waiting_counts, &[plan_id.into()], |row| {
            Ok((row.int(0)?, row.int(1)?))
        })?
        .unwrap_or((0, 0));
    let pending = counted.get("pending").copied().unwrap_or(0);
    let ready = pending - waiting;

    let mut summary = PlanSummary {
        plan: Some(plan),
        counts,
        ready,
        blocked: pending - ready - blocked_by_failure,
        blocked_by_failure,
        ..PlanSummary::default()
    };
    if limit > 0 {
        let live = "t.plan_id = ? AND t.archived_at IS NULL";
        let lists = [
            (format!("{live} AND t.status = 'in_progress'"), Order::List),
            // Ready next: high priority first, then list order.
            (
                format!("{live} AND {}", readiness_sql(Readiness::Ready)),
                Order::PriorityFirst,
            ),
            (
                format!("{live} AND t.status = 'pending' AND {HAS_INCOMPLETE_DEP} = 1"),
                Order::List,
            ),
        ];
        let mut found = Vec::with_capacity(lists.len());
        for (condition, order) in &lists {
            let query = TaskQuery {
                condition,
                params: &[plan_id.into()],
                order: *order,
                detail: Detail::Full,
                limit: limit as i64,
                plan: name,
            };
            found.push(tasks_where(db, query)?);
        }
        summary.blocked_tasks = found.pop().unwrap_or_default();
        summary.ready_tasks = found.pop().unwrap_or_default();
        summary.in_progress_tasks = found.pop().unwrap_or_default();
    }
    Ok(summary)
}

fn list_tasks(db: &mut Db, filter: &TaskFilter) -> Result<TaskPage, Error> {
    let page_size = match filter.page_size {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    };
    let after = filter
        .page_token
        .as_deref()
        .map(decode_page_token)
        .transpose()?;
    let (plan_id, plan) = require_plan(db, &filter.plan)?;
    let statuses = json_list(&filter.statuses);
    let kinds = json_list(&filter.kinds);
    let mut condition = String::from("t.plan_id = ?");
    let mut params: Vec<Param> = vec![plan_id.into()];
    if !filter.include_archived {
        condition.push_str(" AND t.archived_at IS NULL");
    }
    if !filter.statuses.is_empty() {
        condition.push_str(&format!(
            " AND t.status IN ({})",
            db.dialect().json_texts("?")
        ));
        params.push((&statuses).into());
    }
    if !filter.kinds.is_empty() {
        condition.push_str(&format!(
            " AND t.kind IN ({})",
            db.dialect().json_texts("?")
        ));
        params.push((&kinds).into());
    }
    if !filter.readiness.is_empty() {
        let any: Vec<String> = filter.readiness.iter().map(|r| readiness_sql(*r)).collect();
        condition.push_str(&format!(" AND ({})", any.join(" OR ")));
    }
    if let Some((position, id)) = after {
        condition.push_str(" AND (t.position, t.id) > (?, ?)");
        params.push(position.into());
        params.push(id.into());
    }
    let query = TaskQuery {
        condition: &condition,
        params: &params,
        order: Order::List,
        detail: filter.detail,
        limit: page_size as i64 + 1,
        plan: &plan.name,
    };
    let mut tasks = tasks_where(db, query)?;
    let next_page_token = if tasks.len() > page_size {
        tasks.truncate(page_size);
        tasks.last().map(encode_page_token)
    } else {
        None
    };
    Ok(TaskPage {
        tasks,
        next_page_token,
        plan_revision: plan.revision,
    })
}

fn list_events(db: &mut Db, filter: &EventFilter) -> Result<Vec<EventView>, Error> {
    let limit = match filter.limit {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    } as i64;
    let base = format!("SELECT {EVENT_COLUMNS} FROM events e JOIN plans p ON p.id = e.plan_id");
    let after = [filter.after_seq.into(), limit.into()];
    let (scope, id) = if let Some(task) = filter.task {
        // Existence check, so an unknown task is NOT_FOUND, not an empty list;
        // with a plan too, the task must be one of the plan's.
        let found = task_by_id(db, task)?;
        if !filter.plan.is_empty() && found.plan != filter.plan {
            return Err(domain::Error::NotFound {
                what: "task",
                id: format!("{task} in plan {}", filter.plan),
            }
            .into());
        }
        ("e.task_id = ? AND", Some(task.0))
    } else if filter.plan.is_empty() {
        ("", None)
    } else {
        ("e.plan_id = ? AND", Some(require_plan(db, &filter.plan)?.0))
    };
    let params: Vec<Param> = id.map(Param::Int).into_iter().chain(after).collect();
    db.query(
        &format!("{base} WHERE {scope} e.seq > ? ORDER BY e.seq LIMIT ?"),
        &params,
        EventView::from_row,
    )
}

impl Store {
    pub async fn get_plan(&self, name: &str) -> Result<PlanView, Error> {
        self.read(|db| Ok(require_plan(db, name)?.1)).await
    }

    /// Plans by name; archived ones only when asked for.
    pub async fn list_plans(&self, include_archived: bool) -> Result<Vec<PlanView>, Error> {
        let condition = if include_archived {
            ""
        } else {
            "WHERE archived_at IS NULL"
        };
        self.read(|db| {
            db.query(
                &format!("SELECT {PLAN_COLUMNS} FROM plans {condition} ORDER BY name"),
                &[],
                PlanView::from_row,
            )
        })
        .await
    }

    /// Counts per status and readiness, plus up to `limit` tasks in each of
    /// in_progress, ready (high priority first) and blocked.
    pub async fn plan_summary(&self, name: &str, limit: usize) -> Result<PlanSummary, Error> {
        self.read(|db| plan_summary(db, name, limit)).await
    }

    pub async fn get_task(&self, id: TaskId) -> Result<TaskView, Error> {
        self.read(|db| task_by_id(db, id)).await
    }

    /// The agent's list and the plan's revision, read in one transaction so
    /// that they agree.
    pub async fn read_todos(&self, plan: &str) -> Result<(PlanView, Vec<TaskView>), Error> {
        self.read(|db| {
            let (plan_id, plan) = require_plan(db, plan)?;
            Ok((plan, live_tasks(db, plan_id)?))
        })
        .await
    }

    pub async fn list_tasks(&self, filter: &TaskFilter) -> Result<TaskPage, Error> {
        self.read(|db| list_tasks(db, filter)).await
    }

    /// The live tasks that depend on `id` directly, in list order.
    pub async fn dependents(&self, id: TaskId) -> Result<Vec<TaskView>, Error> {
        self.read(|db| {
            task_by_id(db, id)?;
            let query = TaskQuery {
                condition: "t.archived_at IS NULL AND t.id IN \
                            (SELECT task_id FROM dependencies WHERE depends_on = ?)",
                params: &[id.0.into()],
                order: Order::List,
                detail: Detail::Full,
                limit: i64::MAX,
                plan: "",
            };
            tasks_where(db, query)
        })
        .await
    }

    /// The output paths a task claims (held or let go).
    pub async fn task_claims(&self, id: TaskId) -> Result<Vec<String>, Error> {
        self.read(|db| {
            task_by_id(db, id)?;
            db.query(
                "SELECT path FROM phase_outputs WHERE task_id = ? ORDER BY path",
                &[id.0.into()],
                |row| Ok(row.text(0)?.to_string()),
            )
        })
        .await
    }

    /// The live task that claims `path` as an output, if any.
    pub async fn claimed_by(&self, path: &str) -> Result<Option<TaskId>, Error> {
        self.read(|db| {
            db.query_row(
                "SELECT task_id FROM phase_outputs WHERE path = ? AND active = 1",
                &[path.into()],
                |row| Ok(TaskId(row.int(0)?)),
            )
        })
        .await
    }

    /// Events in sequence order after `after_seq`, of one plan, one task, or all.
    pub async fn list_events(&self, filter: &EventFilter) -> Result<Vec<EventView>, Error> {
        self.read(|db| list_events(db, filter)).await
    }
}
