//! What a `/metrics` scrape reads from the store: live tasks counted by plan,
//! kind and status, and each live phase task's committed progress and result
//! with its drift events, takeovers and the lease of a running one (of each
//! running shard, for a sharded one). Short reads on a reader connection; the writer
//! never waits for a scrape.
use super::{Error, Store};
use todod_telemetry::render::{PhaseFigures, TaskCount};

impl Store {
    pub async fn telemetry_rows(&self) -> Result<(Vec<TaskCount>, Vec<PhaseFigures>), Error> {
        self.read(|db| {
            let tasks = db.query(
                "SELECT p.name, t.kind, t.status, COUNT(*) FROM tasks t \
                 JOIN plans p ON p.id = t.plan_id \
                 WHERE t.archived_at IS NULL AND p.archived_at IS NULL \
                 GROUP BY p.name, t.kind, t.status ORDER BY p.name, t.kind, t.status",
                &[],
                |row| {
                    Ok(TaskCount {
                        plan: row.text(0)?.to_string(),
                        kind: row.text(1)?.to_string(),
                        status: row.text(2)?.to_string(),
                        count: row.int(3)?.max(0) as u64,
                    })
                },
            )?;
            let phases = db.query(
                "SELECT t.id, t.kind, t.status, t.progress, t.result, \
                 (SELECT COUNT(*) FROM events e WHERE e.task_id = t.id AND e.type = 'drift'), \
                 CASE WHEN t.status = 'in_progress' THEN t.lease_owner END, \
                 (SELECT l.expires_at FROM phase_leases l WHERE l.task_id = t.id), \
                 (SELECT COUNT(*) FROM events e WHERE e.task_id = t.id AND e.type = 'resumed') \
                 FROM tasks t JOIN plans p ON p.id = t.plan_id \
                 WHERE t.kind <> 'todo' AND t.archived_at IS NULL AND p.archived_at IS NULL \
                 ORDER BY t.id",
                &[],
                |row| {
                    let mut figures = PhaseFigures::read(
                        todod_domain::TaskId(row.int(0)?).to_string(),
                        row.text(1)?.to_string(),
                        row.text(2)? == "in_progress",
                        row.opt_text(3)?.unwrap_or(""),
                        row.opt_text(4)?.unwrap_or(""),
                    );
                    figures.drift_events = row.int(5)?.max(0) as u64;
                    // An expiry of 0: handed back at a clean stop.
                    figures.lease = match (row.opt_text(6)?, row.opt_int(7)?) {
                        (_, Some(0)) | (None, _) => None,
                        (Some(holder), expires) => Some((holder.to_string(), expires)),
                    };
                    figures.takeovers = row.int(8)?.max(0) as u64;
                    Ok(figures)
                },
            )?;
            let mut phases = phases;
            // The shards of running sharded tasks, and who holds each.
            let shards = db.query(
                "SELECT s.task_id, s.shard, s.lease_owner, s.expires_at FROM phase_shards s \
                 JOIN tasks t ON t.id = s.task_id WHERE t.status = 'in_progress' \
                 AND s.done = 0 AND s.lease_owner IS NOT NULL AND s.expires_at <> 0 \
                 ORDER BY s.task_id, s.shard",
                &[],
                |row| {
                    Ok((
                        todod_domain::TaskId(row.int(0)?).to_string(),
                        row.int(1)? as u32,
                        row.text(2)?.to_string(),
                        row.opt_int(3)?,
                    ))
                },
            )?;
            for (task, shard, holder, expires) in shards {
                if let Some(p) = phases.iter_mut().find(|p| p.task == task) {
                    p.shard_leases.push((shard, holder, expires));
                }
            }
            Ok((tasks, phases))
        })
        .await
    }
}
