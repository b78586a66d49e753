//! Phase checkpoints: one JSON document per task (the phase runtime defines
//! it: input identity, cursor, output files with their committed lengths,
//! counters), replaced in one transaction per batch, and the duplicate lines
//! an input survey found. This is the SQLite half of exactly-once output; the
//! file half is `phase::files`.
//!
//! A phase's progress and its own events (recorded as the daemon) are
//! written here too, in the checkpoint's transaction.
//!
//! Every write here is fenced: it commits only while the task is in progress
//! and held by the attempt that writes, checked in the same transaction.
use super::history::record;
use super::sql::{Db, Param};
use super::{now_ms, Error, Store};
use todod_domain::TaskId;

/// Refuses a write from an attempt that no longer holds the task (or its
/// shard). Returns the shard the attempt holds, `None` for the whole task.
pub(super) fn check_fence(db: &mut Db, task: TaskId, attempt: &str) -> Result<Option<u32>, Error> {
    let held = db.query_row(
        "SELECT 1 FROM tasks WHERE id = ? AND status = 'in_progress' AND lease_owner = ?",
        &[task.0.into(), attempt.into()],
        |_| Ok(()),
    )?;
    if held.is_some() {
        return Ok(None);
    }
    match super::shards::shard_held(db, task, attempt)? {
        Some(shard) => Ok(Some(shard)),
        None => Err(Error::Fenced {
            task,
            attempt: attempt.to_string(),
        }),
    }
}

/// Replaces the checkpoint of the task, or of its `shard`.
pub(super) fn save_state(
    db: &mut Db,
    task: TaskId,
    shard: Option<u32>,
    state: &str,
) -> Result<(), Error> {
    if let Some(shard) = shard {
        return super::shards::save_state(db, task, shard, state);
    }
    let params: [Param; 3] = [task.0.into(), state.into(), now_ms().into()];
    db.execute(
        "INSERT INTO phase_state (task_id, state, updated_at) VALUES (?, ?, ?) \
         ON CONFLICT (task_id) DO UPDATE SET state = excluded.state, \
         updated_at = excluded.updated_at",
        &params,
    )?;
    Ok(())
}

/// Stores a task's progress (or its `shard`'s, and the task's as the sum of
/// its shards') and records it as an event; returns its seq.
pub(super) fn save_progress(
    db: &mut Db,
    id: TaskId,
    shard: Option<u32>,
    progress: &str,
) -> Result<i64, Error> {
    let summed;
    let progress = match shard {
        Some(shard) => {
            summed = super::shards::save_progress(db, id, shard, progress)?;
            summed.as_str()
        }
        None => progress,
    };
    db.execute(
        "UPDATE tasks SET progress = ?, updated_at = ? WHERE id = ?",
        &[progress.into(), now_ms().into(), id.0.into()],
    )?;
    record(db, id, "progress", Some(progress), "")
}

impl Store {
    /// The phase's last committed checkpoint (of its `shard`, if given), if
    /// it has one.
    pub async fn load_phase_state(
        &self,
        task: TaskId,
        shard: Option<u32>,
    ) -> Result<Option<String>, Error> {
        self.read(move |db| {
            if let Some(shard) = shard {
                return super::shards::load_state(db, task, shard);
            }
            db.query_row(
                "SELECT state FROM phase_state WHERE task_id = ?",
                &[task.0.into()],
                |row| Ok(row.text(0)?.to_string()),
            )
        })
        .await
    }

    /// A checkpoint in the format of todod before the phase runtime (the
    /// committed length of each file and the ids of the records written), if
    /// the task has one and no checkpoint since.
    pub async fn legacy_checkpoint(
        &self,
        task: TaskId,
    ) -> Result<Option<(Vec<u64>, Vec<String>)>, Error> {
        self.read(|db| {
            let offsets = db.query_row(
                "SELECT c.offsets FROM phase_checkpoints c WHERE c.task_id = ?1 \
                 AND NOT EXISTS (SELECT 1 FROM phase_state s WHERE s.task_id = ?1)",
                &[task.0.into()],
                |row| {
                    serde_json::from_str::<Vec<u64>>(row.text(0)?)
                        .map_err(|e| Error::Corrupt(format!("legacy checkpoint offsets: {e}")))
                },
            )?;
            let Some(offsets) = offsets else {
                return Ok(None);
            };
            let ids = db.query(
                "SELECT record_id FROM phase_records WHERE task_id = ?",
                &[task.0.into()],
                |row| Ok(row.text(0)?.to_string()),
            )?;
            Ok(Some((offsets, ids)))
        })
        .await
    }

    /// Replaces the checkpoint of `task` with `state`, and records the
    /// duplicate lines of `pass` a survey found, in one transaction fenced on
    /// `attempt`. Call only once the files the state describes are fsynced.
    pub async fn commit_phase_state(
        &self,
        task: TaskId,
        attempt: &str,
        state: &str,
        duplicates: Option<(u32, &[u64])>,
    ) -> Result<(), Error> {
        let lines = duplicates.map(|(pass, lines)| {
            (
                pass,
                serde_json::to_string(lines).expect("numbers serialize"),
            )
        });
        self.write(|db| {
            let shard = check_fence(db, task, attempt)?;
            save_state(db, task, shard, state)?;
            if let Some((pass, lines)) = &lines {
                let (insert, skip) = db.dialect().insert_or_skip();
                let lines_of = db.dialect().json_ints("?");
                db.execute(
                    &format!(
                        "{insert} INTO phase_duplicates (task_id, pass, line) \
                         SELECT CAST(? AS BIGINT), CAST(? AS BIGINT), l.value \
                         FROM ({lines_of}) AS l{skip}"
                    ),
                    &[task.0.into(), i64::from(*pass).into(), lines.into()],
                )?;
            }
            Ok(((), None))
        })
        .await
    }

    /// A batch's commit: the checkpoint, and the run's progress when it is
    /// time to report it (recorded as a `progress` event), in one fenced
    /// transaction, so that a busy run pays one fsync per batch. A `notice`
    /// (an event kind and its JSON) is recorded with them.
    pub async fn commit_phase_batch(
        &self,
        task: TaskId,
        attempt: &str,
        state: &str,
        progress: Option<&str>,
        notice: Option<(&str, &str)>,
    ) -> Result<(), Error> {
        self.write(|db| {
            let shard = check_fence(db, task, attempt)?;
            save_state(db, task, shard, state)?;
            let mut seq = match progress {
                Some(progress) => Some(save_progress(db, task, shard, progress)?),
                None => None,
            };
            if let Some((kind, value)) = notice {
                seq = Some(record(db, task, kind, Some(value), "")?);
            }
            Ok(((), seq))
        })
        .await
    }

    /// Duplicate lines of `pass` at or after line `from`, in order.
    pub async fn phase_duplicates(
        &self,
        task: TaskId,
        pass: u32,
        from: u64,
    ) -> Result<Vec<u64>, Error> {
        self.read(|db| {
            db.query(
                "SELECT line FROM phase_duplicates WHERE task_id = ? AND pass = ? AND line >= ? \
                 ORDER BY line",
                &[task.0.into(), i64::from(pass).into(), (from as i64).into()],
                |row| Ok(row.int(0)? as u64),
            )
        })
        .await
    }
}
