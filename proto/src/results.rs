//! What each phase kind's task says when it ends: the types of its
//! `result_json`, shared by the daemon that writes them and every client
//! that reads them (`todoctl status` and `show`, the MCP tools, the status
//! page, the daemon's own readers: the generation held to a feasibility's
//! projection, the feasibility report). A field renamed here is renamed for
//! all of them, or the build breaks.
//!
//! The JSON is the same as before these types existed: results stored by
//! earlier versions read back (fields added since have defaults).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Reads a task's `result_json` as `T`; `None` when it is empty or not one.
pub fn parse<T: for<'de> Deserialize<'de>>(result_json: &str) -> Option<T> {
    if result_json.trim().is_empty() {
        return None;
    }
    serde_json::from_str(result_json).ok()
}

/// A value with its 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl Estimate {
    pub fn contains(&self, x: f64) -> bool {
        x >= self.low && x <= self.high
    }
}

/// What a whole run of `records` is projected to take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    pub records: u64,
    pub concurrency: usize,
    pub hours: Estimate,
    pub records_per_second: Estimate,
    pub output_tokens: Estimate,
    pub input_tokens: Estimate,
    pub bytes: Estimate,
    pub cost: Option<Estimate>,
    /// How the interval was made (absent in projections of older versions).
    #[serde(default)]
    pub interval: Option<String>,
    pub assumptions: Vec<String>,
}

/// Percentiles of a set of values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

/// An inference server's own figures over a stretch of time (a feasibility
/// level): means, and the highest KV-cache use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSummary {
    pub samples: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_kv_cache_usage: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_tokens_per_second: Option<f64>,
}

/// The figures of one measured level of a feasibility sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelFigures {
    pub concurrency: usize,
    pub requests: u64,
    /// Sustained rates, by Little's law: `c` requests in flight that take
    /// `mean(latency)` each complete `c / mean(latency)` a second. Unlike a
    /// count of completions in the window, this is not quantized by the
    /// window's edges, so levels compare without that noise.
    pub requests_per_second: f64,
    pub output_tokens_per_second: f64,
    pub input_tokens_per_second: f64,
    /// What the window saw: completions of requests started in it, over its
    /// length (includes the client's own time between requests).
    pub observed_requests_per_second: f64,
    pub observed_output_tokens_per_second: f64,
    pub error_rate: f64,
    pub error_classes: BTreeMap<String, u64>,
    pub e2e_seconds: Option<Spread>,
    pub ttft_seconds: Option<Spread>,
    /// Inter-token latency (time per output token after the first).
    pub itl_seconds: Option<Spread>,
    pub output_tokens: Option<Spread>,
    pub length_finish_share: f64,
    pub reasoning_tokens_mean: Option<f64>,
    pub bytes_per_record: f64,
    /// The standard error of `output_tokens_per_second`, from how it varied
    /// between the level's windows (absent with a single window).
    #[serde(default)]
    pub output_tokens_per_second_se: Option<f64>,
    /// The share of the prompts' tokens the server said it took from its
    /// prefix cache (absent when it does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_share: Option<f64>,
    /// The server's own figures over the level, and what they say limited it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<String>,
}

/// The level a sweep chose, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    pub concurrency: usize,
    pub why: String,
}

/// The prompts a sweep asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepSample {
    pub size: usize,
    pub seed: u64,
    /// How many of the sample's prompts, from its first, the sweep asked
    /// (the ones a server with a prefix cache has seen).
    #[serde(default)]
    pub asked: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Warmup {
    pub requests_per_endpoint: usize,
    pub max_tokens: u64,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Which attempt of the task measured a level (a sweep resumed after a
/// kill keeps the levels measured before it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredBy {
    pub concurrency: usize,
    pub attempt: String,
}

/// What the sweep cost, against what it was allowed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepCost {
    pub seconds: f64,
    pub levels: usize,
    /// The levels measured between the best and a neighbour.
    #[serde(default)]
    pub between: Vec<usize>,
    pub projected_run_seconds: Option<f64>,
    pub share_of_run: Option<f64>,
    pub max_share: f64,
    pub min_seconds: f64,
    pub allowed_seconds: Option<f64>,
    pub cut_short: Option<String>,
}

/// A feasibility task's result: the sweep, the choice, the projection and
/// the verdict against the budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeasibilityResult {
    pub records: u64,
    pub usable_prompts: u64,
    pub prompts: String,
    pub model: String,
    pub endpoints: Vec<String>,
    pub sample: SweepSample,
    pub warmup: Warmup,
    pub levels: Vec<LevelFigures>,
    /// The chosen level measured again after the sweep, in a window of its
    /// own: the projection is made from it (a level chosen for measuring
    /// best is likely to have measured high).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<LevelFigures>,
    pub sweep_stopped: Option<String>,
    #[serde(default)]
    pub measured_by: Vec<MeasuredBy>,
    pub drift_after_seconds: f64,
    pub calibrate_after_seconds: f64,
    /// The budget the verdict was made against, as the spec gave it.
    #[serde(default)]
    pub budget: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choice: Option<Choice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<Projection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepCost>,
    /// `go` or `no-go`.
    pub verdict: String,
    pub reasons: Vec<String>,
}

impl FeasibilityResult {
    pub fn is_go(&self) -> bool {
        self.verdict == "go"
    }

    /// The projection held to the level it was made at.
    pub fn chosen(&self) -> Option<(usize, &Projection)> {
        Some((self.choice.as_ref()?.concurrency, self.projection.as_ref()?))
    }
}

/// How a generation held to a feasibility's projection went: its time
/// against the projected band.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldOutcome {
    /// The feasibility task (`t2`).
    pub feasibility: String,
    pub projected_hours: Estimate,
    pub actual_hours: f64,
    /// Time the run was held for re-measurements: not projected, so left
    /// out of the comparison.
    #[serde(default)]
    pub held_for_remeasures_hours: f64,
    pub inside_interval: bool,
    /// `compared / projected - 1`.
    pub error: f64,
}

impl HeldOutcome {
    /// The hours compared with the band: the run's time less its holds.
    pub fn compared_hours(&self) -> f64 {
        (self.actual_hours - self.held_for_remeasures_hours).max(0.0)
    }
}

/// A figure measured again, against the feasibility sweep's at the level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    pub now: f64,
    pub feasibility: Option<f64>,
    pub ratio: Option<f64>,
}

impl Compared {
    pub fn new(now: f64, feasibility: Option<f64>) -> Compared {
        Compared {
            now,
            feasibility,
            ratio: feasibility.filter(|b| *b > 0.0).map(|b| now / b),
        }
    }
}

/// What a re-measurement of a running generation found (the `remeasure`
/// schedule action; the value of its `schedule_fired` event): the server
/// alone at the run's level, and the projection of what the run has left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Remeasured {
    pub feasibility: String,
    pub concurrency: usize,
    pub held_seconds: f64,
    pub drain_seconds: f64,
    pub requests: u64,
    pub error_rate: f64,
    pub output_tokens_per_second: Compared,
    pub requests_per_second: Compared,
    pub p99_seconds: Option<f64>,
    /// Records the run had left.
    pub left: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<Projection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// A generation task's result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationResult {
    pub records: u64,
    pub failed: u64,
    pub rejected: u64,
    #[serde(default)]
    pub length_finishes: u64,
    #[serde(default)]
    pub tool_call_finishes: u64,
    #[serde(default)]
    pub tool_calls: u64,
    pub tokens: u64,
    #[serde(default)]
    pub prompt_tokens: u64,
    pub passes: u32,
    pub output: String,
    pub failures: String,
    pub rejects: String,
    /// The failed prompts by how their last attempt failed (`client_error`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failures_by_class: BTreeMap<String, u64>,
    /// Against the feasibility projection it was held to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<HeldOutcome>,
    /// The shards it ran in, if it was sharded (its counts are theirs added
    /// up, its files put together from their parts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// The manifest naming the parts, if it was sharded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// The requests its runs sent, retried and saw fail, by class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestCounts>,
    /// The ids the model generated, kept in the records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<TokenIdsKept>,
}

/// How many records keep the ids their server generated (`token_ids`) and
/// the hash of the prompt's (`prompt_token_ids`), and how each endpoint
/// was asked for them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenIdsKept {
    /// Records that kept the ids their model generated.
    pub records_with_ids: u64,
    /// Of those, the ones that kept their prompt's ids' count and hash.
    pub with_prompt_hash: u64,
    /// Records whose server returned fewer ids than it generated tokens:
    /// none are kept for them.
    pub incomplete: u64,
    /// Endpoint → `vllm: asked`, `other: not asked: ...`.
    pub endpoints: BTreeMap<String, String>,
}

/// Requests a run sent, counted where `/metrics` counts them
/// (`todod_requests_total` by outcome, `todod_request_retries_total`): each
/// attempt once, a retry being an attempt of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestCounts {
    /// Attempts sent, answered or not.
    pub sent: u64,
    /// Attempts that were sent again after a failed one.
    pub retried: u64,
    /// Attempts that failed, by class (`server_error`, `rate_limited`,
    /// `incomplete`, ...: the outcomes `/metrics` names).
    pub errors: BTreeMap<String, u64>,
}

impl RequestCounts {
    /// Attempts that failed, of every class.
    pub fn errored(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The share of attempts that failed; `None` before any was sent.
    pub fn error_share(&self) -> Option<f64> {
        (self.sent > 0).then(|| self.errored() as f64 / self.sent as f64)
    }

    /// What was counted after `earlier` (a snapshot of the same counters).
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        let mut errors = BTreeMap::new();
        for (class, n) in &self.errors {
            let before = earlier.errors.get(class).copied().unwrap_or(0);
            if *n > before {
                errors.insert(class.clone(), n - before);
            }
        }
        RequestCounts {
            sent: self.sent.saturating_sub(earlier.sent),
            retried: self.retried.saturating_sub(earlier.retried),
            errors,
        }
    }

    /// Both counts added up (a task's passes, its shards).
    pub fn add(&mut self, other: &RequestCounts) {
        self.sent += other.sent;
        self.retried += other.retried;
        for (class, n) in &other.errors {
            *self.errors.entry(class.clone()).or_default() += n;
        }
    }

    /// `120 requests, 12 failed (10.0 %: 6 server error, 3 rate limited, 3
    /// incomplete), 12 retried`, the same on the status page and in
    /// `todoctl`.
    pub fn describe(&self) -> String {
        let mut text = format!("{} requests", self.sent);
        if let Some(share) = self.error_share().filter(|_| self.errored() > 0) {
            let classes: Vec<String> = self
                .errors
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(class, n)| format!("{n} {}", class.replace('_', " ")))
                .collect();
            text.push_str(&format!(
                ", {} failed ({:.1} %: {})",
                self.errored(),
                share * 100.0,
                classes.join(", ")
            ));
        }
        if self.retried > 0 {
            text.push_str(&format!(", {} retried", self.retried));
        }
        text
    }
}

/// A running task's requests: over its whole run (every attempt of every
/// daemon, as its committed checkpoints counted them) and over the last
/// minute, for the rate now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestFigures {
    pub run: RequestCounts,
    pub last_minute: RequestCounts,
    /// The seconds `last_minute` covers: 60, or less while the run is
    /// younger than a minute.
    pub window_seconds: f64,
}

/// An adaptation's system prompts: kept, dropped, folded into the first
/// user turn or replaced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemCounts {
    pub kept: u64,
    pub dropped: u64,
    pub folded: u64,
    pub replaced: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrailingCounts {
    pub dropped: u64,
    pub prefilled: u64,
    pub kept: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCounts {
    pub records_with_tools: u64,
    pub tool_calls: u64,
}

/// Prompt lengths in the target's tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LengthQuantiles {
    pub p50: Option<u64>,
    pub p99: Option<u64>,
    pub max: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdaptationSample {
    pub count: u64,
    pub seed: u64,
    pub not_sampled: u64,
}

/// A prompt adaptation task's result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdaptationResult {
    pub records: u64,
    pub rejected: u64,
    /// Lines read, by input format.
    pub formats: BTreeMap<String, u64>,
    /// Messages written, by role.
    pub roles: BTreeMap<String, u64>,
    pub system_prompts: SystemCounts,
    #[serde(default)]
    pub trailing_assistant: TrailingCounts,
    #[serde(default)]
    pub tools: ToolCounts,
    /// `null` when the target has no tokenizer.
    pub prompt_tokens: Option<LengthQuantiles>,
    pub template_sha256: Option<String>,
    pub output: String,
    pub rejects: String,
    #[serde(default)]
    pub sample: Option<AdaptationSample>,
    /// The shards it ran in, if it was sharded (its counts are theirs added
    /// up, its files put together from their parts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// The file naming the parts, if it was sharded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<String>,
}

/// A tokenization task's result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenizationResult {
    pub records: u64,
    pub tokens: u64,
    pub trained_tokens: u64,
    pub masked_tokens: u64,
    /// Valid records left out by the spec's rules, by reason.
    pub dropped: BTreeMap<String, u64>,
    pub rejected: u64,
    pub straddling_tokens: u64,
    pub max_length: u64,
    /// `[bucket, records]`: bucket k holds lengths in [2^k, 2^(k+1)).
    pub length_histogram: Vec<(u32, u64)>,
    pub bin: String,
    pub idx: String,
    pub manifest: String,
    pub rejects: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parquet: Option<String>,
    /// The tokenizer's identity, from the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<Value>,
    /// The shards it ran in, if it was sharded (its counts are theirs added
    /// up, its files put together from their parts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// The file naming the parts, if it was sharded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<String>,
    /// The answers' training tokens against the ids their model generated,
    /// when records kept them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<TokenDrift>,
    /// With `answer_ids: "generated"`: the answers whose ids are the ids
    /// their model generated (the others were rendered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers_from_generated_ids: Option<u64>,
}

/// The training tokens of generated answers against the ids their model
/// generated (the records that kept them: a generation's `token_ids`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenDrift {
    /// Records compared: they kept their generated ids.
    pub checked: u64,
    /// Of those, the records whose trained ids for the answer do not begin
    /// with the ids the model generated.
    pub differing: u64,
    /// Records that kept their prompt's count and hash, and those whose
    /// prompt, rendered and tokenized here, has other ids than the server's.
    pub prompts_checked: u64,
    pub prompts_differing: u64,
    /// The first differences, a few.
    pub examples: Vec<DriftExample>,
}

impl TokenDrift {
    /// The share of the checked records that differ.
    pub fn share(&self) -> Option<f64> {
        (self.checked > 0).then(|| self.differing as f64 / self.checked as f64)
    }
}

/// Where one record's trained ids part from its generated ids.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DriftExample {
    pub id: String,
    /// The position, in the answer's ids, of the first that differs.
    pub index: u64,
    /// A few ids either side of it, from each.
    pub generated: Vec<u32>,
    pub trained: Vec<u32>,
    /// The rendered text from the first trained id that differs.
    pub trained_text: String,
}

/// A filter task's result: the records kept, and the others by reason.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FilterResult {
    /// Records kept (in the output file).
    pub records: u64,
    /// Records left out (in the rejects file, each with its reason).
    pub removed: u64,
    /// `exact_duplicate`, `near_duplicate`, `length_finish`, `empty`,
    /// `refusal`, `too_short`, `too_long`, `contaminated`.
    pub removed_by_reason: BTreeMap<String, u64>,
    /// Lines that were not a record at all.
    pub rejected: u64,
    /// Lines of the input.
    pub lines: u64,
    pub output: String,
    pub rejects: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_duplicate_threshold: Option<f64>,
}

/// The counts every phase task's progress report carries, beside what its
/// kind adds (a sweep's stage, a generation's server and drift): made by
/// each kind's `progress` and the record pipeline (the rate and the time
/// left), read by field by the API's `Progress`, `/metrics`, the status page
/// and `todoctl watch`. A field of another type than its own (a report of
/// an earlier version) reads as absent, never as a failed report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProgressCounts {
    /// Records written.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub done: Option<u64>,
    /// Records that failed for good (a generation's prompts).
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub failed: Option<u64>,
    /// Input lines that were not records (bad lines, duplicate ids).
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub rejected: Option<u64>,
    /// Records expected in the end.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Output tokens (a generation's, a tokenization's).
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// A generation's prompt tokens.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Lines a second of the run that reported this.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub rate_per_second: Option<f64>,
    /// Seconds left at that rate.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<i64>,
    /// A generation held to a feasibility: the seconds left at the
    /// projected rate, and that rate.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub projected_eta_seconds: Option<u64>,
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub projected_records_per_second: Option<Estimate>,
    /// What the run is doing, in words (a sweep's stage).
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A generation's requests: sent, retried and failed by class, over the
    /// run and the last minute.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestFigures>,
}

impl ProgressCounts {
    /// The keys a store query reads inside the JSON (a day of progress
    /// points is read as numbers, not parsed report by report).
    pub const DONE: &'static str = "done";
    pub const FAILED: &'static str = "failed";
    pub const TOKENS: &'static str = "tokens";

    /// Reads a progress report; `None` when it is empty or not an object.
    pub fn parse(progress_json: &str) -> Option<ProgressCounts> {
        serde_json::from_str(progress_json).ok()
    }

    /// The report as a JSON object, for a kind to add its own figures to.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Sets the fields this has in `report` (a kind's progress object),
    /// leaving its other figures as they are.
    pub fn merge_into(&self, report: &mut Value) {
        if let (Value::Object(report), Value::Object(mine)) = (report, self.to_json()) {
            report.extend(mine);
        }
    }

    /// Records answered so far, written or failed.
    pub fn answered(&self) -> u64 {
        self.done.unwrap_or(0) + self.failed.unwrap_or(0)
    }
}

/// The counts a phase task's result carries whichever its kind, for
/// readers that show every kind alike (`/metrics`). Each kind's own type
/// above is the whole result; a count a kind does not keep, or keeps as
/// something else (an adaptation's `prompt_tokens` are quantiles), is absent.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ResultCounts {
    #[serde(deserialize_with = "lenient")]
    pub records: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub failed: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub rejected: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub tokens: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub prompt_tokens: Option<u64>,
}

impl ResultCounts {
    /// Reads a result; `None` when it is empty or not an object.
    pub fn parse(result_json: &str) -> Option<ResultCounts> {
        serde_json::from_str(result_json).ok()
    }
}

/// A field read as `T` when it is one, else as absent.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_or_foreign_result_is_none() {
        assert!(parse::<GenerationResult>("").is_none());
        assert!(parse::<GenerationResult>("{\"verdict\": \"go\"}").is_none());
        let g: GenerationResult = parse(
            r#"{"records": 3, "failed": 0, "rejected": 1, "tokens": 30, "passes": 1,
                "output": "o", "failures": "f", "rejects": "r"}"#,
        )
        .unwrap();
        assert_eq!((g.records, g.prompt_tokens, g.projection), (3, 0, None));
    }

    #[test]
    fn counts_read_by_field_and_leniently() {
        let p = ProgressCounts::parse(
            r#"{"done": 5, "failed": 1, "total": 9, "tokens": 40, "rate_per_second": 2.5,
                "eta_seconds": 2, "message": "m", "kind_specific": {"x": 1}, "rejected": "?"}"#,
        )
        .unwrap();
        assert_eq!(
            (p.done, p.failed, p.total, p.rejected),
            (Some(5), Some(1), Some(9), None)
        );
        assert_eq!(
            (p.tokens, p.rate_per_second, p.eta_seconds),
            (Some(40), Some(2.5), Some(2))
        );
        assert_eq!((p.answered(), p.message.as_deref()), (6, Some("m")));
        assert!(ProgressCounts::parse("").is_none());
        // The keys a store query reads are the fields' names.
        let written = ProgressCounts {
            done: Some(1),
            failed: Some(2),
            tokens: Some(3),
            ..Default::default()
        }
        .to_json();
        assert_eq!(
            (
                &written[ProgressCounts::DONE],
                &written[ProgressCounts::FAILED],
                &written[ProgressCounts::TOKENS]
            ),
            (&Value::from(1), &Value::from(2), &Value::from(3))
        );
        let r = ResultCounts::parse(r#"{"records": 3, "prompt_tokens": {"p50": 1}}"#).unwrap();
        assert_eq!(
            (r.records, r.prompt_tokens, r.failed),
            (Some(3), None, None)
        );
    }
}
