//! From a pipeline file to the phase tasks it stands for: adaptation →
//! feasibility → generation → tokenization (those the file's `phases` name),
//! each with its spec and the files it reads and writes derived from the
//! output directory, so that one step's output is the next one's input.
use serde_json::{json, Map, Value};

use super::Pipeline;
use crate::domain::Kind;

/// A step of a pipeline; the order is the order of the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StepKey {
    Adaptation = 0,
    Feasibility = 1,
    Generation = 2,
    Tokenization = 3,
}

impl StepKey {
    pub const ALL: [StepKey; 4] = [
        StepKey::Adaptation,
        StepKey::Feasibility,
        StepKey::Generation,
        StepKey::Tokenization,
    ];

    /// The name in the file (`phases`, section names) and in the store.
    pub fn name(self) -> &'static str {
        match self {
            StepKey::Adaptation => "adaptation",
            StepKey::Feasibility => "feasibility",
            StepKey::Generation => "generation",
            StepKey::Tokenization => "tokenization",
        }
    }

    pub fn parse(name: &str) -> Option<StepKey> {
        StepKey::ALL.into_iter().find(|k| k.name() == name)
    }

    pub fn kind(self) -> Kind {
        match self {
            StepKey::Adaptation => Kind::PromptAdaptation,
            StepKey::Feasibility => Kind::Feasibility,
            StepKey::Generation => Kind::Generation,
            StepKey::Tokenization => Kind::Tokenization,
        }
    }

    /// Spec fields the pipeline sets itself; a section may not set them.
    pub fn derived_fields(self) -> &'static [&'static str] {
        match self {
            StepKey::Adaptation => &["input", "output", "rejects", "target", "sample"],
            StepKey::Feasibility => &[
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
            StepKey::Generation => &[
                "prompts",
                "output",
                "failures",
                "rejects",
                "endpoints",
                "model",
                "params",
                "api_key_env",
            ],
            StepKey::Tokenization => &["input", "tokenizer", "output_prefix"],
        }
    }
}

/// One phase task of the pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub key: StepKey,
    pub content: String,
    pub spec: Map<String, Value>,
    /// The steps it depends on (earlier in the order).
    pub depends_on: Vec<StepKey>,
    /// Spec fields that come from elsewhere in the file than the step's own
    /// section, with that place: a refusal of the spec names the file's path.
    pub origins: Vec<(&'static str, &'static str)>,
}

impl Step {
    /// The place in the file of a refused spec field (`spec.params.top_p`).
    pub fn file_path(&self, spec_field: &str) -> String {
        let field = spec_field.strip_prefix("spec.").unwrap_or(spec_field);
        let head = field.split(['.', '[']).next().unwrap_or(field);
        match self.origins.iter().find(|(f, _)| *f == head) {
            // A table of the file: the field's path inside it goes along.
            Some((_, origin)) if *origin == "sampling" || *origin == "budget" => {
                format!("{origin}{}", &field[head.len()..])
            }
            Some((_, origin)) => origin.to_string(),
            None => format!("{}.{field}", self.key.name()),
        }
    }
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The files of a pipeline, under its output directory.
pub mod files {
    pub const PROMPTS: &str = "prompts.jsonl";
    pub const PROMPT_REJECTS: &str = "prompts.rejects.jsonl";
    pub const FEASIBILITY_REPORT: &str = "feasibility.html";
    pub const FEASIBILITY_RESULT: &str = "feasibility.json";
    pub const COMPLETIONS: &str = "completions.jsonl";
    pub const FAILURES: &str = "completions.failures.jsonl";
    pub const GENERATION_REJECTS: &str = "completions.rejects.jsonl";
    pub const TRAINING_PREFIX: &str = "train";
}

/// The steps of a checked pipeline, in graph order.
pub fn derive(p: &Pipeline) -> Vec<Step> {
    let out = |name: &str| Value::String(p.output_dir.join(name).display().to_string());
    let model_dir = p
        .model
        .dir
        .as_ref()
        .map(|d| Value::String(d.display().to_string()));
    let model_label = if p.model.name.is_empty() {
        p.model.dir.as_deref().map(file_name).unwrap_or_default()
    } else {
        p.model.name.clone()
    };
    let mut steps = Vec::new();
    let mut previous: Option<StepKey> = None;
    let after = |previous: Option<StepKey>| previous.into_iter().collect::<Vec<_>>();

    let adapted = p.runs(StepKey::Adaptation);
    let rendered = p
        .options(StepKey::Adaptation)
        .get("output_format")
        .and_then(Value::as_str)
        == Some("rendered");

    if adapted {
        let mut spec = Map::new();
        spec.insert("input".into(), json!(p.prompts.display().to_string()));
        spec.insert("output".into(), out(files::PROMPTS));
        spec.insert("rejects".into(), out(files::PROMPT_REJECTS));
        if let Some(format) = &p.prompts_format {
            spec.insert("input_format".into(), json!(format));
        }
        spec.insert("target".into(), model_dir.clone().unwrap_or(Value::Null));
        if let Some((count, seed)) = p.sample {
            spec.insert("sample".into(), json!({"count": count, "seed": seed}));
        }
        spec.extend(p.options(StepKey::Adaptation).clone());
        steps.push(Step {
            key: StepKey::Adaptation,
            content: format!(
                "Adapt {} to {}'s chat template",
                file_name(&p.prompts),
                p.model.dir.as_deref().map(file_name).unwrap_or_default()
            ),
            spec,
            depends_on: Vec::new(),
            origins: vec![
                ("input", "prompts.path"),
                ("input_format", "prompts.format"),
                ("target", "model.dir"),
                ("sample", "prompts.sample"),
                ("output", "output_dir"),
                ("rejects", "output_dir"),
            ],
        });
        previous = Some(StepKey::Adaptation);
    }

    if p.runs(StepKey::Feasibility) {
        let mut spec = Map::new();
        spec.insert("report".into(), out(files::FEASIBILITY_REPORT));
        spec.insert("result_file".into(), out(files::FEASIBILITY_RESULT));
        if !p.budget.is_empty() {
            spec.insert("budget".into(), Value::Object(p.budget.clone()));
        }
        spec.extend(p.options(StepKey::Feasibility).clone());
        steps.push(Step {
            key: StepKey::Feasibility,
            content: format!("Measure {model_label} and project the generation"),
            spec,
            depends_on: after(previous),
            origins: vec![
                ("report", "output_dir"),
                ("result_file", "output_dir"),
                ("budget", "budget"),
            ],
        });
        previous = Some(StepKey::Feasibility);
    }

    if p.runs(StepKey::Generation) {
        let mut spec = Map::new();
        let prompts = if adapted {
            out(files::PROMPTS)
        } else {
            json!(p.prompts.display().to_string())
        };
        spec.insert("prompts".into(), prompts);
        spec.insert("output".into(), out(files::COMPLETIONS));
        spec.insert("failures".into(), out(files::FAILURES));
        spec.insert("rejects".into(), out(files::GENERATION_REJECTS));
        spec.insert("endpoints".into(), json!(p.model.endpoints));
        spec.insert("model".into(), json!(p.model.name));
        if adapted && rendered {
            spec.insert("api".into(), json!("completions"));
        }
        spec.insert("params".into(), Value::Object(p.sampling.clone()));
        if let Some(key) = &p.model.api_key_env {
            spec.insert("api_key_env".into(), json!(key));
        }
        if p.runs(StepKey::Feasibility) {
            spec.insert("concurrency".into(), json!("auto"));
        }
        spec.extend(p.options(StepKey::Generation).clone());
        steps.push(Step {
            key: StepKey::Generation,
            content: format!("Generate completions with {model_label}"),
            spec,
            depends_on: after(previous),
            origins: vec![
                (
                    "prompts",
                    if adapted {
                        "adaptation (its output)"
                    } else {
                        "prompts.path"
                    },
                ),
                ("output", "output_dir"),
                ("failures", "output_dir"),
                ("rejects", "output_dir"),
                ("endpoints", "model.endpoints"),
                ("model", "model.name"),
                ("params", "sampling"),
                ("api_key_env", "model.api_key_env"),
            ],
        });
        previous = Some(StepKey::Generation);
    }

    if p.runs(StepKey::Tokenization) {
        let mut spec = Map::new();
        spec.insert("input".into(), out(files::COMPLETIONS));
        spec.insert("tokenizer".into(), model_dir.clone().unwrap_or(Value::Null));
        spec.insert(
            "output_prefix".into(),
            Value::String(
                p.output_dir
                    .join(files::TRAINING_PREFIX)
                    .display()
                    .to_string(),
            ),
        );
        // A rendered prompt is text, not turns: the completion alone is
        // what can be trained on without parsing it back.
        let mode = if rendered {
            "completion"
        } else {
            "conversation"
        };
        spec.insert("mode".into(), json!(mode));
        spec.extend(p.options(StepKey::Tokenization).clone());
        steps.push(Step {
            key: StepKey::Tokenization,
            content: format!(
                "Tokenize the completions with {}'s tokenizer",
                p.model.dir.as_deref().map(file_name).unwrap_or_default()
            ),
            spec,
            depends_on: after(previous),
            origins: vec![
                ("input", "generation (its output)"),
                ("tokenizer", "model.dir"),
                ("output_prefix", "output_dir"),
            ],
        });
    }
    // A field the step's own section sets is that section's, whatever the
    // pipeline would have derived for it.
    for step in &mut steps {
        let own = p.options(step.key);
        step.origins.retain(|(field, _)| !own.contains_key(*field));
    }
    steps
}
