//! `wait`: block until a task, or every task of a plan, has ended, as `gh run
//! watch --exit-status` and `kubectl wait` do; the exit code says how it ended.
//! It follows the plan's event stream and looks at the tasks again only when a
//! status changed, so a long wait costs the daemon nothing between changes.
use std::time::Duration;

use anyhow::Result;
use futures::StreamExt;
use todod::proto::{GetTaskRequest, ListTasksRequest, Task, WatchPlanRequest};

use super::{emit, emit_json, Ctx};
use crate::error::{CliError, Exit};
use crate::json;

/// How a wait ended, if it has.
fn outcome(tasks: &[Task]) -> Option<Exit> {
    let open = tasks.iter().any(|t| {
        t.status == "in_progress" || (t.status == "pending" && t.readiness != "blocked_by_failure")
    });
    if open {
        return None;
    }
    if tasks
        .iter()
        .any(|t| t.status == "failed" || t.readiness == "blocked_by_failure")
    {
        Some(Exit::Failed)
    } else if tasks.iter().any(|t| t.status == "cancelled") {
        Some(Exit::Cancelled)
    } else {
        Some(Exit::Ok)
    }
}

pub async fn wait(
    ctx: &Ctx,
    task: Option<String>,
    plan: Option<String>,
    timeout: Option<Duration>,
) -> Result<()> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut client = ctx.client().await?;
    let plan = match (&task, plan) {
        (_, Some(plan)) => plan,
        (Some(id), None) => {
            client
                .get_task(GetTaskRequest { id: id.clone() })
                .await?
                .into_inner()
                .plan
        }
        (None, None) => return Err(CliError::usage("name a TASK or --plan PLAN").into()),
    };
    let mut events = client
        .watch_plan(WatchPlanRequest {
            plan: plan.clone(),
            after_seq: 0,
        })
        .await?
        .into_inner();
    let mut look = true;
    loop {
        if look {
            let tasks = match &task {
                Some(id) => vec![client
                    .get_task(GetTaskRequest { id: id.clone() })
                    .await?
                    .into_inner()],
                None => {
                    client
                        .list_tasks(ListTasksRequest {
                            plan: plan.clone(),
                            view: "basic".into(),
                            page_size: 10_000,
                            ..Default::default()
                        })
                        .await?
                        .into_inner()
                        .tasks
                }
            };
            if let Some(exit) = outcome(&tasks) {
                return report(ctx, &tasks, exit, task.is_some());
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
            // Only a change of status (or of the graph) can end a wait.
            Some(Ok(e)) => {
                look = matches!(
                    e.r#type.as_str(),
                    "status_changed"
                        | "task_created"
                        | "archived"
                        | "restored"
                        | "dependency_added"
                        | "dependency_removed"
                ) && task
                    .as_ref()
                    .is_none_or(|id| *id == e.task_id || e.task_id.is_empty());
            }
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

fn report(ctx: &Ctx, tasks: &[Task], exit: Exit, one: bool) -> Result<()> {
    if ctx.json {
        emit_json(&serde_json::json!({
            "outcome": match exit {
                Exit::Ok => "completed",
                Exit::Cancelled => "cancelled",
                _ => "failed",
            },
            "tasks": tasks.iter().map(json::task).collect::<Vec<_>>(),
        }))?;
    } else if one {
        let t = &tasks[0];
        let mut line = format!("{} {}", t.id, t.status);
        if !t.error.is_empty() {
            line.push_str(&format!(": {}", t.error.lines().next().unwrap_or("")));
        }
        emit(&crate::safe::escape(&line))?;
    } else {
        let ended: Vec<String> = tasks
            .iter()
            .filter(|t| t.status == "failed" || t.readiness == "blocked_by_failure")
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
