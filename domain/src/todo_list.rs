//! Reconciles an agent's full todo list with the stored plan (`WriteTodos`).
//!
//! Items are matched to tasks by id, else by identical content, else created.
//! Plain tasks missing from the list are archived; phase tasks are never touched
//! by a list. The whole list is checked against the final graph, so an agent may
//! complete a task and start its dependent in the same write.
use std::collections::{BTreeMap, BTreeSet};

use super::annotations::{self, Patch};
use super::change::Change;
use super::graph::Graph;
use super::model::{Kind, Priority, Status, TaskId};
use super::{transition, Error};

/// A task of the plan as stored, with what a list write may change.
#[derive(Debug, Clone)]
pub struct StoredTask {
    pub id: TaskId,
    pub content: String,
    pub status: Status,
    pub priority: Priority,
    pub kind: Kind,
    pub position: i64,
    pub depends_on: Vec<TaskId>,
    pub archived: bool,
    /// The clients' JSON object (`annotations`).
    pub metadata: Option<String>,
}

/// One validated item of the agent's list.
#[derive(Debug, Clone)]
pub struct TodoItem {
    pub id: Option<TaskId>,
    /// Already trimmed and validated.
    pub content: String,
    pub status: Option<Status>,
    pub priority: Option<Priority>,
    /// `None` leaves the dependencies as they are.
    pub depends_on: Option<Vec<TaskId>>,
    /// Merged into the task's metadata; `None` leaves it as it is.
    pub metadata: Option<Patch>,
}

/// The changes a list write makes, in the order they must be applied.
#[derive(Debug, Default)]
pub struct ListWrite {
    pub changes: Vec<Change>,
    /// For each item, the task it resolved to (provisional ids for new tasks).
    pub resolved: Vec<TaskId>,
}

/// Decides what writing `items` over `stored` (the plan's live tasks plus any
/// archived ones the items name by id) changes, or why it must be refused.
pub fn reconcile(stored: &[StoredTask], items: &[TodoItem]) -> Result<ListWrite, Error> {
    let by_id: BTreeMap<TaskId, &StoredTask> = stored.iter().map(|t| (t.id, t)).collect();
    let mut graph = Graph::new();
    for task in stored.iter().filter(|t| !t.archived) {
        graph.insert(task.id, task.status);
    }
    for task in stored.iter().filter(|t| !t.archived) {
        for &dep in &task.depends_on {
            graph.insert_edge(task.id, dep);
        }
    }

    let resolved = resolve(stored, &by_id, items)?;
    let positions = positions(stored, &by_id, &resolved);
    let mut out = ListWrite::default();
    let mut next_provisional = -1;
    // Status moves the list asks for: (task, from, to).
    let mut targets: Vec<(TaskId, Status, Status)> = Vec::new();

    for (index, (item, slot)) in items.iter().zip(&resolved).enumerate() {
        let position = positions[index];
        let id = match slot {
            None => {
                let id = TaskId(next_provisional);
                next_provisional -= 1;
                out.changes.push(Change::Created {
                    id,
                    content: item.content.clone(),
                    priority: item.priority.unwrap_or(Priority::Medium),
                    kind: Kind::TODO,
                    position,
                    spec: None,
                });
                graph.insert(id, Status::Pending);
                targets.push((id, Status::Pending, item.status.unwrap_or(Status::Pending)));
                if let Some(patch) = &item.metadata {
                    let field = format!("todos[{index}].metadata_patch_json");
                    out.changes
                        .extend(annotations::metadata_change(&field, id, None, patch)?);
                }
                id
            }
            Some(id) => {
                let task = by_id[id];
                if task.kind.is_phase() {
                    check_phase_item(index, task, item)?;
                }
                if task.archived {
                    out.changes.push(Change::Restored { id: *id });
                    graph.insert(*id, task.status);
                }
                if task.content != item.content {
                    out.changes.push(Change::ContentChanged {
                        id: *id,
                        old: task.content.clone(),
                        new: item.content.clone(),
                    });
                }
                if let Some(priority) = item.priority.filter(|p| *p != task.priority) {
                    out.changes.push(Change::PriorityChanged {
                        id: *id,
                        old: task.priority,
                        new: priority,
                    });
                }
                if task.position != position {
                    out.changes.push(Change::Moved {
                        id: *id,
                        from: task.position,
                        to: position,
                    });
                }
                if let Some(to) = item.status.filter(|s| *s != task.status) {
                    targets.push((*id, task.status, to));
                }
                if let Some(patch) = &item.metadata {
                    let field = format!("todos[{index}].metadata_patch_json");
                    let stored = task.metadata.as_deref();
                    out.changes
                        .extend(annotations::metadata_change(&field, *id, stored, patch)?);
                }
                *id
            }
        };
        out.resolved.push(id);
    }

    // Plain tasks the agent left out are archived, with their edges. A phase
    // task that depends on one would lose a dependency it was waiting for and
    // could start early, so that is refused.
    let listed: BTreeSet<TaskId> = out.resolved.iter().copied().collect();
    let kinds: BTreeMap<TaskId, Kind> = stored.iter().map(|t| (t.id, t.kind)).collect();
    for task in stored.iter().filter(|t| !t.archived && !t.kind.is_phase()) {
        if !listed.contains(&task.id) {
            if let Some(phase) = graph
                .dependents(task.id)
                .find(|d| kinds.get(d).is_some_and(|k| k.is_phase()))
            {
                return Err(Error::KeptByDependent {
                    task: task.id,
                    dependent: phase,
                });
            }
            for (id, depends_on) in graph.remove(task.id) {
                out.changes
                    .push(Change::DependencyRemoved { id, depends_on });
            }
            out.changes.push(Change::Archived { id: task.id });
        }
    }

    for (index, item) in items.iter().enumerate() {
        let Some(wanted) = &item.depends_on else {
            continue;
        };
        let id = out.resolved[index];
        let wanted: BTreeSet<TaskId> = wanted.iter().copied().collect();
        let current: BTreeSet<TaskId> = graph.dependencies(id).collect();
        for &dep in current.difference(&wanted) {
            graph.remove_edge(id, dep);
            out.changes.push(Change::DependencyRemoved {
                id,
                depends_on: dep,
            });
        }
        for &dep in wanted.difference(&current) {
            let field = format!("todos[{index}].depends_on");
            if dep == id {
                return Err(Error::invalid(
                    field,
                    format!("{} cannot depend on itself", item_name(index, id)),
                ));
            }
            if !graph.contains(dep) {
                return Err(match by_id.get(&dep) {
                    Some(_) => Error::invalid(
                        field,
                        format!("{dep} is archived by this write; list it to keep it"),
                    ),
                    None => Error::invalid(field, format!("{dep} is not a task of this plan")),
                });
            }
            graph.insert_edge(id, dep);
            out.changes.push(Change::DependencyAdded {
                id,
                depends_on: dep,
            });
        }
    }
    if let Some(cycle) = graph.find_cycle() {
        return Err(Error::Cycle {
            task: cycle[0],
            depends_on: cycle[1],
            cycle,
        });
    }

    // Statuses are checked against the final graph: first each move must be
    // legal at all, then every started task must stand on completed work.
    for &(id, from, to) in &targets {
        transition::rule(from, to).map_err(|why| Error::IllegalTransition {
            task: id,
            from,
            to,
            why,
        })?;
        graph.insert(id, to);
        if from != to {
            out.changes.push(Change::StatusChanged { id, from, to });
        }
    }
    for &(id, from, to) in &targets {
        if from == Status::Completed && to != Status::Completed {
            graph.check_no_started_dependents(id, from, to)?;
        }
    }
    let started_now: BTreeMap<TaskId, (Status, Status)> = targets
        .iter()
        .map(|&(id, from, to)| (id, (from, to)))
        .collect();
    if let Some((task, blockers)) = graph.violations().into_iter().next() {
        let status = graph.status(task).expect("violations come from the graph");
        return Err(match started_now.get(&task) {
            // The task was asked to start or complete.
            Some((from, to)) => Error::Blocked {
                task,
                from: *from,
                to: *to,
                blockers,
            },
            // It had started already and the list gave it a new dependency.
            None => Error::StartedOnUnfinished {
                task,
                status,
                depends_on: blockers[0].0,
                dep_status: blockers[0].1,
            },
        });
    }
    Ok(out)
}

/// A list may mention a phase task (it reads them back with the rest), but
/// its status and content belong to its run and its spec: a list that would
/// change them is refused.
fn check_phase_item(index: usize, task: &StoredTask, item: &TodoItem) -> Result<(), Error> {
    if let Some(to) = item.status.filter(|s| *s != task.status) {
        return Err(Error::PhaseTaskInList {
            index,
            task: task.id,
            kind: task.kind,
            what: format!("its status ({} -> {to})", task.status),
        });
    }
    if item.content != task.content {
        return Err(Error::PhaseTaskInList {
            index,
            task: task.id,
            kind: task.kind,
            what: "its content".into(),
        });
    }
    Ok(())
}

/// Where each item goes in the list. When the tasks the list names are
/// already in the list's order and every new item comes after them, they
/// keep their positions and new items go after everything else: writing back
/// the list just read changes nothing, even with tasks the list leaves out
/// (phase tasks) in between. Otherwise items are renumbered by their index.
fn positions(
    stored: &[StoredTask],
    by_id: &BTreeMap<TaskId, &StoredTask>,
    resolved: &[Option<TaskId>],
) -> Vec<i64> {
    let mut previous: Option<(i64, TaskId)> = None;
    let mut seen_new = false;
    let mut in_order = true;
    for slot in resolved {
        match slot {
            None => seen_new = true,
            Some(id) => {
                let key = (by_id[id].position, *id);
                if seen_new || previous.is_some_and(|p| p >= key) {
                    in_order = false;
                    break;
                }
                previous = Some(key);
            }
        }
    }
    if !in_order {
        return (0..resolved.len() as i64).collect();
    }
    let mut next = stored.iter().map(|t| t.position + 1).max().unwrap_or(0);
    resolved
        .iter()
        .map(|slot| match slot {
            Some(id) => by_id[id].position,
            None => {
                next += 1;
                next - 1
            }
        })
        .collect()
}

fn item_name(index: usize, id: TaskId) -> String {
    if id.is_provisional() {
        format!("new item {index}")
    } else {
        id.to_string()
    }
}

/// Matches each item to a stored task: by id, else by identical content among
/// live tasks not matched yet (first in list order), else `None` (new).
fn resolve(
    stored: &[StoredTask],
    by_id: &BTreeMap<TaskId, &StoredTask>,
    items: &[TodoItem],
) -> Result<Vec<Option<TaskId>>, Error> {
    let mut claimed: BTreeSet<TaskId> = BTreeSet::new();
    for (index, item) in items.iter().enumerate() {
        if let Some(id) = item.id {
            if !by_id.contains_key(&id) {
                return Err(Error::NotFound {
                    what: "task",
                    id: format!("{id} (todos[{index}].id)"),
                });
            }
            if !claimed.insert(id) {
                return Err(Error::invalid(
                    format!("todos[{index}].id"),
                    format!("{id} is listed more than once"),
                ));
            }
        }
    }
    let mut by_content: BTreeMap<&str, Vec<&StoredTask>> = BTreeMap::new();
    let mut live: Vec<&StoredTask> = stored.iter().filter(|t| !t.archived).collect();
    live.sort_by_key(|t| (t.position, t.id));
    for task in live {
        by_content
            .entry(task.content.as_str())
            .or_default()
            .push(task);
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let slot = match item.id {
            Some(id) => Some(id),
            None => by_content
                .get(item.content.as_str())
                .and_then(|candidates| candidates.iter().find(|t| !claimed.contains(&t.id)))
                .map(|t| t.id),
        };
        if let (None, Some(id)) = (item.id, slot) {
            claimed.insert(id);
        }
        out.push(slot);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    fn stored(id: i64, content: &str, status: Status, deps: &[i64]) -> StoredTask {
        StoredTask {
            id: TaskId(id),
            content: content.into(),
            status,
            priority: Priority::Medium,
            kind: Kind::TODO,
            position: id,
            depends_on: deps.iter().map(|&d| TaskId(d)).collect(),
            archived: false,
            metadata: None,
        }
    }

    fn item(id: Option<i64>, content: &str, status: Option<Status>) -> TodoItem {
        TodoItem {
            id: id.map(TaskId),
            content: content.into(),
            status,
            priority: None,
            depends_on: None,
            metadata: None,
        }
    }

    #[test]
    fn items_without_ids_match_by_content_and_missing_plain_tasks_are_archived() {
        let mut phase = stored(3, "generate", Pending, &[]);
        phase.kind = Kind::named("generation");
        let plan = vec![
            stored(1, "a", Pending, &[]),
            stored(2, "b", Pending, &[]),
            phase,
        ];
        let write = reconcile(
            &plan,
            &[item(None, "a", Some(InProgress)), item(None, "c", None)],
        )
        .unwrap();
        assert_eq!(write.resolved[0], TaskId(1));
        assert!(write.resolved[1].is_provisional());
        assert!(write.changes.contains(&Change::Archived { id: TaskId(2) }));
        assert!(!write.changes.contains(&Change::Archived { id: TaskId(3) }));
        assert!(write.changes.contains(&Change::StatusChanged {
            id: TaskId(1),
            from: Pending,
            to: InProgress
        }));
    }

    #[test]
    fn completing_a_dependency_and_starting_its_dependent_in_one_write_is_fine() {
        let plan = vec![
            stored(1, "a", InProgress, &[]),
            stored(2, "b", Pending, &[1]),
        ];
        reconcile(
            &plan,
            &[
                item(Some(1), "a", Some(Completed)),
                item(Some(2), "b", Some(InProgress)),
            ],
        )
        .unwrap();
        let err = reconcile(
            &plan,
            &[
                item(Some(1), "a", None),
                item(Some(2), "b", Some(InProgress)),
            ],
        )
        .unwrap_err();
        assert!(matches!(err, Error::Blocked { .. }), "{err}");
    }

    #[test]
    fn unknown_and_duplicate_ids_and_cycles_are_refused() {
        let plan = vec![stored(1, "a", Pending, &[]), stored(2, "b", Pending, &[1])];
        let err = reconcile(&plan, &[item(Some(9), "x", None)]).unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }));
        let err =
            reconcile(&plan, &[item(Some(1), "a", None), item(Some(1), "a", None)]).unwrap_err();
        assert!(err.to_string().contains("todos[1].id"), "{err}");
        let mut cyc = item(Some(1), "a", None);
        cyc.depends_on = Some(vec![TaskId(2)]);
        let err = reconcile(&plan, &[cyc, item(Some(2), "b", None)]).unwrap_err();
        assert!(matches!(err, Error::Cycle { .. }), "{err}");
        let mut selfdep = item(Some(1), "a", None);
        selfdep.depends_on = Some(vec![TaskId(1)]);
        let err = reconcile(&plan, &[selfdep]).unwrap_err();
        assert!(err.to_string().contains("todos[0].depends_on"), "{err}");
    }

    #[test]
    fn illegal_moves_name_the_item() {
        let plan = vec![stored(1, "a", Pending, &[])];
        let err = reconcile(&plan, &[item(Some(1), "a", Some(Failed))]).unwrap_err();
        assert!(matches!(err, Error::IllegalTransition { .. }), "{err}");
    }
}
