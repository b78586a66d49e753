//! `todoctl servers`: the inference servers the daemon runs for phase tasks
//! (a spec's `servers.NAME`): each with its state, process, URL, uptime,
//! restarts, the tasks that use it and how its last process ended.
use anyhow::Result;
use serde_json::json;

use super::{emit, emit_json, Ctx};
use crate::safe::escape;

pub async fn servers(ctx: &Ctx) -> Result<()> {
    let mut client = ctx.client().await?;
    let servers = client
        .list_servers(todod_proto::ListServersRequest {})
        .await?
        .into_inner()
        .servers;
    if ctx.json {
        return emit_json(&json!({ "servers": servers }));
    }
    if servers.is_empty() {
        return emit("no servers: the daemon runs none now (a spec's servers.NAME starts one)");
    }
    let mut rows = vec![[
        "NAME".to_string(),
        "STATE".into(),
        "PID".into(),
        "URL".into(),
        "UPTIME".into(),
        "RESTARTS".into(),
        "TASKS".into(),
    ]];
    for s in &servers {
        rows.push([
            escape(&s.name).into_owned(),
            escape(&s.state).into_owned(),
            if s.pid == 0 {
                "-".into()
            } else {
                s.pid.to_string()
            },
            escape(&s.url).into_owned(),
            if s.state == "ready" {
                todod_proto::readable::duration(s.uptime_seconds)
            } else {
                "-".into()
            },
            s.restarts.to_string(),
            if s.tasks.is_empty() {
                "(idle)".into()
            } else {
                escape(&s.tasks.join(",")).into_owned()
            },
        ]);
    }
    let widths: Vec<usize> = (0..7)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    for s in servers.iter().filter(|s| !s.last_exit.is_empty()) {
        // The exit's first line; its log's lines are in `--json`.
        let first = s.last_exit.lines().next().unwrap_or_default();
        out.push_str(&format!(
            "{} ({}): last exit: {}\n",
            escape(&s.name),
            escape(&s.id),
            escape(first)
        ));
    }
    emit(out.trim_end())
}
