//! The gRPC edge: `todod.v1.Todos` over the store. Handlers validate and convert
//! input (naming the field on error), call the store, and convert the answer.

// tonic's `Status` is the error type every handler must return; boxing it here
// would only move the allocation.
#![allow(clippy::result_large_err)]
mod answers;
pub mod auth;
pub mod convert;
mod error;
use error::ToStatus;
mod apply_plan_file;
pub mod logins;

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::proto::{self, todos_server::Todos};
use todod_domain::annotations;
use todod_domain::model::{validate_content, validate_free_text};
use todod_domain::{Error as Rule, TaskId};
use todod_engine::phase::kind::Checked;
use todod_engine::phase::{kinds, Boundaries};
use todod_store::{EventFilter, NewTask, SpecUpdate, Store, TaskFilter, TaskUpdate, WriteContext};

pub use todod_proto::local::{CLIENT_HEADER, MAX_RESPONSE_BYTES};
/// Largest request the daemon decodes.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// Events fetched per round while a watcher catches up.
const WATCH_BATCH: usize = 500;
const DEFAULT_HIGHLIGHTS: usize = 20;
const MAX_HIGHLIGHTS: usize = 1000;

#[derive(Clone)]
pub struct TodoService {
    store: Store,
    /// What phase specs may touch (files, secrets).
    bounds: Arc<Boundaries>,
    /// Flips to true when the daemon shuts down, ending watch streams.
    shutdown: watch::Receiver<bool>,
    /// The scheduler's clock: a schedule's first slot is after its now.
    clock: Arc<dyn crate::scheduler::Clock>,
    /// Where the status page's logins are kept, and the page's address
    /// (`http://host:port`) when the daemon has a TCP listener.
    page: Option<(Arc<logins::Logins>, Option<String>)>,
    /// The inference servers the daemon runs, for `ListServers`.
    servers: Option<todod_engine::phase::servers::Servers>,
}

impl TodoService {
    pub fn new(
        store: Store,
        bounds: Arc<Boundaries>,
        shutdown: watch::Receiver<bool>,
    ) -> TodoService {
        TodoService {
            store,
            bounds,
            shutdown,
            clock: Arc::new(crate::scheduler::SystemClock),
            page: None,
            servers: None,
        }
    }

    /// Lets `ListServers` list the servers the daemon runs.
    pub fn with_servers(mut self, servers: todod_engine::phase::servers::Servers) -> TodoService {
        self.servers = Some(servers);
        self
    }

    /// Lets `OpenPage` mint logins for the page at `base`.
    pub fn with_page(mut self, logins: Arc<logins::Logins>, base: Option<String>) -> TodoService {
        self.page = Some((logins, base));
        self
    }

    /// The same service with the scheduler's clock (a test's).
    pub fn with_clock(mut self, clock: Arc<dyn crate::scheduler::Clock>) -> TodoService {
        self.clock = clock;
        self
    }

    /// The first answer to a retried call, checked before the request is
    /// looked at again (what it was checked against may have moved on since);
    /// the write itself checks again, in its transaction.
    async fn kept<R: prost::Message + Default>(
        &self,
        ctx: &WriteContext,
    ) -> Result<Option<R>, Status> {
        let Some(key) = &ctx.request else {
            return Ok(None);
        };
        match self
            .store
            .kept_answer(&ctx.actor, key)
            .await
            .map_err(ToStatus::to_status)?
        {
            None => Ok(None),
            Some(bytes) => answers::decode(&bytes).map(Some),
        }
    }

    /// ArchivePlan and RestorePlan.
    async fn change_plan(
        &self,
        request: Request<proto::PlanChangeRequest>,
        restore: bool,
    ) -> Result<Response<proto::Plan>, Status> {
        let method = if restore {
            "RestorePlan"
        } else {
            "ArchivePlan"
        };
        let ctx = context(&request, method)?;
        if let Some(kept) = self.kept(&ctx).await? {
            return Ok(Response::new(kept));
        }
        let name =
            convert::plan_name("name", &request.get_ref().name).map_err(ToStatus::to_status)?;
        let plan = self
            .store
            .archive_plan(&name, restore, &ctx)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(answers::answer(plan, convert::plan)?))
    }
}

/// Requests that change something: they may carry a reason, the plan
/// revision they were based on, and a client request id.
trait WriteRequest: prost::Message + Clone {
    fn reason(&self) -> &str {
        ""
    }
    fn expected_revision(&self) -> i64 {
        0
    }
    fn request_id(&self) -> &str;
    fn clear_request_id(&mut self);
}

macro_rules! write_request {
    ($($request:ty),+) => {$(
        impl WriteRequest for $request {
            fn reason(&self) -> &str {
                &self.reason
            }
            fn expected_revision(&self) -> i64 {
                self.expected_revision
            }
            fn request_id(&self) -> &str {
                &self.request_id
            }
            fn clear_request_id(&mut self) {
                self.request_id.clear();
            }
        }
    )+};
}

write_request!(
    proto::WriteTodosRequest,
    proto::CreateTaskRequest,
    proto::UpdateTaskRequest,
    proto::TransitionTaskRequest,
    proto::DependencyRequest,
    proto::ApplyPipelineRequest,
    proto::SetScheduleRequest,
    proto::PlanChangeRequest
);

impl WriteRequest for proto::CreatePlanRequest {
    fn request_id(&self) -> &str {
        &self.request_id
    }
    fn clear_request_id(&mut self) {
        self.request_id.clear();
    }
}

/// The write context of a call to `method`: who, why, at which revision,
/// and its request id.
fn context<T: WriteRequest>(
    request: &Request<T>,
    method: &'static str,
) -> Result<WriteContext, Status> {
    let actor = request
        .metadata()
        .get(CLIENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().chars().take(128).collect::<String>())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "anonymous".to_string());
    let body = request.get_ref();
    if body.expected_revision() < 0 {
        return Err(Rule::invalid("expected_revision", "must not be negative").to_status());
    }
    Ok(WriteContext {
        actor,
        reason: validate_free_text("reason", body.reason()).map_err(ToStatus::to_status)?,
        expected_revision: (body.expected_revision() > 0).then_some(body.expected_revision()),
        request: answers::request_key(method, body.request_id(), body, T::clear_request_id)?,
    })
}

/// The context and the two ends of an `AddDependency`/`RemoveDependency` edge.
fn edge(
    request: Request<proto::DependencyRequest>,
    method: &'static str,
) -> Result<(WriteContext, TaskId, TaskId), Status> {
    let ctx = context(&request, method)?;
    let req = request.into_inner();
    let id = convert::task_id("task_id", &req.task_id).map_err(ToStatus::to_status)?;
    let depends_on =
        convert::task_id("depends_on", &req.depends_on).map_err(ToStatus::to_status)?;
    Ok((ctx, id, depends_on))
}

fn highlights(field: &str, limit: i32, default: usize) -> Result<usize, Status> {
    match limit {
        n if n < 0 => Err(Rule::invalid(field, "must not be negative").to_status()),
        0 => Ok(default),
        n => Ok((n as usize).min(MAX_HIGHLIGHTS)),
    }
}

fn page_size(field: &str, size: i32) -> Result<usize, Status> {
    if size < 0 {
        return Err(Rule::invalid(field, "must not be negative").to_status());
    }
    Ok(size as usize)
}

type EventStream = Pin<Box<dyn Stream<Item = Result<proto::Event, Status>> + Send>>;

impl TodoService {
    /// Asks the spec's kind (the phase table) about it. It looks at the file system
    /// (inputs exist, outputs are free), so it runs off the async workers.
    async fn check_spec(
        &self,
        kind: todod_domain::Kind,
        json: &str,
        own: &[String],
    ) -> Result<Checked<()>, Status> {
        let (bounds, json, own) = (self.bounds.clone(), json.to_string(), own.to_vec());
        let checked = tokio::task::spawn_blocking(move || kinds::check(kind, &json, &bounds, &own))
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "spec check panicked");
                Status::internal("internal error; see the daemon's log")
            })?;
        let checked = checked.map_err(ToStatus::to_status)?;
        if let Some((field, id, kind)) = &checked.refers {
            let task = match self.store.get_task(*id).await {
                Ok(task) => task,
                Err(todod_store::Error::Rule(todod_domain::Error::NotFound { .. })) => {
                    return Err(todod_domain::Error::invalid(
                        field,
                        format!("task {id} does not exist"),
                    )
                    .to_status())
                }
                Err(e) => return Err(e.to_status()),
            };
            if task.kind != *kind {
                return Err(todod_domain::Error::invalid(
                    field,
                    format!("task {id} is a {} task, not a {kind} task", task.kind),
                )
                .to_status());
            }
        }
        Ok(checked)
    }
}

#[tonic::async_trait]
impl Todos for TodoService {
    async fn list_kinds(
        &self,
        _request: Request<proto::ListKindsRequest>,
    ) -> Result<Response<proto::ListKindsResponse>, Status> {
        Ok(Response::new(proto::ListKindsResponse {
            kinds: convert::kind_infos(),
        }))
    }

    async fn list_servers(
        &self,
        _request: Request<proto::ListServersRequest>,
    ) -> Result<Response<proto::ListServersResponse>, Status> {
        let views = self.servers.as_ref().map(|s| s.views()).unwrap_or_default();
        let servers = views
            .into_iter()
            .map(|v| proto::ServerInfo {
                name: v.name,
                id: v.id,
                state: v.state.to_string(),
                pid: i64::from(v.pid),
                url: v.url,
                uptime_seconds: v.uptime.as_secs() as i64,
                restarts: v.restarts as i64,
                last_exit: v.last_exit,
                tasks: v.tasks.iter().map(|t| t.to_string()).collect(),
                devices: i64::from(v.devices),
            })
            .collect();
        Ok(Response::new(proto::ListServersResponse { servers }))
    }

    async fn open_page(
        &self,
        request: Request<proto::OpenPageRequest>,
    ) -> Result<Response<proto::OpenPageResponse>, Status> {
        let plan = request.get_ref().plan.trim();
        let (keeper, base) =
            match &self.page {
                Some((keeper, Some(base))) => (keeper, base),
                _ => return Err(Status::failed_precondition(
                    "the daemon has no TCP listener to serve the page on; start it with --listen",
                )),
            };
        let next = if plan.is_empty() {
            "/".to_string()
        } else {
            // NOT_FOUND now, not a 404 in the browser later.
            let plan = self
                .store
                .get_plan(plan)
                .await
                .map_err(ToStatus::to_status)?;
            let path = format!("/plans/{}", logins::percent_encode(&plan.name));
            logins::percent_encode(&path)
        };
        let code = keeper.mint();
        let expires = todod_store::now_ms() + logins::CODE_TTL.as_millis() as i64;
        Ok(Response::new(proto::OpenPageResponse {
            url: format!("{base}/login?code={code}&next={next}"),
            expires_at: convert::time(expires),
        }))
    }

    async fn backup(
        &self,
        request: Request<proto::BackupRequest>,
    ) -> Result<Response<proto::BackupResponse>, Status> {
        let path = std::path::PathBuf::from(&request.get_ref().path);
        let claim = todod_engine::phase::spec::output_file("path", &path, false, &self.bounds)
            .map_err(|e| e.renamed("spec.path", "path").to_status())?;
        let target = std::path::PathBuf::from(&claim.path);
        if let Some(task) = self
            .store
            .claimed_by(&claim.path)
            .await
            .map_err(ToStatus::to_status)?
        {
            return Err(ToStatus::to_status(Rule::PathTaken {
                field: "path".into(),
                path: claim.path.clone(),
                why: format!("is an output of task {task}"),
            }));
        }
        let Some(database) = self.store.path() else {
            return Err(Status::failed_precondition(
                "the daemon's store is on PostgreSQL: back it up with pg_dump or the server's own backups",
            ));
        };
        let info = crate::backup::backup(database, &target)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, target = %target.display(), "backup failed");
                match e {
                    crate::backup::BackupError::Exists(_) => {
                        Status::already_exists(format!("path: {e}"))
                    }
                    crate::backup::BackupError::Failed(_) => {
                        Status::internal("the backup could not be written; see the daemon's log")
                    }
                }
            })?;
        if let Some(dir) = &self.bounds.state_dir {
            crate::backup::note_last(dir, &info.path);
        }
        tracing::info!(path = %info.path.display(), bytes = info.bytes, "backup written");
        Ok(Response::new(proto::BackupResponse {
            path: info.path.display().to_string(),
            bytes: info.bytes as i64,
            schema_version: info.schema_version,
            plans: info.plans,
            tasks: info.tasks,
            last_seq: info.last_seq,
        }))
    }

    async fn apply_pipeline(
        &self,
        request: Request<proto::ApplyPipelineRequest>,
    ) -> Result<Response<proto::ApplyPipelineResponse>, Status> {
        self.apply_pipeline_call(request).await
    }

    async fn set_schedule(
        &self,
        request: Request<proto::SetScheduleRequest>,
    ) -> Result<Response<proto::Task>, Status> {
        let ctx = context(&request, "SetSchedule")?;
        if let Some(kept) = self.kept(&ctx).await? {
            return Ok(Response::new(kept));
        }
        let req = request.into_inner();
        let id = convert::task_id("task_id", &req.task_id).map_err(ToStatus::to_status)?;
        let now = self.clock.now_ms();
        let schedule = if req.clear {
            None
        } else {
            let action = todod_domain::schedule::Action::parse("action", &req.action)
                .map_err(ToStatus::to_status)?;
            Some(
                todod_domain::schedule::Schedule::parse(&req.cron, &req.timezone, action, now)
                    .map_err(ToStatus::to_status)?,
            )
        };
        let taking = schedule
            .as_ref()
            .map(|s| kinds::taking(s.action))
            .unwrap_or_default();
        let task = self
            .store
            .set_schedule(id, schedule, &taking, now, &ctx)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(answers::answer(task, convert::task)?))
    }

    async fn write_todos(
        &self,
        request: Request<proto::WriteTodosRequest>,
    ) -> Result<Response<proto::WriteTodosResponse>, Status> {
        let ctx = context(&request, "WriteTodos")?;
        if let Some(kept) = self.kept(&ctx).await? {
            return Ok(Response::new(kept));
        }
        let req = request.into_inner();
        let plan = convert::plan_name("plan", &req.plan).map_err(ToStatus::to_status)?;
        let items = convert::todo_items(&req.todos).map_err(ToStatus::to_status)?;
        let written = self
            .store
            .write_todos(&plan, &items, &ctx)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(answers::answer(
            written,
            answers::written_todos,
        )?))
    }

    async fn read_todos(
        &self,
        request: Request<proto::ReadTodosRequest>,
    ) -> Result<Response<proto::ReadTodosResponse>, Status> {
        let plan =
            convert::plan_name("plan", &request.get_ref().plan).map_err(ToStatus::to_status)?;
        let (plan, todos) = self
            .store
            .read_todos(&plan)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(proto::ReadTodosResponse {
            plan: Some(convert::plan(plan)),
            todos: convert::tasks(todos),
        }))
    }

    async fn create_plan(
        &self,
        request: Request<proto::CreatePlanRequest>,
    ) -> Result<Response<proto::Plan>, Status> {
        let ctx = context(&request, "CreatePlan")?;
        if let Some(kept) = self.kept(&ctx).await? {
            return Ok(Response::new(kept));
        }
        let req = request.into_inner();
        let name = convert::plan_name("name", &req.name).map_err(ToStatus::to_status)?;
        let title = validate_free_text("title", &req.title).map_err(ToStatus::to_status)?;
        let plan = self
            .store
            .create_plan(&name, &title, &ctx)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(answers::answer(plan, convert::plan)?))
    }

    async fn archive_plan(
        &self,
        request: Request<proto::PlanChangeRequest>,
    ) -> Result<Response<proto::Plan>, Status> {
        self.change_plan(request, false).await
    }

    async fn restore_plan(
        &self,
        request: Request<proto::PlanChangeRequest>,
    ) -> Result<Response<proto::Plan>, Status> {
        self.change_plan(request, true).await
    }

    async fn get_plan(
        &self,
        request: Request<proto::GetPlanRequest>,
    ) -> Result<Response<proto::PlanSummary>, Status> {
        let req = request.into_inner();
        let name = convert::plan_name("name", &req.name).map_err(ToStatus::to_status)?;
        let limit = highlights("highlight_limit", req.highlight_limit, DEFAULT_HIGHLIGHTS)?;
        let summary = self
            .store
            .plan_summary(&name, limit)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(convert::summary(summary)))
    }

    async fn list_plans(
        &self,
        request: Request<proto::ListPlansRequest>,
    ) -> Result<Response<proto::ListPlansResponse>, Status> {
        let limit = highlights("highlight_limit", request.get_ref().highlight_limit, 0)?;
        let mut plans = Vec::new();
        let include_archived = request.get_ref().include_archived;
        for plan in self
            .store
            .list_plans(include_archived)
            .await
            .map_err(ToStatus::to_status)?
        {
            let summary = self
                .store
                .plan_summary(&plan.name, limit)
                .await
                .map_err(ToStatus::to_status)?;
            plans.push(convert::summary(summary));
        }
        Ok(Response::new(proto::ListPlansResponse { plans }))
    }

    async fn create_task(
        &self,
        request: Request<proto::CreateTaskRequest>,
    ) -> Result<Response<proto::Task>, Status> {
        let ctx = context(&request, "CreateTask")?;
        if let Some(kept) = self.kept(&ctx).await? {
            return Ok(Response::new(kept));
        }
        let req = request.into_inner();
        let plan = convert::plan_name("plan", &req.plan).map_err(ToStatus::to_status)?;
        let content = validate_content("content", &req.content).map_err(ToStatus::to_status)?;
        let priority =
            convert::priority_or("priority", &req.priority, todod_domain::Priority::Medium)
                .map_err(ToStatus::to_status)?;
        let kind = convert::kind_or_todo("kind", &req.kind).map_err(ToStatus::to_status)?;
        let depends_on =
            convert::task_ids("depends_on", &req.depends_on).map_err(ToStatus::to_status)?;
        // The shape first (an object, present exactly for phase kinds), then
        // what the kind needs of it.
        let spec = todod_domain::spec::validate("spec_json", kind, &req.spec_json)
            .map_err(ToStatus::to_status)?;
        let checked = match &spec {
            Some(json) => Some(self.check_spec(kind, json, &[]).await?),
            None => None,
        };
        let new = NewTask {
            plan,
            content,
            priority,
            kind,
            spec: checked.as_ref().map(|c| c.json.clone()).unwrap_or_default(),
            claims: checked
                .as_ref()
                .map(|c| c.claims.clone())
                .unwrap_or_default(),
            depends_on,
            requires_dependency: checked.and_then(|c| c.requires),
            owner: annotations::validate_owner("owner", &req.owner).map_err(ToStatus::to_status)?,
            metadata: annotations::parse_patch("metadata_json", &req.metadata_json)
                .map_err(ToStatus::to_status)?,
        };
        let task = self
            .store
            .create_task(&new, &ctx)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(answers::answer(task, convert::task)?))
    }

    async fn get_task(
        &self,
        request: Request<proto::GetTaskRequest>,
    ) -> Result<Response<proto::Task>, Status> {
        let id = convert::task_id("id", &request.get_ref().id).map_err(ToStatus::to_status)?;
        let task = self.store.get_task(id).await.map_err(ToStatus::to_status)?;
        Ok(Response::new(convert::task(task)))
    }

    async fn list_tasks(
        &self,
        request: Request<proto::ListTasksRequest>,
    ) -> Result<Response<proto::ListTasksResponse>, Status> {
        let req = request.into_inner();
        let filter = TaskFilter {
            plan: convert::plan_name("plan", &req.plan).map_err(ToStatus::to_status)?,
            statuses: convert::statuses("statuses", &req.statuses).map_err(ToStatus::to_status)?,
            kinds: convert::kinds("kinds", &req.kinds).map_err(ToStatus::to_status)?,
            readiness: convert::readiness("readiness", &req.readiness)
                .map_err(ToStatus::to_status)?,
            include_archived: req.include_archived,
            detail: convert::detail("view", &req.view).map_err(ToStatus::to_status)?,
            page_size: page_size("page_size", req.page_size)?,
            page_token: Some(req.page_token).filter(|t| !t.is_empty()),
        };
        let page = self
            .store
            .list_tasks(&filter)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(proto::ListTasksResponse {
            tasks: convert::tasks(page.tasks),
            next_page_token: page.next_page_token.unwrap_or_default(),
            plan_revision: page.plan_revision,
        }))
    }

    async fn update_task(
        &self,
        request: Request<proto::UpdateTaskRequest>,
    ) -> Result<Response<proto::Task>, Status> {
        let ctx = context(&request, "UpdateTask")?;
        if let Some(kept) = self.kept(&ctx).await? {
            return Ok(Response::new(kept));
        }
        let req = request.into_inner();
        let id = convert::task_id("id", &req.id).map_err(ToStatus::to_status)?;
        let spec = match req.spec_json {
            None => None,
            Some(raw) => {
                let current = self.store.get_task(id).await.map_err(ToStatus::to_status)?;
                let json = todod_domain::spec::validate("spec_json", current.kind, &raw)
                    .map_err(ToStatus::to_status)?
                    .unwrap_or_default();
                let own = self
                    .store
                    .task_claims(id)
                    .await
                    .map_err(ToStatus::to_status)?;
                let checked = self.check_spec(current.kind, &json, &own).await?;
                let old = current.spec.clone().unwrap_or_default();
                Some(SpecUpdate {
                    output_fields: kinds::output_fields_changed(current.kind, &old, &checked.json),
                    spec: checked.json,
                    claims: checked.claims,
                    based_on: current.spec,
                })
            }
        };
        let update = TaskUpdate {
            content: req
                .content
                .map(|c| validate_content("content", &c))
                .transpose()
                .map_err(ToStatus::to_status)?,
            priority: req
                .priority
                .map(|p| todod_domain::Priority::parse("priority", &p))
                .transpose()
                .map_err(ToStatus::to_status)?,
            spec,
            owner: req
                .owner
                .map(|o| annotations::validate_owner("owner", &o))
                .transpose()
                .map_err(ToStatus::to_status)?,
            metadata: match &req.metadata_patch_json {
                Some(text) => annotations::parse_patch("metadata_patch_json", text)
                    .map_err(ToStatus::to_status)?,
                None => None,
            },
        };
        let task = self
            .store
            .update_task(id, &update, &ctx)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(answers::answer(task, convert::task)?))
    }

    async fn transition_task(
        &self,
        request: Request<proto::TransitionTaskRequest>,
    ) -> Result<Response<proto::Task>, Status> {
        let ctx = context(&request, "TransitionTask")?;
        if let Some(kept) = self.kept(&ctx).await? {
            return Ok(Response::new(kept));
        }
        let req = request.into_inner();
        let id = convert::task_id("id", &req.id).map_err(ToStatus::to_status)?;
        let to = convert::status("to", &req.to).map_err(ToStatus::to_status)?;
        let task = self
            .store
            .transition(id, to, &ctx)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(answers::answer(task, convert::task)?))
    }

    async fn add_dependency(
        &self,
        request: Request<proto::DependencyRequest>,
    ) -> Result<Response<proto::Task>, Status> {
        let (ctx, id, depends_on) = edge(request, "AddDependency")?;
        if let Some(kept) = self.kept(&ctx).await? {
            return Ok(Response::new(kept));
        }
        let task = self
            .store
            .add_dependency(id, depends_on, &ctx)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(answers::answer(task, convert::task)?))
    }

    async fn remove_dependency(
        &self,
        request: Request<proto::DependencyRequest>,
    ) -> Result<Response<proto::Task>, Status> {
        let (ctx, id, depends_on) = edge(request, "RemoveDependency")?;
        if let Some(kept) = self.kept(&ctx).await? {
            return Ok(Response::new(kept));
        }
        let task = self
            .store
            .remove_dependency(id, depends_on, &ctx)
            .await
            .map_err(ToStatus::to_status)?;
        Ok(Response::new(answers::answer(task, convert::task)?))
    }

    async fn list_events(
        &self,
        request: Request<proto::ListEventsRequest>,
    ) -> Result<Response<proto::ListEventsResponse>, Status> {
        let req = request.into_inner();
        let task = if req.task_id.is_empty() {
            None
        } else {
            Some(convert::task_id("task_id", &req.task_id).map_err(ToStatus::to_status)?)
        };
        let plan = if task.is_some() && req.plan.is_empty() {
            String::new()
        } else {
            convert::plan_name("plan", &req.plan).map_err(ToStatus::to_status)?
        };
        if req.after_seq < 0 {
            return Err(Rule::invalid("after_seq", "must not be negative").to_status());
        }
        let filter = EventFilter {
            plan,
            task,
            after_seq: req.after_seq,
            limit: page_size("limit", req.limit)?,
        };
        let events = self
            .store
            .list_events(&filter)
            .await
            .map_err(ToStatus::to_status)?;
        let last_seq = events.last().map_or(req.after_seq, |e| e.seq);
        Ok(Response::new(proto::ListEventsResponse {
            events: events.into_iter().map(convert::event).collect(),
            last_seq,
        }))
    }

    type WatchPlanStream = EventStream;

    async fn watch_plan(
        &self,
        request: Request<proto::WatchPlanRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let req = request.into_inner();
        let plan = if req.plan.is_empty() {
            String::new()
        } else {
            let name = convert::plan_name("plan", &req.plan).map_err(ToStatus::to_status)?;
            self.store
                .get_plan(&name)
                .await
                .map_err(ToStatus::to_status)?;
            name
        };
        if req.after_seq < 0 {
            return Err(Rule::invalid("after_seq", "must not be negative").to_status());
        }
        if req.from_now && req.after_seq > 0 {
            return Err(Rule::invalid(
                "from_now",
                "follows from the present; give it or after_seq, not both",
            )
            .to_status());
        }
        let (tx, rx) = mpsc::channel(WATCH_BATCH);
        let store = self.store.clone();
        let mut shutdown = self.shutdown.clone();
        // Subscribe before the first read, so nothing committed in between is missed.
        let mut committed = store.subscribe();
        let after_seq = if req.from_now {
            *committed.borrow()
        } else {
            req.after_seq
        };
        tokio::spawn(async move {
            let mut filter = EventFilter {
                plan,
                task: None,
                after_seq,
                limit: WATCH_BATCH,
            };
            // Every wait below also watches for shutdown, so a watcher that is
            // catching up or not reading cannot hold the daemon open.
            let stopping = || Status::unavailable("todod is shutting down");
            loop {
                committed.borrow_and_update();
                let events = tokio::select! {
                    events = store.list_events(&filter) => events,
                    _ = shutdown.wait_for(|stop| *stop) => {
                        let _ = tx.try_send(Err(stopping()));
                        return;
                    }
                };
                let events = match events {
                    Ok(events) => events,
                    Err(error) => {
                        let _ = tx.send(Err(error.to_status())).await;
                        return;
                    }
                };
                let caught_up = events.len() < WATCH_BATCH;
                for event in events {
                    let seq = event.seq;
                    tokio::select! {
                        sent = tx.send(Ok(convert::event(event))) => if sent.is_err() {
                            return; // the watcher went away
                        },
                        _ = shutdown.wait_for(|stop| *stop) => {
                            let _ = tx.try_send(Err(stopping()));
                            return;
                        }
                    }
                    filter.after_seq = seq;
                }
                if caught_up {
                    tokio::select! {
                        changed = committed.changed() => if changed.is_err() { return },
                        _ = shutdown.wait_for(|stop| *stop) => {
                            let _ = tx.try_send(Err(stopping()));
                            return;
                        }
                        _ = tx.closed() => return,
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
