//! One MCP session: which plan it works on, the plan revision it last showed
//! the model, and its connection to the daemon.
//!
//! A full-list write (todowrite, TodoWrite, update_plan, write_todos) replaces
//! the plan's list, so it must not overwrite what another agent wrote since
//! this one read it. Each such write carries the revision the model last saw:
//! the `revision` argument when the model passes one, else the revision this
//! session last showed it. The daemon refuses a stale one (ABORTED) and the
//! tool answers with the fresh list and what to do. A session that has shown
//! nothing yet may not replace a list that already holds items it does not
//! name: plans outlive sessions, and the first write of a new session would
//! otherwise archive the last session's work unseen.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use todod_proto::{
    CreatePlanRequest, GetPlanRequest, ReadTodosRequest, ReadTodosResponse, TodoItem,
    WriteTodosRequest, WriteTodosResponse,
};
use tokio::sync::Mutex;
use tonic::{Code, Status};

use crate::client::{Client, Connector};

/// How the session's plan was chosen.
#[derive(Debug, Clone)]
pub enum PlanChoice {
    /// `--plan` or `TODOD_PLAN`, or the `plan` tool.
    Named(String),
    /// One plan per project: named after the project's directory.
    Project(PathBuf),
}

/// A tool's failure, in words for the model; never a crash of the server.
#[derive(Debug)]
pub struct ToolError(pub String);

impl From<tonic::Status> for ToolError {
    fn from(s: tonic::Status) -> Self {
        let why = s.message();
        ToolError(match s.code() {
            Code::InvalidArgument | Code::OutOfRange => format!("invalid argument: {why}"),
            Code::NotFound => format!("not found: {why}"),
            Code::FailedPrecondition => format!("refused: {why}"),
            Code::AlreadyExists => format!("already exists: {why}"),
            Code::Aborted => format!("conflict: {why}"),
            Code::Unknown | Code::Cancelled => format!(
                "the connection to todod broke ({why}); the change may or may not have \
                 been made: read the list before writing again"
            ),
            Code::Unavailable => format!(
                "the todod daemon is not reachable ({why}); it may have stopped. \
                 Ask the user to start it with `todod`, then try again"
            ),
            Code::Unauthenticated | Code::PermissionDenied => format!(
                "todod refused the credentials ({why}); the user must set TODOD_TOKEN \
                 or give the MCP server the daemon's --state-dir"
            ),
            code => format!("todod error ({code:?}): {why}"),
        })
    }
}

/// A CLI helper's failure (they speak anyhow): a daemon status in the
/// tools' words, anything else as it reads.
impl From<anyhow::Error> for ToolError {
    fn from(e: anyhow::Error) -> Self {
        match e.downcast::<tonic::Status>() {
            Ok(s) => ToolError::from(s),
            Err(e) => ToolError(e.to_string()),
        }
    }
}

impl From<crate::error::CliError> for ToolError {
    fn from(e: crate::error::CliError) -> Self {
        ToolError(e.to_string())
    }
}

pub type ToolResult<T> = Result<T, ToolError>;

pub struct Session {
    connector: Connector,
    /// Whether the user named the client (`--client-name`); else the MCP
    /// client's own name is recorded as the actor (`mcp:opencode`).
    named: bool,
    peer: std::sync::Mutex<Option<String>>,
    choice: Mutex<PlanChoice>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    client: Option<Client>,
    /// The plan the choice resolved to, once asked.
    plan: Option<String>,
    /// Per plan: the revision this session last showed the model.
    seen: HashMap<String, i64>,
    /// Per plan: the list of the last refused write, until one goes through.
    refused: HashMap<String, u64>,
}

impl Session {
    pub fn new(connector: Connector, named: bool, choice: PlanChoice) -> Self {
        Session {
            connector,
            named,
            peer: std::sync::Mutex::new(None),
            choice: Mutex::new(choice),
            state: Mutex::new(State::default()),
        }
    }

    /// The MCP client's name from its `initialize` (`clientInfo.name`):
    /// letters, digits and `._-` of it, so it can travel as metadata.
    pub fn set_peer(&self, name: &str) {
        let name: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
            .take(64)
            .collect();
        if !name.is_empty() {
            *self.peer.lock().unwrap_or_else(|p| p.into_inner()) = Some(name);
        }
    }

    /// How to reach the daemon, naming this session's agent.
    fn connector(&self) -> Connector {
        let peer = self.peer.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match peer {
            Some(peer) if !self.named => self
                .connector
                .with_client_name(&format!("mcp:{peer}"))
                .unwrap_or_else(|_| self.connector.clone()),
            _ => self.connector.clone(),
        }
    }

    /// A connected client, dialled on first use (tonic's channel dials again
    /// by itself when the daemon comes back).
    pub async fn client(&self) -> ToolResult<Client> {
        let mut state = self.state.lock().await;
        if let Some(client) = &state.client {
            return Ok(client.clone());
        }
        let client = self.connector().connect().await?;
        state.client = Some(client.clone());
        Ok(client)
    }

    /// Sends a mutating call with a fresh request id (one per call a tool
    /// makes), and once more over a new connection if its answer was lost
    /// (`client::send_once`): a lost answer never makes a second task.
    pub async fn mutate<Req, Resp, Fut>(
        &self,
        req: Req,
        set_id: impl FnOnce(&mut Req, String),
        call: impl Fn(Client, Req) -> Fut,
    ) -> Result<Resp, Status>
    where
        Req: Clone,
        Fut: std::future::Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        let unreachable = |e: ToolError| Status::unavailable(e.0);
        let first = self.client().await.map_err(unreachable)?;
        crate::client::send_once(
            first,
            || async {
                self.state.lock().await.client = None;
                self.client().await.map_err(unreachable)
            },
            req,
            set_id,
            call,
        )
        .await
    }

    /// The plan a tool works on: `explicit` if given, else the session's.
    pub async fn plan(&self, explicit: Option<&str>) -> ToolResult<String> {
        if let Some(name) = explicit.map(str::trim).filter(|n| !n.is_empty()) {
            return Ok(name.to_string());
        }
        if let Some(plan) = self.state.lock().await.plan.clone() {
            return Ok(plan);
        }
        let choice = self.choice.lock().await.clone();
        let plan = match choice {
            PlanChoice::Named(name) => name,
            PlanChoice::Project(dir) => self.project_plan(&dir).await?,
        };
        // The `plan` tool may have chosen one meanwhile (calls run
        // concurrently): that choice stands.
        let mut state = self.state.lock().await;
        Ok(state.plan.get_or_insert(plan).clone())
    }

    /// Switches the session to another plan (the `plan` tool).
    pub async fn use_plan(&self, name: &str) {
        *self.choice.lock().await = PlanChoice::Named(name.to_string());
        self.state.lock().await.plan = Some(name.to_string());
    }

    pub async fn choice(&self) -> PlanChoice {
        self.choice.lock().await.clone()
    }

    /// The project's plan: named after its directory, its title the
    /// directory's path. Two projects with the same directory name do not
    /// share a list: the second gets the name with a hash of its path.
    async fn project_plan(&self, dir: &Path) -> ToolResult<String> {
        let title = dir.display().to_string();
        let base = plan_name_for(dir);
        for name in [base.clone(), format!("{base}-{}", path_hash(&title))] {
            let mut client = self.client().await?;
            // Twice at most: a plan made by another session meanwhile is
            // looked at again, since it may be another directory's.
            for _ in 0..2 {
                let found = client
                    .get_plan(GetPlanRequest {
                        name: name.clone(),
                        highlight_limit: 1,
                    })
                    .await;
                match found {
                    // Ours only if titled with this directory: an untitled
                    // plan (made by todoctl or another client) is nobody's
                    // project, and adopting it would let every directory of
                    // that name share one list.
                    Ok(summary) => {
                        let plan = summary.into_inner().plan.unwrap_or_default();
                        if plan.title == title {
                            return Ok(name);
                        }
                        break;
                    }
                    Err(s) if s.code() == Code::NotFound => {
                        let created = self
                            .mutate(
                                CreatePlanRequest {
                                    name: name.clone(),
                                    title: title.clone(),
                                    ..Default::default()
                                },
                                |r, id| r.request_id = id,
                                |mut c, r| async move { c.create_plan(r).await },
                            )
                            .await;
                        match created {
                            Ok(_) => return Ok(name),
                            Err(s) if s.code() == Code::AlreadyExists => continue,
                            Err(s) => return Err(rename(s, &[("name", "plan")])),
                        }
                    }
                    Err(s) => return Err(s.into()),
                }
            }
        }
        Err(ToolError(format!(
            "the plans {base:?} and {base}-{} belong to other directories or to no \
             project; name one with the `plan` tool",
            path_hash(&title)
        )))
    }

    /// Notes the revision the model has now seen.
    pub async fn saw(&self, plan: &str, revision: i64) {
        self.state
            .lock()
            .await
            .seen
            .insert(plan.to_string(), revision);
    }

    /// Creates `plan` (untitled) unless it exists.
    pub async fn ensure_plan(&self, plan: &str) -> ToolResult<()> {
        let created = self
            .mutate(
                CreatePlanRequest {
                    name: plan.to_string(),
                    ..Default::default()
                },
                |r, id| r.request_id = id,
                |mut c, r| async move { c.create_plan(r).await },
            )
            .await;
        match created {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::AlreadyExists => Ok(()),
            Err(s) => Err(rename(s, &[("name", "plan")])),
        }
    }

    /// The plan's list. A plan that does not exist yet is created empty:
    /// its revision is then what a first write is checked against (a write
    /// expecting revision 0 would not be checked at all).
    pub async fn read(&self, plan: &str) -> ToolResult<ReadTodosResponse> {
        let mut client = self.client().await?;
        let request = || ReadTodosRequest {
            plan: plan.to_string(),
        };
        let read = match client.read_todos(request()).await {
            Err(s) if s.code() == Code::NotFound => {
                self.ensure_plan(plan).await?;
                client.read_todos(request()).await
            }
            read => read,
        };
        match read {
            Ok(r) => Ok(r.into_inner()),
            Err(s) => Err(s.into()),
        }
    }

    /// Replaces the plan's list, unless it moved on since the model looked.
    pub async fn write_list(
        &self,
        plan: &str,
        items: Vec<TodoItem>,
        revision: Option<i64>,
        reason: &str,
    ) -> ToolResult<Result<WriteTodosResponse, Conflict>> {
        let explicit = revision.filter(|r| *r > 0);
        let fingerprint = fingerprint(&items);
        let (seen, refused) = {
            let state = self.state.lock().await;
            (
                state.seen.get(plan).copied(),
                state.refused.get(plan).copied(),
            )
        };
        let expected = match explicit.or(seen) {
            // The very list refused a moment ago, sent again without the
            // revision: it was not merged, and would undo what the other
            // writer did.
            Some(_) if explicit.is_none() && refused == Some(fingerprint) => {
                let current = self.read(plan).await?;
                return Ok(Err(Conflict {
                    why: "this is the same list that was just refused; writing it would undo \
                          the changes shown below. Merge them in, or pass the revision \
                          to replace the list on purpose"
                        .into(),
                    current,
                }));
            }
            Some(revision) => revision,
            None => {
                // This session has shown nothing yet: a list that already
                // holds items (a previous session's, another agent's) is not
                // replaced unseen, even by a write that names them all,
                // since its statuses may be stale.
                let current = self.read(plan).await?;
                let revision = current.plan.as_ref().map_or(0, |p| p.revision);
                let held = current.todos.iter().filter(|t| t.kind == "todo").count();
                if held > 0 {
                    self.refused(plan, revision, fingerprint).await;
                    return Ok(Err(Conflict {
                        why: format!(
                            "plan {plan:?} already holds {held} item(s) from earlier work, which \
                             this session has not read; a write replaces the whole list"
                        ),
                        current,
                    }));
                }
                revision
            }
        };
        let written = self
            .mutate(
                WriteTodosRequest {
                    plan: plan.to_string(),
                    todos: items,
                    expected_revision: expected,
                    reason: reason.to_string(),
                    ..Default::default()
                },
                |r, id| r.request_id = id,
                |mut c, r| async move { c.write_todos(r).await },
            )
            .await;
        match written {
            Ok(w) => {
                let mut state = self.state.lock().await;
                state.refused.remove(plan);
                if let Some(p) = &w.plan {
                    state.seen.insert(plan.to_string(), p.revision);
                }
                Ok(Ok(w))
            }
            Err(s) if s.code() == Code::Aborted => {
                let current = self.read(plan).await?;
                let revision = current.plan.as_ref().map_or(0, |p| p.revision);
                self.refused(plan, revision, fingerprint).await;
                Ok(Err(Conflict {
                    why: format!(
                        "the list changed since revision {expected} (another agent or a person \
                         wrote it, or this session's task tools did)"
                    ),
                    current,
                }))
            }
            Err(s) => Err(s.into()),
        }
    }

    /// A refused write: the list it was shown with, and what was refused.
    async fn refused(&self, plan: &str, revision: i64, fingerprint: u64) {
        let mut state = self.state.lock().await;
        state.seen.insert(plan.to_string(), revision);
        state.refused.insert(plan.to_string(), fingerprint);
    }
}

/// A daemon error about a field, in the tool's own argument names.
pub fn rename(s: tonic::Status, names: &[(&str, &str)]) -> ToolError {
    let mut e = ToolError::from(s);
    for (from, to) in names {
        let prefix = format!("invalid argument: {from}:");
        if e.0.starts_with(&prefix) {
            e.0 = format!("invalid argument: {to}:{}", &e.0[prefix.len()..]);
        }
    }
    e
}

/// A full-list write refused because the list is not what the model saw.
pub struct Conflict {
    pub why: String,
    pub current: ReadTodosResponse,
}

/// What a list write says, to tell the same list sent again.
fn fingerprint(items: &[TodoItem]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for i in items {
        (
            &i.id,
            &i.content,
            &i.status,
            &i.priority,
            &i.metadata_patch_json,
        )
            .hash(&mut h);
    }
    h.finish()
}

/// A plan name from a directory's name: letters, digits and `._:-`, the
/// rest as `-`.
pub fn plan_name_for(dir: &Path) -> String {
    let base = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let name: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._:-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(100)
        .collect();
    let name = name.trim_matches('-').to_string();
    if name.is_empty() {
        "project".to_string()
    } else {
        name
    }
}

/// The project's directory: the nearest one above `cwd` holding `.git`,
/// else `cwd` itself.
pub fn project_dir(cwd: &Path) -> PathBuf {
    cwd.ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(cwd)
        .to_path_buf()
}

/// FNV-1a of the path, 8 hex digits: stable across runs and machines.
fn path_hash(path: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in path.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_names_come_from_the_directory() {
        assert_eq!(plan_name_for(Path::new("/home/a/my project")), "my-project");
        assert_eq!(plan_name_for(Path::new("/srv/datagen.v2")), "datagen.v2");
        assert_eq!(plan_name_for(Path::new("/")), "project");
        assert_eq!(plan_name_for(Path::new("/x/ü")), "project");
        // FNV-1a's own test vectors, then paths: stable, and apart.
        assert_eq!(path_hash(""), "811c9dc5");
        assert_eq!(path_hash("a"), "e40c292c");
        assert_eq!(path_hash("/a/app"), "5dc90e4d");
        assert_eq!(path_hash("/b/app"), "d4d769c0");
    }
}
