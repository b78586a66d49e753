//! `list`, `show`, `add`, the transitions, `dep add|rm` and `graph`.
use anyhow::Result;
use serde_json::{json, Value};
use todod_proto::{
    CreateTaskRequest, DependencyRequest, GetTaskRequest, ListTasksRequest, Task,
    TransitionTaskRequest,
};

use super::{emit, emit_json, Ctx};
use crate::cli::{AddArgs, DepArgs, EditArgs, ListArgs, TransitionArgs};
use crate::client::Client;
use crate::error::{CliError, Exit};
use crate::{graph as graph_render, json, render, todo_input};

const PAGE_SIZE: i32 = 10_000;

/// Every task of a plan matching the filter, following `next_page_token`.
/// Returns the tasks and the plan revision reported with the last page.
pub async fn fetch_tasks(
    client: &mut Client,
    mut req: ListTasksRequest,
) -> Result<(Vec<Task>, i64)> {
    req.page_size = PAGE_SIZE;
    let mut tasks = Vec::new();
    let mut seen_tokens = std::collections::HashSet::new();
    loop {
        let page = client.list_tasks(req.clone()).await?.into_inner();
        tasks.extend(page.tasks);
        if page.next_page_token.is_empty() {
            return Ok((tasks, page.plan_revision));
        }
        if !seen_tokens.insert(page.next_page_token.clone()) {
            anyhow::bail!("the daemon returned the same page token twice while listing tasks");
        }
        req.page_token = page.next_page_token;
    }
}

pub async fn list(ctx: &Ctx, args: ListArgs) -> Result<()> {
    let mut readiness = Vec::new();
    if args.ready {
        readiness.push("ready".to_string());
    }
    if args.blocked {
        readiness.extend(["blocked".to_string(), "blocked_by_failure".to_string()]);
    }
    let req = ListTasksRequest {
        plan: args.plan.plan.clone(),
        statuses: args.statuses,
        kinds: args.kinds,
        readiness,
        include_archived: args.all,
        // The table shows no timestamps or specs; scripts (--json) get everything.
        view: if ctx.json { "full" } else { "basic" }.to_string(),
        ..Default::default()
    };
    let mut client = ctx.client().await?;
    let (tasks, revision) = fetch_tasks(&mut client, req).await?;
    if ctx.json {
        emit_json(
            &json!({ "plan": args.plan.plan, "plan_revision": revision, "tasks": json::tasks(&tasks) }),
        )
    } else {
        emit(&render::task_table(&tasks))
    }
}

pub async fn show(ctx: &Ctx, id: &str, all_events: bool) -> Result<()> {
    let mut client = ctx.client().await?;
    let task = client
        .get_task(GetTaskRequest { id: id.to_string() })
        .await?
        .into_inner();
    let events = crate::screens::fetch_events(&mut client, &task.id).await?;
    if ctx.json {
        emit_json(
            &json!({ "task": json::task(&task), "events": events.iter().map(json::event).collect::<Vec<_>>() }),
        )
    } else {
        emit(&render::task_details(
            &task,
            &events,
            all_events,
            crate::phase_view::summary(&task.kind, &task.result_json),
        ))
    }
}

/// `edit TASK --content/--priority/--spec/--owner/--metadata`: one UpdateTask call.
pub async fn edit(ctx: &Ctx, args: EditArgs) -> Result<()> {
    let EditArgs {
        task: id,
        content,
        priority,
        spec,
        owner,
        metadata,
        reason,
    } = args;
    if content.is_none()
        && priority.is_none()
        && spec.is_none()
        && owner.is_none()
        && metadata.is_none()
    {
        return Err(CliError::usage(
            "nothing to change: give --content, --priority, --spec, --owner or --metadata",
        )
        .into());
    }
    let spec = spec.as_deref().map(read_spec).transpose()?;
    let req = todod_proto::UpdateTaskRequest {
        id,
        content,
        priority,
        spec_json: spec,
        expected_revision: 0,
        reason: reason.unwrap_or_default(),
        owner,
        metadata_patch_json: metadata,
        request_id: String::new(),
    };
    let task = ctx
        .mutate(
            req,
            |r, id| r.request_id = id,
            |mut c, r| async move { c.update_task(r).await },
        )
        .await?;
    if ctx.json {
        return emit_json(&json::task(&task));
    }
    emit(&format!(
        "{}: updated (revision {})",
        task.id, task.revision
    ))
}

/// `schedule TASK CRON` / `schedule TASK --clear`.
pub async fn schedule(
    ctx: &Ctx,
    id: &str,
    cron: Option<String>,
    timezone: String,
    action: String,
    clear: bool,
) -> Result<()> {
    let req = todod_proto::SetScheduleRequest {
        task_id: id.to_string(),
        cron: cron.unwrap_or_default(),
        timezone,
        action,
        clear,
        ..Default::default()
    };
    let task = ctx
        .mutate(
            req,
            |r, id| r.request_id = id,
            |mut c, r| async move { c.set_schedule(r).await },
        )
        .await?;
    if ctx.json {
        return emit_json(&json::task(&task));
    }
    match &task.schedule {
        Some(s) => emit(&format!(
            "{}: {} \"{}\" ({}), next {}",
            task.id,
            s.action,
            crate::safe::escape(&s.cron),
            crate::safe::escape(&s.timezone),
            if s.next_fire_at.is_empty() {
                "never"
            } else {
                &s.next_fire_at
            }
        )),
        None => emit(&format!("{}: no schedule", task.id)),
    }
}

/// `--spec`: inline JSON, `@FILE`, or `@-` for stdin; must be a JSON object.
pub fn read_spec(arg: &str) -> Result<String, CliError> {
    let (source, text) = match arg.strip_prefix('@') {
        Some("-") => {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
                .map_err(|e| CliError::usage(format!("--spec @-: cannot read stdin: {e}")))?;
            let text = String::from_utf8(buf).map_err(|e| {
                CliError::usage(format!(
                    "--spec @-: invalid UTF-8 at byte {}",
                    e.utf8_error().valid_up_to()
                ))
            })?;
            ("--spec @-".to_string(), text)
        }
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                CliError::usage(format!("--spec @{path}: cannot read the file: {e}"))
            })?;
            (format!("--spec @{path}"), text)
        }
        None => ("--spec".to_string(), arg.to_string()),
    };
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::usage(todo_input::json_error(&source, &e)))?;
    if !value.is_object() {
        return Err(CliError::usage(format!("{source}: expected a JSON object")));
    }
    // Sent as written (key order and number precision intact), once known to be valid.
    Ok(text.trim().to_string())
}

pub async fn add(ctx: &Ctx, args: AddArgs) -> Result<()> {
    let spec_json = args
        .spec
        .as_deref()
        .map(read_spec)
        .transpose()?
        .unwrap_or_default();
    if args.content.trim().is_empty() {
        return Err(CliError::usage("CONTENT must not be empty").into());
    }
    let req = CreateTaskRequest {
        plan: args.plan.plan,
        content: args.content,
        priority: args.priority.unwrap_or_default(),
        kind: args.kind.unwrap_or_default(),
        spec_json,
        depends_on: args.after,
        expected_revision: args.expected_revision.unwrap_or(0),
        reason: args.reason.unwrap_or_default(),
        owner: String::new(),
        metadata_json: String::new(),
        request_id: String::new(),
    };
    let task = ctx
        .mutate(
            req,
            |r, id| r.request_id = id,
            |mut c, r| async move { c.create_task(r).await },
        )
        .await?;
    if ctx.json {
        emit_json(&json::task(&task))
    } else {
        emit(&task.id)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Start,
    Done,
    Cancel,
    Retry,
    Reopen,
    Fail,
}

impl Verb {
    fn target(self) -> &'static str {
        match self {
            Verb::Start => "in_progress",
            Verb::Done => "completed",
            Verb::Cancel => "cancelled",
            Verb::Fail => "failed",
            Verb::Retry | Verb::Reopen => "pending",
        }
    }

    /// `retry` and `reopen` both go to pending; they only apply from the state
    /// their name promises (so `retry` never quietly stops a running task).
    fn check_from(self, task: &Task) -> Result<(), CliError> {
        let (name, allowed): (&str, &[&str]) = match self {
            Verb::Retry => ("retry", &["failed"]),
            Verb::Reopen => ("reopen", &["completed", "cancelled"]),
            _ => return Ok(()),
        };
        if allowed.contains(&task.status.as_str()) {
            return Ok(());
        }
        Err(CliError::new(
            Exit::Conflict,
            format!(
                "{} is {}; `{name}` applies to a {} task",
                task.id,
                task.status,
                allowed.join(" or ")
            ),
        ))
    }
}

pub async fn transition(ctx: &Ctx, verb: Verb, args: TransitionArgs) -> Result<()> {
    if verb == Verb::Fail && args.reason.as_deref().is_none_or(|r| r.trim().is_empty()) {
        return Err(CliError::usage("fail needs --reason: say why it failed").into());
    }
    let mut client = ctx.client().await?;
    let before = client
        .get_task(GetTaskRequest {
            id: args.task.clone(),
        })
        .await?
        .into_inner();
    verb.check_from(&before)?;
    let req = TransitionTaskRequest {
        id: before.id.clone(),
        to: verb.target().to_string(),
        reason: args.reason.unwrap_or_default(),
        expected_revision: 0,
        request_id: String::new(),
    };
    drop(client);
    let task = ctx
        .mutate(
            req,
            |r, id| r.request_id = id,
            |mut c, r| async move { c.transition_task(r).await },
        )
        .await?;
    if ctx.json {
        return emit_json(&json::task(&task));
    }
    let mut line = format!("{}: {} -> {}", task.id, before.status, task.status);
    if task.status == "pending" && !task.readiness.is_empty() {
        line.push_str(&format!(" ({})", task.readiness));
    }
    emit(&line)
}

pub async fn dependency(ctx: &Ctx, add: bool, args: DepArgs) -> Result<()> {
    let req = DependencyRequest {
        task_id: args.task,
        depends_on: args.depends_on,
        expected_revision: 0,
        reason: args.reason.unwrap_or_default(),
        request_id: String::new(),
    };
    let dep = req.depends_on.clone();
    let task = ctx
        .mutate(
            req,
            |r, id| r.request_id = id,
            |mut c, r| async move {
                if add {
                    c.add_dependency(r).await
                } else {
                    c.remove_dependency(r).await
                }
            },
        )
        .await?;
    if ctx.json {
        return emit_json(&json::task(&task));
    }
    let all = if task.depends_on.is_empty() {
        "none".to_string()
    } else {
        task.depends_on.join(", ")
    };
    if add {
        emit(&format!(
            "{} now depends on {dep} (dependencies: {all})",
            task.id
        ))
    } else {
        emit(&format!(
            "{} no longer depends on {dep} (dependencies: {all})",
            task.id
        ))
    }
}

pub async fn graph(ctx: &Ctx, plan: &str, dot: bool, all: bool) -> Result<()> {
    // clap's `conflicts_with` only sees `--json` when it follows the subcommand;
    // `todoctl --json graph --dot` must be refused as well.
    if dot && ctx.json {
        return Err(CliError::usage("graph: --dot and --json cannot be used together").into());
    }
    let mut client = ctx.client().await?;
    let req = ListTasksRequest {
        plan: plan.to_string(),
        include_archived: all,
        view: "basic".to_string(),
        ..Default::default()
    };
    let (tasks, revision) = fetch_tasks(&mut client, req).await?;
    if ctx.json {
        let edges: Vec<Value> = tasks
            .iter()
            .flat_map(|t| {
                t.depends_on
                    .iter()
                    .map(move |d| json!({ "from": d, "to": t.id }))
            })
            .collect();
        return emit_json(
            &json!({ "plan": plan, "plan_revision": revision, "tasks": json::tasks(&tasks), "edges": edges }),
        );
    }
    if dot {
        emit(&graph_render::dot(plan, &tasks))
    } else {
        emit(&graph_render::tree(&tasks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_must_be_a_json_object() {
        assert_eq!(
            read_spec(r#"{ "model": "x" }"#).ok().as_deref(),
            Some(r#"{ "model": "x" }"#)
        );
        let e = read_spec("[1]").expect_err("array");
        assert_eq!(e.message, "--spec: expected a JSON object");
        let e = read_spec("{").expect_err("bad json");
        assert!(
            e.message
                .starts_with("--spec: invalid JSON at line 1 column 1"),
            "{}",
            e.message
        );
        let e = read_spec("@/nonexistent/spec.json").expect_err("missing file");
        assert!(e
            .message
            .starts_with("--spec @/nonexistent/spec.json: cannot read the file"));
        assert_eq!(e.exit, Exit::Usage);
    }

    #[tokio::test]
    async fn graph_refuses_dot_with_json_before_dialling() {
        let ctx = Ctx {
            connector: crate::client::Connector::new("http://127.0.0.1:1", None, "t")
                .expect("valid"),
            json: true,
            token_source: None,
        };
        let err = graph(&ctx, "p", true, false).await.expect_err("refused");
        let err = err.downcast_ref::<CliError>().expect("a CliError");
        assert_eq!(err.exit, Exit::Usage);
        assert!(err.message.contains("--dot and --json"), "{}", err.message);
    }

    #[test]
    fn retry_and_reopen_check_the_current_status() {
        let t = |s: &str| Task {
            id: "t1".into(),
            status: s.into(),
            ..Default::default()
        };
        assert!(Verb::Retry.check_from(&t("failed")).is_ok());
        let e = Verb::Retry
            .check_from(&t("in_progress"))
            .expect_err("not failed");
        assert_eq!(
            e.message,
            "t1 is in_progress; `retry` applies to a failed task"
        );
        assert_eq!(e.exit, Exit::Conflict);
        assert!(Verb::Reopen.check_from(&t("cancelled")).is_ok());
        assert!(Verb::Reopen.check_from(&t("pending")).is_err());
        assert!(Verb::Start.check_from(&t("pending")).is_ok());
    }
}
