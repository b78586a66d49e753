//! The spec of a generation task (`spec_json`), checked on arrival: every
//! field a run needs is validated here, with refusals that name it.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use todod_domain::shards::Shard;
use todod_domain::Claim;
use todod_domain::{Error, Kind};
use todod_inference::Api;
use crate::phase::servers::{self, ServerSpec};
use crate::phase::spec::{self as check, Boundaries};

/// Spec fields whose change would change what a generation writes.
pub const OUTPUT_FIELDS: &[&str] = &[
    "prompts",
    "output",
    "failures",
    "rejects",
    "model",
    "api",
    "params",
    "max_tokens",
    "id_field",
    "keep_prompt",
    "shards",
    "token_ids",
];

/// Whether a generation asks its servers for the token ids they generated
/// (see `todod_inference::token_ids`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenIds {
    /// Ask the servers that say they are vLLM, SGLang or llama.cpp's, each
    /// its own way; not the others (OpenAI refuses a field it does not know).
    Auto,
    /// Ask a server of another kind too, with vLLM's field (the known kinds
    /// are asked as under `Auto`).
    On,
    Off,
}

/// `warn_error_share`'s default: one request in twenty failing is far past
/// a healthy server's rate, and well short of a run's failures piling up.
pub const DEFAULT_WARN_ERROR_SHARE: f64 = 0.05;

/// `concurrency`: a number, or "auto" (the level a feasibility dependency chose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum RawConcurrency {
    Level(i64),
    Word(Auto),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Auto {
    Auto,
}

/// The spec as a client writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    prompts: PathBuf,
    output: PathBuf,
    #[serde(default)]
    failures: Option<PathBuf>,
    #[serde(default)]
    rejects: Option<PathBuf>,
    endpoints: Vec<String>,
    model: String,
    #[serde(default)]
    api: Option<String>,
    #[serde(default)]
    params: Map<String, Value>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    concurrency: Option<RawConcurrency>,
    #[serde(default)]
    max_attempts: Option<i64>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    api_key_env: Option<String>,
    #[serde(default)]
    send_key_over_http: Option<bool>,
    #[serde(default)]
    auto_start: Option<bool>,
    #[serde(default)]
    id_field: Option<String>,
    #[serde(default)]
    request_deadline_seconds: Option<i64>,
    #[serde(default)]
    stream_idle_seconds: Option<i64>,
    #[serde(default)]
    overwrite: Option<bool>,
    #[serde(default)]
    max_failed_share: Option<f64>,
    #[serde(default)]
    warn_error_share: Option<f64>,
    #[serde(default)]
    keep_prompt: Option<bool>,
    #[serde(default)]
    shards: Option<i64>,
    #[serde(default)]
    token_ids: Option<TokenIds>,
    #[serde(default)]
    servers: BTreeMap<String, Value>,
}

/// A checked generation spec.
#[derive(Debug, Clone)]
pub struct GenerationSpec {
    pub prompts: PathBuf,
    pub output: PathBuf,
    pub failures: PathBuf,
    pub rejects: PathBuf,
    pub endpoints: Vec<String>,
    pub model: String,
    pub api: Api,
    pub params: Map<String, Value>,
    pub max_tokens: Option<u64>,
    /// `None`: take the level a completed feasibility dependency chose.
    pub concurrency: Option<usize>,
    pub max_attempts: u32,
    pub stream: bool,
    pub api_key_env: Option<String>,
    /// Send the key over plain http to hosts other than this one.
    pub send_key_over_http: bool,
    pub auto_start: bool,
    pub id_field: String,
    pub request_deadline_seconds: u64,
    pub stream_idle_seconds: u64,
    pub overwrite: bool,
    /// The run fails when more than this share of its prompts failed.
    pub max_failed_share: f64,
    /// The share of requests failing over a minute (retried or not) past
    /// which the run says so in its history, once until it is back under.
    pub warn_error_share: f64,
    /// Each output record carries its prompt (`messages` or `prompt`).
    pub keep_prompt: bool,
    /// Shards the prompts are split into, run at once by as many runs (on
    /// one daemon or several): 1, the default, is not split.
    pub shards: u32,
    /// Asks the servers for the ids they generated, kept in each record.
    pub token_ids: TokenIds,
    /// The servers the daemon runs for this task, which `endpoints` name
    /// (`server:NAME`).
    pub servers: BTreeMap<String, ServerSpec>,
}

/// What checking a spec gives the registry.
pub struct Checked {
    pub spec: GenerationSpec,
    /// The spec with its paths made canonical, as stored.
    pub json: String,
    pub claims: Vec<Claim>,
    pub requires: Option<Kind>,
}

fn beside(output: &Path, suffix: &str) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

impl GenerationSpec {
    /// The requests this generation sends: its model, parameters (with
    /// `max_tokens`) and streaming; the sweep and re-measurements of a
    /// feasibility task send the same.
    pub fn request_template(&self) -> todod_inference::RequestTemplate {
        self.request_template_with(&Map::new())
    }

    /// The requests this generation sends, with `extra` fields (the ones
    /// that ask for token ids) where `params` does not set them already.
    pub fn request_template_with(
        &self,
        extra: &Map<String, Value>,
    ) -> todod_inference::RequestTemplate {
        let mut params = self.params.clone();
        if let Some(max) = self.max_tokens {
            params.insert("max_tokens".into(), serde_json::json!(max));
        }
        for (key, value) in extra {
            params.entry(key.clone()).or_insert_with(|| value.clone());
        }
        todod_inference::RequestTemplate::new(self.api, &self.model, &params, self.stream)
    }

    /// Parses a stored spec (already checked at creation) for a run.
    pub fn parse(json: &str) -> Result<GenerationSpec, Error> {
        let raw: Raw = check::parse(json)?;
        typed(raw)
    }

    /// Checks a spec a client sent. `own` are the paths the task already
    /// claims (an update): those may exist, they are its own files.
    pub fn check(json: &str, bounds: &Boundaries, own: &[String]) -> Result<Checked, Error> {
        let raw: Raw = check::parse(json)?;
        let mut spec = typed(raw)?;
        spec.prompts = check::input_file("prompts", &spec.prompts, bounds)?;
        let overwrite = spec.overwrite;
        let claims = check::claim_outputs(
            &mut [
                ("output", &mut spec.output),
                ("failures", &mut spec.failures),
                ("rejects", &mut spec.rejects),
            ],
            overwrite,
            own,
            bounds,
        )?;
        check::distinct(&claims, &[("spec.prompts".into(), spec.prompts.clone())])?;
        servers::check_allowed(&mut spec.endpoints, &mut spec.servers, bounds)?;
        if let Some(variable) = &spec.api_key_env {
            let over_http = spec.send_key_over_http;
            check::api_key("api_key_env", variable, &spec.endpoints, over_http, bounds)?;
        }
        let mut value: Value = serde_json::from_str(json).expect("parsed above");
        for (key, path) in [
            ("prompts", &spec.prompts),
            ("output", &spec.output),
            ("failures", &spec.failures),
            ("rejects", &spec.rejects),
        ] {
            value[key] = Value::String(path.display().to_string());
        }
        value["endpoints"] = spec.endpoints.iter().cloned().map(Value::String).collect();
        if !spec.servers.is_empty() {
            value["servers"] = serde_json::to_value(&spec.servers).unwrap_or_default();
        }
        Ok(Checked {
            requires: spec
                .concurrency
                .is_none()
                .then_some(Kind::named("feasibility")),
            json: value.to_string(),
            claims,
            spec,
        })
    }

    /// The spec one shard's run works to: its part files (its share of the
    /// concurrency is the run's to take, once "auto" is resolved).
    pub fn for_shard(&self, shard: Shard) -> GenerationSpec {
        GenerationSpec {
            output: shard.part_path(&self.output),
            failures: shard.part_path(&self.failures),
            rejects: shard.part_path(&self.rejects),
            ..self.clone()
        }
    }

    /// Where a sharded generation says which parts make its files.
    pub fn manifest(&self) -> PathBuf {
        beside(&self.output, ".manifest.json")
    }

    /// The output files in the order the phase indexes them.
    pub fn files(&self) -> Vec<PathBuf> {
        vec![
            self.output.clone(),
            self.failures.clone(),
            self.rejects.clone(),
        ]
    }
}

fn typed(raw: Raw) -> Result<GenerationSpec, Error> {
    if raw.endpoints.is_empty() {
        return Err(Error::invalid(
            "spec.endpoints",
            "at least one base URL is needed",
        ));
    }
    if raw.model.trim().is_empty() {
        return Err(Error::invalid("spec.model", "must not be empty"));
    }
    let api = match raw.api.as_deref() {
        None | Some("chat") => Api::Chat,
        Some("completions") => Api::Completions,
        Some(other) => {
            return Err(Error::invalid(
                "spec.api",
                format!("{other:?} is not chat or completions"),
            ))
        }
    };
    for reserved in ["model", "messages", "prompt", "stream"] {
        if raw.params.contains_key(reserved) {
            return Err(Error::invalid(
                format!("spec.params.{reserved}"),
                "is set by todod from the spec; remove it from params",
            ));
        }
    }
    let concurrency = match raw.concurrency {
        None => Some(8),
        Some(RawConcurrency::Level(n)) => Some(check::int_in("concurrency", n, 1..=check::MAX_CONCURRENCY)? as usize),
        Some(RawConcurrency::Word(Auto::Auto)) => None,
    };
    let failures = raw
        .failures
        .unwrap_or_else(|| beside(&raw.output, ".failures.jsonl"));
    let rejects = raw
        .rejects
        .unwrap_or_else(|| beside(&raw.output, ".rejects.jsonl"));
    let servers = servers::check_all(&raw.servers, &raw.endpoints)?;
    let id_field = raw.id_field.unwrap_or_else(|| "id".into());
    if id_field.is_empty() {
        return Err(Error::invalid("spec.id_field", "must not be empty"));
    }
    if raw.api_key_env.as_deref().is_some_and(str::is_empty) {
        return Err(Error::invalid(
            "spec.api_key_env",
            "must name a variable, or be left out",
        ));
    }
    Ok(GenerationSpec {
        prompts: raw.prompts,
        output: raw.output,
        failures,
        rejects,
        endpoints: raw.endpoints,
        model: raw.model,
        api,
        params: raw.params,
        max_tokens: raw
            .max_tokens
            .map(|n| check::int_in("max_tokens", n, 1..=10_000_000))
            .transpose()?
            .map(|n| n as u64),
        concurrency,
        max_attempts: check::int_in("max_attempts", raw.max_attempts.unwrap_or(8), 1..=100)? as u32,
        stream: raw.stream.unwrap_or(true),
        api_key_env: raw.api_key_env,
        send_key_over_http: raw.send_key_over_http.unwrap_or(false),
        auto_start: raw.auto_start.unwrap_or(true),
        id_field,
        request_deadline_seconds: check::int_in(
            "request_deadline_seconds",
            raw.request_deadline_seconds.unwrap_or(600),
            1..=86_400,
        )? as u64,
        stream_idle_seconds: check::int_in(
            "stream_idle_seconds",
            raw.stream_idle_seconds.unwrap_or(120),
            1..=86_400,
        )? as u64,
        overwrite: raw.overwrite.unwrap_or(false),
        max_failed_share: check::share("max_failed_share", raw.max_failed_share.unwrap_or(0.01))?,
        warn_error_share: check::share(
            "warn_error_share",
            raw.warn_error_share.unwrap_or(DEFAULT_WARN_ERROR_SHARE),
        )?,
        keep_prompt: raw.keep_prompt.unwrap_or(true),
        shards: check::shards(raw.shards)?,
        token_ids: raw.token_ids.unwrap_or(TokenIds::Auto),
        servers,
    })
}
