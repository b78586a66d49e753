//! What the status page reads beyond the usual listings: a running phase's
//! progress history as points (read on from the last one a viewer has, so a
//! day of once-a-second progress is read once, not on every update), and a
//! task's notable events (schedule firings, drift, calibration, restarts).
use super::{Error, Store};
use todod_domain::TaskId;
use todod_proto::results::ProgressCounts;

/// One progress report: when, and how many records were answered (written
/// or failed) by then, with the output tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgressPoint {
    pub seq: i64,
    pub at_ms: i64,
    pub answered: u64,
    pub tokens: u64,
}

/// An event a person watching a run wants to see.
#[derive(Debug, Clone, PartialEq)]
pub struct NotableEvent {
    pub event_type: String,
    pub at_ms: i64,
    /// The event's value (a JSON object for drift and calibration), or "".
    pub value: String,
    pub reason: String,
}

/// The event types [`Store::notable_events`] returns.
pub const NOTABLE: [&str; 9] = [
    "schedule_fired",
    "schedule_ended",
    "drift",
    "calibration",
    "errors",
    "resumed",
    "forked",
    "unreachable",
    "server",
];

impl Store {
    /// The progress reports of `task` after `after_seq`, oldest first, at
    /// most `limit` of them.
    pub async fn progress_points(
        &self,
        task: TaskId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<ProgressPoint>, Error> {
        self.read(|db| {
            let dialect = db.dialect();
            db.query(
                &format!(
                    "SELECT seq, at, CAST(COALESCE({}, 0) + COALESCE({}, 0) AS BIGINT), \
                     CAST(COALESCE({}, 0) AS BIGINT) \
                     FROM events WHERE task_id = ? AND type = 'progress' AND seq > ? \
                     ORDER BY seq LIMIT ?",
                    dialect.json_number("new_value", ProgressCounts::DONE),
                    dialect.json_number("new_value", ProgressCounts::FAILED),
                    dialect.json_number("new_value", ProgressCounts::TOKENS),
                ),
                &[task.0.into(), after_seq.into(), (limit as i64).into()],
                |row| {
                    Ok(ProgressPoint {
                        seq: row.int(0)?,
                        at_ms: row.int(1)?,
                        answered: row.int(2)?.max(0) as u64,
                        tokens: row.int(3)?.max(0) as u64,
                    })
                },
            )
        })
        .await
    }

    /// The newest `limit` notable events of `task`, newest first.
    pub async fn notable_events(
        &self,
        task: TaskId,
        limit: usize,
    ) -> Result<Vec<NotableEvent>, Error> {
        self.read(|db| {
            // `type <> 'progress'` lets the partial index serve the query.
            let sql = format!(
                "SELECT type, at, COALESCE(new_value, ''), reason FROM events \
                 WHERE task_id = ? AND type <> 'progress' AND type IN ({}) \
                 ORDER BY seq DESC LIMIT ?",
                NOTABLE.map(|t| format!("'{t}'")).join(", ")
            );
            db.query(&sql, &[task.0.into(), (limit as i64).into()], |row| {
                Ok(NotableEvent {
                    event_type: row.text(0)?.to_string(),
                    at_ms: row.int(1)?,
                    value: row.text(2)?.to_string(),
                    reason: row.text(3)?.to_string(),
                })
            })
        })
        .await
    }
}
