//! The plan file's JSON Schema (`docs/pipeline.schema.json`), made from the
//! same table the parser reads: the fixed parts of the file, then each
//! step's section with the fields the file derives for it refused.
use serde_json::{json, Map, Value};

use crate::phase::kinds;

/// The schema, as `docs/pipeline.schema.json` holds it.
pub fn schema() -> Value {
    let steps: Vec<_> = kinds::steps().map(|(_, s)| s).collect();
    let names: Vec<&str> = steps.iter().map(|s| s.section).collect();
    let defaults: Vec<&str> = steps
        .iter()
        .filter(|s| s.by_default)
        .map(|s| s.section)
        .collect();
    let mut properties = fixed();
    properties.insert(
        "phases".into(),
        json!({
            "description": format!(
                "The phases to run, in this order whatever the file's: {}. The default is {}, \
                 and a step that is not run by default when its section is given. {}",
                names.join(", "),
                defaults.join(", "),
                steps
                    .iter()
                    .filter(|s| !s.needs.is_empty())
                    .map(|s| format!("{} needs {}.", s.section, s.needs.join(" and ")))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            "type": "array",
            "minItems": 1,
            "uniqueItems": true,
            "items": {"enum": names},
        }),
    );
    for step in &steps {
        let mut section = Map::new();
        section.insert("description".into(), json!(step.describe));
        section.insert("type".into(), json!("object"));
        let extra = (step.properties)();
        if !extra.is_null() {
            section.insert("properties".into(), extra);
        }
        if !step.derived_fields.is_empty() {
            let refused: Vec<Value> = step
                .derived_fields
                .iter()
                .map(|f| json!({"required": [f]}))
                .collect();
            section.insert("not".into(), json!({"anyOf": refused}));
        }
        properties.insert(step.section.into(), Value::Object(section));
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/todod/todod/docs/pipeline.schema.json",
        "title": "todod pipeline file",
        "description": "One data-generation pipeline: adapt a prompt set to a model's chat \
            template, check the server can do it within a budget, generate the completions, \
            tokenize them for training. Applied with `todoctl plan apply FILE` or the \
            ApplyPipeline gRPC call. Relative paths are taken from the file's directory.",
        "type": "object",
        "additionalProperties": false,
        "required": ["output_dir", "model", "prompts"],
        "properties": properties,
    })
}

/// The parts of the file that are not a step's section.
fn fixed() -> Map<String, Value> {
    let fixed = json!({
        "plan": {
            "description": "The plan the tasks go to (1-128 letters, digits and `._:-`); `todoctl plan apply -p` overrides it.",
            "type": "string",
            "pattern": "^[A-Za-z0-9._:-]{1,128}$"
        },
        "title": { "description": "The plan's title, when the apply creates it.", "type": "string" },
        "output_dir": {
            "description": "Every file the phases write goes here: prompts.jsonl, feasibility.html (the report) and feasibility.json (its result), completions.jsonl (+ .failures/.rejects), completions.filtered.jsonl (+ .rejects) when the filter runs, train.bin/.idx/.parquet. Made if missing; its parent must exist.",
            "type": "string"
        },
        "model": {
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "name": { "description": "The model's name on the server (the requests' `model`). Required with generation.", "type": "string", "minLength": 1 },
                "endpoints": {
                    "description": "The server's base URLs (OpenAI-compatible, e.g. http://127.0.0.1:8080), or \"server:NAME\" for a server of [servers] that the daemon runs. Required with generation.",
                    "type": "array",
                    "minItems": 1,
                    "items": { "type": "string" }
                },
                "api_key_env": { "description": "The daemon's environment variable holding the API key (TODOD_SECRET_* or one named with --secret-env).", "type": "string" },
                "dir": { "description": "The model's directory as on the Hub: tokenizer.json or tiktoken.model, and tokenizer_config.json with its chat template. Required with adaptation or tokenization.", "type": "string" }
            }
        },
        "prompts": {
            "type": "object",
            "additionalProperties": false,
            "required": ["path"],
            "properties": {
                "path": { "description": "The prompt set (JSONL).", "type": "string" },
                "format": {
                    "description": "The prompt set's format; detected per line when not given.",
                    "enum": ["openai", "batch", "sharegpt", "alpaca", "prompt", "rendered"]
                },
                "sample": {
                    "description": "N: only this many lines of the prompt set, chosen by `seed` (the same lines on every run); all of them when not given. Taken by the adaptation phase.",
                    "type": "integer",
                    "minimum": 1
                },
                "seed": { "description": "The sample's seed (default 1).", "type": "integer", "minimum": 0 }
            }
        },
        "sampling": {
            "description": "Request parameters sent with every request (temperature, top_p, seed, stop, ...). max_tokens is generation.max_tokens.",
            "type": "object",
            "not": { "anyOf": [
                { "required": ["max_tokens"] }, { "required": ["model"] }, { "required": ["messages"] },
                { "required": ["prompt"] }, { "required": ["stream"] }, { "required": ["n"] }
            ] }
        },
        "servers": {
            "description": "Inference servers the daemon starts, watches and restarts itself, each named by an endpoint (\"server:NAME\"). The daemon starts only programs its operator allowed (--allow-server-command).",
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": false,
                "required": ["command"],
                "properties": {
                    "command": { "description": "The program (a path, relative to the file's folder, or a name in the daemon's PATH) and its arguments, as a list; {port} stands for the port the daemon picks.", "type": "array", "minItems": 1, "items": { "type": "string" } },
                    "env": { "description": "Variables set for it ({port} filled in too).", "type": "object", "additionalProperties": { "type": "string" } },
                    "devices": { "description": "Accelerators it uses (default 1): its hours count as this many device-hours.", "type": "integer", "minimum": 0 },
                    "ready_timeout_seconds": { "description": "From its start until /v1/models and a one-token completion answer (default 1800).", "type": "integer", "minimum": 1 },
                    "max_restarts": { "description": "Restarts allowed within restart_window_seconds (default 5); one more fails the tasks that use it.", "type": "integer", "minimum": 0 },
                    "restart_window_seconds": { "description": "Default 3600.", "type": "integer", "minimum": 1 },
                    "restart_backoff_seconds": { "description": "The first wait before a restart, doubled each next time up to 5 min (default 5).", "type": "integer", "minimum": 0 },
                    "stop_grace_seconds": { "description": "From SIGTERM to its process group until SIGKILL (default 30).", "type": "integer", "minimum": 0 },
                    "probe_every_seconds": { "description": "How often a ready server is asked for one token (default 30).", "type": "integer", "minimum": 1 },
                    "probe_timeout_seconds": { "description": "A probe unanswered this long restarts it (default 120).", "type": "integer", "minimum": 1 },
                    "keep_idle_seconds": { "description": "How long it is kept once no task uses it (default 30).", "type": "integer", "minimum": 0 }
                }
            }
        },
        "budget": {
            "description": "The feasibility verdict's limits: a projection over any of them is a no-go, and the generation stays blocked.",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "max_hours": { "type": "number", "exclusiveMinimum": 0 },
                "max_bytes": { "type": "number", "exclusiveMinimum": 0 },
                "max_cost": { "type": "number", "exclusiveMinimum": 0 },
                "min_tokens_per_second": { "type": "number", "exclusiveMinimum": 0 }
            }
        }
    });
    let Value::Object(mut map) = fixed else {
        unreachable!("a literal object")
    };
    // In the order a reader meets them; `phases` is the table's.
    let mut ordered = Map::new();
    for key in [
        "plan",
        "title",
        "output_dir",
        "phases",
        "model",
        "prompts",
        "sampling",
        "budget",
        "servers",
    ] {
        ordered.insert(key.into(), map.remove(key).unwrap_or(Value::Null));
    }
    ordered
}
