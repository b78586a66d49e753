//! Write operations. Each one runs as a single `BEGIN IMMEDIATE` transaction on
//! the one writer connection: load the part of the graph its rules need, ask the
//! domain what changes, persist the changes and their events, read back the
//! answer, commit, then publish the new event sequence. There is no await
//! between BEGIN and COMMIT, so a cancelled call cannot leave a transaction
//! half done, and nothing is acknowledged before the commit returns.
use std::collections::BTreeSet;

use super::persist;
use super::read::{live_tasks, plan_by_id, plan_by_name, require_plan, task_by_id};
use super::request_ids::Once;
use super::sql::Db;
use super::{now_ms, Error, PlanView, Store, TaskView, WriteContext};
use todod_domain::annotations::{self, Patch};
use todod_domain::todo_list::{self, StoredTask, TodoItem};
use todod_domain::{
    self as domain, spec, transition, Change, Claim, Graph, Kind, Priority, Status, TaskId,
};

/// A task to create with `CreateTask`.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub plan: String,
    pub content: String,
    pub priority: Priority,
    pub kind: Kind,
    /// JSON as checked by the phase registry; validated against `kind` here.
    pub spec: String,
    /// The output paths the spec names; each is held by one task at a time.
    pub claims: Vec<Claim>,
    pub depends_on: Vec<TaskId>,
    /// A phase kind the task must depend on (directly), if its spec needs one.
    pub requires_dependency: Option<Kind>,
    /// Validated by `domain::annotations`.
    pub owner: Option<String>,
    pub metadata: Option<Patch>,
}

/// A new spec for a phase task, as the phase registry checked it.
#[derive(Debug, Clone)]
pub struct SpecUpdate {
    pub spec: String,
    pub claims: Vec<Claim>,
    /// The spec it was checked against; the update is refused if the stored
    /// one changed meanwhile.
    pub based_on: Option<String>,
    /// Spec fields whose change would change what the task writes; refused
    /// once the task is running or has a checkpoint. Empty: a safe change.
    pub output_fields: Vec<String>,
}

/// Fields to change with `UpdateTask`; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct TaskUpdate {
    pub content: Option<String>,
    pub priority: Option<Priority>,
    pub spec: Option<SpecUpdate>,
    /// `Some(None)` clears the owner.
    pub owner: Option<Option<String>>,
    /// Merged into the task's metadata (`domain::annotations`).
    pub metadata: Option<Patch>,
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
pub(super) struct TaskHead {
    pub(super) plan_id: i64,
    pub(super) plan: String,
    pub(super) status: Status,
    pub(super) kind: Kind,
    pub(super) archived: bool,
}

fn task_head(db: &mut Db, id: TaskId) -> Result<TaskHead, Error> {
    db.query_row(
        "SELECT t.plan_id, p.name, t.status, t.kind, t.archived_at FROM tasks t \
         JOIN plans p ON p.id = t.plan_id WHERE t.id = ?",
        &[id.0.into()],
        |row| {
            Ok(TaskHead {
                plan_id: row.int(0)?,
                plan: row.text(1)?.to_string(),
                status: row.parsed(2, "status")?,
                kind: row.parsed(3, "kind")?,
                archived: row.opt_int(4)?.is_some(),
            })
        },
    )?
    .ok_or_else(|| domain::Error::task_not_found(id).into())
}

/// The task with its direct dependencies and dependents, enough for a transition.
fn neighbourhood(db: &mut Db, id: TaskId, status: Status) -> Result<Graph, Error> {
    let mut graph = Graph::new();
    graph.insert(id, status);
    let edges = db.query(
        "SELECT d.task_id, d.depends_on, u.id, u.status FROM dependencies d \
         JOIN tasks u ON u.id = CASE WHEN d.task_id = ?1 THEN d.depends_on ELSE d.task_id END \
         WHERE d.task_id = ?1 OR d.depends_on = ?1",
        &[id.0.into()],
        |row| {
            let other: Status = row.parsed(3, "status")?;
            Ok((row.int(0)?, row.int(1)?, row.int(2)?, other))
        },
    )?;
    for (task, depends_on, other, other_status) in edges {
        graph.insert(TaskId(other), other_status);
        graph.insert_edge(TaskId(task), TaskId(depends_on));
    }
    Ok(graph)
}

/// `start` and every task it depends on, directly or not, with their edges:
/// enough to tell whether a new edge into `start` closes a cycle.
fn ancestry(db: &mut Db, start: TaskId) -> Result<Graph, Error> {
    let mut graph = Graph::new();
    let rows = db.query(
        "WITH RECURSIVE up(id) AS (SELECT CAST(?1 AS BIGINT) UNION SELECT d.depends_on FROM dependencies d \
         JOIN up ON d.task_id = up.id) \
         SELECT t.id, t.status, d.depends_on FROM up JOIN tasks t ON t.id = up.id \
         LEFT JOIN dependencies d ON d.task_id = t.id",
        &[start.0.into()],
        |row| {
            let status: Status = row.parsed(1, "status")?;
            Ok((row.int(0)?, status, row.opt_int(2)?))
        },
    )?;
    for (id, status, dep) in rows {
        graph.insert(TaskId(id), status);
        if let Some(dep) = dep {
            graph.insert_edge(TaskId(id), TaskId(dep));
        }
    }
    Ok(graph)
}

fn edge_exists(db: &mut Db, id: TaskId, depends_on: TaskId) -> Result<bool, Error> {
    Ok(db
        .query_row(
            "SELECT 1 FROM dependencies WHERE task_id = ? AND depends_on = ?",
            &[id.0.into(), depends_on.0.into()],
            |_| Ok(()),
        )?
        .is_some())
}

/// Whether a client may change `plan` now: it is live, and at the revision
/// the write expects.
pub(super) fn check_revision(plan: &PlanView, ctx: &WriteContext) -> Result<(), Error> {
    if plan.archived_at.is_some() {
        return Err(domain::Error::PlanArchived {
            plan: plan.name.clone(),
        }
        .into());
    }
    check_expected(plan, ctx)
}

/// The write's `expected_revision`, if it has one, is the plan's.
fn check_expected(plan: &PlanView, ctx: &WriteContext) -> Result<(), Error> {
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

fn cross_plan(field: &str, dep: TaskId, dep_plan: &str, plan: &str) -> Error {
    domain::Error::invalid(
        field,
        format!(
            "{dep} belongs to plan {dep_plan:?}, not {plan:?}; dependencies stay within a plan"
        ),
    )
    .into()
}

/// Archives a plan (or restores it): one change, recorded as a plan event.
fn archive_plan(
    db: &mut Db,
    name: &str,
    restore: bool,
    ctx: &WriteContext,
) -> Result<(PlanView, Option<i64>), Error> {
    let (plan_id, plan) = require_plan(db, name)?;
    if plan.archived_at.is_some() != restore {
        return Ok((plan, None)); // already so
    }
    // Not check_revision: restoring is the one change an archived plan takes.
    check_expected(&plan, ctx)?;
    if !restore {
        let running = db.query(
            "SELECT id FROM tasks WHERE plan_id = ? AND status = 'in_progress' \
             AND archived_at IS NULL ORDER BY id LIMIT 10",
            &[plan_id.into()],
            |row| Ok(TaskId(row.int(0)?)),
        )?;
        if !running.is_empty() {
            return Err(domain::Error::PlanBusy {
                plan: plan.name,
                tasks: running,
            }
            .into());
        }
    }
    let now = now_ms();
    let revision = plan.revision + 1;
    let archived_at = (!restore).then_some(now);
    db.execute(
        "UPDATE plans SET archived_at = ?, revision = ?, updated_at = ? WHERE id = ?",
        &[
            archived_at.into(),
            revision.into(),
            now.into(),
            plan_id.into(),
        ],
    )?;
    let kind = if restore {
        "plan_restored"
    } else {
        "plan_archived"
    };
    let seq = persist::record_plan_event(db, plan_id, kind, revision, ctx, now)?;
    Ok((plan_by_id(db, plan_id)?, Some(seq)))
}

pub(super) fn insert_plan(
    db: &mut Db,
    name: &str,
    title: &str,
    ctx: &WriteContext,
) -> Result<(i64, i64), Error> {
    let now = now_ms();
    // Creating the plan is its first change: revision 1, so that a write can
    // guard on it with expected_revision (0 means "don't check").
    let plan_id = db
        .query_row(
            "INSERT INTO plans (name, title, revision, created_at, updated_at) \
             VALUES (?, ?, 1, ?, ?) RETURNING id",
            &[name.into(), title.into(), now.into(), now.into()],
            |row| row.int(0),
        )?
        .ok_or_else(super::sql::no_row)?;
    let seq = persist::record_plan_event(db, plan_id, "plan_created", 1, ctx, now)?;
    Ok((plan_id, seq))
}

/// The plan's live tasks, plus the archived or foreign tasks that `items` name
/// by id (foreign ones are refused here, archived ones may be restored).
fn stored_tasks(
    db: &mut Db,
    plan_id: i64,
    plan: &str,
    items: &[TodoItem],
) -> Result<Vec<StoredTask>, Error> {
    let named: Vec<i64> = items.iter().filter_map(|i| i.id.map(|id| id.0)).collect();
    let named = serde_json::Value::from(named).to_string();
    let dialect = db.dialect();
    let stored = db.query(
        &format!(
            "SELECT t.id, t.content, t.status, t.priority, t.kind, t.position, t.archived_at, \
             (SELECT {} FROM dependencies d WHERE d.task_id = t.id), t.metadata \
             FROM tasks t WHERE t.plan_id = ?1 AND (t.archived_at IS NULL OR t.id IN ({}))",
            dialect.joined("d.depends_on", "d.depends_on"),
            dialect.json_ints("?2"),
        ),
        &[plan_id.into(), (&named).into()],
        |row| {
            let deps = row.opt_text(7)?.unwrap_or("");
            let depends_on = deps
                .split(',')
                .filter(|d| !d.is_empty())
                .map(|d| d.parse().map(TaskId))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| Error::Corrupt(format!("dependency list {deps:?}")))?;
            Ok(StoredTask {
                id: TaskId(row.int(0)?),
                content: row.text(1)?.to_string(),
                status: row.parsed(2, "status")?,
                priority: row.parsed(3, "priority")?,
                kind: row.parsed(4, "kind")?,
                position: row.int(5)?,
                archived: row.opt_int(6)?.is_some(),
                depends_on,
                metadata: row.opt_text(8)?.map(str::to_string),
            })
        },
    )?;
    // Ids that are not the plan's: another plan's task is refused by name here;
    // an id that exists nowhere is NOT_FOUND.
    let known: BTreeSet<TaskId> = stored.iter().map(|t| t.id).collect();
    for (index, item) in items.iter().enumerate() {
        let own = item.id.map(|id| (format!("todos[{index}].id"), id));
        let deps = item.depends_on.iter().flatten().enumerate();
        let deps = deps.map(|(i, id)| (format!("todos[{index}].depends_on[{i}]"), *id));
        for (field, id) in own.into_iter().chain(deps) {
            if known.contains(&id) {
                continue;
            }
            let head = task_head(db, id).map_err(|error| match error {
                Error::Rule(domain::Error::NotFound { .. }) => domain::Error::NotFound {
                    what: "task",
                    id: format!("{id} ({field})"),
                }
                .into(),
                other => other,
            })?;
            if head.plan != plan {
                return Err(cross_plan(&field, id, &head.plan, plan));
            }
        }
    }
    Ok(stored)
}

fn write_todos(
    db: &mut Db,
    plan: &str,
    items: &[TodoItem],
    ctx: &WriteContext,
) -> Result<(WrittenTodos, Option<i64>), Error> {
    let mut plan_seq = None;
    let (plan_id, mut plan_view) = match plan_by_name(db, plan)? {
        Some((id, view)) => {
            check_revision(&view, ctx)?;
            (id, view)
        }
        None => {
            // A write to a new plan may only expect the empty revision 0.
            if let Some(expected) = ctx.expected_revision.filter(|r| *r != 0) {
                return Err(domain::Error::StaleRevision {
                    plan: plan.to_string(),
                    expected,
                    actual: 0,
                }
                .into());
            }
            let (id, seq) = insert_plan(db, plan, "", ctx)?;
            plan_seq = Some(seq);
            (id, plan_by_id(db, id)?)
        }
    };
    let stored = stored_tasks(db, plan_id, plan, items)?;
    let write = todo_list::reconcile(&stored, items)?;
    let now = now_ms();
    let applied = persist::apply(db, plan_id, plan_view.revision, &write.changes, ctx, now)?;
    if applied.revision != plan_view.revision {
        plan_view.revision = applied.revision;
        plan_view.updated_at = now;
    }
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
    let todos = live_tasks(db, plan_id)?;
    let written = WrittenTodos {
        plan: plan_view,
        todos,
        created,
        archived,
    };
    Ok((written, applied.last_seq.or(plan_seq)))
}

/// Refuses claims on paths another task holds.
fn check_claims(db: &mut Db, task: Option<TaskId>, claims: &[Claim]) -> Result<(), Error> {
    for claim in claims {
        let holder = db.query_row(
            "SELECT task_id FROM phase_outputs WHERE path = ? AND active = 1 AND task_id <> ?",
            &[(&claim.path).into(), task.map_or(0, |t| t.0).into()],
            |row| row.int(0),
        )?;
        if let Some(holder) = holder {
            return Err(domain::Error::PathTaken {
                field: claim.field.clone(),
                path: claim.path.clone(),
                why: format!(
                    "is written by task {}; two tasks cannot share an output",
                    TaskId(holder)
                ),
            }
            .into());
        }
    }
    Ok(())
}

fn insert_claims(db: &mut Db, task: TaskId, claims: &[Claim]) -> Result<(), Error> {
    db.execute(
        "DELETE FROM phase_outputs WHERE task_id = ?",
        &[task.0.into()],
    )?;
    for claim in claims {
        db.execute(
            "INSERT INTO phase_outputs (task_id, path, field, active) VALUES (?, ?, ?, \
             (SELECT CASE WHEN status <> 'cancelled' THEN 1 ELSE 0 END FROM tasks WHERE id = ?))",
            &[
                task.0.into(),
                (&claim.path).into(),
                (&claim.field).into(),
                task.0.into(),
            ],
        )?;
    }
    Ok(())
}

/// A cancelled phase task let go of its output paths; it may come back only
/// if nobody took them meanwhile.
fn check_claims_back(db: &mut Db, id: TaskId) -> Result<(), Error> {
    let claims = db.query(
        "SELECT field, path FROM phase_outputs WHERE task_id = ?",
        &[id.0.into()],
        |row| {
            Ok(Claim {
                field: row.text(0)?.to_string(),
                path: row.text(1)?.to_string(),
            })
        },
    )?;
    check_claims(db, Some(id), &claims)
}

pub(super) fn has_checkpoint(db: &mut Db, id: TaskId) -> Result<bool, Error> {
    Ok(db
        .query_row(
            "SELECT 1 FROM phase_state WHERE task_id = ?1 \
             UNION ALL SELECT 1 FROM phase_checkpoints WHERE task_id = ?1 \
             UNION ALL SELECT 1 FROM phase_shards WHERE task_id = ?1 AND state IS NOT NULL",
            &[id.0.into()],
            |_| Ok(()),
        )?
        .is_some())
}

pub(super) fn create_task(
    db: &mut Db,
    new: &NewTask,
    ctx: &WriteContext,
) -> Result<(TaskView, Option<i64>), Error> {
    let spec = spec::validate("spec_json", new.kind, &new.spec)?;
    let (plan_id, plan) = require_plan(db, &new.plan)?;
    check_revision(&plan, ctx)?;
    check_claims(db, None, &new.claims)?;
    let mut deps = BTreeSet::new();
    let mut dep_kinds = BTreeSet::new();
    for (index, &dep) in new.depends_on.iter().enumerate() {
        let head = task_head(db, dep)?;
        dep_kinds.insert(head.kind);
        if head.plan_id != plan_id {
            return Err(cross_plan(
                &format!("depends_on[{index}]"),
                dep,
                &head.plan,
                &plan.name,
            ));
        }
        if head.archived {
            return Err(domain::Error::Archived { task: dep }.into());
        }
        deps.insert(dep);
    }
    if let Some(kind) = new.requires_dependency.filter(|k| !dep_kinds.contains(k)) {
        return Err(domain::Error::invalid(
            "depends_on",
            format!("the spec needs a {kind} task among the dependencies, and there is none"),
        )
        .into());
    }
    let position = db
        .query_row(
            "SELECT COALESCE(MAX(position) + 1, 0) FROM tasks WHERE plan_id = ?",
            &[plan_id.into()],
            |row| row.int(0),
        )?
        .unwrap_or(0);
    // A new task has no dependents, so its edges cannot close a cycle.
    let provisional = TaskId(-1);
    let mut changes = vec![Change::Created {
        id: provisional,
        content: new.content.clone(),
        priority: new.priority,
        kind: new.kind,
        position,
        spec,
    }];
    if let Some(owner) = &new.owner {
        changes.push(Change::OwnerChanged {
            id: provisional,
            old: None,
            new: Some(owner.clone()),
        });
    }
    if let Some(patch) = &new.metadata {
        changes.extend(annotations::metadata_change(
            "metadata_json",
            provisional,
            None,
            patch,
        )?);
    }
    changes.extend(deps.into_iter().map(|depends_on| Change::DependencyAdded {
        id: provisional,
        depends_on,
    }));
    let applied = persist::apply(db, plan_id, plan.revision, &changes, ctx, now_ms())?;
    let id = applied.real(provisional);
    insert_claims(db, id, &new.claims)?;
    let task = task_by_id(db, id)?;
    Ok((task, applied.last_seq))
}

/// Checks the plan's revision and that the task is live; returns its head.
pub(super) fn writable_task(
    db: &mut Db,
    id: TaskId,
    ctx: &WriteContext,
) -> Result<(TaskHead, i64), Error> {
    let head = task_head(db, id)?;
    let plan = plan_by_id(db, head.plan_id)?;
    check_revision(&plan, ctx)?;
    if head.archived {
        return Err(domain::Error::Archived { task: id }.into());
    }
    Ok((head, plan.revision))
}

/// Persists the changes of a single-task write and reads the task back.
fn finish_task_write(
    db: &mut Db,
    id: TaskId,
    plan_id: i64,
    revision: i64,
    changes: &[Change],
    ctx: &WriteContext,
) -> Result<(TaskView, Option<i64>), Error> {
    let applied = persist::apply(db, plan_id, revision, changes, ctx, now_ms())?;
    Ok((task_by_id(db, id)?, applied.last_seq))
}

pub(super) fn update_task(
    db: &mut Db,
    id: TaskId,
    update: &TaskUpdate,
    ctx: &WriteContext,
) -> Result<(TaskView, Option<i64>), Error> {
    let (head, revision) = writable_task(db, id, ctx)?;
    let current = task_by_id(db, id)?;
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
    if let Some(owner) = update.owner.as_ref().filter(|o| **o != current.owner) {
        changes.push(Change::OwnerChanged {
            id,
            old: current.owner.clone(),
            new: owner.clone(),
        });
    }
    if let Some(patch) = &update.metadata {
        changes.extend(annotations::metadata_change(
            "metadata_patch_json",
            id,
            current.metadata.as_deref(),
            patch,
        )?);
    }
    if let Some(update) = &update.spec {
        let spec = spec::validate("spec_json", head.kind, &update.spec)?;
        if update.based_on != current.spec {
            return Err(domain::Error::SpecMoved { task: id }.into());
        }
        if spec != current.spec {
            let running = head.status == Status::InProgress;
            if !update.output_fields.is_empty() && (running || has_checkpoint(db, id)?) {
                let why = if running {
                    "is running"
                } else {
                    "has a checkpoint"
                };
                return Err(domain::Error::SpecLocked {
                    task: id,
                    why: format!(
                        "it {why}, so its spec may not change {} (that would change what it \
                         writes); create a new task instead",
                        update.output_fields.join(", ")
                    ),
                }
                .into());
            }
            check_claims(db, Some(id), &update.claims)?;
            insert_claims(db, id, &update.claims)?;
            changes.push(Change::SpecChanged {
                id,
                old: current.spec.clone(),
                new: spec,
            });
        }
    }
    finish_task_write(db, id, head.plan_id, revision, &changes, ctx)
}

/// A client's transition: the table's rules, plus what only a phase run may do.
fn client_transition(
    db: &mut Db,
    id: TaskId,
    to: Status,
    ctx: &WriteContext,
) -> Result<(TaskView, Option<i64>), Error> {
    let head = task_head(db, id)?;
    transition::check_client_move(id, head.kind, head.status, to)?;
    transition(db, id, to, ctx)
}

pub(super) fn transition(
    db: &mut Db,
    id: TaskId,
    to: Status,
    ctx: &WriteContext,
) -> Result<(TaskView, Option<i64>), Error> {
    let (head, revision) = writable_task(db, id, ctx)?;
    if head.kind.is_phase() && head.status == Status::Cancelled && to != Status::Cancelled {
        check_claims_back(db, id)?;
    }
    let mut graph = neighbourhood(db, id, head.status)?;
    let from = graph.transition(id, to)?;
    let changes = if from == to {
        vec![]
    } else {
        vec![Change::StatusChanged { id, from, to }]
    };
    finish_task_write(db, id, head.plan_id, revision, &changes, ctx)
}

pub(super) fn add_dependency(
    db: &mut Db,
    id: TaskId,
    depends_on: TaskId,
    ctx: &WriteContext,
) -> Result<(TaskView, Option<i64>), Error> {
    let (head, revision) = writable_task(db, id, ctx)?;
    let dep = task_head(db, depends_on)?;
    if dep.plan_id != head.plan_id {
        return Err(cross_plan("depends_on", depends_on, &dep.plan, &head.plan));
    }
    if dep.archived {
        return Err(domain::Error::Archived { task: depends_on }.into());
    }
    // The ancestry of the target is all a cycle check needs; it does not hold
    // the task's own edges, so whether the edge exists is asked separately.
    let mut graph = ancestry(db, depends_on)?;
    graph.insert(id, head.status);
    graph.check_edge(id, depends_on)?;
    let changes = if edge_exists(db, id, depends_on)? {
        vec![]
    } else {
        vec![Change::DependencyAdded { id, depends_on }]
    };
    finish_task_write(db, id, head.plan_id, revision, &changes, ctx)
}

pub(super) fn remove_dependency(
    db: &mut Db,
    id: TaskId,
    depends_on: TaskId,
    ctx: &WriteContext,
) -> Result<(TaskView, Option<i64>), Error> {
    let (head, revision) = writable_task(db, id, ctx)?;
    task_head(db, depends_on)?;
    if !edge_exists(db, id, depends_on)? {
        return Err(domain::Error::NotFound {
            what: "dependency",
            id: format!("{id} -> {depends_on}"),
        }
        .into());
    }
    let changes = vec![Change::DependencyRemoved { id, depends_on }];
    finish_task_write(db, id, head.plan_id, revision, &changes, ctx)
}

impl Store {
    pub async fn create_plan(
        &self,
        name: &str,
        title: &str,
        ctx: &WriteContext,
    ) -> Result<Once<PlanView>, Error> {
        self.write_once(ctx, |db| {
            if plan_by_name(db, name)?.is_some() {
                return Err(domain::Error::AlreadyExists {
                    what: "plan",
                    id: name.to_string(),
                }
                .into());
            }
            let (plan_id, seq) = insert_plan(db, name, title, ctx)?;
            Ok((plan_by_id(db, plan_id)?, Some(seq)))
        })
        .await
    }

    /// The agent's todo-write: reconciles the full list in one transaction.
    /// Archives a plan, or restores it (`restore`); archiving refuses a plan
    /// with work in progress.
    pub async fn archive_plan(
        &self,
        name: &str,
        restore: bool,
        ctx: &WriteContext,
    ) -> Result<Once<PlanView>, Error> {
        self.write_once(ctx, |db| archive_plan(db, name, restore, ctx))
            .await
    }

    pub async fn write_todos(
        &self,
        plan: &str,
        items: &[TodoItem],
        ctx: &WriteContext,
    ) -> Result<Once<WrittenTodos>, Error> {
        self.write_once(ctx, |db| write_todos(db, plan, items, ctx))
            .await
    }

    pub async fn create_task(
        &self,
        new: &NewTask,
        ctx: &WriteContext,
    ) -> Result<Once<TaskView>, Error> {
        self.write_once(ctx, |db| create_task(db, new, ctx)).await
    }

    pub async fn update_task(
        &self,
        id: TaskId,
        update: &TaskUpdate,
        ctx: &WriteContext,
    ) -> Result<Once<TaskView>, Error> {
        self.write_once(ctx, |db| update_task(db, id, update, ctx))
            .await
    }

    pub async fn transition(
        &self,
        id: TaskId,
        to: Status,
        ctx: &WriteContext,
    ) -> Result<Once<TaskView>, Error> {
        self.write_once(ctx, |db| client_transition(db, id, to, ctx))
            .await
    }

    pub async fn add_dependency(
        &self,
        id: TaskId,
        depends_on: TaskId,
        ctx: &WriteContext,
    ) -> Result<Once<TaskView>, Error> {
        self.write_once(ctx, |db| add_dependency(db, id, depends_on, ctx))
            .await
    }

    pub async fn remove_dependency(
        &self,
        id: TaskId,
        depends_on: TaskId,
        ctx: &WriteContext,
    ) -> Result<Once<TaskView>, Error> {
        self.write_once(ctx, |db| remove_dependency(db, id, depends_on, ctx))
            .await
    }
}
