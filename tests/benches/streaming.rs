//! Generation against the floor of its server (issue "One phase runtime"):
//! `bench/mock_server.py`, an instant OpenAI-compatible mock, is measured by
//! `wrk` at concurrency 64, streamed and not (the most any client can get
//! from it on this machine), then todod generates against the same mock at
//! the same concurrency, durable checkpoints included. The ratio is the
//! figure; both are measured in this run. Run with:
//!
//!     apt-get install -y wrk
//!     cargo build --release -p todod && cargo bench -p todod-e2e --bench streaming
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use todod_e2e::{create_generation, wait_task, RealDaemon};

const CONCURRENCY: usize = 64;
const SECONDS: u64 = 10;
const ROUNDS: usize = 3;

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// wrk's requests per second against `url`.
fn wrk(url: &str, stream: bool) -> f64 {
    let out = Command::new("wrk")
        .args([
            "-t2",
            &format!("-c{CONCURRENCY}"),
            &format!("-d{SECONDS}s"),
            "-s",
        ])
        .arg(repo().join("bench/wrk_chat.lua"))
        .arg(url)
        .env("WRK_STREAM", stream.to_string())
        .output()
        .expect("wrk (apt-get install -y wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("non-200 responses: 0"), "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or_else(|| panic!("no rate in wrk's output: {text}"))
}

fn write_prompts(path: &Path, n: usize) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..n {
        let line = json!({"id": format!("p{i}"), "messages": [{"role": "user", "content": format!("question {i}")}]});
        writeln!(file, "{line}").unwrap();
    }
}

/// todod's records per second against `url`, from creating the task to
/// seeing it completed: the real release binary.
async fn todod(url: &str, stream: bool, n: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let data = std::fs::canonicalize(dir.path()).unwrap();
    write_prompts(&data.join("prompts.jsonl"), n);
    let state = tempfile::tempdir().unwrap();
    let daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let spec = json!({
        "prompts": data.join("prompts.jsonl"), "output": data.join("out.jsonl"),
        "endpoints": [url], "model": "mock-model", "max_tokens": 32,
        "concurrency": CONCURRENCY, "stream": stream, "params": {"temperature": 0.0},
    });
    let started = Instant::now();
    let id = create_generation(&mut c, "bench", spec.to_string()).await;
    let task = wait_task(&mut c, "bench", &id, |t| {
        t.status == "completed" || t.status == "failed"
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let rate = n as f64 / started.elapsed().as_secs_f64();
    drop(c);
    drop(daemon);
    rate
}

#[tokio::main]
async fn main() {
    let mut mock = Command::new("python3")
        .arg(repo().join("bench/mock_server.py"))
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(mock.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("mock said {line:?}"))
        .to_string();
    // Let the interpreter warm up before anything is measured.
    std::thread::sleep(Duration::from_millis(300));

    // The machine is shared: floor and todod alternate, three rounds, and
    // the medians are compared.
    println!("| measure | floor (wrk), 3 rounds | todod, 3 rounds | median ratio | target |");
    println!("|---|---|---|---|---|");
    for stream in [true, false] {
        let (mut floors, mut rates) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let floor = wrk(&url, stream);
            // About as many records as the floor would serve in the same time.
            let n = (floor * SECONDS as f64) as usize;
            floors.push(floor);
            rates.push(todod(&url, stream, n).await);
        }
        let show = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "| {} chat, concurrency {CONCURRENCY} | {} req/s | {} records/s | **{:.2}** | >= 0.8 |",
            if stream { "streamed" } else { "not streamed" },
            show(&floors),
            show(&rates),
            median(&rates) / median(&floors)
        );
    }
    let _ = mock.kill();
    let _ = mock.wait();
}
