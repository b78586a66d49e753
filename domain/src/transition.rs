//! The status state machine: which moves are legal, and what each one requires of
//! the graph around the task. The table is the single source of truth; the .proto
//! and README repeat it for clients.
//!
//! | from \ to   | pending        | in_progress      | completed | cancelled | failed |
//! |-------------|----------------|------------------|-----------|-----------|--------|
//! | pending     | -              | deps             | deps      | yes       | no     |
//! | in_progress | yes (pause)    | -                | deps      | yes       | yes    |
//! | completed   | reopen: dependents | reopen: deps, dependents | - | no   | no     |
//! | cancelled   | yes (restore)  | deps             | deps      | -         | no     |
//! | failed      | yes (retry)    | deps (retry)     | no        | yes       | -      |
//!
//! `deps`: every dependency must be completed. `dependents`: no dependent may be
//! in_progress or completed, since a started task must only ever stand on
//! completed work.
use super::model::{Kind, Status, TaskId};
use super::Error;

/// What the graph must satisfy for a legal move to go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Requirements {
    pub dependencies_completed: bool,
    pub no_started_dependents: bool,
}

/// Returns the requirements of `from -> to`, or why the move is never legal.
pub fn rule(from: Status, to: Status) -> Result<Requirements, &'static str> {
    use Status::*;
    let deps = Requirements {
        dependencies_completed: true,
        no_started_dependents: false,
    };
    let free = Requirements::default();
    match (from, to) {
        (a, b) if a == b => Ok(free),
        (Pending, InProgress | Completed) => Ok(deps),
        (Pending, Cancelled) => Ok(free),
        (Pending, Failed) => Err("only a task in progress can fail"),
        (InProgress, Completed) => Ok(deps),
        (InProgress, Pending | Failed | Cancelled) => Ok(free),
        (Completed, Pending) => Ok(Requirements {
            dependencies_completed: false,
            no_started_dependents: true,
        }),
        (Completed, InProgress) => Ok(Requirements {
            dependencies_completed: true,
            no_started_dependents: true,
        }),
        (Completed, Cancelled) => Err("completed work cannot be cancelled; reopen it first"),
        (Completed, Failed) => Err("completed work cannot fail; reopen it first"),
        (Cancelled, Pending) => Ok(free),
        (Cancelled, InProgress | Completed) => Ok(deps),
        (Cancelled, Failed) => Err("only a task in progress can fail"),
        (Failed, Pending | Cancelled) => Ok(free),
        (Failed, InProgress) => Ok(deps),
        (Failed, Completed) => Err("a failed task must be retried before it can complete"),
        // The guard arm above covers equal pairs; the compiler cannot see it.
        (Pending, Pending)
        | (InProgress, InProgress)
        | (Completed, Completed)
        | (Cancelled, Cancelled)
        | (Failed, Failed) => Ok(free),
    }
}

/// What a client (an agent, a person) may do to a task beyond the table: a
/// phase task's completion or failure is its run's to record, so that no
/// client can make it claim work it did not do. Pausing, cancelling,
/// retrying, reopening and starting stay open to clients.
pub fn check_client_move(task: TaskId, kind: Kind, from: Status, to: Status) -> Result<(), Error> {
    if kind.is_phase() && from != to && matches!(to, Status::Completed | Status::Failed) {
        return Err(Error::PhaseOutcome { task, kind, to });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    #[test]
    fn table_matches_the_documented_rules() {
        assert!(rule(Pending, Failed).is_err());
        assert!(rule(Completed, Cancelled).is_err());
        assert!(rule(Failed, Completed).is_err());
        assert!(rule(Pending, InProgress).unwrap().dependencies_completed);
        assert!(rule(Completed, Pending).unwrap().no_started_dependents);
        assert!(!rule(Completed, Pending).unwrap().dependencies_completed);
        assert_eq!(rule(Failed, Pending).unwrap(), Requirements::default());
        for &s in Status::ALL {
            assert_eq!(rule(s, s).unwrap(), Requirements::default());
        }
    }

    #[test]
    fn clients_do_not_decide_a_phase_outcome() {
        let t = TaskId(1);
        for to in [Completed, Failed] {
            assert!(check_client_move(t, Kind::named("generation"), InProgress, to).is_err());
            assert!(check_client_move(t, Kind::named("tokenization"), Pending, to).is_err());
            assert!(check_client_move(t, Kind::TODO, InProgress, to).is_ok());
        }
        for to in [Pending, Cancelled, InProgress] {
            assert!(check_client_move(t, Kind::named("generation"), InProgress, to).is_ok());
        }
        assert!(check_client_move(t, Kind::named("generation"), Completed, Completed).is_ok());
    }

    #[test]
    fn every_move_into_a_started_status_requires_completed_dependencies() {
        for &from in Status::ALL {
            for &to in [InProgress, Completed].iter() {
                if from == to {
                    continue;
                }
                if let Ok(req) = rule(from, to) {
                    assert!(
                        req.dependencies_completed || from == InProgress,
                        "{from} -> {to}"
                    );
                }
            }
        }
    }
}
