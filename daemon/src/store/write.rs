//! Write operations. Each one: `BEGIN IMMEDIATE` on the single writer, load the
//! part of the graph its rules need, ask the domain what changes, persist the
//! changes and their events, read back the answer, commit, then publish the new
//! event sequence. Nothing is acknowledged before the commit returns.
use std::collections::BTreeSet;

use sqlx::{Row, Sqlite, SqliteConnection, Transaction};

use super::persist::{self, Applied};
use super::read::{live_tasks, plan_by_name, require_plan, task_by_id};
use super::{now_ms, Error, PlanView, Store, TaskView, WriteContext};
use crate::domain::todo_list::{self, StoredTask, TodoItem};
use crate::domain::{self, spec, Change, Graph, Kind, Priority, Status, TaskId};

/// A task to create with `CreateTask`.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub plan: String,
    pub content: String,
    pub priority: Priority,
    pub kind: Kind,
    /// Raw JSON as the client sent it; validated against `kind` here.
    pub spec: String,
    pub depends_on: Vec<TaskId>,
}

/// Fields to change with `UpdateTask`; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct TaskUpdate {
    pub content: Option<String>,
    pub priority: Option<Priority>,
    pub spec: Option<String>,
}

/// The answer to `WriteTodos`: the committed list and what the write did.
#[derive(Debug, Clone)]
pub struct WrittenTodos {
    pub plan: PlanView,
    pub todos: Vec<TaskView>,
    pub created: Vec<TaskId>,
    pub archived: Vec<TaskId>,
}

/// The parts of a task row that write rules look at.
struct TaskHead {
    plan_id: i64,
    plan: String,
    status: Status,
    kind: Kind,
    archived: bool,
}

async fn task_head(conn: &mut SqliteConnection, id: TaskId) -> Result<TaskHead, Error> {
    let row = sqlx::query(
        "SELECT t.plan_id, p.name, t.status, t.kind, t.archived_at FROM tasks t \
         JOIN plans p ON p.id = t.plan_id WHERE t.id = ?",
    )
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| domain::Error::task_not_found(id))?;
    let parse = |text: &str| Error::Corrupt(format!("unexpected value {text:?}"));
    let status: &str = row.try_get(2)?;
    let kind: &str = row.try_get(3)?;
    Ok(TaskHead {
        plan_id: row.try_get(0)?,
        plan: row.try_get(1)?,
        status: status.parse().map_err(|_| parse(status))?,
        kind: kind.parse().map_err(|_| parse(kind))?,
        archived: row.try_get::<Option<i64>, _>(4)?.is_some(),
    })
}

/// The task with its direct dependencies and dependents, enough for a transition.
async fn neighbourhood(
    conn: &mut SqliteConnection,
    id: TaskId,
    status: Status,
) -> Result<Graph, Error> {
    let mut graph = Graph::new();
    graph.insert(id, status);
    let rows = sqlx::query(
        "SELECT d.task_id, d.depends_on, u.id, u.status FROM dependencies d \
         JOIN tasks u ON u.id = CASE WHEN d.task_id = ?1 THEN d.depends_on ELSE d.task_id END \
         WHERE d.task_id = ?1 OR d.depends_on = ?1",
    )
    .bind(id.0)
    .fetch_all(&mut *conn)
    .await?;
    for row in rows {
        let other = TaskId(row.try_get(2)?);
        let status: &str = row.try_get(3)?;
        let status = status
            .parse()
            .map_err(|_| Error::Corrupt(format!("unknown status {status:?}")))?;
        graph.insert(other, status);
        graph.insert_edge(TaskId(row.try_get(0)?), TaskId(row.try_get(1)?));
    }
    Ok(graph)
}

/// `start` and every task it depends on, directly or not, with their edges:
/// enough to tell whether a new edge into `start` closes a cycle.
async fn ancestry(conn: &mut SqliteConnection, start: TaskId) -> Result<Graph, Error> {
    let mut graph = Graph::new();
    let rows = sqlx::query(
        "WITH RECURSIVE up(id) AS (SELECT ?1 UNION SELECT d.depends_on FROM dependencies d \
         JOIN up ON d.task_id = up.id) \
         SELECT t.id, t.status, d.depends_on FROM up JOIN tasks t ON t.id = up.id \
         LEFT JOIN dependencies d ON d.task_id = t.id",
    )
    .bind(start.0)
    .fetch_all(&mut *conn)
    .await?;
    for row in rows {
        let id = TaskId(row.try_get(0)?);
        let status: &str = row.try_get(1)?;
        let status = status
            .parse()
            .map_err(|_| Error::Corrupt(format!("unknown status {status:?}")))?;
        graph.insert(id, status);
        if let Some(dep) = row.try_get::<Option<i64>, _>(2)? {
            graph.insert_edge(id, TaskId(dep));
        }
    }
    Ok(graph)
}

fn check_revision(plan: &PlanView, ctx: &WriteContext) -> Result<(), Error> {
    match ctx.expected_revision {
        Some(expected) if expected != plan.revision => Err(domain::Error::StaleRevision {
            plan: plan.name.clone(),
            expected,
            actual: plan.revision,
        }
        .into()),
        _ => Ok(()),
    }
}

async fn plan_of(conn: &mut SqliteConnection, plan_id: i64) -> Result<PlanView, Error> {
    let row =
        sqlx::query("SELECT name, title, revision, created_at, updated_at FROM plans WHERE id = ?")
            .bind(plan_id)
            .fetch_one(&mut *conn)
            .await?;
    PlanView::from_row(&row)
}

impl Store {
    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, Error> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }

    async fn commit(
        &self,
        tx: Transaction<'static, Sqlite>,
        applied: &Applied,
    ) -> Result<(), Error> {
        tx.commit().await?;
        self.published(applied.last_seq);
        Ok(())
    }

    pub async fn create_plan(
        &self,
        name: &str,
        title: &str,
        ctx: &WriteContext,
    ) -> Result<PlanView, Error> {
        let mut tx = self.begin_write().await?;
        if plan_by_name(&mut tx, name).await?.is_some() {
            return Err(domain::Error::AlreadyExists {
                what: "plan",
                id: name.to_string(),
            }
            .into());
        }
        let (plan_id, seq) = insert_plan(&mut tx, name, title, ctx).await?;
        let plan = plan_of(&mut tx, plan_id).await?;
        tx.commit().await?;
        self.published(Some(seq));
        Ok(plan)
    }

    /// The agent's todo-write: reconciles the full list in one transaction.
    pub async fn write_todos(
        &self,
        plan: &str,
        items: &[TodoItem],
        ctx: &WriteContext,
    ) -> Result<WrittenTodos, Error> {
        let mut tx = self.begin_write().await?;
        let mut plan_seq = None;
        let (plan_id, mut plan_view) = match plan_by_name(&mut tx, plan).await? {
            Some((id, view)) => {
                check_revision(&view, ctx)?;
                (id, view)
            }
            None => {
                let fresh = PlanView {
                    name: plan.to_string(),
                    title: String::new(),
                    revision: 0,
                    created_at: 0,
                    updated_at: 0,
                };
                check_revision(&fresh, ctx)?;
                let (id, seq) = insert_plan(&mut tx, plan, "", ctx).await?;
                plan_seq = Some(seq);
                (id, plan_of(&mut tx, id).await?)
            }
        };
        let revision = plan_view.revision;
        let stored = stored_tasks(&mut tx, plan_id, plan, items).await?;
        let write = todo_list::reconcile(&stored, items)?;
        let now = now_ms();
        let mut applied =
            persist::apply(&mut tx, plan_id, revision, &write.changes, ctx, now).await?;
        if applied.revision != revision {
            plan_view.revision = applied.revision;
            plan_view.updated_at = now;
        }
        applied.last_seq = applied.last_seq.or(plan_seq);
        let created = write
            .resolved
            .iter()
            .filter(|id| id.is_provisional())
            .map(|id| applied.real(*id))
            .collect();
        let archived = write
            .changes
            .iter()
            .filter_map(|c| match c {
                Change::Archived { id } => Some(*id),
                _ => None,
            })
            .collect();
        let todos = live_tasks(&mut tx, plan_id).await?;
        self.commit(tx, &applied).await?;
        Ok(WrittenTodos {
            plan: plan_view,
            todos,
            created,
            archived,
        })
    }

    pub async fn create_task(&self, new: &NewTask, ctx: &WriteContext) -> Result<TaskView, Error> {
        let spec = spec::validate("spec_json", new.kind, &new.spec)?;
        let mut tx = self.begin_write().await?;
        let (plan_id, plan) = require_plan(&mut tx, &new.plan).await?;
        check_revision(&plan, ctx)?;
        let mut deps = BTreeSet::new();
        for (index, &dep) in new.depends_on.iter().enumerate() {
            let field = format!("depends_on[{index}]");
            let head = task_head(&mut tx, dep).await?;
            if head.plan_id != plan_id {
                return Err(cross_plan(&field, dep, &head.plan, &plan.name));
            }
            if head.archived {
                return Err(domain::Error::Archived { task: dep }.into());
            }
            deps.insert(dep);
        }
        let position: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(position) + 1, 0) FROM tasks WHERE plan_id = ?",
        )
        .bind(plan_id)
        .fetch_one(&mut *tx)
        .await?;
        let provisional = TaskId(-1);
        let mut changes = vec![Change::Created {
            id: provisional,
            content: new.content.clone(),
            priority: new.priority,
            kind: new.kind,
            position,
            spec,
        }];
        changes.extend(deps.into_iter().map(|depends_on| Change::DependencyAdded {
            id: provisional,
            depends_on,
        }));
        let applied =
            persist::apply(&mut tx, plan_id, plan.revision, &changes, ctx, now_ms()).await?;
        let task = task_by_id(&mut tx, applied.real(provisional)).await?;
        self.commit(tx, &applied).await?;
        Ok(task)
    }

    pub async fn update_task(
        &self,
        id: TaskId,
        update: &TaskUpdate,
        ctx: &WriteContext,
    ) -> Result<TaskView, Error> {
        let mut tx = self.begin_write().await?;
        let current = task_by_id(&mut tx, id).await?;
        let head = task_head(&mut tx, id).await?;
        let plan = plan_of(&mut tx, head.plan_id).await?;
        check_revision(&plan, ctx)?;
        if head.archived {
            return Err(domain::Error::Archived { task: id }.into());
        }
        let mut changes = Vec::new();
        if let Some(content) = update.content.as_ref().filter(|c| **c != current.content) {
            changes.push(Change::ContentChanged {
                id,
                old: current.content.clone(),
                new: content.clone(),
            });
        }
        if let Some(priority) = update.priority.filter(|p| *p != current.priority) {
            changes.push(Change::PriorityChanged {
                id,
                old: current.priority,
                new: priority,
            });
        }
        if let Some(raw) = &update.spec {
            let spec = spec::validate("spec_json", head.kind, raw)?;
            if spec != current.spec {
                changes.push(Change::SpecChanged {
                    id,
                    old: current.spec.clone(),
                    new: spec,
                });
            }
        }
        self.finish_task_write(tx, id, head.plan_id, plan.revision, &changes, ctx)
            .await
    }

    pub async fn transition(
        &self,
        id: TaskId,
        to: Status,
        ctx: &WriteContext,
    ) -> Result<TaskView, Error> {
        let mut tx = self.begin_write().await?;
        let head = task_head(&mut tx, id).await?;
        let plan = plan_of(&mut tx, head.plan_id).await?;
        check_revision(&plan, ctx)?;
        if head.archived {
            return Err(domain::Error::Archived { task: id }.into());
        }
        let mut graph = neighbourhood(&mut tx, id, head.status).await?;
        let from = graph.transition(id, to)?;
        let changes = if from == to {
            vec![]
        } else {
            vec![Change::StatusChanged { id, from, to }]
        };
        self.finish_task_write(tx, id, head.plan_id, plan.revision, &changes, ctx)
            .await
    }

    pub async fn add_dependency(
        &self,
        id: TaskId,
        depends_on: TaskId,
        ctx: &WriteContext,
    ) -> Result<TaskView, Error> {
        if id == depends_on {
            return Err(domain::Error::invalid(
                "depends_on",
                format!("{id} cannot depend on itself"),
            )
            .into());
        }
        let mut tx = self.begin_write().await?;
        let head = task_head(&mut tx, id).await?;
        let plan = plan_of(&mut tx, head.plan_id).await?;
        check_revision(&plan, ctx)?;
        let dep = task_head(&mut tx, depends_on).await?;
        if dep.plan_id != head.plan_id {
            return Err(cross_plan("depends_on", depends_on, &dep.plan, &plan.name));
        }
        for (task, archived) in [(id, head.archived), (depends_on, dep.archived)] {
            if archived {
                return Err(domain::Error::Archived { task }.into());
            }
        }
        // The ancestry of the target is all a cycle check needs; it does not
        // hold the task's own edges, so whether the edge exists is asked here.
        let mut graph = ancestry(&mut tx, depends_on).await?;
        graph.insert(id, head.status);
        graph.check_edge(id, depends_on)?;
        let changes = if edge_exists(&mut tx, id, depends_on).await? {
            vec![]
        } else {
            vec![Change::DependencyAdded { id, depends_on }]
        };
        self.finish_task_write(tx, id, head.plan_id, plan.revision, &changes, ctx)
            .await
    }

    pub async fn remove_dependency(
        &self,
        id: TaskId,
        depends_on: TaskId,
        ctx: &WriteContext,
    ) -> Result<TaskView, Error> {
        let mut tx = self.begin_write().await?;
        let head = task_head(&mut tx, id).await?;
        let plan = plan_of(&mut tx, head.plan_id).await?;
        check_revision(&plan, ctx)?;
        task_head(&mut tx, depends_on).await?;
        if !edge_exists(&mut tx, id, depends_on).await? {
            return Err(domain::Error::NotFound {
                what: "dependency",
                id: format!("{id} -> {depends_on}"),
            }
            .into());
        }
        let changes = vec![Change::DependencyRemoved { id, depends_on }];
        self.finish_task_write(tx, id, head.plan_id, plan.revision, &changes, ctx)
            .await
    }

    async fn finish_task_write(
        &self,
        mut tx: Transaction<'static, Sqlite>,
        id: TaskId,
        plan_id: i64,
        revision: i64,
        changes: &[Change],
        ctx: &WriteContext,
    ) -> Result<TaskView, Error> {
        let applied = persist::apply(&mut tx, plan_id, revision, changes, ctx, now_ms()).await?;
        let task = task_by_id(&mut tx, id).await?;
        self.commit(tx, &applied).await?;
        Ok(task)
    }
}

async fn edge_exists(
    conn: &mut SqliteConnection,
    id: TaskId,
    depends_on: TaskId,
) -> Result<bool, Error> {
    let found: Option<i64> =
        sqlx::query_scalar("SELECT 1 FROM dependencies WHERE task_id = ? AND depends_on = ?")
            .bind(id.0)
            .bind(depends_on.0)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(found.is_some())
}

fn cross_plan(field: &str, dep: TaskId, dep_plan: &str, plan: &str) -> Error {
    domain::Error::invalid(
        field,
        format!(
            "{dep} belongs to plan {dep_plan:?}, not {plan:?}; dependencies stay within a plan"
        ),
    )
    .into()
}

async fn insert_plan(
    conn: &mut SqliteConnection,
    name: &str,
    title: &str,
    ctx: &WriteContext,
) -> Result<(i64, i64), Error> {
    let now = now_ms();
    let plan_id: i64 = sqlx::query_scalar(
        "INSERT INTO plans (name, title, revision, created_at, updated_at) \
         VALUES (?, ?, 0, ?, ?) RETURNING id",
    )
    .bind(name)
    .bind(title)
    .bind(now)
    .bind(now)
    .fetch_one(&mut *conn)
    .await?;
    let seq = persist::record_plan_created(conn, plan_id, ctx, now).await?;
    Ok((plan_id, seq))
}

/// The plan's live tasks, plus the archived or foreign tasks that `items` name
/// by id (foreign ones are refused here, archived ones may be restored).
async fn stored_tasks(
    conn: &mut SqliteConnection,
    plan_id: i64,
    plan: &str,
    items: &[TodoItem],
) -> Result<Vec<StoredTask>, Error> {
    let rows = sqlx::query(
        "SELECT t.id, t.content, t.status, t.priority, t.kind, t.position, t.archived_at, \
         (SELECT json_group_array(d.depends_on) FROM dependencies d WHERE d.task_id = t.id) \
         FROM tasks t WHERE t.plan_id = ?1 AND (t.archived_at IS NULL \
         OR t.id IN (SELECT value FROM json_each(?2)))",
    )
    .bind(plan_id)
    .bind(
        serde_json::Value::from(
            items
                .iter()
                .filter_map(|i| i.id.map(|id| id.0))
                .collect::<Vec<_>>(),
        )
        .to_string(),
    )
    .fetch_all(&mut *conn)
    .await?;
    let corrupt = |what: &str| Error::Corrupt(format!("unexpected {what} in tasks"));
    let mut stored = Vec::with_capacity(rows.len());
    for row in rows {
        let deps: &str = row.try_get(7)?;
        let deps: Vec<i64> = serde_json::from_str(deps).map_err(|_| corrupt("dependencies"))?;
        stored.push(StoredTask {
            id: TaskId(row.try_get(0)?),
            content: row.try_get(1)?,
            status: row
                .try_get::<&str, _>(2)?
                .parse()
                .map_err(|_| corrupt("status"))?,
            priority: row
                .try_get::<&str, _>(3)?
                .parse()
                .map_err(|_| corrupt("priority"))?,
            kind: row
                .try_get::<&str, _>(4)?
                .parse()
                .map_err(|_| corrupt("kind"))?,
            position: row.try_get(5)?,
            archived: row.try_get::<Option<i64>, _>(6)?.is_some(),
            depends_on: deps.into_iter().map(TaskId).collect(),
        });
    }
    let known: BTreeSet<TaskId> = stored.iter().map(|t| t.id).collect();
    for (index, id) in items
        .iter()
        .enumerate()
        .filter_map(|(i, it)| it.id.map(|id| (i, id)))
    {
        if !known.contains(&id) {
            if let Ok(head) = task_head(conn, id).await {
                return Err(cross_plan(
                    &format!("todos[{index}].id"),
                    id,
                    &head.plan,
                    plan,
                ));
            }
        }
    }
    Ok(stored)
}
