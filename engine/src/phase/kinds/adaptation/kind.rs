//! Prompt adaptation at the seam: its spec, its step in the plan file, its
//! summary.
use serde_json::{json, Map, Value};

use super::AdaptationSpec;
use todod_domain::{Error, Kind};
use crate::phase::kind::{Checked, PhaseKind, View};
use crate::phase::plan_step::{self, Derived, Flow, PlanFile, PlanStep};
use crate::phase::{Boundaries, Ended, RunContext};
use todod_proto::results::AdaptationResult;

pub struct Adaptation;

/// The kind, as tasks and the store name it.
pub const KIND: Kind = Kind::named(<Adaptation as PhaseKind>::NAME);

/// The files of the step, under the plan file's output directory.
pub const PROMPTS: &str = "prompts.jsonl";
pub const PROMPT_REJECTS: &str = "prompts.rejects.jsonl";

impl PhaseKind for Adaptation {
    const NAME: &'static str = "prompt_adaptation";
    const SUMMARY: &'static str = "converts a prompt set to the target model's format and chat \
                                   template (ShareGPT, Alpaca, OpenAI, batch, rendered text)";
    const OUTPUT_FIELDS: &'static [&'static str] = super::spec::OUTPUT_FIELDS;
    const STEP: Option<PlanStep> = Some(PlanStep {
        section: "adaptation",
        by_default: true,
        needs: &[],
        needs_model_dir: true,
        calls_server: false,
        takes: &["prompts.sample"],
        derived_fields: &["input", "output", "rejects", "target", "sample"],
        describe: "Options of the prompt_adaptation phase, passed to its spec as they are \
                   (output_format, system_prompt, max_prompt_tokens, threads, ...). input, \
                   output, rejects, target and sample are derived.",
        properties: || plan_step::shards_only("the prompt set"),
        check: plan_step::no_check,
        derive,
    });
    type Spec = AdaptationSpec;
    type Result = AdaptationResult;

    fn check(
        json: &str,
        bounds: &Boundaries,
        own: &[String],
    ) -> Result<Checked<AdaptationSpec>, Error> {
        let (spec, json, claims) = AdaptationSpec::check(json, bounds, own)?;
        // The template (and tokenizer) load now, so that a wrong directory
        // is refused here rather than when the task's turn comes.
        if spec.target.is_some() || spec.chat_template.is_some() {
            crate::phase::model::template(
                spec.target.as_deref(),
                spec.chat_template.as_deref(),
                spec.template_name.as_deref(),
            )
            .map_err(|e| Error::invalid("spec.target", e))?;
        }
        if let (Some(dir), Some(_)) = (&spec.target, spec.max_prompt_tokens) {
            todod_format::tokenizer::load_dir(dir)
                .map_err(|e| Error::invalid("spec.target", e.to_string()))?;
        }
        Ok(Checked {
            spec,
            json,
            claims,
            requires: None,
            refers: None,
        })
    }

    fn parse(json: &str) -> Result<AdaptationSpec, Error> {
        AdaptationSpec::parse(json)
    }

    async fn run(context: &RunContext, spec: AdaptationSpec) -> Result<Ended, String> {
        super::run_inner(context, spec).await
    }

    fn view(r: &AdaptationResult) -> View {
        let mut line = format!("{} prompts adapted", r.records);
        if r.rejected > 0 {
            line.push_str(&format!(", {} rejected", r.rejected));
        }
        if let Some(sample) = &r.sample {
            line.push_str(&format!(", {} not in the sample", sample.not_sampled));
        }
        View {
            summary: line,
            ..View::default()
        }
    }
}

fn derive(p: &PlanFile, flow: &mut Flow) -> Derived {
    let options: &Map<String, Value> = p.options("adaptation");
    let mut spec = Map::new();
    spec.insert("input".into(), flow.prompts.0.clone());
    spec.insert("output".into(), p.out(PROMPTS));
    spec.insert("rejects".into(), p.out(PROMPT_REJECTS));
    if let Some(format) = &p.prompts_format {
        spec.insert("input_format".into(), json!(format));
    }
    spec.insert("target".into(), p.model_dir());
    if let Some((count, seed)) = p.sample {
        spec.insert("sample".into(), json!({"count": count, "seed": seed}));
    }
    let content = format!(
        "Adapt {} to {}'s chat template",
        p.prompts.file_name().map_or_else(
            || p.prompts.display().to_string(),
            |n| n.to_string_lossy().into_owned()
        ),
        p.model_dir_name()
    );
    flow.prompts = (p.out(PROMPTS), "adaptation (its output)");
    flow.rendered = options.get("output_format").and_then(Value::as_str) == Some("rendered");
    Derived {
        content,
        spec,
        origins: vec![
            ("input", "prompts.path"),
            ("input_format", "prompts.format"),
            ("target", "model.dir"),
            ("sample", "prompts.sample"),
            ("output", "output_dir"),
            ("rejects", "output_dir"),
        ],
    }
}
