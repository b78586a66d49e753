//! `todoctl ping`: does the daemon serve calls? A real read (the plan list),
//! not only a connection, so a daemon that accepts connections but cannot
//! answer is not taken for a serving one. `--wait` keeps asking, for scripts
//! that start the daemon and go on once it serves.
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::json;
use todod_proto::ListPlansRequest;
use tonic::Code;

use super::{emit, emit_json, Ctx};
use crate::error::{CliError, Exit};

/// The pause between two tries grows to this.
const MAX_PAUSE: Duration = Duration::from_secs(1);

pub async fn ping(ctx: &Ctx, wait: Option<Duration>) -> Result<()> {
    let started = Instant::now();
    let deadline = wait.map(|w| started + w);
    let mut pause = Duration::from_millis(50);
    loop {
        let tried = Instant::now();
        match read_plans(ctx).await {
            Ok(plans) => {
                let millis = tried.elapsed().as_secs_f64() * 1000.0;
                let addr = ctx.connector.addr();
                return if ctx.json {
                    emit_json(&json!({
                        "serving": true,
                        "addr": addr,
                        "plans": plans,
                        "answer_ms": (millis * 10.0).round() / 10.0,
                        "waited_ms": started.elapsed().as_millis() as u64,
                    }))
                } else {
                    emit(&format!(
                        "todod serving at {addr}: {plans} plan{} ({millis:.1} ms)",
                        if plans == 1 { "" } else { "s" }
                    ))
                };
            }
            // Not up yet: try again while the wait lasts.
            Err(e) if e.exit == Exit::Unreachable => match deadline {
                Some(deadline) if Instant::now() + pause < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                Some(_) => {
                    return Err(CliError::new(
                        e.exit,
                        format!(
                            "{} (still, after waiting {})",
                            e.message,
                            humantime::format_duration(Duration::from_secs(
                                started.elapsed().as_secs()
                            ))
                        ),
                    )
                    .into())
                }
                None => return Err(e.into()),
            },
            // It answered, with a refusal (a wrong token, say): waiting will not change that.
            Err(e) => return Err(e.into()),
        }
    }
}

/// How many live plans the daemon lists, or why it could not say.
async fn read_plans(ctx: &Ctx) -> Result<usize, CliError> {
    let mut client = ctx.client().await?;
    match client
        .list_plans(ListPlansRequest {
            highlight_limit: 0,
            include_archived: false,
        })
        .await
    {
        Ok(answer) => Ok(answer.into_inner().plans.len()),
        Err(status) => Err(CliError::new(
            Exit::from_code(status.code()),
            match status.code() {
                Code::Unavailable => {
                    crate::error::unreachable_message(ctx.connector.addr(), status.message())
                }
                _ => format!(
                    "todod at {} answered: {}",
                    ctx.connector.addr(),
                    status.message()
                ),
            },
        )),
    }
}
