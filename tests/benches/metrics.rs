//! What serving metrics costs a generation (issue "Watch a days-long run").
//! Run with:
//!
//!     cargo bench -p todod-e2e --bench metrics
//!
//! The same generation (40k prompts, concurrency 64, an instant mock that
//! serves vLLM-shaped `/metrics`, which the daemon reads as it runs) with
//! nobody scraping the daemon, with a scraper at 1 s (a Prometheus set to a
//! short interval) and at 0.1 s (to make the cost visible); three rounds,
//! each starting with another mode (the run after a daemon's stop is slower
//! whatever it is), medians compared. Also the time one scrape takes
//! during the run. Prints a Markdown table.
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use todod_e2e::mock_openai::{MockOpenAi, ServerMetrics, Settings};
use todod_e2e::{create_generation, wait_task, TestDaemon};

const N: usize = 40_000;
const CONCURRENCY: usize = 64;
const ROUNDS: usize = 3;

fn write_prompts(path: &Path, n: usize) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..n {
        let line = json!({"id": format!("p{i}"), "messages": [{"role": "user", "content": format!("question {i}")}]});
        writeln!(file, "{line}").unwrap();
    }
}

/// One generation; with a scraper every `scrape`, if given. Its records/s
/// and the scrapes' durations.
async fn run(mock: &MockOpenAi, scrape: Option<Duration>) -> (f64, Vec<f64>) {
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), N);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let spec = json!({
        "prompts": dir.path().join("prompts.jsonl"), "output": dir.path().join("out.jsonl"),
        "endpoints": [mock.url], "model": "mock-model", "max_tokens": 32,
        "concurrency": CONCURRENCY, "stream": false, "params": {"temperature": 0.0},
    })
    .to_string();
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let addr = daemon.addr;
    let scraper = tokio::spawn(async move {
        let mut took = Vec::new();
        let Some(every) = scrape else {
            return took;
        };
        let client = reqwest::Client::new();
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopped.changed() => return took,
            }
            let began = Instant::now();
            let response = client
                .get(format!("http://{addr}/metrics"))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            let body = response.text().await.unwrap();
            assert!(body.ends_with("# EOF\n"));
            took.push(began.elapsed().as_secs_f64() * 1000.0);
        }
    });
    let started = Instant::now();
    let id = create_generation(&mut c, "bench", spec).await;
    let task = wait_task(&mut c, "bench", &id, |t| {
        t.status == "completed" || t.status == "failed"
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let rate = N as f64 / started.elapsed().as_secs_f64();
    let _ = stop.send(true);
    let took = scraper.await.unwrap();
    drop(c);
    daemon.stop().await;
    (rate, took)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let mock = MockOpenAi::start(Settings {
        keep_bodies: false,
        metrics: ServerMetrics::Vllm,
        ..Settings::default()
    })
    .await;
    let modes = [
        ("nobody scraping", None),
        ("a scraper at 1 s", Some(Duration::from_secs(1))),
        ("a scraper at 0.1 s", Some(Duration::from_millis(100))),
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut scrapes: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    // Warm-up: the first run of a process pays for page faults and caches.
    run(&mock, None).await;
    for round in 0..ROUNDS {
        for k in 0..modes.len() {
            let i = (round + k) % modes.len();
            let (rate, took) = run(&mock, modes[i].1).await;
            rates[i].push(rate);
            scrapes[i].extend(took);
        }
    }
    let base = median(rates[0].clone());
    println!("| generation, {N} prompts, concurrency {CONCURRENCY}, instant mock | records/s, {ROUNDS} rounds | median ratio to none | scrape time p50 (ms) |");
    println!("|---|---|---|---|");
    for (i, (name, _)) in modes.iter().enumerate() {
        let figures: Vec<String> = rates[i].iter().map(|r| format!("{r:.0}")).collect();
        let m = median(rates[i].clone());
        println!(
            "| {name} | {} | **{:.2}** | {} |",
            figures.join(" / "),
            m / base,
            if scrapes[i].is_empty() {
                "-".to_string()
            } else {
                format!(
                    "{:.2} ({} scrapes)",
                    median(scrapes[i].clone()),
                    scrapes[i].len()
                )
            }
        );
    }
}
