//! The one mapping from store and domain errors to gRPC statuses. Database and
//! internal failures are logged in full and reach clients only as a generic
//! INTERNAL message: no SQL, no paths.
use tonic::{Code, Status};

use crate::domain::Error as Rule;
use crate::store::{Error, Failure};

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        match error {
            Error::Rule(rule) => rule.into(),
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
}

impl From<Rule> for Status {
    fn from(rule: Rule) -> Status {
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
}
