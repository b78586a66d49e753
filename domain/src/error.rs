//! Why the rules refused something. Each variant maps to one gRPC code at the edge.
use super::model::{Status, TaskId};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The request itself is malformed; `field` names where.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },

    /// The operator has not allowed what the request asks (a program for
    /// the daemon to start); `field` names where it asks it.
    #[error("{field}: {reason}")]
    NotAllowed { field: String, reason: String },

    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },

    #[error("{what} {id} already exists")]
    AlreadyExists { what: &'static str, id: String },

    /// A transition the state machine does not allow at all.
    #[error("{task}: cannot move from {from} to {to}: {why}")]
    IllegalTransition {
        task: TaskId,
        from: Status,
        to: Status,
        why: &'static str,
    },

    /// The move is legal in general but dependencies are not completed yet.
    #[error("{task}: cannot move from {from} to {to}: blocked by {}", list(.blockers))]
    Blocked {
        task: TaskId,
        from: Status,
        to: Status,
        blockers: Vec<(TaskId, Status)>,
    },

    /// Reopening would leave started dependents with an unfinished dependency.
    #[error("{task}: cannot move from {from} to {to}: dependents have started: {}", list(.dependents))]
    DependentsStarted {
        task: TaskId,
        from: Status,
        to: Status,
        dependents: Vec<(TaskId, Status)>,
    },

    /// A started task may only depend on completed work.
    #[error("{task} is {status}, so it cannot depend on {depends_on}, which is {dep_status}")]
    StartedOnUnfinished {
        task: TaskId,
        status: Status,
        depends_on: TaskId,
        dep_status: Status,
    },

    #[error("dependency {task} -> {depends_on} would close a cycle: {}", path(.cycle))]
    Cycle {
        task: TaskId,
        depends_on: TaskId,
        cycle: Vec<TaskId>,
    },

    /// A list left out a task that a phase task still depends on.
    #[error(
        "{task} is left out of the list, but phase task {dependent} depends on it; \
             list it, or remove the dependency first"
    )]
    KeptByDependent { task: TaskId, dependent: TaskId },

    /// A client tried to complete or fail a phase task: those outcomes come
    /// only from its run.
    #[error(
        "{task} is a {kind} task: only its run marks it {to}; \
         pause it (pending), cancel it, or retry it instead"
    )]
    PhaseOutcome {
        task: TaskId,
        kind: super::model::Kind,
        to: Status,
    },

    /// A todo list tried to change what belongs to a phase task's run.
    #[error(
        "todos[{index}]: {task} is a {kind} task; a todo list may not change {what} \
         (leave the item as read, or use TransitionTask / UpdateTask)"
    )]
    PhaseTaskInList {
        index: usize,
        task: TaskId,
        kind: super::model::Kind,
        what: String,
    },

    /// A path is already claimed by another task, or a file is in the way.
    #[error("{field}: {path} {why}")]
    PathTaken {
        field: String,
        path: String,
        why: String,
    },

    /// The spec of a phase task that has run cannot change what it writes.
    #[error("{task}: {why}")]
    SpecLocked { task: TaskId, why: String },

    /// The spec changed between reading it and updating it.
    #[error("the spec of {task} changed meanwhile; read it again and retry")]
    SpecMoved { task: TaskId },

    /// Archived tasks keep their history but take no changes until restored.
    #[error("{task} is archived; list it again in WriteTodos to restore it")]
    Archived { task: TaskId },

    /// An archived plan takes no changes until it is restored.
    #[error(
        "plan {plan} is archived; restore it (RestorePlan, todoctl plan restore) to change it"
    )]
    PlanArchived { plan: String },

    /// A plan with work running cannot be put away.
    #[error("plan {plan} has tasks in progress ({}); let them end, or cancel them, first", ids(.tasks))]
    PlanBusy { plan: String, tasks: Vec<TaskId> },

    /// Optimistic concurrency: the write was based on an older revision.
    #[error("plan {plan} is at revision {actual}, not {expected}: re-read and retry")]
    StaleRevision {
        plan: String,
        expected: i64,
        actual: i64,
    },
}

impl Error {
    /// The same error with the field renamed by `rename` (a check written
    /// for one request, reused by another that calls the field otherwise).
    pub fn with_field(self, rename: impl FnOnce(&str) -> String) -> Error {
        match self {
            Error::Invalid { field, reason } => Error::Invalid {
                field: rename(&field),
                reason,
            },
            Error::PathTaken { field, path, why } => Error::PathTaken {
                field: rename(&field),
                path,
                why,
            },
            Error::NotAllowed { field, reason } => Error::NotAllowed {
                field: rename(&field),
                reason,
            },
            other => other,
        }
    }

    /// The same error with field `from` called `to`.
    pub fn renamed(self, from: &str, to: &str) -> Error {
        self.with_field(|field| {
            if field == from {
                to.to_string()
            } else {
                field.to_string()
            }
        })
    }

    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub fn task_not_found(id: TaskId) -> Error {
        Error::NotFound {
            what: "task",
            id: id.to_string(),
        }
    }

    pub fn plan_not_found(name: &str) -> Error {
        Error::NotFound {
            what: "plan",
            id: name.to_string(),
        }
    }
}

fn list(items: &[(TaskId, Status)]) -> String {
    items
        .iter()
        .map(|(id, status)| format!("{id} ({status})"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn path(ids: &[TaskId]) -> String {
    ids.iter()
        .map(|id| id.to_string())
        .collect::<Vec<_>>()
        .join(" -> ")
}

fn ids(tasks: &[TaskId]) -> String {
    tasks
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
