//! The spec of a feasibility task, checked on arrival. The requests it
//! measures have the exact shape of the generation it vouches for: that
//! task's spec (named by `generation`, or the one generation that depends on
//! the feasibility task), or the same fields given inline.
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::projection::{Budget, Price};
use super::stats::Choose;
use todod_domain::Claim;
use todod_domain::{Error, TaskId};
use crate::phase::spec::{self as check, Boundaries};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWarmup {
    #[serde(default)]
    requests: Option<i64>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    timeout_seconds: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    #[serde(default)]
    min_requests: Option<i64>,
    #[serde(default)]
    min_seconds: Option<f64>,
    #[serde(default)]
    max_seconds: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    generation: Option<String>,
    // The request shape, inline.
    #[serde(default)]
    prompts: Option<PathBuf>,
    #[serde(default)]
    endpoints: Option<Vec<String>>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    api: Option<String>,
    #[serde(default)]
    params: Option<Map<String, Value>>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    api_key_env: Option<String>,
    #[serde(default)]
    send_key_over_http: Option<bool>,
    #[serde(default)]
    id_field: Option<String>,
    #[serde(default)]
    servers: Option<Map<String, Value>>,
    // The sweep.
    #[serde(default)]
    records: Option<i64>,
    #[serde(default)]
    concurrency: Option<Vec<i64>>,
    #[serde(default)]
    min_concurrency: Option<i64>,
    #[serde(default)]
    max_concurrency: Option<i64>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    sample_size: Option<i64>,
    #[serde(default)]
    warmup: Option<RawWarmup>,
    #[serde(default)]
    window: Option<RawWindow>,
    #[serde(default)]
    max_error_rate: Option<f64>,
    #[serde(default)]
    choose: Option<Choose>,
    #[serde(default)]
    max_p99_latency_seconds: Option<f64>,
    #[serde(default)]
    budget: Option<Budget>,
    #[serde(default)]
    price: Option<Price>,
    #[serde(default)]
    report: Option<PathBuf>,
    #[serde(default)]
    result_file: Option<PathBuf>,
    #[serde(default)]
    drift_after_seconds: Option<f64>,
    #[serde(default)]
    calibrate_after_seconds: Option<f64>,
    #[serde(default)]
    min_gain: Option<f64>,
    #[serde(default)]
    max_sweep_share: Option<f64>,
    #[serde(default)]
    min_sweep_seconds: Option<f64>,
    #[serde(default)]
    request_deadline_seconds: Option<i64>,
    // Read from the stored JSON by `registry::auto_start`; accepted here.
    #[allow(dead_code)]
    #[serde(default)]
    auto_start: Option<bool>,
}

/// Where the measured requests take their shape from.
#[derive(Debug, Clone)]
pub enum ShapeSource {
    /// This generation task's spec.
    Task(TaskId),
    /// The one generation task that depends on this one.
    Dependent,
    /// Given inline, as a generation spec would give it.
    Inline(Box<crate::phase::kinds::generation::GenerationSpec>),
}

#[derive(Debug, Clone)]
pub struct FeasibilitySpec {
    pub shape: ShapeSource,
    /// How many records to project (default: the prompt file's lines).
    pub records: Option<u64>,
    /// Levels given; `None` sweeps `min_concurrency`, twice that, ... up to
    /// `max_concurrency`.
    pub levels: Option<Vec<usize>>,
    /// Where a geometric sweep starts (1). A server known to gain up to
    /// some level need not be measured below it: at one request at a time
    /// a window of 32 long answers can take minutes.
    pub min_concurrency: usize,
    pub max_concurrency: usize,
    pub seed: Option<u64>,
    pub sample_size: usize,
    pub warmup_requests: usize,
    pub warmup_max_tokens: u64,
    pub warmup_timeout_seconds: u64,
    pub min_requests: usize,
    pub min_seconds: f64,
    pub max_seconds: f64,
    pub max_error_rate: f64,
    pub choose: Choose,
    pub max_p99_latency_seconds: Option<f64>,
    pub budget: Budget,
    pub price: Price,
    /// Where the report goes (HTML).
    pub report: Option<PathBuf>,
    /// Where the result goes (JSON, as the task's result).
    pub result_file: Option<PathBuf>,
    pub drift_after_seconds: f64,
    /// How long into the generation its sustained rate is first held
    /// against the projection (the calibration event).
    pub calibrate_after_seconds: f64,
    /// A doubling that gains less than this share of output tokens/s is
    /// flat.
    pub min_gain: f64,
    /// The most the sweep may cost, as a share of the run it projects, and
    /// the floor of that for tiny runs (seconds).
    pub max_sweep_share: f64,
    pub min_sweep_seconds: f64,
    pub request_deadline_seconds: u64,
}

impl FeasibilitySpec {
    pub fn parse(json: &str) -> Result<FeasibilitySpec, Error> {
        typed(check::parse(json)?, None)
    }

    /// Checks a spec a client sent: the stored JSON, the claims (the report)
    /// and the task it names, if any.
    pub fn check(
        json: &str,
        bounds: &Boundaries,
        own: &[String],
    ) -> Result<(FeasibilitySpec, String, Vec<Claim>, Option<TaskId>), Error> {
        let raw: Raw = check::parse(json)?;
        let mut spec = typed(raw, Some(bounds))?;
        let mut value: Value = serde_json::from_str(json).expect("parsed above");
        let mut claims = Vec::new();
        for (field, path) in [
            ("report", &mut spec.report),
            ("result_file", &mut spec.result_file),
        ] {
            if let Some(file) = path {
                let overwrite = own.contains(&file.display().to_string());
                let claim = check::output_file(field, file, overwrite, bounds)?;
                *file = PathBuf::from(&claim.path);
                value[field] = Value::String(claim.path.clone());
                claims.push(claim);
            }
        }
        if let (Some(report), Some(result)) = (&spec.report, &spec.result_file) {
            if report == result {
                return Err(Error::invalid(
                    "spec.result_file",
                    format!(
                        "is the report's path too ({}): name two files",
                        report.display()
                    ),
                ));
            }
        }
        if let ShapeSource::Inline(inline) = &spec.shape {
            value["prompts"] = Value::String(inline.prompts.display().to_string());
            value["endpoints"] = inline
                .endpoints
                .iter()
                .cloned()
                .map(Value::String)
                .collect();
            if !inline.servers.is_empty() {
                value["servers"] = serde_json::to_value(&inline.servers).unwrap_or_default();
            }
        }
        let named = match &spec.shape {
            ShapeSource::Task(id) => Some(*id),
            _ => None,
        };
        Ok((spec, value.to_string(), claims, named))
    }
}

/// An optional figure that must be a positive, finite number.
fn positive(name: &str, value: Option<f64>) -> Result<Option<f64>, Error> {
    match value {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(Error::invalid(
            check::field(name),
            format!("must be a positive number, not {v}"),
        )),
        other => Ok(other),
    }
}

/// The inline request fields as a generation spec, checked like one.
fn inline_shape(
    raw: &Raw,
    bounds: Option<&Boundaries>,
) -> Result<Option<crate::phase::kinds::generation::GenerationSpec>, Error> {
    let given = raw.prompts.is_some() || raw.endpoints.is_some() || raw.model.is_some();
    if !given {
        return Ok(None);
    }
    let mut object = Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            object.insert(key.into(), v);
        }
    };
    put(
        "prompts",
        raw.prompts
            .as_ref()
            .map(|p| Value::String(p.display().to_string())),
    );
    put(
        "endpoints",
        raw.endpoints
            .clone()
            .map(|e| e.into_iter().map(Value::String).collect()),
    );
    put("model", raw.model.clone().map(Value::String));
    put("api", raw.api.clone().map(Value::String));
    put("params", raw.params.clone().map(Value::Object));
    put("max_tokens", raw.max_tokens.map(Value::from));
    put("stream", raw.stream.map(Value::Bool));
    put("api_key_env", raw.api_key_env.clone().map(Value::String));
    put(
        "send_key_over_http",
        raw.send_key_over_http.map(Value::Bool),
    );
    put("id_field", raw.id_field.clone().map(Value::String));
    put("servers", raw.servers.clone().map(Value::Object));
    // A generation spec needs an output; the measurement writes none.
    object.insert("output".into(), Value::String("/dev/null/unused".into()));
    let json = Value::Object(object).to_string();
    let mut spec = crate::phase::kinds::generation::GenerationSpec::parse(&json)?;
    if let Some(bounds) = bounds {
        spec.prompts = check::input_file("prompts", &spec.prompts, bounds)?;
        crate::phase::servers::check_allowed(&mut spec.endpoints, &mut spec.servers, bounds)?;
        if let Some(variable) = &spec.api_key_env {
            check::api_key(
                "api_key_env",
                variable,
                &spec.endpoints,
                spec.send_key_over_http,
                bounds,
            )?;
        }
    }
    Ok(Some(spec))
}

fn typed(raw: Raw, bounds: Option<&Boundaries>) -> Result<FeasibilitySpec, Error> {
    let inline = inline_shape(&raw, bounds)?;
    let shape = match (&raw.generation, inline) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(
                "spec.generation",
                "name a generation task or give the request fields inline, not both",
            ))
        }
        (Some(id), None) => ShapeSource::Task(TaskId::parse("spec.generation", id)?),
        (None, Some(inline)) => ShapeSource::Inline(Box::new(inline)),
        (None, None) => ShapeSource::Dependent,
    };
    let levels = raw
        .concurrency
        .map(|levels| {
            if levels.is_empty() {
                return Err(Error::invalid(
                    "spec.concurrency",
                    "name at least one level",
                ));
            }
            let mut out: Vec<usize> = levels
                .iter()
                .map(|&c| check::int_in("concurrency", c, 1..=check::MAX_CONCURRENCY).map(|c| c as usize))
                .collect::<Result<_, _>>()?;
            out.sort_unstable();
            out.dedup();
            Ok(out)
        })
        .transpose()?;
    let warmup = raw.warmup.unwrap_or(RawWarmup {
        requests: None,
        max_tokens: None,
        timeout_seconds: None,
    });
    let window = raw.window.unwrap_or(RawWindow {
        min_requests: None,
        min_seconds: None,
        max_seconds: None,
    });
    let min_seconds = window.min_seconds.unwrap_or(10.0);
    let max_seconds = window.max_seconds.unwrap_or(120.0);
    if !(0.0..=3600.0).contains(&min_seconds) || max_seconds < min_seconds || max_seconds > 7200.0 {
        return Err(Error::invalid(
            "spec.window",
            "min_seconds must be 0-3600 and max_seconds at least min_seconds, at most 7200",
        ));
    }
    let seconds = |name: &str, value: Option<f64>, default: f64| {
        let v = value.unwrap_or(default);
        if (0.0..=86_400.0).contains(&v) {
            Ok(v)
        } else {
            Err(Error::invalid(
                check::field(name),
                format!("must be between 0 and 86400, not {v}"),
            ))
        }
    };
    let drift_after = seconds("drift_after_seconds", raw.drift_after_seconds, 180.0)?;
    let calibrate_after = seconds(
        "calibrate_after_seconds",
        raw.calibrate_after_seconds,
        120.0,
    )?;
    let min_sweep_seconds = seconds("min_sweep_seconds", raw.min_sweep_seconds, 300.0)?;
    let min_gain = check::share("min_gain", raw.min_gain.unwrap_or(0.05))?;
    let max_sweep_share = check::share("max_sweep_share", raw.max_sweep_share.unwrap_or(0.02))?;
    let max_concurrency = check::int_in(
        "max_concurrency",
        raw.max_concurrency.unwrap_or(256),
        1..=check::MAX_CONCURRENCY,
    )? as usize;
    let min_concurrency = check::int_in(
        "min_concurrency",
        raw.min_concurrency.unwrap_or(1),
        1..=check::MAX_CONCURRENCY,
    )? as usize;
    if min_concurrency > max_concurrency {
        return Err(Error::invalid(
            "spec.min_concurrency",
            format!("must be at most max_concurrency ({max_concurrency}), not {min_concurrency}"),
        ));
    }
    if raw.min_concurrency.is_some() && levels.is_some() {
        return Err(Error::invalid(
            "spec.min_concurrency",
            "starts the doubling sweep; with levels given in concurrency, name the lowest there",
        ));
    }
    Ok(FeasibilitySpec {
        shape,
        records: raw
            .records
            .map(|n| check::int_in("records", n, 1..=i64::MAX))
            .transpose()?
            .map(|n| n as u64),
        levels,
        min_concurrency,
        max_concurrency,
        seed: raw.seed,
        sample_size: check::int_in("sample_size", raw.sample_size.unwrap_or(1000), 1..=100_000)?
            as usize,
        warmup_requests: check::int_in("warmup.requests", warmup.requests.unwrap_or(2), 0..=100)?
            as usize,
        warmup_max_tokens: check::int_in(
            "warmup.max_tokens",
            warmup.max_tokens.unwrap_or(16),
            1..=100_000,
        )? as u64,
        warmup_timeout_seconds: check::int_in(
            "warmup.timeout_seconds",
            warmup.timeout_seconds.unwrap_or(60),
            1..=3600,
        )? as u64,
        min_requests: check::int_in(
            "window.min_requests",
            window.min_requests.unwrap_or(32),
            1..=100_000,
        )? as usize,
        min_seconds,
        max_seconds,
        max_error_rate: check::share("max_error_rate", raw.max_error_rate.unwrap_or(0.05))?,
        choose: raw.choose.unwrap_or(Choose::Knee),
        max_p99_latency_seconds: positive("max_p99_latency_seconds", raw.max_p99_latency_seconds)?,
        budget: {
            let b = raw.budget.unwrap_or_default();
            Budget {
                max_hours: positive("budget.max_hours", b.max_hours)?,
                max_bytes: positive("budget.max_bytes", b.max_bytes)?,
                max_cost: positive("budget.max_cost", b.max_cost)?,
                min_tokens_per_second: positive(
                    "budget.min_tokens_per_second",
                    b.min_tokens_per_second,
                )?,
            }
        },
        price: {
            let p = raw.price.unwrap_or_default();
            Price {
                per_gpu_hour: positive("price.per_gpu_hour", p.per_gpu_hour)?,
                gpus: positive("price.gpus", p.gpus)?,
                per_million_output_tokens: positive(
                    "price.per_million_output_tokens",
                    p.per_million_output_tokens,
                )?,
                per_million_input_tokens: positive(
                    "price.per_million_input_tokens",
                    p.per_million_input_tokens,
                )?,
            }
        },
        report: raw.report,
        result_file: raw.result_file,
        drift_after_seconds: drift_after,
        calibrate_after_seconds: calibrate_after,
        min_gain,
        max_sweep_share,
        min_sweep_seconds,
        request_deadline_seconds: check::int_in(
            "request_deadline_seconds",
            raw.request_deadline_seconds.unwrap_or(600),
            1..=86_400,
        )? as u64,
    })
}
