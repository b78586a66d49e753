//! `status`, `plan create`, `plan list`, `plan show`.
use anyhow::Result;
use serde_json::json;
use todod::proto::{CreatePlanRequest, GetPlanRequest, ListPlansRequest};

use super::{emit, emit_json, Ctx};
use crate::{json, render};

const NO_PLANS: &str =
    "no plans yet (create one with `todoctl plan create NAME` or `todoctl write --plan NAME`)";

/// One plan's summary, or every plan's.
pub async fn status(ctx: &Ctx, plan: Option<String>, limit: i32) -> Result<()> {
    let limit = limit.max(1);
    let mut client = ctx.client().await?;
    if let Some(name) = plan {
        let summary = client
            .get_plan(GetPlanRequest {
                name,
                highlight_limit: limit,
            })
            .await?
            .into_inner();
        return if ctx.json {
            emit_json(&json::summary(&summary))
        } else {
            emit(&render::plan_summary(&summary))
        };
    }
    let plans = client
        .list_plans(ListPlansRequest {
            highlight_limit: limit,
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
    let mut client = ctx.client().await?;
    let plan = client
        .create_plan(CreatePlanRequest {
            name,
            title: title.unwrap_or_default(),
        })
        .await?
        .into_inner();
    if ctx.json {
        emit_json(&json::plan(&plan))
    } else {
        emit(&format!("created plan {}", plan.name))
    }
}

/// Every plan, one line each, with its counts.
pub async fn list(ctx: &Ctx) -> Result<()> {
    let mut client = ctx.client().await?;
    let plans = client
        .list_plans(ListPlansRequest { highlight_limit: 0 })
        .await?
        .into_inner()
        .plans;
    if ctx.json {
        return emit_json(&json!({ "plans": plans.iter().map(json::summary).collect::<Vec<_>>() }));
    }
    if plans.is_empty() {
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
                .map(|p| (p.name.clone(), render::one_line(&p.title), p.revision))
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
