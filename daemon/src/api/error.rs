//! The one mapping from store and domain errors to gRPC statuses. Database and
//! internal failures are logged in full and reach clients only as a generic
//! INTERNAL message: no SQL, no paths.
use tonic::{Code, Status};

use todod_domain::Error as Rule;
use todod_store::{Error, Failure};

/// What a client is told of an error from a layer below: the one mapping
/// to a status (a plain `From` would be an orphan impl here).
pub trait ToStatus {
    fn to_status(self) -> Status;
}

impl ToStatus for Error {
    fn to_status(self) -> Status {
        store_status(self)
    }
}

impl ToStatus for Rule {
    fn to_status(self) -> Status {
        rule_status(self)
    }
}

/// A store error as the status a client gets.
pub fn store_status(error: Error) -> Status {
    match error {
        Error::Rule(rule) => rule_status(rule),
        Error::Overloaded(_) | Error::Closed => {
            tracing::warn!(error = %error, "database unavailable");
            Status::unavailable("the daemon is overloaded or stopping; retry shortly")
        }
        _ if error.failure() == Some(Failure::Busy) => {
            tracing::warn!(error = %error, "database busy");
            Status::unavailable("the database is busy; retry shortly")
        }
        _ if error.failure() == Some(Failure::Full) => {
            tracing::error!(error = %error, "database full");
            Status::resource_exhausted(
                "the daemon's disk is full; nothing was changed. Free space and retry",
            )
        }
        _ if error.failure() == Some(Failure::Constraint) => {
            tracing::error!(error = %error, "constraint failed");
            Status::failed_precondition(
                "the database refused the change (a constraint failed); nothing was changed",
            )
        }
        Error::RequestIdReused { .. } => {
            Status::already_exists(format!("{error}; a new request needs a new request_id"))
        }
        Error::AnswerNotKept { .. } => Status::aborted(format!(
            "{error}, and its answer was too large to keep; read the state again"
        )),
        Error::Fenced { .. } => {
            Status::failed_precondition("the task moved on meanwhile; read it again")
        }
        other => {
            tracing::error!(error = %other, "internal error");
            Status::internal("internal error; see the daemon's log")
        }
    }
}

/// A refusal by the domain's rules as the status a client gets.
pub fn rule_status(rule: Rule) -> Status {
    let code = match &rule {
        Rule::Invalid { .. } => Code::InvalidArgument,
        Rule::NotFound { .. } => Code::NotFound,
        Rule::AlreadyExists { .. } => Code::AlreadyExists,
        Rule::IllegalTransition { .. }
        | Rule::Blocked { .. }
        | Rule::DependentsStarted { .. }
        | Rule::StartedOnUnfinished { .. }
        | Rule::KeptByDependent { .. }
        | Rule::Cycle { .. }
        | Rule::Archived { .. }
        | Rule::PhaseOutcome { .. }
        | Rule::PhaseTaskInList { .. }
        | Rule::SpecLocked { .. }
        | Rule::PlanArchived { .. }
        | Rule::PlanBusy { .. } => Code::FailedPrecondition,
        Rule::PathTaken { .. } => Code::AlreadyExists,
        Rule::StaleRevision { .. } | Rule::SpecMoved { .. } => Code::Aborted,
    };
    Status::new(code, rule.to_string())
}
