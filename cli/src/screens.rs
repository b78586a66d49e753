//! What a person and an agent read of the daemon, fetched and drawn once
//! for both the CLI's commands and its MCP tools: one plan's screen, and one
//! task's whole history. Neither `commands` nor `mcp` owns them, so neither
//! reaches into the other.
use anyhow::Result;
use todod_proto::{Event, GetPlanRequest, ListEventsRequest};

use crate::client::Client;
use crate::{json, render};

/// Events asked for per call when reading a task's whole history.
const EVENTS_PAGE_SIZE: i32 = 10_000;

/// One plan's screen: the summary, what failed and why, and its phase
/// tasks; as text and as JSON. `status --watch` redraws it.
pub async fn plan_screen(
    client: &mut Client,
    name: String,
    limit: i32,
) -> Result<(String, serde_json::Value)> {
    let summary = client
        .get_plan(GetPlanRequest {
            name,
            highlight_limit: limit,
        })
        .await?
        .into_inner();
    let plan_name = summary
        .plan
        .as_ref()
        .map(|p| p.name.clone())
        .unwrap_or_default();
    // A plan with phase tasks is a pipeline: each phase, with its figures
    // and the projection held against the live run.
    let kinds = crate::client::phase_kinds(client).await?;
    let phases = client
        .list_tasks(todod_proto::ListTasksRequest {
            plan: plan_name.clone(),
            kinds,
            page_size: 100,
            ..Default::default()
        })
        .await?
        .into_inner()
        .tasks;
    // What failed, and why: the summary only counts it.
    let failed_count = summary
        .counts
        .iter()
        .find(|c| c.status == "failed")
        .map_or(0, |c| c.count);
    let failed = if failed_count > 0 {
        client
            .list_tasks(todod_proto::ListTasksRequest {
                plan: plan_name,
                statuses: vec!["failed".into()],
                page_size: limit,
                ..Default::default()
            })
            .await?
            .into_inner()
            .tasks
    } else {
        Vec::new()
    };
    let mut value = json::summary(&summary);
    value["phases"] = serde_json::Value::Array(phases.iter().map(json::task).collect());
    value["failed"] = serde_json::Value::Array(failed.iter().map(json::task).collect());
    // The servers the daemon runs for these phases (a daemon without the
    // call, older than it, has none to show).
    let ids: Vec<&str> = phases.iter().map(|t| t.id.as_str()).collect();
    let servers: Vec<todod_proto::ServerInfo> = client
        .list_servers(todod_proto::ListServersRequest {})
        .await
        .map(|r| r.into_inner().servers)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.tasks.iter().any(|t| ids.contains(&t.as_str())))
        .collect();
    value["servers"] = serde_json::to_value(&servers).unwrap_or_default();
    let mut text = render::plan_summary(&summary);
    text.push_str(&render::failed_section(&failed, failed_count));
    if !phases.is_empty() {
        text.push('\n');
        text.push_str(&crate::phase_view::pipeline(&phases));
    }
    text.push_str(&render::servers_section(&servers));
    Ok((text, value))
}

/// A task's whole history, following `last_seq`.
pub async fn fetch_events(client: &mut Client, task_id: &str) -> Result<Vec<Event>> {
    let mut events = Vec::new();
    let mut after_seq = 0;
    loop {
        let req = ListEventsRequest {
            task_id: task_id.to_string(),
            after_seq,
            limit: EVENTS_PAGE_SIZE,
            ..Default::default()
        };
        let page = client.list_events(req).await?.into_inner();
        let n = page.events.len();
        events.extend(page.events);
        if n < EVENTS_PAGE_SIZE as usize || page.last_seq <= after_seq {
            return Ok(events);
        }
        after_seq = page.last_seq;
    }
}
