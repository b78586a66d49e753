//! The shards of sharded phase tasks (`phase_shards`): each shard is held,
//! fenced, checkpointed and finished like a whole task, by its own attempt,
//! under its own lease on the database's clock. The task stays in progress
//! while any shard runs; its progress is the sum of its shards', written in
//! each shard's progress transaction; a shard that fails fails the task.
//! Also the daemon runs alive on the database (`daemon_runs`), which a
//! daemon counts to take its fair share of a task's shards.
use super::history::{record, DAEMON_ACTOR};
use super::lease_rules::{may_take, resumed_reason, Terms};
use super::sql::Db;
use super::{now_ms, persist, Error, Store, WriteContext};
use todod_domain::shards::{combine_progress, Shard};
use todod_domain::{self as domain, Change, Status, TaskId};
use todod_proto::lease::run_of;

/// A shard as the runtime and `status` see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardRow {
    pub shard: Shard,
    /// The attempt that holds (or last held) it.
    pub lease_owner: Option<String>,
    /// When its lease ends, Unix ms on the database's clock (0: handed back).
    pub expires_at: Option<i64>,
    /// Its lease has not expired, on the database's clock.
    pub lease_live: bool,
    pub done: bool,
}

impl ShardRow {
    /// Held under a live lease by a run of another daemon than `run_id`.
    pub fn held_elsewhere(&self, run_id: &str) -> bool {
        self.lease_live
            && self
                .lease_owner
                .as_deref()
                .is_some_and(|owner| run_of(owner) != run_id)
    }
}

/// The shard `attempt` holds of `task`, if it still does: the task in
/// progress, the shard not finished.
pub(super) fn shard_held(db: &mut Db, task: TaskId, attempt: &str) -> Result<Option<u32>, Error> {
    db.query_row(
        "SELECT s.shard FROM phase_shards s JOIN tasks t ON t.id = s.task_id \
         WHERE s.task_id = ? AND s.lease_owner = ? AND s.done = 0 AND t.status = 'in_progress'",
        &[task.0.into(), attempt.into()],
        |row| Ok(row.int(0)? as u32),
    )
}

pub(super) fn save_state(db: &mut Db, task: TaskId, shard: u32, state: &str) -> Result<(), Error> {
    db.execute(
        "UPDATE phase_shards SET state = ? WHERE task_id = ? AND shard = ?",
        &[state.into(), task.0.into(), i64::from(shard).into()],
    )?;
    Ok(())
}

pub(super) fn load_state(db: &mut Db, task: TaskId, shard: u32) -> Result<Option<String>, Error> {
    Ok(db
        .query_row(
            "SELECT state FROM phase_shards WHERE task_id = ? AND shard = ?",
            &[task.0.into(), i64::from(shard).into()],
            |row| Ok(row.opt_text(0)?.map(str::to_string)),
        )?
        .flatten())
}

/// Stores a shard's progress; returns the task's, the sum of its shards'.
pub(super) fn save_progress(
    db: &mut Db,
    task: TaskId,
    shard: u32,
    progress: &str,
) -> Result<String, Error> {
    db.execute(
        "UPDATE phase_shards SET progress = ? WHERE task_id = ? AND shard = ?",
        &[progress.into(), task.0.into(), i64::from(shard).into()],
    )?;
    summed_progress(db, task)
}

/// The task's progress: its shards' added up.
fn summed_progress(db: &mut Db, task: TaskId) -> Result<String, Error> {
    let rows = db.query(
        "SELECT progress, done, shards FROM phase_shards WHERE task_id = ? ORDER BY shard",
        &[task.0.into()],
        |row| {
            Ok((
                row.opt_text(0)?.map(str::to_string),
                row.int(1)? != 0,
                row.int(2)? as u32,
            ))
        },
    )?;
    let of = rows.first().map_or(0, |r| r.2);
    let done = rows.iter().filter(|r| r.1).count() as u32;
    let parts: Vec<serde_json::Value> = rows
        .iter()
        .filter_map(|r| r.0.as_deref())
        .filter_map(|p| serde_json::from_str(p).ok())
        .collect();
    Ok(combine_progress(&parts, of, done).to_string())
}

/// Ends a shard's run. Completed: the shard is done (the task goes on in
/// progress until its last shard is, and then the runtime assembles it).
/// Failed: the task fails, naming the shard; the shards still running are
/// fenced by that, and a retry of the task runs the shards not done again
/// from their checkpoints.
pub(super) fn finish_shard(
    db: &mut Db,
    task: TaskId,
    shard: u32,
    outcome: &Result<(), String>,
    result: Option<&str>,
    state: Option<&str>,
) -> Result<Option<i64>, Error> {
    if let Some(state) = state {
        save_state(db, task, shard, state)?;
    }
    let of = db
        .query_row(
            "SELECT shards FROM phase_shards WHERE task_id = ? AND shard = ?",
            &[task.0.into(), i64::from(shard).into()],
            |row| row.int(0),
        )?
        .unwrap_or(0);
    let label = Shard {
        index: shard,
        of: of as u32,
    }
    .label();
    match outcome {
        Ok(()) => {
            db.execute(
                "UPDATE phase_shards SET done = 1, result = ?, expires_at = 0 \
                 WHERE task_id = ? AND shard = ?",
                &[result.into(), task.0.into(), i64::from(shard).into()],
            )?;
            let progress = summed_progress(db, task)?;
            db.execute(
                "UPDATE tasks SET progress = ?, updated_at = ? WHERE id = ?",
                &[progress.as_str().into(), now_ms().into(), task.0.into()],
            )?;
            let value = serde_json::json!({"shard": shard, "shards": of}).to_string();
            Ok(Some(record(
                db,
                task,
                "shard_done",
                Some(&value),
                &format!("{label} finished"),
            )?))
        }
        Err(error) => {
            let error = format!("{label}: {error}");
            let ctx = WriteContext {
                actor: DAEMON_ACTOR.into(),
                reason: domain::model::clip(&error),
                expected_revision: None,
                request: None,
            };
            let (plan_id, revision) = db
                .query_row(
                    "SELECT t.plan_id, p.revision FROM tasks t JOIN plans p ON p.id = t.plan_id \
                     WHERE t.id = ?",
                    &[task.0.into()],
                    |row| Ok((row.int(0)?, row.int(1)?)),
                )?
                .ok_or_else(|| domain::Error::task_not_found(task))?;
            let change = Change::StatusChanged {
                id: task,
                from: Status::InProgress,
                to: Status::Failed,
            };
            let applied = persist::apply(db, plan_id, revision, &[change], &ctx, now_ms())?;
            db.execute(
                "UPDATE tasks SET error = ?, lease_owner = NULL WHERE id = ?",
                &[error.as_str().into(), task.0.into()],
            )?;
            db.execute(
                "UPDATE phase_shards SET expires_at = 0 WHERE task_id = ? AND shard = ?",
                &[task.0.into(), i64::from(shard).into()],
            )?;
            let mut last = applied.last_seq;
            if let Some(result) = result {
                last = Some(record(db, task, "result", Some(result), &label)?);
            }
            Ok(last)
        }
    }
}

/// The shards of `tasks` that runs have taken so far, by task and shard.
pub(super) fn rows_of(db: &mut Db, tasks: &[TaskId]) -> Result<Vec<(TaskId, ShardRow)>, Error> {
    let ids = serde_json::to_string(&tasks.iter().map(|t| t.0).collect::<Vec<_>>())
        .expect("ids serialize");
    let now = db.clock_ms()?;
    let ids_of = db.dialect().json_ints("?");
    db.query(
        &format!(
            "SELECT task_id, shard, shards, lease_owner, expires_at, done \
             FROM phase_shards WHERE task_id IN (SELECT value FROM ({ids_of}) AS i) \
             ORDER BY task_id, shard"
        ),
        &[ids.as_str().into()],
        |row| {
            let expires_at = row.opt_int(4)?;
            Ok((
                TaskId(row.int(0)?),
                ShardRow {
                    shard: Shard {
                        index: row.int(1)? as u32,
                        of: row.int(2)? as u32,
                    },
                    lease_owner: row.opt_text(3)?.map(str::to_string),
                    expires_at,
                    lease_live: expires_at.is_some_and(|at| at > now),
                    done: row.int(5)? != 0,
                },
            ))
        },
    )
}

fn take_shard(
    db: &mut Db,
    task: TaskId,
    shard: Shard,
    attempt: &str,
    terms: Terms,
) -> Result<(bool, Option<i64>), Error> {
    let in_progress = db
        .query_row(
            "SELECT 1 FROM tasks WHERE id = ? AND status = 'in_progress'",
            &[task.0.into()],
            |_| Ok(()),
        )?
        .is_some();
    if !in_progress {
        return Ok((false, None));
    }
    let (insert, skip) = db.dialect().insert_or_skip();
    db.execute(
        &format!("{insert} INTO phase_shards (task_id, shard, shards) VALUES (?, ?, ?){skip}"),
        &[
            task.0.into(),
            i64::from(shard.index).into(),
            i64::from(shard.of).into(),
        ],
    )?;
    let (previous, expires, done) = db
        .query_row(
            "SELECT lease_owner, expires_at, done FROM phase_shards \
             WHERE task_id = ? AND shard = ?",
            &[task.0.into(), i64::from(shard.index).into()],
            |row| {
                Ok((
                    row.opt_text(0)?.map(str::to_string),
                    row.opt_int(1)?,
                    row.int(2)? != 0,
                ))
            },
        )?
        .ok_or_else(|| Error::Corrupt("a shard row vanished in its transaction".into()))?;
    if done {
        return Ok((false, None));
    }
    let now = db.clock_ms()?;
    let Some(another_run) = may_take(previous.as_deref(), expires, now, attempt, terms.shared)
    else {
        return Ok((false, None));
    };
    db.execute(
        "UPDATE phase_shards SET lease_owner = ?, expires_at = ? WHERE task_id = ? AND shard = ?",
        &[
            attempt.into(),
            (now + terms.lease_ms).into(),
            task.0.into(),
            i64::from(shard.index).into(),
        ],
    )?;
    let seq = if another_run {
        let reason = format!("{}: {}", shard.label(), resumed_reason(terms.shared));
        Some(record(db, task, "resumed", Some(attempt), &reason)?)
    } else {
        None
    };
    Ok((true, seq))
}

impl Store {
    /// Gives shard `shard` of the in-progress task `task` to `attempt` (made
    /// the first time). False when the task is not in progress, the shard is
    /// done, or (on a shared database) another daemon's run holds it under a
    /// live lease. Records `resumed` when it was another run's.
    pub async fn take_shard(
        &self,
        task: TaskId,
        shard: Shard,
        attempt: &str,
    ) -> Result<bool, Error> {
        let terms = self.terms();
        self.write(move |db| take_shard(db, task, shard, attempt, terms))
            .await
    }

    /// The shards of the given tasks that runs have taken so far.
    pub async fn shards_of(&self, tasks: &[TaskId]) -> Result<Vec<(TaskId, ShardRow)>, Error> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let tasks = tasks.to_vec();
        self.read(move |db| rows_of(db, &tasks)).await
    }

    /// The committed checkpoints of a task's shards, by shard.
    pub async fn shard_states(&self, task: TaskId) -> Result<Vec<(u32, Option<String>)>, Error> {
        self.read(move |db| {
            db.query(
                "SELECT shard, state FROM phase_shards WHERE task_id = ? ORDER BY shard",
                &[task.0.into()],
                |row| Ok((row.int(0)? as u32, row.opt_text(1)?.map(str::to_string))),
            )
        })
        .await
    }

    /// Hands back at once the lease `attempt` holds, of a task or a shard:
    /// its run stopped at its last checkpoint, and another daemon may take
    /// it without waiting for the lease to expire.
    pub async fn release_attempt(&self, task: TaskId, attempt: &str) -> Result<(), Error> {
        self.write(move |db| {
            // Nobody's any more: a renewal of this daemon's leases (which
            // goes by the run's prefix) must not make it live again.
            db.execute(
                "UPDATE phase_shards SET expires_at = 0, lease_owner = NULL \
                 WHERE task_id = ? AND lease_owner = ?",
                &[task.0.into(), attempt.into()],
            )?;
            db.execute(
                "UPDATE phase_leases SET expires_at = 0 WHERE task_id = ? AND task_id IN \
                 (SELECT id FROM tasks WHERE id = ? AND lease_owner = ?)",
                &[task.0.into(), task.0.into(), attempt.into()],
            )?;
            Ok(((), None))
        })
        .await
    }

    /// How many daemon runs are alive on this database (their presence,
    /// renewed with their leases, has not expired), this one included once
    /// it has renewed.
    pub async fn live_daemons(&self) -> Result<usize, Error> {
        self.read(|db| {
            let now = db.clock_ms()?;
            Ok(db
                .query_row(
                    "SELECT COUNT(*) FROM daemon_runs WHERE seen_until > ?",
                    &[now.into()],
                    |row| row.int(0),
                )?
                .unwrap_or(0) as usize)
        })
        .await
    }
}

impl Store {
    /// Of `tasks`, how many daemons alive said they cannot reach each (an
    /// `unreachable` event naming the daemon run): they do not count in
    /// the share of its shards the others take.
    pub async fn unreachable_daemons(
        &self,
        tasks: &[TaskId],
    ) -> Result<std::collections::HashMap<TaskId, usize>, Error> {
        let ids = serde_json::to_string(&tasks.iter().map(|t| t.0).collect::<Vec<_>>())
            .expect("ids serialize");
        self.read(move |db| {
            let now = db.clock_ms()?;
            let ids_of = db.dialect().json_ints("?");
            let rows = db.query(
                &format!(
                    "SELECT e.task_id, COUNT(DISTINCT d.run_id) FROM events e \
                     JOIN daemon_runs d ON d.run_id = e.new_value \
                     WHERE e.type = 'unreachable' AND d.seen_until > ? \
                     AND e.task_id IN (SELECT value FROM ({ids_of}) AS i) GROUP BY e.task_id"
                ),
                &[now.into(), ids.as_str().into()],
                |row| Ok((TaskId(row.int(0)?), row.int(1)? as usize)),
            )?;
            Ok(rows.into_iter().collect())
        })
        .await
    }
}

/// Marks daemon run `run` alive for another `lease_ms` (with its leases).
pub(super) fn seen(db: &mut Db, run: &str, lease_ms: i64) -> Result<(), Error> {
    let now = db.clock_ms()?;
    db.execute(
        "INSERT INTO daemon_runs (run_id, seen_until) VALUES (?, ?) \
         ON CONFLICT (run_id) DO UPDATE SET seen_until = excluded.seen_until",
        &[run.into(), (now + lease_ms).into()],
    )?;
    // Runs long gone are forgotten (an hour after their last renewal).
    db.execute(
        "DELETE FROM daemon_runs WHERE seen_until < ?",
        &[(now - 3_600_000).into()],
    )?;
    Ok(())
}

/// Renews the leases of the shards daemon run `run`'s attempts hold.
pub(super) fn renew(db: &mut Db, prefix: &str, until: i64) -> Result<usize, Error> {
    db.execute(
        "UPDATE phase_shards SET expires_at = ? WHERE done = 0 AND expires_at <> 0 \
         AND substr(lease_owner, 1, ?) = ? \
         AND task_id IN (SELECT id FROM tasks WHERE status = 'in_progress')",
        &[until.into(), (prefix.len() as i64).into(), prefix.into()],
    )
}

/// Hands back every shard lease of daemon run `run`, and its presence.
pub(super) fn release(db: &mut Db, run: &str, prefix: &str) -> Result<usize, Error> {
    db.execute("DELETE FROM daemon_runs WHERE run_id = ?", &[run.into()])?;
    db.execute(
        "UPDATE phase_shards SET expires_at = 0 WHERE done = 0 AND substr(lease_owner, 1, ?) = ?",
        &[(prefix.len() as i64).into(), prefix.into()],
    )
}
