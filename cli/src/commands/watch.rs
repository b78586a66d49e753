//! `watch`: follow WatchPlan, reconnecting with backoff from the last seq seen.
use std::time::Duration;

use anyhow::Result;
use todod_proto::{Event, WatchPlanRequest};
use tonic::Code;

use super::{emit, Ctx};
use crate::client::Client;
use crate::{json, render};

const MIN_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Runs until Ctrl-C (exit 0), a non-transient error, or stdout closing.
pub async fn watch(ctx: &Ctx, plan: String, after: i64) -> Result<()> {
    tokio::select! {
        res = follow(ctx, &plan, after) => res,
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

async fn follow(ctx: &Ctx, plan: &str, mut last_seq: i64) -> Result<()> {
    let mut backoff = MIN_BACKOFF;
    let mut client: Option<Client> = Some(ctx.client().await?);
    let mut lost = false;
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
        };
        let why = match c.watch_plan(req).await {
            Ok(resp) => {
                if lost {
                    warn(&format!("reconnected, following from seq {last_seq}"));
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
                            print_event(ctx, &event)?;
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
