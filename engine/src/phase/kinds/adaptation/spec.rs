//! The spec of a prompt-adaptation task, checked on arrival.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::formats::Format;
use super::rendered::Family;
use todod_domain::Claim;
use todod_domain::Error;
use todod_format::messages::ToolArguments;
use crate::phase::spec::{self as check, Boundaries};

/// Spec fields whose change would change what an adaptation writes.
pub const OUTPUT_FIELDS: &[&str] = &[
    "input",
    "input_format",
    "rendered_family",
    "output",
    "rejects",
    "output_format",
    "target",
    "chat_template",
    "template_name",
    "template_variables",
    "add_generation_prompt",
    "now",
    "system_prompt",
    "trailing_assistant",
    "shards",
    "role_map",
    "max_prompt_tokens",
    "batch",
    "sample",
    "tool_arguments",
    "reject_empty",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputFormat {
    /// `{id, messages}` for a chat API.
    Messages,
    /// OpenAI Batch API request lines.
    Batch,
    /// `{id, prompt}`: text rendered with the target's chat template, for a
    /// completions API.
    Rendered,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", tag = "policy")]
pub enum SystemPrompt {
    Keep,
    Drop,
    Replace {
        text: String,
    },
    /// Into the first user turn.
    Fold,
    /// Keep when the target template takes a system message, else fold.
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrailingAssistant {
    Drop,
    /// Kept as the start of the answer.
    Prefill,
    /// Kept whole, with no generation prompt after it: a training
    /// conversation rendered as it was held.
    Keep,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBatch {
    model: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    params: Map<String, Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSample {
    count: i64,
    #[serde(default)]
    seed: Option<u64>,
}

/// N lines of the input, chosen by a seed: the same lines on every run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub count: u64,
    pub seed: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    input: PathBuf,
    output: PathBuf,
    #[serde(default)]
    rejects: Option<PathBuf>,
    #[serde(default)]
    input_format: Option<String>,
    #[serde(default)]
    rendered_family: Option<Family>,
    #[serde(default)]
    output_format: Option<OutputFormat>,
    #[serde(default)]
    target: Option<PathBuf>,
    #[serde(default)]
    chat_template: Option<PathBuf>,
    #[serde(default)]
    template_name: Option<String>,
    #[serde(default)]
    template_variables: Map<String, Value>,
    #[serde(default)]
    add_generation_prompt: Option<bool>,
    #[serde(default)]
    now: Option<String>,
    #[serde(default)]
    system_prompt: Option<SystemPrompt>,
    #[serde(default)]
    trailing_assistant: Option<TrailingAssistant>,
    #[serde(default)]
    role_map: BTreeMap<String, String>,
    #[serde(default)]
    max_prompt_tokens: Option<i64>,
    #[serde(default)]
    batch: Option<RawBatch>,
    #[serde(default)]
    max_rejected_share: Option<f64>,
    #[serde(default)]
    sample: Option<RawSample>,
    #[serde(default)]
    tool_arguments: Option<ToolArguments>,
    #[serde(default)]
    reject_empty: Option<bool>,
    #[serde(default)]
    threads: Option<i64>,
    #[serde(default)]
    shards: Option<i64>,
    #[serde(default)]
    overwrite: Option<bool>,
    // Read from the stored JSON by `registry::auto_start`; accepted here.
    #[allow(dead_code)]
    #[serde(default)]
    auto_start: Option<bool>,
}

/// How Batch API lines are made.
#[derive(Debug, Clone)]
pub struct BatchShape {
    pub model: String,
    pub url: String,
    pub params: Map<String, Value>,
}

#[derive(Debug, Clone)]
pub struct AdaptationSpec {
    pub input: PathBuf,
    pub output: PathBuf,
    pub rejects: PathBuf,
    pub input_format: Option<Format>,
    pub rendered_family: Option<Family>,
    pub output_format: OutputFormat,
    /// The target model's directory (tokenizer_config.json, tokenizer files).
    pub target: Option<PathBuf>,
    pub chat_template: Option<PathBuf>,
    pub template_name: Option<String>,
    pub template_variables: Map<String, Value>,
    pub add_generation_prompt: bool,
    /// The clock `strftime_now` sees (Unix seconds); the pass's start if unset.
    pub now: Option<i64>,
    pub system_prompt: SystemPrompt,
    pub trailing_assistant: TrailingAssistant,
    pub role_map: BTreeMap<String, String>,
    pub max_prompt_tokens: Option<usize>,
    pub batch: Option<BatchShape>,
    pub max_rejected_share: f64,
    /// Only these many lines, chosen by a seed; `None`: every line.
    pub sample: Option<Sample>,
    /// How tool-call arguments reach the template.
    pub tool_arguments: ToolArguments,
    /// Refuse a line with a message that has no text and no tool calls.
    pub reject_empty: bool,
    pub threads: usize,
    /// Shards the input is split into (1: not split).
    pub shards: u32,
    pub overwrite: bool,
}

fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn parse_format(text: &str) -> Result<Option<Format>, Error> {
    Ok(Some(match text {
        "auto" => return Ok(None),
        "openai" | "messages" => Format::Openai,
        "batch" => Format::Batch,
        "sharegpt" => Format::Sharegpt,
        "alpaca" => Format::Alpaca,
        "prompt" => Format::Prompt,
        "rendered" => Format::Rendered,
        other => {
            return Err(Error::invalid(
                "spec.input_format",
                format!(
                "{other:?} is not one of auto, openai, batch, sharegpt, alpaca, prompt, rendered"
            ),
            ))
        }
    }))
}

/// "2026-01-15" or "2026-01-15T10:00:00Z" as Unix seconds.
fn parse_now(text: &str) -> Result<i64, Error> {
    let full = if text.len() == 10 {
        format!("{text}T00:00:00Z")
    } else {
        text.to_string()
    };
    humantime::parse_rfc3339(&full)
        .map_err(|_| {
            Error::invalid(
                "spec.now",
                format!("{text:?} is not a date (2026-01-15) or an RFC 3339 time"),
            )
        })?
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .map_err(|_| Error::invalid("spec.now", "must be after 1970"))
}

fn typed(raw: Raw) -> Result<AdaptationSpec, Error> {
    let output_format = raw.output_format.unwrap_or(OutputFormat::Messages);
    if output_format == OutputFormat::Rendered
        && raw.target.is_none()
        && raw.chat_template.is_none()
    {
        return Err(Error::invalid(
            "spec.output_format",
            "rendered output needs the target's chat template: give target (a model \
             directory) or chat_template (a .jinja file)",
        ));
    }
    if (output_format == OutputFormat::Batch) != raw.batch.is_some() {
        return Err(Error::invalid(
            "spec.batch",
            "give batch {model, url?, params?} exactly when output_format is batch",
        ));
    }
    if raw.max_prompt_tokens.is_some() && raw.target.is_none() {
        return Err(Error::invalid(
            "spec.max_prompt_tokens",
            "counting tokens needs the target's tokenizer: give target",
        ));
    }
    for (from, to) in &raw.role_map {
        if !todod_format::messages::ROLES.contains(&to.as_str()) {
            return Err(Error::invalid(
                format!("spec.role_map.{from}"),
                format!(
                    "{to:?} is not a role ({})",
                    todod_format::messages::ROLES.join(", ")
                ),
            ));
        }
    }
    let threads = match raw.threads {
        Some(n) => check::int_in("threads", n, 1..=256)? as usize,
        None => std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    Ok(AdaptationSpec {
        rejects: raw
            .rejects
            .clone()
            .unwrap_or_else(|| beside(&raw.output, ".rejects.jsonl")),
        input: raw.input,
        output: raw.output,
        input_format: raw
            .input_format
            .as_deref()
            .map(parse_format)
            .transpose()?
            .flatten(),
        rendered_family: raw.rendered_family,
        output_format,
        target: raw.target,
        chat_template: raw.chat_template,
        template_name: raw.template_name,
        template_variables: raw.template_variables,
        add_generation_prompt: raw.add_generation_prompt.unwrap_or(true),
        now: raw.now.as_deref().map(parse_now).transpose()?,
        system_prompt: raw.system_prompt.unwrap_or(SystemPrompt::Auto),
        trailing_assistant: raw.trailing_assistant.unwrap_or(TrailingAssistant::Drop),
        role_map: raw.role_map,
        max_prompt_tokens: raw
            .max_prompt_tokens
            .map(|n| check::int_in("max_prompt_tokens", n, 1..=100_000_000))
            .transpose()?
            .map(|n| n as usize),
        batch: raw.batch.map(|b| BatchShape {
            model: b.model,
            url: b.url.unwrap_or_else(|| "/v1/chat/completions".into()),
            params: b.params,
        }),
        max_rejected_share: check::share(
            "max_rejected_share",
            raw.max_rejected_share.unwrap_or(0.05),
        )?,
        sample: raw
            .sample
            .map(|s| -> Result<Sample, Error> {
                Ok(Sample {
                    count: check::int_in("sample.count", s.count, 1..=1_000_000_000)? as u64,
                    seed: s.seed.unwrap_or(1),
                })
            })
            .transpose()?,
        tool_arguments: raw.tool_arguments.unwrap_or_default(),
        reject_empty: raw.reject_empty.unwrap_or(false),
        threads,
        shards: check::shards(raw.shards)?,
        overwrite: raw.overwrite.unwrap_or(false),
    })
}

impl AdaptationSpec {
    pub fn parse(json: &str) -> Result<AdaptationSpec, Error> {
        typed(check::parse(json)?)
    }

    /// Where a sharded adaptation says which parts make its files.
    pub fn parts(&self) -> PathBuf {
        beside(&self.output, ".manifest.json")
    }

    /// Checks a spec a client sent; returns it with canonical paths, the
    /// stored JSON and its claims.
    pub fn check(
        json: &str,
        bounds: &Boundaries,
        own: &[String],
    ) -> Result<(AdaptationSpec, String, Vec<Claim>), Error> {
        let mut spec = typed(check::parse(json)?)?;
        spec.input = check::input_file("input", &spec.input, bounds)?;
        if let Some(target) = &spec.target {
            spec.target = Some(check::input_dir("target", target, bounds)?);
        }
        if let Some(template) = &spec.chat_template {
            spec.chat_template = Some(check::input_file("chat_template", template, bounds)?);
        }
        let overwrite = spec.overwrite;
        let claims = check::claim_outputs(
            &mut [("output", &mut spec.output), ("rejects", &mut spec.rejects)],
            overwrite,
            own,
            bounds,
        )?;
        check::distinct(&claims, &[("spec.input".into(), spec.input.clone())])?;
        let mut value: Value = serde_json::from_str(json).expect("parsed above");
        value["input"] = Value::String(spec.input.display().to_string());
        value["output"] = Value::String(spec.output.display().to_string());
        value["rejects"] = Value::String(spec.rejects.display().to_string());
        if let Some(t) = &spec.target {
            value["target"] = Value::String(t.display().to_string());
        }
        if let Some(t) = &spec.chat_template {
            value["chat_template"] = Value::String(t.display().to_string());
        }
        Ok((spec, value.to_string(), claims))
    }
}
