//! The todo shapes of the agents people run, as tool arguments, and how each
//! maps onto todod's list and back. The schemas are what the model reads:
//! field docs are written for it.
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use todod_proto::{Task, TodoItem};

/// An item's status. The agents' own lists know pending, in_progress and
/// completed (opencode and Gemini CLI also cancelled); todod's lists also
/// hold cancelled and failed items, which a list read back must be able to
/// say again unchanged.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListStatus {
    Pending,
    InProgress,
    Completed,
    Cancelled,
    Failed,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    High,
    Medium,
    Low,
}

impl ListStatus {
    fn as_str(self) -> &'static str {
        match self {
            ListStatus::Pending => "pending",
            ListStatus::InProgress => "in_progress",
            ListStatus::Completed => "completed",
            ListStatus::Cancelled => "cancelled",
            ListStatus::Failed => "failed",
        }
    }
}

impl Priority {
    fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Medium => "medium",
            Priority::Low => "low",
        }
    }
}

/// One item of a list write: an id to keep (if the model gave one), its
/// text and its status.
fn item(id: &Option<String>, content: &str, status: ListStatus) -> TodoItem {
    TodoItem {
        id: id.clone().unwrap_or_default(),
        content: content.to_string(),
        status: status.as_str().into(),
        ..Default::default()
    }
}

/// Common to every full-list write.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct WriteGuard {
    /// The revision shown by your last read or write of this list. The write
    /// is refused if the list changed since (another agent wrote it); you then
    /// get the current list to merge your changes into. Leave out to use the
    /// revision this session last saw.
    #[serde(default)]
    pub revision: Option<i64>,
    /// Plan (list) to write; leave out for this project's plan.
    #[serde(default)]
    pub plan: Option<String>,
}

// ---- opencode: todowrite / todoread ----

#[derive(Debug, Deserialize, JsonSchema)]
pub struct OpencodeTodo {
    /// The item's id from an earlier answer (like "t42"); leave out for a new
    /// item. An item without an id matches an existing one with the same content.
    #[serde(default)]
    pub id: Option<String>,
    /// Brief description of the task
    pub content: String,
    /// Current status of the task
    pub status: ListStatus,
    /// Priority level of the task (default medium)
    #[serde(default)]
    pub priority: Option<Priority>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct OpencodeWrite {
    /// The updated todo list: the whole list. Items left out are archived
    /// (kept in the history, hidden from the list).
    pub todos: Vec<OpencodeTodo>,
    #[serde(flatten)]
    pub guard: WriteGuard,
}

impl OpencodeWrite {
    pub fn items(&self) -> Vec<TodoItem> {
        self.todos
            .iter()
            .map(|t| TodoItem {
                priority: t.priority.map(|p| p.as_str().into()).unwrap_or_default(),
                ..item(&t.id, &t.content, t.status)
            })
            .collect()
    }
}

// ---- Claude Code: TodoWrite ----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaudeTodo {
    /// The item's id from an earlier answer (like "t42"), to keep it the
    /// same task when its text changes; leave out for a new item.
    #[serde(default)]
    pub id: Option<String>,
    /// What needs to be done, imperative ("Run the tests")
    pub content: String,
    pub status: ListStatus,
    /// The same in present continuous, shown while it is in progress
    /// ("Running the tests")
    #[serde(default)]
    pub active_form: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ClaudeWrite {
    /// The updated todo list: the whole list. Items are matched to existing
    /// ones by their content; items left out are archived.
    pub todos: Vec<ClaudeTodo>,
    #[serde(flatten)]
    pub guard: WriteGuard,
}

impl ClaudeWrite {
    pub fn items(&self) -> Vec<TodoItem> {
        self.todos
            .iter()
            .map(|t| TodoItem {
                metadata_patch_json: t
                    .active_form
                    .as_ref()
                    .map(|a| json!({ "activeForm": a }).to_string())
                    .unwrap_or_default(),
                ..item(&t.id, &t.content, t.status)
            })
            .collect()
    }
}

// ---- OpenAI Codex CLI: update_plan ----

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CodexStep {
    /// The item's id from an earlier answer (like "t42"), to keep it the
    /// same task when its text changes; leave out for a new item.
    #[serde(default)]
    pub id: Option<String>,
    /// One step of the plan
    pub step: String,
    pub status: ListStatus,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CodexPlan {
    /// Why the plan changed (recorded in the history)
    #[serde(default)]
    pub explanation: Option<String>,
    /// The whole plan, in order. At most one step in_progress at a time.
    pub plan: Vec<CodexStep>,
    /// As in the other list tools: the revision of your last read or write.
    #[serde(default)]
    pub revision: Option<i64>,
    /// The todod plan (list) to write; leave out for this project's plan.
    #[serde(default)]
    pub plan_name: Option<String>,
}

impl CodexPlan {
    pub fn guard(&self) -> WriteGuard {
        WriteGuard {
            revision: self.revision,
            plan: self.plan_name.clone(),
        }
    }

    pub fn items(&self) -> Vec<TodoItem> {
        self.plan
            .iter()
            .map(|s| item(&s.id, &s.step, s.status))
            .collect()
    }
}

// ---- Gemini CLI: write_todos ----

#[derive(Debug, Deserialize, JsonSchema)]
pub struct GeminiTodo {
    /// The item's id from an earlier answer (like "t42"), to keep it the
    /// same task when its text changes; leave out for a new item.
    #[serde(default)]
    pub id: Option<String>,
    /// What the task is
    pub description: String,
    pub status: ListStatus,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct GeminiWrite {
    /// The complete list of todos; items left out are archived.
    pub todos: Vec<GeminiTodo>,
    #[serde(flatten)]
    pub guard: WriteGuard,
}

impl GeminiWrite {
    pub fn items(&self) -> Vec<TodoItem> {
        self.todos
            .iter()
            .map(|t| item(&t.id, &t.description, t.status))
            .collect()
    }
}

/// Which agent's shape a list answer comes back in.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    Opencode,
    Claude,
    Codex,
    Gemini,
}

impl Shape {
    /// One task of the list in this shape, with todod's id and readiness.
    pub fn item(self, t: &Task) -> Value {
        let mut v = match self {
            Shape::Opencode => json!({
                "id": t.id, "content": t.content, "status": t.status, "priority": t.priority,
            }),
            Shape::Claude => json!({
                "id": t.id, "content": t.content, "status": t.status,
                "activeForm": metadata(t).get("activeForm").cloned().unwrap_or(Value::Null),
            }),
            Shape::Codex => json!({ "id": t.id, "step": t.content, "status": t.status }),
            Shape::Gemini => json!({ "id": t.id, "description": t.content, "status": t.status }),
        };
        if !t.blocked_by.is_empty() {
            v["blockedBy"] = json!(t.blocked_by);
        }
        if t.kind != "todo" {
            v["kind"] = json!(t.kind);
        }
        v
    }

    /// The daemon names list fields as `todos[N].content`; say it in the
    /// shape's own words.
    pub fn words(self, message: &str) -> String {
        match self {
            Shape::Opencode | Shape::Claude => message.to_string(),
            Shape::Codex => message
                .replace("todos[", "plan[")
                .replace("].content", "].step"),
            Shape::Gemini => message.replace("].content", "].description"),
        }
    }

    /// The key of the plan's name in the shape's answer (Codex's list is
    /// itself called `plan`).
    pub fn name_key(self) -> &'static str {
        match self {
            Shape::Codex => "plan_name",
            _ => "plan",
        }
    }

    /// The list key of the shape's answer.
    pub fn key(self) -> &'static str {
        match self {
            Shape::Codex => "plan",
            _ => "todos",
        }
    }
}

/// A task's metadata object (empty when it has none).
pub fn metadata(t: &Task) -> Map<String, Value> {
    match serde_json::from_str(&t.metadata_json) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

// ---- Claude Code: TaskCreate / TaskUpdate / TaskList / TaskGet ----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskCreate {
    /// A brief title, imperative ("Fix the CSV parser")
    pub subject: String,
    /// What needs to be done, in detail
    #[serde(default)]
    pub description: Option<String>,
    /// Present continuous form shown while in progress ("Fixing the CSV parser")
    #[serde(default)]
    pub active_form: Option<String>,
    /// Your own keys to keep with the task
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Plan to add it to; leave out for this project's plan.
    #[serde(default)]
    pub plan: Option<String>,
}

/// TaskUpdate's statuses; `deleted` cancels the task (its history is kept).
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Pending,
    InProgress,
    Completed,
    Deleted,
}

impl TaskStatus {
    pub fn todod(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::InProgress => "in_progress",
            TaskStatus::Completed => "completed",
            TaskStatus::Deleted => "cancelled",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskUpdate {
    /// The task's id, like "t42"
    pub task_id: String,
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub active_form: Option<String>,
    /// New status. A task can start or complete only once every task that
    /// blocks it is completed. `deleted` cancels it.
    #[serde(default)]
    pub status: Option<TaskStatus>,
    /// Who works on it (an agent's name); "" for nobody
    #[serde(default)]
    pub owner: Option<String>,
    /// Keys to merge into the task's metadata; a key set to null is removed
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Ids of tasks that cannot start until this one is completed
    #[serde(default)]
    pub add_blocks: Vec<String>,
    /// Ids of tasks that must be completed before this one can start
    #[serde(default)]
    pub add_blocked_by: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskGet {
    /// The task's id, like "t42"
    pub task_id: String,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct PlanArg {
    /// Plan to read; leave out for this project's plan.
    #[serde(default)]
    pub plan: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct PlanSelect {
    /// A plan to switch to (letters, digits and ._:-); leave out to see the
    /// current one and the others.
    #[serde(default)]
    pub name: Option<String>,
}

/// The metadata patch that TaskCreate / TaskUpdate make: their own keys plus
/// the description and active form, which todod keeps as metadata.
pub fn task_patch(
    description: &Option<String>,
    active_form: &Option<String>,
    metadata: &Option<Map<String, Value>>,
) -> Option<String> {
    let mut patch = metadata.clone().unwrap_or_default();
    if let Some(d) = description {
        patch.insert("description".into(), json!(d));
    }
    if let Some(a) = active_form {
        patch.insert("activeForm".into(), json!(a));
    }
    (!patch.is_empty()).then(|| Value::Object(patch).to_string())
}

/// A task as Claude Code's task tools show one: `blocks` are the plan's
/// tasks that depend on it.
pub fn claude_task(t: &Task, plan: &[Task], full: bool) -> Value {
    let meta = metadata(t);
    let blocks: Vec<&str> = plan
        .iter()
        .filter(|o| o.depends_on.contains(&t.id))
        .map(|o| o.id.as_str())
        .collect();
    let mut v = json!({
        "id": t.id,
        "subject": t.content,
        "status": t.status,
        "owner": t.owner,
        "blockedBy": t.blocked_by,
    });
    if full {
        v["description"] = meta.get("description").cloned().unwrap_or(json!(""));
        v["activeForm"] = meta.get("activeForm").cloned().unwrap_or(Value::Null);
        v["blocks"] = json!(blocks);
        v["dependsOn"] = json!(t.depends_on);
        let own: Map<String, Value> = meta
            .into_iter()
            .filter(|(k, _)| k != "description" && k != "activeForm")
            .collect();
        v["metadata"] = Value::Object(own);
        v["kind"] = json!(t.kind);
    }
    v
}
