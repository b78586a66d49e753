//! Feasibility at the seam: its spec, its step in the plan file, its
//! summary, and its report (written again when a generation it vouched
//! for completes, and rendered for the status page).
use serde_json::{Map, Value};

use super::FeasibilitySpec;
use todod_domain::schedule::Action;
use todod_domain::{Error, Kind, TaskId};
use crate::phase::kind::{Checked, PhaseKind, View};
use crate::phase::plan_step::{self, Derived, Flow, PlanFile, PlanStep};
use crate::phase::{Boundaries, Ended, RunContext};
use todod_proto::results::{self, FeasibilityResult, GenerationResult};
use todod_proto::readable::duration;
use crate::phase::PhaseStore;

pub struct Feasibility;

/// The kind, as tasks and the store name it.
pub const KIND: Kind = Kind::named(<Feasibility as PhaseKind>::NAME);

pub const REPORT: &str = "feasibility.html";
pub const RESULT: &str = "feasibility.json";

fn hours(h: f64) -> String {
    duration((h * 3600.0).round() as i64)
}

impl PhaseKind for Feasibility {
    const NAME: &'static str = "feasibility";
    const SUMMARY: &'static str = "benchmarks the inference server at several concurrency levels, \
                                   projects the generation's hours, tokens and bytes with a 95% \
                                   interval, and decides go / no-go against a budget";
    const PROGRESS_IN_RECORDS: bool = false;
    const OUTPUT_FIELDS: &'static [&'static str] = &["report"];
    const ACTIONS: &'static [Action] = &[Action::Probe];
    const STEP: Option<PlanStep> = Some(PlanStep {
        section: "feasibility",
        by_default: true,
        needs: &["generation"],
        needs_model_dir: false,
        calls_server: true,
        takes: &["budget"],
        derived_fields: &[
            "generation",
            "prompts",
            "endpoints",
            "model",
            "api",
            "params",
            "max_tokens",
            "stream",
            "api_key_env",
            "report",
            "result_file",
            "budget",
        ],
        describe: "Options of the feasibility phase (concurrency, min_concurrency, max_concurrency, \
                   min_gain, max_sweep_share, min_sweep_seconds, sample_size, seed, warmup, window, \
                   choose, price, calibrate_after_seconds, ...). The request shape is the generation's; \
                   report, result_file and budget are derived.",
        properties: plan_step::no_properties,
        check: plan_step::no_check,
        derive,
    });
    type Spec = FeasibilitySpec;
    type Result = FeasibilityResult;

    fn check(
        json: &str,
        bounds: &Boundaries,
        own: &[String],
    ) -> Result<Checked<FeasibilitySpec>, Error> {
        let (spec, json, claims, named) = FeasibilitySpec::check(json, bounds, own)?;
        Ok(Checked {
            spec,
            json,
            claims,
            requires: None,
            refers: named.map(|id| ("spec.generation".to_string(), id, Kind::named("generation"))),
        })
    }

    fn parse(json: &str) -> Result<FeasibilitySpec, Error> {
        FeasibilitySpec::parse(json)
    }

    async fn run(context: &RunContext, spec: FeasibilitySpec) -> Result<Ended, String> {
        super::run_inner(context, spec).await
    }

    async fn threads(_context: &RunContext, spec: &FeasibilitySpec) -> usize {
        // The sweep's highest level.
        let top = spec
            .levels
            .as_ref()
            .and_then(|levels| levels.iter().max().copied())
            .unwrap_or(spec.max_concurrency);
        crate::phase::kind::threads_for(top)
    }

    fn view(r: &FeasibilityResult) -> View {
        let summary = match (&r.projection, &r.choice) {
            (Some(p), Some(c)) => format!(
                "{}: {} ({} to {}) at concurrency {}",
                r.verdict,
                hours(p.hours.value),
                hours(p.hours.low),
                hours(p.hours.high),
                c.concurrency
            ),
            _ => r.verdict.clone(),
        };
        View {
            summary,
            notes: r.reasons.clone(),
            report: true,
            ..View::default()
        }
    }

    async fn dependent_completed(
        store: &PhaseStore,
        fs: &dyn crate::phase::files::Fs,
        task: TaskId,
        (dependent, kind, result): (TaskId, Kind, &str),
    ) -> Result<(), String> {
        if kind != Kind::named("generation") {
            return Ok(());
        }
        let outcome = results::parse::<GenerationResult>(result).and_then(|r| r.projection);
        match outcome.filter(|o| o.feasibility == task.to_string()) {
            Some(outcome) => {
                super::outcomes::report_outcome(store, fs, task, (dependent, &outcome)).await
            }
            None => Ok(()),
        }
    }

    async fn report(store: &PhaseStore, task: TaskId) -> Result<Option<String>, String> {
        super::outcomes::report_now(store, task).await
    }
}

fn derive(p: &PlanFile, _flow: &mut Flow) -> Derived {
    let mut spec = Map::new();
    spec.insert("report".into(), p.out(REPORT));
    spec.insert("result_file".into(), p.out(RESULT));
    if !p.budget.is_empty() {
        spec.insert("budget".into(), Value::Object(p.budget.clone()));
    }
    Derived {
        content: format!("Measure {} and project the generation", p.model_label()),
        spec,
        origins: vec![
            ("report", "output_dir"),
            ("result_file", "output_dir"),
            ("budget", "budget"),
        ],
    }
}
