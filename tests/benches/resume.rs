//! Resuming a big generation (issue "One phase runtime"): a 10M-prompt task
//! with 9M records committed, left in progress by a daemon that died. The
//! real release binary is started on it; the bench measures the time from
//! spawning it to the mock server receiving its first request, and the
//! daemon's peak RSS until 100k more records are written. Run with:
//!
//!     cargo build --release -p todod && cargo bench -p todod-e2e --bench resume
//!
//! It writes about 1.7 GB of files in a temporary directory beside the
//! working directory (`TODOD_BENCH_DIR` to put them elsewhere).
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use todod_e2e::mock_openai::{MockOpenAi, Settings};
use todod_e2e::{abandoned_generation, wait_task, RealDaemon};
use todod_engine::phase::cursor::Cursor;
use todod_engine::phase::files::{hex, FileState, Identity, InputIdentity, HEAD_BYTES};
use todod_engine::phase::state::{InputState, PassCounts, PhaseState};
use todod_store::{Store, WriteContext};

const TOTAL: u64 = 10_000_000;
const DONE: u64 = 9_000_000;
const MORE: i64 = 100_000;

fn identity(path: &Path) -> Identity {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap();
    Identity {
        dev: meta.dev(),
        ino: meta.ino(),
    }
}

fn file_state(path: &Path) -> FileState {
    let bytes = std::fs::metadata(path).unwrap().len();
    let head_len = HEAD_BYTES.min(bytes);
    let mut head = vec![0u8; head_len as usize];
    use std::io::Read;
    std::fs::File::open(path)
        .unwrap()
        .read_exact(&mut head)
        .unwrap();
    use sha2::Digest;
    FileState {
        path: path.to_path_buf(),
        identity: Some(identity(path)),
        committed: bytes,
        head: hex(&sha2::Sha256::digest(&head)),
        head_len,
    }
}

fn rss_kib(pid: u32) -> u64 {
    todod_telemetry::process::of::status_bytes(pid, "VmRSS").unwrap_or(0) / 1024
}

#[tokio::main]
async fn main() {
    let base = std::env::var_os("TODOD_BENCH_DIR").unwrap_or_else(|| ".".into());
    let dir = tempfile::tempdir_in(base).unwrap();
    let data = std::fs::canonicalize(dir.path()).unwrap();
    let state_dir = data.join("state");
    std::fs::create_dir(&state_dir).unwrap();
    let prompts = data.join("prompts.jsonl");
    let out = data.join("out.jsonl");
    let failures = data.join("out.jsonl.failures.jsonl");
    let rejects = data.join("out.jsonl.rejects.jsonl");

    // The files as a run that died at 9M would have left them.
    let started = Instant::now();
    let mut resume_offset = 0u64;
    {
        let mut p = BufWriter::with_capacity(1 << 20, std::fs::File::create(&prompts).unwrap());
        let mut o = BufWriter::with_capacity(1 << 20, std::fs::File::create(&out).unwrap());
        let mut offset = 0u64;
        for i in 0..TOTAL {
            if i == DONE {
                resume_offset = offset;
            }
            let line = format!(
                "{{\"id\":\"p{i}\",\"messages\":[{{\"role\":\"user\",\"content\":\"question {i}\"}}]}}\n"
            );
            offset += line.len() as u64;
            p.write_all(line.as_bytes()).unwrap();
            if i < DONE {
                let record = json!({"id": format!("p{i}"), "line": i + 1,
                    "content": format!("answer to: question {i}"), "finish_reason": "stop"});
                writeln!(o, "{record}").unwrap();
            }
        }
    }
    std::fs::File::create(&failures).unwrap();
    std::fs::File::create(&rejects).unwrap();
    eprintln!("files written in {:.1}s", started.elapsed().as_secs_f64());

    // The task and its checkpoint, held by a daemon run that is gone.
    let mock = MockOpenAi::start(Settings {
        keep_bodies: false,
        ..Settings::default()
    })
    .await;
    {
        let store = Store::open(&state_dir.join("todod.db")).await.unwrap();
        let ctx = WriteContext::default();
        store.create_plan("big", "", &ctx).await.unwrap();
        let spec = json!({"prompts": prompts, "output": out, "failures": failures,
            "rejects": rejects, "endpoints": [mock.url], "model": "mock-model",
            "concurrency": 64, "stream": false});
        let task = abandoned_generation(&store, "big", &spec, "dead-run.1").await;
        let input = std::fs::File::open(&prompts).unwrap();
        let mut state = PhaseState {
            input: Some(InputState {
                path: prompts.clone(),
                identity: InputIdentity::of(&input).unwrap(),
                lines: TOTAL,
                duplicates: 0,
                shard: None,
            }),
            cursor: Cursor {
                next: DONE + 1,
                offset: resume_offset,
                ahead: vec![],
            },
            files: vec![
                file_state(&out),
                file_state(&failures),
                file_state(&rejects),
            ],
            counts: PassCounts {
                written: vec![DONE, 0, 0],
                rejected: 0,
            },
            ..PhaseState::default()
        };
        state.stats = json!({"records": DONE, "failed": 0, "retrying": 0, "rejected": 0,
            "tokens": 0, "prompt_tokens": 0, "length_finishes": 0});
        store
            .commit_phase_state(task, "dead-run.1", &state.to_json(), Some((0, &[])))
            .await
            .unwrap();
        store.close().await;
    }

    let spawned = Instant::now();
    let daemon = RealDaemon::spawn(&state_dir);
    let pid = daemon.child.id();
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let peak = peak.clone();
        std::thread::spawn(move || loop {
            let kib = rss_kib(pid);
            if kib == 0 {
                return;
            }
            peak.fetch_max(kib, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(20));
        })
    };
    mock.wait_requests(1).await;
    let first = spawned.elapsed();
    let mut c = daemon.client().await;
    wait_task(&mut c, "big", "t1", |t| {
        t.progress
            .as_ref()
            .is_some_and(|p| p.done >= DONE as i64 + MORE)
    })
    .await;
    let rss = peak.load(Ordering::Relaxed) as f64 / 1024.0;
    drop(daemon);
    let _ = sampler.join();
    println!("| measure | result | target |");
    println!("|---|---|---|");
    println!(
        "| restart to the first new request, 10M-prompt task with 9M done (real binary) | **{:.0} ms** | < 2 s |",
        first.as_secs_f64() * 1000.0
    );
    println!(
        "| daemon peak RSS from the restart through {MORE} more records | **{rss:.1} MiB** | < 200 MB |"
    );
}
