//! `todoctl kinds`: what the daemon runs; `todoctl open`: a one-time login to the daemon's status page, as a URL
//! to open in a browser (the code in it works once, for five minutes, and
//! leaves the browser a session cookie). `--browser` also opens it, with
//! `$BROWSER` or `xdg-open`.
use anyhow::Result;
use serde_json::json;

use super::{emit, emit_json, Ctx};
use crate::error::CliError;

pub async fn open(ctx: &Ctx, plan: Option<String>, browser: bool) -> Result<()> {
    let mut client = ctx.client().await?;
    let login = client
        .open_page(todod_proto::OpenPageRequest {
            plan: plan.unwrap_or_default(),
        })
        .await?
        .into_inner();
    if browser {
        let program = std::env::var("BROWSER").unwrap_or_else(|_| "xdg-open".into());
        std::process::Command::new(&program)
            .arg(&login.url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| CliError::usage(format!("--browser: cannot start {program}: {e}")))?;
    }
    if ctx.json {
        return emit_json(&json!({"url": login.url, "expires_at": login.expires_at}));
    }
    emit(&format!(
        "{}\n(works once, until {})",
        login.url, login.expires_at
    ))
}

pub async fn kinds(ctx: &Ctx) -> Result<()> {
    let mut client = ctx.client().await?;
    let kinds = client
        .list_kinds(todod_proto::ListKindsRequest {})
        .await?
        .into_inner()
        .kinds;
    if ctx.json {
        return emit_json(&json!({ "kinds": kinds }));
    }
    let mut out = String::new();
    for k in &kinds {
        let mut tags = Vec::new();
        if !k.plan_section.is_empty() {
            tags.push(format!("plan file [{}]", k.plan_section));
        }
        if !k.actions.is_empty() {
            tags.push(format!("schedule: {}", k.actions.join(", ")));
        }
        out.push_str(&format!(
            "{:<18} {}{}\n",
            crate::safe::escape(&k.name),
            crate::safe::escape(&k.summary),
            if tags.is_empty() {
                String::new()
            } else {
                format!(" ({})", tags.join("; "))
            }
        ));
    }
    emit(out.trim_end())
}
