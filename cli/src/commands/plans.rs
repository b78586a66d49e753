//! `status`, `plan create`, `plan list`, `plan show`.
use anyhow::Result;
use serde_json::json;
use todod_proto::{ApplyPipelineRequest, CreatePlanRequest, ListPlansRequest};

use super::{emit, emit_json, Ctx};
use crate::{json, render};

const NO_PLANS: &str =
    "no plans yet (create one with `todoctl plan create NAME` or `todoctl write --plan NAME`)";

/// One plan's summary, or every plan's.
pub async fn status(ctx: &Ctx, plan: Option<String>, limit: i32) -> Result<()> {
    let limit = limit.max(1);
    let mut client = ctx.client().await?;
    if let Some(name) = plan {
        let (text, value) = crate::screens::plan_screen(&mut client, name, limit).await?;
        return if ctx.json {
            emit_json(&value)
        } else {
            emit(text.trim_end())
        };
    }
    let plans = client
        .list_plans(ListPlansRequest {
            highlight_limit: limit,
            ..Default::default()
        })
        .await?
        .into_inner()
        .plans;
    if ctx.json {
        return emit_json(&json!({ "plans": plans.iter().map(json::summary).collect::<Vec<_>>() }));
    }
    if plans.is_empty() {
        return emit(NO_PLANS);
    }
    let screens: Vec<String> = plans.iter().map(render::plan_summary).collect();
    emit(&screens.join("\n"))
}

pub async fn create(ctx: &Ctx, name: String, title: Option<String>) -> Result<()> {
    let req = CreatePlanRequest {
        name,
        title: title.unwrap_or_default(),
        ..Default::default()
    };
    let plan = ctx
        .mutate(
            req,
            |r, id| r.request_id = id,
            |mut c, r| async move { c.create_plan(r).await },
        )
        .await?;
    if ctx.json {
        emit_json(&json::plan(&plan))
    } else {
        emit(&format!("created plan {}", plan.name))
    }
}

/// `plan archive` / `plan restore`.
pub async fn archive(ctx: &Ctx, name: String, reason: Option<String>, restore: bool) -> Result<()> {
    let req = todod_proto::PlanChangeRequest {
        name,
        reason: reason.unwrap_or_default(),
        ..Default::default()
    };
    let plan = ctx
        .mutate(
            req,
            |r, id| r.request_id = id,
            |mut c, r| async move {
                if restore {
                    c.restore_plan(r).await
                } else {
                    c.archive_plan(r).await
                }
            },
        )
        .await?;
    if ctx.json {
        return emit_json(&json::plan(&plan));
    }
    emit(&if plan.archived_at.is_empty() {
        format!("plan {} is live", plan.name)
    } else {
        format!(
            "plan {} archived {} (todoctl plan restore {0} brings it back)",
            plan.name,
            render::when(&plan.archived_at)
        )
    })
}

/// Every plan, one line each, with its counts.
pub async fn list(ctx: &Ctx, all: bool) -> Result<()> {
    let mut client = ctx.client().await?;
    let plans = client
        .list_plans(ListPlansRequest {
            highlight_limit: 0,
            include_archived: all,
        })
        .await?
        .into_inner()
        .plans;
    if ctx.json {
        return emit_json(&json!({ "plans": plans.iter().map(json::summary).collect::<Vec<_>>() }));
    }
    if plans.is_empty() {
        let archived = client
            .list_plans(ListPlansRequest {
                highlight_limit: 0,
                include_archived: true,
            })
            .await?
            .into_inner()
            .plans
            .len();
        if archived > 0 {
            return emit(&format!(
                "no live plans ({archived} archived: todoctl plan list --all)"
            ));
        }
        return emit(NO_PLANS);
    }
    let rows: Vec<[String; 6]> = plans
        .iter()
        .map(|s| {
            let count = |st: &str| {
                s.counts
                    .iter()
                    .find(|c| c.status == st)
                    .map_or(0, |c| c.count)
            };
            let (name, title, rev) = s
                .plan
                .as_ref()
                .map(|p| {
                    let name = if p.archived_at.is_empty() {
                        p.name.clone()
                    } else {
                        format!("{} (archived)", p.name)
                    };
                    (name, render::one_line(&p.title), p.revision)
                })
                .unwrap_or_default();
            [
                name,
                s.total.to_string(),
                format!("{}/{}", count("completed"), s.total),
                s.ready_count.to_string(),
                rev.to_string(),
                title,
            ]
        })
        .collect();
    let header = ["PLAN", "TASKS", "DONE", "READY", "REV", "TITLE"];
    let widths: Vec<usize> = (0..6)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in std::iter::once(header.map(String::from)).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    emit(&out)
}

/// `plan apply FILE`: the file goes to the daemon as it is, so that a person
/// and an agent calling ApplyPipeline get the same checks.
pub async fn apply(
    ctx: &Ctx,
    file: &std::path::Path,
    plan: Option<String>,
    dry_run: bool,
    reason: Option<String>,
) -> Result<()> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        crate::error::CliError::usage(format!("{}: cannot be read: {e}", file.display()))
    })?;
    let req = ApplyPipelineRequest {
        plan: plan.unwrap_or_default(),
        spec_toml: text,
        dry_run,
        expected_revision: 0,
        reason: reason.unwrap_or_default(),
        base_dir: std::fs::canonicalize(file)
            .ok()
            .and_then(|f| f.parent().map(|p| p.display().to_string()))
            .unwrap_or_default(),
        request_id: String::new(),
    };
    let applied = ctx
        .mutate(
            req,
            |r, id| r.request_id = id,
            |mut c, r| async move { c.apply_pipeline(r).await },
        )
        .await?;
    if ctx.json {
        let steps: Vec<_> = applied
            .steps
            .iter()
            .map(|s| {
                json!({
                    "step": s.step,
                    "action": s.action,
                    "changed": s.changed,
                    "task": s.task.as_ref().map(json::task),
                    "spec": serde_json::from_str::<serde_json::Value>(&s.spec_json)
                        .unwrap_or(serde_json::Value::Null),
                })
            })
            .collect();
        return emit_json(&json!({
            "plan": applied.plan.as_ref().map(json::plan),
            "dry_run": dry_run,
            "steps": steps,
        }));
    }
    emit(&render::applied_pipeline(&applied, dry_run))
}

/// `backup FILE`: the daemon writes a consistent copy of its graph there.
pub async fn backup(ctx: &Ctx, file: &std::path::Path) -> Result<()> {
    let path = if file.is_absolute() {
        file.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| crate::error::CliError::usage(format!("FILE: {e}")))?
            .join(file)
    };
    let mut client = ctx.client().await?;
    let done = client
        .backup(todod_proto::BackupRequest {
            path: path.display().to_string(),
        })
        .await?
        .into_inner();
    if ctx.json {
        return emit_json(&json!({
            "path": done.path, "bytes": done.bytes, "schema_version": done.schema_version,
            "plans": done.plans, "tasks": done.tasks, "last_seq": done.last_seq,
        }));
    }
    emit(&format!(
        "backed up to {} ({} bytes: {} plans, {} tasks, events up to {})",
        done.path, done.bytes, done.plans, done.tasks, done.last_seq
    ))
}
