//! The filter phase: a generation's output in, the records worth training
//! on out, and every other one in the rejects file with the reason: exact
//! duplicates of an earlier answer (its normalised text), near duplicates
//! (MinHash and LSH, [`minhash`]), answers cut at the token limit, empty
//! answers, refusals (by pattern), lengths outside the bounds (in the target
//! tokenizer's tokens), and records that share a word n-gram with a
//! decontamination set (a benchmark's test items).
//!
//! It stands on the record pipeline like the other CPU phases: the checks
//! that look at one record alone run on the worker threads; the ones that
//! compare with the records kept before (duplicates) run as each record is
//! written, in the input's order. What they compare with is rebuilt, when a
//! run resumes, from the output file as the checkpoint left it, so a run
//! killed any number of times keeps exactly the records an uninterrupted
//! run keeps, byte for byte.
pub mod kind;
pub mod minhash;
pub mod spec;

use todod_proto::results::ProgressCounts;
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::phase::cursor::Line;
use crate::phase::lines::LineReader;
use crate::phase::record_pipeline::{self, Files, RecordPhase};
use crate::phase::state::{InputState, PassCounts, PhaseState};
use crate::phase::{cpu_pass, Ended, RunContext};
use todod_proto::results::FilterResult;
use todod_format::tokenizer::Tokenizer;
use minhash::Index;
pub use spec::FilterSpec;

const OUTPUT: usize = 0;
const REJECTS: usize = 1;

/// Why a record was left out: a stable word, counted in the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    ExactDuplicate,
    NearDuplicate,
    LengthFinish,
    Empty,
    Refusal,
    TooShort,
    TooLong,
    Contaminated,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ExactDuplicate => "exact_duplicate",
            Reason::NearDuplicate => "near_duplicate",
            Reason::LengthFinish => "length_finish",
            Reason::Empty => "empty",
            Reason::Refusal => "refusal",
            Reason::TooShort => "too_short",
            Reason::TooLong => "too_long",
            Reason::Contaminated => "contaminated",
        }
    }
}

/// A readable input record.
pub struct Record {
    id: String,
    /// The line as read, written to the output as it is when kept.
    bytes: Vec<u8>,
    /// What is compared: the answer's text, and its tool calls.
    answer: String,
    /// The prompt's text, for the decontamination check.
    prompt: String,
    length_finish: bool,
}

/// A record with what the checks on it alone found, and what the checks
/// against earlier records need.
pub struct Checked {
    id: String,
    bytes: Vec<u8>,
    /// A reason found on the record alone, with a detail.
    left_out: Option<(Reason, Value)>,
    fingerprint: u128,
    signature: Option<Vec<u32>>,
}

/// Counters, committed with every checkpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    pub kept: u64,
    /// Records left out, by reason.
    pub removed: BTreeMap<String, u64>,
    /// Lines that could not be read as a record.
    pub rejected: u64,
}

/// What the checks against earlier records compare with: the kept
/// records' fingerprints and signatures.
#[derive(Default)]
struct Seen {
    exact: HashSet<u128>,
    near: Option<Index>,
}

/// What the checks need, loaded once a run.
pub struct Work {
    spec: FilterSpec,
    tokenizer: Option<Arc<dyn Tokenizer>>,
    refusals: Vec<fancy_regex::Regex>,
    /// Hashed word n-grams of the decontamination set.
    contamination: HashSet<u64>,
}

struct Filter {
    work: Arc<Work>,
    seen: Mutex<Seen>,
}

fn text_of(value: Option<&Value>) -> &str {
    value.and_then(Value::as_str).unwrap_or("")
}

/// Every string in `value`, joined by newlines.
fn strings(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// Reads a line of a generation's output (or any record with `content`,
/// `completion`, `response`, or messages ending in an assistant turn).
pub fn parse(bytes: &[u8], number: u64) -> Result<Record, String> {
    let object: Map<String, Value> = crate::phase::lines::json_object(bytes)?;
    let id = crate::phase::lines::record_id(&object, "id", number)?;
    let last_assistant = object
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last())
        .filter(|m| m["role"] == "assistant");
    let (mut answer, calls) = if object.contains_key("content") {
        let content = match object.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) => String::new(),
            _ => return Err("content: expected a string".into()),
        };
        (content, object.get("tool_calls"))
    } else if let Some(text) = ["completion", "response"]
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))
    {
        (text.to_string(), None)
    } else if let Some(turn) = last_assistant {
        (text_of(turn.get("content")).to_string(), turn.get("tool_calls"))
    } else {
        return Err(
            "no answer: a record needs content (a generation's), completion, response, or \
             messages ending in an assistant turn"
                .into(),
        );
    };
    if let Some(calls) = calls.filter(|c| !c.is_null()) {
        // A tool call is part of what the answer says.
        answer.push('\n');
        answer.push_str(&calls.to_string());
    }
    let mut prompt = String::new();
    if let Some(messages) = object.get("messages").and_then(Value::as_array) {
        let asked = match last_assistant {
            Some(_) if !object.contains_key("content") => &messages[..messages.len() - 1],
            _ => &messages[..],
        };
        for m in asked.iter().filter(|m| m["role"] == "user") {
            strings(&m["content"], &mut prompt);
        }
    }
    if let Some(p) = object.get("prompt").and_then(Value::as_str) {
        prompt.push_str(p);
    }
    Ok(Record {
        id,
        bytes: bytes.to_vec(),
        answer,
        prompt,
        length_finish: text_of(object.get("finish_reason")) == "length",
    })
}

/// Hashed word n-grams of `words`.
fn ngrams(words: &[String], n: usize) -> impl Iterator<Item = u64> + '_ {
    words
        .windows(n)
        .map(|w| minhash::hash64(w.join(" ").as_bytes(), 0x6e67_7261))
}

impl Work {
    /// What the duplicate checks compare of an answer: its words'
    /// fingerprint, and their MinHash signature.
    fn features(&self, words: &[String]) -> (u128, Option<Vec<u32>>) {
        let signature = self
            .spec
            .near_duplicates
            .as_ref()
            .and_then(|p| minhash::signature(words, p));
        (minhash::fingerprint(words), signature)
    }

    /// The checks on one record alone, and its fingerprint and signature.
    fn check(&self, r: Record) -> Checked {
        let words = minhash::words(&r.answer);
        let (fingerprint, signature) = self.features(&words);
        let left_out = self.alone(&r, &words);
        Checked {
            id: r.id,
            bytes: r.bytes,
            left_out,
            fingerprint,
            signature,
        }
    }

    fn alone(&self, r: &Record, words: &[String]) -> Option<(Reason, Value)> {
        let spec = &self.spec;
        if spec.drop_length_finishes && r.length_finish {
            return Some((Reason::LengthFinish, json!({"finish_reason": "length"})));
        }
        if spec.drop_empty && r.answer.trim().is_empty() {
            return Some((Reason::Empty, Value::Null));
        }
        for (i, pattern) in self.refusals.iter().enumerate() {
            if pattern.is_match(&r.answer).unwrap_or(false) {
                return Some((Reason::Refusal, json!({"pattern": i})));
            }
        }
        if let Some(tokenizer) = &self.tokenizer {
            let tokens = tokenizer
                .encode(&r.answer, false)
                .map(|e| e.ids.len())
                .unwrap_or(usize::MAX);
            if spec.min_tokens.is_some_and(|min| tokens < min) {
                return Some((Reason::TooShort, json!({"tokens": tokens})));
            }
            if spec.max_tokens.is_some_and(|max| tokens > max) {
                return Some((Reason::TooLong, json!({"tokens": tokens})));
            }
        }
        if let Some(d) = &spec.decontaminate {
            let mut asked = minhash::words(&r.prompt);
            asked.push(String::new());
            asked.extend_from_slice(words);
            // The prompt and the answer each, not n-grams across the two.
            let cut = asked.iter().position(String::is_empty).unwrap_or(asked.len());
            let (prompt, answer) = (&asked[..cut], &asked[cut + 1..]);
            if ngrams(prompt, d.ngram)
                .chain(ngrams(answer, d.ngram))
                .any(|g| self.contamination.contains(&g))
            {
                return Some((Reason::Contaminated, json!({"ngram": d.ngram})));
            }
        }
        None
    }
}

impl Seen {
    fn new(spec: &FilterSpec) -> Seen {
        Seen {
            exact: HashSet::new(),
            near: spec.near_duplicates.map(Index::new),
        }
    }

    /// Whether `c` repeats a kept record, and which.
    fn repeats(&self, spec: &FilterSpec, c: &Checked) -> Option<(Reason, Value)> {
        if spec.exact_duplicates && self.exact.contains(&c.fingerprint) {
            return Some((Reason::ExactDuplicate, Value::Null));
        }
        let (index, signature) = (self.near.as_ref()?, c.signature.as_ref()?);
        let (of, similarity) = index.near(signature)?;
        Some((
            Reason::NearDuplicate,
            json!({"of": of, "similarity": (similarity * 1000.0).round() / 1000.0}),
        ))
    }

    fn keep(&mut self, c: &Checked) {
        self.exact.insert(c.fingerprint);
        if let (Some(index), Some(signature)) = (&mut self.near, &c.signature) {
            index.keep(&c.id, signature);
        }
    }
}

impl RecordPhase for Filter {
    type Item = Record;
    type Output = Checked;
    type Stats = Stats;

    fn record_id(&self, line: &[u8], _number: u64) -> Option<String> {
        crate::phase::lines::json_field(line, "id")
            .as_ref()
            .and_then(crate::phase::lines::id_text)
    }

    fn parse(&self, bytes: &[u8], number: u64) -> Result<Record, String> {
        parse(bytes, number)
    }

    fn write(
        &self,
        line: Line,
        c: Checked,
        files: &mut Files<'_>,
        stats: &mut Stats,
    ) -> io::Result<()> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let left_out = c
            .left_out
            .clone()
            .or_else(|| seen.repeats(&self.work.spec, &c));
        match left_out {
            None => {
                files.bytes(OUTPUT, &c.bytes)?;
                files.bytes(OUTPUT, b"\n")?;
                files.count(OUTPUT);
                seen.keep(&c);
                stats.kept += 1;
                Ok(())
            }
            Some((reason, detail)) => {
                *stats.removed.entry(reason.as_str().into()).or_default() += 1;
                let mut value = json!({"line": line.number, "id": c.id, "reason": reason.as_str()});
                if let Value::Object(extra) = detail {
                    value.as_object_mut().expect("an object").extend(extra);
                }
                // The record itself, to see what was left out.
                value["record"] = serde_json::from_slice(&c.bytes).unwrap_or(Value::Null);
                files.line(REJECTS, &value)
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

    fn progress(&self, stats: &Stats, _pass: &PassCounts, input: &InputState) -> Value {
        let removed: u64 = stats.removed.values().sum();
        let mut progress = ProgressCounts {
            done: Some(stats.kept + removed),
            failed: Some(0),
            rejected: Some(stats.rejected),
            total: Some(input.lines.saturating_sub(stats.rejected)),
            ..ProgressCounts::default()
        }
        .to_json();
        progress["kept"] = json!(stats.kept);
        progress["removed"] = json!(stats.removed);
        progress
    }
}

/// How the pass was set up, fixed for all its resumes: what its decisions
/// depend on beyond the spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Setup {
    tokenizer: Option<String>,
    decontamination_sha256: Option<String>,
    /// What the spec's omissions meant when the pass started (absent in
    /// the state of a pass an earlier todod started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    defaults: Option<Defaults>,
}

/// The settings a spec may leave to todod's defaults, as the pass that
/// started took them: the near-duplicate parameters and the refusal
/// patterns. A resumed pass keeps them, so that an upgrade that changes a
/// default (as the refusal patterns changed once) cannot split one
/// filtering between two.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Defaults {
    near_duplicates: Option<minhash::Params>,
    refusal_patterns: Vec<String>,
}

impl Setup {
    /// Whether `now` reads the same files as this setup did: the tokenizer
    /// and the decontamination set (the defaults are taken over, not
    /// compared).
    fn same_files(&self, now: &Setup) -> bool {
        self.tokenizer == now.tokenizer && self.decontamination_sha256 == now.decontamination_sha256
    }
}

impl Defaults {
    fn of(spec: &FilterSpec) -> Defaults {
        Defaults {
            near_duplicates: spec.near_duplicates,
            refusal_patterns: spec.refusal_patterns.clone(),
        }
    }
}

/// The spec a resumed pass runs with: the one given, with the settings
/// its pass started with where they differ (a default that changed).
fn as_started(mut spec: FilterSpec, started: &Setup) -> FilterSpec {
    if let Some(defaults) = &started.defaults {
        spec.near_duplicates = defaults.near_duplicates;
        spec.refusal_patterns = defaults.refusal_patterns.clone();
    }
    spec
}

fn sha256_file(path: &std::path::Path) -> Result<String, String> {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(path).map_err(|e| {
        format!(
            "cannot read {}: {}",
            path.display(),
            crate::phase::spec::plain_io(&e)
        )
    })?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The decontamination set's n-grams: every string of each line (a JSON
/// benchmark item's question, choices, answer, ...), or the line itself.
fn contamination(d: &spec::Decontaminate) -> Result<HashSet<u64>, String> {
    let text = std::fs::read_to_string(&d.path).map_err(|e| {
        format!(
            "cannot read the decontamination set {}: {}",
            d.path.display(),
            crate::phase::spec::plain_io(&e)
        )
    })?;
    let mut set = HashSet::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut item = String::new();
        match serde_json::from_str::<Value>(line) {
            Ok(value) => strings(&value, &mut item),
            Err(_) => item.push_str(line),
        }
        // Each string alone: an n-gram never spans two fields.
        for part in item.lines() {
            set.extend(ngrams(&minhash::words(part), d.ngram));
        }
    }
    Ok(set)
}

fn prepare(spec: &FilterSpec) -> Result<(Work, Setup), String> {
    let (tokenizer, identity) = match &spec.tokenizer {
        Some(dir) => {
            let loaded = todod_format::tokenizer::load_dir(dir).map_err(|e| {
                format!("cannot load the tokenizer in {}: {e}", dir.display())
            })?;
            (Some(loaded.tokenizer), Some(loaded.identity))
        }
        None => (None, None),
    };
    let refusals = spec
        .refusal_patterns
        .iter()
        .map(|p| fancy_regex::Regex::new(p).map_err(|e| format!("refusal pattern {p:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let (contamination, sha) = match &spec.decontaminate {
        Some(d) => (contamination(d)?, Some(sha256_file(&d.path)?)),
        None => (HashSet::new(), None),
    };
    Ok((
        Work {
            spec: spec.clone(),
            tokenizer,
            refusals,
            contamination,
        },
        Setup {
            tokenizer: identity,
            decontamination_sha256: sha,
            defaults: Some(Defaults::of(spec)),
        },
    ))
}

/// What the kept records so far say, read back from the output file as
/// the checkpoint left it.
fn seen_in(work: &Work, output: &std::path::Path) -> Result<Seen, String> {
    let mut seen = Seen::new(&work.spec);
    let mut reader = match LineReader::open(output, 0, 1, 256 << 20) {
        Ok(reader) => reader,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(seen),
        Err(e) => return Err(format!("cannot read back {}: {e}", output.display())),
    };
    while let Some(raw) = reader
        .next_line()
        .map_err(|e| format!("cannot read back {}: {e}", output.display()))?
    {
        let record = parse(&raw.bytes, raw.line.number).map_err(|e| {
            format!(
                "{} line {} is not a record this filter kept ({e}); was it changed?",
                output.display(),
                raw.line.number
            )
        })?;
        let (fingerprint, signature) = work.features(&minhash::words(&record.answer));
        seen.keep(&Checked {
            id: record.id,
            bytes: Vec::new(),
            left_out: None,
            fingerprint,
            signature,
        });
    }
    Ok(seen)
}

fn verdict(spec: &FilterSpec, mut state: PhaseState) -> Ended {
    let stats: Stats = match state.stats() {
        Ok(s) => s,
        Err(e) => return Ended::broke_off(e),
    };
    state.closed = true;
    let lines = state.input.as_ref().map_or(0, |i| i.lines);
    if let Some(error) = cpu_pass::too_many_rejected(
        stats.rejected,
        lines,
        spec.max_rejected_share,
        &spec.rejects,
    ) {
        return Ended::Failed {
            error,
            state: Some(state),
        };
    }
    let result = FilterResult {
        records: stats.kept,
        removed: stats.removed.values().sum(),
        removed_by_reason: stats.removed.clone(),
        rejected: stats.rejected,
        lines,
        output: spec.output.display().to_string(),
        rejects: spec.rejects.display().to_string(),
        near_duplicate_threshold: spec.near_duplicates.map(|p| p.threshold),
    };
    Ended::Completed {
        result: serde_json::to_string(&result).unwrap_or_default(),
        state: Some(state),
    }
}

async fn run_inner(run: &RunContext, spec: FilterSpec) -> Result<Ended, String> {
    let mut state = PhaseState::resume(&run.store, run.task).await?;
    if state.closed {
        return Ok(verdict(&spec, state));
    }
    let started: Option<Setup> = state
        .input
        .is_some()
        .then(|| serde_json::from_value(state.setup.clone()).unwrap_or_default());
    let spec = match &started {
        Some(then) => {
            let resumed = as_started(spec.clone(), then);
            if Defaults::of(&resumed) != Defaults::of(&spec) {
                tracing::info!(
                    task = %run.task,
                    "the filter resumes with the near-duplicate and refusal settings its pass \
                     started with (this todod's defaults differ)"
                );
            }
            resumed
        }
        None => spec,
    };
    let spec2 = spec.clone();
    let (work, setup) = tokio::task::spawn_blocking(move || prepare(&spec2))
        .await
        .map_err(|e| format!("loading what the filter compares with failed: {e}"))??;
    match &started {
        None => state.setup = json!(setup),
        Some(then) if !then.same_files(&setup) => {
            return Err(format!(
                "the tokenizer or the decontamination set changed since this pass started; \
                 its output would no longer be one filtering. Restore them, or start a new \
                 task (tokenizer {:?}, decontamination set {:?} then; {:?}, {:?} now)",
                then.tokenizer,
                then.decontamination_sha256,
                setup.tokenizer,
                setup.decontamination_sha256
            ));
        }
        Some(_) => {}
    }
    let work = Arc::new(work);
    if !state.complete {
        let phase = Arc::new(Filter {
            work: work.clone(),
            seen: Mutex::new(Seen::default()),
        });
        let files = vec![spec.output.clone(), spec.rejects.clone()];
        let plan = cpu_pass::plan(&spec.input, files, spec.overwrite, None);
        // The output as the checkpoint left it is what was kept before.
        let rebuild = {
            let (work, phase, output) = (work.clone(), phase.clone(), spec.output.clone());
            move || -> Result<(), String> {
                *phase.seen.lock().unwrap_or_else(|p| p.into_inner()) = seen_in(&work, &output)?;
                Ok(())
            }
        };
        let worker = work.clone();
        let pass = cpu_pass::run_after(
            run,
            phase,
            state,
            &plan,
            spec.threads,
            Arc::new(move |r: Record| worker.check(r)),
            rebuild,
        );
        state = match pass.await? {
            Some(state) => state,
            None => return Ok(Ended::Stopped),
        };
    }
    Ok(verdict(&spec, state))
}

#[cfg(test)]
mod tests;
