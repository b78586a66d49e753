//! Applying a pipeline file: its steps become phase tasks of a plan in one
//! transaction. Each task made this way names its step, so the same file
//! applied again finds the same tasks and changes nothing; a changed file
//! updates the steps that have not started and is refused whole when it
//! would change one that has.
use std::collections::{BTreeMap, BTreeSet};

use super::read::{plan_by_name, task_by_id};
use super::request_ids::Once;
use super::sql::Db;
use super::write::{
    add_dependency, check_revision, create_task, has_checkpoint, insert_plan, remove_dependency,
    update_task, NewTask, SpecUpdate, TaskUpdate,
};
use super::{Error, PlanView, Store, TaskView, WriteContext};
use todod_domain::{self as domain, Status, TaskId};

/// A step of a pipeline, its spec checked by the phase registry.
#[derive(Debug, Clone)]
pub struct PlannedStep {
    /// The step's name ("generation").
    pub step: String,
    /// The task it stands for; `plan` and `depends_on` are the store's to fill.
    pub task: NewTask,
    /// Earlier steps it depends on, by name.
    pub depends_on: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepAction {
    Create,
    Unchanged,
    Update,
    /// A task of an earlier version of the file whose step the file no
    /// longer names; left as it is.
    NotInFile,
}

impl StepAction {
    pub fn as_str(self) -> &'static str {
        match self {
            StepAction::Create => "create",
            StepAction::Unchanged => "unchanged",
            StepAction::Update => "update",
            StepAction::NotInFile => "not_in_file",
        }
    }
}

#[derive(Debug, Clone)]
pub struct AppliedStep {
    pub step: String,
    pub action: StepAction,
    /// What changes, for an update: `content`, `depends_on` or spec fields.
    pub changed: Vec<String>,
    /// The task as it is after the apply (`None` for a create in a dry run).
    pub task: Option<TaskView>,
    /// The spec the step gets.
    pub spec: String,
}

#[derive(Debug, Clone)]
pub struct AppliedPipeline {
    /// `None` when a dry run finds no such plan.
    pub plan: Option<PlanView>,
    pub steps: Vec<AppliedStep>,
}

/// The plan's tasks made by a pipeline file, by step.
fn step_tasks(db: &mut Db, plan_id: i64) -> Result<BTreeMap<String, TaskId>, Error> {
    let rows = db.query(
        "SELECT pipeline_step, id FROM tasks WHERE plan_id = ? AND pipeline_step IS NOT NULL",
        &[plan_id.into()],
        |row| Ok((row.text(0)?.to_string(), TaskId(row.int(1)?))),
    )?;
    Ok(rows.into_iter().collect())
}

fn spec_value(spec: &str) -> serde_json::Value {
    serde_json::from_str(spec).unwrap_or(serde_json::Value::Null)
}

/// The top-level spec fields that differ between two specs.
fn changed_fields(old: &str, new: &str) -> Vec<String> {
    let (old, new) = (spec_value(old), spec_value(new));
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return vec!["spec".into()];
    };
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .cloned()
        .collect()
}

/// The tasks of steps the file no longer names, as they are.
fn not_in_file(db: &mut Db, left_out: Vec<(String, TaskId)>) -> Result<Vec<AppliedStep>, Error> {
    left_out
        .into_iter()
        .map(|(step, id)| {
            let task = task_by_id(db, id)?;
            Ok(AppliedStep {
                step,
                action: StepAction::NotInFile,
                changed: Vec::new(),
                spec: task.spec.clone().unwrap_or_default(),
                task: Some(task),
            })
        })
        .collect()
}

fn apply(
    db: &mut Db,
    plan: &str,
    title: &str,
    steps: &[PlannedStep],
    dry_run: bool,
    ctx: &WriteContext,
) -> Result<(AppliedPipeline, Option<i64>), Error> {
    let found = plan_by_name(db, plan)?;
    if let Some((_, view)) = &found {
        check_revision(view, ctx)?;
    }
    let existing = match &found {
        Some((plan_id, _)) => step_tasks(db, *plan_id)?,
        None => BTreeMap::new(),
    };

    // First what each step would do, refusing before anything is written.
    let mut decided = Vec::new();
    for planned in steps {
        let Some(&id) = existing.get(&planned.step) else {
            decided.push((StepAction::Create, Vec::new(), None));
            continue;
        };
        let task = task_by_id(db, id)?;
        let mut changed = Vec::new();
        if task.content != planned.task.content {
            changed.push("content".to_string());
        }
        changed.extend(changed_fields(
            task.spec.as_deref().unwrap_or("{}"),
            &planned.task.spec,
        ));
        let wanted: BTreeSet<TaskId> = planned
            .depends_on
            .iter()
            .filter_map(|s| existing.get(s).copied())
            .collect();
        let pipeline_ids: BTreeSet<TaskId> = existing.values().copied().collect();
        let current: BTreeSet<TaskId> = task
            .depends_on
            .iter()
            .copied()
            .filter(|d| pipeline_ids.contains(d))
            .collect();
        let new_deps = planned.depends_on.iter().any(|s| !existing.contains_key(s));
        if current != wanted || new_deps {
            changed.push("depends_on".to_string());
        }
        if changed.is_empty() {
            decided.push((StepAction::Unchanged, changed, Some(task)));
            continue;
        }
        let started =
            task.status != Status::Pending || task.started_at.is_some() || has_checkpoint(db, id)?;
        if started {
            return Err(domain::Error::SpecLocked {
                task: id,
                why: format!(
                    "the {} step has started ({}), so the file may not change its {}; \
                     leave it as it was, or apply the changed file to a new plan",
                    planned.step,
                    task.status,
                    changed.join(", ")
                ),
            }
            .into());
        }
        decided.push((StepAction::Update, changed, Some(task)));
    }
    let mut left_out: Vec<(String, TaskId)> = existing
        .iter()
        .filter(|(step, _)| !steps.iter().any(|p| &p.step == *step))
        .map(|(s, id)| (s.clone(), *id))
        .collect();
    left_out.sort_by_key(|(_, id)| *id);

    if dry_run {
        let mut out = Vec::new();
        for (planned, (action, changed, task)) in steps.iter().zip(decided) {
            out.push(AppliedStep {
                step: planned.step.clone(),
                action,
                changed,
                task,
                spec: planned.task.spec.clone(),
            });
        }
        out.extend(not_in_file(db, left_out)?);
        return Ok((
            AppliedPipeline {
                plan: found.map(|(_, v)| v),
                steps: out,
            },
            None,
        ));
    }

    let mut last_seq = None;
    if found.is_none() {
        let (_, seq) = insert_plan(db, plan, title, ctx)?;
        last_seq = Some(seq);
    }
    // The revision was checked once, above; the writes below move it.
    let inner = WriteContext {
        expected_revision: None,
        request: None,
        ..ctx.clone()
    };
    let mut ids: BTreeMap<String, TaskId> = existing.clone();
    let mut out = Vec::new();
    for (planned, (action, changed, task)) in steps.iter().zip(decided) {
        let wanted: Vec<TaskId> = planned
            .depends_on
            .iter()
            .filter_map(|s| ids.get(s).copied())
            .collect();
        let task = match (action, task) {
            (StepAction::Create, _) => {
                let new = NewTask {
                    plan: plan.to_string(),
                    depends_on: wanted,
                    ..planned.task.clone()
                };
                let (task, seq) = create_task(db, &new, &inner)?;
                db.execute(
                    "UPDATE tasks SET pipeline_step = ? WHERE id = ?",
                    &[planned.step.as_str().into(), task.id.0.into()],
                )?;
                last_seq = seq.or(last_seq);
                ids.insert(planned.step.clone(), task.id);
                task
            }
            (StepAction::Update, Some(task)) => {
                let update = TaskUpdate {
                    content: Some(planned.task.content.clone()),
                    priority: None,
                    spec: Some(SpecUpdate {
                        spec: planned.task.spec.clone(),
                        claims: planned.task.claims.clone(),
                        based_on: task.spec.clone(),
                        output_fields: Vec::new(),
                    }),
                    owner: None,
                    metadata: None,
                };
                let (_, seq) = update_task(db, task.id, &update, &inner)?;
                last_seq = seq.or(last_seq);
                let pipeline_ids: BTreeSet<TaskId> = ids.values().copied().collect();
                for dep in task.depends_on.iter().filter(|d| pipeline_ids.contains(d)) {
                    if !wanted.contains(dep) {
                        let (_, seq) = remove_dependency(db, task.id, *dep, &inner)?;
                        last_seq = seq.or(last_seq);
                    }
                }
                for dep in &wanted {
                    if !task.depends_on.contains(dep) {
                        let (_, seq) = add_dependency(db, task.id, *dep, &inner)?;
                        last_seq = seq.or(last_seq);
                    }
                }
                task_by_id(db, task.id)?
            }
            (_, Some(task)) => task,
            (_, None) => unreachable!("only a create has no task yet"),
        };
        out.push(AppliedStep {
            step: planned.step.clone(),
            action,
            changed,
            spec: task.spec.clone().unwrap_or_default(),
            task: Some(task),
        });
    }
    out.extend(not_in_file(db, left_out)?);
    let plan = plan_by_name(db, plan)?.map(|(_, v)| v);
    Ok((AppliedPipeline { plan, steps: out }, last_seq))
}

impl Store {
    /// Applies a pipeline's steps to `plan` (created if missing) in one
    /// transaction; with `dry_run`, only says what it would do.
    pub async fn apply_pipeline(
        &self,
        plan: &str,
        title: &str,
        steps: &[PlannedStep],
        dry_run: bool,
        ctx: &WriteContext,
    ) -> Result<Once<AppliedPipeline>, Error> {
        if dry_run {
            return self
                .read(|db| apply(db, plan, title, steps, true, ctx).map(|(a, _)| a))
                .await
                .map(Once::Fresh);
        }
        self.write_once(ctx, |db| apply(db, plan, title, steps, false, ctx))
            .await
    }

    /// The tasks of `plan` made by a pipeline file: step name, task, and the
    /// paths it claims.
    pub async fn pipeline_tasks(
        &self,
        plan: &str,
    ) -> Result<Vec<(String, TaskView, Vec<String>)>, Error> {
        self.read(|db| {
            let Some((plan_id, _)) = plan_by_name(db, plan)? else {
                return Ok(Vec::new());
            };
            let mut out = Vec::new();
            for (step, id) in step_tasks(db, plan_id)? {
                let task = task_by_id(db, id)?;
                let claims = db.query(
                    "SELECT path FROM phase_outputs WHERE task_id = ? ORDER BY path",
                    &[id.0.into()],
                    |row| Ok(row.text(0)?.to_string()),
                )?;
                out.push((step, task, claims));
            }
            Ok(out)
        })
        .await
    }
}
