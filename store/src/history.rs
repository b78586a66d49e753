//! The daemon's own entries in a task's history: the events it records as
//! itself (a run resumed, a shard done, a schedule fired), in the caller's
//! transaction.
use super::sql::Db;
use super::{now_ms, Error};
use todod_domain::{self as domain, TaskId};

/// The daemon's own name in the history.
pub const DAEMON_ACTOR: &str = "todod";

pub(super) fn record(
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

impl super::Store {
    /// Records that daemon run `run_id` leaves `task` to the others: it
    /// cannot reach the directories the task writes into (`why`).
    pub async fn note_unreachable(
        &self,
        task: TaskId,
        run_id: &str,
        why: &str,
    ) -> Result<(), Error> {
        let reason = format!("{run_id} does not claim it: {why}");
        self.note(task, "unreachable", run_id, reason).await
    }

    /// Records that run `attempt` took the output files `files` over from
    /// the process that still held them (the daemon it took the task from,
    /// paused past its lease): their committed bytes go on in copies, and
    /// that process's late writes land at no path.
    pub async fn note_forked(
        &self,
        task: TaskId,
        attempt: &str,
        files: &[String],
    ) -> Result<(), Error> {
        let reason = format!(
            "still held by the process this run took the task from; its committed bytes go on \
             in a copy, and that process's late writes land nowhere: {}",
            files.join(", ")
        );
        self.note(task, "forked", attempt, reason).await
    }

    /// Records what happened to server `name`, which `task` uses (started,
    /// ready, exited, restarting, given up, stopped), in its history.
    pub async fn note_server(&self, task: TaskId, name: &str, what: &str) -> Result<(), Error> {
        self.note(task, "server", name, what.to_string()).await
    }

    /// Records one event of the daemon's own on `task`, in a write of its own.
    async fn note(
        &self,
        task: TaskId,
        kind: &'static str,
        value: &str,
        reason: String,
    ) -> Result<(), Error> {
        let value = value.to_string();
        self.write(move |db| {
            let seq = record(db, task, kind, Some(&value), &reason)?;
            Ok(((), Some(seq)))
        })
        .await
    }
}
