//! The tokenization phase: a generation's output (or any JSONL of messages,
//! prompt and completion, or text) tokenized with the target model's own
//! tokenizer, into files the training frameworks read as they are: a
//! Megatron indexed dataset (`PREFIX.bin` + `PREFIX.idx`) and a Parquet file
//! of `input_ids`, `attention_mask` and `labels`, with a manifest that says
//! exactly what produced them.
//!
//! It stands on the record pipeline with CPU processing, so its files keep
//! the input's order (a sharded task's, its shards' order) and are
//! byte-identical however often the run is killed:
//! the token store (tokens, sizes, loss mask, ids) is appended record by
//! record and committed in batches; the index, the Parquet file and the
//! manifest are built from it once the pass is complete, staged and
//! published, so an interrupted finish is simply done again.
pub mod kind;
pub mod megatron;
mod parquet;
pub mod records;
pub mod spec;

use todod_proto::results::ProgressCounts;
use std::collections::BTreeMap;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::phase::cursor::Line;
use crate::phase::files::{self, Fs, SeqReader};
use crate::phase::record_pipeline::{self, Files, RecordPhase};
use crate::phase::state::{InputState, PassCounts, PhaseState};
use crate::phase::shards::{self, Role};
use crate::phase::{cpu_pass, Ended, RunContext};
use todod_proto::results::TokenizationResult;
use megatron::Dtype;
use records::{Outcome, Record, Tokenizing};
pub use spec::TokenizationSpec;

const BIN: usize = 0;
const SIZES: usize = 1;
const MASK: usize = 2;
const IDS: usize = 3;
const REJECTS: usize = 4;

/// Counters of a tokenization.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    pub records: u64,
    pub tokens: u64,
    /// Tokens whose loss is taken (labels other than -100).
    pub trained_tokens: u64,
    /// Valid records left out by the spec's rules, by reason.
    pub dropped: BTreeMap<String, u64>,
    /// Lines that could not be used: not parsed, or refused by the template.
    pub rejected: u64,
    /// Tokens that cross the edge of a trained span.
    pub straddling: u64,
    /// Records by token count: bucket k holds lengths in [2^k, 2^(k+1)),
    /// bucket 0 also length 0.
    pub histogram: BTreeMap<u32, u64>,
    pub max_length: u64,
    /// The answers' trained ids against the ids their model generated.
    #[serde(default)]
    pub drift: todod_proto::results::TokenDrift,
    /// Answers whose ids are the ids their model generated.
    #[serde(default)]
    pub answers_from_generated_ids: u64,
}

/// How many differences a result shows.
const DRIFT_EXAMPLES: usize = 5;

fn add_drift(into: &mut todod_proto::results::TokenDrift, from: &todod_proto::results::TokenDrift) {
    into.checked += from.checked;
    into.differing += from.differing;
    into.prompts_checked += from.prompts_checked;
    into.prompts_differing += from.prompts_differing;
    let room = DRIFT_EXAMPLES.saturating_sub(into.examples.len());
    into.examples.extend(from.examples.iter().take(room).cloned());
}

/// How the pass was set up, fixed for all its resumes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Setup {
    /// The clock `strftime_now` sees: the pass's start, so reruns render alike.
    now: i64,
    tokenizer: String,
    template: Option<String>,
}

impl crate::phase::shards::Counters for Stats {
    fn add(&mut self, other: &Stats) {
        self.records += other.records;
        self.tokens += other.tokens;
        self.trained_tokens += other.trained_tokens;
        for (reason, n) in &other.dropped {
            *self.dropped.entry(reason.clone()).or_default() += n;
        }
        self.rejected += other.rejected;
        self.straddling += other.straddling;
        for (bucket, n) in &other.histogram {
            *self.histogram.entry(*bucket).or_default() += n;
        }
        self.max_length = self.max_length.max(other.max_length);
        add_drift(&mut self.drift, &other.drift);
        self.answers_from_generated_ids += other.answers_from_generated_ids;
    }
}

fn bucket(len: u64) -> u32 {
    if len < 2 {
        0
    } else {
        63 - len.leading_zeros()
    }
}

struct Tokenization {
    work: Arc<Tokenizing>,
    dtype: Dtype,
}

impl RecordPhase for Tokenization {
    type Item = Record;
    type Output = Outcome;
    type Stats = Stats;

    fn record_id(&self, line: &[u8], _number: u64) -> Option<String> {
        crate::phase::lines::json_field(line, "id")
            .as_ref()
            .and_then(crate::phase::lines::id_text)
    }

    fn parse(&self, bytes: &[u8], number: u64) -> Result<Record, String> {
        records::parse(bytes, number, &self.work.spec)
    }

    fn write(
        &self,
        line: Line,
        outcome: Outcome,
        files: &mut Files<'_>,
        stats: &mut Stats,
    ) -> io::Result<()> {
        match outcome {
            Outcome::Tokens {
                id,
                ids,
                mask,
                straddling,
                drift,
                from_generated,
            } => {
                stats.answers_from_generated_ids += u64::from(from_generated);
                if let Some(drift) = drift {
                    let counted = &mut stats.drift;
                    counted.checked += 1;
                    if let Some(example) = drift.answer {
                        counted.differing += 1;
                        if counted.examples.len() < DRIFT_EXAMPLES {
                            counted.examples.push(example);
                        }
                    }
                    if let Some(same) = drift.prompt_same {
                        counted.prompts_checked += 1;
                        counted.prompts_differing += u64::from(!same);
                    }
                }
                let mut bytes = Vec::new();
                self.dtype
                    .encode(&ids, &mut bytes)
                    .map_err(io::Error::other)?;
                files.bytes(BIN, &bytes)?;
                files.count(BIN);
                files.bytes(SIZES, &(ids.len() as u32).to_le_bytes())?;
                files.count(SIZES);
                files.bytes(MASK, &mask)?;
                files.count(MASK);
                files.record(IDS, &id)?;
                let len = ids.len() as u64;
                stats.records += 1;
                stats.tokens += len;
                stats.trained_tokens += mask.iter().map(|&m| u64::from(m)).sum::<u64>();
                stats.straddling += u64::from(straddling);
                *stats.histogram.entry(bucket(len)).or_default() += 1;
                stats.max_length = stats.max_length.max(len);
                Ok(())
            }
            Outcome::Dropped { id, reason } => {
                *stats.dropped.entry(reason.to_string()).or_default() += 1;
                record_pipeline::reject_line(
                    files,
                    REJECTS,
                    line,
                    Some(id),
                    &format!("dropped: {reason}"),
                )
            }
            Outcome::Refused { id, reason } => {
                stats.rejected += 1;
                record_pipeline::reject_line(files, REJECTS, line, Some(id), &reason)
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
        // Records the spec's rules leave out (length finishes, empty, over
        // length) are neither written nor rejected: counted apart, and not
        // part of the total.
        let dropped: u64 = stats.dropped.values().sum();
        let mut progress = ProgressCounts {
            done: Some(stats.records),
            failed: Some(0),
            rejected: Some(stats.rejected),
            total: Some(input.lines.saturating_sub(stats.rejected + dropped)),
            tokens: Some(stats.tokens),
            ..ProgressCounts::default()
        }
        .to_json();
        progress["dropped"] = json!(dropped);
        progress
    }
}

/// Loads what tokenizing needs: the tokenizer, and for conversations the
/// chat template, with the variables it sees.
fn prepare(
    spec: &TokenizationSpec,
    now: i64,
) -> Result<(Tokenizing, String, Option<String>), String> {
    let loaded = todod_format::tokenizer::load_dir(&spec.tokenizer).map_err(|e| {
        format!(
            "cannot load the tokenizer in {}: {e}",
            spec.tokenizer.display()
        )
    })?;
    let config = crate::phase::model::config(&spec.tokenizer)?;
    let template = match spec.mode {
        spec::Mode::Completion => None,
        spec::Mode::Conversation => Some(crate::phase::model::templates(
            Some(&spec.tokenizer),
            spec.chat_template.as_deref(),
            spec.template_name.as_deref(),
        )?),
    };
    let template_hash = template
        .as_ref()
        .map(crate::phase::model::Templates::identity);
    Ok((
        Tokenizing {
            eos: loaded.eos_id,
            tokenizer: loaded.tokenizer,
            template,
            variables: crate::phase::model::variables(config.as_ref(), &spec.template_variables),
            now: todod_format::chat_template::Clock::at_unix(now),
            spec: spec.clone(),
        },
        loaded.identity,
        template_hash,
    ))
}

fn reader(fs: &dyn Fs, path: &Path, end: u64) -> io::Result<SeqReader> {
    Ok(SeqReader::new(fs.open_existing(path)?, end))
}

/// Builds and publishes the index, the Parquet file and the manifest from the
/// committed token store. Deterministic: a finish interrupted by a kill is
/// done again and publishes the same bytes. Each file is staged under the
/// `attempt`'s own name: a daemon paused past its lease in the middle of
/// this, woken while another finishes the same task, never writes into the
/// other's staging file, and both publish complete, identical files.
fn finish(
    fs: &dyn Fs,
    spec: &TokenizationSpec,
    state: &PhaseState,
    dtype: Dtype,
    setup: &Setup,
    attempt: &str,
) -> io::Result<Value> {
    let stage = |path: &Path| -> io::Result<(PathBuf, files::SeqWriter)> {
        let tmp = files::staging_path_of(path, attempt);
        let out = files::stage_at(fs, &tmp)?;
        Ok((tmp, out))
    };
    let paths = spec.paths();
    let stats: Stats = state.stats().map_err(io::Error::other)?;
    let committed = |i: usize| state.files[i].committed;
    let count = stats.records;
    let mut written: Vec<(&str, PathBuf)> = Vec::new();

    let (idx_tmp, mut idx) = stage(&paths.idx)?;
    let mut sizes = || -> io::Result<Box<dyn io::Read>> {
        Ok(Box::new(BufReader::new(reader(
            fs,
            &paths.sizes,
            committed(SIZES),
        )?)))
    };
    megatron::write_index(dtype, count, &mut sizes, &mut idx)?;
    idx.finish()?;
    files::publish_from(fs, &idx_tmp, &paths.idx, spec.overwrite)?;
    written.push(("idx", paths.idx.clone()));
    written.push(("bin", paths.bin.clone()));

    if spec.formats.contains(&spec::Format::Parquet) {
        let (tmp, mut out) = stage(&paths.parquet)?;
        {
            let mut tokens = BufReader::new(reader(fs, &paths.bin, committed(BIN))?);
            let mut sizes = BufReader::new(reader(fs, &paths.sizes, committed(SIZES))?);
            let mut mask = BufReader::new(reader(fs, &paths.mask, committed(MASK))?);
            let mut ids = BufReader::new(reader(fs, &paths.ids, committed(IDS))?);
            parquet::write(
                parquet::Store {
                    dtype,
                    count,
                    tokens: &mut tokens,
                    sizes: &mut sizes,
                    mask: &mut mask,
                    ids: &mut ids,
                },
                &mut out,
            )?;
        }
        out.finish()?;
        files::publish_from(fs, &tmp, &paths.parquet, spec.overwrite)?;
        written.push(("parquet", paths.parquet.clone()));
    }
    written.push(("rejects", paths.rejects.clone()));

    let mut shas = serde_json::Map::new();
    for (name, path) in &written {
        shas.insert(
            name.to_string(),
            json!({"path": path, "sha256": files::sha256_of(fs, path)?}),
        );
    }
    let histogram: Vec<Value> = stats
        .histogram
        .iter()
        .map(|(&k, &n)| {
            let (low, high) = if k == 0 {
                (0, 1)
            } else {
                (1u64 << k, (1u64 << (k + 1)) - 1)
            };
            json!({"from": low, "to": high, "records": n})
        })
        .collect();
    let manifest = json!({
        "format": "todod tokenization manifest 1",
        "tokenizer": {"identity": setup.tokenizer, "dir": spec.tokenizer},
        "chat_template_sha256": setup.template,
        "mode": spec.mode,
        "train_on": if spec.mode == spec::Mode::Conversation { json!(spec.train_on) } else { Value::Null },
        // Which ids the files hold for a generated answer: the rendered
        // answer's, or (for these many records) the ids its model generated.
        "answer_ids": spec.answer_ids,
        "answers_from_generated_ids": stats.answers_from_generated_ids,
        "dtype": dtype.name(),
        "records": stats.records,
        "tokens": stats.tokens,
        "trained_tokens": stats.trained_tokens,
        "masked_tokens": stats.tokens - stats.trained_tokens,
        "dropped": stats.dropped,
        "rejected": stats.rejected,
        "straddling_tokens": stats.straddling,
        "max_length": stats.max_length,
        "length_histogram": histogram,
        "files": shas,
    });
    let (tmp, mut out) = stage(&paths.manifest)?;
    io::Write::write_all(
        &mut out,
        serde_json::to_string_pretty(&manifest)
            .expect("JSON serializes")
            .as_bytes(),
    )?;
    out.finish()?;
    files::publish_from(fs, &tmp, &paths.manifest, spec.overwrite)?;
    Ok(manifest)
}

/// The verdict on a finished pass.
fn verdict(spec: &TokenizationSpec, mut state: PhaseState, manifest: Option<Value>) -> Ended {
    let stats: Stats = match state.stats() {
        Ok(s) => s,
        Err(e) => return Ended::broke_off(e),
    };
    state.closed = true;
    let lines = state.input.as_ref().map_or(0, |i| i.lines);
    let paths = spec.paths();
    if stats.records == 0 {
        return Ended::Failed {
            error: format!(
                "no record was tokenized ({} lines: {} rejected, {} dropped); see {}",
                lines,
                stats.rejected,
                stats.dropped.values().sum::<u64>(),
                paths.rejects.display()
            ),
            state: Some(state),
        };
    }
    if let Some(error) = cpu_pass::too_many_rejected(
        stats.rejected,
        lines,
        spec.max_rejected_share,
        &paths.rejects,
    ) {
        return Ended::Failed {
            error,
            state: Some(state),
        };
    }
    let result = TokenizationResult {
        records: stats.records,
        tokens: stats.tokens,
        trained_tokens: stats.trained_tokens,
        masked_tokens: stats.tokens - stats.trained_tokens,
        dropped: stats.dropped.clone(),
        rejected: stats.rejected,
        straddling_tokens: stats.straddling,
        max_length: stats.max_length,
        length_histogram: stats.histogram.iter().map(|(k, n)| (*k, *n)).collect(),
        bin: paths.bin.display().to_string(),
        idx: paths.idx.display().to_string(),
        manifest: paths.manifest.display().to_string(),
        rejects: paths.rejects.display().to_string(),
        parquet: spec
            .formats
            .contains(&spec::Format::Parquet)
            .then(|| paths.parquet.display().to_string()),
        tokenizer: manifest.map(|m| m["tokenizer"]["identity"].clone()),
        shards: (spec.shards > 1).then_some(spec.shards),
        parts: (spec.shards > 1).then(|| paths.parts.display().to_string()),
        drift: (stats.drift.checked > 0).then(|| stats.drift.clone()),
        answers_from_generated_ids: (spec.answer_ids == spec::AnswerIds::Generated)
            .then_some(stats.answers_from_generated_ids),
    };
    if spec.max_drift_share.is_some() && stats.drift.checked == 0 {
        return Ended::Failed {
            error: "max_drift_share is set, and no record kept the ids its model generated to \
                    check against (see the generation's result: token_ids)"
                .into(),
            state: Some(state),
        };
    }
    if let (Some(most), Some(share)) = (spec.max_drift_share, stats.drift.share()) {
        if share > most {
            let first = stats.drift.examples.first().map_or(String::new(), |e| {
                format!(
                    "; the first, {:?}, differs at position {} of its answer (generated {:?}, trained {:?}, from {:?})",
                    e.id, e.index, e.generated, e.trained, e.trained_text
                )
            });
            return Ended::Failed {
                error: format!(
                    "{} of {} records ({:.1} %) train on other tokens than their model generated, \
                     past max_drift_share {}{first}",
                    stats.drift.differing,
                    stats.drift.checked,
                    share * 100.0,
                    most
                ),
                state: Some(state),
            };
        }
    }
    Ended::Completed {
        result: serde_json::to_string(&result).unwrap_or_default(),
        state: Some(state),
    }
}

/// Runs (or resumes) one attempt; `Err` breaks it off (see `kind.rs`).
async fn run_inner(run: &RunContext, spec: TokenizationSpec) -> Result<Ended, String> {
    let role = Role::of(run, spec.shards);
    let mut state = shards::resume(run).await?;
    if state.closed {
        return Ok(verdict(&spec, state, None));
    }
    if let Role::PutTogether(of) = role {
        // Every shard is done: the token store put together from their
        // parts (each a run of whole records, so they concatenate), set up
        // as the shards were, then finished as one run's store is.
        let parts = spec.paths().parts;
        state = shards::join::<Stats>(run, of, store_files(&spec), parts, spec.overwrite).await?;
    }
    let mut setup: Setup = serde_json::from_value(state.setup.clone()).unwrap_or_default();
    if state.input.is_none() {
        setup.now = shards::pass_clock(run).await?;
    }
    let (spec2, now) = (spec.clone(), setup.now);
    let (work, identity, template) = tokio::task::spawn_blocking(move || prepare(&spec2, now))
        .await
        .map_err(|e| format!("loading the tokenizer failed: {e}"))??;
    if state.input.is_none() {
        setup.tokenizer = identity;
        setup.template = template;
        state.setup = json!(setup);
    } else if setup.tokenizer != identity || setup.template != template {
        return Err(format!(
            "the tokenizer or chat template in {} changed since this pass started; its files \
             would no longer be one tokenization. Restore them, or start a new task",
            spec.tokenizer.display()
        ));
    }
    let dtype = Dtype::for_vocab(work.tokenizer.vocab_size());
    let work = Arc::new(work);
    let phase = Arc::new(Tokenization {
        work: work.clone(),
        dtype,
    });
    if !state.complete {
        let plan = cpu_pass::plan(&spec.input, store_files(&spec), spec.overwrite, role.shard());
        let pass = cpu_pass::run(
            run,
            phase,
            state,
            &plan,
            spec.threads,
            Arc::new(move |record: Record| work.tokenize(record)),
        );
        state = match pass.await? {
            Some(state) => state,
            None => return Ok(Ended::Stopped),
        };
    }
    if role.shard().is_some() {
        // A shard's share of the token store is done; the index, the
        // Parquet file and the verdict come once the store is put together.
        return Ok(shards::share_done(state));
    }
    finish_and_judge(run, &spec, state, dtype, setup).await
}

/// The token store's files, in the order the phase indexes them.
fn store_files(spec: &TokenizationSpec) -> Vec<PathBuf> {
    let paths = spec.paths();
    vec![paths.bin, paths.sizes, paths.mask, paths.ids, paths.rejects]
}

/// Builds the index, the Parquet file and the manifest from the committed
/// token store, and judges the pass.
async fn finish_and_judge(
    run: &RunContext,
    spec: &TokenizationSpec,
    state: PhaseState,
    dtype: Dtype,
    setup: Setup,
) -> Result<Ended, String> {
    let (fs, spec2, state2) = (run.fs.clone(), spec.clone(), state.clone());
    let attempt = run.attempt.clone();
    let manifest =
        tokio::task::spawn_blocking(move || finish(&*fs, &spec2, &state2, dtype, &setup, &attempt))
            .await
            .map_err(|e| format!("finishing the files failed: {e}"))?
            .map_err(|e| {
                format!(
                    "cannot write the final files: {}",
                    crate::phase::spec::plain_io(&e)
                )
            })?;
    Ok(verdict(spec, state, Some(manifest)))
}
