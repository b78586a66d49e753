//! The spec of a tokenization task, checked on arrival.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use todod_domain::Claim;
use todod_domain::Error;
use todod_format::messages::ToolArguments;
use crate::phase::spec::{self as check, Boundaries};

/// Spec fields whose change would change what a tokenization writes.
pub const OUTPUT_FIELDS: &[&str] = &[
    "input",
    "tokenizer",
    "output_prefix",
    "mode",
    "formats",
    "add_eos",
    "train_on",
    "chat_template",
    "template_name",
    "template_variables",
    "reasoning",
    "drop_length_finishes",
    "drop_empty",
    "max_length",
    "drop_over_length",
    "tool_arguments",
    "shards",
    "answer_ids",
];

/// What a record is tokenized as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The completion text alone, every token trained on.
    Completion,
    /// The whole conversation rendered with the chat template; only the
    /// trained assistant turns' tokens are trained on.
    Conversation,
}

/// Which assistant turns a conversation trains on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrainOn {
    Last,
    All,
}

/// Where the ids of a generated answer come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerIds {
    /// The answer rendered with the template and tokenized, as a trainer
    /// that re-renders conversations does.
    Rendered,
    /// The ids the model generated, where the record kept them
    /// (`token_ids`), with the template's end of turn after them; the
    /// prompt is still rendered. Records without them are rendered.
    Generated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Megatron,
    Parquet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reasoning {
    /// Passed to the template as the assistant message's `reasoning_content`.
    Keep,
    Drop,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    input: PathBuf,
    tokenizer: PathBuf,
    output_prefix: PathBuf,
    #[serde(default)]
    mode: Option<Mode>,
    #[serde(default)]
    formats: Option<Vec<Format>>,
    #[serde(default)]
    add_eos: Option<bool>,
    #[serde(default)]
    train_on: Option<TrainOn>,
    #[serde(default)]
    chat_template: Option<PathBuf>,
    #[serde(default)]
    template_name: Option<String>,
    #[serde(default)]
    template_variables: Map<String, Value>,
    #[serde(default)]
    reasoning: Option<Reasoning>,
    #[serde(default)]
    drop_length_finishes: Option<bool>,
    #[serde(default)]
    drop_empty: Option<bool>,
    #[serde(default)]
    max_length: Option<i64>,
    #[serde(default)]
    drop_over_length: Option<bool>,
    #[serde(default)]
    tool_arguments: Option<ToolArguments>,
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
    #[serde(default)]
    max_rejected_share: Option<f64>,
    #[serde(default)]
    max_drift_share: Option<f64>,
    #[serde(default)]
    answer_ids: Option<AnswerIds>,
}

/// A checked tokenization spec.
#[derive(Debug, Clone)]
pub struct TokenizationSpec {
    pub input: PathBuf,
    pub tokenizer: PathBuf,
    pub output_prefix: PathBuf,
    pub mode: Mode,
    pub formats: Vec<Format>,
    pub add_eos: bool,
    pub train_on: TrainOn,
    pub chat_template: Option<PathBuf>,
    pub template_name: Option<String>,
    pub template_variables: Map<String, Value>,
    pub reasoning: Reasoning,
    pub drop_length_finishes: bool,
    pub drop_empty: bool,
    pub max_length: Option<usize>,
    pub drop_over_length: bool,
    /// How tool-call arguments reach the template.
    pub tool_arguments: ToolArguments,
    pub threads: usize,
    /// Shards the input is split into (1: not split).
    pub shards: u32,
    pub overwrite: bool,
    pub max_rejected_share: f64,
    /// Where a generated answer's ids come from.
    pub answer_ids: AnswerIds,
    /// The run fails when more than this share of the records that kept
    /// their generated ids train on other ids; none: it only counts them.
    pub max_drift_share: Option<f64>,
}

/// The files a tokenization writes, from its prefix.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Tokens, in Megatron's `.bin` layout: the token store of every format.
    pub bin: PathBuf,
    /// Token count of each record (u32 LE): the `.idx` is built from it.
    pub sizes: PathBuf,
    /// One byte per token, 1 where the loss is taken.
    pub mask: PathBuf,
    /// Each record's id, as a JSON string per line.
    pub ids: PathBuf,
    pub rejects: PathBuf,
    pub idx: PathBuf,
    pub parquet: PathBuf,
    pub manifest: PathBuf,
    /// A sharded task's list of the parts its store was put together from.
    pub parts: PathBuf,
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

impl TokenizationSpec {
    pub fn paths(&self) -> Paths {
        let p = &self.output_prefix;
        Paths {
            bin: with_suffix(p, ".bin"),
            sizes: with_suffix(p, ".sizes"),
            mask: with_suffix(p, ".mask"),
            ids: with_suffix(p, ".ids.jsonl"),
            rejects: with_suffix(p, ".rejects.jsonl"),
            idx: with_suffix(p, ".idx"),
            parquet: with_suffix(p, ".parquet"),
            manifest: with_suffix(p, ".manifest.json"),
            parts: with_suffix(p, ".parts.json"),
        }
    }

    /// Parses a stored spec (checked at creation).
    pub fn parse(json: &str) -> Result<TokenizationSpec, Error> {
        typed(check::parse(json)?)
    }

    /// Checks a spec a client sent; returns it with canonical paths, the
    /// stored JSON and the claims. `own` are paths the task already claims.
    pub fn check(
        json: &str,
        bounds: &Boundaries,
        own: &[String],
    ) -> Result<(TokenizationSpec, String, Vec<Claim>), Error> {
        let mut spec = typed(check::parse(json)?)?;
        spec.input = check::input_file("input", &spec.input, bounds)?;
        spec.tokenizer = check::input_dir("tokenizer", &spec.tokenizer, bounds)?;
        if let Some(template) = &spec.chat_template {
            spec.chat_template = Some(check::input_file("chat_template", template, bounds)?);
        }
        // The prefix names files in an existing directory; each file is claimed.
        let prefix_claim = check::output_file("output_prefix", &spec.output_prefix, true, bounds)?;
        spec.output_prefix = PathBuf::from(prefix_claim.path);
        let paths = spec.paths();
        let mut claims = Vec::new();
        for path in [
            &paths.bin,
            &paths.sizes,
            &paths.mask,
            &paths.ids,
            &paths.rejects,
            &paths.idx,
            &paths.parquet,
            &paths.manifest,
        ] {
            let overwrite = spec.overwrite || own.contains(&path.display().to_string());
            claims.push(check::output_file(
                "output_prefix",
                path,
                overwrite,
                bounds,
            )?);
        }
        check::distinct(&claims, &[("spec.input".into(), spec.input.clone())])?;
        let mut value: Value = serde_json::from_str(json).expect("parsed above");
        value["input"] = Value::String(spec.input.display().to_string());
        value["tokenizer"] = Value::String(spec.tokenizer.display().to_string());
        value["output_prefix"] = Value::String(spec.output_prefix.display().to_string());
        if let Some(t) = &spec.chat_template {
            value["chat_template"] = Value::String(t.display().to_string());
        }
        Ok((spec, value.to_string(), claims))
    }
}

fn typed(raw: Raw) -> Result<TokenizationSpec, Error> {
    if raw.answer_ids == Some(AnswerIds::Generated) && raw.reasoning == Some(Reasoning::Drop) {
        return Err(Error::invalid(
            "spec.answer_ids",
            "\"generated\" trains on every id the model generated, its reasoning included; \
             it cannot go with reasoning \"drop\"",
        ));
    }
    let mode = raw.mode.unwrap_or(Mode::Conversation);
    let formats = raw
        .formats
        .unwrap_or_else(|| vec![Format::Megatron, Format::Parquet]);
    if formats.is_empty() {
        return Err(Error::invalid(
            "spec.formats",
            "name at least one of megatron, parquet",
        ));
    }
    if mode == Mode::Completion && (raw.chat_template.is_some() || raw.train_on.is_some()) {
        return Err(Error::invalid(
            "spec.mode",
            "chat_template and train_on only apply to mode conversation",
        ));
    }
    let threads = match raw.threads {
        Some(n) => check::int_in("threads", n, 1..=256)? as usize,
        None => std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    Ok(TokenizationSpec {
        input: raw.input,
        tokenizer: raw.tokenizer,
        output_prefix: raw.output_prefix,
        mode,
        formats,
        add_eos: raw.add_eos.unwrap_or(mode == Mode::Completion),
        train_on: raw.train_on.unwrap_or(TrainOn::Last),
        chat_template: raw.chat_template,
        template_name: raw.template_name,
        template_variables: raw.template_variables,
        reasoning: raw.reasoning.unwrap_or(Reasoning::Keep),
        drop_length_finishes: raw.drop_length_finishes.unwrap_or(true),
        drop_empty: raw.drop_empty.unwrap_or(true),
        max_length: raw
            .max_length
            .map(|n| check::int_in("max_length", n, 1..=100_000_000))
            .transpose()?
            .map(|n| n as usize),
        drop_over_length: raw.drop_over_length.unwrap_or(true),
        tool_arguments: raw.tool_arguments.unwrap_or_default(),
        threads,
        shards: check::shards(raw.shards)?,
        overwrite: raw.overwrite.unwrap_or(false),
        max_rejected_share: check::share(
            "max_rejected_share",
            raw.max_rejected_share.unwrap_or(0.01),
        )?,
        answer_ids: raw.answer_ids.unwrap_or(AnswerIds::Rendered),
        max_drift_share: raw
            .max_drift_share
            .map(|share| check::share("max_drift_share", share))
            .transpose()?,
    })
}
