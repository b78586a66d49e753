//! The feasibility sweep on a real server (llama.cpp's `llama-server`,
//! SmolLM2-135M, `--parallel 8`, on this machine's CPU): the level it
//! chooses is within 10 % of the best throughput a full sweep finds, and
//! the generation it vouches for takes what it projected, within ±10 %.
//!
//! In the `alone` test binary, so that nothing else loads the machine while
//! it measures. Without a built server `scripts/local-backend` builds it
//! first; if it cannot, this test fails and says so.
use serde_json::Value;
use todod_e2e::fixtures::fixture;
use todod_e2e::llama_server::LlamaServer;
use todod_e2e::{create_phase, proto, wait_task, Client, TestDaemon};

fn plan_file(out: &std::path::Path, url: &str) -> String {
    format!(
        r#"
plan = "sweep"
output_dir = "{out}"
phases = ["adaptation", "feasibility", "generation"]

[model]
name = "smollm2"
endpoints = ["{url}"]
dir = "{dir}"

[prompts]
path = "{prompts}"
format = "sharegpt"
sample = 120
seed = 5

[sampling]
temperature = 0.7

[feasibility]
seed = 3
max_concurrency = 16
# Bounds the test's time on CI; the default floor is 300 s.
min_sweep_seconds = 150
window = {{ min_requests = 24, min_seconds = 4.0, max_seconds = 40.0 }}

[generation]
max_tokens = 48
"#,
        out = out.display(),
        dir = fixture("smollm2").display(),
        prompts = fixture("prompts/sharegpt.jsonl").display(),
    )
}

async fn ended(c: &mut Client, plan: &str, id: &str) -> proto::Task {
    let task = wait_task(c, plan, id, |t| {
        ["completed", "failed", "cancelled"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(task.status, "completed", "{id}: {}", task.error);
    task
}

fn result(task: &proto::Task) -> Value {
    serde_json::from_str(&task.result_json).unwrap()
}

/// Output tokens a second at each concurrency a result measured.
fn throughput(result: &Value) -> Vec<(u64, f64)> {
    result["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["concurrency"].as_u64().unwrap(),
                l["output_tokens_per_second"].as_f64().unwrap(),
            )
        })
        .collect()
}

// Not in the default run: on this 2-core machine one level measured minutes
// apart differs by 10-20 %, and the test's two bars are 10 % wide (one run
// of two failed so before the confirmation asked prompts the server had not
// cached; on 2026-12-04 it passed in 3 minutes: chose 8 at 97 % of the full
// sweep's best, projected 31 s, actual 29 s). CI runs the example pipeline
// on the same server instead (`scripts/readme-example`).
// `cargo test --release -p todod-e2e --test alone -- real_server_sweep:: --ignored`.
#[ignore = "flaky on a 2-core llama-server: see the comment above"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_chooses_near_the_best_level_and_projects_the_run() {
    let _alone = super::MACHINE.lock().await;
    let server = LlamaServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let ids = todod_e2e::apply_plan(&mut c, &plan_file(&out, &server.url)).await;
    let sweep = result(&ended(&mut c, "sweep", &ids[1]).await);
    let generation = result(&ended(&mut c, "sweep", &ids[2]).await);
    let chosen = sweep["choice"]["concurrency"].as_u64().unwrap();

    // Then, with the server to itself again, every level from 1 to 16 and
    // the one chosen: the chosen level is judged against the best within
    // one sweep (the server is not the same from one sweep to the next:
    // llama-server caches the prompts' prefixes, and a later sweep of the
    // same prompts runs faster).
    let mut every = vec![1, 2, 4, 8, 16];
    if !every.contains(&chosen) {
        every.push(chosen);
    }
    let full = serde_json::json!({
        "prompts": out.join("prompts.jsonl"),
        "endpoints": [server.url],
        "model": "smollm2",
        "params": {"temperature": 0.7},
        "max_tokens": 48,
        "concurrency": every,
        "seed": 3,
        "window": {"min_requests": 24, "min_seconds": 4.0, "max_seconds": 40.0},
    });
    let id = create_phase(&mut c, "sweep", "feasibility", &full.to_string(), &[])
        .await
        .unwrap();
    let full = result(&ended(&mut c, "sweep", &id).await);
    let levels = throughput(&full);
    let best = levels.iter().map(|l| l.1).fold(0.0, f64::max);
    let tps = levels.iter().find(|l| l.0 == chosen).unwrap().1;
    let p = &generation["projection"];
    let error = p["error"].as_f64().unwrap();
    println!(
        "sweep {:?} chose {chosen} ({}); full sweep {levels:?}; projected {:.0} s ({:.0}-{:.0}), \
         actual {:.0} s, error {:+.1}%; the sweep cost {:.0} s",
        throughput(&sweep),
        sweep["sweep_stopped"],
        p["projected_hours"]["value"].as_f64().unwrap() * 3600.0,
        p["projected_hours"]["low"].as_f64().unwrap() * 3600.0,
        p["projected_hours"]["high"].as_f64().unwrap() * 3600.0,
        p["actual_hours"].as_f64().unwrap() * 3600.0,
        error * 100.0,
        sweep["sweep"]["seconds"].as_f64().unwrap(),
    );
    // Within 10 % of the best, both measured by the full sweep.
    assert!(
        tps >= 0.9 * best,
        "chose concurrency {chosen} at {tps:.0} output tokens/s; the full sweep's best is \
         {best:.0}: {levels:?}"
    );
    assert!(
        error.abs() <= 0.10,
        "the generation took {:+.1}% against its projection: {p}",
        error * 100.0
    );
}
