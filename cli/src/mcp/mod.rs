//! `todoctl mcp`: an MCP server over stdio that gives coding agents todod as
//! their todo tool, in the shapes they already use (opencode, Claude Code,
//! Codex CLI, Gemini CLI), plus tools for the plan, its phases and a task's
//! history. It talks to the daemon over gRPC like every other client; the
//! list it writes is durable, shared with subagents and people
//! (`todoctl status`), and dependency-aware.
//!
//! Every failure is a tool error with a plain reason (`isError`), never a
//! crash of the server: the model reads it and tries again.
mod session;
mod shapes;
mod task_update;
mod view;

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, JsonObject, ServerCapabilities, ServerConfig};
use rmcp::model::{InitializeRequestParams, InitializeResult};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;
use todod_proto::{CreateTaskRequest, GetTaskRequest, ListPlansRequest, Task, TodoItem};

pub use session::{project_dir, PlanChoice};
use session::{rename, Session, ToolError, ToolResult};
use shapes::{PlanArg, Shape};

const INSTRUCTIONS: &str = "todod keeps this project's todo list durably: it survives the \
session, compaction and crashes, is shared with subagents and other agents, and people see it \
with `todoctl status`. Use ONE of the list shapes (todowrite/todoread, TodoWrite, update_plan, \
write_todos, or the Task* tools) for your own list. Full-list writes replace the list: items \
you leave out are archived. Each answer gives the list's revision; if another agent changed the \
list since, your write is refused and you get the current list to merge into.";

/// The instructions, naming the phase kinds the daemon says it runs (or
/// every kind but todo, when it did not answer in time).
fn instructions(phase_kinds: &[String]) -> String {
    let which = if phase_kinds.is_empty() {
        "of any kind but todo".to_string()
    } else {
        format!("of kind {}", phase_kinds.join(", "))
    };
    format!(
        "{INSTRUCTIONS} Tasks {which} are phases the daemon runs itself: read their progress \
         with plan_status, do not try to complete them."
    )
}

/// The daemon's phase kinds, if it answers within a few seconds.
async fn daemon_phase_kinds(connector: &crate::client::Connector) -> Vec<String> {
    let ask = async {
        let mut client = connector.connect().await.ok()?;
        crate::client::phase_kinds(&mut client).await.ok()
    };
    tokio::time::timeout(std::time::Duration::from_secs(3), ask)
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

pub struct TodoMcp {
    session: Arc<Session>,
    tool_router: ToolRouter<Self>,
    instructions: String,
}

/// Serves MCP on stdin/stdout until the client closes it.
/// `named`: the user gave `--client-name`, which is then the actor of every
/// change; else it is the MCP client's own name (`mcp:claude-code`).
pub async fn serve(
    connector: crate::client::Connector,
    named: bool,
    choice: PlanChoice,
    groups: &[String],
) -> anyhow::Result<()> {
    let phase_kinds = daemon_phase_kinds(&connector).await;
    let mut server = TodoMcp::new(connector, named, choice, groups);
    server.instructions = instructions(&phase_kinds);
    let running = server.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

fn group_of(tool: &str) -> &'static str {
    match tool {
        "todowrite" | "todoread" => "opencode",
        "update_plan" => "codex",
        "write_todos" => "gemini",
        "plan" | "plan_status" | "task_history" => "plan",
        _ => "claude",
    }
}

/// How long a tool may wait on the daemon: a wedged daemon or a dead peer
/// must not hang the agent.
const CALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

async fn bounded<T>(call: impl std::future::Future<Output = ToolResult<T>>) -> ToolResult<T> {
    tokio::time::timeout(CALL_LIMIT, call)
        .await
        .unwrap_or_else(|_| {
            Err(ToolError(format!(
                "todod did not answer within {}s; the change may or may not have been made: \
             read the list before writing again",
                CALL_LIMIT.as_secs()
            )))
        })
}

/// A tool's input schema, from its argument type.
fn input_schema<T: schemars::JsonSchema + 'static>() -> std::sync::Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_input::<T>()
        .unwrap_or_else(|e| panic!("tool arguments must be an object: {e}"))
}

/// A tool's arguments. Parsed here rather than by rmcp so that a bad one is
/// named by its path (`todos[1].status: unknown variant ...`).
fn parse<T: serde::de::DeserializeOwned>(raw: JsonObject) -> ToolResult<T> {
    serde_path_to_error::deserialize(serde_json::Value::Object(raw)).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            ToolError(format!("invalid arguments: {}", e.inner()))
        } else {
            ToolError(format!("invalid argument: {path}: {}", e.inner()))
        }
    })
}

/// A tool's arguments, or the tool's answer that they are wrong.
macro_rules! args {
    ($raw:expr) => {
        match parse($raw) {
            Ok(args) => args,
            Err(e) => return view::refusal(e.0),
        }
    };
}

/// A task id argument, checked before it reaches the daemon.
fn task_id(field: &str, id: &str) -> ToolResult<String> {
    let id = id.trim();
    let ok = id.strip_prefix('t').is_some_and(|d| {
        d.bytes().all(|b| b.is_ascii_digit()) && d.parse::<u64>().is_ok_and(|n| n > 0)
    });
    if ok {
        Ok(id.to_string())
    } else {
        Err(ToolError(format!(
            "{field}: {id:?} is not a task id; todod's ids look like \"t42\" (see TaskList)"
        )))
    }
}

#[tool_router]
impl TodoMcp {
    pub fn new(
        connector: crate::client::Connector,
        named: bool,
        choice: PlanChoice,
        groups: &[String],
    ) -> Self {
        let mut tool_router = Self::tool_router();
        let names: Vec<String> = tool_router
            .list_all()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        for name in names {
            if !groups.iter().any(|g| g == "all" || g == group_of(&name)) {
                tool_router.remove_route(&name);
            }
        }
        TodoMcp {
            session: Arc::new(Session::new(connector, named, choice)),
            tool_router,
            instructions: instructions(&[]),
        }
    }

    // ---- full-list shapes ----

    #[tool(
        name = "todowrite",
        description = "Write your todo list (opencode's shape): the whole list, each item with \
        content, status (pending, in_progress, completed, cancelled) and priority. Keep ids \
        from earlier answers. Returns the list with ids and its revision.",
        input_schema = input_schema::<shapes::OpencodeWrite>()
    )]
    async fn todowrite(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: shapes::OpencodeWrite = args!(raw);
        let items = args.items();
        self.write(Shape::Opencode, args.guard, items, "").await
    }

    #[tool(
        name = "todoread",
        description = "Read your todo list (opencode's shape) with ids, statuses, what blocks \
        what, and its revision.",
        input_schema = input_schema::<PlanArg>()
    )]
    async fn todoread(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: PlanArg = args!(raw);
        self.read(Shape::Opencode, args.plan.as_deref()).await
    }

    #[tool(
        name = "TodoWrite",
        description = "Write your task list (Claude Code's shape): the whole list, each item \
        with content (imperative), status (pending, in_progress, completed) and activeForm \
        (present continuous). Items are matched by content. Returns the list with ids.",
        input_schema = input_schema::<shapes::ClaudeWrite>()
    )]
    async fn todo_write(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: shapes::ClaudeWrite = args!(raw);
        let items = args.items();
        self.write(Shape::Claude, args.guard, items, "").await
    }

    #[tool(
        name = "update_plan",
        description = "Update your plan (Codex CLI's shape): the whole plan as steps with \
        status (pending, in_progress, completed), and an optional explanation of the change.",
        input_schema = input_schema::<shapes::CodexPlan>()
    )]
    async fn update_plan(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: shapes::CodexPlan = args!(raw);
        let items = args.items();
        let reason = args.explanation.clone().unwrap_or_default();
        self.write(Shape::Codex, args.guard(), items, &reason).await
    }

    #[tool(
        name = "write_todos",
        description = "Write your todo list (Gemini CLI's shape): the complete list, each item \
        with a description and status (pending, in_progress, completed, cancelled).",
        input_schema = input_schema::<shapes::GeminiWrite>()
    )]
    async fn write_todos(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: shapes::GeminiWrite = args!(raw);
        let items = args.items();
        self.write(Shape::Gemini, args.guard, items, "").await
    }

    // ---- Claude Code's task tools ----

    #[tool(
        name = "TaskCreate",
        description = "Create a task in the project's task list. Returns its id (like \"t42\"); \
        use TaskUpdate to set status, owner and what blocks it.",
        input_schema = input_schema::<shapes::TaskCreate>()
    )]
    async fn task_create(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: shapes::TaskCreate = args!(raw);
        let result = async {
            let plan = self.ensure_plan(args.plan.as_deref()).await?;
            let metadata = shapes::task_patch(&args.description, &args.active_form, &args.metadata);
            let task = self
                .session
                .mutate(
                    CreateTaskRequest {
                        plan: plan.clone(),
                        content: args.subject.clone(),
                        metadata_json: metadata.unwrap_or_default(),
                        ..Default::default()
                    },
                    |r, id| r.request_id = id,
                    |mut c, r| async move { c.create_task(r).await },
                )
                .await
                .map_err(|s| rename(s, &[("content", "subject"), ("metadata_json", "metadata")]))?;
            Ok(view::answer(
                format!(
                    "Task {} created in plan {plan:?}: {}",
                    task.id,
                    view::one_line(&task.content)
                ),
                json!({ "task": { "id": task.id, "subject": task.content }, "plan": plan }),
            ))
        };
        self.settle(bounded(result).await)
    }

    #[tool(
        name = "TaskUpdate",
        description = "Update a task: subject, description, activeForm, status (pending, \
        in_progress, completed, deleted), owner, metadata (keys merged; null removes), and \
        dependencies: addBlockedBy (tasks that must complete first) and addBlocks (tasks that \
        wait for this one). Completing a task unblocks the tasks it blocks.",
        input_schema = input_schema::<shapes::TaskUpdate>()
    )]
    async fn task_update(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: shapes::TaskUpdate = args!(raw);
        self.settle(bounded(self.update_steps(args)).await)
    }

    #[tool(
        name = "TaskList",
        description = "List the project's tasks: id, subject, status, owner and the open \
        tasks blocking each. Deleted (cancelled) tasks are left out.",
        annotations(read_only_hint = true),
        input_schema = input_schema::<PlanArg>()
    )]
    async fn task_list(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: PlanArg = args!(raw);
        let result = async {
            let plan = self.session.plan(args.plan.as_deref()).await?;
            let tasks = self.plan_tasks(&plan).await?;
            let shown: Vec<&Task> = tasks.iter().filter(|t| t.status != "cancelled").collect();
            let text = if shown.is_empty() {
                format!("Plan {plan:?} has no tasks.")
            } else {
                shown
                    .iter()
                    .map(|t| view::task_line(t))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            let items: Vec<_> = shown
                .iter()
                .map(|t| shapes::claude_task(t, &tasks, false))
                .collect();
            Ok(view::answer(text, json!({ "plan": plan, "tasks": items })))
        };
        self.settle(bounded(result).await)
    }

    #[tool(
        name = "TaskGet",
        description = "Get one task in full: subject, description, status, owner, metadata, \
        the tasks it blocks and the tasks blocking it.",
        annotations(read_only_hint = true),
        input_schema = input_schema::<shapes::TaskGet>()
    )]
    async fn task_get(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: shapes::TaskGet = args!(raw);
        let result = async {
            let id = task_id("taskId", &args.task_id)?;
            let mut client = self.session.client().await?;
            let task = client.get_task(GetTaskRequest { id }).await?.into_inner();
            let plan = self.plan_tasks(&task.plan).await?;
            let v = shapes::claude_task(&task, &plan, true);
            let text = format!(
                "{}\n{}",
                view::task_line(&task),
                serde_json::to_string_pretty(&v).unwrap_or_default()
            );
            Ok(view::answer(text, json!({ "task": v })))
        };
        self.settle(bounded(result).await)
    }

    // ---- the plan ----

    #[tool(
        name = "plan",
        description = "Which plan (list) this session uses, and the other plans. Give `name` \
        to switch to another plan for the rest of the session (it is created on first write).",
        input_schema = input_schema::<shapes::PlanSelect>()
    )]
    async fn plan(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: shapes::PlanSelect = args!(raw);
        let result = async {
            if let Some(name) = args
                .name
                .as_deref()
                .map(str::trim)
                .filter(|n| !n.is_empty())
            {
                self.session.use_plan(name).await;
            }
            let current = self.session.plan(None).await?;
            let how = match self.session.choice().await {
                PlanChoice::Named(_) => "named".to_string(),
                PlanChoice::Project(dir) => format!("the project at {}", dir.display()),
            };
            let mut client = self.session.client().await?;
            let plans = client
                .list_plans(ListPlansRequest {
                    highlight_limit: 1,
                    ..Default::default()
                })
                .await?
                .into_inner()
                .plans;
            let mut text = format!("This session uses plan {current:?} ({how}).\nPlans:\n");
            let mut listed = Vec::new();
            for s in &plans {
                let p = s.plan.clone().unwrap_or_default();
                let open: i64 = s
                    .counts
                    .iter()
                    .filter(|c| c.status == "pending" || c.status == "in_progress")
                    .map(|c| c.count)
                    .sum();
                text.push_str(&format!(
                    "- {} ({} tasks, {open} open){}\n",
                    view::one_line(&p.name),
                    s.total,
                    if p.name == current { ", current" } else { "" }
                ));
                listed.push(
                    json!({ "name": p.name, "title": p.title, "total": s.total, "open": open }),
                );
            }
            Ok(view::answer(
                text,
                json!({ "current": current, "plans": listed }),
            ))
        };
        self.settle(bounded(result).await)
    }

    #[tool(
        name = "plan_status",
        description = "The plan at a glance, as people see it in `todoctl status`: counts, what \
        is in progress, ready and blocked, what failed and why, and the pipeline's phase tasks \
        (generation, tokenization, ...) with progress, rate and ETA.",
        annotations(read_only_hint = true),
        input_schema = input_schema::<PlanArg>()
    )]
    async fn plan_status(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: PlanArg = args!(raw);
        let result = async {
            let plan = self.session.plan(args.plan.as_deref()).await?;
            let mut client = self.session.client().await?;
            let (text, value) = crate::screens::plan_screen(&mut client, plan, 10).await?;
            let text = crate::safe::escape_keep_newlines(&crate::style::strip(&text)).into_owned();
            Ok(view::answer(text, value))
        };
        self.settle(bounded(result).await)
    }

    #[tool(
        name = "task_history",
        description = "The history of one task: every change with who made it and when \
        (progress samples summarised).",
        annotations(read_only_hint = true),
        input_schema = input_schema::<shapes::TaskGet>()
    )]
    async fn task_history(&self, Parameters(raw): Parameters<JsonObject>) -> CallToolResult {
        let args: shapes::TaskGet = args!(raw);
        let result = async {
            let id = task_id("taskId", &args.task_id)?;
            let mut client = self.session.client().await?;
            let task = client
                .get_task(GetTaskRequest { id: id.clone() })
                .await?
                .into_inner();
            // Every page, as `todoctl show` reads them: the text thins the
            // progress samples, the structured answer keeps the changes and
            // the last sample.
            let events = crate::screens::fetch_events(&mut client, &id).await?;
            let text = crate::render::task_details(
                &task,
                &events,
                false,
                crate::phase_view::summary(&task.kind, &task.result_json),
            );
            let text = crate::safe::escape_keep_newlines(&crate::style::strip(&text)).into_owned();
            let last_progress = events.iter().rposition(|e| e.r#type == "progress");
            let events: Vec<_> = events
                .iter()
                .enumerate()
                .filter(|(i, e)| e.r#type != "progress" || Some(*i) == last_progress)
                .map(|(_, e)| crate::json::event(e))
                .collect();
            Ok(view::answer(
                text,
                json!({ "task": crate::json::task(&task), "events": events }),
            ))
        };
        self.settle(bounded(result).await)
    }
}

impl TodoMcp {
    /// A tool's outcome as the model gets it.
    fn settle(&self, result: ToolResult<CallToolResult>) -> CallToolResult {
        result.unwrap_or_else(|e| view::refusal(e.0))
    }

    async fn read(&self, shape: Shape, plan: Option<&str>) -> CallToolResult {
        let result = async {
            let plan = self.session.plan(plan).await?;
            let read = self.session.read(&plan).await?;
            let revision = read.plan.as_ref().map_or(0, |p| p.revision);
            self.session.saw(&plan, revision).await;
            Ok(view::list(shape, &plan, revision, &read.todos))
        };
        self.settle(bounded(result).await)
    }

    async fn write(
        &self,
        shape: Shape,
        guard: shapes::WriteGuard,
        items: Vec<TodoItem>,
        reason: &str,
    ) -> CallToolResult {
        let result = async {
            let plan = self.session.plan(guard.plan.as_deref()).await?;
            match self
                .session
                .write_list(&plan, items, guard.revision, reason)
                .await?
            {
                Ok(w) => {
                    let revision = w.plan.as_ref().map_or(0, |p| p.revision);
                    Ok(view::list(shape, &plan, revision, &w.todos))
                }
                Err(conflict) => Ok(view::conflict(shape, &plan, &conflict)),
            }
        };
        bounded(result)
            .await
            .unwrap_or_else(|e: ToolError| view::refusal(shape.words(&e.0)))
    }

    /// The session's plan, created if it does not exist yet (CreateTask
    /// needs one; list writes create it themselves).
    async fn ensure_plan(&self, explicit: Option<&str>) -> ToolResult<String> {
        let plan = self.session.plan(explicit).await?;
        self.session.ensure_plan(&plan).await?;
        Ok(plan)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TodoMcp {
    /// As rmcp's, and the client's name kept as the actor of its changes.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.session.set_peer(&request.client_info.name);
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("todod", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.instructions.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_are_todods_own() {
        assert_eq!(task_id("taskId", " t42 ").unwrap(), "t42");
        for bad in ["1", "t", "t0", "t-1", "T4", "t4x", ""] {
            let err = task_id("taskId", bad).unwrap_err().0;
            assert!(err.starts_with("taskId: "), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_arguments_are_named_by_their_path() {
        let raw = |v: serde_json::Value| v.as_object().unwrap().clone();
        let err = parse::<shapes::OpencodeWrite>(raw(json!({"todos": [
            {"content": "a", "status": "pending"},
            {"content": "b", "status": "done"}
        ]})))
        .unwrap_err()
        .0;
        assert!(
            err.starts_with("invalid argument: todos[1].status: unknown variant `done`"),
            "{err}"
        );
        let err = parse::<shapes::CodexPlan>(raw(json!({}))).unwrap_err().0;
        assert_eq!(err, "invalid arguments: missing field `plan`");
    }

    #[test]
    fn each_shape_speaks_its_own_field_names() {
        let m = "invalid argument: todos[2].content: must not be empty";
        assert_eq!(
            Shape::Codex.words(m),
            "invalid argument: plan[2].step: must not be empty"
        );
        assert_eq!(
            Shape::Gemini.words(m),
            "invalid argument: todos[2].description: must not be empty"
        );
        assert_eq!(Shape::Opencode.words(m), m);
        let patch = shapes::task_patch(&Some("d".into()), &None, &None).unwrap();
        assert_eq!(patch, r#"{"description":"d"}"#);
        assert_eq!(shapes::task_patch(&None, &None, &None), None);
    }

    #[test]
    fn tool_groups_choose_the_tools() {
        let connector = crate::client::Connector::new("http://127.0.0.1:1", None, "t").unwrap();
        let choice = PlanChoice::Named("p".into());
        let all = TodoMcp::new(connector.clone(), false, choice.clone(), &["all".into()]);
        assert_eq!(all.tool_router.list_all().len(), 12);
        let some = TodoMcp::new(connector, false, choice, &["codex".into(), "plan".into()]);
        let mut names: Vec<String> = some
            .tool_router
            .list_all()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["plan", "plan_status", "task_history", "update_plan"]
        );
    }
}
