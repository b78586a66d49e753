//! `watch`: a plan's (or every plan's) events as they happen, a line each,
//! from the present unless asked for the history, reconnecting with backoff
//! from the last one seen. Watching a task or a plan ends when it has ended,
//! with `wait`'s exit code; on a terminal that is the live screen
//! (`status PLAN --watch`) instead of lines.
use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Result;
use todod_proto::{Event, GetTaskRequest, WatchPlanRequest};
use tonic::Code;

use super::{emit, Ctx};
use crate::client::Client;
use crate::error::{CliError, Exit};
use crate::{json, render};

const MIN_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    /// What happens from now on.
    Now,
    /// After this event (0: the whole history first).
    After(i64),
}

/// What a watch follows, and so when it ends.
struct Target {
    /// "" for every plan.
    plan: String,
    /// Only this task's events; the watch ends when the task has.
    task: Option<String>,
    /// Whether the watch ends when what it follows has ended.
    ends: bool,
}

/// Runs until what it follows has ended (a task or a plan, exit code as
/// `wait`'s), or Ctrl-C (exit 0), a non-transient error, or stdout closing.
pub async fn watch(
    ctx: &Ctx,
    task: Option<String>,
    plan: Option<String>,
    start: Start,
    limit: i32,
) -> Result<()> {
    let target = match (task, plan) {
        (Some(id), _) => {
            let mut client = ctx.client().await?;
            let t = client.get_task(GetTaskRequest { id }).await?.into_inner();
            Target {
                plan: t.plan,
                task: Some(t.id),
                ends: true,
            }
        }
        (None, Some(plan)) => Target {
            plan,
            task: None,
            ends: true,
        },
        (None, None) => Target {
            plan: String::new(),
            task: None,
            ends: false,
        },
    };
    // A person at a terminal gets the screen, redrawn in place.
    if target.ends && !ctx.json && matches!(start, Start::Now) && std::io::stdout().is_terminal() {
        let watched: Vec<String> = target.task.iter().cloned().collect();
        return super::live::live(ctx, target.plan, limit, &watched).await;
    }
    tokio::select! {
        res = follow(ctx, &target, start) => res,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// Errors worth reconnecting for; anything else (unknown plan, bad token, ...)
/// would fail the same way again.
fn transient(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::Unknown
            | Code::Internal
            | Code::Cancelled
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
            | Code::Aborted
    )
}

fn next_backoff(cur: Duration) -> Duration {
    (cur * 2).min(MAX_BACKOFF)
}

/// One line per event: compact JSON with --json, else the text line (plan included).
fn print_event(ctx: &Ctx, e: &Event) -> Result<()> {
    if ctx.json {
        super::emit_raw(&serde_json::to_string(&json::event(e))?)
    } else {
        emit(&render::event_line(e, true))
    }
}

/// The plan's revision, and whether `target` has ended; if so, says how
/// (as `wait` does, a JSON line with --json) and gives the exit code.
async fn ended(ctx: &Ctx, client: &mut Client, target: &Target) -> Result<(i64, Option<Exit>)> {
    let watched: Vec<String> = target.task.iter().cloned().collect();
    let (revision, ended) = super::wait::ended(client, &target.plan, &watched).await?;
    let Some((exit, shown)) = ended else {
        return Ok((revision, None));
    };
    if ctx.json {
        let line = serde_json::to_string(&super::wait::outcome_json(&shown, exit))?;
        super::emit_raw(&line)?;
    } else {
        super::wait::report(ctx, &shown, exit, target.task.is_some())?;
    }
    Ok((revision, Some(exit)))
}

/// What a watch follows, from when and until when, in a line for stderr
/// (the tests' readiness signal too).
fn describe(target: &Target, start: Start) -> String {
    let what = match (&target.task, target.plan.as_str()) {
        (Some(id), _) => format!("task {id}"),
        (None, "") => "every plan".to_string(),
        (None, plan) => format!("plan {plan}"),
    };
    let from = match start {
        Start::Now => "from now".to_string(),
        Start::After(0) => "from its first event".to_string(),
        Start::After(seq) => format!("after event #{seq}"),
    };
    let until = if target.ends {
        "until it ends"
    } else {
        "until Ctrl-C"
    };
    format!("following {what} {from}, {until}")
}

async fn follow(ctx: &Ctx, target: &Target, start: Start) -> Result<()> {
    let plan = target.plan.as_str();
    let (mut last_seq, mut from_now) = match start {
        Start::Now => (0, true),
        Start::After(seq) => (seq, false),
    };
    let mut backoff = MIN_BACKOFF;
    let mut client: Option<Client> = Some(ctx.client().await?);
    let mut lost = false;
    // The plan's revision when last looked at: a replayed history changes
    // nothing, only what comes after the look can end the watch.
    let mut seen_revision = -1;
    loop {
        let mut c = match client.take() {
            Some(c) => c,
            None => match ctx.client().await {
                Ok(c) => c,
                Err(e) => {
                    warn(&format!("{e}; retrying in {}", secs(backoff)));
                    tokio::time::sleep(backoff).await;
                    backoff = next_backoff(backoff);
                    continue;
                }
            },
        };
        let req = WatchPlanRequest {
            plan: plan.to_string(),
            after_seq: last_seq,
            from_now,
        };
        let why = match c.watch_plan(req).await {
            Ok(resp) => {
                if lost {
                    warn(&format!("reconnected, following from seq {last_seq}"));
                } else {
                    warn(&describe(target, start));
                    // It may have ended already.
                    if target.ends {
                        let (revision, exit) = ended(ctx, &mut c, target).await?;
                        seen_revision = revision;
                        if let Some(exit) = exit {
                            return finish(exit);
                        }
                    }
                }
                let mut stream = resp.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(event)) => {
                            backoff = MIN_BACKOFF;
                            if event.seq <= last_seq {
                                continue;
                            }
                            last_seq = event.seq;
                            from_now = false;
                            let mine = target.task.as_ref().is_none_or(|id| &event.task_id == id);
                            if mine {
                                print_event(ctx, &event)?;
                            }
                            if target.ends
                                && event.plan_revision > seen_revision
                                && super::wait::may_end(&event)
                            {
                                let (revision, exit) = ended(ctx, &mut c, target).await?;
                                seen_revision = revision;
                                if let Some(exit) = exit {
                                    return finish(exit);
                                }
                            }
                        }
                        Ok(None) => break "the daemon closed the stream".to_string(),
                        Err(status) if transient(status.code()) => break status_words(&status),
                        Err(status) => return Err(status.into()),
                    }
                }
            }
            Err(status) if transient(status.code()) => status_words(&status),
            Err(status) => return Err(status.into()),
        };
        lost = true;
        warn(&format!(
            "watch interrupted ({why}); reconnecting in {} from seq {last_seq}",
            secs(backoff)
        ));
        tokio::time::sleep(backoff).await;
        backoff = next_backoff(backoff);
    }
}

/// The exit a watch ends with: `wait`'s, whose report is already printed.
fn finish(exit: Exit) -> Result<()> {
    match exit {
        Exit::Ok => Ok(()),
        other => Err(CliError::new(other, String::new()).into()),
    }
}

fn status_words(status: &tonic::Status) -> String {
    let msg = status.message().trim();
    if msg.is_empty() {
        status.code().description().to_string()
    } else {
        msg.to_string()
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

fn warn(msg: &str) {
    eprintln!("todoctl: {}", crate::safe::escape(msg));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let mut d = MIN_BACKOFF;
        let mut seen = Vec::new();
        for _ in 0..8 {
            seen.push(d.as_millis());
            d = next_backoff(d);
        }
        assert_eq!(seen, [250, 500, 1000, 2000, 4000, 8000, 10000, 10000]);
    }

    #[test]
    fn only_transient_errors_reconnect() {
        assert!(transient(Code::Unavailable));
        assert!(!transient(Code::NotFound));
        assert!(!transient(Code::Unauthenticated));
        assert!(!transient(Code::InvalidArgument));
    }
}
