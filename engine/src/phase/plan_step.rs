//! What a phase kind contributes to the plan file: its section, when it
//! runs, what it needs of the rest of the file, and how its spec is derived
//! from the file and from the steps before it ([`PlanStep`]). The plan file
//! module (`crate::plan_file`) reads the TOML into a [`PlanFile`] and walks
//! the table's steps in order, each handed the [`Flow`] of files the steps
//! before it left.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The served model and where its tokenizer and chat template are.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// The name the server knows the model by (the requests' `model`).
    pub name: String,
    pub endpoints: Vec<String>,
    pub api_key_env: Option<String>,
    /// The model's directory as on the Hub: tokenizer files and
    /// `tokenizer_config.json` with its chat template.
    pub dir: Option<PathBuf>,
}

/// A checked plan file.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanFile {
    pub plan: Option<String>,
    pub title: Option<String>,
    /// Every file the phases write is derived from this directory.
    pub output_dir: PathBuf,
    /// The sections of the steps that run, in the table's order.
    pub phases: Vec<&'static str>,
    pub model: Model,
    pub prompts: PathBuf,
    pub prompts_format: Option<String>,
    /// N of the prompt set's lines, chosen by a seed; `None`: all of them.
    pub sample: Option<(u64, u64)>,
    /// Request parameters (temperature, top_p, ...) for every request.
    pub sampling: Map<String, Value>,
    pub budget: Map<String, Value>,
    /// Each step's own section, passed to its spec as it is.
    pub options: BTreeMap<&'static str, Map<String, Value>>,
    /// `[servers.NAME]`: the servers the daemon runs, which the endpoints
    /// name (`server:NAME`).
    pub servers: Map<String, Value>,
}

impl PlanFile {
    pub fn options(&self, section: &str) -> &Map<String, Value> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        self.options
            .get(section)
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    pub fn runs(&self, section: &str) -> bool {
        self.phases.contains(&section)
    }

    /// `name` under the output directory, as a spec value.
    pub fn out(&self, name: &str) -> Value {
        Value::String(self.output_dir.join(name).display().to_string())
    }

    /// The model's name for a task's title: its name, else its directory's.
    pub fn model_label(&self) -> String {
        if self.model.name.is_empty() {
            self.model.dir.as_deref().map(file_name).unwrap_or_default()
        } else {
            self.model.name.clone()
        }
    }

    /// The model directory's last component (`smollm2`).
    pub fn model_dir_name(&self) -> String {
        self.model.dir.as_deref().map(file_name).unwrap_or_default()
    }

    pub fn model_dir(&self) -> Value {
        self.model
            .dir
            .as_ref()
            .map_or(Value::Null, |d| Value::String(d.display().to_string()))
    }
}

pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The files the steps before a step left for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    /// The prompts to generate from: the prompt set, or an adaptation's
    /// output; with where the value comes from in the file.
    pub prompts: (Value, &'static str),
    /// Whether those prompts are rendered text rather than conversations.
    pub rendered: bool,
    /// The completions the steps after the generation read: its output, or
    /// a filter's; with where the value comes from in the file.
    pub completions: Option<(Value, &'static str)>,
}

impl Flow {
    pub fn start(file: &PlanFile) -> Flow {
        Flow {
            prompts: (
                Value::String(file.prompts.display().to_string()),
                "prompts.path",
            ),
            rendered: false,
            completions: None,
        }
    }
}

/// A step's task as its kind derives it: the rest (its dependency, the
/// section's own options on top) is the plan file's.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    pub content: String,
    pub spec: Map<String, Value>,
    /// Spec fields that come from elsewhere in the file than the step's own
    /// section, with that place: a refusal of the spec names the file's path.
    pub origins: Vec<(&'static str, &'static str)>,
}

/// A refusal of a section's value: the field in the section, and why.
pub type SectionRefusal = (String, String);

/// A kind's step in the plan file.
#[derive(Clone, Copy)]
pub struct PlanStep {
    /// The section in the file, and the step's name in `phases` and in the
    /// store (`adaptation` for the prompt_adaptation kind).
    pub section: &'static str,
    /// Runs when the file's `phases` is not given (a step that does not
    /// runs only when `phases` names it, or when its section is there).
    pub by_default: bool,
    /// Steps that must run too.
    pub needs: &'static [&'static str],
    /// Whether it needs `model.dir` (a tokenizer, a chat template).
    pub needs_model_dir: bool,
    /// Whether it sends requests to `model.endpoints` as `model.name`.
    pub calls_server: bool,
    /// Parts of the file that only this step reads (`budget`,
    /// `prompts.sample`): refused when it does not run.
    pub takes: &'static [&'static str],
    /// Spec fields the plan file derives; the section may not set them.
    pub derived_fields: &'static [&'static str],
    /// The section's description, for the schema.
    pub describe: &'static str,
    /// The section's `properties` in the schema (`Value::Null`: none).
    pub properties: fn() -> Value,
    /// Checks of the section's own values made before any spec is
    /// derived.
    pub check: fn(&Map<String, Value>) -> Result<(), SectionRefusal>,
    /// Derives the step's spec, and moves the flow on.
    pub derive: fn(&PlanFile, &mut Flow) -> Derived,
}

impl std::fmt::Debug for PlanStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlanStep({})", self.section)
    }
}

/// No schema properties.
pub fn no_properties() -> Value {
    Value::Null
}

/// The `shards` option of a step whose kind shards, as the schema shows it.
pub fn shards_property(what: &str) -> Value {
    serde_json::json!({
        "type": "integer", "minimum": 1, "maximum": todod_domain::shards::MAX_SHARDS,
        "description": format!("Split {what} into this many shards run at once (by several \
                                daemons on one PostgreSQL database, or by one)"),
    })
}

/// The properties of a step whose only documented option is `shards`.
pub fn shards_only(what: &str) -> Value {
    serde_json::json!({ "shards": shards_property(what) })
}

/// No checks of the section beyond the spec's own.
pub fn no_check(_: &Map<String, Value>) -> Result<(), SectionRefusal> {
    Ok(())
}
