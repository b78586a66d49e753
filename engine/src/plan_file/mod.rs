//! The plan file: one TOML document that says "adapt this prompt set for
//! that model, check the server can do it within the budget, generate the
//! completions, tokenize them for training". This module reads and checks it
//! (every refusal names its path in the file, `generation.max_tokens: must be
//! positive`) and derives the phase tasks it stands for ([`steps`]). Its
//! steps are the phase table's (`phase::kinds`): each kind that has one
//! gives its section, what it needs of the rest of the file and how its
//! spec is derived (`phase::plan_step`). Plain logic: the file system and
//! the store are the API's and the store's.
//!
//! The schema editors and agents read is `docs/pipeline.schema.json`,
//! made by [`schema`] from the same table; a test keeps the two in step.
pub mod schema;
pub mod steps;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::phase::kinds;
use crate::phase::plan_step::PlanStep;
pub use crate::phase::plan_step::{Model, PlanFile};
pub use steps::{derive, Step};

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

/// The parts of the file that are not a step's section.
const FIXED: [&str; 9] = [
    "plan",
    "servers",
    "title",
    "output_dir",
    "phases",
    "model",
    "prompts",
    "sampling",
    "budget",
];

/// The file's fixed parts; the steps' sections are read from the table.
#[derive(Debug, Deserialize)]
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
    servers: Map<String, Value>,
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

/// The line of `text` where top-level `key` is set (`key = ...` or
/// `[key]`), for a refusal that says where.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|line| {
            let line = line.trim_start();
            let rest = line.strip_prefix('[').unwrap_or(line).trim_start();
            rest.strip_prefix(key)
                .is_some_and(|after| after.trim_start().starts_with(['=', ']', '.']))
        })
        .map(|i| i + 1)
}

/// Parses and checks a plan file. Relative paths are taken from `base`
/// (the file's directory, as the client that read it says); without one
/// they are refused: the daemon reads them, not the shell that wrote them.
pub fn parse(text: &str, base: Option<&Path>) -> Result<PlanFile, SpecError> {
    let toml_error = |e: toml::de::Error| {
        let reason = e.message().to_string();
        let at = e
            .span()
            .map(|span| {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                format!(" (line {line})")
            })
            .unwrap_or_default();
        refuse("file", format!("{reason}{at}"))
    };
    let table: toml::Table = toml::from_str(text).map_err(toml_error)?;
    let sections: Vec<&'static str> = kinds::steps().map(|(_, s)| s.section).collect();
    for key in table.keys() {
        if !FIXED.contains(&key.as_str()) && !sections.contains(&key.as_str()) {
            let known: Vec<&str> = FIXED
                .iter()
                .copied()
                .chain(sections.iter().copied())
                .collect();
            let at = line_of(text, key).map_or(String::new(), |l| format!(" (line {l})"));
            return Err(refuse(
                "file",
                format!(
                    "unknown field `{key}`, expected one of {}{at}",
                    known.join(", ")
                ),
            ));
        }
    }
    let raw: RawPipeline = toml::from_str(text).map_err(toml_error)?;
    let mut options = std::collections::BTreeMap::new();
    for section in sections {
        let Some(value) = table.get(section) else {
            continue;
        };
        match serde_json::to_value(value) {
            Ok(Value::Object(map)) => {
                options.insert(section, map);
            }
            _ => return Err(refuse(section, "must be a table of options")),
        }
    }
    check(raw, options, base)
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

fn check(
    raw: RawPipeline,
    options: std::collections::BTreeMap<&'static str, Map<String, Value>>,
    base: Option<&Path>,
) -> Result<PlanFile, SpecError> {
    if let Some(plan) = &raw.plan {
        check_plan_name(plan)?;
    }
    let output_dir = absolute(&required(raw.output_dir, "output_dir")?, "output_dir", base)?;
    let steps: Vec<_> = kinds::steps().map(|(_, s)| s).collect();
    let phases = pick_phases(raw.phases, &steps, &options)?;
    let running: Vec<_> = steps
        .iter()
        .filter(|s| phases.contains(&s.section))
        .collect();

    let model = required(raw.model, "model")?;
    let calls_server = running.iter().any(|s| s.calls_server);
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
    let servers = check_servers(raw.servers, &endpoints, base)?;
    let dir = model
        .dir
        .map(|d| absolute(&d, "model.dir", base))
        .transpose()?;
    let needs_dir = running.iter().find(|s| s.needs_model_dir);
    if let (Some(step), None) = (needs_dir, &dir) {
        return Err(refuse(
            "model.dir",
            format!(
                "is required for {}: the model's directory with its tokenizer and tokenizer_config.json",
                step.section
            ),
        ));
    }
    // A part of the file that only a step reads, given while it does not run.
    let taken_by = |part: &str| steps.iter().find(|s| s.takes.contains(&part));
    let refuse_untaken = |part: &str, path: &str, what: &str| -> Result<(), SpecError> {
        match taken_by(part) {
            Some(step) if !phases.contains(&step.section) => Err(refuse(
                path,
                format!(
                    "{what} the {} phase, which is not in `phases`",
                    step.section
                ),
            )),
            _ => Ok(()),
        }
    };

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
        Some(n) => {
            refuse_untaken("prompts.sample", "prompts.sample", "is taken by")?;
            Some((n as u64, prompts.seed.unwrap_or(1)))
        }
    };

    let sampling = check_sampling(raw.sampling)?;

    check_step_options(&steps, &options, &phases)?;
    if !raw.budget.is_empty() {
        refuse_untaken("budget", "budget", "is checked by")?;
    }

    Ok(PlanFile {
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
        servers,
    })
}

/// `[servers.NAME]`: servers the daemon runs, which `model.endpoints` name
/// (`"server:NAME"`); a program given by a relative path is taken from the
/// file's folder. Whether the daemon may start it is the daemon's to say
/// when the file is applied.
fn check_servers(
    mut servers: Map<String, Value>,
    endpoints: &[String],
    base: Option<&Path>,
) -> Result<Map<String, Value>, SpecError> {
    for (name, server) in servers.iter_mut() {
        let program = server
            .get("command")
            .and_then(|c| c.get(0))
            .and_then(Value::as_str)
            .map(PathBuf::from);
        if let Some(program) = program.filter(|p| p.is_relative() && p.components().count() > 1) {
            let at = format!("servers.{name}.command[0]");
            let path = absolute(&program, &at, base)?;
            server["command"][0] = Value::String(path.display().to_string());
        }
    }
    let typed: std::collections::BTreeMap<String, Value> = servers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    crate::phase::servers::check_all(&typed, endpoints).map_err(|e| {
        let text = e.to_string();
        let (path, reason) = text.split_once(": ").unwrap_or(("servers", &text));
        let path = path.strip_prefix("spec.").unwrap_or(path);
        let path = match path.strip_prefix("endpoints") {
            Some(rest) => format!("model.endpoints{rest}"),
            None => path.to_string(),
        };
        refuse(path, reason.replace("spec.servers", "[servers]"))
    })?;
    Ok(servers)
}

/// A plan's name: what the API takes as one.
fn check_plan_name(plan: &str) -> Result<(), SpecError> {
    if plan.is_empty()
        || plan.len() > 128
        || !plan
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
    {
        return Err(refuse("plan", "must be 1-128 letters, digits and `._:-`"));
    }
    Ok(())
}

/// The phases that run, in the table's order: those the file lists in
/// `phases` (each known, once), else the default ones and an optional one
/// whose section is there; each with the phases it needs.
fn pick_phases(
    given: Option<Vec<String>>,
    steps: &[PlanStep],
    options: &std::collections::BTreeMap<&'static str, Map<String, Value>>,
) -> Result<Vec<&'static str>, SpecError> {
    let names: Vec<&str> = steps.iter().map(|s| s.section).collect();
    let phases: Vec<&'static str> = match given {
        // The default steps, and an optional one whose section is there.
        None => steps
            .iter()
            .filter(|s| s.by_default || options.contains_key(s.section))
            .map(|s| s.section)
            .collect(),
        Some(given) => {
            let mut picked: Vec<&'static str> = Vec::new();
            for (i, name) in given.iter().enumerate() {
                let Some(step) = steps.iter().find(|s| s.section == name) else {
                    return Err(refuse(
                        format!("phases[{i}]"),
                        format!("{name:?} is not a phase; use {}", names.join(", ")),
                    ));
                };
                if picked.contains(&step.section) {
                    return Err(refuse(
                        format!("phases[{i}]"),
                        format!("{name} is listed twice"),
                    ));
                }
                picked.push(step.section);
            }
            if picked.is_empty() {
                return Err(refuse("phases", "names no phase"));
            }
            // In the table's order, whatever the file's.
            steps
                .iter()
                .map(|s| s.section)
                .filter(|s| picked.contains(s))
                .collect()
        }
    };
    for step in steps.iter().filter(|s| phases.contains(&s.section)) {
        if let Some(missing) = step.needs.iter().find(|n| !phases.contains(n)) {
            return Err(refuse(
                "phases",
                format!("{} needs {missing} in the pipeline", step.section),
            ));
        }
    }
    Ok(phases)
}

/// The sampling parameters sent with every request: values only (but the
/// few the servers take as tables), none of those the pipeline sets itself.
fn check_sampling(mut sampling: Map<String, Value>) -> Result<Map<String, Value>, SpecError> {
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
    Ok(sampling)
}

/// Each step's own section: given only for a phase that runs, without the
/// fields the file derives, and as its kind checks it.
fn check_step_options(
    steps: &[PlanStep],
    options: &std::collections::BTreeMap<&'static str, Map<String, Value>>,
    phases: &[&'static str],
) -> Result<(), SpecError> {
    for step in steps {
        let Some(given) = options.get(step.section) else {
            continue;
        };
        if !given.is_empty() && !phases.contains(&step.section) {
            return Err(refuse(
                step.section,
                "options are given but the phase is not in `phases`",
            ));
        }
        for derived in step.derived_fields {
            if given.contains_key(*derived) {
                return Err(refuse(
                    format!("{}.{derived}", step.section),
                    "is derived by the pipeline (from output_dir, model or prompts); remove it",
                ));
            }
        }
        (step.check)(given)
            .map_err(|(field, reason)| refuse(format!("{}.{field}", step.section), reason))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
