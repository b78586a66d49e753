//! The generation phase: one completion per prompt of a JSONL file, written
//! exactly once to an output file, however often the daemon dies meanwhile.
//!
//! A reader streams the prompt file; `concurrency` requesters call the server;
//! one committer appends results to the output, failures and rejects files and
//! every second (or every batch) fsyncs them and commits the checkpoint. On
//! resume the files are cut back to the checkpoint and committed ids skipped.
use std::collections::HashSet;
use std::io::BufRead;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, watch};

use super::output::OutputFiles;
use super::prompts::{self, Prompt};
use crate::domain::TaskId;
use crate::inference::{Api, Backoff, CompletionRequest, InferenceClient, Limits};
use crate::store::Store;

/// Records per checkpoint at most; a checkpoint also happens every second.
const BATCH: usize = 256;
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

fn yes() -> bool {
    true
}
fn eight() -> usize {
    8
}
fn attempts() -> u32 {
    8
}
fn id_field() -> String {
    "id".into()
}
fn deadline() -> u64 {
    600
}
fn idle() -> u64 {
    120
}

/// The spec of a generation task (`spec_json`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationSpec {
    /// JSONL: `{id, messages}` for chat, `{id, prompt}` for completions.
    pub prompts: PathBuf,
    /// JSONL, one record per prompt.
    pub output: PathBuf,
    /// Prompts that kept failing; default `<output>.failures.jsonl`.
    #[serde(default)]
    pub failures: Option<PathBuf>,
    /// Lines that could not be used; default `<output>.rejects.jsonl`.
    #[serde(default)]
    pub rejects: Option<PathBuf>,
    /// Base URLs of OpenAI-compatible servers serving `model`.
    pub endpoints: Vec<String>,
    pub model: String,
    /// "chat" (default) or "completions".
    #[serde(default)]
    pub api: Option<String>,
    /// Sampling parameters and extra body fields, passed through as is.
    #[serde(default)]
    pub params: Map<String, Value>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default = "eight")]
    pub concurrency: usize,
    #[serde(default = "attempts")]
    pub max_attempts: u32,
    #[serde(default = "yes")]
    pub stream: bool,
    /// Name of the environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Start as soon as the task is ready (default); else only when started.
    #[serde(default = "yes")]
    pub auto_start: bool,
    #[serde(default = "id_field")]
    pub id_field: String,
    #[serde(default = "deadline")]
    pub request_deadline_seconds: u64,
    #[serde(default = "idle")]
    pub stream_idle_seconds: u64,
}

impl GenerationSpec {
    /// Parses and checks a spec; the error names the field.
    pub fn parse(json: &str) -> Result<GenerationSpec, String> {
        let spec: GenerationSpec =
            serde_json::from_str(json).map_err(|e| format!("generation spec: {e}"))?;
        for (field, path) in [
            ("prompts", Some(&spec.prompts)),
            ("output", Some(&spec.output)),
            ("failures", spec.failures.as_ref()),
            ("rejects", spec.rejects.as_ref()),
        ] {
            if let Some(path) = path.filter(|p| !p.is_absolute()) {
                return Err(format!(
                    "{field}: {:?} is relative; the daemon needs an absolute path",
                    path.display().to_string()
                ));
            }
        }
        if spec.endpoints.is_empty() {
            return Err("endpoints: at least one base URL is needed".into());
        }
        if !(1..=4096).contains(&spec.concurrency) {
            return Err("concurrency: must be between 1 and 4096".into());
        }
        if spec.max_attempts == 0 {
            return Err("max_attempts: must be at least 1".into());
        }
        spec.api()?;
        Ok(spec)
    }

    fn api(&self) -> Result<Api, String> {
        match self.api.as_deref() {
            None | Some("chat") => Ok(Api::Chat),
            Some("completions") => Ok(Api::Completions),
            Some(other) => Err(format!("api: {other:?} is not chat or completions")),
        }
    }

    fn paths(&self) -> Vec<PathBuf> {
        let beside = |suffix: &str| {
            let mut name = self.output.clone().into_os_string();
            name.push(suffix);
            PathBuf::from(name)
        };
        vec![
            self.output.clone(),
            self.failures
                .clone()
                .unwrap_or_else(|| beside(".failures.jsonl")),
            self.rejects
                .clone()
                .unwrap_or_else(|| beside(".rejects.jsonl")),
        ]
    }
}

const OUTPUT: usize = 0;
const FAILURES: usize = 1;
const REJECTS: usize = 2;

/// How a run ended.
#[derive(Debug)]
pub enum Ended {
    /// Every prompt is written; the result JSON.
    Done(String),
    /// The run cannot go on; why, in plain words.
    Failed(String),
    /// Stopped from outside (cancel, shutdown); resumable from the checkpoint.
    Stopped,
}

/// A line for one of the files, and the record id it commits.
struct Written {
    file: usize,
    record: String,
    line: String,
    tokens: u64,
    length_finish: bool,
}

#[derive(Default, serde::Serialize)]
struct Counts {
    done: u64,
    failed: u64,
    rejected: u64,
    length_finishes: u64,
    tokens: u64,
}

/// Runs (or resumes) task `task` until every prompt is written, it fails, or
/// `stop` turns true.
pub async fn run(
    task: TaskId,
    spec: GenerationSpec,
    store: Store,
    mut stop: watch::Receiver<bool>,
) -> Ended {
    match run_inner(task, &spec, &store, &mut stop).await {
        Ok(Some(result)) => Ended::Done(result),
        Ok(None) => Ended::Stopped,
        Err(error) => Ended::Failed(error),
    }
}

async fn run_inner(
    task: TaskId,
    spec: &GenerationSpec,
    store: &Store,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<String>, String> {
    let api = spec.api()?;
    let checkpoint = store
        .load_checkpoint(task)
        .await
        .map_err(|e| format!("cannot load the checkpoint: {e}"))?;
    let paths = spec.paths();
    let offsets = checkpoint.offsets.clone();
    let files = tokio::task::spawn_blocking(move || OutputFiles::open(&paths, &offsets))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot open the output files: {e}"))?;
    let prompts_path = spec.prompts.clone();
    let total = tokio::task::spawn_blocking(move || count_lines(&prompts_path))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot read {}: {e}", spec.prompts.display()))?;
    let limits = Limits {
        deadline: Duration::from_secs(spec.request_deadline_seconds),
        idle_timeout: Duration::from_secs(spec.stream_idle_seconds),
        backoff: Backoff {
            max_attempts: spec.max_attempts,
            ..Backoff::default()
        },
        ..Limits::default()
    };
    let client = std::sync::Arc::new(InferenceClient::new(
        &spec.endpoints,
        spec.api_key_env.as_deref(),
        limits,
    )?);
    // After a resume, earlier failures count as done: the checkpoint keeps
    // which records are written, not which file each went to. Rejects are
    // told apart by their id.
    let rejected = checkpoint
        .records
        .iter()
        .filter(|r| r.starts_with("#line:"))
        .count() as u64;
    let counts = Counts {
        done: checkpoint.records.len() as u64 - rejected,
        rejected,
        ..Counts::default()
    };

    // Reader: streams the file, sends prompts to do and rejects to write.
    let (work_tx, work_rx) = mpsc::channel::<Prompt>(spec.concurrency * 2);
    let (out_tx, mut out_rx) = mpsc::channel::<Written>(spec.concurrency * 4 + BATCH);
    let reader = {
        let out_tx = out_tx.clone();
        let path = spec.prompts.clone();
        let id_field = spec.id_field.clone();
        let committed = checkpoint.records;
        tokio::task::spawn_blocking(move || {
            read_prompts(&path, api, &id_field, &committed, &work_tx, &out_tx)
        })
    };
    // Requesters.
    let work_rx = std::sync::Arc::new(tokio::sync::Mutex::new(work_rx));
    let mut requesters = tokio::task::JoinSet::new();
    for _ in 0..spec.concurrency {
        let work_rx = work_rx.clone();
        let out_tx = out_tx.clone();
        let client = client.clone();
        let model = spec.model.clone();
        let mut params = spec.params.clone();
        if let Some(max) = spec.max_tokens {
            params.insert("max_tokens".into(), json!(max));
        }
        let stream = spec.stream;
        requesters.spawn(async move {
            loop {
                let Some(prompt) = work_rx.lock().await.recv().await else {
                    return;
                };
                let request = CompletionRequest {
                    api,
                    model: model.clone(),
                    input: prompt.input,
                    params: params.clone(),
                    stream,
                };
                let written = match client.complete(&request).await {
                    Ok(out) => {
                        let c = out.completion;
                        let tokens = c.usage.as_ref().map_or(0, |u| u.completion_tokens);
                        Written {
                            file: OUTPUT,
                            length_finish: c.finish_reason == "length",
                            line: json!({
                                "id": prompt.id, "content": c.content, "reasoning": c.reasoning,
                                "finish_reason": c.finish_reason, "usage": c.usage, "model": c.model,
                                "endpoint": out.endpoint, "latency_ms": out.latency.as_millis() as u64,
                                "attempts": out.attempts,
                            })
                            .to_string(),
                            record: prompt.id,
                            tokens,
                        }
                    }
                    Err(failed) => Written {
                        file: FAILURES,
                        line: json!({
                            "id": prompt.id, "error": failed.failure.to_string(),
                            "attempts": failed.attempts, "endpoint": failed.endpoint,
                        })
                        .to_string(),
                        record: prompt.id,
                        tokens: 0,
                        length_finish: false,
                    },
                };
                if out_tx.send(written).await.is_err() {
                    return;
                }
            }
        });
    }
    drop(out_tx);

    // Committer: this task.
    let mut committer = Committer {
        store,
        task,
        files,
        batch: Vec::new(),
        done_at_start: counts.done,
        counts,
        total,
        started: Instant::now(),
        last_checkpoint: Instant::now(),
    };
    enum Step {
        Written(Option<Written>),
        Tick,
        Stop,
    }
    let finished = loop {
        let step = tokio::select! {
            next = out_rx.recv() => Step::Written(next),
            _ = tokio::time::sleep(CHECKPOINT_EVERY) => Step::Tick,
            _ = async { let _ = stop.wait_for(|s| *s).await; } => Step::Stop,
        };
        match step {
            Step::Written(Some(written)) => {
                committer.take(written)?;
                if committer.due() {
                    committer.checkpoint().await?;
                }
            }
            Step::Written(None) => break true,
            Step::Tick => committer.checkpoint().await?,
            Step::Stop => break false,
        }
    };
    requesters.abort_all();
    if !finished {
        // Stopped: what is appended but not committed is cut on resume.
        return Ok(None);
    }
    committer.checkpoint().await?;
    let counts = committer.counts;
    reader
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot read {}: {e}", spec.prompts.display()))?;
    let paths = spec.paths();
    Ok(Some(
        json!({
            "records": counts.done, "failed": counts.failed, "rejected": counts.rejected,
            "length_finishes": counts.length_finishes, "tokens": counts.tokens,
            "output": paths[OUTPUT], "failures": paths[FAILURES], "rejects": paths[REJECTS],
        })
        .to_string(),
    ))
}

/// The committer's state: what is appended since the last checkpoint, and the
/// counts that progress reports.
struct Committer<'a> {
    store: &'a Store,
    task: TaskId,
    files: OutputFiles,
    batch: Vec<String>,
    counts: Counts,
    total: u64,
    started: Instant,
    done_at_start: u64,
    last_checkpoint: Instant,
}

impl Committer<'_> {
    fn take(&mut self, written: Written) -> Result<(), String> {
        self.files
            .append(written.file, written.line.as_bytes())
            .map_err(|e| format!("cannot write the output: {e}"))?;
        match written.file {
            OUTPUT => self.counts.done += 1,
            FAILURES => self.counts.failed += 1,
            _ => self.counts.rejected += 1,
        }
        self.counts.tokens += written.tokens;
        self.counts.length_finishes += u64::from(written.length_finish);
        self.batch.push(written.record);
        Ok(())
    }

    fn due(&self) -> bool {
        self.batch.len() >= BATCH || self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY
    }

    /// fsyncs the files, then commits their lengths and the batch's ids, then
    /// reports progress.
    async fn checkpoint(&mut self) -> Result<(), String> {
        if self.batch.is_empty() {
            return Ok(());
        }
        // A few fsyncs a second on the async worker, like the store's commits.
        let offsets = self
            .files
            .sync()
            .map_err(|e| format!("cannot sync the output: {e}"))?;
        self.store
            .commit_checkpoint(self.task, &offsets, &self.batch)
            .await
            .map_err(|e| format!("cannot commit the checkpoint: {e}"))?;
        self.batch.clear();
        self.last_checkpoint = Instant::now();
        let c = &self.counts;
        let handled = c.done + c.failed + c.rejected;
        let elapsed = self.started.elapsed().as_secs_f64().max(0.001);
        let rate = (c.done - self.done_at_start) as f64 / elapsed;
        let left = self.total.saturating_sub(handled) as f64;
        let eta = if rate > 0.0 { (left / rate) as i64 } else { 0 };
        let progress = json!({
            "done": c.done, "failed": c.failed + c.rejected, "total": self.total,
            "tokens": c.tokens, "rate_per_second": rate, "eta_seconds": eta,
        });
        // Progress is best effort: a failure here must not stop the run.
        if let Err(error) = self
            .store
            .report_progress(self.task, &progress.to_string())
            .await
        {
            tracing::warn!(%error, task = %self.task, "cannot record progress");
        }
        Ok(())
    }
}

fn count_lines(path: &std::path::Path) -> std::io::Result<u64> {
    let mut reader = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut count = 0;
    let mut line = Vec::new();
    while reader.read_until(b'\n', &mut line)? > 0 {
        count += 1;
        line.clear();
    }
    Ok(count)
}

/// Streams the prompt file: rejects go to the committer, prompts not committed
/// yet to the requesters. Ids seen earlier in the file are duplicates.
fn read_prompts(
    path: &std::path::Path,
    api: Api,
    id_field: &str,
    committed: &HashSet<String>,
    work: &mpsc::Sender<Prompt>,
    out: &mpsc::Sender<Written>,
) -> std::io::Result<()> {
    let mut reader = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut seen = HashSet::new();
    let mut bytes = Vec::new();
    let mut number = 0u64;
    loop {
        bytes.clear();
        if reader.read_until(b'\n', &mut bytes)? == 0 {
            return Ok(());
        }
        number += 1;
        let line = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let reject_id = format!("#line:{number}");
        if committed.contains(&reject_id) {
            continue;
        }
        let rejected = match prompts::parse(line, number, api, id_field) {
            Err(rejected) => Some(rejected.reason),
            Ok(prompt) if !seen.insert(prompt.id.clone()) => {
                Some(format!("duplicate id {:?}", prompt.id))
            }
            Ok(prompt) => {
                if !committed.contains(&prompt.id) && work.blocking_send(prompt).is_err() {
                    return Ok(()); // the run stopped
                }
                None
            }
        };
        if let Some(reason) = rejected {
            let written = Written {
                file: REJECTS,
                line: json!({"line": number, "reason": reason}).to_string(),
                record: reject_id,
                tokens: 0,
                length_finish: false,
            };
            if out.blocking_send(written).is_err() {
                return Ok(());
            }
        }
    }
}
