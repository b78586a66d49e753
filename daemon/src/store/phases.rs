//! What the phase runtime asks of the store: which phase tasks to run, fenced
//! attempts, progress, and the final outcome. Progress and leases are recorded
//! as events but do not bump the plan's revision: they are the daemon's own
//! bookkeeping, and an agent's expected_revision must not go stale every second
//! while a generation runs.
use super::checkpoints::{check_fence, record, save_progress, save_state, DAEMON_ACTOR};
use super::persist;
use super::sql::{Db, Param};
use super::{now_ms, Error, Store, TaskView, WriteContext};
use crate::domain::{self, Change, Kind, Status, TaskId};

/// A phase task the runtime may have to act on.
#[derive(Debug, Clone)]
pub struct PhaseTask {
    pub id: TaskId,
    pub kind: Kind,
    pub status: Status,
    pub spec: String,
    /// The attempt that holds it, if any.
    pub lease_owner: Option<String>,
    /// Pending with every dependency completed.
    pub ready: bool,
    /// Paused by a client: auto-start leaves it alone until it is started.
    pub held: bool,
}

/// The daemon run an attempt token belongs to (`RUN.N`).
fn run_of(attempt: &str) -> &str {
    attempt.rsplit_once('.').map_or(attempt, |(run, _)| run)
}

fn take_lease(db: &mut Db, id: TaskId, attempt: &str) -> Result<(bool, Option<i64>), Error> {
    let previous = db.query_row(
        "SELECT lease_owner FROM tasks WHERE id = ? AND status = 'in_progress'",
        &[id.0.into()],
        |row| Ok(row.opt_text(0)?.map(str::to_string)),
    )?;
    let Some(previous) = previous else {
        return Ok((false, None));
    };
    db.execute(
        "UPDATE tasks SET lease_owner = ? WHERE id = ?",
        &[attempt.into(), id.0.into()],
    )?;
    let seq = match previous {
        Some(previous) if run_of(&previous) != run_of(attempt) => {
            let reason = "the daemon restarted; the run goes on from its last checkpoint";
            Some(record(db, id, "resumed", Some(attempt), reason)?)
        }
        _ => None,
    };
    Ok((true, seq))
}

/// Live phase tasks that are in progress or pending. The runtime asks after
/// every commit, so this walks the partial index `tasks_runnable_phases`
/// (phase tasks are few), never every task: its WHERE terms are the index's.
const RUNNABLE_PHASE_TASKS: &str = "SELECT t.id, t.kind, t.status, COALESCE(t.spec, '{}'), \
     t.lease_owner, NOT EXISTS (SELECT 1 FROM dependencies d JOIN tasks u \
     ON u.id = d.depends_on WHERE d.task_id = t.id AND u.status <> 'completed'), t.held \
     FROM tasks t JOIN plans p ON p.id = t.plan_id \
     WHERE t.kind <> 'todo' AND t.archived_at IS NULL AND t.status IN ('in_progress', 'pending') \
     AND p.archived_at IS NULL ORDER BY t.id";

impl Store {
    /// Live phase tasks that are in progress, or pending and ready.
    pub async fn runnable_phase_tasks(&self) -> Result<Vec<PhaseTask>, Error> {
        self.read(|db| {
            db.query(RUNNABLE_PHASE_TASKS, &[], |row| {
                let status: Status = row.parsed(2, "status")?;
                Ok(PhaseTask {
                    id: TaskId(row.int(0)?),
                    kind: row.parsed(1, "kind")?,
                    status,
                    spec: row.text(3)?.to_string(),
                    lease_owner: row.opt_text(4)?.map(str::to_string),
                    ready: status == Status::Pending && row.int(5)? != 0,
                    held: row.int(6)? != 0,
                })
            })
        })
        .await
    }

    /// Gives an in-progress task to `attempt`, whoever held it before (the
    /// runtime calls this only once the previous attempt has ended). Records
    /// `resumed` when the previous holder was another daemon run. Returns
    /// false if the task is no longer in progress.
    pub async fn take_lease(&self, id: TaskId, attempt: &str) -> Result<bool, Error> {
        self.write(|db| take_lease(db, id, attempt)).await
    }

    /// Moves a ready pending phase task to in_progress for `attempt`, in one
    /// transaction.
    pub async fn start_phase(&self, id: TaskId, attempt: &str) -> Result<TaskView, Error> {
        let ctx = WriteContext {
            actor: DAEMON_ACTOR.into(),
            reason: "ready: started by the daemon".into(),
            expected_revision: None,
            request: None,
        };
        self.write(|db| {
            let (task, seq) = super::write::transition(db, id, Status::InProgress, &ctx)?;
            let (_, resumed) = take_lease(db, id, attempt)?;
            Ok((task, resumed.or(seq)))
        })
        .await
    }

    /// Persists a run's progress (a JSON object) and streams it as an event.
    pub async fn report_progress(
        &self,
        id: TaskId,
        attempt: &str,
        progress: &str,
    ) -> Result<(), Error> {
        self.write(|db| {
            check_fence(db, id, attempt)?;
            Ok(((), Some(save_progress(db, id, progress)?)))
        })
        .await
    }

    /// Ends the run of `attempt`: completed, or failed with an error; a
    /// `result`, when given, is stored and recorded either way (a refusal
    /// keeps the figures it rests on); `state`, when given, replaces the
    /// checkpoint in the same transaction. Refused with [`Error::Fenced`] if the task moved on
    /// meanwhile (cancelled, paused) or another attempt holds it.
    pub async fn finish_phase(
        &self,
        id: TaskId,
        attempt: &str,
        outcome: Result<(), String>,
        result: Option<&str>,
        state: Option<&str>,
    ) -> Result<(), Error> {
        let ctx = WriteContext {
            actor: DAEMON_ACTOR.into(),
            reason: match &outcome {
                Ok(_) => "finished".into(),
                Err(error) => domain::model::clip(error),
            },
            expected_revision: None,
            request: None,
        };
        self.write(|db| {
            check_fence(db, id, attempt)?;
            let (plan_id, revision) = db
                .query_row(
                    "SELECT t.plan_id, p.revision FROM tasks t JOIN plans p ON p.id = t.plan_id \
                     WHERE t.id = ?",
                    &[id.0.into()],
                    |row| Ok((row.int(0)?, row.int(1)?)),
                )?
                .ok_or_else(|| domain::Error::task_not_found(id))?;
            let to = if outcome.is_ok() {
                Status::Completed
            } else {
                Status::Failed
            };
            let change = Change::StatusChanged {
                id,
                from: Status::InProgress,
                to,
            };
            let applied = persist::apply(db, plan_id, revision, &[change], &ctx, now_ms())?;
            let error = outcome.as_ref().err().map(String::as_str);
            let params: [Param; 3] = [result.into(), error.into(), id.0.into()];
            db.execute(
                "UPDATE tasks SET result = COALESCE(?, result), error = ?, lease_owner = NULL \
                 WHERE id = ?",
                &params,
            )?;
            let mut last = applied.last_seq;
            if let Some(result) = result {
                // Each run's result stays in the history, not only the latest.
                last = Some(record(db, id, "result", Some(result), "")?);
            }
            if let Some(state) = state {
                save_state(db, id, state)?;
            }
            if to == Status::Completed {
                // A finished generation has no run left to hold and measure.
                if let Some(seq) = super::schedules::end_remeasures(db, id)? {
                    last = Some(seq);
                }
            }
            Ok(((), last))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runtime's look after each commit must not scan every task: on a
    /// daemon with a 100k-task todo plan that was a scan per write.
    #[tokio::test]
    async fn the_runtimes_look_walks_the_phase_index_not_every_task() {
        let dir = tempfile::tempdir().unwrap();
        // SQLite's plan (PostgreSQL plans by its statistics, not the schema).
        let store = Store::open(&dir.path().join("todod.db")).await.unwrap();
        let plan = store
            .read(|db| {
                db.query(
                    &format!("EXPLAIN QUERY PLAN {RUNNABLE_PHASE_TASKS}"),
                    &[],
                    |row| Ok(row.text(3)?.to_string()),
                )
            })
            .await
            .unwrap();
        // "SCAN t USING INDEX tasks_runnable_phases" walks the partial
        // index (the phase tasks only); a bare "SCAN t" is every task.
        assert!(!plan.iter().any(|step| step == "SCAN t"), "{plan:?}");
        assert!(
            plan.iter()
                .any(|step| step.contains("tasks_runnable_phases")),
            "{plan:?}"
        );
        store.close().await;
    }
}
