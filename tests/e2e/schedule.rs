//! Schedules on a test clock: firings recorded as events, a recurring chore
//! reopened, one catch-up firing for a daemon that missed several slots, no
//! firing for a cancelled task, probes of a phase task's endpoints, and
//! refusals with the field and the reason. Nothing here waits for real
//! minutes: the daemon's clock is moved by the test.
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use todod::scheduler::ManualClock;
use todod::server::Options;
use todod_e2e::{item, proto, transition, write_request, Client, ClosedPort, TestDaemon};
use tonic::Code;

/// 2026-12-01T10:02:00Z: three minutes before a */5 slot.
const START: i64 = 1_796_119_320_000;
const MINUTE: Duration = Duration::from_secs(60);

fn options(clock: &Arc<ManualClock>) -> Options {
    Options {
        clock: Some(clock.clone()),
        ..Options::default()
    }
}

async fn schedule(
    c: &mut Client,
    task: &str,
    cron: &str,
    action: &str,
) -> Result<proto::Task, tonic::Status> {
    c.set_schedule(proto::SetScheduleRequest {
        task_id: task.into(),
        cron: cron.into(),
        action: action.into(),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner())
}

async fn firings(c: &mut Client, task: &str) -> Vec<Value> {
    c.list_events(proto::ListEventsRequest {
        task_id: task.into(),
        limit: 1000,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .events
    .into_iter()
    .filter(|e| e.r#type == "schedule_fired")
    .map(|e| serde_json::from_str(&e.new_value).unwrap())
    .collect()
}

/// The firings of `task`, once it has `n`.
async fn until_fired(c: &mut Client, plan: &str, task: &str, n: usize) -> Vec<Value> {
    todod_e2e::wait_events(c, plan, task, "schedule_fired", n)
        .await
        .iter()
        .map(|e| serde_json::from_str(&e.new_value).unwrap())
        .collect()
}

async fn status(c: &mut Client, task: &str) -> String {
    c.get_task(proto::GetTaskRequest { id: task.into() })
        .await
        .unwrap()
        .into_inner()
        .status
}

async fn todo(c: &mut Client, plan: &str, items: &[(&str, &str)]) -> Vec<String> {
    let items = items
        .iter()
        .map(|(content, status)| item("", content, status, "medium"))
        .collect();
    c.write_todos(write_request(plan, items))
        .await
        .unwrap()
        .into_inner()
        .todos
        .into_iter()
        .map(|t| t.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chore_reopens_at_each_slot_and_a_late_daemon_fires_once() {
    let clock = ManualClock::new(START);
    let daemon = TestDaemon::start_with(options(&clock)).await;
    let mut c = daemon.client().await;
    let ids = todo(
        &mut c,
        "chores",
        &[
            ("rotate the logs", "completed"),
            ("water the plants", "pending"),
        ],
    )
    .await;
    let (chore, cancelled) = (&ids[0], &ids[1]);
    let set = schedule(&mut c, chore, "*/5 * * * *", "reopen")
        .await
        .unwrap();
    let s = set.schedule.expect("the task shows its schedule");
    assert_eq!(s.next_fire_at, "2026-12-01T10:05:00.000Z");
    schedule(&mut c, cancelled, "*/5 * * * *", "reopen")
        .await
        .unwrap();
    c.transition_task(transition(cancelled, "cancelled"))
        .await
        .unwrap();

    // Before the slot: nothing. At it: one firing, and the chore is open.
    clock.advance(MINUTE * 3);
    let fired = until_fired(&mut c, "chores", chore, 1).await;
    assert_eq!(fired[0]["slot"], "2026-12-01T10:05:00.000Z");
    assert_eq!(fired[0]["missed_slots"], 0);
    assert_eq!(fired[0]["reopened"], true);
    assert_eq!(status(&mut c, chore).await, "pending");
    // A cancelled task's schedule has stopped: the same slot passed it by.
    assert!(firings(&mut c, cancelled).await.is_empty());

    // Still open at the next slot: it fires, and says it left it open.
    clock.advance(MINUTE * 5);
    let fired = until_fired(&mut c, "chores", chore, 2).await;
    assert_eq!(fired[1]["reopened"], false, "{}", fired[1]);

    // Done again, then the daemon is down for an hour: twelve slots pass,
    // and it fires once when it is back.
    c.transition_task(transition(chore, "completed"))
        .await
        .unwrap();
    let dir = daemon.stop().await;
    clock.advance(MINUTE * 60);
    let daemon = TestDaemon::start_in(dir, options(&clock)).await;
    let mut c = daemon.client().await;
    let fired = until_fired(&mut c, "chores", chore, 3).await;
    assert_eq!(fired[2]["missed_slots"], 11, "{}", fired[2]);
    assert_eq!(fired[2]["slot"], "2026-12-01T11:10:00.000Z");
    assert_eq!(fired[2]["next"], "2026-12-01T11:15:00.000Z");
    assert_eq!(status(&mut c, chore).await, "pending");
    let shown = c
        .get_task(proto::GetTaskRequest { id: chore.clone() })
        .await
        .unwrap()
        .into_inner()
        .schedule
        .unwrap();
    assert_eq!(shown.next_fire_at, "2026-12-01T11:15:00.000Z");
    assert!(!shown.last_fired_at.is_empty());

    // Cleared: the task keeps no schedule.
    let cleared = c
        .set_schedule(proto::SetScheduleRequest {
            task_id: chore.clone(),
            clear: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cleared.schedule.is_none());
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_records_what_each_endpoint_said() {
    let clock = ManualClock::new(START);
    let dead = ClosedPort::new();
    let dir = tempfile::tempdir().unwrap();
    let daemon = TestDaemon::start_with(options(&clock)).await;
    let mut c = daemon.client().await;
    c.write_todos(write_request("gen", vec![])).await.unwrap();
    // Held (not started): the probe is about the endpoints, not the run.
    let spec = serde_json::json!({
        "prompts": todod_e2e::fixtures::fixture("prompts/openai_messages.jsonl"),
        "output": dir.path().join("out.jsonl"),
        "endpoints": [dead.url()],
        "model": "m",
        "auto_start": false,
    });
    let task = c
        .create_task(proto::CreateTaskRequest {
            plan: "gen".into(),
            content: "generate".into(),
            kind: "generation".into(),
            spec_json: spec.to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    let refused = schedule(&mut c, &task, "*/5 * * * *", "reopen")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().starts_with("action:"),
        "{}",
        refused.message()
    );
    schedule(&mut c, &task, "*/5 * * * *", "probe")
        .await
        .unwrap();
    clock.advance(MINUTE * 3);
    let fired = until_fired(&mut c, "gen", &task, 1).await;
    let answers = fired[0]["endpoints"].as_array().unwrap();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0]["endpoint"], dead.url());
    assert_eq!(answers[0]["ok"], false);
    assert_eq!(answers[0]["error"], "cannot connect");
    assert_eq!(
        status(&mut c, &task).await,
        "pending",
        "a probe does not run the task"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_schedules_are_refused_with_the_field_and_the_reason() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let ids = todo(&mut c, "p", &[("a chore", "completed")]).await;
    for (cron, tz, action, field) in [
        ("61 * * * *", "", "reopen", "cron"),
        ("* * *", "", "reopen", "cron"),
        ("", "", "reopen", "cron"),
        ("*/5 * * * *", "Mars/Olympus", "reopen", "timezone"),
        ("*/5 * * * *", "", "explode", "action"),
        // Re-measuring is for a generation, not a plain task.
        ("*/5 * * * *", "", "remeasure", "action"),
    ] {
        let e = c
            .set_schedule(proto::SetScheduleRequest {
                task_id: ids[0].clone(),
                cron: cron.into(),
                timezone: tz.into(),
                action: action.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{cron} {tz} {action}");
        assert!(
            e.message().starts_with(&format!("{field}:")),
            "{cron} {tz} {action}: {}",
            e.message()
        );
    }
    let missing = schedule(&mut c, "t999", "*/5 * * * *", "reopen")
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let task = c
        .get_task(proto::GetTaskRequest { id: ids[0].clone() })
        .await
        .unwrap()
        .into_inner();
    assert!(task.schedule.is_none(), "a refused schedule was stored");
}
