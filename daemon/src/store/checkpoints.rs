//! Phase checkpoints: the committed length of each output file and the ids of
//! the records written, moved forward in one transaction per batch. This is the
//! SQLite half of exactly-once output; `worker::output` is the file half.
use std::collections::HashSet;

use super::sqlite::{Db, Param};
use super::{now_ms, Error, Store};
use crate::domain::TaskId;

/// What a phase has durably written so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Committed length of each output file, in bytes.
    pub offsets: Vec<u64>,
    /// Ids of the input records already written (to any of the files).
    pub records: HashSet<String>,
}

fn load(db: &mut Db, task: TaskId) -> Result<Checkpoint, Error> {
    let offsets = db
        .query_row(
            "SELECT offsets FROM phase_checkpoints WHERE task_id = ?",
            &[task.0.into()],
            |row| {
                serde_json::from_str::<Vec<u64>>(row.text(0)?)
                    .map_err(|e| Error::Corrupt(format!("checkpoint offsets: {e}")))
            },
        )?
        .unwrap_or_default();
    let records = db
        .query(
            "SELECT record_id FROM phase_records WHERE task_id = ?",
            &[task.0.into()],
            |row| Ok(row.text(0)?.to_string()),
        )?
        .into_iter()
        .collect();
    Ok(Checkpoint { offsets, records })
}

impl Store {
    /// The phase's last committed checkpoint (empty for a fresh task).
    pub async fn load_checkpoint(&self, task: TaskId) -> Result<Checkpoint, Error> {
        let mut conn = self.reader.acquire().await?;
        let mut db = super::sqlite::Db::lock(&mut conn).await?;
        db.transaction("BEGIN", |db| load(db, task))
    }

    /// Records that `records` are written and the files now end at `offsets`,
    /// in one transaction; call only after the files' bytes are fsynced. A
    /// record id committed twice is a bug in the caller and refused.
    pub async fn commit_checkpoint(
        &self,
        task: TaskId,
        offsets: &[u64],
        records: &[String],
    ) -> Result<(), Error> {
        let offsets = serde_json::to_string(offsets).expect("numbers serialize");
        let records = serde_json::to_string(records).expect("strings serialize");
        let mut conn = self.writer.acquire().await?;
        let mut db = super::sqlite::Db::lock(&mut conn).await?;
        db.transaction("BEGIN IMMEDIATE", |db| {
            let params: [Param; 3] = [task.0.into(), (&offsets).into(), now_ms().into()];
            db.execute(
                "INSERT INTO phase_checkpoints (task_id, offsets, updated_at) VALUES (?, ?, ?) \
                 ON CONFLICT (task_id) DO UPDATE SET offsets = excluded.offsets, \
                 updated_at = excluded.updated_at",
                &params,
            )?;
            db.execute(
                "INSERT INTO phase_records (task_id, record_id) \
                 SELECT ?, value FROM json_each(?)",
                &[task.0.into(), (&records).into()],
            )?;
            Ok(())
        })
    }
}
