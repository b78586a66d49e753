//! The feasibility phase end to end, against a mock server whose capacity
//! and output lengths are known: the knee it chooses, the projection held
//! against the generation that follows, the warm-up of a cold server, the
//! budget gate, drift while the generation runs, and kill -9 during a sweep.
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use todod_e2e::gen::write_prompts;
use todod_e2e::mock_openai::{Curve, MockOpenAi, ServerMetrics, Settings};
use todod_e2e::{create_phase, proto, transition, wait_task, Client, RealDaemon, TestDaemon};

/// A server of 4 slots: about 40 ms to the first token, then 400 tokens/s a
/// request, answers of 10 to 50 tokens. Its throughput stops growing at
/// concurrency 4.
fn four_slots() -> Settings {
    Settings {
        latency: Duration::from_millis(40),
        tokens_per_second: 400.0,
        capacity: 4,
        keep_bodies: false,
        output_tokens: Some((10, 50)),
        ..Settings::default()
    }
}

/// A generation of `dir/prompts.jsonl` into `dir/out.jsonl` at the level a
/// feasibility dependency chooses.
fn generation_spec(dir: &Path, url: &str) -> Value {
    json!({
        "prompts": dir.join("prompts.jsonl"),
        "output": dir.join("out.jsonl"),
        "endpoints": [url],
        "model": "mock-model",
        "max_tokens": 64,
        "stream": true,
        "concurrency": "auto",
    })
}

/// A quick sweep: small windows, so that a level takes a second or two.
fn sweep_spec(extra: Value) -> Value {
    let mut spec = json!({
        "window": {"min_requests": 48, "min_seconds": 1.5, "max_seconds": 30},
        "warmup": {"requests": 2, "max_tokens": 8, "timeout_seconds": 5},
        "seed": 42,
        "sample_size": 200,
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

async fn create(
    c: &mut Client,
    plan: &str,
    kind: &str,
    spec: &Value,
    after: &[&str],
) -> Result<String, tonic::Status> {
    create_phase(c, plan, kind, &spec.to_string(), after).await
}

/// A feasibility task of `spec` and the generation of `dir` it vouches for
/// (see `generation_spec`), in `plan`: their ids.
async fn vouched_generation(
    c: &mut Client,
    plan: &str,
    spec: &Value,
    dir: &Path,
    url: &str,
) -> (String, String) {
    let feasibility = create(c, plan, "feasibility", spec, &[]).await.unwrap();
    let generation = create(
        c,
        plan,
        "generation",
        &generation_spec(dir, url),
        &[&feasibility],
    )
    .await
    .unwrap();
    (feasibility, generation)
}

async fn wait_ended(c: &mut Client, plan: &str, id: &str) -> proto::Task {
    wait_task(c, plan, id, |t| {
        ["completed", "failed", "cancelled"].contains(&t.status.as_str())
    })
    .await
}

fn result(task: &proto::Task) -> Value {
    serde_json::from_str(&task.result_json)
        .unwrap_or_else(|e| panic!("result_json {:?}: {e}", task.result_json))
}

/// The level of the result `r` measured at concurrency `c`.
fn level(r: &Value, c: u64) -> &Value {
    r["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["concurrency"] == c)
        .unwrap_or_else(|| panic!("no level {c} in {r:#}"))
}

/// Holds a generation's projection `p` against the wall time the test
/// measured itself (`wall`, hours): within `bound` of its point, and inside
/// its interval.
fn held(p: &Value, wall: f64, bound: f64) {
    let hours = &p["projected_hours"];
    let (projected, low, high) = (
        hours["value"].as_f64().unwrap(),
        hours["low"].as_f64().unwrap(),
        hours["high"].as_f64().unwrap(),
    );
    let error = wall / projected - 1.0;
    println!(
        "projected {:.1} s ({:.1}-{:.1}), measured {:.1} s, error {:+.1}%",
        projected * 3600.0,
        low * 3600.0,
        high * 3600.0,
        wall * 3600.0,
        error * 100.0
    );
    assert!(
        error.abs() <= bound,
        "projection off by {:+.1}%: {p}",
        error * 100.0
    );
    assert!(
        low <= wall && wall <= high,
        "measured {:.1} s, outside the interval: {p}",
        wall * 3600.0
    );
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_knee_is_chosen_and_the_projection_holds_for_the_generation_that_follows() {
    // With its own /metrics: past the knee it says it queues, which is
    // what lets two flat doublings end the sweep.
    let mock = MockOpenAi::start(Settings {
        metrics: ServerMetrics::Vllm,
        ..four_slots()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 600, false);
    let report = dir.path().join("feasibility.html");
    let result_file = dir.path().join("feasibility.json");
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    // The feasibility task comes first and waits for the generation that
    // depends on it; its request shape is that generation's.
    let feasibility = create(
        &mut c,
        "run",
        "feasibility",
        &sweep_spec(json!({"report": report, "result_file": result_file, "max_concurrency": 32})),
        &[],
    )
    .await
    .unwrap();
    let generation = create(
        &mut c,
        "run",
        "generation",
        &generation_spec(dir.path(), &mock.url),
        &[&feasibility],
    )
    .await
    .unwrap();

    let measured = wait_ended(&mut c, "run", &feasibility).await;
    // The generation starts as the sweep ends: from here the test times it
    // by its own clock.
    let started = std::time::Instant::now();
    assert_eq!(measured.status, "completed", "{}", measured.error);
    let r = result(&measured);
    assert_eq!(r["verdict"], "go", "{r}");
    // The knee of a 4-slot server is 4; past it the throughput is flat, so
    // any level past it within 10 % of the best measured is a right choice
    // (issue 21's bar). Asking for exactly 4 failed in CI when the loaded
    // machine measured 16 at +6.6 % over 8.
    let choice = r["choice"]["concurrency"].as_u64().unwrap();
    let best = r["levels"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["output_tokens_per_second"].as_f64())
        .fold(0.0, f64::max);
    assert!(
        choice >= 4
            && level(&r, choice)["output_tokens_per_second"]
                .as_f64()
                .unwrap()
                >= 0.9 * best,
        "the knee of a 4-slot server, or a level past it as good: {r:#}"
    );
    // The levels measured, as the live progress announced them one by one,
    // are the result's; and the server had the last one's requests at once.
    let mut measuring: Vec<u64> = todod_e2e::task_events(&mut c, &feasibility, "progress")
        .await
        .iter()
        .filter_map(|e| {
            let d: Value = serde_json::from_str(&e.new_value).ok()?;
            (d["stage"] == "measuring").then(|| d["concurrency"].as_u64())?
        })
        .collect();
    let n = measuring.len() as i64;
    // The result lists them by concurrency, the ones between last measured.
    measuring.sort_unstable();
    let levels: Vec<u64> = r["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(
        measuring, levels,
        "the levels announced and the levels in the result"
    );
    let top = *levels.iter().max().unwrap() as usize;
    assert!(
        mock.max_in_flight() >= top,
        "level {top} was measured, the server never had more than {} requests at once",
        mock.max_in_flight()
    );
    // The level chosen was measured once more, after the sweep, and said
    // so; the projection is that second window's.
    assert_eq!(r["confirmation"]["concurrency"], choice, "{r:#}");
    assert!(r["confirmation"]["requests"].as_u64().unwrap() > 0, "{r:#}");
    let confirming = todod_e2e::task_events(&mut c, &feasibility, "progress")
        .await
        .iter()
        .filter(|e| e.new_value.contains("\"stage\":\"confirming\""))
        .count();
    assert_eq!(confirming, 1, "one confirmation announced");
    // Its last progress is where the sweep ended, not a level half done.
    let last = measured.progress.as_ref().unwrap();
    assert_eq!((last.done, last.total), (n, n), "{last:?}");
    assert!(
        last.detail_json.contains("\"stage\":\"decided\""),
        "{last:?}"
    );
    // Past the knee two flat doublings (8, 16), with requests queued on
    // the server, stop the geometric sweep; between 2 and the best a level
    // is measured too. A loaded machine can measure one doubling past the
    // knee as a gain over the 5 % threshold: the two flat doublings are
    // then 16 and 32, or the sweep goes on to its cap of 32, and only then
    // (seen in the one-binary suite on a clean clone, where the sweep's
    // windows share two cores with the kill tests).
    let doublings: Vec<u64> = levels
        .iter()
        .filter(|c| c.is_power_of_two())
        .copied()
        .collect();
    let stopped = r["sweep_stopped"].as_str().unwrap();
    if stopped.contains("two doublings in a row") {
        assert!(
            doublings == [1, 2, 4, 8, 16] || doublings == [1, 2, 4, 8, 16, 32],
            "{levels:?}"
        );
        assert!(levels.len() <= 8, "{levels:?}");
    } else {
        assert!(stopped.contains("level cap of 32"), "{stopped}");
        assert_eq!(doublings, [1, 2, 4, 8, 16, 32], "{levels:?}");
    }
    // What the sweep cost, against the run it projects.
    let cost = &r["sweep"];
    let spent: f64 = r["levels"].as_array().unwrap().len() as f64;
    assert!(cost["seconds"].as_f64().unwrap() > spent * 1.5, "{cost}");
    assert!(cost["share_of_run"].as_f64().unwrap() > 0.0, "{cost}");
    assert!(
        r["projection"]["interval"]
            .as_str()
            .unwrap()
            .contains("windows"),
        "{r}"
    );
    assert_eq!(r["sample"]["seed"], 42);
    assert_eq!(r["records"], 600);
    // The output-length distribution the mock was built with: 10 to 50.
    let chosen = level(&r, choice);
    let p50 = chosen["output_tokens"]["p50"].as_f64().unwrap();
    assert!((20.0..=40.0).contains(&p50), "median output length {p50}");
    assert!(chosen["e2e_seconds"]["p99"].as_f64().unwrap() > 0.0);
    assert!(chosen["ttft_seconds"]["p50"].as_f64().unwrap() >= 0.04);
    assert!(chosen["bytes_per_record"].as_f64().unwrap() > 100.0);
    let html = std::fs::read_to_string(&report).expect("the report is written");
    assert!(html.contains("<svg") && html.contains("class=\"chosen\""));
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(&result_file).expect("the result is written"),
    )
    .expect("the result file is JSON");
    assert_eq!(file, r, "the result file is the task's result");

    let generated = wait_ended(&mut c, "run", &generation).await;
    let wall = started.elapsed().as_secs_f64() / 3600.0;
    assert_eq!(generated.status, "completed", "{}", generated.error);
    assert_eq!(lines(&dir.path().join("out.jsonl")), 600);
    let g = result(&generated);
    let p = &g["projection"];
    held(p, wall, 0.10);
    // What the daemon reports is what the test measured (but for the
    // moments between its run and the test's view of it), and so is its
    // verdict.
    let actual = p["actual_hours"].as_f64().unwrap();
    assert!(
        (wall - actual).abs() <= 0.02 * wall + 0.5 / 3600.0,
        "the daemon says {:.2} s, the test measured {:.2} s",
        actual * 3600.0,
        wall * 3600.0
    );
    assert_eq!(p["inside_interval"], true, "{p}");
    // The live progress carried the projection too.
    let detail: Value = serde_json::from_str(&generated.progress.unwrap().detail_json).unwrap();
    assert_eq!(detail["feasibility"], feasibility.as_str());
    assert!(
        detail["projected_records_per_second"]["value"]
            .as_f64()
            .unwrap()
            > 0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_caches_prompts_is_projected_from_prompts_it_has_not_seen() {
    // A prefix cache: a prompt asked before skips its 100 ms of prefill,
    // so the sweep's levels, which ask the same prompts again, see the
    // server about twice as fast as a run that asks each prompt once.
    let mock = MockOpenAi::start(Settings {
        prefill: Duration::from_millis(100),
        ..four_slots()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 300, false);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let spec = sweep_spec(json!({"max_concurrency": 8, "sample_size": 300}));
    let (feasibility, generation) =
        vouched_generation(&mut c, "run", &spec, dir.path(), &mock.url).await;
    let measured = wait_ended(&mut c, "run", &feasibility).await;
    assert_eq!(measured.status, "completed", "{}", measured.error);
    let r = result(&measured);
    // Every level after the first asked mostly prompts the server had
    // cached (each asks a few more than the one before), and says so; the
    // confirmation asked prompts no level had.
    let levels = r["levels"].as_array().unwrap();
    for l in levels.iter().filter(|l| l["concurrency"] != 1) {
        let share = l["cached_input_share"].as_f64().unwrap();
        assert!(share > 0.5, "level {}: {share} cached", l["concurrency"]);
    }
    let again = &r["confirmation"];
    let choice = r["choice"]["concurrency"].as_u64().unwrap();
    assert_eq!(again["concurrency"], choice, "{r:#}");
    let fresh = again["cached_input_share"].as_f64().unwrap();
    assert!(
        fresh < 0.1,
        "the confirmation's prompts were new: {fresh} cached"
    );
    let speedup = level(&r, choice)["requests_per_second"].as_f64().unwrap()
        / again["requests_per_second"].as_f64().unwrap();
    assert!(
        speedup > 1.3,
        "cached prompts answered {speedup:.2}× as fast"
    );
    let method = r["projection"]["interval"].as_str().unwrap();
    assert!(method.contains("prefix cache"), "{method}");

    // The generation asks each of the 300 prompts once: those the sweep
    // asked from the cache, the rest not. The projection holds for it.
    let started = std::time::Instant::now();
    let generated = wait_ended(&mut c, "run", &generation).await;
    let wall = started.elapsed().as_secs_f64() / 3600.0;
    assert_eq!(generated.status, "completed", "{}", generated.error);
    assert_eq!(lines(&dir.path().join("out.jsonl")), 300);
    println!("cache speedup {speedup:.2}");
    // Projected from the levels' cached prompts, the run would take about
    // 1.5 times its projection.
    held(&result(&generated)["projection"], wall, 0.2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_server_is_warmed_up_without_counting_or_hanging() {
    // A thinking model: its first two answers take 30 s and run long.
    let mock = MockOpenAi::start(Settings {
        cold_requests: 2,
        cold_latency: Duration::from_secs(30),
        cold_tokens: 2000,
        latency: Duration::from_millis(20),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 50, false);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let spec = sweep_spec(json!({
        "prompts": dir.path().join("prompts.jsonl"),
        "endpoints": [mock.url],
        "model": "mock-model",
        "concurrency": [2],
        "warmup": {"requests": 2, "max_tokens": 8, "timeout_seconds": 1},
        "window": {"min_requests": 20, "min_seconds": 0.5, "max_seconds": 30},
    }));
    let id = create(&mut c, "cold", "feasibility", &spec, &[])
        .await
        .unwrap();
    let task = wait_ended(&mut c, "cold", &id).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    // It did not wait for the cold answers: none was even due yet.
    assert_eq!(
        mock.cold_answers_due(),
        0,
        "the warm-up waited for the cold answers"
    );
    let r = result(&task);
    let notes = r["warmup"]["notes"].to_string();
    assert!(notes.contains("timed out"), "{notes}");
    // A cold answer runs 2,000 tokens long: none is among the counted.
    let level = &r["levels"][0];
    assert!(
        level["output_tokens"]["p99"].as_f64().unwrap() < 100.0,
        "a cold answer was counted: {level}"
    );
    assert_eq!(level["error_rate"], 0.0);
}

/// A server with vLLM's `/metrics`: each level says what the server said
/// of itself while it ran, and what limited it; eight sent to a server
/// that runs four queue there, and the report says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_level_says_what_limited_it_from_the_servers_own_metrics() {
    let mock = MockOpenAi::start(Settings {
        metrics: ServerMetrics::Vllm,
        ..four_slots()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 200, false);
    let report = dir.path().join("feasibility.html");
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let spec = sweep_spec(json!({
        "prompts": dir.path().join("prompts.jsonl"),
        "endpoints": [mock.url],
        "model": "mock-model",
        "concurrency": [2, 8],
        "report": report,
        "window": {"min_requests": 20, "min_seconds": 3.0, "max_seconds": 30},
    }));
    let id = create(&mut c, "lim", "feasibility", &spec, &[])
        .await
        .unwrap();
    let task = wait_ended(&mut c, "lim", &id).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let r = result(&task);
    for c in [2, 8] {
        assert!(
            level(&r, c)["server"]["samples"].as_u64().unwrap() >= 1,
            "{r:#}"
        );
    }
    let eight = level(&r, 8);
    assert!(
        eight["limited_by"].as_str().unwrap().contains("queued"),
        "{eight:#}"
    );
    assert!(
        eight["server"]["waiting"].as_f64().unwrap() > 0.5,
        "{eight:#}"
    );
    let page = std::fs::read_to_string(&report).unwrap();
    assert!(page.contains("requests queued on the server"), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_the_projection_exceeds_stops_the_generation_until_a_retry() {
    let mock = MockOpenAi::start(four_slots()).await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 100, false);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let tight = sweep_spec(json!({
        "concurrency": [2, 4],
        "budget": {"max_hours": 0.000_01},
        "window": {"min_requests": 20, "min_seconds": 0.5, "max_seconds": 30},
    }));
    let (feasibility, generation) =
        vouched_generation(&mut c, "gate", &tight, dir.path(), &mock.url).await;
    let refused = wait_ended(&mut c, "gate", &feasibility).await;
    assert_eq!(refused.status, "failed");
    assert!(
        refused.error.contains("no-go") && refused.error.contains("over the budget"),
        "{}",
        refused.error
    );
    // The figures it decided on stay with it.
    let r = result(&refused);
    assert_eq!(r["verdict"], "no-go");
    assert_eq!(r["levels"].as_array().unwrap().len(), 2);
    let blocked = c
        .get_task(proto::GetTaskRequest {
            id: generation.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(blocked.status, "pending");
    assert_eq!(blocked.readiness, "blocked_by_failure");
    assert!(!dir.path().join("out.jsonl").exists());

    // A person raises the budget and retries: it measures again and goes.
    let mut loose = tight.clone();
    loose["budget"] = json!({"max_hours": 10});
    c.update_task(proto::UpdateTaskRequest {
        id: feasibility.clone(),
        spec_json: Some(loose.to_string()),
        ..Default::default()
    })
    .await
    .unwrap();
    c.transition_task(transition(&feasibility, "pending"))
        .await
        .unwrap();
    let passed = wait_ended(&mut c, "gate", &feasibility).await;
    assert_eq!(passed.status, "completed", "{}", passed.error);
    assert_eq!(result(&passed)["verdict"], "go");
    // Each run's result stays in the history.
    assert_eq!(
        todod_e2e::task_events(&mut c, &feasibility, "result")
            .await
            .len(),
        2
    );
    let generated = wait_ended(&mut c, "gate", &generation).await;
    assert_eq!(generated.status, "completed", "{}", generated.error);
    assert_eq!(lines(&dir.path().join("out.jsonl")), 100);
}

/// Runs a feasibility task at concurrency 4 and the generation it vouches
/// for, halving the mock's capacity once `halve_after` records are written
/// (or never); returns the generation's drift events.
async fn generation_held_to_its_projection(halve_after: Option<i64>) -> Vec<proto::Event> {
    let mock = MockOpenAi::start(four_slots()).await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 700, false);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let spec = sweep_spec(json!({"concurrency": [4], "drift_after_seconds": 2}));
    let (_, generation) = vouched_generation(&mut c, "drift", &spec, dir.path(), &mock.url).await;
    if let Some(after) = halve_after {
        wait_task(&mut c, "drift", &generation, |t| {
            t.progress.as_ref().is_some_and(|p| p.done >= after)
        })
        .await;
        mock.set_capacity(2).await;
    }
    let done = wait_ended(&mut c, "drift", &generation).await;
    assert_eq!(done.status, "completed", "{}", done.error);
    todod_e2e::task_events(&mut c, &generation, "drift").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drift_is_reported_when_the_server_loses_half_its_capacity() {
    let drifts = generation_held_to_its_projection(Some(300)).await;
    // The halved server's drift is the one below the band. On a loaded
    // machine the sweep can measure the server slower than the run later
    // finds it, and a drift above the band before the halving is the check
    // telling the truth (seen once in CI: 26.13 records/s against a band
    // of 21.21-26.10), not what this test is about.
    let below: Vec<&proto::Event> = drifts
        .iter()
        .filter(|e| {
            let drift: Value = serde_json::from_str(&e.new_value).unwrap();
            drift["records_per_second"]["actual"].as_f64().unwrap()
                < drift["records_per_second"]["projected"]["low"]
                    .as_f64()
                    .unwrap()
        })
        .collect();
    assert_eq!(below.len(), 1, "{drifts:?}");
    let drift: Value = serde_json::from_str(&below[0].new_value).unwrap();
    let actual = drift["records_per_second"]["actual"].as_f64().unwrap();
    let projected = drift["records_per_second"]["projected"]["value"]
        .as_f64()
        .unwrap();
    assert!(actual < projected * 0.8, "{drift}");
    assert!(
        drift["message"].as_str().unwrap().contains("projected"),
        "{drift}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_drift_is_reported_when_the_server_stays_as_measured() {
    let drifts = generation_held_to_its_projection(None).await;
    assert!(drifts.is_empty(), "{drifts:?}");
}

/// kill -9 of the real daemon in the middle of a sweep: the next daemon
/// finishes it, keeps the levels measured before, measures the interrupted
/// one again whole, and every level is one run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_killed_midway_finishes_with_each_level_from_one_run() {
    let mock = MockOpenAi::start(four_slots()).await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 200, false);
    let state = tempfile::tempdir().unwrap();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let spec = sweep_spec(json!({
        "prompts": dir.path().join("prompts.jsonl"),
        "endpoints": [mock.url],
        "model": "mock-model",
        "stream": true,
        "concurrency": [1, 2, 4, 8],
    }));
    let id = create(&mut c, "kill", "feasibility", &spec, &[])
        .await
        .unwrap();
    // Kill while level 2 (the second) is being measured.
    wait_task(&mut c, "kill", &id, |t| {
        t.progress.as_ref().is_some_and(|p| {
            serde_json::from_str::<Value>(&p.detail_json)
                .is_ok_and(|d| d["stage"] == "measuring" && d["concurrency"] == 2)
        })
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    daemon.kill9();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let task = wait_ended(&mut c, "kill", &id).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let r = result(&task);
    let by: Vec<(u64, String)> = r["measured_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["concurrency"].as_u64().unwrap(),
                m["attempt"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        by.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        vec![1, 2, 4, 8],
        "each level once: {by:?}"
    );
    // The second daemon is the one the history says took the task over.
    let run_of = |attempt: &str| attempt.rsplit_once('.').unwrap().0.to_string();
    let resumed = todod_e2e::task_events(&mut c, &id, "resumed").await;
    assert_eq!(resumed.len(), 1, "one kill, one resume: {resumed:?}");
    let second = run_of(&resumed[0].new_value);
    assert_ne!(
        run_of(&by[0].1),
        second,
        "level 1 is the first daemon's, level 2 the second's: {by:?}"
    );
    assert!(
        by[1..].iter().all(|(_, a)| run_of(a) == second),
        "{by:?}, resumed by {second}"
    );
    // The cost the result reports counts the levels it holds, once each.
    assert_eq!(r["sweep"]["levels"], 4, "{}", r["sweep"]);
    assert_eq!(r["sweep"]["between"], json!([]), "given levels only");
    // Every level has its window of requests, and the server had them all.
    let mut counted = 0;
    for level in r["levels"].as_array().unwrap() {
        let requests = level["requests"].as_u64().unwrap();
        assert!(requests >= 48, "{level}");
        counted += requests;
    }
    assert!(
        mock.requests() as u64 >= counted,
        "the levels count {counted} requests, the server had {}",
        mock.requests()
    );
    daemon.terminate();
}

/// A `remeasure` schedule on a generation whose server lost half its
/// capacity: the run is held while the server is measured alone at the
/// run's level (it never has more requests than that level at once), the
/// figures say how much the server changed since the sweep, and the drift
/// check is held against them afterwards: the drift found before is not
/// found again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remeasure_holds_the_run_and_the_drift_check_follows_the_server_it_found() {
    use todod::scheduler::ManualClock;
    // 2026-12-01T10:02:00Z.
    let clock = ManualClock::new(1_796_119_320_000);
    let mock = MockOpenAi::start(four_slots()).await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 650, false);
    let daemon = TestDaemon::start_with(todod::server::Options {
        clock: Some(clock.clone()),
        ..Default::default()
    })
    .await;
    let mut c = daemon.client().await;
    let spec = sweep_spec(json!({"concurrency": [4], "drift_after_seconds": 2}));
    let (feasibility, generation) =
        vouched_generation(&mut c, "re", &spec, dir.path(), &mock.url).await;
    wait_task(&mut c, "re", &generation, |t| {
        t.progress.as_ref().is_some_and(|p| p.done >= 150)
    })
    .await;
    mock.set_capacity(2).await;
    // The drift the halved server causes is found (and recorded) first.
    todod_e2e::wait_events(&mut c, "re", &generation, "drift", 1).await;
    // Every minute; the test clock reaches one slot.
    c.set_schedule(proto::SetScheduleRequest {
        task_id: generation.clone(),
        cron: "* * * * *".into(),
        action: "remeasure".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let firing = std::time::Instant::now();
    clock.advance(Duration::from_secs(60));
    let fired = todod_e2e::wait_events(&mut c, "re", &generation, "schedule_fired", 1).await;
    let observed = firing.elapsed().as_secs_f64();
    let fired: Value = serde_json::from_str(&fired[0].new_value).unwrap();
    assert!(
        fired.get("error").is_none() && fired.get("skipped").is_none(),
        "{fired}"
    );
    assert_eq!(fired["action"], "remeasure");
    assert_eq!(fired["concurrency"], 4);
    assert_eq!(fired["feasibility"], feasibility);
    assert!(fired["requests"].as_u64().unwrap() >= 48, "{fired}");
    // Half the slots: about half the sweep's throughput.
    let ratio = fired["output_tokens_per_second"]["ratio"].as_f64().unwrap();
    assert!((0.3..0.75).contains(&ratio), "{fired}");
    let left = fired["left"].as_u64().unwrap();
    assert!(left > 0 && left < 650, "{fired}");
    assert_eq!(fired["projection"]["records"], left);
    // The hold lasted the measurement's window at least (the spec's 1.5 s),
    // and no longer than the test saw the firing take from the clock's step.
    let held = fired["held_seconds"].as_f64().unwrap();
    assert!(
        (1.5..=observed).contains(&held),
        "held {held} s, the firing took {observed} s: {fired}"
    );

    let done = wait_ended(&mut c, "re", &generation).await;
    assert_eq!(done.status, "completed", "{}", done.error);
    assert_eq!(lines(&dir.path().join("out.jsonl")), 650);
    assert!(
        mock.max_in_flight() <= 4,
        "the server had {} requests at once: the run was not held while it was measured",
        mock.max_in_flight()
    );
    let drifts = todod_e2e::task_events(&mut c, &generation, "drift").await;
    assert_eq!(
        drifts.len(),
        1,
        "after the re-measurement the run matches the server it found: {drifts:?}"
    );
    // No second drift event is the check: the last progress may still say
    // `drifting` for the run's last records, when fewer than its level are
    // left in flight and the rate falls with them (seen in CI), for less
    // than the drift_after_seconds an event needs.
    let last: Value = serde_json::from_str(&done.progress.as_ref().unwrap().detail_json).unwrap();
    let firings = todod_e2e::task_events(&mut c, &generation, "schedule_fired").await;
    assert_eq!(firings.len(), 1, "one slot, one firing");
    // The schedule ended with the generation: nothing left to measure for.
    let ended = todod_e2e::task_events(&mut c, &generation, "schedule_ended").await;
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(
        done.schedule.as_ref().map(|s| s.next_fire_at.as_str()),
        Some(""),
        "{:?}",
        done.schedule
    );
    // The time the run was held is its wall time, but was not projected:
    // the result says how much, and compares without it.
    let projection = &result(&done)["projection"];
    let held = projection["held_for_remeasures_hours"].as_f64().unwrap() * 3600.0;
    let fired_held = fired["held_seconds"].as_f64().unwrap();
    assert!(
        (held - fired_held).abs() < 0.01,
        "{projection} against {fired}"
    );
    // And the progress a reader's ETA is made from says it too.
    let reported = last["held_for_remeasures_seconds"].as_f64().unwrap();
    assert!(
        (reported - fired_held).abs() < 0.5,
        "{last} against {fired}"
    );
    daemon.stop().await;
}

/// Requests a second of a server that is flat from 1 to 2, gains 40 % at 4
/// and 30 % at 8, and is flat from there (linear between).
fn plateau(n: usize) -> f64 {
    let points = [
        (1.0, 40.0),
        (2.0, 40.0),
        (4.0, 56.0),
        (8.0, 72.8),
        (16.0, 72.8),
    ];
    let n = (n as f64).max(1.0);
    if n >= 16.0 {
        return 72.8;
    }
    let i = points.iter().rposition(|p| p.0 <= n).unwrap();
    let ((x0, y0), (x1, y1)) = (points[i], points[i + 1]);
    y0 + (y1 - y0) * (n - x0) / (x1 - x0)
}

/// A plateau at low concurrency is not the server's best: the sweep goes
/// on past the flat doubling from 1 to 2 and chooses a level within 10 % of
/// the best throughput the server has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plateau_at_low_concurrency_does_not_stop_the_sweep() {
    let mock = MockOpenAi::start(Settings {
        keep_bodies: false,
        output_tokens: Some((20, 20)),
        curve: Some(Curve {
            rate: plateau,
            jitter: 0.0,
            epoch: Duration::from_secs(1),
            seed: 0,
        }),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 400, false);
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let spec = sweep_spec(json!({
        "prompts": dir.path().join("prompts.jsonl"),
        "endpoints": [mock.url],
        "model": "mock-model",
        "max_concurrency": 32,
        "window": {"min_requests": 32, "min_seconds": 0.8, "max_seconds": 30},
    }));
    let id = create(&mut c, "plateau", "feasibility", &spec, &[])
        .await
        .unwrap();
    let task = wait_ended(&mut c, "plateau", &id).await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let r = result(&task);
    let levels = r["levels"].as_array().unwrap();
    let tps = |l: &Value| l["output_tokens_per_second"].as_f64().unwrap();
    let concurrency: Vec<u64> = levels
        .iter()
        .map(|l| l["concurrency"].as_u64().unwrap())
        .collect();
    assert!(
        concurrency.contains(&8),
        "it went past the plateau: {concurrency:?}"
    );
    let chosen = level(&r, r["choice"]["concurrency"].as_u64().unwrap());
    // The server's best: 72.8 requests a second of 20 tokens, and the best
    // the sweep saw.
    let best = levels.iter().map(tps).fold(0.0, f64::max);
    for (what, best) in [("measured", best), ("the server's", 72.8 * 20.0)] {
        assert!(
            tps(chosen) >= 0.9 * best,
            "chose {} at {:.0} tokens/s, {what} best is {best:.0}: {r:#}",
            chosen["concurrency"],
            tps(chosen)
        );
    }
    println!(
        "levels {concurrency:?}, chose {} ({:.0} tokens/s), sweep {:.1} s",
        chosen["concurrency"],
        tps(chosen),
        r["sweep"]["seconds"].as_f64().unwrap()
    );
}

/// kill -9 right after a re-measurement: the daemon that resumes the run
/// holds it against what the re-measurement found (recorded with its
/// firing), not against the sweep's projection; and the run completes with
/// every record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_the_drift_check_keeps_the_remeasures_projection() {
    let mock = MockOpenAi::start(four_slots()).await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 350, false);
    let state = tempfile::tempdir().unwrap();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let spec = sweep_spec(json!({"concurrency": [4], "drift_after_seconds": 2}));
    let (feasibility, generation) =
        vouched_generation(&mut c, "rk", &spec, dir.path(), &mock.url).await;
    wait_task(&mut c, "rk", &generation, |t| {
        t.progress.as_ref().is_some_and(|p| p.done >= 60)
    })
    .await;
    let feasible = result(&wait_ended(&mut c, "rk", &feasibility).await)["projection"]
        ["records_per_second"]["value"]
        .as_f64()
        .unwrap();
    // The server loses half its capacity; one re-measurement, two seconds
    // from now (six cron fields: it fires once, then next year).
    mock.set_capacity(2).await;
    let at = std::time::SystemTime::now() + Duration::from_secs(2);
    let secs = at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let (day_secs, days) = (secs.rem_euclid(86_400), secs.div_euclid(86_400));
    let (_, m, d) = civil_from_days(days);
    let cron = format!(
        "{} {} {} {d} {m} *",
        day_secs % 60,
        (day_secs / 60) % 60,
        day_secs / 3600
    );
    c.set_schedule(proto::SetScheduleRequest {
        task_id: generation.clone(),
        cron,
        action: "remeasure".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let fired = todod_e2e::wait_events(&mut c, "rk", &generation, "schedule_fired", 1).await;
    daemon.kill9();
    let fired: Value = serde_json::from_str(&fired[0].new_value).unwrap();
    let found = fired["projection"]["records_per_second"]["value"]
        .as_f64()
        .unwrap_or_else(|| panic!("the re-measurement found a projection: {fired}"));
    assert!(
        found < 0.8 * feasible,
        "half the slots: {found} against {feasible}"
    );

    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let done = wait_ended(&mut c, "rk", &generation).await;
    assert_eq!(done.status, "completed", "{}", done.error);
    assert_eq!(lines(&dir.path().join("out.jsonl")), 350);
    // Every progress the second daemon reported is held against the
    // re-measurement's projection.
    let resumed = todod_e2e::task_events(&mut c, &generation, "resumed").await;
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    let after: Vec<Value> = todod_e2e::task_events(&mut c, &generation, "progress")
        .await
        .iter()
        .filter(|e| e.seq > resumed[0].seq)
        .filter_map(|e| serde_json::from_str(&e.new_value).ok())
        .filter(|d: &Value| d.get("projected_records_per_second").is_some())
        .collect();
    assert!(
        !after.is_empty(),
        "the resumed run reported against a projection"
    );
    for d in &after {
        let projected = d["projected_records_per_second"]["value"].as_f64().unwrap();
        assert_eq!(projected, found, "{d}");
    }
    // A drift after the restart, if the machine is slow enough to cause
    // one, is also judged against what the re-measurement found, never the
    // sweep's projection (whether one happens is timing, not asserted).
    let drifts = todod_e2e::task_events(&mut c, &generation, "drift").await;
    for e in drifts.iter().filter(|e| e.seq > resumed[0].seq) {
        let d: Value = serde_json::from_str(&e.new_value).unwrap();
        let projected = d["records_per_second"]["projected"]["value"]
            .as_f64()
            .unwrap();
        assert_eq!(projected, found, "a drift after the restart: {d}");
    }
    daemon.terminate();
}

/// Year, month, day of a count of days since 1970-01-01 (Howard Hinnant's
/// civil_from_days).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}
