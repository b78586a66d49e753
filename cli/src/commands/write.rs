//! `write` (an agent's todo-write from stdin) and `read` (the list back).
use std::io::{IsTerminal, Read};

use anyhow::Result;
use serde_json::json;
use todod_proto::{ReadTodosRequest, WriteTodosRequest};

use super::{emit, emit_json, Ctx};
use crate::error::CliError;
use crate::{json, render, todo_input};

/// Reads and checks the whole list before dialling the daemon.
pub async fn write(
    ctx: &Ctx,
    plan: &str,
    expected_revision: Option<i64>,
    reason: Option<String>,
) -> Result<()> {
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(CliError::usage(
            "write reads the todo list as JSON from stdin; pipe it in, e.g. `todoctl write -p PLAN < todos.json`",
        )
        .into());
    }
    let mut bytes = Vec::new();
    stdin
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::usage(format!("stdin: cannot read: {e}")))?;
    let todos = todo_input::parse_todos(&bytes).map_err(CliError::usage)?;
    let req = WriteTodosRequest {
        plan: plan.to_string(),
        todos,
        expected_revision: expected_revision.unwrap_or(0),
        reason: reason.unwrap_or_default(),
        request_id: String::new(),
    };
    let resp = ctx
        .mutate(
            req,
            |r, id| r.request_id = id,
            |mut c, r| async move { c.write_todos(r).await },
        )
        .await?;
    if ctx.json {
        emit_json(&json::write_response(&resp))
    } else {
        emit(&render::write_result(&resp))
    }
}

/// The live list; with --json in the very shape `write` accepts, so it can be
/// edited and written back.
pub async fn read(ctx: &Ctx, plan: &str) -> Result<()> {
    let mut client = ctx.client().await?;
    let resp = client
        .read_todos(ReadTodosRequest {
            plan: plan.to_string(),
        })
        .await?
        .into_inner();
    if ctx.json {
        let revision = resp.plan.as_ref().map_or(0, |p| p.revision);
        return emit_json(&json!({
            "plan": plan,
            "revision": revision,
            "todos": resp.todos.iter().map(json::todo_item).collect::<Vec<_>>(),
        }));
    }
    emit(&render::task_table(&resp.todos))
}
