//! `wait`: block until a task, or every task of a plan, has ended, as `gh run
//! watch --exit-status` and `kubectl wait` do; the exit code says how it ended.
//! It follows the plan's event stream and looks at the tasks again only when a
//! status changed, so a long wait costs the daemon nothing between changes.
use std::time::Duration;

use anyhow::Result;
use futures::StreamExt;
use todod_proto::{GetTaskRequest, ListTasksRequest, Task, WatchPlanRequest};

use super::{emit, emit_json, Ctx};
use crate::error::{CliError, Exit};
use crate::json;

/// The tasks that can no longer run on their own: pending behind a failed
/// or cancelled task, however far up the graph (the daemon's readiness looks
/// at direct dependencies only).
fn stuck(tasks: &[Task]) -> std::collections::HashSet<String> {
    use std::collections::{HashMap, HashSet};
    let by_id: HashMap<&str, &Task> = tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut stuck: HashSet<String> = HashSet::new();
    // Repeat until nothing changes: a plan is small next to this loop's cost.
    loop {
        let before = stuck.len();
        for t in tasks.iter().filter(|t| t.status == "pending") {
            let behind = t.depends_on.iter().any(|d| {
                stuck.contains(d)
                    || by_id
                        .get(d.as_str())
                        .is_some_and(|dep| dep.status == "failed" || dep.status == "cancelled")
            });
            if behind {
                stuck.insert(t.id.clone());
            }
        }
        if stuck.len() == before {
            return stuck;
        }
    }
}

/// A change that can end a wait (or a watch): any task's status, or the
/// graph (a dependency failing strands the task waited for).
pub(super) fn may_end(e: &todod_proto::Event) -> bool {
    matches!(
        e.r#type.as_str(),
        "status_changed"
            | "task_created"
            | "archived"
            | "restored"
            | "dependency_added"
            | "dependency_removed"
    )
}

/// How a wait for `watched` (all of them when empty) ended, if it has.
pub(super) fn outcome(tasks: &[Task], watched: &[String]) -> Option<Exit> {
    let stuck = stuck(tasks);
    let mine: Vec<&Task> = tasks
        .iter()
        .filter(|t| watched.is_empty() || watched.contains(&t.id))
        .collect();
    let open = mine
        .iter()
        .any(|t| t.status == "in_progress" || (t.status == "pending" && !stuck.contains(&t.id)));
    if open {
        return None;
    }
    if mine
        .iter()
        .any(|t| t.status == "failed" || stuck.contains(&t.id))
    {
        Some(Exit::Failed)
    } else if mine.iter().any(|t| t.status == "cancelled") {
        Some(Exit::Cancelled)
    } else {
        Some(Exit::Ok)
    }
}

/// Every task of `plan` as a listing shows it, and the plan's revision.
pub(super) async fn plan_tasks(
    client: &mut crate::client::Client,
    plan: &str,
) -> Result<(i64, Vec<Task>)> {
    let page = client
        .list_tasks(ListTasksRequest {
            plan: plan.to_string(),
            view: "basic".into(),
            page_size: 10_000,
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok((page.plan_revision, page.tasks))
}

pub async fn wait(
    ctx: &Ctx,
    task: Option<String>,
    plan: Option<String>,
    timeout: Option<Duration>,
) -> Result<()> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut client = ctx.client().await?;
    // The task's own id as the daemon writes it (`t042` is `t42`).
    let (plan, watched) = match (&task, plan) {
        (_, Some(plan)) => (plan, Vec::new()),
        (Some(id), None) => {
            let t = client
                .get_task(GetTaskRequest { id: id.clone() })
                .await?
                .into_inner();
            (t.plan, vec![t.id])
        }
        (None, None) => return Err(CliError::usage("name a TASK or --plan PLAN").into()),
    };
    // From now: the look below sees where it stands, the stream what
    // changes after it (subscribed first, so nothing falls in between).
    let mut events = client
        .watch_plan(WatchPlanRequest {
            plan: plan.clone(),
            from_now: true,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut look = true;
    loop {
        if look {
            if let (_, Some((exit, shown))) = ended(&mut client, &plan, &watched).await? {
                return report(ctx, &shown, exit, !watched.is_empty());
            }
        }
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, events.next()).await {
                Ok(next) => next,
                Err(_) => {
                    let what = task.clone().unwrap_or_else(|| format!("plan {plan}"));
                    return Err(CliError::new(
                        Exit::TimedOut,
                        format!("{what} had not ended when --timeout passed"),
                    )
                    .into());
                }
            },
            None => events.next().await,
        };
        match next {
            // A change of any task's status, or of the graph, can end the
            // wait (a dependency failing strands the task waited for).
            Some(Ok(e)) => look = may_end(&e),
            Some(Err(status)) => return Err(status.into()),
            None => {
                return Err(CliError::new(
                    Exit::Unreachable,
                    "the daemon ended the event stream (shutting down?); wait again",
                )
                .into())
            }
        }
    }
}

/// The plan's revision, and whether `watched` (every task of `plan` when
/// empty) has ended: how, and the tasks to show for it (the watched ones in
/// full, else the plan's). `wait` and `watch` end on this.
pub(super) async fn ended(
    client: &mut crate::client::Client,
    plan: &str,
    watched: &[String],
) -> Result<(i64, Option<(Exit, Vec<Task>)>)> {
    let (revision, mut tasks) = plan_tasks(client, plan).await?;
    // A watched task the listing leaves out (archived, or past its first
    // 10,000 tasks) is asked for by itself.
    for id in watched {
        if !tasks.iter().any(|t| &t.id == id) {
            let t = client
                .get_task(GetTaskRequest { id: id.clone() })
                .await?
                .into_inner();
            if t.archived {
                return Err(CliError::new(
                    Exit::Cancelled,
                    format!("{id} was archived (left out of a todo list); it will not run"),
                )
                .into());
            }
            tasks.push(t);
        }
    }
    let Some(exit) = outcome(&tasks, watched) else {
        return Ok((revision, None));
    };
    if watched.is_empty() {
        return Ok((revision, Some((exit, tasks))));
    }
    let mut full = Vec::new();
    for id in watched {
        full.push(
            client
                .get_task(GetTaskRequest { id: id.clone() })
                .await?
                .into_inner(),
        );
    }
    Ok((revision, Some((exit, full))))
}

/// How a wait ended, as JSON: the outcome and the tasks as they ended.
pub(super) fn outcome_json(tasks: &[Task], exit: Exit) -> serde_json::Value {
    serde_json::json!({
        "outcome": match exit {
            Exit::Ok => "completed",
            Exit::Cancelled => "cancelled",
            _ => "failed",
        },
        "tasks": tasks.iter().map(json::task).collect::<Vec<_>>(),
    })
}

pub(super) fn report(ctx: &Ctx, tasks: &[Task], exit: Exit, one: bool) -> Result<()> {
    if ctx.json {
        emit_json(&outcome_json(tasks, exit))?;
    } else if one {
        let t = &tasks[0];
        let mut line = format!("{} {}", t.id, t.status);
        if t.status == "pending" {
            line.push_str(": cannot run, a task it depends on failed or was cancelled");
        }
        if !t.error.is_empty() {
            line.push_str(&format!(": {}", t.error.lines().next().unwrap_or("")));
        }
        emit(&crate::safe::escape(&line))?;
    } else {
        let stuck = stuck(tasks);
        let ended: Vec<String> = tasks
            .iter()
            .filter(|t| t.status == "failed" || stuck.contains(&t.id))
            .map(|t| {
                if t.status == "failed" {
                    format!("{} failed: {}", t.id, t.error.lines().next().unwrap_or(""))
                } else {
                    format!("{} cannot run: a dependency failed", t.id)
                }
            })
            .collect();
        let summary = format!("{} tasks ended", tasks.len());
        emit(&crate::safe::escape(&if ended.is_empty() {
            summary
        } else {
            format!("{summary}\n{}", ended.join("\n"))
        }))?;
    }
    match exit {
        Exit::Ok => Ok(()),
        // The outcome was printed; the exit code alone says it.
        other => Err(CliError::new(other, String::new()).into()),
    }
}
