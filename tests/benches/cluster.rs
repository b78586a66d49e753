//! One todod in front of a whole cluster (issue "One controller at cluster
//! scale"): one generation over 64 endpoints of the fast mock
//! (`tests/support/fast_mock.rs`, hyper, a process of its own), 256
//! requests in flight on each (16,384), against the floor: a Rust load
//! generator (hyper, one connection per request in flight, each reading its
//! whole answer) on the same endpoints at the same concurrency, in the same
//! run. Then one endpoint at 64 in flight, streamed. Run with:
//!
//!     cargo build --release -p todod && cargo bench -p todod-e2e --bench cluster
//!
//! `TODOD_BENCH_LATENCY_MS` (default 1000: a GPU server answers in seconds;
//! `TODOD_BENCH_SINGLE_LATENCY_MS`, 50, for the one endpoint),
//! `TODOD_BENCH_TOKENS` (32 an answer) and `TODOD_BENCH_CHUNK` (4 tokens an
//! SSE event) set the mock; `TODOD_BENCH_SECONDS` (20) how long each side
//! runs; `TODOD_BENCH_ONLY` picks the scenarios whose names contain it.
//! Prints a Markdown table: records/s against the floor, the daemon's
//! CPU per record, its peak RSS, and the p99 of the time from an answer's
//! last byte to its record's commit (from its `/metrics`).
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use todod_e2e::gen::write_prompts;
use todod_e2e::{create_generation, wait_task, RealDaemon};
use todod_telemetry::process;

fn env(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Mock {
    child: Child,
    urls: Vec<String>,
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn mock(endpoints: usize, latency_ms: f64) -> Mock {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fast-mock"))
        .args(["--endpoints", &endpoints.to_string()])
        .args(["--latency-ms", &latency_ms.to_string()])
        .args(["--tokens", &env("TODOD_BENCH_TOKENS", 32.0).to_string()])
        .args(["--chunk", &env("TODOD_BENCH_CHUNK", 4.0).to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start fast-mock");
    let mut urls = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line == "ready" {
            break;
        }
        urls.push(line.strip_prefix("listening on ").unwrap().to_string());
    }
    Mock { child, urls }
}

fn request(n: u64, stream: bool) -> String {
    json!({"model": "mock-model", "messages": [{"role": "user", "content": format!("question {n}")}],
           "max_tokens": 32, "stream": stream})
    .to_string()
}

/// Answers a second that `per` connections on each of `urls` get, each
/// sending its next request when its answer has been read whole, until
/// `seconds` have passed.
async fn floor(urls: &[String], per: usize, stream: bool, seconds: f64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for (e, url) in urls.iter().enumerate() {
        for k in 0..per {
            let (url, done) = (url.clone(), done.clone());
            tasks.spawn(async move {
                let host = url.strip_prefix("http://").unwrap().to_string();
                let mut n = (e * per + k) as u64 * 1_000_000;
                let mut sender = None;
                while Instant::now() < deadline {
                    // A connection kept alive, opened again when it fails
                    // (as any client at this scale has to).
                    let open = match sender.take() {
                        Some(s) => s,
                        None => {
                            let tcp = tokio::net::TcpStream::connect(&host)
                                .await
                                .expect("connect");
                            tcp.set_nodelay(true).unwrap();
                            let (s, conn) =
                                hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                                    .await
                                    .expect("handshake");
                            tokio::spawn(conn);
                            s
                        }
                    };
                    let mut s: hyper::client::conn::http1::SendRequest<Full<Bytes>> = open;
                    if s.ready().await.is_err() {
                        continue;
                    }
                    let req = hyper::Request::post("/v1/chat/completions")
                        .header("host", &host)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(request(n, stream))))
                        .unwrap();
                    let Ok(answer) = s.send_request(req).await else {
                        continue;
                    };
                    assert!(answer.status().is_success());
                    if answer.into_body().collect().await.is_err() {
                        continue;
                    }
                    sender = Some(s);
                    done.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            });
        }
    }
    while tasks.join_next().await.is_some() {}
    // As the daemon's rate is taken: every answer over the time until the
    // last one arrived, the start-up and the drain included.
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    process::of::cpu_seconds(pid).unwrap_or(0.0)
}

fn peak_rss_mib(pid: u32) -> f64 {
    process::of::status_bytes(pid, "VmHWM").unwrap_or(0) as f64 / (1024.0 * 1024.0)
}

/// The p99 of `todod_record_commit_delay_seconds` for `task`, from the
/// histogram's buckets (the upper bound of the bucket it falls in).
async fn commit_p99(daemon: &RealDaemon, task: &str) -> Option<f64> {
    let (_, text) = todod_e2e::scrape::get(daemon.addr, "/metrics", None).await;
    let mut buckets: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| l.starts_with("todod_record_commit_delay_seconds_bucket"))
        .filter(|l| l.contains(&format!("task=\"{task}\"")))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let count: f64 = l.rsplit(' ').next()?.parse().ok()?;
            Some((le, count))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    buckets
        .iter()
        .find(|(_, n)| *n >= 0.99 * total)
        .map(|(le, _)| *le)
}

struct Row {
    name: String,
    floor: f64,
    /// CPU a request of the floor took: the load generator's and the mock's.
    floor_cpu_us: (f64, f64),
    ours: f64,
    /// CPU a record took: the daemon's and the mock's.
    cpu_us: (f64, f64),
    rss: f64,
    p99: Option<f64>,
}

async fn scenario(name: &str, endpoints: usize, per: usize, stream: bool, latency_ms: f64) -> Row {
    let seconds = env("TODOD_BENCH_SECONDS", 20.0);
    let mock = mock(endpoints, latency_ms);
    let mock_pid = mock.child.id();
    let (own, mock_cpu) = (cpu_seconds(std::process::id()), cpu_seconds(mock_pid));
    let started = Instant::now();
    let floor = floor(&mock.urls, per, stream, seconds).await;
    let requests = floor * started.elapsed().as_secs_f64();
    let floor_cpu_us = (
        (cpu_seconds(std::process::id()) - own) / requests * 1e6,
        (cpu_seconds(mock_pid) - mock_cpu) / requests * 1e6,
    );
    let dir = tempfile::tempdir().unwrap();
    let records = ((floor * seconds) as usize).max(1000);
    let prompts = dir.path().join("prompts.jsonl");
    write_prompts(&prompts, records, false);
    let state = tempfile::tempdir().unwrap();
    let log = std::env::var("TODOD_BENCH_LOG").unwrap_or_else(|_| "warn".into());
    let daemon = RealDaemon::spawn_env(state.path(), &[], &[("RUST_LOG", &log)]);
    let pid = daemon.child.id();
    let mut c = daemon.client().await;
    let spec = json!({
        "prompts": prompts, "output": dir.path().join("out.jsonl"),
        "failures": dir.path().join("failures.jsonl"), "endpoints": mock.urls,
        "model": "mock-model", "max_tokens": 32, "stream": stream,
        "concurrency": endpoints * per, "request_deadline_seconds": 600,
    });
    let (cpu_before, mock_before) = (cpu_seconds(pid), cpu_seconds(mock_pid));
    let created = Instant::now();
    let id = create_generation(&mut c, "bench", spec.to_string()).await;
    if std::env::var_os("TODOD_BENCH_TRACE").is_some() {
        // The records committed over time, to see the start and the end.
        let (mut c, id) = (daemon.client().await, id.clone());
        tokio::spawn(async move {
            loop {
                // The daemon stops when the scenario ends.
                let Ok(t) = c
                    .get_task(todod_e2e::proto::GetTaskRequest { id: id.clone() })
                    .await
                else {
                    break;
                };
                let t = t.into_inner();
                let done = t.progress.map_or(0, |p| p.done);
                eprintln!(
                    "{:6.2} s {:>8} {}",
                    created.elapsed().as_secs_f64(),
                    done,
                    t.status
                );
                if t.status == "completed" {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
    }
    let task = wait_task(&mut c, "bench", &id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let cpu = cpu_seconds(pid) - cpu_before;
    let mock_cpu = cpu_seconds(mock_pid) - mock_before;
    let at = |t: &str| humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).unwrap();
    let took = at(&task.finished_at)
        .duration_since(at(&task.started_at))
        .unwrap()
        .as_secs_f64();
    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    assert_eq!(result["records"], records, "{result}");
    Row {
        name: name.into(),
        floor,
        floor_cpu_us,
        ours: records as f64 / took,
        cpu_us: (cpu / records as f64 * 1e6, mock_cpu / records as f64 * 1e6),
        rss: peak_rss_mib(pid),
        p99: commit_p99(&daemon, &id).await,
    }
}

#[tokio::main]
async fn main() {
    let latency = env("TODOD_BENCH_LATENCY_MS", 1000.0);
    let single = env("TODOD_BENCH_SINGLE_LATENCY_MS", 50.0);
    let only = std::env::var("TODOD_BENCH_ONLY").unwrap_or_default();
    let mut rows = Vec::new();
    for (name, endpoints, per, stream, latency) in [
        ("64 endpoints x 256, streamed", 64, 256, true, latency),
        ("64 endpoints x 256, not streamed", 64, 256, false, latency),
        ("1 endpoint x 64, streamed", 1, 64, true, single),
    ] {
        if !name.contains(&only) {
            continue;
        }
        let row = scenario(name, endpoints, per, stream, latency).await;
        eprintln!(
            "{}: floor {:.0}/s, todod {:.0}/s",
            row.name, row.floor, row.ours
        );
        rows.push(row);
    }
    println!(
        "mock: latency {latency} ms (one endpoint: {single} ms), {} tokens an answer, {} a streamed event\n",
        env("TODOD_BENCH_TOKENS", 32.0),
        env("TODOD_BENCH_CHUNK", 4.0)
    );
    println!("| scenario | floor (req/s) | todod (records/s) | ratio | CPU per record: todod (mock) | CPU per request: load generator (mock) | peak RSS | last byte to commit, p99 |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        println!(
            "| {} | {:.0} | {:.0} | **{:.2}** | {:.0} µs ({:.0} µs) | {:.0} µs ({:.0} µs) | {:.0} MiB | {} |",
            r.name,
            r.floor,
            r.ours,
            r.ours / r.floor,
            r.cpu_us.0,
            r.cpu_us.1,
            r.floor_cpu_us.0,
            r.floor_cpu_us.1,
            r.rss,
            r.p99.map_or("-".into(), |p| format!("≤ {:.0} ms", p * 1000.0))
        );
    }
}
