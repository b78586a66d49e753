//! The pipeline file: one TOML document that says "adapt this prompt set for
//! that model, check the server can do it within the budget, generate the
//! completions, tokenize them for training". This module reads and checks it
//! (every refusal names its path in the file, `generation.max_tokens: must be
//! positive`) and derives the phase tasks it stands for ([`steps`]). Plain
//! logic: the file system and the store are the API's and the store's.
//!
//! The schema editors and agents read is `docs/pipeline.schema.json`; a test
//! keeps the two in step.
pub mod steps;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

pub use steps::{derive, Step, StepKey};

/// A refusal: where in the file, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct SpecError {
    pub path: String,
    pub reason: String,
}

fn refuse(path: impl Into<String>, reason: impl Into<String>) -> SpecError {
    SpecError {
        path: path.into(),
        reason: reason.into(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    plan: Option<String>,
    title: Option<String>,
    output_dir: Option<PathBuf>,
    phases: Option<Vec<String>>,
    model: Option<RawModel>,
    prompts: Option<RawPrompts>,
    #[serde(default)]
    sampling: Map<String, Value>,
    #[serde(default)]
    budget: Map<String, Value>,
    #[serde(default)]
    adaptation: Map<String, Value>,
    #[serde(default)]
    feasibility: Map<String, Value>,
    #[serde(default)]
    generation: Map<String, Value>,
    #[serde(default)]
    tokenization: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    name: Option<String>,
    endpoints: Option<Vec<String>>,
    api_key_env: Option<String>,
    dir: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrompts {
    path: Option<PathBuf>,
    format: Option<String>,
    sample: Option<i64>,
    seed: Option<u64>,
}

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

/// A checked pipeline file.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    pub plan: Option<String>,
    pub title: Option<String>,
    /// Every file the phases write is derived from this directory.
    pub output_dir: PathBuf,
    pub phases: Vec<StepKey>,
    pub model: Model,
    pub prompts: PathBuf,
    pub prompts_format: Option<String>,
    /// N of the prompt set's lines, chosen by a seed; `None`: all of them.
    pub sample: Option<(u64, u64)>,
    /// Request parameters (temperature, top_p, ...) for every request.
    pub sampling: Map<String, Value>,
    pub budget: Map<String, Value>,
    /// Each phase's own options, passed to its spec as they are.
    pub options: [Map<String, Value>; 4],
}

impl Pipeline {
    pub fn options(&self, key: StepKey) -> &Map<String, Value> {
        &self.options[key as usize]
    }

    pub fn runs(&self, key: StepKey) -> bool {
        self.phases.contains(&key)
    }
}

/// Parses and checks a pipeline file. Relative paths are taken from `base`
/// (the file's directory, as the client that read it says); without one
/// they are refused: the daemon reads them, not the shell that wrote them.
pub fn parse(text: &str, base: Option<&Path>) -> Result<Pipeline, SpecError> {
    let raw: RawPipeline = toml::from_str(text).map_err(|e| {
        let reason = e.message().to_string();
        let at = e
            .span()
            .map(|span| {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                format!(" (line {line})")
            })
            .unwrap_or_default();
        refuse("file", format!("{reason}{at}"))
    })?;
    check(raw, base)
}

fn required<T>(value: Option<T>, path: &str) -> Result<T, SpecError> {
    value.ok_or_else(|| refuse(path, "is required"))
}

fn absolute(path: &Path, at: &str, base: Option<&Path>) -> Result<PathBuf, SpecError> {
    if let (false, Some(base)) = (path.is_absolute(), base) {
        return Ok(base.join(path));
    }
    if !path.is_absolute() {
        return Err(refuse(
            at,
            format!(
                "{:?} is relative; give an absolute path (the daemon reads it, not your shell)",
                path.display().to_string()
            ),
        ));
    }
    Ok(path.to_path_buf())
}

fn check(raw: RawPipeline, base: Option<&Path>) -> Result<Pipeline, SpecError> {
    if let Some(plan) = &raw.plan {
        if plan.is_empty()
            || plan.len() > 128
            || !plan
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
        {
            return Err(refuse("plan", "must be 1-128 letters, digits and `._:-`"));
        }
    }
    let output_dir = absolute(&required(raw.output_dir, "output_dir")?, "output_dir", base)?;
    let phases = match raw.phases {
        None => StepKey::ALL.to_vec(),
        Some(names) => {
            let mut keys = Vec::new();
            for (i, name) in names.iter().enumerate() {
                let key = StepKey::parse(name).ok_or_else(|| {
                    refuse(
                        format!("phases[{i}]"),
                        format!(
                            "{name:?} is not a phase; use adaptation, feasibility, generation or tokenization"
                        ),
                    )
                })?;
                if keys.contains(&key) {
                    return Err(refuse(
                        format!("phases[{i}]"),
                        format!("{name} is listed twice"),
                    ));
                }
                keys.push(key);
            }
            if keys.is_empty() {
                return Err(refuse("phases", "names no phase"));
            }
            keys.sort();
            keys
        }
    };
    let needs_generation = [StepKey::Feasibility, StepKey::Tokenization]
        .into_iter()
        .find(|k| phases.contains(k));
    if let Some(k) = needs_generation {
        if !phases.contains(&StepKey::Generation) {
            return Err(refuse(
                "phases",
                format!("{} needs generation in the pipeline", k.name()),
            ));
        }
    }

    let model = required(raw.model, "model")?;
    let calls_server = phases.contains(&StepKey::Generation);
    let name = match model.name {
        Some(n) if n.trim().is_empty() => return Err(refuse("model.name", "must not be empty")),
        Some(n) => n,
        None if calls_server => return Err(refuse("model.name", "is required")),
        None => String::new(),
    };
    let endpoints = model.endpoints.unwrap_or_default();
    if calls_server && endpoints.is_empty() {
        return Err(refuse(
            "model.endpoints",
            "is required: the server's base URLs, e.g. [\"http://127.0.0.1:8080\"]",
        ));
    }
    let dir = model
        .dir
        .map(|d| absolute(&d, "model.dir", base))
        .transpose()?;
    let needs_dir = [StepKey::Adaptation, StepKey::Tokenization]
        .into_iter()
        .find(|k| phases.contains(k));
    if let (Some(k), None) = (needs_dir, &dir) {
        return Err(refuse(
            "model.dir",
            format!(
                "is required for {}: the model's directory with its tokenizer and tokenizer_config.json",
                k.name()
            ),
        ));
    }

    let prompts = required(raw.prompts, "prompts")?;
    let path = absolute(
        &required(prompts.path, "prompts.path")?,
        "prompts.path",
        base,
    )?;
    let sample = match prompts.sample {
        None if prompts.seed.is_some() => {
            return Err(refuse(
                "prompts.seed",
                "chooses a sample; set prompts.sample too",
            ))
        }
        None => None,
        Some(n) if n < 1 => {
            return Err(refuse(
                "prompts.sample",
                "must be a positive number of prompts",
            ))
        }
        Some(_) if !phases.contains(&StepKey::Adaptation) => {
            return Err(refuse(
                "prompts.sample",
                "is taken by the adaptation phase, which is not in `phases`",
            ))
        }
        Some(n) => Some((n as u64, prompts.seed.unwrap_or(1))),
    };

    let mut sampling = raw.sampling;
    if sampling.contains_key("max_tokens") {
        return Err(refuse(
            "sampling.max_tokens",
            "set it as generation.max_tokens (the feasibility check measures with the same value)",
        ));
    }
    for key in ["model", "messages", "prompt", "stream", "n"] {
        if sampling.contains_key(key) {
            return Err(refuse(
                format!("sampling.{key}"),
                "is set by the pipeline, not a sampling parameter",
            ));
        }
    }
    for (key, value) in &sampling {
        if let Value::Object(_) = value {
            if key != "extra_body" && key != "logit_bias" && key != "response_format" {
                return Err(refuse(
                    format!("sampling.{key}"),
                    "must be a value, not a table",
                ));
            }
        }
    }
    sampling.retain(|_, v| !v.is_null());

    let options = [
        raw.adaptation,
        raw.feasibility,
        raw.generation,
        raw.tokenization,
    ];
    for key in StepKey::ALL {
        let given = &options[key as usize];
        if !given.is_empty() && !phases.contains(&key) {
            return Err(refuse(
                key.name(),
                "options are given but the phase is not in `phases`",
            ));
        }
        for derived in key.derived_fields() {
            if given.contains_key(*derived) {
                return Err(refuse(
                    format!("{}.{derived}", key.name()),
                    "is derived by the pipeline (from output_dir, model or prompts); remove it",
                ));
            }
        }
    }
    if let Some(v) = options[StepKey::Generation as usize].get("max_tokens") {
        match v.as_i64() {
            Some(n) if n > 0 => {}
            _ => {
                return Err(refuse(
                    "generation.max_tokens",
                    "must be a positive integer",
                ))
            }
        }
    }
    if !raw.budget.is_empty() && !phases.contains(&StepKey::Feasibility) {
        return Err(refuse(
            "budget",
            "is checked by the feasibility phase, which is not in `phases`",
        ));
    }

    Ok(Pipeline {
        plan: raw.plan,
        title: raw.title,
        output_dir,
        phases,
        model: Model {
            name,
            endpoints,
            api_key_env: model.api_key_env,
            dir,
        },
        prompts: path,
        prompts_format: prompts.format,
        sample,
        sampling,
        budget: raw.budget,
        options,
    })
}

#[cfg(test)]
mod tests;
