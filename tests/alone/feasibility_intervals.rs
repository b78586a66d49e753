//! Whether the feasibility's 95 % interval holds on a server whose rate
//! varies over time: 20 seeded servers (±8 % drawn anew every 50 ms), each
//! swept and then run; the run's actual time must fall inside the interval
//! projected for it in at least 18. In the `alone` test binary, so that
//! no other test shares the machine with its timings.
use std::time::Duration;

use serde_json::{json, Value};
use todod_e2e::gen::write_prompts;
use todod_e2e::mock_openai::{Curve, MockOpenAi, Settings};
use todod_e2e::{create_phase, wait_task, TestDaemon};

/// 12.5 requests a second a slot: 80 ms a request at any load (long
/// enough that the client's own time between requests is not what is
/// measured, as on a real server whose requests take seconds).
fn steady(n: usize) -> f64 {
    12.5 * n as f64
}

// Before the interval took in the run's start and end (one request's
// latency either side, 2 % of these 4.5 s runs) it held 20, 17, 18 and at
// least 18 of 20 across four runs: about 90 %, under the 95 % it claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interval_holds_on_a_server_that_varies_between_windows() {
    let _alone = super::MACHINE.lock().await;
    const TRIALS: u64 = 20;
    // Four trials at a time, each its own plan and server: the servers'
    // rates are their own clocks (80 ms a request, not CPU), and four
    // runs of 100 requests a second leave the two cores mostly idle. One
    // at a time, the 20 took 110 s.
    const AT_ONCE: u64 = 4;
    let daemon = TestDaemon::start().await;
    let mut outcomes = Vec::new();
    for first in (1..=TRIALS).step_by(AT_ONCE as usize) {
        let round = (first..first + AT_ONCE).map(|seed| trial(&daemon, seed));
        outcomes.extend(futures::future::join_all(round).await);
    }
    let inside = outcomes.iter().filter(|(held, _)| *held).count();
    let lines: Vec<&str> = outcomes.iter().map(|(_, line)| line.as_str()).collect();
    println!("{}", lines.join("\n"));
    assert!(
        inside >= 18,
        "the actual time was inside the 95% interval in {inside} of {TRIALS}:\n{}",
        lines.join("\n")
    );
}

/// One seeded server swept and then run: whether the run's time fell
/// inside its projected interval, and a line that says by how much.
async fn trial(daemon: &TestDaemon, seed: u64) -> (bool, String) {
    let mut c = daemon.client().await;
    let mock = MockOpenAi::start(Settings {
        keep_bodies: false,
        output_tokens: Some((10, 30)),
        curve: Some(Curve {
            rate: steady,
            jitter: 0.08,
            epoch: Duration::from_millis(50),
            seed,
        }),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 400, false);
    let plan = format!("interval-{seed}");
    let spec = json!({
        "concurrency": [8],
        "window": {"min_requests": 64, "min_seconds": 1.0, "max_seconds": 30},
        "warmup": {"requests": 1, "max_tokens": 8, "timeout_seconds": 5},
        "seed": seed,
    });
    let feasibility = create_phase(&mut c, &plan, "feasibility", &spec.to_string(), &[])
        .await
        .unwrap();
    let generation = json!({
        "prompts": dir.path().join("prompts.jsonl"),
        "output": dir.path().join("out.jsonl"),
        "endpoints": [mock.url],
        "model": "mock-model",
        "max_tokens": 64,
        "concurrency": "auto",
    });
    let generation = create_phase(
        &mut c,
        &plan,
        "generation",
        &generation.to_string(),
        &[&feasibility],
    )
    .await
    .unwrap();
    let done = wait_task(&mut c, &plan, &generation, |t| {
        ["completed", "failed", "cancelled"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(done.status, "completed", "{}", done.error);
    let r: Value = serde_json::from_str(&done.result_json).unwrap();
    let p = &r["projection"];
    let h = &p["projected_hours"];
    let (value, low, high, actual) = (
        h["value"].as_f64().unwrap() * 3600.0,
        h["low"].as_f64().unwrap() * 3600.0,
        h["high"].as_f64().unwrap() * 3600.0,
        p["actual_hours"].as_f64().unwrap() * 3600.0,
    );
    let held = low <= actual && actual <= high;
    assert_eq!(p["inside_interval"], held, "{p}");
    let line = format!(
        "seed {seed:>2}: projected {value:.2} s ({low:.2}-{high:.2}, ±{:.1}%), actual {actual:.2} s ({:+.1}%){}",
        50.0 * (high - low) / value,
        100.0 * (actual / value - 1.0),
        if held { "" } else { "  OUTSIDE" }
    );
    (held, line)
}
