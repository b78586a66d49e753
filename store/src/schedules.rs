//! Task schedules: set and cleared by clients (each a change with its
//! event), found due by the scheduler, and fired: the firing's event, its
//! effect (a reopen) and the next slot in one transaction, so that a kill
//! between them can neither lose a firing nor fire one twice.
use serde_json::json;

use super::read::task_by_id;
use super::request_ids::Once;
use super::sql::Db;
use super::write::{transition, writable_task};
use super::{now_ms, Error, Store, TaskView, WriteContext, DAEMON_ACTOR};
use todod_domain::schedule::Schedule;
use todod_domain::{self as domain, Change, Kind, Status, TaskId};

/// A schedule that is due, with what its firing needs of the task.
/// Whether this daemon fires a due slot (see [`Store::claim_firing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FiringClaim {
    /// Another daemon fires it, or it is not due (yet, or any more).
    Refused,
    /// This daemon fires it; on a shared database, at the database's time
    /// (the slots it passed, and the next, are counted from that).
    Mine { database_now: Option<i64> },
}

#[derive(Debug, Clone)]
pub struct DueSchedule {
    pub task: TaskId,
    pub cron: String,
    pub timezone: String,
    pub action: String,
    pub next_fire_at: i64,
    pub kind: Kind,
    pub status: Status,
    pub spec: Option<String>,
}

fn stored(db: &mut Db, id: TaskId) -> Result<Option<String>, Error> {
    let object = db.dialect().json_object(&[
        ("cron", "cron"),
        ("timezone", "timezone"),
        ("action", "action"),
        ("next_fire_at", "next_fire_at"),
    ]);
    db.query_row(
        &format!("SELECT {object} FROM schedules WHERE task_id = ?"),
        &[id.0.into()],
        |row| Ok(row.text(0)?.to_string()),
    )
}

fn set(
    db: &mut Db,
    id: TaskId,
    schedule: Option<&Schedule>,
    taking: &[Kind],
    now: i64,
    ctx: &WriteContext,
) -> Result<(TaskView, Option<i64>), Error> {
    let (head, revision) = writable_task(db, id, ctx)?;
    if let Some(s) = schedule {
        if !taking.contains(&head.kind) {
            let kinds: Vec<String> = taking.iter().map(|k| k.to_string()).collect();
            return Err(domain::Error::invalid(
                "action",
                format!(
                    "{} {}; it is for {} tasks, and {id} is a {} task",
                    s.action.as_str(),
                    s.action.purpose(),
                    kinds.join(" and "),
                    head.kind
                ),
            )
            .into());
        }
    }
    let old = stored(db, id)?;
    let new = schedule.map(|s| {
        json!({
            "cron": s.cron,
            "timezone": s.timezone,
            "action": s.action.as_str(),
            "next_fire_at": s.next_after(now),
        })
        .to_string()
    });
    if old.is_none() && new.is_none() {
        return Ok((task_by_id(db, id)?, None));
    }
    let changes = [Change::ScheduleChanged { id, old, new }];
    let applied = super::persist::apply(db, head.plan_id, revision, &changes, ctx, now_ms())?;
    Ok((task_by_id(db, id)?, applied.last_seq))
}

/// Ends the `remeasure` schedule of a generation that completed, with its
/// event; the sequence number of that event, if there was one to end.
pub(super) fn end_remeasures(db: &mut Db, id: TaskId) -> Result<Option<i64>, Error> {
    let live = db.query_row(
        "SELECT 1 FROM schedules WHERE task_id = ? AND action = 'remeasure' \
         AND next_fire_at IS NOT NULL",
        &[id.0.into()],
        |_| Ok(()),
    )?;
    if live.is_none() {
        return Ok(None);
    }
    db.execute(
        "UPDATE schedules SET next_fire_at = NULL WHERE task_id = ?",
        &[id.0.into()],
    )?;
    let outcome = json!({
        "action": "remeasure",
        "ended": "the generation completed: its re-measurements end with it",
        "next": null,
    });
    super::history::record(db, id, "schedule_ended", Some(&outcome.to_string()), "").map(Some)
}

/// The newest re-measurement of `id` since `since_ms` that found a
/// projection: the firing's outcome, as recorded.
pub(super) fn last_remeasure(
    db: &mut Db,
    id: TaskId,
    since_ms: i64,
) -> Result<Option<String>, Error> {
    // Only a firing's value is JSON: PostgreSQL may look at it before the type.
    let fired = "CASE WHEN type = 'schedule_fired' THEN new_value END";
    let dialect = db.dialect();
    db.query_row(
        &format!(
            "SELECT new_value FROM events WHERE task_id = ? AND type = 'schedule_fired' \
             AND at >= ? AND {} = 'remeasure' AND {} IS NOT NULL ORDER BY seq DESC LIMIT 1",
            dialect.json_text(fired, "action"),
            dialect.json_text(fired, "projection"),
        ),
        &[id.0.into(), since_ms.into()],
        |row| Ok(row.text(0)?.to_string()),
    )
}

/// The value of the newest event of `kind` on `id` since `since_ms`.
fn newest_event(
    db: &mut Db,
    id: TaskId,
    kind: &str,
    since_ms: i64,
) -> Result<Option<String>, Error> {
    db.query_row(
        "SELECT new_value FROM events WHERE task_id = ? AND type = ? AND at >= ? \
         ORDER BY seq DESC LIMIT 1",
        &[id.0.into(), kind.into(), since_ms.into()],
        |row| Ok(row.text(0)?.to_string()),
    )
}

/// Records a firing and moves the schedule to its next slot; a reopen
/// reopens the task in the same transaction. Nothing happens when the
/// schedule changed since it was found due (`due_at` is no longer its slot).
fn fired(
    db: &mut Db,
    id: TaskId,
    due_at: i64,
    next: Option<i64>,
    outcome: &serde_json::Value,
    reopen: bool,
    now: i64,
) -> Result<((), Option<i64>), Error> {
    let still = db.query_row(
        "SELECT 1 FROM schedules WHERE task_id = ? AND next_fire_at = ?",
        &[id.0.into(), due_at.into()],
        |_| Ok(()),
    )?;
    if still.is_none() {
        return Ok(((), None));
    }
    db.execute(
        "UPDATE schedules SET next_fire_at = ?, last_fired_at = ? WHERE task_id = ?",
        &[next.into(), now.into(), id.0.into()],
    )?;
    let mut seq = None;
    let mut outcome = outcome.clone();
    // Reopened only if it is still completed now, inside this transaction,
    // and if the graph allows it (not while a dependent has started).
    if reopen && task_by_id(db, id)?.status == Status::Completed {
        let ctx = WriteContext {
            actor: DAEMON_ACTOR.to_string(),
            reason: "schedule: reopened".to_string(),
            expected_revision: None,
            request: None,
        };
        match transition(db, id, Status::Pending, &ctx) {
            Ok((_, s)) => {
                seq = s;
                outcome["reopened"] = json!(true);
            }
            Err(Error::Rule(why)) => {
                outcome["reopened"] = json!(false);
                outcome["why"] = json!(why.to_string());
            }
            Err(other) => return Err(other),
        }
    } else if reopen {
        outcome["reopened"] = json!(false);
        outcome["why"] = json!("not completed: the chore is still open");
    }
    let event = super::history::record(db, id, "schedule_fired", Some(&outcome.to_string()), "")?;
    Ok(((), Some(seq.map_or(event, |s: i64| s.max(event)))))
}

impl Store {
    /// Sets (or with `None` clears) a task's schedule; its first slot is
    /// the first after `now`.
    /// Sets (or, with `None`, clears) `id`'s schedule. `taking` are the
    /// kinds whose tasks take the schedule's action (the phase table's
    /// word): a task of another kind refuses it.
    pub async fn set_schedule(
        &self,
        id: TaskId,
        schedule: Option<Schedule>,
        taking: &[Kind],
        now: i64,
        ctx: &WriteContext,
    ) -> Result<Once<TaskView>, Error> {
        self.write_once(ctx, |db| set(db, id, schedule.as_ref(), taking, now, ctx))
            .await
    }

    /// Schedules whose slot is at or before `now`, of tasks that are live:
    /// a cancelled or archived task's schedule stops, and so does every
    /// schedule of an archived plan.
    pub async fn due_schedules(&self, now: i64) -> Result<Vec<DueSchedule>, Error> {
        self.read(|db| {
            db.query(
                "SELECT s.task_id, s.cron, s.timezone, s.action, s.next_fire_at, t.kind, \
                 t.status, t.spec FROM schedules s JOIN tasks t ON t.id = s.task_id \
                 JOIN plans p ON p.id = t.plan_id \
                 WHERE s.next_fire_at IS NOT NULL AND s.next_fire_at <= ? \
                 AND t.status != 'cancelled' AND t.archived_at IS NULL AND p.archived_at IS NULL \
                 ORDER BY s.next_fire_at",
                &[now.into()],
                |row| {
                    Ok(DueSchedule {
                        task: TaskId(row.int(0)?),
                        cron: row.text(1)?.to_string(),
                        timezone: row.text(2)?.to_string(),
                        action: row.text(3)?.to_string(),
                        next_fire_at: row.int(4)?,
                        kind: row.parsed(5, "kind")?,
                        status: row.parsed(6, "status")?,
                        spec: row.opt_text(7)?.map(str::to_string),
                    })
                },
            )
        })
        .await
    }

    /// Milliseconds re-measurements held the runs of task `id` since
    /// `since_ms`, by their recorded firings.
    pub async fn remeasure_held_ms(&self, id: TaskId, since_ms: i64) -> Result<i64, Error> {
        self.read(|db| {
            let fired = "CASE WHEN type = 'schedule_fired' THEN new_value END";
            let dialect = db.dialect();
            db.query_row(
                &format!(
                    "SELECT CAST(ROUND(COALESCE(SUM({}), 0) * 1000) AS BIGINT) FROM events \
                     WHERE task_id = ? AND type = 'schedule_fired' AND at >= ? AND {} = 'remeasure'",
                    dialect.json_number(fired, "held_seconds"),
                    dialect.json_text(fired, "action"),
                ),
                &[id.0.into(), since_ms.into()],
                |row| row.int(0),
            )
            .map(Option::unwrap_or_default)
        })
        .await
    }

    /// The newest re-measurement of `id` since `since_ms` that found a
    /// projection (see [`last_remeasure`]).
    pub async fn last_remeasure(&self, id: TaskId, since_ms: i64) -> Result<Option<String>, Error> {
        self.read(|db| last_remeasure(db, id, since_ms)).await
    }

    /// The value of the newest `calibration` event of `id` since `since_ms`:
    /// a run calibrated once is not calibrated again after a restart.
    pub async fn last_calibration(
        &self,
        id: TaskId,
        since_ms: i64,
    ) -> Result<Option<String>, Error> {
        self.read(|db| newest_event(db, id, "calibration", since_ms))
            .await
    }

    /// The earliest slot of any live task's schedule.
    pub async fn next_schedule_slot(&self) -> Result<Option<i64>, Error> {
        self.read(|db| {
            db.query_row(
                "SELECT MIN(s.next_fire_at) FROM schedules s JOIN tasks t ON t.id = s.task_id \
                 JOIN plans p ON p.id = t.plan_id \
                 WHERE t.status != 'cancelled' AND t.archived_at IS NULL AND p.archived_at IS NULL",
                &[],
                |row| row.opt_int(0),
            )
            .map(Option::flatten)
        })
        .await
    }

    /// Claims the firing of `id`'s slot `due_at` for daemon run `holder`,
    /// for `term` (the firing's work must end within it, or another daemon
    /// may fire the slot too). Always this daemon's when the database is
    /// not shared. Refused when the slot is not due on the database's clock
    /// (a daemon whose own clock runs ahead fires nothing early) or no
    /// longer the schedule's, when another daemon's claim on it is live,
    /// or (`holder_only`: a re-measurement, which holds the run through the
    /// gate of the daemon running it) when a run of another daemon holds
    /// the task, live or not.
    pub async fn claim_firing(
        &self,
        id: TaskId,
        due_at: i64,
        holder: &str,
        term: std::time::Duration,
        holder_only: bool,
    ) -> Result<FiringClaim, Error> {
        if !self.is_shared() {
            return Ok(FiringClaim::Mine { database_now: None });
        }
        let holder = holder.to_string();
        let term_ms = term.as_millis() as i64;
        self.write(move |db| {
            let now = db.clock_ms()?;
            let due = db.query_row(
                "SELECT 1 FROM schedules WHERE task_id = ? AND next_fire_at = ? \
                 AND next_fire_at <= ?",
                &[id.0.into(), due_at.into(), now.into()],
                |_| Ok(()),
            )?;
            if due.is_none() {
                return Ok((FiringClaim::Refused, None));
            }
            let claimed = db.query_row(
                "SELECT holder FROM schedule_claims WHERE task_id = ? AND due_at = ? \
                 AND expires_at > ?",
                &[id.0.into(), due_at.into(), now.into()],
                |row| Ok(row.text(0)?.to_string()),
            )?;
            if claimed.is_some_and(|h| h != holder) {
                return Ok((FiringClaim::Refused, None));
            }
            if holder_only {
                let run_holder = db.query_row(
                    "SELECT t.lease_owner FROM tasks t WHERE t.id = ? AND t.status = 'in_progress'",
                    &[id.0.into()],
                    |row| Ok(row.opt_text(0)?.map(str::to_string)),
                )?;
                let prefix = format!("{holder}.");
                if run_holder
                    .flatten()
                    .is_some_and(|owner| !owner.starts_with(&prefix))
                {
                    return Ok((FiringClaim::Refused, None));
                }
            }
            db.execute(
                "INSERT INTO schedule_claims (task_id, due_at, holder, expires_at) \
                 VALUES (?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET \
                 due_at = excluded.due_at, holder = excluded.holder, \
                 expires_at = excluded.expires_at",
                &[
                    id.0.into(),
                    due_at.into(),
                    holder.as_str().into(),
                    (now + term_ms).into(),
                ],
            )?;
            Ok((
                FiringClaim::Mine {
                    database_now: Some(now),
                },
                None,
            ))
        })
        .await
    }

    /// Records a firing (see [`fired`]).
    pub async fn record_firing(
        &self,
        id: TaskId,
        due_at: i64,
        next: Option<i64>,
        outcome: &serde_json::Value,
        reopen: bool,
    ) -> Result<(), Error> {
        self.write(|db| fired(db, id, due_at, next, outcome, reopen, now_ms()))
            .await
    }
}
