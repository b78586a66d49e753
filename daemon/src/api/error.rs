//! The one mapping from store and domain errors to gRPC statuses. Database and
//! internal failures are logged in full and reach clients only as a generic
//! INTERNAL message: no SQL, no paths.
use tonic::{Code, Status};

use crate::domain::Error as Rule;
use crate::store::Error;

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        match error {
            Error::Rule(rule) => rule.into(),
            Error::Database(sqlx::Error::PoolTimedOut) => {
                tracing::warn!("database pool timed out");
                Status::unavailable("the daemon is overloaded; retry shortly")
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
            | Rule::Archived { .. } => Code::FailedPrecondition,
            Rule::StaleRevision { .. } => Code::Aborted,
        };
        Status::new(code, rule.to_string())
    }
}
