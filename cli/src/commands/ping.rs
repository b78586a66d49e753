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
use crate::client::{token_from_state_dir, Connector};
use crate::error::{CliError, Exit};

/// The pause between two tries grows to this.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// A daemon that takes longer than this to answer a read does not serve
/// (a try never waits for ever, with or without `--wait`).
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

pub async fn ping(ctx: &Ctx, wait: Option<Duration>) -> Result<()> {
    let started = Instant::now();
    let deadline = wait.map(|w| started + w);
    let mut pause = Duration::from_millis(50);
    loop {
        let tried = Instant::now();
        // A token read from the state directory is read again at each try:
        // a daemon that starts after the first writes its token then.
        let connector = match &ctx.token_source {
            Some(source) => {
                let token = token_from_state_dir(ctx.connector.addr(), source.state_dir.as_deref());
                ctx.connector.with_token(token.as_deref())?
            }
            None => ctx.connector.clone(),
        };
        let answer = tokio::time::timeout(ANSWER_WITHIN, read_plans(&connector))
            .await
            .unwrap_or_else(|_| {
                Err(CliError::new(
                    Exit::Unreachable,
                    format!(
                        "todod at {} did not answer a read within {}",
                        connector.addr(),
                        humantime::format_duration(ANSWER_WITHIN)
                    ),
                ))
            });
        match answer {
            Ok(plans) => {
                let millis = tried.elapsed().as_secs_f64() * 1000.0;
                let addr = connector.addr();
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
            // Not up yet (or up, but its token not yet read): try again
            // while the wait lasts.
            Err(e) if retryable(&e, &connector, ctx) => match deadline {
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

/// Whether another try may be answered otherwise: nothing answered, or the
/// daemon refused a call that carried no token because its token file was
/// not there yet.
fn retryable(e: &CliError, connector: &Connector, ctx: &Ctx) -> bool {
    e.exit == Exit::Unreachable
        || (e.exit == Exit::Auth && ctx.token_source.is_some() && connector.token().is_none())
}

/// How many live plans the daemon lists, or why it could not say.
async fn read_plans(connector: &Connector) -> Result<usize, CliError> {
    let mut client = connector.connect().await?;
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
                    crate::error::unreachable_message(connector.addr(), status.message())
                }
                _ => format!(
                    "todod at {} answered: {}",
                    connector.addr(),
                    status.message()
                ),
            },
        )),
    }
}
