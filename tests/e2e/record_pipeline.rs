//! The record pipeline on its own, with a small phase of this test's own, on
//! a disk that forgets what was not fsynced when it "crashes" (`LossyFs`):
//! a run is dropped at random moments once it has committed progress (as a
//! kill would end it), the disk crashes, and the next run resumes. Every
//! record is written exactly once; with CPU processing the files are
//! byte-identical to an uninterrupted run.
//! A missing fsync before a commit makes these tests fail: the resumed run
//! finds its files shorter than the checkpoint says.
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use todod_domain::Kind;
use todod_e2e::lossy_fs::LossyFs;
use todod_e2e::rng::TestRng;
use todod_engine::phase::cursor::Line;
use todod_engine::phase::files::{Existing, SharedFs};
use todod_engine::phase::record_pipeline::{
    self, Files, PassEnd, PassPlan, Processor, RecordPhase,
};
use todod_engine::phase::state::{InputState, PassCounts, PhaseState};
use todod_engine::phase::{Boundaries, PhaseStore, RunContext};
use todod_store::{Store, WriteContext};

/// `{"id": "r7", "n": 7}` becomes `{"id": "r7", "square": 49}`.
struct Squares;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
struct Stats {
    records: u64,
    rejected: u64,
    sum: i64,
}

const OUT: usize = 0;
const REJECTS: usize = 1;

impl RecordPhase for Squares {
    type Item = (String, i64);
    type Output = (String, i64);
    type Stats = Stats;

    fn record_id(&self, line: &[u8], _number: u64) -> Option<String> {
        todod_engine::phase::lines::json_field(line, "id")
            .as_ref()
            .and_then(todod_engine::phase::lines::id_text)
    }

    fn parse(&self, bytes: &[u8], _number: u64) -> Result<(String, i64), String> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
        let id = value["id"].as_str().ok_or("no id")?.to_string();
        let n = value["n"].as_i64().ok_or("no n")?;
        Ok((id, n))
    }

    fn write(
        &self,
        _line: Line,
        (id, square): (String, i64),
        files: &mut Files<'_>,
        stats: &mut Stats,
    ) -> io::Result<()> {
        stats.records += 1;
        stats.sum += square;
        files.line(OUT, &json!({"id": id, "square": square}))
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
        json!({"done": stats.records, "rejected": stats.rejected, "total": input.lines})
    }
}

/// Input lines: mostly good, some bad, some repeating an earlier id.
fn write_input(path: &Path, lines: usize) -> Vec<i64> {
    let mut text = String::new();
    let mut expected = Vec::new();
    for i in 0..lines {
        match i % 97 {
            13 => text.push_str("not json\n"),
            29 => text.push_str(&format!("{{\"id\": \"r{}\", \"n\": 1}}\n", i - 1)),
            _ => {
                text.push_str(&format!("{{\"id\": \"r{i}\", \"n\": {i}}}\n"));
                expected.push(i as i64);
            }
        }
    }
    std::fs::write(path, text).unwrap();
    expected
}

struct Bench {
    _dir: tempfile::TempDir,
    input: PathBuf,
    out: PathBuf,
    rejects: PathBuf,
    fs: LossyFs,
    context: RunContext,
    /// Kept so that the runs' stop signal stays false.
    _stop: tokio::sync::watch::Sender<bool>,
}

/// A store with one phase task held by an attempt, and a lossy disk.
async fn bench(lines: usize) -> (Bench, Vec<i64>) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let expected = write_input(&input, lines);
    let store = Store::open_for_test(dir.path()).await.unwrap();
    let ctx = WriteContext::default();
    store.create_plan("p", "", &ctx).await.unwrap();
    let attempt = "test-run.1".to_string();
    let task =
        todod_e2e::abandoned_phase(&store, "p", Kind::named("tokenization"), "{}", &attempt).await;
    let fs = LossyFs::new();
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let context = RunContext {
        task,
        kind: Kind::named("tokenization"),
        attempt,
        shard: None,
        spec: "{}".into(),
        store: PhaseStore::new(store.clone()),
        stop,
        fs: Arc::new(fs.clone()) as SharedFs,
        bounds: Arc::new(Boundaries::default()),
        gates: Default::default(),
        telemetry: Default::default(),
        servers: todod_engine::phase::servers::Servers::new(
            PhaseStore::new(store),
            dir.path().join("servers"),
            Default::default(),
        ),
    };
    let bench = Bench {
        out: PathBuf::from("/lossy/out.jsonl"),
        rejects: PathBuf::from("/lossy/rejects.jsonl"),
        _dir: dir,
        input,
        fs,
        context,
        _stop: stop_tx,
    };
    (bench, expected)
}

fn processor(cpu: bool, seed: u64) -> Processor<Squares> {
    if cpu {
        Processor::Cpu {
            threads: 2,
            process: Arc::new(|(id, n): (String, i64)| (id, n * n)),
        }
    } else {
        Processor::Async {
            concurrency: 16,
            process: Arc::new(move |(id, n): (String, i64)| {
                // Out of order: a pseudo-random delay per record.
                let wait = (n as u64).wrapping_mul(seed | 1) % 3;
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                    (id, n * n)
                }) as record_pipeline::BoxFuture<(String, i64)>
            }),
        }
    }
}

/// One run of the pass, from whatever the store holds.
async fn one_run(b: &Bench, cpu: bool, seed: u64) -> Result<Option<PhaseState>, String> {
    run_with(b, processor(cpu, seed)).await
}

/// One run of the pass with the given processor.
async fn run_with(b: &Bench, processor: Processor<Squares>) -> Result<Option<PhaseState>, String> {
    let state = PhaseState::load(&b.context.store, b.context.task)
        .await?
        .unwrap_or_default();
    if state.complete {
        return Ok(Some(state));
    }
    let plan = PassPlan {
        input: b.input.clone(),
        files: vec![b.out.clone(), b.rejects.clone()],
        existing: Existing::Refuse,
        shard: None,
    };
    let phase = Arc::new(Squares);
    let Some((state, outputs)) = record_pipeline::open(&b.context, &phase, state, &plan).await?
    else {
        return Ok(None);
    };
    match record_pipeline::run(&b.context, phase, state, outputs, processor).await? {
        PassEnd::Complete(state, _) => Ok(Some(*state)),
        PassEnd::Stopped => Ok(None),
    }
}

/// Waits for the run to commit progress past `last` lines (its progress
/// event: the store's signal); returns the lines committed then.
async fn committed_past(
    b: &Bench,
    events: &mut tokio::sync::watch::Receiver<i64>,
    last: u64,
) -> u64 {
    loop {
        events.changed().await.expect("the store is open");
        let state = PhaseState::load(&b.context.store, b.context.task)
            .await
            .unwrap()
            .unwrap_or_default();
        if state.cursor.committed() > last {
            return state.cursor.committed();
        }
    }
}

/// Runs to completion, crashing `crashes` times: each time the run has
/// committed progress past the last crash, it goes on for a random moment
/// and is dropped mid-flight (as a kill ends it), and the disk crashes.
/// Returns the final state and the lines committed at each crash; a run
/// that ends before all the crashes were made returns fewer.
async fn run_with_crashes(
    b: &Bench,
    cpu: bool,
    rng: &mut TestRng,
    crashes: usize,
) -> (PhaseState, Vec<u64>) {
    let mut crashed: Vec<u64> = Vec::new();
    loop {
        let run = one_run(b, cpu, rng.seed);
        if crashed.len() >= crashes {
            let state = run
                .await
                .unwrap_or_else(|e| panic!("run failed: {e} ({})", rng.replay()))
                .expect("an uninterrupted run completes");
            return (state, crashed);
        }
        tokio::pin!(run);
        let last = crashed.last().copied().unwrap_or(0);
        let mut events = b.context.store.subscribe();
        let ended = tokio::select! {
            ended = &mut run => Some(ended),
            at = committed_past(b, &mut events, last) => {
                let moment = Duration::from_millis(rng.below(3));
                match tokio::time::timeout(moment, &mut run).await {
                    Ok(ended) => Some(ended),
                    Err(_) => {
                        crashed.push(at);
                        None
                    }
                }
            }
        };
        match ended {
            Some(Ok(Some(state))) => return (state, crashed),
            Some(Ok(None)) => panic!("a run stopped on its own ({})", rng.replay()),
            Some(Err(e)) => panic!(
                "a run failed after {} crashes: {e} ({})",
                crashed.len(),
                rng.replay()
            ),
            // The run is dropped mid-flight, as a kill ends it; then the
            // power goes: what was not fsynced is gone.
            None => b.fs.crash(),
        }
    }
}

fn squares(fs: &LossyFs, path: &Path) -> Vec<(String, i64)> {
    let text = String::from_utf8(fs.read(path).unwrap_or_default()).unwrap();
    text.lines()
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("torn line {l:?}: {e}"));
            (
                v["id"].as_str().unwrap().to_string(),
                v["square"].as_i64().unwrap(),
            )
        })
        .collect()
}

async fn crashes_lose_and_repeat_nothing(cpu: bool) {
    let mut rng = TestRng::new(if cpu {
        "pipeline_cpu_crashes"
    } else {
        "pipeline_async_crashes"
    });
    // Every crash lands after the run committed a checkpoint past the last
    // (2,048 lines apart, a few more while the drop comes) and before it
    // ended: the input is long enough for all of them.
    const CRASHES: usize = 25;
    let lines: usize = if cpu { 200_000 } else { 80_000 };
    let (b, expected) = bench(lines).await;
    let (state, crashed) = run_with_crashes(&b, cpu, &mut rng, CRASHES).await;
    println!("{} crashes at {crashed:?} lines committed", crashed.len());
    assert_eq!(
        crashed.len(),
        CRASHES,
        "the run ended after {} crashes mid-run; make the input longer ({})",
        crashed.len(),
        rng.replay()
    );
    assert!(
        crashed.iter().all(|&at| at < lines as u64),
        "a crash after every line was committed: {crashed:?}"
    );
    let mut got = squares(&b.fs, &b.out);
    let stats: Stats = state.stats().unwrap();
    // The counters in the checkpoint are what the files hold.
    assert_eq!(stats.records as usize, got.len(), "{}", rng.replay());
    let rejects = String::from_utf8(b.fs.read(&b.rejects).unwrap()).unwrap();
    assert_eq!(
        stats.rejected as usize,
        rejects.lines().count(),
        "{}",
        rng.replay()
    );
    assert_eq!(state.counts.rejected, stats.rejected);
    got.sort_by_key(|(id, _)| id[1..].parse::<i64>().unwrap());
    let want: Vec<(String, i64)> = expected.iter().map(|n| (format!("r{n}"), n * n)).collect();
    assert_eq!(got.len(), want.len(), "{}", rng.replay());
    assert!(got == want, "records lost or repeated ({})", rng.replay());
    assert_eq!(stats.sum, want.iter().map(|(_, s)| s).sum::<i64>());

    if cpu {
        // Byte for byte what an uninterrupted run writes.
        let (clean, _) = bench(lines).await;
        run_with_crashes(&clean, cpu, &mut rng, 0).await;
        for (a, b_path) in [(&b.out, &clean.out), (&b.rejects, &clean.rejects)] {
            assert!(
                b.fs.read(a) == clean.fs.read(b_path),
                "{} differs from an uninterrupted run ({})",
                a.display(),
                rng.replay()
            );
        }
    }
}

/// The checkpoints the run has committed (the histogram `/metrics` shows).
fn checkpoints_committed(b: &Bench) -> u64 {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register(
        "checkpoints",
        "checkpoints committed",
        b.context
            .telemetry
            .checkpoints(b.context.task, b.context.kind.as_str()),
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("checkpoints_count "))
        .expect("the histogram's count")
        .parse()
        .unwrap()
}

/// A checkpoint holds at most `BATCH` lines and the message that crossed it
/// (`CPU_BATCH` lines on the CPU path, one record on the async one): at most
/// that much work is done again after a crash. So a run of N lines commits
/// at least N / (BATCH + CPU_BATCH) checkpoints; the time-driven ones (once
/// a second) only add to them. A committer that drained everything waiting
/// before looking whether a checkpoint was due made fewer, larger ones; so
/// did one that released, in one go, the batches held behind a slow CPU
/// worker (the second run here: one batch takes 300 ms while the other
/// worker goes on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_holds_at_most_a_batch_and_one_message() {
    const LINES: usize = 60_000;
    let slow_batch = Processor::Cpu {
        threads: 2,
        process: Arc::new(|(id, n): (String, i64)| {
            if n == 3 * record_pipeline::CPU_BATCH as i64 {
                std::thread::sleep(Duration::from_millis(300));
            }
            (id, n * n)
        }),
    };
    let runs = [
        ("cpu", processor(true, 7)),
        ("cpu, one slow batch", slow_batch),
        ("async", processor(false, 7)),
    ];
    for (what, processor) in runs {
        let (b, _) = bench(LINES).await;
        let state = run_with(&b, processor)
            .await
            .unwrap()
            .expect("the run completes");
        assert_eq!(state.cursor.committed(), LINES as u64);
        let least = LINES.div_ceil(record_pipeline::BATCH + record_pipeline::CPU_BATCH) as u64;
        let made = checkpoints_committed(&b);
        assert!(
            made >= least,
            "{what}: {made} checkpoints for {LINES} lines; at most {} lines each means at least {least}",
            record_pipeline::BATCH + record_pipeline::CPU_BATCH
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_records_survive_crashes_byte_for_byte() {
    crashes_lose_and_repeat_nothing(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_records_survive_crashes_exactly_once() {
    crashes_lose_and_repeat_nothing(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_ends_the_run_and_a_retry_loses_nothing() {
    let (b, expected) = bench(3_000).await;
    b.fs.set_space(Some(20_000));
    let err = one_run(&b, true, 1).await.expect_err("the disk is full");
    assert!(err.contains("No space left"), "{err}");
    // Space is freed; the next run resumes from what was committed.
    b.fs.set_space(None);
    b.fs.crash();
    let state = one_run(&b, true, 1).await.unwrap().expect("completes");
    let got = squares(&b.fs, &b.out);
    assert_eq!(got.len(), expected.len());
    assert_eq!(state.stats::<Stats>().unwrap().records as usize, got.len());
    let mut ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), expected.len(), "a record twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_lost_its_task_commits_nothing() {
    let (b, _) = bench(500).await;
    // Another attempt takes the task: this run's commits are refused.
    assert!(b
        .context
        .store
        .take_lease(b.context.task, "someone-else.1")
        .await
        .unwrap());
    assert!(one_run(&b, true, 1).await.unwrap().is_none());
    assert!(PhaseState::load(&b.context.store, b.context.task)
        .await
        .unwrap()
        .is_none());
    assert!(
        b.fs.paths().is_empty(),
        "files were created: {:?}",
        b.fs.paths()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_input_stops_the_resume() {
    let (b, _) = bench(2_000).await;
    // The pass is set up (survey and files committed), then the run dies.
    let plan = PassPlan {
        input: b.input.clone(),
        files: vec![b.out.clone(), b.rejects.clone()],
        existing: Existing::Refuse,
        shard: None,
    };
    let opened =
        record_pipeline::open(&b.context, &Arc::new(Squares), PhaseState::default(), &plan)
            .await
            .unwrap();
    assert!(opened.is_some());
    drop(opened);
    let mut text = std::fs::read_to_string(&b.input).unwrap();
    text.push_str("{\"id\": \"late\", \"n\": 1}\n");
    std::fs::write(&b.input, text).unwrap();
    let err = one_run(&b, true, 1).await.expect_err("refused");
    assert!(err.contains("changed since this pass started"), "{err}");
    assert_eq!(squares(&b.fs, &b.out).len(), 0, "nothing was written");
}
