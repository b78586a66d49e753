//! How the generations held to a feasibility's projection went, in its
//! report: read from their typed results, rendered with the sweep.
use super::report;
use todod_domain::{Status, TaskId};
use todod_proto::results::{self, FeasibilityResult, GenerationResult, HeldOutcome};
use crate::phase::PhaseStore;

/// The outcomes (`GenerationResult::projection`) of the completed
/// generations held to feasibility `task`, by task id, in id order.
async fn held_runs(store: &PhaseStore, task: TaskId) -> Result<Vec<(String, HeldOutcome)>, String> {
    let mut runs = Vec::new();
    let dependents = store
        .dependents(task)
        .await
        .map_err(|e| format!("cannot read the tasks after {task}: {e}"))?;
    for t in dependents {
        if t.kind != crate::phase::kinds::generation::kind::KIND || t.status != Status::Completed {
            continue;
        }
        let outcome = t
            .result
            .as_deref()
            .and_then(results::parse::<GenerationResult>)
            .and_then(|r| r.projection);
        if let Some(outcome) = outcome.filter(|o| o.feasibility == task.to_string()) {
            runs.push((t.id.to_string(), outcome));
        }
    }
    Ok(runs)
}

/// What a report is made from: the task's result, its plan, and the path
/// its spec writes the report to.
struct Feasibility {
    result: FeasibilityResult,
    plan: String,
    path: Option<String>,
}

async fn feasibility(store: &PhaseStore, task: TaskId) -> Result<Option<Feasibility>, String> {
    let t = store
        .get_task(task)
        .await
        .map_err(|e| format!("cannot read {task}: {e}"))?;
    let Some(result) = t.result.as_deref().and_then(results::parse) else {
        return Ok(None);
    };
    let path = t
        .spec
        .as_deref()
        .and_then(|s| super::FeasibilitySpec::parse(s).ok())
        .and_then(|spec| spec.report)
        .map(|p| p.display().to_string());
    Ok(Some(Feasibility {
        result,
        plan: t.plan,
        path,
    }))
}

fn render(task: TaskId, f: &Feasibility, runs: &mut [(String, HeldOutcome)]) -> String {
    // In the order the tasks were made, wherever they came from.
    runs.sort_by_key(|(id, _)| TaskId::parse("id", id).map_or(i64::MAX, |t| t.0));
    let runs: Vec<report::Outcome> = runs.iter().map(|(id, o)| (id.as_str(), o)).collect();
    let task = task.to_string();
    let origin = report::Origin {
        task: &task,
        plan: &f.plan,
    };
    report::html_with_runs(&f.result, origin, &runs)
}

/// Writes feasibility `task`'s report again with how its generations went:
/// the completed ones and `ending` (a generation whose completion is being
/// committed, with its outcome), each actual time against the band.
pub async fn report_outcome(
    store: &PhaseStore,
    fs: &dyn crate::phase::files::Fs,
    task: TaskId,
    ending: (TaskId, &HeldOutcome),
) -> Result<(), String> {
    let Some(f) = feasibility(store, task).await? else {
        return Ok(());
    };
    let Some(path) = f.path.clone() else {
        return Ok(());
    };
    let mut runs = held_runs(store, task).await?;
    runs.retain(|(id, _)| *id != ending.0.to_string());
    runs.push((ending.0.to_string(), ending.1.clone()));
    let html = render(task, &f, &mut runs);
    report::write(
        fs,
        "report",
        std::path::Path::new(&path),
        html.as_bytes(),
        true,
    )
}

/// Feasibility `task`'s report as it stands: rendered from its result and
/// its generations' outcomes (the same bytes as the file, once written).
pub async fn report_now(store: &PhaseStore, task: TaskId) -> Result<Option<String>, String> {
    let Some(f) = feasibility(store, task).await? else {
        return Ok(None);
    };
    let mut runs = held_runs(store, task).await?;
    Ok(Some(render(task, &f, &mut runs)))
}
