//! The phase kinds: the one place that knows them. For each kind it checks a
//! spec on arrival (every refusal names the field), says which paths the task
//! will write and which spec fields change what it writes, whether it starts
//! on its own, and runs it. The API and the runtime both ask here; adding a
//! kind means a module of its own and an arm in each function below.
use serde_json::Value;

use super::kinds::adaptation::{self, AdaptationSpec};
use super::kinds::feasibility::{self, FeasibilitySpec};
use super::kinds::generation::{self, GenerationSpec};
use super::kinds::tokenization::{self, TokenizationSpec};
use super::{Boundaries, Ended, RunContext};
use crate::domain::Claim;
use crate::domain::{Error, Kind, TaskId};

/// A spec as the registry accepted it.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The spec to store (paths made canonical).
    pub json: String,
    /// Paths the task will write.
    pub claims: Vec<Claim>,
    /// A kind the task must depend on, if its spec needs one.
    pub requires: Option<Kind>,
    /// A task the spec names (its field, the task, the kind it must be).
    pub refers: Option<(String, TaskId, Kind)>,
}

/// Checks `json` as the spec of a `kind` task. `own` lists the paths the task
/// already claims (for an update).
pub fn check(
    kind: Kind,
    json: &str,
    bounds: &Boundaries,
    own: &[String],
) -> Result<Checked, Error> {
    match kind {
        Kind::Todo => Ok(Checked {
            json: json.to_string(),
            claims: Vec::new(),
            requires: None,
            refers: None,
        }),
        Kind::Generation => {
            let checked = GenerationSpec::check(json, bounds, own)?;
            Ok(Checked {
                json: checked.json,
                claims: checked.claims,
                requires: checked.requires,
                refers: None,
            })
        }
        Kind::Tokenization => {
            let (spec, json, claims) = TokenizationSpec::check(json, bounds, own)?;
            // The tokenizer and template load now, so that a wrong directory
            // is refused here rather than when the task's turn comes.
            crate::tokenizer::load_dir(&spec.tokenizer)
                .map_err(|e| Error::invalid("spec.tokenizer", e.to_string()))?;
            if spec.mode == tokenization::spec::Mode::Conversation {
                crate::phase::model::template(
                    Some(&spec.tokenizer),
                    spec.chat_template.as_deref(),
                    spec.template_name.as_deref(),
                )
                .map_err(|e| Error::invalid("spec.chat_template", e))?;
            }
            Ok(Checked {
                json,
                claims,
                requires: None,
                refers: None,
            })
        }
        Kind::PromptAdaptation => {
            let (spec, json, claims) = AdaptationSpec::check(json, bounds, own)?;
            if spec.target.is_some() || spec.chat_template.is_some() {
                crate::phase::model::template(
                    spec.target.as_deref(),
                    spec.chat_template.as_deref(),
                    spec.template_name.as_deref(),
                )
                .map_err(|e| Error::invalid("spec.target", e))?;
            }
            if let (Some(dir), Some(_)) = (&spec.target, spec.max_prompt_tokens) {
                crate::tokenizer::load_dir(dir)
                    .map_err(|e| Error::invalid("spec.target", e.to_string()))?;
            }
            Ok(Checked {
                json,
                claims,
                requires: None,
                refers: None,
            })
        }
        Kind::Feasibility => {
            let (_, json, claims, named) = FeasibilitySpec::check(json, bounds, own)?;
            Ok(Checked {
                json,
                claims,
                requires: None,
                refers: named.map(|id| ("spec.generation".to_string(), id, Kind::Generation)),
            })
        }
    }
}

/// The spec fields whose change between `old` and `new` would change what a
/// task of `kind` writes.
pub fn output_fields_changed(kind: Kind, old: &str, new: &str) -> Vec<String> {
    let fields: &[&str] = match kind {
        Kind::Generation => generation::spec::OUTPUT_FIELDS,
        Kind::Tokenization => tokenization::spec::OUTPUT_FIELDS,
        Kind::PromptAdaptation => adaptation::spec::OUTPUT_FIELDS,
        Kind::Feasibility => &["report"],
        Kind::Todo => &[],
    };
    let parse = |s: &str| serde_json::from_str::<Value>(s).unwrap_or(Value::Null);
    let (old, new) = (parse(old), parse(new));
    fields
        .iter()
        .filter(|f| old.get(**f) != new.get(**f))
        .map(|f| format!("spec.{f}"))
        .collect()
}

/// Whether the runtime runs tasks of `kind`.
pub fn runs(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Generation | Kind::Tokenization | Kind::PromptAdaptation | Kind::Feasibility
    )
}

/// Whether a ready task starts by itself (`"auto_start": false` waits for a
/// start).
pub fn auto_start(_kind: Kind, spec: &str) -> bool {
    serde_json::from_str::<Value>(spec)
        .ok()
        .and_then(|v| v.get("auto_start").and_then(Value::as_bool))
        .unwrap_or(true)
}

/// Runs one attempt of a task of `kind`.
pub async fn run(kind: Kind, context: RunContext) -> Ended {
    match kind {
        Kind::Generation => match GenerationSpec::parse(&context.spec) {
            Ok(spec) => generation::run(context, spec).await,
            Err(error) => Ended::broke_off(format!("the stored spec is not valid: {error}")),
        },
        Kind::Tokenization => match TokenizationSpec::parse(&context.spec) {
            Ok(spec) => tokenization::run(context, spec).await,
            Err(error) => Ended::broke_off(format!("the stored spec is not valid: {error}")),
        },
        Kind::PromptAdaptation => match AdaptationSpec::parse(&context.spec) {
            Ok(spec) => adaptation::run(context, spec).await,
            Err(error) => Ended::broke_off(format!("the stored spec is not valid: {error}")),
        },
        Kind::Feasibility => match FeasibilitySpec::parse(&context.spec) {
            Ok(spec) => feasibility::run(context, spec).await,
            Err(error) => Ended::broke_off(format!("the stored spec is not valid: {error}")),
        },
        Kind::Todo => Ended::broke_off("todo tasks are not run by the daemon"),
    }
}
