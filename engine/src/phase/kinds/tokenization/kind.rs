//! Tokenization at the seam: its spec, its step in the plan file, its
//! summary.
use serde_json::{json, Map, Value};

use super::TokenizationSpec;
use todod_domain::{Error, Kind};
use crate::phase::kind::{Checked, PhaseKind, View};
use crate::phase::plan_step::{self, Derived, Flow, PlanFile, PlanStep};
use crate::phase::{Boundaries, Ended, RunContext};
use todod_proto::results::TokenizationResult;
use todod_proto::readable::count;

pub struct Tokenization;

/// The kind, as tasks and the store name it.
pub const KIND: Kind = Kind::named(<Tokenization as PhaseKind>::NAME);

/// The training files' prefix under the output directory.
pub const TRAINING_PREFIX: &str = "train";

impl PhaseKind for Tokenization {
    const NAME: &'static str = "tokenization";
    const SUMMARY: &'static str = "tokenizes the completions with the target model's own \
                                   tokenizer and chat template into training files (Megatron \
                                   .bin/.idx, Parquet) with a loss mask";
    const OUTPUT_FIELDS: &'static [&'static str] = super::spec::OUTPUT_FIELDS;
    const STEP: Option<PlanStep> = Some(PlanStep {
        section: "tokenization",
        by_default: true,
        needs: &["generation"],
        needs_model_dir: true,
        calls_server: false,
        takes: &[],
        derived_fields: &["input", "tokenizer", "output_prefix"],
        describe: "Options of the tokenization phase (mode, formats, train_on, add_eos, \
                   max_length, threads, ...). input, tokenizer and output_prefix are derived.",
        properties,
        check: plan_step::no_check,
        derive,
    });
    type Spec = TokenizationSpec;
    type Result = TokenizationResult;

    fn check(
        json: &str,
        bounds: &Boundaries,
        own: &[String],
    ) -> Result<Checked<TokenizationSpec>, Error> {
        let (spec, json, claims) = TokenizationSpec::check(json, bounds, own)?;
        // The tokenizer and template load now, so that a wrong directory
        // is refused here rather than when the task's turn comes.
        todod_format::tokenizer::load_dir(&spec.tokenizer)
            .map_err(|e| Error::invalid("spec.tokenizer", e.to_string()))?;
        if spec.mode == super::spec::Mode::Conversation {
            crate::phase::model::template(
                Some(&spec.tokenizer),
                spec.chat_template.as_deref(),
                spec.template_name.as_deref(),
            )
            .map_err(|e| Error::invalid("spec.chat_template", e))?;
        }
        Ok(Checked {
            spec,
            json,
            claims,
            requires: None,
            refers: None,
        })
    }

    fn parse(json: &str) -> Result<TokenizationSpec, Error> {
        TokenizationSpec::parse(json)
    }

    async fn run(context: &RunContext, spec: TokenizationSpec) -> Result<Ended, String> {
        super::run_inner(context, spec).await
    }

    fn view(r: &TokenizationResult) -> View {
        let mut line = format!(
            "{} records, {} tokens ({} trained)",
            r.records,
            count(r.tokens as f64),
            count(r.trained_tokens as f64)
        );
        let dropped: u64 = r.dropped.values().sum();
        if dropped > 0 {
            line.push_str(&format!(", {dropped} dropped by the spec"));
        }
        if r.rejected > 0 {
            line.push_str(&format!(", {} rejected", r.rejected));
        }
        if let Some(drift) = &r.drift {
            // What the status page and `todoctl status` say of it.
            line.push_str(&format!(
                ", {} of {} train on other ids than their model generated",
                drift.differing, drift.checked
            ));
        }
        View {
            summary: line,
            ..View::default()
        }
    }
}

fn derive(p: &PlanFile, flow: &mut Flow) -> Derived {
    let (input, input_origin) = flow
        .completions
        .clone()
        .unwrap_or((Value::Null, "generation (its output)"));
    let mut spec = Map::new();
    spec.insert("input".into(), input);
    spec.insert("tokenizer".into(), p.model_dir());
    spec.insert(
        "output_prefix".into(),
        Value::String(p.output_dir.join(TRAINING_PREFIX).display().to_string()),
    );
    // A rendered prompt is text, not turns: the completion alone is what
    // can be trained on without parsing it back.
    let mode = if flow.rendered {
        "completion"
    } else {
        "conversation"
    };
    spec.insert("mode".into(), json!(mode));
    Derived {
        content: format!(
            "Tokenize the completions with {}'s tokenizer",
            p.model_dir_name()
        ),
        spec,
        origins: vec![
            ("input", input_origin),
            ("tokenizer", "model.dir"),
            ("output_prefix", "output_dir"),
        ],
    }
}

/// The section's fields the schema describes (the others are the spec's).
fn properties() -> serde_json::Value {
    serde_json::json!({
        "shards": plan_step::shards_property("the completions"),
        "answer_ids": {
            "description": "Where a generated answer's ids come from: \"rendered\" (the \
                            answer rendered with the template and tokenized) or \"generated\" \
                            (the ids the model generated, kept by the generation, with the \
                            template's end of turn after them).",
            "enum": ["rendered", "generated"],
        },
        "max_drift_share": {
            "description": "Fail when more than this share of the records that kept their \
                            generated ids train on other ids for their answer.",
            "type": "number", "minimum": 0, "maximum": 1,
        },
    })
}
