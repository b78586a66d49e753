//! What the phase runtime asks of the store: which phase tasks to run, fenced
//! attempts, progress, and the final outcome. Progress and leases are recorded
//! as events but do not bump the plan's revision: they are the daemon's own
//! bookkeeping, and an agent's expected_revision must not go stale every second
//! while a generation runs.
use super::checkpoints::{check_fence, save_progress, save_state};
use super::history::{record, DAEMON_ACTOR};
use super::lease_rules::{may_take, resumed_reason, Terms};
use super::persist;
use super::sql::{Db, Param};
use super::{now_ms, Error, Store, TaskView, WriteContext};
use todod_domain::{self as domain, Change, Kind, Status, TaskId};
use todod_proto::lease::run_of;

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
    /// Its lease has not expired, on the database's clock.
    pub lease_live: bool,
}

impl PhaseTask {
    /// Held under a live lease by a run of another daemon than `run_id`
    /// (on a database several daemons share: not this daemon's to take).
    pub fn held_elsewhere(&self, run_id: &str) -> bool {
        self.lease_live
            && self
                .lease_owner
                .as_deref()
                .is_some_and(|owner| run_of(owner) != run_id)
    }
}

/// How long a lease lasts by default unless its run renews it
/// ([`Store::set_lease`], `--lease`; `phase::lease_keeper` renews every
/// third of it). Only a shared database judges it: alone on a database, a
/// daemon knows that a holder of another run is dead.
pub const LEASE_MS: i64 = 30_000;

fn take_lease(
    db: &mut Db,
    id: TaskId,
    attempt: &str,
    terms: Terms,
) -> Result<(bool, Option<i64>), Error> {
    let Terms { shared, lease_ms } = terms;
    let previous = db.query_row(
        "SELECT t.lease_owner, l.expires_at FROM tasks t \
         LEFT JOIN phase_leases l ON l.task_id = t.id WHERE t.id = ? AND t.status = 'in_progress'",
        &[id.0.into()],
        |row| Ok((row.opt_text(0)?.map(str::to_string), row.opt_int(1)?)),
    )?;
    let Some((previous, expires)) = previous else {
        return Ok((false, None));
    };
    let now = db.clock_ms()?;
    let Some(another_run) = may_take(previous.as_deref(), expires, now, attempt, shared) else {
        return Ok((false, None));
    };
    db.execute(
        "UPDATE tasks SET lease_owner = ? WHERE id = ?",
        &[attempt.into(), id.0.into()],
    )?;
    db.execute(
        "INSERT INTO phase_leases (task_id, expires_at) VALUES (?, ?) \
         ON CONFLICT (task_id) DO UPDATE SET expires_at = excluded.expires_at",
        &[id.0.into(), (now + lease_ms).into()],
    )?;
    let seq = if another_run {
        Some(record(
            db,
            id,
            "resumed",
            Some(attempt),
            resumed_reason(shared),
        )?)
    } else {
        None
    };
    Ok((true, seq))
}

/// Live phase tasks that are in progress or pending. The runtime asks after
/// every commit, so this walks the partial index `tasks_runnable_phases`
/// (phase tasks are few), never every task: its WHERE terms are the index's.
const RUNNABLE_PHASE_TASKS: &str = "SELECT t.id, t.kind, t.status, COALESCE(t.spec, '{}'), \
     t.lease_owner, NOT EXISTS (SELECT 1 FROM dependencies d JOIN tasks u \
     ON u.id = d.depends_on WHERE d.task_id = t.id AND u.status <> 'completed'), t.held, \
     (SELECT l.expires_at FROM phase_leases l WHERE l.task_id = t.id) \
     FROM tasks t JOIN plans p ON p.id = t.plan_id \
     WHERE t.kind <> 'todo' AND t.archived_at IS NULL AND t.status IN ('in_progress', 'pending') \
     AND p.archived_at IS NULL ORDER BY t.id";

impl Store {
    pub(super) fn terms(&self) -> Terms {
        Terms {
            shared: self.is_shared(),
            lease_ms: self.lease().as_millis() as i64,
        }
    }

    /// Live phase tasks that are in progress, or pending and ready.
    pub async fn runnable_phase_tasks(&self) -> Result<Vec<PhaseTask>, Error> {
        self.read(|db| {
            let now = db.clock_ms()?;
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
                    lease_live: row.opt_int(7)?.is_some_and(|at| at > now),
                })
            })
        })
        .await
    }

    /// Gives an in-progress task to `attempt`, whoever held it before (the
    /// runtime calls this only once the previous attempt has ended). Records
    /// `resumed` when the previous holder was another daemon run. Returns
    /// false if the task is no longer in progress.
    ///
    /// On a database other daemons share, a task another daemon's run holds
    /// is taken only once that run's lease has expired (judged on the
    /// database's clock): false until then.
    pub async fn take_lease(&self, id: TaskId, attempt: &str) -> Result<bool, Error> {
        let terms = self.terms();
        self.write(move |db| take_lease(db, id, attempt, terms))
            .await
    }

    /// Renews the leases of the tasks and shards the runs of daemon run
    /// `run` hold, for another [`Store::lease`], and the run's presence
    /// (which other daemons count to share shards out); returns how many
    /// leases. (It walks the leases, one row per phase task or shard, not
    /// the tasks.)
    pub async fn renew_leases(&self, run: &str) -> Result<usize, Error> {
        let prefix = format!("{run}.");
        let lease_ms = self.lease_ms();
        self.write(move |db| {
            let now = db.clock_ms()?;
            let renewed = db.execute(
                "UPDATE phase_leases SET expires_at = ? WHERE task_id IN (SELECT l.task_id \
                 FROM phase_leases l JOIN tasks t ON t.id = l.task_id \
                 WHERE t.status = 'in_progress' AND substr(t.lease_owner, 1, ?) = ?)",
                &[
                    (now + lease_ms).into(),
                    (prefix.len() as i64).into(),
                    prefix.as_str().into(),
                ],
            )?;
            let shards = super::shards::renew(db, &prefix, now + lease_ms)?;
            super::shards::seen(db, run, lease_ms)?;
            Ok((renewed + shards, None))
        })
        .await
    }

    /// Ends the leases of daemon run `run` at once (it is stopping cleanly,
    /// its runs stopped at their last checkpoint): another daemon may take
    /// the tasks and shards over without waiting for them to expire.
    pub async fn release_leases(&self, run: &str) -> Result<usize, Error> {
        let prefix = format!("{run}.");
        self.write(move |db| {
            let released = db.execute(
                "UPDATE phase_leases SET expires_at = 0 WHERE task_id IN (SELECT l.task_id \
                 FROM phase_leases l JOIN tasks t ON t.id = l.task_id \
                 WHERE t.status = 'in_progress' AND substr(t.lease_owner, 1, ?) = ?)",
                &[(prefix.len() as i64).into(), prefix.as_str().into()],
            )?;
            let shards = super::shards::release(db, run, &prefix)?;
            Ok((released + shards, None))
        })
        .await
    }

    /// Moves a ready pending phase task to in_progress for `attempt`, in one
    /// transaction. [`Error::Fenced`], with nothing written, if on a shared
    /// database another daemon's run holds it. Without an attempt (a sharded
    /// task, whose shards are taken one by one) nobody holds the task.
    pub async fn start_phase(&self, id: TaskId, attempt: Option<&str>) -> Result<TaskView, Error> {
        let ctx = WriteContext {
            actor: DAEMON_ACTOR.into(),
            reason: "ready: started by the daemon".into(),
            expected_revision: None,
            request: None,
        };
        let terms = self.terms();
        self.write(|db| {
            let (task, seq) = super::write::transition(db, id, Status::InProgress, &ctx)?;
            let Some(attempt) = attempt else {
                return Ok((task, seq));
            };
            // On a shared database another daemon may have started it
            // first and hold it: then nothing here is written.
            let (taken, resumed) = take_lease(db, id, attempt, terms)?;
            if !taken {
                return Err(Error::Fenced {
                    task: id,
                    attempt: attempt.to_string(),
                });
            }
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
            let shard = check_fence(db, id, attempt)?;
            Ok(((), Some(save_progress(db, id, shard, progress)?)))
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
            if let Some(shard) = check_fence(db, id, attempt)? {
                let seq = super::shards::finish_shard(db, id, shard, &outcome, result, state)?;
                return Ok(((), seq));
            }
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
                save_state(db, id, None, state)?;
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
