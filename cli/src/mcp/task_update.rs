//! Claude Code's TaskUpdate, in the steps todod's calls make of it, and the
//! plan listing the task tools read.
use serde_json::json;
use todod_proto::{
    DependencyRequest, GetTaskRequest, ListTasksRequest, Task, TransitionTaskRequest,
    UpdateTaskRequest,
};
use tonic::Code;

use super::session::{rename, ToolError, ToolResult};
use super::{shapes, task_id, view, TodoMcp};
use rmcp::model::CallToolResult;

impl TodoMcp {
    /// Every live task of a plan, in list order.
    pub(super) async fn plan_tasks(&self, plan: &str) -> ToolResult<Vec<Task>> {
        let mut client = self.session.client().await?;
        let mut tasks = Vec::new();
        let mut page_token = String::new();
        loop {
            let page = client
                .list_tasks(ListTasksRequest {
                    plan: plan.to_string(),
                    page_size: 1000,
                    page_token,
                    ..Default::default()
                })
                .await;
            let page = match page {
                Ok(p) => p.into_inner(),
                Err(s) if s.code() == Code::NotFound => return Ok(tasks),
                Err(s) => return Err(s.into()),
            };
            tasks.extend(page.tasks);
            if page.next_page_token.is_empty() {
                return Ok(tasks);
            }
            page_token = page.next_page_token;
        }
    }

    /// TaskUpdate: the task's fields, then its edges, then its status (so a
    /// blocker added in the same call is already in place; a move back to
    /// pending comes first, since a started task may only gain completed
    /// blockers). Every id is checked before anything is written; each step
    /// is one call, and a failure says what was applied before it.
    pub(super) async fn update_steps(
        &self,
        args: shapes::TaskUpdate,
    ) -> ToolResult<CallToolResult> {
        let id = task_id("taskId", &args.task_id)?;
        let mut edges = Vec::new();
        for (field, list) in [
            ("addBlockedBy", &args.add_blocked_by),
            ("addBlocks", &args.add_blocks),
        ] {
            for (i, other) in list.iter().enumerate() {
                let other = task_id(&format!("{field}[{i}]"), other)?;
                edges.push(if field == "addBlockedBy" {
                    (id.clone(), other, format!("{field} {}", list[i].trim()))
                } else {
                    (other, id.clone(), format!("{field} {}", list[i].trim()))
                });
            }
        }
        let mut client = self.session.client().await?;
        let before = client
            .get_task(GetTaskRequest { id: id.clone() })
            .await?
            .into_inner();
        if args.status.is_some() && before.kind != "todo" {
            return Err(ToolError(format!(
                "{id} is a {} phase that the daemon runs; its status is not an agent's to \
                 change (see plan_status for its progress)",
                before.kind
            )));
        }
        let mut done: Vec<String> = Vec::new();
        let failed = |done: &[String], e: ToolError| {
            if done.is_empty() {
                e
            } else {
                ToolError(format!("{} (already applied: {})", e.0, done.join("; ")))
            }
        };
        let metadata = shapes::task_patch(&args.description, &args.active_form, &args.metadata);
        if args.subject.is_some() || args.owner.is_some() || metadata.is_some() {
            self.session
                .mutate(
                    UpdateTaskRequest {
                        id: id.clone(),
                        content: args.subject.clone(),
                        owner: args.owner.clone(),
                        metadata_patch_json: metadata,
                        ..Default::default()
                    },
                    |r, id| r.request_id = id,
                    |mut c, r| async move { c.update_task(r).await },
                )
                .await
                .map_err(|s| {
                    rename(
                        s,
                        &[("content", "subject"), ("metadata_patch_json", "metadata")],
                    )
                })?;
            done.push("fields updated".into());
        }
        let to = args.status.map(shapes::TaskStatus::todod);
        let mut moved = false;
        let transition = |to: &str| {
            let request = TransitionTaskRequest {
                id: id.clone(),
                to: to.into(),
                reason: if matches!(args.status, Some(shapes::TaskStatus::Deleted)) {
                    "deleted by the agent".into()
                } else {
                    String::new()
                },
                ..Default::default()
            };
            self.session.mutate(
                request,
                |r, id| r.request_id = id,
                |mut c, r| async move { c.transition_task(r).await },
            )
        };
        if to == Some("pending") && before.status != "pending" {
            transition("pending")
                .await
                .map_err(|s| failed(&done, s.into()))?;
            done.push("status pending".into());
            moved = true;
        }
        for (task_id, depends_on, said) in edges {
            self.session
                .mutate(
                    DependencyRequest {
                        task_id,
                        depends_on,
                        ..Default::default()
                    },
                    |r, id| r.request_id = id,
                    |mut c, r| async move { c.add_dependency(r).await },
                )
                .await
                .map_err(|s| failed(&done, s.into()))?;
            done.push(said);
        }
        if matches!(args.status, Some(shapes::TaskStatus::Deleted)) {
            // A deleted task blocks nothing any more: its dependents let go
            // of it (a cancelled blocker would strand them for good).
            let plan = self
                .plan_tasks(&before.plan)
                .await
                .map_err(|e| failed(&done, e))?;
            for dependent in plan.iter().filter(|t| t.depends_on.contains(&id)) {
                self.session
                    .mutate(
                        DependencyRequest {
                            task_id: dependent.id.clone(),
                            depends_on: id.clone(),
                            ..Default::default()
                        },
                        |r, id| r.request_id = id,
                        |mut c, r| async move { c.remove_dependency(r).await },
                    )
                    .await
                    .map_err(|s| failed(&done, s.into()))?;
                done.push(format!("{} no longer waits for it", dependent.id));
            }
        }
        // A completed task that is deleted stays completed in the history:
        // its dependents have already let go of it above.
        let deleting_done = to == Some("cancelled") && before.status == "completed";
        if let Some(to) = to.filter(|to| *to != "pending" && *to != before.status && !deleting_done)
        {
            transition(to).await.map_err(|s| failed(&done, s.into()))?;
            done.push(format!("status {to}"));
            moved = true;
        }
        let task = client
            .get_task(GetTaskRequest { id })
            .await
            .map_err(|s| failed(&done, s.into()))?
            .into_inner();
        let plan = self
            .plan_tasks(&task.plan)
            .await
            .map_err(|e| failed(&done, e))?;
        // What this call's completion let go.
        let unblocked: Vec<&str> = plan
            .iter()
            .filter(|t| moved && task.status == "completed" && t.depends_on.contains(&task.id))
            .filter(|t| t.readiness == "ready")
            .map(|t| t.id.as_str())
            .collect();
        let mut text = format!("Updated: {}", view::task_line(&task));
        if !unblocked.is_empty() {
            text.push_str(&format!("\nNow ready: {}", unblocked.join(", ")));
        }
        Ok(view::answer(
            text,
            json!({ "task": shapes::claude_task(&task, &plan, true), "unblocked": unblocked }),
        ))
    }
}
