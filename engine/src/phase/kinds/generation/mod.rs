//! The generation phase: one completion per prompt of a JSONL file, from an
//! OpenAI-compatible server, written exactly once to an output file however
//! often the daemon dies meanwhile. It stands on the record pipeline: this
//! module only says how a prompt line is read, sent and written.
//!
//! Prompts that keep failing go to the failures file with their input, id and
//! line, so that a retry of the task (after its run ended) makes a new pass
//! that sends exactly those again: the failures file of the finished pass is
//! kept as `<failures>.pass-N.jsonl` and is that pass's input.
pub mod held;
pub mod kind;
mod legacy;
pub mod prompts;
mod requests;
pub(crate) mod serving;
mod token_ids;
pub mod spec;

use todod_proto::results::ProgressCounts;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use todod_inference::{Api, Backoff, Failed, InferenceClient, Limits, Outcome};
use crate::phase::cursor::Line;
use crate::phase::files::{Entry, Existing, FileState};
use crate::phase::gate::Gate;
use crate::phase::record_pipeline::{self, Files, PassEnd, PassPlan, Processor, RecordPhase};
use crate::phase::state::{InputState, PassCounts, PhaseState};
use crate::phase::{Ended, RunContext};
use todod_proto::results::GenerationResult;
use held::{Vouch, Watch};
pub use spec::GenerationSpec;

const OUTPUT: usize = 0;
const FAILURES: usize = 1;
const REJECTS: usize = 2;

/// Counters of a generation, over all its passes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    /// Records in the output file.
    pub records: u64,
    /// Prompts in the failures file.
    pub failed: u64,
    /// Failed prompts of earlier passes that this pass sends again.
    pub retrying: u64,
    pub rejected: u64,
    pub tokens: u64,
    pub prompt_tokens: u64,
    pub length_finishes: u64,
    /// Answers that are tool calls (`finish_reason: "tool_calls"`), and
    /// the calls in all answers.
    #[serde(default)]
    pub tool_call_finishes: u64,
    #[serde(default)]
    pub tool_calls: u64,
    /// The last failure's message, for a verdict that says why.
    #[serde(default)]
    pub last_error: String,
    /// Prompts in the failures file by how their last attempt failed (the
    /// classes `/metrics` counts requests by): they sum to `failed`.
    #[serde(default)]
    pub failures_by_class: std::collections::BTreeMap<String, u64>,
    /// The newest failures' messages, oldest first, at most
    /// [`RECENT_ERRORS`].
    #[serde(default)]
    pub recent_errors: Vec<String>,
    /// Requests sent, retried and failed by class, by every run and pass
    /// (as their checkpoints counted them: a kill loses the count of the
    /// requests after the last one, as it loses their answers).
    #[serde(default)]
    pub requests: todod_proto::results::RequestCounts,
    /// Records that keep the ids the model generated, and the prompt's.
    #[serde(default)]
    pub records_with_token_ids: u64,
    #[serde(default)]
    pub records_with_prompt_token_ids: u64,
    /// Records whose server returned fewer ids than it generated tokens.
    #[serde(default)]
    pub records_with_incomplete_token_ids: u64,
    /// How each endpoint was asked for token ids, by the latest run that
    /// asked it (`vllm: asked`, `not asked: ...`).
    #[serde(default)]
    pub token_ids_asked: std::collections::BTreeMap<String, String>,
}

/// How many failure messages the progress keeps for a person to read.
pub const RECENT_ERRORS: usize = 5;

/// How a pass was set up (`PhaseState::setup`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Setup {
    /// The failures file of the previous pass, kept under this name: the
    /// input of a retry pass.
    #[serde(default)]
    retry_input: Option<PathBuf>,
}

/// How often a run reads its servers' `/metrics`: often enough for a
/// dashboard, rare enough to cost the server nothing.
const SERVER_SCRAPE_EVERY: Duration = Duration::from_secs(5);

struct Generation {
    spec: GenerationSpec,
    /// How this run asked each endpoint for token ids.
    token_ids_asked: std::collections::BTreeMap<String, String>,
    retry: bool,
    drift: std::sync::Mutex<DriftCheck>,
    /// Held by a re-measurement; says when it was, and what it found.
    gate: Arc<Gate>,
    /// How long re-measurements held earlier runs of the task.
    held_before_ms: i64,
    /// The feasibility's word the run is held to, if any: a
    /// re-measurement's projection replaces its projection.
    vouch: Option<Vouch>,
    started: std::time::Instant,
    /// The endpoints' own `/metrics`, read while the run goes.
    server: todod_inference::server_watch::ServerWatch,
    /// What this run's client counted of its requests (the increments of
    /// the counters `/metrics` exports), and what earlier runs counted.
    requests: todod_telemetry::RequestMetrics,
    requests_before: todod_proto::results::RequestCounts,
    request_watch: std::sync::Mutex<requests::RequestWatch>,
}

/// The run held against a projection: the feasibility task's, or the last
/// re-measurement's.
struct DriftCheck {
    watch: Option<Watch>,
    /// Drift and calibration events found at the last progress reports, not
    /// yet recorded.
    found: std::collections::VecDeque<(&'static str, Value)>,
    /// The gate's holds the check has started afresh after.
    holds_seen: u64,
}

/// A prompt line's outcome, with the prompt (a failure keeps its input).
pub struct Answer {
    prompt: prompts::Prompt,
    result: Result<Outcome, Failed>,
}

impl RecordPhase for Generation {
    type Item = prompts::Prompt;
    type Output = Answer;
    type Stats = Stats;

    fn max_line_bytes(&self) -> usize {
        prompts::MAX_LINE_BYTES
    }

    fn record_id(&self, line: &[u8], _number: u64) -> Option<String> {
        let id_field = if self.retry {
            "id"
        } else {
            &self.spec.id_field
        };
        crate::phase::lines::json_field(line, id_field)
            .as_ref()
            .and_then(crate::phase::lines::id_text)
    }

    fn parse(&self, bytes: &[u8], number: u64) -> Result<prompts::Prompt, String> {
        let id_field = if self.retry {
            "id"
        } else {
            &self.spec.id_field
        };
        prompts::parse(bytes, number, self.spec.api, id_field, self.retry).map_err(|r| r.reason)
    }

    fn write(
        &self,
        _line: Line,
        answer: Answer,
        files: &mut Files<'_>,
        stats: &mut Stats,
    ) -> io::Result<()> {
        let prompt = answer.prompt;
        match answer.result {
            Ok(out) => {
                let c = &out.completion;
                if let Some(usage) = &c.usage {
                    stats.tokens += usage.completion_tokens;
                    stats.prompt_tokens += usage.prompt_tokens;
                }
                stats.length_finishes += u64::from(c.finish_reason == "length");
                stats.tool_call_finishes += u64::from(c.finish_reason == "tool_calls");
                stats.tool_calls += c.tool_calls.len() as u64;
                stats.records += 1;
                stats.records_with_token_ids += u64::from(c.token_ids.is_some());
                stats.records_with_prompt_token_ids += u64::from(c.prompt_token_ids.is_some());
                stats.records_with_incomplete_token_ids += u64::from(c.token_ids_incomplete);
                let kept = self.spec.keep_prompt.then_some(&*prompt.input);
                let (messages, prompt_text) = match self.spec.api {
                    Api::Chat => (kept, None),
                    Api::Completions => (None, kept),
                };
                let request = if self.spec.keep_prompt {
                    prompt.fields.as_slice()
                } else {
                    &[]
                };
                let record = Record {
                    id: &prompt.id,
                    line: prompt.line,
                    messages,
                    prompt: prompt_text,
                    request: RequestFields(request),
                    content: &c.content,
                    reasoning: c.reasoning.as_deref(),
                    tool_calls: (!c.tool_calls.is_empty()).then_some(c.tool_calls.as_slice()),
                    finish_reason: &c.finish_reason,
                    usage: c.usage.as_ref(),
                    model: &c.model,
                    endpoint: &out.endpoint,
                    latency_ms: out.latency.as_millis() as u64,
                    attempts: out.attempts,
                    token_ids: c.token_ids.as_deref(),
                    prompt_token_ids: c.prompt_token_ids.as_deref().map(PromptIds::of),
                };
                files.record(OUTPUT, &record)
            }
            Err(failed) => {
                stats.failed += 1;
                stats.last_error = failed.failure.to_string();
                *stats
                    .failures_by_class
                    .entry(failed.failure.class().as_str().to_string())
                    .or_default() += 1;
                if stats.recent_errors.len() == RECENT_ERRORS {
                    stats.recent_errors.remove(0);
                }
                stats
                    .recent_errors
                    .push(todod_domain::model::clip(&format!(
                        "{}: {}",
                        prompt.id, stats.last_error
                    )));
                let (messages, prompt_text) = match self.spec.api {
                    Api::Chat => (Some(&*prompt.input), None),
                    Api::Completions => (None, Some(&*prompt.input)),
                };
                // What a retry pass needs to send the same request again.
                let line = FailureLine {
                    id: &prompt.id,
                    line: prompt.line,
                    messages,
                    prompt: prompt_text,
                    request: RequestFields(&prompt.fields),
                    failure: json!({
                        "error": failed.failure.to_string(), "attempts": failed.attempts,
                        "endpoint": failed.endpoint,
                    }),
                };
                files.record(FAILURES, &line)
            }
        }
    }

    fn reject(
        &self,
        line: Line,
        reason: &str,
        files: &mut Files<'_>,
        stats: &mut Stats,
    ) -> io::Result<()> {
        stats.rejected += 1;
        record_pipeline::reject_line(files, REJECTS, line, None, reason)
    }

    fn before_commit(&self, stats: &mut Stats) {
        let mut counted = self.requests_before.clone();
        counted.add(&self.requests.counts());
        stats.requests = counted;
        for (endpoint, how) in &self.token_ids_asked {
            stats.token_ids_asked.insert(endpoint.clone(), how.clone());
        }
    }

    fn progress(&self, stats: &Stats, pass: &PassCounts, input: &InputState) -> Value {
        // What will be written in the end: every line of the pass that is not
        // rejected, plus what earlier passes wrote for good.
        let expected_here = input.lines - pass.rejected;
        let earlier = if self.retry {
            stats.records - pass.written[OUTPUT]
        } else {
            0
        };
        let total = earlier + expected_here;
        let mut progress = ProgressCounts {
            done: Some(stats.records),
            failed: Some(stats.failed),
            rejected: Some(stats.rejected),
            total: Some(total),
            tokens: Some(stats.tokens),
            prompt_tokens: Some(stats.prompt_tokens),
            ..ProgressCounts::default()
        }
        .to_json();
        if stats.failed > 0 {
            // Why prompts failed, for the status page; counted with the
            // failures file, in the same checkpoint.
            progress["failures_by_class"] = json!(stats.failures_by_class);
            progress["recent_errors"] = json!(stats.recent_errors);
        }
        if let Some(server) = self.server.latest() {
            // What the server says of itself: why the rate is what it is.
            progress["server"] = server;
        }
        let (figures, errors) = self
            .request_watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .look(std::time::Instant::now(), &stats.requests);
        ProgressCounts {
            requests: Some(figures),
            ..ProgressCounts::default()
        }
        .merge_into(&mut progress);
        let held_ms = self.held_before_ms.max(0) as u64 + self.gate.held_ms();
        if held_ms > 0 {
            // Wall time that no projection covers, for a reader's ETA.
            progress["held_for_remeasures_seconds"] = json!(held_ms as f64 / 1000.0);
        }
        let mut check = self.drift.lock().unwrap_or_else(|p| p.into_inner());
        check.found.extend(errors.map(|e| ("errors", e)));
        if self.gate.is_held() {
            // Held minutes are not a drift: no look until the hold ends.
            progress["remeasuring"] = json!(true);
            return progress;
        }
        let holds = self.gate.holds_ended();
        if holds != check.holds_seen {
            check.holds_seen = holds;
            // The rate before a hold and after it is not one window; after a
            // re-measurement the run is held against what it found.
            let fresh = self.gate.take_rebase().and_then(|projection| {
                Some(Vouch {
                    concurrency: self.gate.concurrency(),
                    projection,
                    ..self.vouch.clone()?
                })
            });
            let calibration = check.watch.as_ref().and_then(|w| w.calibration().cloned());
            check.watch = fresh
                .or_else(|| check.watch.as_ref().map(|w| w.vouch().clone()))
                .map(|v| Watch::new(v).calibrated(calibration));
        }
        if let Some(watch) = &mut check.watch {
            let answered = stats.records + stats.failed;
            let left = total.saturating_sub(answered);
            let now = self.started.elapsed().as_secs_f64();
            let look = watch.look(now, answered, stats.tokens, left);
            if let (Value::Object(map), Value::Object(extra)) = (&mut progress, look.progress) {
                map.extend(extra);
            }
            check
                .found
                .extend(look.calibration.map(|c| ("calibration", c)));
            check.found.extend(look.drift.map(|d| ("drift", d)));
        }
        progress
    }

    fn notice(&self, _progress: &Value) -> Option<(&'static str, Value)> {
        self.drift
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .found
            .pop_front()
    }
}

/// One line of the output file.
#[derive(Serialize)]
struct Record<'a> {
    id: &'a str,
    line: u64,
    /// The prompt, with `keep_prompt`: the record is then training data on
    /// its own (a tokenization reads it as it is).
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<&'a serde_json::value::RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<&'a serde_json::value::RawValue>,
    /// The prompt's own `tools`, `tool_choice`, ... (with `keep_prompt`).
    #[serde(flatten)]
    request: RequestFields<'a>,
    content: &'a str,
    reasoning: Option<&'a str>,
    /// The answer's tool calls, when it made any.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<&'a [todod_inference::ToolCall]>,
    finish_reason: &'a str,
    usage: Option<&'a todod_inference::Usage>,
    model: &'a str,
    endpoint: &'a str,
    latency_ms: u64,
    attempts: u32,
    /// The ids the model generated, as its server returned them.
    #[serde(skip_serializing_if = "Option::is_none")]
    token_ids: Option<&'a [u32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_ids: Option<PromptIds>,
}

/// The prompt's ids as the server tokenized them, kept as their count and
/// hash: an agentic prompt repeats its system prompt and tools (thousands
/// of tokens) in every record, and the record holds the prompt's text
/// already; the hash is what a check of one's own rendering needs.
#[derive(Serialize)]
struct PromptIds {
    count: usize,
    /// sha256 of the ids as little-endian u32s (numpy:
    /// `np.asarray(ids, "<u4").tobytes()`).
    sha256: String,
}

impl PromptIds {
    fn of(ids: &[u32]) -> PromptIds {
        PromptIds {
            count: ids.len(),
            sha256: todod_format::token_ids::sha256_of(ids),
        }
    }
}

/// One line of the failures file: the prompt as it came, and its failure.
#[derive(Serialize)]
struct FailureLine<'a> {
    id: &'a str,
    line: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<&'a serde_json::value::RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<&'a serde_json::value::RawValue>,
    #[serde(flatten)]
    request: RequestFields<'a>,
    failure: Value,
}

/// A prompt's request fields, written as fields of the record.
struct RequestFields<'a>(&'a [(&'static str, Box<serde_json::value::RawValue>)]);

impl Serialize for RequestFields<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (key, raw) in self.0 {
            map.serialize_entry(key, raw)?;
        }
        map.end()
    }
}

/// What the run is held against: the vouch, and when the task started
/// (unix ms), for the projected against actual time.
struct Held {
    vouch: Vouch,
    started_at_ms: i64,
    /// How long re-measurements held the run since it started (read from
    /// their events before a verdict): time the projection did not cover.
    remeasured_ms: i64,
}

/// Reads how long re-measurements held the run, for the verdict.
async fn count_holds(run: &RunContext, held: &mut Option<Held>) {
    if let Some(h) = held {
        match run.store.remeasure_held_ms(run.task, h.started_at_ms).await {
            Ok(ms) => h.remeasured_ms = ms,
            Err(e) => {
                tracing::warn!(task = %run.task, error = %e, "cannot read the re-measurements' holds")
            }
        }
    }
}

/// The result a completed (or failed) generation reports.
fn result(
    spec: &GenerationSpec,
    stats: &Stats,
    state: &PhaseState,
    held: Option<&Held>,
) -> GenerationResult {
    GenerationResult {
        records: stats.records,
        failed: stats.failed,
        rejected: stats.rejected,
        length_finishes: stats.length_finishes,
        tool_call_finishes: stats.tool_call_finishes,
        tool_calls: stats.tool_calls,
        tokens: stats.tokens,
        prompt_tokens: stats.prompt_tokens,
        passes: state.pass + 1,
        output: spec.output.display().to_string(),
        failures: spec.failures.display().to_string(),
        rejects: spec.rejects.display().to_string(),
        failures_by_class: if stats.failed > 0 {
            stats.failures_by_class.clone()
        } else {
            Default::default()
        },
        projection: held.map(|h| {
            let hours = (todod_store::now_ms() - h.started_at_ms).max(0) as f64 / 3.6e6;
            let remeasured = h.remeasured_ms.max(0) as f64 / 3.6e6;
            self::held::outcome(&h.vouch, hours, remeasured)
        }),
        shards: None,
        manifest: None,
        requests: (stats.requests.sent > 0).then(|| stats.requests.clone()),
        token_ids: (!stats.token_ids_asked.is_empty() || stats.records_with_token_ids > 0).then(
            || todod_proto::results::TokenIdsKept {
                records_with_ids: stats.records_with_token_ids,
                with_prompt_hash: stats.records_with_prompt_token_ids,
                incomplete: stats.records_with_incomplete_token_ids,
                endpoints: stats.token_ids_asked.clone(),
            },
        ),
    }
}

/// The verdict on a finished pass: completed, or failed when too many
/// prompts failed (or none was usable).
fn verdict(spec: &GenerationSpec, mut state: PhaseState, held: Option<&Held>) -> Ended {
    let stats: Stats = match state.stats() {
        Ok(stats) => stats,
        Err(error) => return Ended::broke_off(error),
    };
    state.closed = true;
    let sent = stats.records + stats.failed;
    let share = if sent == 0 {
        0.0
    } else {
        stats.failed as f64 / sent as f64
    };
    let error = if sent == 0 && stats.rejected > 0 {
        Some(format!(
            "no usable prompt: all {} lines were rejected (see {})",
            stats.rejected,
            spec.rejects.display()
        ))
    } else if share > spec.max_failed_share {
        Some(format!(
            "{} of {sent} prompts failed ({:.1}%, over the limit of {}%); last error: {}. \
             {} records were written. The failed prompts are in {}; retry the task to send \
             only those again",
            stats.failed,
            share * 100.0,
            spec.max_failed_share * 100.0,
            stats.last_error,
            stats.records,
            spec.failures.display()
        ))
    } else {
        None
    };
    match error {
        Some(error) => Ended::Failed {
            error,
            state: Some(state),
        },
        None => Ended::Completed {
            result: serde_json::to_string(&result(spec, &stats, &state, held)).unwrap_or_default(),
            state: Some(state),
        },
    }
}

fn archive_name(failures: &std::path::Path, pass: u32) -> PathBuf {
    let mut name = failures.as_os_str().to_owned();
    name.push(format!(".pass-{pass}.jsonl"));
    PathBuf::from(name)
}

/// Starts a pass that sends the failed prompts of the finished one again:
/// commits the plan first, then keeps the failures file under its pass name
/// (the new pass's input); a resume finds either step done or not, by the
/// file's identity.
async fn begin_retry(
    run: &RunContext,
    spec: &GenerationSpec,
    mut state: PhaseState,
) -> Result<Option<PhaseState>, String> {
    let mut stats: Stats = state.stats()?;
    let archive = archive_name(&spec.failures, state.pass);
    state.pass += 1;
    state.input = None;
    state.complete = false;
    state.closed = false;
    state.counts = PassCounts::default();
    state.setup = json!(Setup {
        retry_input: Some(archive),
    });
    stats.retrying = stats.failed;
    stats.failed = 0;
    // The new pass's failures file starts empty, and so do its classes.
    stats.failures_by_class.clear();
    stats.recent_errors.clear();
    state.set_stats(&stats);
    match run
        .store
        .commit_phase_state(run.task, &run.attempt, &state.to_json(), None)
        .await
    {
        Ok(()) => Ok(Some(state)),
        Err(todod_store::Error::Fenced { .. }) => Ok(None),
        Err(e) => Err(format!("cannot commit the checkpoint: {e}")),
    }
}

/// Moves the failures file of the last pass to its pass name, if that is not
/// done yet, and plans a fresh failures file.
fn keep_failures(
    run: &RunContext,
    state: &mut PhaseState,
    archive: &std::path::Path,
) -> Result<(), String> {
    let Some(old) = state.files.get(FAILURES).cloned() else {
        return Ok(());
    };
    let Some(identity) = old.identity else {
        return Ok(()); // already done: a fresh failures file is planned
    };
    let fs = &*run.fs;
    let io = |e: io::Error| crate::phase::spec::plain_io(&e);
    match (
        fs.stat(&old.path).map_err(io)?,
        fs.stat(archive).map_err(io)?,
    ) {
        (Entry::Regular { identity: at, .. }, Entry::Missing) if at == identity => {
            fs.rename_new(&old.path, archive).map_err(io)?;
        }
        (_, Entry::Regular { identity: at, .. }) if at == identity => {}
        _ => {
            return Err(format!(
                "{} is not the failures file todod wrote, and {} is not either; the failed \
                 prompts cannot be sent again safely",
                old.path.display(),
                archive.display()
            ))
        }
    }
    state.files[FAILURES] = FileState::planned(old.path);
    Ok(())
}

/// The watch a run starts with: held to the vouch's projection if the run is
/// at its level, or to the newest re-measurement of this run at the run's
/// level (which survives a restart in its firing's event); calibrated
/// already if an earlier daemon calibrated it.
async fn resumed_watch(run: &RunContext, held: &Held, concurrency: usize) -> Option<Watch> {
    let since = held.started_at_ms;
    let warn = |what: &str, e: todod_store::Error| {
        tracing::warn!(task = %run.task, error = %e, "cannot read the {what}");
    };
    let remeasured = match run.store.last_remeasure(run.task, since).await {
        Ok(found) => found.and_then(|f| held.vouch.rebased(&f, concurrency)),
        Err(e) => {
            warn("last re-measurement", e);
            None
        }
    };
    let vouch = remeasured
        .or_else(|| (held.vouch.concurrency == concurrency).then(|| held.vouch.clone()))?;
    let calibration = match run.store.last_calibration(run.task, since).await {
        Ok(found) => found.and_then(|f| serde_json::from_str(&f).ok()),
        Err(e) => {
            warn("calibration", e);
            None
        }
    };
    Some(Watch::new(vouch).calibrated(calibration))
}

impl crate::phase::shards::Counters for Stats {
    fn add(&mut self, other: &Stats) {
        self.records += other.records;
        self.failed += other.failed;
        self.retrying += other.retrying;
        self.rejected += other.rejected;
        self.tokens += other.tokens;
        self.prompt_tokens += other.prompt_tokens;
        self.length_finishes += other.length_finishes;
        self.tool_call_finishes += other.tool_call_finishes;
        self.tool_calls += other.tool_calls;
        if !other.last_error.is_empty() {
            self.last_error = other.last_error.clone();
        }
        for (class, n) in &other.failures_by_class {
            *self.failures_by_class.entry(class.clone()).or_default() += n;
        }
        self.recent_errors.extend(other.recent_errors.iter().cloned());
        self.requests.add(&other.requests);
        self.records_with_token_ids += other.records_with_token_ids;
        self.records_with_prompt_token_ids += other.records_with_prompt_token_ids;
        self.records_with_incomplete_token_ids += other.records_with_incomplete_token_ids;
        for (endpoint, how) in &other.token_ids_asked {
            self.token_ids_asked.insert(endpoint.clone(), how.clone());
        }
        let extra = self.recent_errors.len().saturating_sub(RECENT_ERRORS);
        self.recent_errors.drain(..extra);
    }
}

/// The end of a sharded generation, once every shard is done: the output,
/// failures and rejects files put together from the parts, the manifest,
/// and the result: the shards' counts added up.
async fn assemble(run: &RunContext, spec: &GenerationSpec) -> Result<Ended, String> {
    use crate::phase::shards;
    let parts = shards::shard_states(run, spec.shards).await?;
    shards::put_together(run, &parts, spec.files(), spec.manifest(), spec.overwrite).await?;
    let total: Stats = shards::summed(&parts)?;
    let state = PhaseState {
        pass: parts.iter().map(|(_, s)| s.pass).max().unwrap_or(0),
        ..PhaseState::default()
    };
    let mut result = result(spec, &total, &state, None);
    result.shards = Some(spec.shards);
    result.manifest = Some(spec.manifest().display().to_string());
    Ok(Ended::Completed {
        result: serde_json::to_string(&result).unwrap_or_default(),
        state: None,
    })
}

/// Runs (or resumes) one attempt; `Err` breaks it off (see `kind.rs`).
async fn run_inner(run: &RunContext, spec: GenerationSpec) -> Result<Ended, String> {
    // A sharded generation's runs each run a shard, with its own part
    // files; the run that holds the whole task puts them together.
    let spec = match (spec.shards > 1, run.shard) {
        (false, _) => spec,
        (true, Some(shard)) => spec.for_shard(shard),
        (true, None) => return assemble(run, &spec).await,
    };
    let vouched = held::of(&run.store, run.task).await?;
    let concurrency = match (spec.concurrency, &vouched) {
        (Some(c), _) => c,
        (None, Some(v)) => v.concurrency,
        (None, None) => {
            return Err(
                "concurrency \"auto\" needs a completed feasibility dependency; none has \
                 chosen a level"
                    .into(),
            )
        }
    };
    // The shards together keep the task's concurrency in flight, not one
    // each: a shard takes its share.
    let concurrency = run.shard.map_or(concurrency, |shard| {
        todod_domain::shards::split_concurrency(concurrency, shard.of)
    });
    // A shard's run is not held to the feasibility's projection (made for
    // the whole task at its level), nor re-measured: the task has no one run.
    let vouched = vouched.filter(|_| run.shard.is_none());
    let started_at_ms = run
        .store
        .get_task(run.task)
        .await
        .map_err(|e| format!("cannot read the task: {e}"))?
        .started_at
        .unwrap_or_else(todod_store::now_ms);
    let mut held = vouched.map(|vouch| Held {
        vouch,
        started_at_ms,
        remeasured_ms: 0,
    });
    let shard = run.shard.map(|s| s.index);
    let mut state = match PhaseState::load_of(&run.store, run.task, shard).await? {
        Some(state) => state,
        None if shard.is_some() => PhaseState::default(),
        None => match legacy::convert(run, &spec).await? {
            legacy::Legacy::None => PhaseState::default(),
            legacy::Legacy::Converted(state) => *state,
            legacy::Legacy::Fenced => return Ok(Ended::Stopped),
        },
    };
    if state.closed {
        let stats: Stats = state.stats()?;
        if stats.failed == 0 {
            // Nothing left to send: the verdict stands (its limits may have
            // changed since, so it is given again).
            count_holds(run, &mut held).await;
            return Ok(verdict(&spec, state, held.as_ref()));
        }
        match begin_retry(run, &spec, state).await? {
            Some(next) => state = next,
            None => return Ok(Ended::Stopped),
        }
    }
    if state.complete {
        count_holds(run, &mut held).await;
        return Ok(verdict(&spec, state, held.as_ref()));
    }
    let setup: Setup = serde_json::from_value(state.setup.clone()).unwrap_or_default();
    let requests_before = state.stats::<Stats>()?.requests;
    let metrics = run.telemetry.requests(run.task, "generation");
    let input = match &setup.retry_input {
        Some(archive) => {
            if state.input.is_none() {
                keep_failures(run, &mut state, archive)?;
            }
            archive.clone()
        }
        None => spec.prompts.clone(),
    };
    // The projection holds for the level it was made at; after a
    // re-measurement of this run, it is what that one found.
    count_holds(run, &mut held).await;
    let watch = match &held {
        Some(h) => resumed_watch(run, h, concurrency).await,
        None => None,
    };
    // A re-measurement holds a whole task's run through its registered
    // gate; a shard's gate is its own.
    let registration = run
        .shard
        .is_none()
        .then(|| run.gates.open(run.task, concurrency));
    let gate = match &registration {
        Some(registration) => registration.gate(),
        None => Gate::alone(concurrency),
    };
    // Servers the daemon runs for the task are ready before the first
    // request; the endpoints are their URLs from here on.
    let Some((spec, attached)) = serving::attach(run, &spec).await? else {
        return Ok(Ended::Stopped);
    };
    let watched = serving::Watched::new(run, &attached);
    let client = client(&spec)?.with_metrics(metrics.clone());
    let (ask, token_ids_asked) = token_ids::asking(&client, &spec).await;
    let phase = Arc::new(Generation {
        token_ids_asked,
        retry: setup.retry_input.is_some(),
        spec: spec.clone(),
        drift: std::sync::Mutex::new(DriftCheck {
            watch,
            found: Default::default(),
            holds_seen: gate.holds_ended(),
        }),
        gate: gate.clone(),
        held_before_ms: held.as_ref().map_or(0, |h| h.remeasured_ms),
        vouch: held.as_ref().map(|h| h.vouch.clone()),
        started: std::time::Instant::now(),
        server: todod_inference::server_watch::ServerWatch::start(
            &spec.endpoints,
            SERVER_SCRAPE_EVERY,
            run.telemetry.servers().clone(),
        ),
        requests: metrics,
        request_watch: std::sync::Mutex::new(requests::RequestWatch::new(
            std::time::Instant::now(),
            requests_before.clone(),
            spec.warn_error_share,
        )),
        requests_before,
    });
    let plan = PassPlan {
        input,
        files: spec.files(),
        existing: Existing::when(spec.overwrite && state.pass == 0),
        // A retry pass reads the shard's own failures part: every line is its.
        shard: run.shard.filter(|_| setup.retry_input.is_none()),
    };
    let Some((state, outputs)) = record_pipeline::open(run, &phase, state, &plan).await? else {
        return Ok(Ended::Stopped);
    };
    let client = Arc::new(client);
    let template = Arc::new(spec.request_template_with(&ask));
    let process = Arc::new(move |prompt: prompts::Prompt| {
        let (client, template, gate) = (client.clone(), template.clone(), gate.clone());
        let attached = attached.clone();
        Box::pin(async move {
            // Waits while a re-measurement holds the run.
            let _pass = gate.pass().await;
            let result = serving::send_through(&attached, || {
                client.complete_with(&template, prompt.input.get(), &prompt.fields)
            })
            .await;
            Answer { prompt, result }
        }) as record_pipeline::BoxFuture<Answer>
    });
    match record_pipeline::run(
        &watched.run,
        phase,
        state,
        outputs,
        Processor::Async {
            concurrency,
            process,
        },
    )
    .await?
    {
        PassEnd::Complete(state, _) => {
            drop(registration);
            count_holds(run, &mut held).await;
            Ok(verdict(&spec, *state, held.as_ref()))
        }
        // A server that gave up breaks the run off: what it committed stays,
        // and a retry goes on from there.
        PassEnd::Stopped => match watched.gave_up() {
            Some(why) => Err(why),
            None => Ok(Ended::Stopped),
        },
    }
}

fn client(spec: &GenerationSpec) -> Result<InferenceClient, String> {
    let default = Backoff::default();
    let limits = Limits {
        deadline: Duration::from_secs(spec.request_deadline_seconds),
        idle_timeout: Duration::from_secs(spec.stream_idle_seconds),
        backoff: Backoff {
            max_attempts: spec.max_attempts,
            // On servers the daemon runs, a request that failed while its
            // server was down goes again once the server is back
            // (`serving::send_through`): the client's own waits stay short,
            // so that none sleeps on past the server's return.
            cap: if spec.servers.is_empty() {
                default.cap
            } else {
                serving::RETRY_CAP
            },
            ..default
        },
        ..Limits::default()
    };
    InferenceClient::new(&spec.endpoints, spec.api_key_env.as_deref(), limits)
}
