//! What keeping the model's token ids costs (issue 48). Run with:
//!
//!     cargo build --release -p todod && cargo bench -p todod-e2e --bench token_ids
//!
//! The release daemon generates the same prompts against the mock in
//! vLLM's shape, with `token_ids: "off"` and `"auto"` (asked, kept) in
//! alternating rounds, non-streamed and streamed, and tokenizes each
//! output (the drift check runs on the records that kept ids). It prints
//! the medians: the daemon's CPU per record (from /proc: what keeping the
//! ids costs the daemon, whatever the mock's own speed), records/s of
//! each, and the bytes a record takes with and without the ids. The
//! answers are 100 to 300 tokens (`TODOD_BENCH_RECORDS` prompts a round,
//! 4,000 by default); the mock makes each answer's ids once, before the
//! rounds, so its own tokenizing is not what is measured, but it still
//! sends them, in the same process as this bench: on two cores its records/s
//! are the mock's as much as the daemon's.
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde_json::{json, Value};
use todod_e2e::fixtures::fixture;
use todod_e2e::mock_openai::{Dialect, MockOpenAi, MockTokenIds, Settings};
use todod_e2e::{run_phase_to_end, RealDaemon};

const ROUNDS: usize = 3;

fn write_prompts(path: &Path, n: usize) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..n {
        let line = json!({"id": format!("p{i}"),
            "messages": [{"role": "user", "content": format!("question {i} about the rivers of Europe")}]});
        writeln!(file, "{line}").unwrap();
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

struct Round {
    /// The daemon's CPU per generated record, microseconds.
    generation_cpu_us: f64,
    generation_rate: f64,
    tokenization_rate: f64,
    bytes_per_record: f64,
}

async fn round(
    daemon: &RealDaemon,
    dir: &Path,
    url: &str,
    n: usize,
    token_ids: &str,
    stream: bool,
    k: usize,
) -> Round {
    let mut c = daemon.client().await;
    let plan = format!("{token_ids}-{stream}-{k}");
    let output = dir.join(format!("{plan}.jsonl"));
    let spec = json!({"prompts": dir.join("prompts.jsonl"), "output": output,
        "endpoints": [url], "model": "mock-model", "max_tokens": 512, "concurrency": 64,
        "stream": stream, "token_ids": token_ids});
    let cpu = || todod_telemetry::process::of::cpu_seconds(daemon.child.id()).unwrap_or(0.0);
    let (started, cpu_before) = (Instant::now(), cpu());
    let task = run_phase_to_end(&mut c, &plan, "generation", &spec).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let generation_rate = n as f64 / started.elapsed().as_secs_f64();
    let generation_cpu_us = (cpu() - cpu_before) * 1e6 / n as f64;
    let bytes_per_record = std::fs::metadata(&output).unwrap().len() as f64 / n as f64;

    let tok_plan = format!("tok-{plan}");
    let spec = json!({"input": output, "tokenizer": fixture("smollm2"),
        "output_prefix": dir.join(&tok_plan), "mode": "conversation", "threads": 2,
        "drop_length_finishes": false});
    let started = Instant::now();
    let task = run_phase_to_end(&mut c, &tok_plan, "tokenization", &spec).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let tokenization_rate = n as f64 / started.elapsed().as_secs_f64();
    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    if token_ids == "auto" {
        assert_eq!(result["drift"]["checked"], n as u64, "{result}");
    }
    Round {
        generation_cpu_us,
        generation_rate,
        tokenization_rate,
        bytes_per_record,
    }
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("TODOD_BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    let mock = MockOpenAi::start(Settings {
        keep_bodies: false,
        output_tokens: Some((100, 300)),
        dialect: Dialect::Vllm,
        token_ids: Some(MockTokenIds::Hermes),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), n);
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let daemon = RealDaemon::spawn(&state);
    // The mock makes each answer's ids once: a warm-up round asks for all.
    round(&daemon, dir.path(), &mock.url, n, "auto", false, 0).await;

    println!("| mode | daemon CPU per record off / kept | ratio | records/s off / kept | tokenization records/s off / kept | bytes/record off / kept |");
    println!("|---|---|---|---|---|---|");
    for stream in [false, true] {
        let (mut off, mut kept) = (Vec::new(), Vec::new());
        for k in 1..=ROUNDS {
            off.push(round(&daemon, dir.path(), &mock.url, n, "off", stream, k).await);
            kept.push(round(&daemon, dir.path(), &mock.url, n, "auto", stream, k).await);
        }
        let rate = |rs: &[Round]| median(rs.iter().map(|r| r.generation_rate).collect());
        let cpu = |rs: &[Round]| median(rs.iter().map(|r| r.generation_cpu_us).collect());
        let tok = |rs: &[Round]| median(rs.iter().map(|r| r.tokenization_rate).collect());
        let bytes = |rs: &[Round]| median(rs.iter().map(|r| r.bytes_per_record).collect());
        println!(
            "| {} | {:.0} / {:.0} us | **{:.2}** | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} |",
            if stream { "streamed" } else { "not streamed" },
            cpu(&off),
            cpu(&kept),
            cpu(&kept) / cpu(&off),
            rate(&off),
            rate(&kept),
            tok(&off),
            tok(&kept),
            bytes(&off),
            bytes(&kept),
        );
    }
}
