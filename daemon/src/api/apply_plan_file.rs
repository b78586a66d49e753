//! `ApplyPipeline`: a pipeline file in, the plan's phase tasks out. The file
//! is read and its steps derived by [`todod_engine::plan_file`]; each step's spec is
//! then checked by its kind (the phase table) as `CreateTask` checks one, with the
//! files earlier steps will write accepted as inputs, and every refusal is
//! named by its path in the file. The store applies the lot in one
//! transaction.
use std::path::PathBuf;

use tonic::{Request, Response, Status};

use super::{context, convert, ToStatus, TodoService};
use crate::proto;
use todod_domain::model::validate_free_text;
use todod_domain::{Error as Rule, Priority};
use todod_engine::phase::{kinds, places};
use todod_engine::plan_file::{self, Step};
use todod_store::{NewTask, PlannedStep};

/// Largest pipeline file the daemon reads.
const MAX_FILE_BYTES: usize = 1024 * 1024;

/// A refusal of a step's spec, renamed to the place in the file.
fn in_file(step: &Step, error: Rule) -> Rule {
    error.with_field(|field| step.file_path(field))
}

impl TodoService {
    pub(super) async fn apply_pipeline_call(
        &self,
        request: Request<proto::ApplyPipelineRequest>,
    ) -> Result<Response<proto::ApplyPipelineResponse>, Status> {
        let mut ctx = context(&request, "ApplyPipeline")?;
        if request.get_ref().dry_run {
            // A dry run changes nothing: there is nothing to replay.
            ctx.request = None;
        }
        if let Some(kept) = self.kept(&ctx).await? {
            return Ok(Response::new(kept));
        }
        let req = request.into_inner();
        if req.spec_toml.len() > MAX_FILE_BYTES {
            return Err(
                Rule::invalid("spec_toml", "is over 1 MiB; a pipeline file is small").to_status(),
            );
        }
        let base = match req.base_dir.as_str() {
            "" => None,
            dir if std::path::Path::new(dir).is_absolute() => Some(PathBuf::from(dir)),
            _ => return Err(Rule::invalid("base_dir", "must be an absolute path").to_status()),
        };
        let mut file = plan_file::parse(&req.spec_toml, base.as_deref())
            .map_err(|e| Rule::invalid(e.path, e.reason))
            .map_err(ToStatus::to_status)?;
        let plan = match (req.plan.as_str(), &file.plan) {
            ("", Some(name)) => convert::plan_name("plan", name).map_err(ToStatus::to_status)?,
            ("", None) => {
                return Err(Rule::invalid(
                    "plan",
                    "name the plan: `plan` in the file, or the request's plan (todoctl: -p)",
                )
                .to_status())
            }
            (name, _) => convert::plan_name("plan", name).map_err(ToStatus::to_status)?,
        };
        let title = validate_free_text("title", file.title.as_deref().unwrap_or(""))
            .map_err(ToStatus::to_status)?;

        // Paths made canonical: one step's output path is then the next
        // one's input path exactly, and the phase checks see plain paths.
        let (out, prompts, dir) = (
            file.output_dir.clone(),
            file.prompts.clone(),
            file.model.dir.clone(),
        );
        let place = self.bounds.clone();
        let (out, prompts, dir, made) = tokio::task::spawn_blocking(move || {
            let (out, made) = places::make_output_dir(&out, &place)?;
            let prompts = places::canonical(&prompts, "prompts.path")?;
            let dir = dir
                .map(|d| places::canonical(&d, "model.dir"))
                .transpose()?;
            Ok::<_, Rule>((out, prompts, dir, made))
        })
        .await
        .map_err(|_| Status::internal("internal error; see the daemon's log"))?
        .map_err(ToStatus::to_status)?;
        file.output_dir = out;
        file.prompts = prompts;
        file.model.dir = dir;
        let steps = plan_file::derive(&file);

        let existing = self
            .store
            .pipeline_tasks(&plan)
            .await
            .map_err(ToStatus::to_status)?;
        let bounds = self.bounds.clone();
        let planned = tokio::task::spawn_blocking(move || -> Result<Vec<PlannedStep>, Rule> {
            let mut promised: Vec<PathBuf> = Vec::new();
            let mut planned = Vec::new();
            for step in &steps {
                let own: Vec<String> = existing
                    .iter()
                    .find(|(name, _, _)| name == step.section)
                    .map(|(_, _, claims)| claims.clone())
                    .unwrap_or_default();
                let json = serde_json::Value::Object(step.spec.clone()).to_string();
                let kind = step.kind;
                let bounds = bounds.with_promised(promised.iter().cloned());
                let checked = todod_domain::spec::validate("spec_json", kind, &json)
                    .and_then(|_| kinds::check(kind, &json, &bounds, &own))
                    .map_err(|e| in_file(step, e))?;
                promised.extend(checked.claims.iter().map(|c| PathBuf::from(&c.path)));
                planned.push(PlannedStep {
                    step: step.section.to_string(),
                    task: NewTask {
                        plan: String::new(),
                        content: step.content.clone(),
                        priority: Priority::Medium,
                        kind,
                        spec: checked.json,
                        claims: checked.claims,
                        depends_on: Vec::new(),
                        requires_dependency: checked.requires,
                        owner: None,
                        metadata: None,
                    },
                    depends_on: step.depends_on.iter().map(|k| k.to_string()).collect(),
                });
            }
            Ok(planned)
        })
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "pipeline check panicked");
            Status::internal("internal error; see the daemon's log")
        })?
        .map_err(ToStatus::to_status)?;

        let applied = self
            .store
            .apply_pipeline(&plan, &title, &planned, req.dry_run, &ctx)
            .await
            .map_err(ToStatus::to_status)?;
        // Only a real apply keeps the directories it made; a dry run or a
        // refused file leaves the disk as it found it.
        if !req.dry_run {
            made.keep();
        }
        Ok(Response::new(super::answers::answer(
            applied,
            super::answers::applied_pipeline,
        )?))
    }
}
