//! Killing the real daemon inside a phase run, and knowing that the kill
//! landed there: after committed progress, before the end, and taken over by
//! the next daemon. Every kill test kills through here.
use std::path::Path;
use std::time::Duration;

use crate::{proto, task_events, until, wait_task, Client, RealDaemon};

fn has_ended(t: &proto::Task) -> bool {
    ["completed", "failed", "cancelled"].contains(&t.status.as_str())
}

async fn get_task(c: &mut Client, task: &str) -> proto::Task {
    c.get_task(proto::GetTaskRequest { id: task.into() })
        .await
        .unwrap()
        .into_inner()
}

/// A kill -9 of the real daemon that landed while a task ran: the run it
/// ended had committed `done` (and `failed`) of `total`, by its last
/// progress event before the kill, and the next daemon took the task over
/// from it (its `resumed` event, at seq `resumed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    pub task: String,
    pub done: i64,
    pub failed: i64,
    pub total: i64,
    pub resumed: i64,
}

/// Kills the real daemon with SIGKILL while `task` of `plan` runs, and
/// starts it again on `state`. First it waits for the task to commit
/// progress (a `progress` event) past `after`, the task's last kill if any:
/// an event after that kill's resume, with more done than the killed run
/// had and not yet everything; then it waits `delay` more (a moment inside
/// the work), kills, and follows the next daemon until it has taken the
/// task over (the kill landed mid-run: returned) or the task has ended (it
/// ended before the kill could land: `None`). Follows the plan's events,
/// never polls; a stream quiet for two minutes fails the caller.
pub async fn kill_while_running(
    daemon: &mut RealDaemon,
    state: &Path,
    plan: &str,
    task: &str,
    after: Option<&Kill>,
    delay: Duration,
) -> Option<Kill> {
    use futures::StreamExt;
    let (since, past) = after.map_or((0, 0), |k| (k.resumed, k.done));
    let mut c = daemon.client().await;
    let mut events = c
        .watch_plan(proto::WatchPlanRequest {
            plan: plan.into(),
            after_seq: since,
            from_now: false,
        })
        .await
        .unwrap()
        .into_inner();
    let (seq, done, failed, total) = loop {
        let e = tokio::time::timeout(Duration::from_secs(120), events.next())
            .await
            .unwrap_or_else(|_| {
                panic!("{task}: no event for two minutes while waiting for progress past {past}")
            })
            .expect("the watch ended")
            .unwrap();
        if e.task_id != task {
            continue;
        }
        match e.r#type.as_str() {
            "progress" => {
                let p: serde_json::Value = serde_json::from_str(&e.new_value).unwrap_or_default();
                let n = |key: &str| p[key].as_i64().unwrap_or(0);
                let (done, failed, total) = (n("done"), n("failed"), n("total"));
                if done > past && (total == 0 || done + failed < total) {
                    break (e.seq, done, failed, total);
                }
            }
            "status_changed" if has_ended(&get_task(&mut c, task).await) => return None,
            _ => {}
        }
    };
    tokio::time::sleep(delay).await;
    daemon.kill9();
    *daemon = RealDaemon::spawn(state);
    let mut c = daemon.client().await;
    // The kill landed if the next daemon took the task over from the run it
    // ended; a task that ended before the kill has nothing to take over.
    let resumed = until(
        &mut c,
        plan,
        "the resume after a kill",
        async |c: &mut Client| {
            let resumed = task_events(c, task, "resumed")
                .await
                .into_iter()
                .find(|e| e.seq > seq);
            if let Some(e) = resumed {
                return Some(Some(e.seq));
            }
            has_ended(&get_task(c, task).await).then_some(None)
        },
    )
    .await?;
    Some(Kill {
        task: task.to_string(),
        done,
        failed,
        total,
        resumed,
    })
}

/// Kills the daemon inside `task`'s run again and again (each kill after
/// the run committed past the last, `delay()` later), up to `most` times or
/// until the run ends first; returns the kills that landed, in order. The
/// caller asserts its floor.
pub async fn kill_repeatedly(
    daemon: &mut RealDaemon,
    state: &Path,
    plan: &str,
    task: &str,
    most: usize,
    mut delay: impl FnMut() -> Duration,
) -> Vec<Kill> {
    let mut kills: Vec<Kill> = Vec::new();
    while kills.len() < most {
        let last = kills.last();
        match kill_while_running(daemon, state, plan, task, last, delay()).await {
            Some(kill) => kills.push(kill),
            None => break,
        }
    }
    kills
}

/// Prints where the kills landed and asserts at least `floor` of them did
/// (a run that ended first was too short to test its resume); returns how
/// many landed. `replay` says how to run the same test again.
pub fn assert_kill_floor(kills: &[Kill], floor: usize, replay: &str) -> usize {
    let done: Vec<i64> = kills.iter().map(|k| k.done).collect();
    println!("{} kills at {done:?} records done ({replay})", kills.len());
    assert!(
        kills.len() >= floor,
        "the run ended after {} kills mid-run, {floor} wanted; make it longer ({replay})",
        kills.len()
    );
    kills.len()
}

/// Runs `tasks` of `plan` (a pipeline's steps, in order) to their ends on
/// the real daemon, killing it once inside each while it runs (see
/// `kill_while_running`); asserts each completed and returns them as they
/// ended, with the kills that landed. A step that commits all its work at
/// once cannot be killed mid-run from outside: the caller asserts which
/// steps must have been.
pub async fn run_killing_each(
    daemon: &mut RealDaemon,
    state: &Path,
    plan: &str,
    tasks: &[String],
) -> (Vec<proto::Task>, Vec<Kill>) {
    let mut kills = Vec::new();
    let mut ended = Vec::new();
    for task in tasks {
        kills.extend(kill_while_running(daemon, state, plan, task, None, Duration::ZERO).await);
        let mut c = daemon.client().await;
        let t = wait_task(&mut c, plan, task, has_ended).await;
        assert_eq!(t.status, "completed", "{task} ({}): {}", t.kind, t.error);
        ended.push(t);
    }
    eprintln!("kills: {kills:?}");
    (ended, kills)
}
