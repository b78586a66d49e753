//! An in-memory view of (part of) one plan's dependency graph, and the rules that
//! keep it a DAG whose started tasks stand only on completed work.
//!
//! The store loads as much of a plan as a check needs (a task and its neighbours,
//! the ancestors of an edge's target, or the whole plan for a list write), applies
//! the change here, and persists the result only if every rule holds.
use std::collections::{BTreeMap, BTreeSet};

use super::model::{Readiness, Status, TaskId};
use super::transition;
use super::Error;

#[derive(Debug, Clone, Default)]
struct Node {
    status: Option<Status>,
    deps: BTreeSet<TaskId>,
    dependents: BTreeSet<TaskId>,
}

#[derive(Debug, Clone, Default)]
pub struct Graph {
    nodes: BTreeMap<TaskId, Node>,
}

/// Readiness of a task given its status and the statuses of its dependencies.
/// Returns `None` for tasks that are not pending, else the readiness and the
/// dependencies that are not completed (the blockers).
pub fn readiness(
    status: Status,
    dependencies: impl IntoIterator<Item = (TaskId, Status)>,
) -> Option<(Readiness, Vec<TaskId>)> {
    if status != Status::Pending {
        return None;
    }
    let mut blockers = Vec::new();
    let mut failed = false;
    for (id, dep_status) in dependencies {
        if dep_status != Status::Completed {
            blockers.push(id);
            failed |= matches!(dep_status, Status::Failed | Status::Cancelled);
        }
    }
    let readiness = match (blockers.is_empty(), failed) {
        (true, _) => Readiness::Ready,
        (false, true) => Readiness::BlockedByFailure,
        (false, false) => Readiness::Blocked,
    };
    Some((readiness, blockers))
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    pub fn contains(&self, id: TaskId) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.status.is_some())
    }

    pub fn len(&self) -> usize {
        self.nodes.values().filter(|n| n.status.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.nodes
            .iter()
            .filter(|(_, n)| n.status.is_some())
            .map(|(id, _)| *id)
    }

    /// Adds or replaces a task's status (its edges are kept).
    pub fn insert(&mut self, id: TaskId, status: Status) {
        self.nodes.entry(id).or_default().status = Some(status);
    }

    /// Removes a task and every edge touching it; returns the removed edges as
    /// `(task, depends_on)` pairs.
    pub fn remove(&mut self, id: TaskId) -> Vec<(TaskId, TaskId)> {
        let mut removed = Vec::new();
        if let Some(node) = self.nodes.remove(&id) {
            for dep in node.deps {
                if let Some(n) = self.nodes.get_mut(&dep) {
                    n.dependents.remove(&id);
                }
                removed.push((id, dep));
            }
            for dependent in node.dependents {
                if let Some(n) = self.nodes.get_mut(&dependent) {
                    n.deps.remove(&id);
                }
                removed.push((dependent, id));
            }
        }
        removed
    }

    pub fn status(&self, id: TaskId) -> Option<Status> {
        self.nodes.get(&id).and_then(|n| n.status)
    }

    pub fn dependencies(&self, id: TaskId) -> impl Iterator<Item = TaskId> + '_ {
        self.nodes
            .get(&id)
            .into_iter()
            .flat_map(|n| n.deps.iter().copied())
    }

    pub fn dependents(&self, id: TaskId) -> impl Iterator<Item = TaskId> + '_ {
        self.nodes
            .get(&id)
            .into_iter()
            .flat_map(|n| n.dependents.iter().copied())
    }

    /// Records an edge that was already checked (or loaded from the store).
    pub fn insert_edge(&mut self, task: TaskId, depends_on: TaskId) {
        self.nodes.entry(task).or_default().deps.insert(depends_on);
        self.nodes
            .entry(depends_on)
            .or_default()
            .dependents
            .insert(task);
    }

    /// Removes an edge; returns whether it existed.
    pub fn remove_edge(&mut self, task: TaskId, depends_on: TaskId) -> bool {
        let existed = self
            .nodes
            .get_mut(&task)
            .is_some_and(|n| n.deps.remove(&depends_on));
        if let Some(n) = self.nodes.get_mut(&depends_on) {
            n.dependents.remove(&task);
        }
        existed
    }

    pub fn readiness(&self, id: TaskId) -> Option<(Readiness, Vec<TaskId>)> {
        let status = self.status(id)?;
        readiness(status, self.dependency_statuses(id))
    }

    fn dependency_statuses(&self, id: TaskId) -> impl Iterator<Item = (TaskId, Status)> + '_ {
        self.dependencies(id)
            .map(|d| (d, self.status(d).unwrap_or(Status::Pending)))
    }

    fn incomplete_dependencies(&self, id: TaskId) -> Vec<(TaskId, Status)> {
        self.dependency_statuses(id)
            .filter(|(_, s)| *s != Status::Completed)
            .collect()
    }

    /// Refuses `from -> to` for `id` while a dependent has started: it would
    /// then stand on work that is no longer completed.
    pub fn check_no_started_dependents(
        &self,
        id: TaskId,
        from: Status,
        to: Status,
    ) -> Result<(), Error> {
        let dependents = self.started_dependents(id);
        if dependents.is_empty() {
            Ok(())
        } else {
            Err(Error::DependentsStarted {
                task: id,
                from,
                to,
                dependents,
            })
        }
    }

    /// Dependents that are in_progress or completed.
    fn started_dependents(&self, id: TaskId) -> Vec<(TaskId, Status)> {
        self.dependents(id)
            .filter_map(|d| self.status(d).map(|s| (d, s)))
            .filter(|(_, s)| s.is_started())
            .collect()
    }

    /// Checks that `id` may move to `to` in the graph as it stands.
    pub fn check_transition(&self, id: TaskId, to: Status) -> Result<(), Error> {
        let from = self.status(id).ok_or_else(|| Error::task_not_found(id))?;
        let req = transition::rule(from, to).map_err(|why| Error::IllegalTransition {
            task: id,
            from,
            to,
            why,
        })?;
        if req.dependencies_completed {
            let blockers = self.incomplete_dependencies(id);
            if !blockers.is_empty() {
                return Err(Error::Blocked {
                    task: id,
                    from,
                    to,
                    blockers,
                });
            }
        }
        if req.no_started_dependents {
            self.check_no_started_dependents(id, from, to)?;
        }
        Ok(())
    }

    /// Checks and applies a transition; returns the previous status.
    pub fn transition(&mut self, id: TaskId, to: Status) -> Result<Status, Error> {
        self.check_transition(id, to)?;
        let from = self.status(id).expect("checked above");
        self.insert(id, to);
        Ok(from)
    }

    /// Checks that `task` may come to depend on `depends_on`. Both must be in the
    /// graph, and the graph must hold every ancestor of `depends_on`.
    pub fn check_edge(&self, task: TaskId, depends_on: TaskId) -> Result<(), Error> {
        if task == depends_on {
            return Err(Error::invalid(
                "depends_on",
                format!("{task} cannot depend on itself"),
            ));
        }
        if !self.contains(task) {
            return Err(Error::task_not_found(task));
        }
        let dep_status = self
            .status(depends_on)
            .ok_or_else(|| Error::task_not_found(depends_on))?;
        if let Some(path) = self.path(depends_on, task) {
            let mut cycle = vec![task];
            cycle.extend(path);
            return Err(Error::Cycle {
                task,
                depends_on,
                cycle,
            });
        }
        let status = self.status(task).expect("checked above");
        if status.is_started() && dep_status != Status::Completed {
            return Err(Error::StartedOnUnfinished {
                task,
                status,
                depends_on,
                dep_status,
            });
        }
        Ok(())
    }

    pub fn add_edge(&mut self, task: TaskId, depends_on: TaskId) -> Result<bool, Error> {
        self.check_edge(task, depends_on)?;
        let is_new = !self.dependencies(task).any(|d| d == depends_on);
        self.insert_edge(task, depends_on);
        Ok(is_new)
    }

    /// A dependency path from `from` to `to` (both included), if any.
    fn path(&self, from: TaskId, to: TaskId) -> Option<Vec<TaskId>> {
        let mut parent: BTreeMap<TaskId, TaskId> = BTreeMap::new();
        let mut stack = vec![from];
        let mut seen = BTreeSet::from([from]);
        while let Some(at) = stack.pop() {
            if at == to {
                let mut path = vec![to];
                let mut cur = to;
                while let Some(&p) = parent.get(&cur) {
                    path.push(p);
                    cur = p;
                }
                path.reverse();
                return Some(path);
            }
            for next in self.dependencies(at) {
                if seen.insert(next) {
                    parent.insert(next, at);
                    stack.push(next);
                }
            }
        }
        None
    }

    /// Some cycle of the graph, if it has one (each node's first edge found).
    pub fn find_cycle(&self) -> Option<Vec<TaskId>> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            Open,
            Done,
        }
        let mut marks: BTreeMap<TaskId, Mark> = BTreeMap::new();
        for &root in self.nodes.keys() {
            if marks.contains_key(&root) {
                continue;
            }
            // Iterative DFS; `trail` is the current path.
            let mut trail: Vec<(TaskId, Vec<TaskId>)> =
                vec![(root, self.dependencies(root).collect())];
            marks.insert(root, Mark::Open);
            while let Some((node, pending)) = trail.last_mut() {
                let node = *node;
                match pending.pop() {
                    Some(next) => match marks.get(&next) {
                        Some(Mark::Open) => {
                            let start = trail.iter().position(|(n, _)| *n == next)?;
                            let mut cycle: Vec<TaskId> =
                                trail[start..].iter().map(|(n, _)| *n).collect();
                            cycle.push(next);
                            return Some(cycle);
                        }
                        Some(Mark::Done) => {}
                        None => {
                            marks.insert(next, Mark::Open);
                            trail.push((next, self.dependencies(next).collect()));
                        }
                    },
                    None => {
                        marks.insert(node, Mark::Done);
                        trail.pop();
                    }
                }
            }
        }
        None
    }

    /// Started tasks with a dependency that is not completed. Empty in any graph
    /// that the store has accepted.
    pub fn violations(&self) -> Vec<(TaskId, Vec<(TaskId, Status)>)> {
        self.ids()
            .filter(|&id| self.status(id).is_some_and(Status::is_started))
            .map(|id| (id, self.incomplete_dependencies(id)))
            .filter(|(_, blockers)| !blockers.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    fn t(n: i64) -> TaskId {
        TaskId(n)
    }

    fn chain() -> Graph {
        // t3 depends on t2 depends on t1
        let mut g = Graph::new();
        for n in 1..=3 {
            g.insert(t(n), Pending);
        }
        g.add_edge(t(2), t(1)).unwrap();
        g.add_edge(t(3), t(2)).unwrap();
        g
    }

    #[test]
    fn cycles_self_edges_and_missing_tasks_are_refused() {
        let mut g = chain();
        match g.add_edge(t(1), t(3)) {
            Err(Error::Cycle { cycle, .. }) => assert_eq!(cycle, vec![t(1), t(3), t(2), t(1)]),
            other => panic!("{other:?}"),
        }
        assert!(matches!(g.add_edge(t(2), t(2)), Err(Error::Invalid { .. })));
        assert!(matches!(
            g.add_edge(t(2), t(9)),
            Err(Error::NotFound { .. })
        ));
        assert!(g.find_cycle().is_none());
        g.insert_edge(t(1), t(3));
        assert!(g.find_cycle().is_some());
    }

    #[test]
    fn starting_requires_completed_dependencies_and_names_blockers() {
        let mut g = chain();
        let err = g.transition(t(2), InProgress).unwrap_err();
        assert!(err.to_string().contains("blocked by t1 (pending)"), "{err}");
        g.transition(t(1), Completed).unwrap();
        g.transition(t(2), InProgress).unwrap();
        assert_eq!(g.readiness(t(3)), Some((Readiness::Blocked, vec![t(2)])));
        g.transition(t(2), Failed).unwrap();
        assert_eq!(
            g.readiness(t(3)),
            Some((Readiness::BlockedByFailure, vec![t(2)]))
        );
        assert!(g.violations().is_empty());
    }

    #[test]
    fn reopen_is_refused_while_a_dependent_has_started() {
        let mut g = chain();
        g.transition(t(1), Completed).unwrap();
        g.transition(t(2), InProgress).unwrap();
        let err = g.transition(t(1), Pending).unwrap_err();
        assert!(matches!(err, Error::DependentsStarted { .. }), "{err}");
        g.transition(t(2), Pending).unwrap();
        g.transition(t(1), Pending).unwrap();
    }

    #[test]
    fn a_started_task_cannot_gain_an_unfinished_dependency() {
        let mut g = chain();
        g.insert(t(4), Pending);
        g.transition(t(1), Completed).unwrap();
        g.transition(t(2), InProgress).unwrap();
        assert!(matches!(
            g.add_edge(t(2), t(4)),
            Err(Error::StartedOnUnfinished { .. })
        ));
    }

    #[test]
    fn removing_a_task_drops_its_edges() {
        let mut g = chain();
        let removed = g.remove(t(2));
        assert_eq!(removed, vec![(t(2), t(1)), (t(3), t(2))]);
        assert_eq!(g.readiness(t(3)), Some((Readiness::Ready, vec![])));
    }
}
