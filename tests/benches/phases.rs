//! Benchmarks of the CPU phases (issues "tokenization" and "prompt
//! adaptation"), each against its Python baseline in the same run, on the
//! same texts and cores. Run with:
//!
//!     cargo build --release -p todod && cargo bench -p todod-e2e --bench phases
//!
//! The baselines are `bench/tokenize_baseline.py` (pip install tokenizers
//! tiktoken) and `bench/render_baseline.py` (pip install transformers
//! jinja2); `TODOD_BENCH_PYTHON` names the interpreter (default python3).
//! Prints a Markdown table:
//! - tokenization, the whole phase (read, tokenize, write .bin/.idx/Parquet,
//!   checkpoint) in tokens/s, SmolLM2's tokenizer.json and the Kimi-style
//!   tiktoken model, against `encode_batch` of the same texts, 2 threads;
//! - prompt adaptation rendering with Qwen3's and Kimi K2's templates, the
//!   whole phase in conversations/s, against transformers'
//!   `render_jinja_template`, one conversation a call;
//! - the daemon's RSS through a tokenization of 1M records, at 10% and at
//!   the end (bounded: it must not grow with the input).
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use todod_e2e::fixtures::fixture;
use todod_e2e::{proto, wait_task, write_request, Client, RealDaemon};

const REPEAT: usize = 100;

fn python() -> String {
    std::env::var("TODOD_BENCH_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../bench")
        .join(name)
}

/// Runs a baseline script; its last stdout line is JSON. `None` (and a loud
/// note) when the interpreter or its packages are missing.
fn baseline(args: &[&str]) -> Option<Value> {
    let out = Command::new(python()).args(args).output().ok()?;
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()?
        .to_string();
    match serde_json::from_str(&last) {
        Ok(v) => Some(v),
        Err(_) => {
            eprintln!(
                "BASELINE NOT RUN ({}): {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            None
        }
    }
}

async fn run_task(c: &mut Client, plan: &str, kind: &str, spec: Value) -> (proto::Task, Duration) {
    c.write_todos(write_request(plan, vec![])).await.unwrap();
    let started = Instant::now();
    let id = c
        .create_task(proto::CreateTaskRequest {
            plan: plan.into(),
            content: format!("bench {kind}"),
            kind: kind.into(),
            spec_json: spec.to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    let task = wait_task(c, plan, &id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await;
    let wall = started.elapsed();
    assert_eq!(task.status, "completed", "{}", task.error);
    // The phase's own time, by the daemon's clock: from its start to its
    // end (read, process, write, checkpoint, complete), without the
    // client's calls around it.
    let at = |t: &str| humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).unwrap();
    let took = at(&task.finished_at)
        .duration_since(at(&task.started_at))
        .unwrap_or(wall);
    (task, took)
}

fn rss_kib(pid: u32) -> u64 {
    todod_telemetry::process::of::status_bytes(pid, "VmRSS").unwrap_or(0) / 1024
}

#[tokio::main]
async fn main() {
    let mut rows: Vec<String> = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    // The same texts for both sides: the Qwen3-rendered prompt set, x100.
    let texts_path = dir.path().join("texts.jsonl");
    let rendered = std::fs::read_to_string(fixture("prompts/qwen3_rendered.jsonl")).unwrap();
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&texts_path).unwrap());
        let mut i = 0;
        for _ in 0..REPEAT {
            for line in rendered.lines() {
                let text = &serde_json::from_str::<Value>(line).unwrap()["text"];
                writeln!(f, "{}", json!({"id": format!("t{i}"), "text": text})).unwrap();
                i += 1;
            }
        }
    }
    // The release binary, as people run it (its allocator included).
    let state_dir = tempfile::tempdir().unwrap();
    let daemon = RealDaemon::spawn(state_dir.path());
    let mut c = daemon.client().await;

    for (name, model) in [
        ("SmolLM2 tokenizer.json", "smollm2"),
        ("Kimi-style tiktoken", "kimi_style"),
    ] {
        let model_dir = fixture(model);
        let prefix = dir.path().join(format!("tok-{model}"));
        let (task, took) = run_task(
            &mut c,
            &format!("tok-{model}"),
            "tokenization",
            json!({
                "input": texts_path, "tokenizer": model_dir, "output_prefix": prefix,
                "mode": "completion", "add_eos": false, "threads": 2,
            }),
        )
        .await;
        let result: Value = serde_json::from_str(&task.result_json).unwrap();
        let tokens = result["tokens"].as_f64().unwrap();
        let ours = tokens / took.as_secs_f64();
        let theirs = baseline(&[
            script("tokenize_baseline.py").to_str().unwrap(),
            "--texts",
            texts_path.to_str().unwrap(),
            "--model",
            model_dir.to_str().unwrap(),
            "--threads",
            "2",
        ]);
        let target = ">= 1.0x";
        rows.push(match theirs {
            Some(b) => {
                let rate = b["tokens_per_second"].as_f64().unwrap();
                format!(
                    "| tokenization, whole phase, {name}, {} texts, 2 threads | todod {:.2} Mtok/s ({:.0} tokens in {:.1} s) vs Python encode_batch {:.2} Mtok/s ({} tokens): **{:.2}x** | {target} |",
                    REPEAT * 300,
                    ours / 1e6,
                    tokens,
                    took.as_secs_f64(),
                    rate / 1e6,
                    b["tokens"],
                    ours / rate
                )
            }
            None => format!("| tokenization, {name} | todod {:.2} Mtok/s; baseline not run | {target} |", ours / 1e6),
        });
    }

    // Prompt adaptation: the 300 conversations x100, rendered.
    let convs_path = dir.path().join("convs.jsonl");
    {
        let base = std::fs::read_to_string(fixture("prompts/openai_messages.jsonl")).unwrap();
        let mut f = std::io::BufWriter::new(std::fs::File::create(&convs_path).unwrap());
        let mut i = 0;
        for _ in 0..REPEAT {
            for line in base.lines() {
                let mut v: Value = serde_json::from_str(line).unwrap();
                v["id"] = json!(format!("c{i}"));
                writeln!(f, "{v}").unwrap();
                i += 1;
            }
        }
    }
    let python_render = baseline(&[
        script("render_baseline.py").to_str().unwrap(),
        "--fixtures",
        fixture(".").to_str().unwrap(),
        "--seconds",
        "3",
    ]);
    for (name, file, vars) in [
        (
            "Qwen3",
            "Qwen-Qwen3-0.6B.jinja",
            json!({"enable_thinking": false}),
        ),
        ("Kimi K2", "moonshotai-Kimi-K2.jinja", json!({})),
    ] {
        let out = dir.path().join(format!("adapted-{file}.jsonl"));
        let (task, took) = run_task(
            &mut c,
            &format!("adapt-{name}").replace(' ', "-"),
            "prompt_adaptation",
            json!({
                "input": convs_path, "output": out, "output_format": "rendered",
                "chat_template": fixture(&format!("chat_templates/{file}")),
                "template_variables": vars, "system_prompt": {"policy": "keep"},
                "now": "2026-01-15", "threads": 2,
            }),
        )
        .await;
        let result: Value = serde_json::from_str(&task.result_json).unwrap();
        let n = result["records"].as_f64().unwrap();
        let ours = n / took.as_secs_f64();
        let theirs = python_render
            .as_ref()
            .and_then(|b| b["per_conversation"][name].as_f64());
        rows.push(match theirs {
            Some(rate) => format!(
                "| prompt adaptation, whole phase, rendered with {name}'s template, {n:.0} conversations, 2 threads | todod {ours:.0} conv/s vs transformers render_jinja_template {rate:.0} conv/s (1 thread, one a call): **{:.1}x** | >= 5x |",
                ours / rate
            ),
            None => format!("| prompt adaptation, {name} | todod {ours:.0} conv/s; baseline not run | >= 5x |"),
        });
    }
    drop(c);
    drop(daemon); // stopped on drop

    // RSS through 1M records: the real binary, sampled every 50 ms.
    const BIG: usize = 1_000_000;
    let big = dir.path().join("big.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&big).unwrap());
        for i in 0..BIG {
            writeln!(f, "{}", json!({"id": format!("b{i}"), "text": format!("record {i}: the answer is {}", i * 7)})).unwrap();
        }
    }
    let state = tempfile::tempdir().unwrap();
    let daemon = RealDaemon::spawn(state.path());
    let pid = daemon.child.id();
    let peak = Arc::new(AtomicU64::new(0));
    {
        let peak = peak.clone();
        std::thread::spawn(move || loop {
            let kib = rss_kib(pid);
            if kib == 0 {
                return;
            }
            peak.fetch_max(kib, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(50));
        });
    }
    let mut c = daemon.client().await;
    c.write_todos(write_request("big", vec![])).await.unwrap();
    let id = c
        .create_task(proto::CreateTaskRequest {
            plan: "big".into(),
            content: "1M records".into(),
            kind: "tokenization".into(),
            spec_json: json!({
                "input": big, "tokenizer": fixture("smollm2"), "output_prefix": dir.path().join("big"),
                "mode": "completion", "threads": 2,
            })
            .to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    wait_task(&mut c, "big", &id, |t| {
        t.progress
            .as_ref()
            .is_some_and(|p| p.done >= (BIG / 10) as i64)
    })
    .await;
    let at_tenth = peak.load(Ordering::Relaxed);
    let done = wait_task(&mut c, "big", &id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(done.status, "completed", "{}", done.error);
    let at_end = peak.load(Ordering::Relaxed);
    rows.push(format!(
        "| daemon peak RSS, tokenization of 1M records | {:.1} MiB by 100k records, {:.1} MiB by 1M: **{:.2}x** | bounded (~1x) |",
        at_tenth as f64 / 1024.0,
        at_end as f64 / 1024.0,
        at_end as f64 / at_tenth.max(1) as f64
    ));

    println!("| measure | result | target |");
    println!("|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}
