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

/// A store error as the status a client gets.
impl ToStatus for Error {
    fn to_status(self) -> Status {
        match self {
            Error::Rule(rule) => rule.to_status(),
            Error::Overloaded(_) | Error::Closed => {
                tracing::warn!(error = %self, "database unavailable");
                Status::unavailable("the daemon is overloaded or stopping; retry shortly")
            }
            _ if self.failure() == Some(Failure::Busy) => {
                tracing::warn!(error = %self, "database busy");
                Status::unavailable("the database is busy; retry shortly")
            }
            _ if self.failure() == Some(Failure::Full) => {
                tracing::error!(error = %self, "database full");
                Status::resource_exhausted(
                    "the daemon's disk is full; nothing was changed. Free space and retry",
                )
            }
            _ if self.failure() == Some(Failure::Constraint) => {
                tracing::error!(error = %self, "constraint failed");
                Status::failed_precondition(
                    "the database refused the change (a constraint failed); nothing was changed",
                )
            }
            Error::RequestIdReused { .. } => {
                Status::already_exists(format!("{self}; a new request needs a new request_id"))
            }
            Error::AnswerNotKept { .. } => Status::aborted(format!(
                "{self}, and its answer was too large to keep; read the state again"
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

/// A refusal by the domain's rules as the status a client gets.
impl ToStatus for Rule {
    fn to_status(self) -> Status {
        let code = match &self {
            Rule::Invalid { .. } => Code::InvalidArgument,
            Rule::NotAllowed { .. } => Code::PermissionDenied,
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
        Status::new(code, self.to_string())
    }
}
