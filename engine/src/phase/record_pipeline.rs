//! The exactly-once record pipeline every record phase runs on: stream the
//! input, process records concurrently (async tasks for HTTP, threads for CPU
//! work), append the results to the output files, and commit in batches:
//! fsync the files, then the checkpoint (cursor, file lengths and
//! identities, counters) in one fenced transaction. A resume cuts the files
//! back to the checkpoint and skips the committed lines; nothing else is
//! kept in memory per record.
//!
//! A phase supplies only how to read a record ([`RecordPhase::parse`]), how to
//! process it (an async function or a CPU one, see [`Processor`]) and how to
//! write it ([`RecordPhase::write`]). CPU processing keeps the input's order,
//! so its output is byte-identical however often the run is killed.
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use todod_proto::results::ProgressCounts;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::cursor::{Line, Progress};
use super::files::{Existing, FileState, Output};
use super::lines::{survey, LineReader, RawLine};
use super::state::{InputState, PassCounts, PhaseState};
use super::RunContext;
use todod_store::Error as StoreError;

/// Records per checkpoint at most; a checkpoint also happens every second.
/// At most this much work is done again after a crash.
pub const BATCH: usize = 2048;
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// The most finished records the committer takes at once.
const DRAIN: usize = 1024;
/// Progress is reported (as an event) at most this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Lines handed to a CPU worker at once; a checkpoint may hold this many
/// lines over `BATCH` (the message that crossed it).
pub const CPU_BATCH: usize = 64;

/// What a record phase says about its records.
pub trait RecordPhase: Send + Sync + 'static {
    /// A usable input record.
    type Item: Send + 'static;
    /// A processed record, ready to write.
    type Output: Send + 'static;
    /// The phase's own counters, committed with every checkpoint.
    type Stats: Default + Clone + Serialize + DeserializeOwned + Send + 'static;

    /// Input lines longer than this are rejected unread.
    fn max_line_bytes(&self) -> usize {
        16 << 20
    }

    /// The record id of a raw line, for finding duplicates before the pass
    /// starts; `None` when the line has none (its id is then its number).
    fn record_id(&self, line: &[u8], number: u64) -> Option<String>;

    /// Parses line `number`; `Err` is the reason it is rejected.
    fn parse(&self, bytes: &[u8], number: u64) -> Result<Self::Item, String>;

    /// Appends a processed record to the files.
    fn write(
        &self,
        line: Line,
        output: Self::Output,
        files: &mut Files<'_>,
        stats: &mut Self::Stats,
    ) -> io::Result<()>;

    /// Appends a rejected line (to the rejects file, as a rule).
    fn reject(
        &self,
        line: Line,
        reason: &str,
        files: &mut Files<'_>,
        stats: &mut Self::Stats,
    ) -> io::Result<()>;

    /// Progress to report after a checkpoint (a JSON object).
    fn progress(&self, stats: &Self::Stats, pass: &PassCounts, input: &InputState) -> Value;

    /// Brings counts kept outside the records (a generation's requests)
    /// into the counters about to be committed with a checkpoint.
    fn before_commit(&self, _stats: &mut Self::Stats) {}

    /// An event to record with the progress about to be reported (its kind
    /// and JSON payload), such as a rate drifting from its projection.
    fn notice(&self, _progress: &Value) -> Option<(&'static str, Value)> {
        None
    }
}

/// The output files of a pass, as a phase writes to them.
pub struct Files<'a> {
    outputs: &'a mut [Output],
    counts: &'a mut PassCounts,
}

impl Files<'_> {
    /// Appends one JSON line to file `index`.
    pub fn line(&mut self, index: usize, value: &Value) -> io::Result<()> {
        self.record(index, value)
    }

    /// Appends anything serializable as one JSON line to file `index`.
    pub fn record<T: Serialize + ?Sized>(&mut self, index: usize, value: &T) -> io::Result<()> {
        let mut bytes = serde_json::to_vec(value).map_err(io::Error::other)?;
        bytes.push(b'\n');
        self.bytes(index, &bytes)?;
        self.counts.written[index] += 1;
        Ok(())
    }

    /// Appends raw bytes to file `index` (not counted as a line).
    pub fn bytes(&mut self, index: usize, bytes: &[u8]) -> io::Result<()> {
        self.outputs[index].append(bytes)
    }

    pub fn len(&self, index: usize) -> u64 {
        self.outputs[index].len()
    }

    /// Counts a line written through [`Files::bytes`].
    pub fn count(&mut self, index: usize) {
        self.counts.written[index] += 1;
    }
}

/// A boxed future, for async processors.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How records are processed.
pub enum Processor<P: RecordPhase> {
    /// `concurrency` async tasks; results are written as they finish.
    Async {
        concurrency: usize,
        process: Arc<dyn Fn(P::Item) -> BoxFuture<P::Output> + Send + Sync>,
    },
    /// Worker threads; results are written in input order.
    Cpu {
        threads: usize,
        process: Arc<dyn Fn(P::Item) -> P::Output + Send + Sync>,
    },
}

/// What one line came to.
enum Done<O> {
    Record(O),
    Rejected(String),
    /// Another shard's line: committed as seen, nothing written.
    Skipped,
}

/// Lines with what they came to, as workers hand them to the committer.
type DoneLines<O> = Vec<(Line, Done<O>)>;

/// A pass's setup: what it reads and what it writes.
pub struct PassPlan {
    pub input: PathBuf,
    /// The output files in the order the phase indexes them. Those already in
    /// the state (from an earlier pass) keep their committed content.
    pub files: Vec<PathBuf>,
    pub existing: Existing,
    /// The shard whose lines the pass takes, if it is one shard's share.
    pub shard: Option<todod_domain::shards::Shard>,
}

/// The key a pass's duplicate lines are kept under: the pass, and for a
/// shard its shard too (a shard's retry pass reads its own failures part,
/// whose line numbers are not another shard's).
fn duplicates_key(run: &RunContext, pass: u32) -> u32 {
    match run.shard {
        Some(shard) => pass | ((shard.index + 1) << 16),
        None => pass,
    }
}

/// How a pass ended.
pub enum PassEnd {
    /// Every line is committed; the state says so.
    Complete(Box<PhaseState>, Vec<Output>),
    Stopped,
}

fn io_error(what: &str) -> impl Fn(io::Error) -> String + '_ {
    move |e| format!("{what}: {}", super::spec::plain_io(&e))
}

/// Commits `state` for the run, fenced: a run that lost its task gets `None`
/// (it must stop), any other failure is an error message.
async fn commit(
    run: &RunContext,
    state: &PhaseState,
    duplicates: Option<(u32, &[u64])>,
) -> Result<Option<()>, String> {
    match run
        .store
        .commit_phase_state(run.task, &run.attempt, &state.to_json(), duplicates)
        .await
    {
        Ok(()) => Ok(Some(())),
        Err(e) => refused(e).map(|()| None),
    }
}

/// What a checkpoint the store did not commit means for the run: `Ok` when
/// it is to stop at its last checkpoint (it lost its task, or the database
/// was busy or out of reach, which is not the run's fault: it is taken up
/// again, not failed), `Err` with the message that fails it.
fn refused(error: StoreError) -> Result<(), String> {
    match error {
        StoreError::Fenced { .. } => Ok(()),
        e if e.is_transient() => {
            tracing::warn!(error = %e, "checkpoint not committed; the run stops and resumes");
            Ok(())
        }
        e => Err(format!("cannot commit the checkpoint: {e}")),
    }
}

/// Refuses to start a shard's share of an input that is not the file the
/// task's other shards surveyed (appended to, or edited, since): line `n`
/// would no longer be the same record in every shard, and records would be
/// lost or written twice between them.
async fn same_input_as_other_shards(
    run: &RunContext,
    shard: todod_domain::shards::Shard,
    input: &InputState,
) -> Result<(), String> {
    let others = run
        .store
        .shard_states(run.task)
        .await
        .map_err(|e| format!("cannot read the other shards' checkpoints: {e}"))?;
    for (index, text) in others {
        let Some(state) = text.and_then(|t| serde_json::from_str::<PhaseState>(&t).ok()) else {
            continue;
        };
        let Some(theirs) = state.input.filter(|i| i.shard.is_some()) else {
            continue; // not surveyed yet, or in a retry pass of its own failures
        };
        // Length, modification time and lines: the device number of one
        // file differs between the machines that mount it.
        let (a, b) = (&theirs.identity, &input.identity);
        let same = a.len == b.len && a.mtime_ns == b.mtime_ns && theirs.lines == input.lines;
        if index != shard.index && !same {
            return Err(format!(
                "{} is not the file shard {index} of {} took its share of ({} lines, {} bytes \
                 then; {} lines, {} bytes now): the shards would not share out the same \
                 records. Restore it, or start a new task",
                input.path.display(),
                shard.of,
                theirs.lines,
                theirs.identity.len,
                input.lines,
                input.identity.len
            ));
        }
    }
    Ok(())
}

/// How a run came by an output file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opened {
    Created,
    Resumed,
    /// Held by another process: its committed bytes go on in a fork, whose
    /// identity is to be committed before it is put in place.
    Forked,
}

/// Creates the files of `files` planned but not yet created, and reopens
/// (cut back to their committed length) those that were. On a database
/// several daemons share, a file whose lock another process holds is the
/// file of the daemon this run took the task from, paused past its lease
/// (possibly for good): its writes would still land. The run does not wait
/// for it. A file it committed is forked ([`Output::fork`]); one it created
/// but never committed is empty and replaced. Either way the old writer's
/// late writes land in a file at no path. Alone on a database, the holder
/// is a stranger to the task and the run fails, saying so.
fn open_outputs(
    fs: &dyn super::files::Fs,
    files: Vec<FileState>,
    existing: super::files::Existing,
    shared: bool,
) -> io::Result<Vec<(Output, Opened)>> {
    let held = |e: &io::Error| e.kind() == io::ErrorKind::WouldBlock && shared;
    files
        .into_iter()
        .map(|file| match file.identity {
            None => match Output::create(fs, file.clone(), existing, true) {
                Err(e) if held(&e) => {
                    fs.remove(&file.path)?;
                    Output::create(fs, file, existing, true)
                }
                other => other,
            }
            .map(|o| (o, Opened::Created)),
            Some(_) => match Output::resume(fs, file.clone()) {
                Err(e) if held(&e) => Output::fork(fs, file).map(|o| (o, Opened::Forked)),
                other => other.map(|o| (o, Opened::Resumed)),
            },
        })
        .collect()
}

/// Opens (or starts) the pass that `state` describes: surveys its input and
/// creates its files the first time, or checks the input and reopens the
/// files on resume. `None` when the run lost its task meanwhile.
pub async fn open<P: RecordPhase>(
    run: &RunContext,
    phase: &Arc<P>,
    mut state: PhaseState,
    plan: &PassPlan,
) -> Result<Option<(PhaseState, Vec<Output>)>, String> {
    if state.input.is_none() {
        let (path, limit, phase2) = (plan.input.clone(), phase.max_line_bytes(), phase.clone());
        let found = tokio::task::spawn_blocking(move || {
            survey(&path, limit, &|line: &[u8], number| {
                phase2.record_id(line, number)
            })
        })
        .await
        .map_err(|e| format!("the input survey failed: {e}"))?
        .map_err(io_error(&format!("cannot read {}", plan.input.display())))?;
        state.input = Some(InputState {
            path: plan.input.clone(),
            identity: found.identity,
            lines: found.lines,
            duplicates: found.duplicates.len() as u64,
            shard: plan.shard,
        });
        state.cursor = Default::default();
        state.complete = false;
        state.closed = false;
        state.counts = PassCounts {
            written: vec![0; plan.files.len()],
            rejected: 0,
        };
        // Files not yet in the state are to be created: the intent is
        // committed before they exist, with the survey.
        for path in &plan.files {
            if !state.files.iter().any(|f| &f.path == path) {
                state.files.push(FileState::planned(path.clone()));
            }
        }
        state.files.retain(|f| plan.files.contains(&f.path));
        state
            .files
            .sort_by_key(|f| plan.files.iter().position(|p| p == &f.path));
        if let (Some(shard), Some(input)) = (plan.shard, &state.input) {
            same_input_as_other_shards(run, shard, input).await?;
        }
        let key = duplicates_key(run, state.pass);
        if commit(run, &state, Some((key, &found.duplicates)))
            .await?
            .is_none()
        {
            return Ok(None);
        }
    }
    // Create what is planned, reopen what exists; nothing waits on another
    // process (see `open_outputs`).
    let fs = run.fs.clone();
    let files = state.files.clone();
    let (existing, shared) = (plan.existing, run.store.is_shared());
    let opened = tokio::task::spawn_blocking(move || open_outputs(&*fs, files, existing, shared))
        .await
        .map_err(|e| format!("opening the output files failed: {e}"))?
        .map_err(|e| super::spec::plain_io(&e))?;
    let forked: Vec<PathBuf> = opened
        .iter()
        .filter(|(_, how)| *how == Opened::Forked)
        .map(|(o, _)| o.path().to_path_buf())
        .collect();
    let created = opened.iter().any(|(_, how)| *how == Opened::Created);
    let opened: Vec<Output> = opened.into_iter().map(|(o, _)| o).collect();
    state.files = opened.iter().map(|o| o.state().clone()).collect();
    if created || !forked.is_empty() {
        // A refused commit leaves the forks where they are: a commit lost
        // with its connection may have landed, and the next resume puts a
        // fork whose identity is committed in place (and removes one that
        // is not).
        if commit(run, &state, None).await?.is_none() {
            return Ok(None);
        }
        for path in &forked {
            super::files::publish_fork(&*run.fs, path).map_err(|e| {
                format!(
                    "cannot put the copy of {} in place: {}",
                    path.display(),
                    super::spec::plain_io(&e)
                )
            })?;
        }
        if !forked.is_empty() {
            let files: Vec<String> = forked.iter().map(|p| p.display().to_string()).collect();
            tracing::warn!(task = %run.task, files = ?files,
                "output files were still held by the daemon this run took the task from: their committed bytes go on in copies, and that daemon's late writes land nowhere");
            if let Err(e) = run.store.note_forked(run.task, &run.attempt, &files).await {
                tracing::warn!(task = %run.task, error = %e, "cannot record the fork in the history");
            }
        }
    }
    if state.counts.written.len() != state.files.len() {
        state.counts.written.resize(state.files.len(), 0);
    }
    Ok(Some((state, opened)))
}

/// Runs the opened pass until every line is committed, the run is told to
/// stop, or it fails.
pub async fn run<P: RecordPhase>(
    run: &RunContext,
    phase: Arc<P>,
    mut state: PhaseState,
    mut outputs: Vec<Output>,
    processor: Processor<P>,
) -> Result<PassEnd, String> {
    let input = state.input.clone().expect("an opened pass has its input");
    let reader = reopen_input(&input, &state.cursor, phase.max_line_bytes())?;
    let duplicates: HashSet<u64> = run
        .store
        .phase_duplicates(run.task, duplicates_key(run, state.pass), state.cursor.next)
        .await
        .map_err(|e| format!("cannot load the checkpoint: {e}"))?
        .into_iter()
        .collect();
    let mut stats = state.stats::<P::Stats>()?;
    if state.counts.written.is_empty() {
        state.counts.written = vec![0; outputs.len()];
    }

    // Room for what arrives while a checkpoint syncs: a request that finished
    // waits here for a place, not to send its next request. A CPU worker's
    // message is a batch of up to CPU_BATCH lines, so fewer of those.
    let room = match &processor {
        Processor::Async { .. } => DRAIN,
        Processor::Cpu { .. } => 64,
    };
    let (done_tx, done_rx) = mpsc::channel::<(u64, DoneLines<P::Output>)>(room);
    let feed = Feed {
        phase: phase.clone(),
        reader,
        cursor: state.cursor.clone(),
        lines: input.lines,
        shard: input.shard,
        duplicates,
        done_tx,
    };
    let mut workers = tokio::task::JoinSet::new();
    let (reading, ordered) = match processor {
        Processor::Async {
            concurrency,
            process,
        } => (feed_async(feed, concurrency, process, &mut workers), false),
        Processor::Cpu { threads, process } => {
            (feed_cpu(feed, threads, process, &mut workers), true)
        }
    };

    let mut committer = Committer {
        run,
        progress: Progress::new(&state.cursor),
        outputs: std::mem::take(&mut outputs),
        state: &mut state,
        input: &input,
        batch: 0,
        last: Instant::now(),
        last_progress: None,
        started: Instant::now(),
        committed_at_start: 0,
        commits: run.telemetry.checkpoints(run.task, run.kind.as_str()),
        delays: run.telemetry.record_commits(run.task, run.kind.as_str()),
        arrived: Vec::new(),
    };
    committer.committed_at_start = input.own_committed(&committer.state.cursor);
    let drained = commit_arrivals(&mut committer, &*phase, &mut stats, done_rx, ordered).await;
    workers.abort_all();
    let Some(held_back) = drained? else {
        // What is appended but not committed is cut on resume.
        return Ok(PassEnd::Stopped);
    };
    reading
        .await
        .map_err(|e| format!("the input reader failed: {e}"))?
        .map_err(io_error(&format!("cannot read {}", input.path.display())))?;
    let reached = committer.progress.snapshot();
    if held_back > 0 || reached.next != input.lines + 1 || !reached.ahead.is_empty() {
        return Err(format!(
            "{} ended at line {} of the {} it had when the pass started; it was cut meanwhile",
            input.path.display(),
            reached.next - 1,
            input.lines
        ));
    }
    committer.state.complete = true;
    committer.batch += 1; // force the final commit even if the last batch was committed
    committer.last_progress = None; // and report where it ended
    if !committer.checkpoint(&*phase, &mut stats).await? {
        return Ok(PassEnd::Stopped);
    }
    let outputs = std::mem::take(&mut committer.outputs);
    Ok(PassEnd::Complete(Box::new(state), outputs))
}

/// The pass's input, opened again at the checkpoint `cursor`; refused if
/// the file changed since the pass surveyed it, since its committed line
/// numbers would no longer mean the same lines.
fn reopen_input(
    input: &InputState,
    cursor: &super::cursor::Cursor,
    max_line_bytes: usize,
) -> Result<LineReader, String> {
    let cannot_read = format!("cannot read {}", input.path.display());
    let reader = LineReader::open(&input.path, cursor.offset, cursor.next, max_line_bytes)
        .map_err(io_error(&cannot_read))?;
    let now = super::files::InputIdentity::of(reader.file()).map_err(io_error(&cannot_read))?;
    if now != input.identity {
        return Err(format!(
            "{} changed since this pass started ({} bytes then, {} now); its committed line \
             numbers would no longer mean the same lines. Restore it, or start a new task",
            input.path.display(),
            input.identity.len,
            now.len
        ));
    }
    Ok(reader)
}

/// What the reader and the workers share: where the lines to do come from,
/// and where what each came to goes.
struct Feed<P: RecordPhase> {
    phase: Arc<P>,
    reader: LineReader,
    /// The committed lines, skipped.
    cursor: super::cursor::Cursor,
    /// The lines the survey counted (lines appended since are not this pass's).
    lines: u64,
    /// The shard whose lines are this pass's; the others are skipped.
    shard: Option<todod_domain::shards::Shard>,
    /// Lines found to repeat an earlier record id, rejected.
    duplicates: HashSet<u64>,
    done_tx: mpsc::Sender<(u64, DoneLines<P::Output>)>,
}

/// The reader thread, whose end says whether the input read to its end.
type Reading = tokio::task::JoinHandle<io::Result<()>>;

/// Starts `concurrency` async requesters taking from one queue, fed by a
/// reader thread in batches; results are handed on as they finish.
fn feed_async<P: RecordPhase>(
    feed: Feed<P>,
    concurrency: usize,
    process: Arc<dyn Fn(P::Item) -> BoxFuture<P::Output> + Send + Sync>,
    workers: &mut tokio::task::JoinSet<()>,
) -> Reading {
    let Feed {
        phase,
        mut reader,
        cursor,
        lines,
        shard,
        duplicates,
        done_tx,
    } = feed;
    // Many requesters take from one queue.
    let (work_tx, work_rx) = async_channel::bounded::<(Line, P::Item)>(concurrency * 2);
    for _ in 0..concurrency {
        let (work_rx, done_tx, process) = (work_rx.clone(), done_tx.clone(), process.clone());
        workers.spawn(async move {
            loop {
                let Ok((line, item)) = work_rx.recv().await else {
                    return;
                };
                let output = process(item).await;
                if done_tx
                    .send((0, vec![(line, Done::Record(output))]))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
    }
    // The reader thread hands over lines in batches, and a task on the
    // run's own runtime deals them out: the thread then wakes once a batch,
    // not once a record.
    let (batch_tx, mut batch_rx) = mpsc::channel::<Vec<(Line, P::Item)>>(4);
    workers.spawn(async move {
        while let Some(batch) = batch_rx.recv().await {
            for item in batch {
                if work_tx.send(item).await.is_err() {
                    return;
                }
            }
        }
    });
    tokio::task::spawn_blocking(move || -> io::Result<()> {
        let mut batch = Vec::with_capacity(CPU_BATCH);
        let mut skipped = Vec::new();
        while let Some(raw) = next_to_do(&mut reader, &cursor, lines)? {
            let line = raw.line;
            if shard.is_some_and(|s| !s.owns(line.number)) {
                skipped.push((line, Done::Skipped));
                if skipped.len() >= CPU_BATCH
                    && done_tx
                        .blocking_send((0, std::mem::take(&mut skipped)))
                        .is_err()
                {
                    return Ok(());
                }
                continue;
            }
            match screen(&*phase, raw, &duplicates) {
                Ok(item) => batch.push((line, item)),
                Err(reason) => {
                    let reject = (0, vec![(line, Done::Rejected(reason))]);
                    if done_tx.blocking_send(reject).is_err() {
                        return Ok(()); // the run stopped
                    }
                }
            }
            if batch.len() >= CPU_BATCH
                && batch_tx.blocking_send(std::mem::take(&mut batch)).is_err()
            {
                return Ok(());
            }
        }
        if !batch.is_empty() {
            let _ = batch_tx.blocking_send(batch);
        }
        if !skipped.is_empty() {
            let _ = done_tx.blocking_send((0, skipped));
        }
        Ok(())
    })
}

/// Starts `threads` worker threads over numbered batches of lines from a
/// reader thread; each batch comes back under its number, so the
/// committer can keep the input's order.
fn feed_cpu<P: RecordPhase>(
    feed: Feed<P>,
    threads: usize,
    process: Arc<dyn Fn(P::Item) -> P::Output + Send + Sync>,
    workers: &mut tokio::task::JoinSet<()>,
) -> Reading {
    let Feed {
        phase,
        mut reader,
        cursor,
        lines,
        shard,
        duplicates,
        done_tx,
    } = feed;
    let (batch_tx, batch_rx) = std::sync::mpsc::sync_channel::<(u64, Vec<RawLine>)>(threads * 2);
    let batch_rx = Arc::new(Mutex::new(batch_rx));
    for _ in 0..threads.max(1) {
        let (batch_rx, done_tx, process, phase, duplicates) = (
            batch_rx.clone(),
            done_tx.clone(),
            process.clone(),
            phase.clone(),
            duplicates.clone(),
        );
        workers.spawn_blocking(move || loop {
            let next = batch_rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
            let Ok((seq, lines)) = next else { return };
            let done = lines
                .into_iter()
                .map(|raw| {
                    let line = raw.line;
                    if shard.is_some_and(|s| !s.owns(line.number)) {
                        return (line, Done::Skipped);
                    }
                    match screen(&*phase, raw, &duplicates) {
                        Ok(item) => (line, Done::Record(process(item))),
                        Err(reason) => (line, Done::Rejected(reason)),
                    }
                })
                .collect();
            if done_tx.blocking_send((seq, done)).is_err() {
                return;
            }
        });
    }
    tokio::task::spawn_blocking(move || -> io::Result<()> {
        let mut seq = 0u64;
        let mut batch = Vec::with_capacity(CPU_BATCH);
        let mut bytes = 0usize;
        while let Some(raw) = next_to_do(&mut reader, &cursor, lines)? {
            bytes += raw.bytes.len();
            batch.push(raw);
            if batch.len() >= CPU_BATCH || bytes >= 1 << 20 {
                if batch_tx.send((seq, std::mem::take(&mut batch))).is_err() {
                    return Ok(());
                }
                seq += 1;
                bytes = 0;
            }
        }
        if !batch.is_empty() {
            let _ = batch_tx.send((seq, batch));
        }
        Ok(())
    })
}

/// Takes what the workers finish (in line order when `ordered`: a worker
/// that was slow with one batch releases the batches held behind it at
/// once) and checkpoints every [`BATCH`] records or [`CHECKPOINT_EVERY`],
/// until every sender is gone. Returns how many batches were still held
/// back waiting for an earlier one then (none, unless the input was cut),
/// or `None` when the run was told to stop or lost its task.
async fn commit_arrivals<P: RecordPhase>(
    committer: &mut Committer<'_, '_>,
    phase: &P,
    stats: &mut P::Stats,
    mut done_rx: mpsc::Receiver<(u64, DoneLines<P::Output>)>,
    ordered: bool,
) -> Result<Option<usize>, String> {
    let mut pending: BTreeMap<u64, DoneLines<P::Output>> = BTreeMap::new();
    let mut next_seq = 0u64;
    let mut stop = committer.run.stop.clone();
    // One timer for the loop, moved on each time it fires (a timer made per
    // iteration went into the wheel and out again per record), and the
    // records that arrived meanwhile taken all at once.
    let tick = tokio::time::sleep(CHECKPOINT_EVERY);
    tokio::pin!(tick);
    let mut arrived = Vec::with_capacity(DRAIN);
    let mut ready = Vec::with_capacity(DRAIN);
    loop {
        let step = tokio::select! {
            n = done_rx.recv_many(&mut arrived, DRAIN) => Some(n),
            () = &mut tick => None,
            _ = super::stopped(&mut stop) => return Ok(None),
        };
        match step {
            Some(0) => return Ok(Some(pending.len())),
            Some(_) => {
                for (seq, done) in arrived.drain(..) {
                    if ordered {
                        pending.insert(seq, done);
                        while let Some(done) = pending.remove(&next_seq) {
                            next_seq += 1;
                            ready.push(done);
                        }
                    } else {
                        ready.push(done);
                    }
                }
                for done in ready.drain(..) {
                    committer.take(phase, done, stats)?;
                    // Checked per message, so that a checkpoint stays within
                    // BATCH (plus one message) however much arrived or was
                    // released at once.
                    if committer.due() {
                        if !committer.checkpoint(phase, stats).await? {
                            return Ok(None);
                        }
                        let next = tokio::time::Instant::from_std(committer.last);
                        tick.as_mut().reset(next + CHECKPOINT_EVERY);
                    }
                }
            }
            None => {
                if !committer.checkpoint(phase, stats).await? {
                    return Ok(None);
                }
                tick.as_mut()
                    .reset(tokio::time::Instant::now() + CHECKPOINT_EVERY);
            }
        }
    }
}

/// The next line not committed yet, among the `lines` the survey counted
/// (lines appended since are not this pass's).
fn next_to_do(
    reader: &mut LineReader,
    cursor: &super::cursor::Cursor,
    lines: u64,
) -> io::Result<Option<RawLine>> {
    while let Some(raw) = reader.next_line()? {
        if raw.line.number > lines {
            return Ok(None);
        }
        if !cursor.contains(raw.line.number) {
            return Ok(Some(raw));
        }
    }
    Ok(None)
}

/// Duplicates, over-long lines, then the phase's own parse.
fn screen<P: RecordPhase>(
    phase: &P,
    raw: RawLine,
    duplicates: &HashSet<u64>,
) -> Result<P::Item, String> {
    if raw.too_long {
        return Err(format!(
            "line is longer than {} bytes; it was not read",
            phase.max_line_bytes()
        ));
    }
    if duplicates.contains(&raw.line.number) {
        let id = phase
            .record_id(&raw.bytes, raw.line.number)
            .unwrap_or_default();
        return Err(format!("duplicate id {id:?}: an earlier line has it"));
    }
    phase.parse(&raw.bytes, raw.line.number)
}

struct Committer<'a, 'o> {
    run: &'a RunContext,
    progress: Progress,
    outputs: Vec<Output>,
    state: &'o mut PhaseState,
    input: &'a InputState,
    /// Lines taken since the last checkpoint.
    batch: usize,
    last: Instant,
    /// When progress was last reported; `None`: report at the next checkpoint.
    last_progress: Option<Instant>,
    started: Instant,
    committed_at_start: u64,
    /// How long each checkpoint took, files synced to the commit.
    commits: prometheus_client::metrics::histogram::Histogram,
    /// How long each record waited for its commit, and when the records of
    /// the batch being built arrived.
    delays: prometheus_client::metrics::histogram::Histogram,
    arrived: Vec<Instant>,
}

impl Committer<'_, '_> {
    fn take<P: RecordPhase>(
        &mut self,
        phase: &P,
        done: DoneLines<P::Output>,
        stats: &mut P::Stats,
    ) -> Result<(), String> {
        for (line, done) in done {
            todod_store::failpoint::hit("pipeline.write");
            let mut files = Files {
                outputs: &mut self.outputs,
                counts: &mut self.state.counts,
            };
            let written = match done {
                Done::Record(output) => {
                    self.arrived.push(Instant::now());
                    phase.write(line, output, &mut files, stats)
                }
                Done::Rejected(reason) => {
                    files.counts.rejected += 1;
                    phase.reject(line, &reason, &mut files, stats)
                }
                Done::Skipped => {
                    // Not counted in the batch: another shard's lines
                    // alone are no reason to commit (they are skipped
                    // again on a resume).
                    self.progress.mark(line);
                    continue;
                }
            };
            written
                .map_err(|e| format!("cannot write the output: {}", super::spec::plain_io(&e)))?;
            self.progress.mark(line);
            self.batch += 1;
        }
        Ok(())
    }

    fn due(&self) -> bool {
        self.batch >= BATCH || self.last.elapsed() >= CHECKPOINT_EVERY
    }

    /// fsyncs the files, then commits their lengths, the cursor and the
    /// counters (and, once a second, the progress) in one transaction.
    /// False if the run lost its task.
    async fn checkpoint<P: RecordPhase>(
        &mut self,
        phase: &P,
        stats: &mut P::Stats,
    ) -> Result<bool, String> {
        if self.batch == 0 {
            return Ok(true);
        }
        let began = Instant::now();
        // fsync off the async workers, so that requests go on meanwhile.
        let mut outputs = std::mem::take(&mut self.outputs);
        let (outputs, synced) = tokio::task::spawn_blocking(move || {
            let synced = outputs
                .iter_mut()
                .map(Output::sync)
                .collect::<io::Result<Vec<FileState>>>();
            (outputs, synced)
        })
        .await
        .map_err(|e| format!("syncing the output failed: {e}"))?;
        self.outputs = outputs;
        let synced =
            synced.map_err(|e| format!("cannot sync the output: {}", super::spec::plain_io(&e)))?;
        let mut next = self.state.clone();
        next.files = synced.clone();
        next.cursor = self.progress.snapshot();
        phase.before_commit(stats);
        next.set_stats(stats);
        let report = self
            .last_progress
            .is_none_or(|at| at.elapsed() >= PROGRESS_EVERY);
        let progress = report.then(|| self.progress_json(phase, stats, &next));
        let notice = progress
            .as_ref()
            .and_then(|p| phase.notice(p))
            .map(|(kind, value)| (kind, value.to_string()));
        let progress = progress.map(|p| p.to_string());
        match self
            .run
            .store
            .commit_phase_batch(
                self.run.task,
                &self.run.attempt,
                &next.to_json(),
                progress.as_deref(),
                notice.as_ref().map(|(kind, value)| (*kind, value.as_str())),
            )
            .await
        {
            Ok(()) => {}
            Err(e) => return refused(e).map(|()| false),
        }
        self.commits.observe(began.elapsed().as_secs_f64());
        let committed = Instant::now();
        for at in self.arrived.drain(..) {
            self.delays
                .observe(committed.saturating_duration_since(at).as_secs_f64());
        }
        for (output, state) in self.outputs.iter_mut().zip(synced) {
            output.committed(state);
        }
        *self.state = next;
        self.batch = 0;
        self.last = Instant::now();
        if report {
            self.last_progress = Some(Instant::now());
        }
        Ok(true)
    }

    /// The phase's progress, with this run's rate and the time left.
    fn progress_json<P: RecordPhase>(
        &self,
        phase: &P,
        stats: &P::Stats,
        next: &PhaseState,
    ) -> Value {
        // A shard's progress counts its own lines only.
        let own = InputState {
            lines: self.input.own_lines(),
            ..self.input.clone()
        };
        let mut progress = phase.progress(stats, &next.counts, &own);
        let committed = self.input.own_committed(&next.cursor);
        let lines_now = committed.saturating_sub(self.committed_at_start);
        let elapsed = self.started.elapsed().as_secs_f64().max(0.001);
        let rate = lines_now as f64 / elapsed;
        let left = own.lines.saturating_sub(committed) as f64;
        ProgressCounts {
            rate_per_second: Some(rate),
            eta_seconds: Some(if rate > 0.0 { (left / rate) as i64 } else { 0 }),
            ..ProgressCounts::default()
        }
        .merge_into(&mut progress);
        progress
    }
}

/// Writes the usual reject line: `{"line", "id", "reason"}`.
pub fn reject_line(
    files: &mut Files<'_>,
    index: usize,
    line: Line,
    id: Option<String>,
    reason: &str,
) -> io::Result<()> {
    let mut value = json!({"line": line.number, "reason": reason});
    if let Some(id) = id {
        value["id"] = json!(id);
    }
    files.line(index, &value)
}

#[cfg(test)]
mod tests {
    use super::refused;
    use todod_store::{Error, Failure};

    /// A run that took a task over opens its files without waiting on the
    /// holder it took them from: a committed file that holder still locks
    /// is forked, an empty one it created but never committed is replaced.
    /// Alone on a database the lock's holder is a stranger: refused.
    #[test]
    fn files_another_process_holds_are_forked_or_replaced_only_on_a_shared_store() {
        use super::super::files::tests::committed_output;
        use super::super::files::{Existing, FileState, Output, RealFs};
        use super::{open_outputs, Opened};
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let committed_path = dir.path().join("out");
        let created_path = dir.path().join("failures");
        let (_holder, committed) = committed_output(&committed_path, b"one\n");
        // Created and locked, its identity never committed.
        let _created = Output::create(
            &RealFs,
            FileState::planned(created_path.clone()),
            Existing::Refuse,
            false,
        )
        .unwrap();
        let files = vec![committed.clone(), FileState::planned(created_path.clone())];

        let alone = open_outputs(&RealFs, files.clone(), Existing::Refuse, false)
            .err()
            .unwrap();
        assert_eq!(alone.kind(), std::io::ErrorKind::WouldBlock, "{alone}");

        let opened = open_outputs(&RealFs, files, Existing::Refuse, true).unwrap();
        let how: Vec<Opened> = opened.iter().map(|(_, how)| *how).collect();
        assert_eq!(how, [Opened::Forked, Opened::Created]);
        assert_ne!(opened[0].0.state().identity, committed.identity);
        assert_eq!(opened[0].0.state().committed, 4);
        let created = std::fs::symlink_metadata(&created_path).unwrap();
        assert_eq!(
            Some(created.ino()),
            opened[1].0.state().identity.map(|i| i.ino),
            "the held empty file was replaced by one of the run's own"
        );
    }

    /// A checkpoint the store refused stops the run (to be resumed) when the
    /// run lost its task or the database was busy or out of reach, and fails
    /// it only for anything else.
    #[test]
    fn a_refused_checkpoint_stops_the_run_unless_the_refusal_is_its_own() {
        let fenced = Error::Fenced {
            task: todod_domain::TaskId(1),
            attempt: "run.1".into(),
        };
        let busy = Error::Postgres {
            failure: Failure::Busy,
            code: "55P03".into(),
            message: "lock timeout".into(),
        };
        let lost = Error::Postgres {
            failure: Failure::Other,
            code: String::new(),
            message: "the connection to the database was lost".into(),
        };
        let overloaded = Error::Overloaded(std::time::Duration::from_secs(60));
        for stops in [fenced, busy, lost, overloaded] {
            assert_eq!(refused(stops), Ok(()));
        }
        let corrupt = refused(Error::Corrupt("bad row".into())).unwrap_err();
        assert!(
            corrupt.starts_with("cannot commit the checkpoint"),
            "{corrupt}"
        );
        let constraint = Error::Postgres {
            failure: Failure::Constraint,
            code: "23505".into(),
            message: "duplicate".into(),
        };
        assert!(refused(constraint).is_err());
    }
}
