//! The filter phase on 100,000 answers against datasketch's MinHash and
//! MinHashLSH with the same parameters (`bench/filter_baseline.py`), in the
//! same run, on the same file. Run with:
//!
//!     cargo build --release -p todod && cargo bench -p todod-e2e --bench filter
//!
//! with `TODOD_BENCH_PYTHON` naming a Python that has datasketch (pip install
//! datasketch; default python3). The answers are 40 to 160 words drawn from
//! the repository's prompt sets, 5 % of them exact repeats of an earlier
//! one and 5 % near repeats (their last words changed). Prints a Markdown
//! table: records/s of the whole phase (read, check on 2 threads, write,
//! checkpoint) by the daemon's own clock, the baseline's, the ratio, what
//! each kept, and the daemon's RSS after the run.
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use todod_e2e::fixtures::fixture;
use todod_e2e::rng::TestRng;
use todod_e2e::{proto, wait_task, write_request, Client, RealDaemon};

const RECORDS: usize = 100_000;

fn vocabulary() -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for file in ["prompts/sharegpt.jsonl", "prompts/alpaca.jsonl"] {
        let Ok(text) = std::fs::read_to_string(fixture(file)) else {
            continue;
        };
        words.extend(
            text.split(|c: char| !c.is_alphanumeric())
                .filter(|w| w.len() > 2)
                .map(str::to_lowercase),
        );
    }
    words.sort();
    words.dedup();
    assert!(words.len() > 200, "too few words in the fixtures");
    words
}

fn write_answers(path: &Path, rng: &mut TestRng) {
    let words = vocabulary();
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut answers: Vec<String> = Vec::with_capacity(RECORDS);
    for i in 0..RECORDS {
        let content = match i % 20 {
            3 if i > 100 => answers[i - 97].to_uppercase(),
            11 if i > 100 => {
                let mut w: Vec<&str> = answers[i - 53].split(' ').collect();
                let n = w.len();
                w[n - 1] = "differently";
                w[n - 2] = "ended";
                w.join(" ")
            }
            _ => {
                let n = 40 + rng.below(121) as usize;
                (0..n)
                    .map(|_| words[rng.below(words.len() as u64) as usize].as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        };
        let record = json!({"id": format!("r{i}"), "messages": [{"role": "user", "content": "q"}],
            "content": content, "finish_reason": "stop"});
        writeln!(f, "{record}").unwrap();
        answers.push(content);
    }
}

async fn run_filter(c: &mut Client, input: &Path, output: &Path) -> (proto::Task, Duration) {
    c.write_todos(write_request("bench", vec![])).await.unwrap();
    let spec = json!({"input": input, "output": output, "threads": 2,
                      "near_duplicates": {"threshold": 0.8}});
    let id = c
        .create_task(proto::CreateTaskRequest {
            plan: "bench".into(),
            content: "bench filter".into(),
            kind: "filter".into(),
            spec_json: spec.to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    let wall = Instant::now();
    let task = wait_task(c, "bench", &id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let at = |t: &str| humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).unwrap();
    let took = at(&task.finished_at)
        .duration_since(at(&task.started_at))
        .unwrap_or(wall.elapsed());
    (task, took)
}

fn rss_mib(pid: u32) -> f64 {
    todod_telemetry::process::of::status_bytes(pid, "VmRSS").unwrap_or(0) as f64 / (1024.0 * 1024.0)
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("completions.jsonl");
    let mut rng = TestRng::new("filter_bench");
    write_answers(&input, &mut rng);
    let state = tempfile::tempdir().unwrap();
    let daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let (task, took) = run_filter(&mut c, &input, &dir.path().join("kept.jsonl")).await;
    let rss = rss_mib(daemon.child.id());
    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    let ours = RECORDS as f64 / took.as_secs_f64();
    let python = std::env::var("TODOD_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/filter_baseline.py");
    let out = Command::new(python)
        .arg(script)
        .arg(&input)
        .output()
        .unwrap();
    let baseline: Option<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok());
    println!("| run | records/s | kept | note |");
    println!("| --- | ---: | ---: | --- |");
    println!(
        "| todod filter (2 threads) | {ours:.0} | {} | {} s by the daemon's clock; removed {}; daemon RSS after {rss:.0} MiB |",
        result["records"],
        took.as_secs_f64().round(),
        result["removed_by_reason"]
    );
    match baseline {
        Some(b) => {
            let theirs = b["records_per_second"].as_f64().unwrap_or(0.0);
            println!(
                "| datasketch MinHash + MinHashLSH (1 process) | {theirs:.0} | {} | {:.0} s |",
                b["kept"],
                b["seconds"].as_f64().unwrap_or(0.0)
            );
            println!("\nratio todod / datasketch: {:.2}", ours / theirs.max(1e-9));
        }
        None => eprintln!(
            "BASELINE NOT RUN: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ),
    }
}
