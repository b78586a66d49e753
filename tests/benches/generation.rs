//! Generation benchmarks (issue "Phase workers"). Run with:
//!
//!     cargo build --release -p todod && cargo bench -p todod-e2e --bench generation
//!
//! Needs `pip install openai` for the baseline. It prints a Markdown table:
//! records/s against an instant mock versus a plain AsyncOpenAI script at the
//! same concurrency (both in this run); throughput against a mock of fixed
//! capacity; time from restart to the first resumed request with 60k of 100k
//! records done; and the daemon's peak RSS through the 100k run.
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use todod_e2e::mock_openai::{MockOpenAi, Settings};
use todod_e2e::{create_generation, proto, wait_task, Client, RealDaemon, TestDaemon};

fn write_prompts(path: &Path, n: usize) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..n {
        let line = json!({"id": format!("p{i}"), "messages": [{"role": "user", "content": format!("question {i}")}]});
        writeln!(file, "{line}").unwrap();
    }
}

fn spec(dir: &Path, url: &str, concurrency: usize) -> String {
    json!({
        "prompts": dir.join("prompts.jsonl"), "output": dir.join("out.jsonl"),
        "endpoints": [url], "model": "mock-model", "max_tokens": 32,
        "concurrency": concurrency, "stream": false, "params": {"temperature": 0.0},
    })
    .to_string()
}

/// Follows events until `done(task)` holds; a failed run fails the bench.
async fn wait_until(c: &mut Client, plan: &str, task: &str, done: impl Fn(&proto::Task) -> bool) {
    let task = wait_task(c, plan, task, |t| t.status == "failed" || done(t)).await;
    assert_ne!(task.status, "failed", "{}", task.error);
}

fn rss_kib(pid: u32) -> u64 {
    todod_telemetry::process::of::status_bytes(pid, "VmRSS").unwrap_or(0) / 1024
}

/// Samples a process's RSS every 50 ms into `peak` until the process is gone.
fn watch_rss(pid: u32, peak: Arc<AtomicU64>) {
    std::thread::spawn(move || loop {
        let kib = rss_kib(pid);
        if kib == 0 {
            return;
        }
        peak.fetch_max(kib, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(50));
    });
}

#[tokio::main]
async fn main() {
    let mut rows: Vec<String> = Vec::new();

    // 1. Records/s against an instant mock, todod versus AsyncOpenAI.
    const N: usize = 5000;
    const CONCURRENCY: usize = 64;
    let mock = MockOpenAi::start(Settings {
        keep_bodies: false,
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), N);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let started = Instant::now();
    let id = create_generation(&mut c, "bench", spec(dir.path(), &mock.url, CONCURRENCY)).await;
    wait_until(&mut c, "bench", &id, |t| t.status == "completed").await;
    let todod_rate = N as f64 / started.elapsed().as_secs_f64();
    drop(c);
    daemon.stop().await;

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/openai_baseline.py");
    let baseline = Command::new("python3")
        .arg(&script)
        .args(["--base-url", &format!("{}/v1", mock.url)])
        .arg("--prompts")
        .arg(dir.path().join("prompts.jsonl"))
        .arg("--output")
        .arg(dir.path().join("baseline.jsonl"))
        .args(["--concurrency", &CONCURRENCY.to_string()])
        .output()
        .expect("python3");
    let baseline_rate: Option<f64> = String::from_utf8_lossy(&baseline.stdout)
        .split_whitespace()
        .last()
        .and_then(|r| r.parse().ok());
    match baseline_rate {
        Some(rate) => rows.push(format!(
            "| records/s, instant mock, {N} prompts, concurrency {CONCURRENCY} | todod {todod_rate:.0}/s (durable checkpoints) vs AsyncOpenAI script {rate:.0}/s: **{:.1}x** | >= 5x |",
            todod_rate / rate
        )),
        None => {
            eprintln!(
                "BASELINE NOT RUN: {} (pip install openai)",
                String::from_utf8_lossy(&baseline.stderr).lines().last().unwrap_or("")
            );
            rows.push(format!("| records/s, instant mock | todod {todod_rate:.0}/s; baseline not run | >= 5x |"));
        }
    }

    // 2. A mock of fixed capacity: 64 slots, 200 ms each = 320 requests/s.
    // (Long enough that the timer's millisecond rounding costs under 0.5%.)
    const SLOTS: usize = 64;
    const LATENCY_MS: u64 = 200;
    const M: usize = 3200;
    let limited = MockOpenAi::start(Settings {
        latency: Duration::from_millis(LATENCY_MS),
        capacity: SLOTS,
        keep_bodies: false,
        ..Settings::default()
    })
    .await;
    let dir2 = tempfile::tempdir().unwrap();
    write_prompts(&dir2.path().join("prompts.jsonl"), M);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let started = Instant::now();
    // Twice as many requests in flight as the server has slots, so that one
    // is always queued when a slot frees (as one runs a real server).
    let id = create_generation(
        &mut c,
        "capacity",
        spec(dir2.path(), &limited.url, 2 * SLOTS),
    )
    .await;
    wait_until(&mut c, "capacity", &id, |t| t.status == "completed").await;
    let achieved = M as f64 / started.elapsed().as_secs_f64();
    let capacity = SLOTS as f64 * 1000.0 / LATENCY_MS as f64;
    rows.push(format!(
        "| throughput against a mock of capacity {capacity:.0}/s ({SLOTS} slots x {LATENCY_MS} ms), {M} prompts, concurrency {} | {achieved:.1}/s = **{:.1}%** of capacity | >= 98% |",
        2 * SLOTS,
        achieved / capacity * 100.0
    ));
    drop(c);
    daemon.stop().await;

    // 3 and 4. The real binary on 100k prompts: kill -9 at 60k, restart.
    const BIG: usize = 100_000;
    let dir3 = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_prompts(&dir3.path().join("prompts.jsonl"), BIG);
    let peak = Arc::new(AtomicU64::new(0));
    let mut daemon = RealDaemon::spawn(state.path());
    watch_rss(daemon.child.id(), peak.clone());
    let mut c = daemon.client().await;
    let id = create_generation(&mut c, "big", spec(dir3.path(), &mock.url, CONCURRENCY)).await;
    wait_until(&mut c, "big", &id, |t| {
        t.progress.as_ref().is_some_and(|p| p.done >= 60_000)
    })
    .await;
    daemon.kill9();
    let before = mock.requests();
    let restarted = Instant::now();
    let daemon = RealDaemon::spawn(state.path());
    watch_rss(daemon.child.id(), peak.clone());
    mock.wait_requests(before + 1).await;
    let to_first = restarted.elapsed();
    let mut c = daemon.client().await;
    wait_until(&mut c, "big", &id, |t| t.status == "completed").await;
    rows.push(format!(
        "| restart to the first resumed request, 60k of 100k done | **{:.0} ms** | < 1 s |",
        to_first.as_secs_f64() * 1000.0
    ));
    rows.push(format!(
        "| daemon peak RSS through the 100k run (both processes) | **{:.1} MiB** | < 200 MB |",
        peak.load(Ordering::Relaxed) as f64 / 1024.0
    ));

    println!("| measure | result | target |");
    println!("|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}
