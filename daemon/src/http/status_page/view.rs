//! What a page shows, read from the store: plain data, rendered by
//! `render`. Each read is bounded (phases and list items per plan, events
//! per task), so a plan of 100k tasks renders as fast as one of ten.
use serde_json::Value;

use super::series::SeriesCache;
use crate::proto::results::{self, Estimate, FeasibilityResult, ProgressCounts};
use todod_domain::{Kind, Status, TaskId};
use todod_engine::phase::kind::View;
use todod_engine::phase::kinds;
use todod_store::{
    Detail, Error, NotableEvent, PlanView, ProgressPoint, Store, TaskFilter, TaskView,
};

/// Phase tasks shown per plan.
const MAX_PHASES: usize = 100;
/// Plain tasks listed per plan (the rest counted).
const MAX_TODOS: usize = 200;
/// Notable events shown per phase.
const MAX_EVENTS: usize = 10;

pub struct Overview {
    pub plans: Vec<PlanCard>,
    pub now_ms: i64,
}

pub struct PlanCard {
    pub plan: PlanView,
    pub counts: Vec<(Status, i64)>,
    pub phases: Vec<TaskView>,
}

pub struct PlanPage {
    pub plan: PlanView,
    pub counts: Vec<(Status, i64)>,
    pub phases: Vec<PhaseDetail>,
    pub todos: Vec<TaskView>,
    /// Plain tasks beyond the ones listed.
    pub more_todos: i64,
    pub now_ms: i64,
}

pub struct PhaseDetail {
    pub task: TaskView,
    /// Its progress report: the counts every kind's carries, and the whole
    /// report for what its kind adds (a generation's server, drift, holds).
    pub counts: ProgressCounts,
    pub progress: Value,
    /// What its kind shows of it, once it has a result.
    pub view: Option<View>,
    /// The run's progress over time, while it runs.
    pub points: Vec<ProgressPoint>,
    pub events: Vec<NotableEvent>,
    /// The projection the run is held to: the progress's, else that of
    /// a completed feasibility it depends on.
    pub projection: Option<Estimate>,
}

fn json(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

async fn phases_of(store: &Store, plan: &str) -> Result<Vec<TaskView>, Error> {
    Ok(store
        .list_tasks(&TaskFilter {
            plan: plan.into(),
            kinds: kinds::TABLE.iter().map(|k| k.kind()).collect(),
            detail: Detail::Full,
            page_size: MAX_PHASES,
            ..TaskFilter::default()
        })
        .await?
        .tasks)
}

/// The projected rate of a completed feasibility `task` depends on, read
/// from its typed result.
fn vouched_rate(task: &TaskView, phases: &[TaskView]) -> Option<Estimate> {
    phases
        .iter()
        .filter(|t| task.depends_on.contains(&t.id) && t.status == Status::Completed)
        .filter_map(|t| results::parse::<FeasibilityResult>(t.result.as_deref()?))
        .find_map(|r| Some(r.projection?.records_per_second))
}

pub async fn overview(store: &Store) -> Result<Overview, Error> {
    let mut plans = Vec::new();
    for plan in store.list_plans(false).await? {
        let counts = store.plan_summary(&plan.name, 0).await?.counts;
        let phases = phases_of(store, &plan.name).await?;
        plans.push(PlanCard {
            plan,
            counts,
            phases,
        });
    }
    Ok(Overview {
        plans,
        now_ms: todod_store::now_ms(),
    })
}

pub async fn plan_page(store: &Store, series: &SeriesCache, name: &str) -> Result<PlanPage, Error> {
    let summary = store.plan_summary(name, 0).await?;
    let plan = match summary.plan.clone() {
        Some(plan) => plan,
        None => store.get_plan(name).await?,
    };
    let page = store
        .list_tasks(&TaskFilter {
            plan: name.into(),
            kinds: vec![Kind::TODO],
            detail: Detail::Basic,
            page_size: MAX_TODOS,
            ..TaskFilter::default()
        })
        .await?;
    let todos = page.tasks;
    let mut phases = Vec::new();
    let mut stopped: Vec<TaskId> = Vec::new();
    let all = phases_of(store, name).await?;
    for task in &all {
        let kind = kinds::get(task.kind);
        let progress = json(task.progress.as_deref());
        let view = match (kind, task.result.as_deref()) {
            (Some(k), Some(result)) => k.view(result),
            _ => None,
        };
        // A sweep's progress counts levels, not records: no rate to draw.
        let in_records = kind.is_some_and(|k| k.progress_in_records());
        let points = if task.status == Status::InProgress && in_records {
            series.points(store, task.id).await?
        } else {
            stopped.push(task.id);
            Vec::new()
        };
        let events = store.notable_events(task.id, MAX_EVENTS).await?;
        let counts = task
            .progress
            .as_deref()
            .and_then(ProgressCounts::parse)
            .unwrap_or_default();
        let projection = counts
            .projected_records_per_second
            .or_else(|| vouched_rate(task, &all));
        phases.push(PhaseDetail {
            task: task.clone(),
            counts,
            progress,
            view,
            points,
            events,
            projection,
        });
    }
    series.forget(&stopped);
    let listed = (todos.len() + phases.len()) as i64;
    Ok(PlanPage {
        plan,
        counts: summary.counts.clone(),
        more_todos: (summary.total() - listed).max(0),
        todos,
        phases,
        now_ms: todod_store::now_ms(),
    })
}
