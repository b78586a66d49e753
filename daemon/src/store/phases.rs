//! What the phase-worker runtime asks of the store: which phase tasks to run,
//! leases, progress, and the final outcome. Progress and leases are recorded
//! as events but do not bump the plan's revision: they are the daemon's own
//! bookkeeping, and an agent's expected_revision must not go stale every second
//! while a generation runs.
use super::persist;
use super::sqlite::{Db, Param};
use super::{now_ms, Error, Store, TaskView, WriteContext};
use crate::domain::{self, Change, Kind, Status, TaskId};

/// A phase task the runtime may have to act on.
#[derive(Debug, Clone)]
pub struct PhaseTask {
    pub id: TaskId,
    pub kind: Kind,
    pub status: Status,
    pub spec: String,
    pub lease_owner: Option<String>,
    /// Pending with every dependency completed.
    pub ready: bool,
}

/// The daemon's own name in the history.
pub const DAEMON_ACTOR: &str = "todod";

fn record(
    db: &mut Db,
    id: TaskId,
    kind: &str,
    value: Option<&str>,
    reason: &str,
) -> Result<i64, Error> {
    let now = now_ms();
    db.query_row(
        "INSERT INTO events (plan_id, task_id, type, new_value, actor, reason, at, plan_revision) \
         SELECT t.plan_id, t.id, ?, ?, ?, ?, ?, p.revision FROM tasks t \
         JOIN plans p ON p.id = t.plan_id WHERE t.id = ? RETURNING seq",
        &[
            kind.into(),
            value.into(),
            DAEMON_ACTOR.into(),
            reason.into(),
            now.into(),
            id.0.into(),
        ],
        |row| row.int(0),
    )?
    .ok_or_else(|| domain::Error::task_not_found(id).into())
}

impl Store {
    /// Live phase tasks that are in progress, or pending and ready.
    pub async fn runnable_phase_tasks(&self) -> Result<Vec<PhaseTask>, Error> {
        let mut conn = self.reader.acquire().await?;
        let mut db = Db::lock(&mut conn).await?;
        db.query(
            "SELECT t.id, t.kind, t.status, COALESCE(t.spec, '{}'), t.lease_owner, \
             NOT EXISTS (SELECT 1 FROM dependencies d JOIN tasks u ON u.id = d.depends_on \
                         WHERE d.task_id = t.id AND u.status <> 'completed') \
             FROM tasks t WHERE t.kind <> 'todo' AND t.archived_at IS NULL \
             AND t.status IN ('in_progress', 'pending') ORDER BY t.id",
            &[],
            |row| {
                let status: Status = row.parsed(2, "status")?;
                Ok(PhaseTask {
                    id: TaskId(row.int(0)?),
                    kind: row.parsed(1, "kind")?,
                    status,
                    spec: row.text(3)?.to_string(),
                    lease_owner: row.opt_text(4)?.map(str::to_string),
                    ready: status == Status::Pending && row.int(5)? != 0,
                })
            },
        )
    }

    /// Takes the lease of an in-progress task for run `owner`. When an earlier
    /// run held it, records that this run resumes it. Returns false if the task
    /// is no longer in progress.
    pub async fn take_lease(&self, id: TaskId, owner: &str) -> Result<bool, Error> {
        let mut seq = None;
        let mut conn = self.writer.acquire().await?;
        let mut db = Db::lock(&mut conn).await?;
        let taken = db.transaction("BEGIN IMMEDIATE", |db| {
            let previous = db.query_row(
                "SELECT lease_owner FROM tasks WHERE id = ? AND status = 'in_progress'",
                &[id.0.into()],
                |row| Ok(row.opt_text(0)?.map(str::to_string)),
            )?;
            let Some(previous) = previous else {
                return Ok(false);
            };
            if previous.as_deref() == Some(owner) {
                return Ok(true);
            }
            db.execute(
                "UPDATE tasks SET lease_owner = ? WHERE id = ?",
                &[owner.into(), id.0.into()],
            )?;
            if let Some(previous) = previous {
                let reason = format!("resumed after daemon run {previous} ended");
                seq = Some(record(db, id, "resumed", Some(owner), &reason)?);
            }
            Ok(true)
        })?;
        drop(db);
        self.published(seq);
        Ok(taken)
    }

    /// Moves a ready pending phase task to in_progress for run `owner`.
    pub async fn start_phase(&self, id: TaskId, owner: &str) -> Result<TaskView, Error> {
        let ctx = WriteContext {
            actor: DAEMON_ACTOR.into(),
            reason: "ready: started by the daemon".into(),
            expected_revision: None,
        };
        let task = self.transition(id, Status::InProgress, &ctx).await?;
        self.take_lease(id, owner).await?;
        Ok(task)
    }

    /// Persists a worker's progress (a JSON object) and streams it as an event.
    pub async fn report_progress(&self, id: TaskId, progress: &str) -> Result<(), Error> {
        let mut conn = self.writer.acquire().await?;
        let mut db = Db::lock(&mut conn).await?;
        let seq = db.transaction("BEGIN IMMEDIATE", |db| {
            db.execute(
                "UPDATE tasks SET progress = ?, updated_at = ? WHERE id = ?",
                &[progress.into(), now_ms().into(), id.0.into()],
            )?;
            record(db, id, "progress", Some(progress), "")
        })?;
        drop(db);
        self.published(Some(seq));
        Ok(())
    }

    /// Ends a phase run held by `owner`: completed with a result, or failed with
    /// an error. A no-op if the task moved on meanwhile (cancelled, reopened)
    /// or another run holds it.
    pub async fn finish_phase(
        &self,
        id: TaskId,
        owner: &str,
        outcome: Result<String, String>,
    ) -> Result<(), Error> {
        let ctx = WriteContext {
            actor: DAEMON_ACTOR.into(),
            reason: match &outcome {
                Ok(_) => "finished".into(),
                Err(error) => domain::model::clip(error),
            },
            expected_revision: None,
        };
        let mut conn = self.writer.acquire().await?;
        let mut db = Db::lock(&mut conn).await?;
        let seq = db.transaction("BEGIN IMMEDIATE", |db| {
            let held = db.query_row(
                "SELECT t.plan_id, p.revision FROM tasks t JOIN plans p ON p.id = t.plan_id \
                 WHERE t.id = ? AND t.status = 'in_progress' AND t.lease_owner = ?",
                &[id.0.into(), owner.into()],
                |row| Ok((row.int(0)?, row.int(1)?)),
            )?;
            let Some((plan_id, revision)) = held else {
                return Ok(None);
            };
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
            let (result, error): (Option<&str>, Option<&str>) = match &outcome {
                Ok(result) => (Some(result), None),
                Err(error) => (None, Some(error)),
            };
            let params: [Param; 3] = [result.into(), error.into(), id.0.into()];
            db.execute(
                "UPDATE tasks SET result = COALESCE(?, result), error = ?, lease_owner = NULL \
                 WHERE id = ?",
                &params,
            )?;
            Ok(applied.last_seq)
        })?;
        drop(db);
        self.published(seq);
        Ok(())
    }
}
