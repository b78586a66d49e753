//! Generation against the floor of its server (issue "One phase runtime",
//! issue 46 part 5): an instant OpenAI-compatible mock is measured by `wrk`
//! at concurrency 64, streamed and not (the most any client can get from it
//! on this machine), then todod generates against the same mock at the same
//! concurrency, durable checkpoints included. The ratio is the figure; both
//! are measured in this run. Three servers with the same answers:
//! `bench/mock_server.py` (stdlib asyncio), `bench/aiohttp_server.py`
//! (aiohttp) and the hyper test server (`fast_mock`). Run with:
//!
//!     apt-get install -y wrk python3-aiohttp
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
/// seeing it completed (the real release binary), and the daemon's CPU time
/// (user and system) per record, in microseconds.
async fn todod(url: &str, stream: bool, n: usize) -> (f64, f64) {
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
    let cpu = todod_telemetry::process::of::cpu_seconds(daemon.child.id()).unwrap_or(0.0);
    drop(c);
    drop(daemon);
    (rate, cpu * 1e6 / n as f64)
}

/// A server the floor and todod are measured against.
enum Server {
    /// A Python server, its process.
    Python(std::process::Child),
    /// The hyper test server, in this process (serving until dropped).
    Hyper {
        _mock: todod_e2e::fast_mock::FastMock,
    },
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Server::Python(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An interpreter that can import `module`: `python3` on the path, else
/// Debian's (`apt-get install -y python3-aiohttp` installs for that one).
fn python_with(module: &str) -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|python| {
        Command::new(python)
            .args(["-c", &format!("import {module}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Starts `bench/SCRIPT` and reads the URL it says it listens on.
fn start_python(python: &str, script: &str) -> (Server, String) {
    let mut child = Command::new(python)
        .arg(repo().join("bench").join(script))
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{script} said {line:?}"))
        .to_string();
    // Let the interpreter warm up before anything is measured.
    std::thread::sleep(Duration::from_millis(300));
    (Server::Python(child), url)
}

/// The servers by name: the stdlib asyncio mock, the same answers from
/// aiohttp (skipped, saying so, without aiohttp), and the hyper test
/// server. Servers differ in how they pace and close connections.
async fn start(name: &str) -> Option<(Server, String)> {
    match name {
        "asyncio" => Some(start_python("python3", "mock_server.py")),
        "aiohttp" => match python_with("aiohttp") {
            Some(python) => Some(start_python(python, "aiohttp_server.py")),
            None => {
                eprintln!("aiohttp is missing (apt-get install -y python3-aiohttp): skipped");
                None
            }
        },
        "hyper" => {
            let mock = todod_e2e::fast_mock::FastMock::start(
                1,
                todod_e2e::fast_mock::FastSettings::default(),
            )
            .await;
            let url = mock.urls[0].clone();
            Some((Server::Hyper { _mock: mock }, url))
        }
        other => panic!("no server {other}"),
    }
}

#[tokio::main]
async fn main() {
    // `TODOD_BENCH_SERVERS=asyncio,aiohttp,hyper` (the default) picks them.
    let records: Option<usize> = std::env::var("TODOD_BENCH_RECORDS")
        .ok()
        .map(|n| n.parse().expect("TODOD_BENCH_RECORDS: a number"));
    let servers =
        std::env::var("TODOD_BENCH_SERVERS").unwrap_or_else(|_| "asyncio,aiohttp,hyper".into());
    // The machine is shared: floor and todod alternate, three rounds, and
    // the medians are compared.
    println!(
        "| server | measure | floor (wrk), {ROUNDS} rounds | todod, {ROUNDS} rounds | median ratio | todod CPU per record | target |"
    );
    println!("|---|---|---|---|---|---|---|");
    for name in servers.split(',') {
        let Some((_server, url)) = start(name).await else {
            continue;
        };
        for stream in [true, false] {
            let (mut floors, mut rates, mut cpus) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                let floor = wrk(&url, stream);
                // About as many records as the floor would serve in the same
                // time, or `TODOD_BENCH_RECORDS`.
                let n = records.unwrap_or((floor * SECONDS as f64) as usize);
                floors.push(floor);
                let (rate, cpu) = todod(&url, stream, n).await;
                rates.push(rate);
                cpus.push(cpu);
            }
            let show = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{x:.0}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            println!(
                "| {name} | {} chat, concurrency {CONCURRENCY} | {} req/s | {} records/s | **{:.2}** | {:.0} µs | >= 0.9 |",
                if stream { "streamed" } else { "not streamed" },
                show(&floors),
                show(&rates),
                median(&rates) / median(&floors),
                median(&cpus)
            );
        }
    }
}
