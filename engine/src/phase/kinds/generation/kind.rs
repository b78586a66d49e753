//! Generation at the seam: its spec, its step in the plan file, its summary.
use serde_json::{json, Map, Value};

use super::GenerationSpec;
use todod_domain::schedule::Action;
use todod_domain::{Error, Kind};
use crate::phase::kind::{Checked, PhaseKind, View};
use crate::phase::plan_step::{Derived, Flow, PlanFile, PlanStep, SectionRefusal};
use crate::phase::{Boundaries, Ended, RunContext};
use todod_proto::results::GenerationResult;
use todod_proto::readable::count;

pub struct Generation;

/// The kind, as tasks and the store name it.
pub const KIND: Kind = Kind::named(<Generation as PhaseKind>::NAME);

pub const COMPLETIONS: &str = "completions.jsonl";
pub const FAILURES: &str = "completions.failures.jsonl";
pub const REJECTS: &str = "completions.rejects.jsonl";

impl PhaseKind for Generation {
    const NAME: &'static str = "generation";
    const SUMMARY: &'static str = "produces the completions from an OpenAI-compatible server, \
                                   concurrently, exactly once, through crashes, rate limits and \
                                   hung requests";
    const OUTPUT_FIELDS: &'static [&'static str] = super::spec::OUTPUT_FIELDS;
    const ACTIONS: &'static [Action] = &[Action::Probe, Action::Remeasure];
    const STEP: Option<PlanStep> = Some(PlanStep {
        section: "generation",
        by_default: true,
        needs: &[],
        needs_model_dir: false,
        calls_server: true,
        takes: &[],
        derived_fields: &[
            "prompts",
            "output",
            "failures",
            "rejects",
            "endpoints",
            "model",
            "params",
            "api_key_env",
            "servers",
        ],
        describe: "Options of the generation phase (max_tokens, concurrency, api, stream, \
                   max_attempts, request_deadline_seconds, ...). concurrency is \"auto\" (the \
                   feasibility's choice) when feasibility runs.",
        properties,
        check,
        derive,
    });
    type Spec = GenerationSpec;
    type Result = GenerationResult;

    fn check(
        json: &str,
        bounds: &Boundaries,
        own: &[String],
    ) -> Result<Checked<GenerationSpec>, Error> {
        let checked = GenerationSpec::check(json, bounds, own)?;
        Ok(Checked {
            spec: checked.spec,
            json: checked.json,
            claims: checked.claims,
            requires: checked.requires,
            refers: None,
        })
    }

    fn parse(json: &str) -> Result<GenerationSpec, Error> {
        GenerationSpec::parse(json)
    }

    async fn run(context: &RunContext, spec: GenerationSpec) -> Result<Ended, String> {
        super::run_inner(context, spec).await
    }

    async fn threads(context: &RunContext, spec: &GenerationSpec) -> usize {
        // "auto" is the level its feasibility chose.
        let in_flight = match spec.concurrency {
            Some(c) => c,
            None => super::held::of(&context.store, context.task)
                .await
                .ok()
                .flatten()
                .map_or(1, |v| v.concurrency),
        };
        crate::phase::kind::threads_for(in_flight)
    }

    fn view(r: &GenerationResult) -> View {
        let mut line = format!("{} records, {} tokens", r.records, count(r.tokens as f64));
        if r.failed > 0 {
            line.push_str(&format!(", {} failed", r.failed));
        }
        if r.rejected > 0 {
            line.push_str(&format!(", {} rejected", r.rejected));
        }
        let counts = line.clone();
        if let Some(o) = &r.projection {
            let secs = |h: f64| todod_proto::readable::duration((h * 3600.0).round() as i64);
            line.push_str(&format!(
                "; took {} against {} projected ({} to {}): {} the band",
                secs(o.compared_hours()),
                secs(o.projected_hours.value),
                secs(o.projected_hours.low),
                secs(o.projected_hours.high),
                if o.projected_hours.contains(o.compared_hours()) {
                    "inside"
                } else {
                    "outside"
                }
            ));
        }
        View {
            summary: line,
            notes: r
                .requests
                .iter()
                .map(|requests| format!("requests: {}", requests.describe()))
                .collect(),
            held: r.projection.clone(),
            summary_apart_from_held: r.projection.is_some().then_some(counts),
            failures_by_class: r.failures_by_class.clone(),
            report: false,
        }
    }
}

fn properties() -> Value {
    json!({
        "max_tokens": {"type": "integer", "minimum": 1},
        "shards": crate::phase::plan_step::shards_property("the prompts"),
        "token_ids": {
            "description": "Ask the servers for the ids they generate and keep them in each \
                            record: \"auto\" (vLLM, SGLang and llama.cpp's server, each its own \
                            way, as /v1/models says what it is), \"on\" (a server of another \
                            kind too, with vLLM's return_token_ids), \"off\".",
            "enum": ["auto", "on", "off"],
        },
    })
}

fn check(section: &Map<String, Value>) -> Result<(), SectionRefusal> {
    match section.get("max_tokens").map(Value::as_i64) {
        None | Some(Some(1..)) => Ok(()),
        Some(_) => Err(("max_tokens".into(), "must be a positive integer".into())),
    }
}

fn derive(p: &PlanFile, flow: &mut Flow) -> Derived {
    let mut spec = Map::new();
    spec.insert("prompts".into(), flow.prompts.0.clone());
    spec.insert("output".into(), p.out(COMPLETIONS));
    spec.insert("failures".into(), p.out(FAILURES));
    spec.insert("rejects".into(), p.out(REJECTS));
    spec.insert("endpoints".into(), json!(p.model.endpoints));
    if !p.servers.is_empty() {
        spec.insert("servers".into(), Value::Object(p.servers.clone()));
    }
    spec.insert("model".into(), json!(p.model.name));
    if flow.rendered {
        spec.insert("api".into(), json!("completions"));
    }
    spec.insert("params".into(), Value::Object(p.sampling.clone()));
    if let Some(key) = &p.model.api_key_env {
        spec.insert("api_key_env".into(), json!(key));
    }
    if p.runs("feasibility") {
        spec.insert("concurrency".into(), json!("auto"));
    }
    let prompts_origin = flow.prompts.1;
    flow.completions = Some((p.out(COMPLETIONS), "generation (its output)"));
    Derived {
        content: format!("Generate completions with {}", p.model_label()),
        spec,
        origins: vec![
            ("prompts", prompts_origin),
            ("output", "output_dir"),
            ("failures", "output_dir"),
            ("rejects", "output_dir"),
            ("endpoints", "model.endpoints"),
            ("model", "model.name"),
            ("params", "sampling"),
            ("api_key_env", "model.api_key_env"),
            ("servers", "servers"),
        ],
    }
}
