//! A pipeline file applied end to end: the graph it makes (once, however
//! often it is applied), what a changed file may change, refusals named by
//! their path in the file, and the whole pipeline run on the mock server
//! with a kill -9 of the daemon in each phase.
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use todod_e2e::fixtures::fixture;
use todod_e2e::mock_openai::{MockOpenAi, Settings};
use todod_e2e::{
    ids, proto, run_killing_each, wait_task, Client, ClosedPort, RealDaemon, TestDaemon,
};
use tonic::Code;

/// A pipeline file over the shared ShareGPT prompts and SmolLM2's model
/// directory, writing into `out`.
fn pipeline_file(out: &Path, prompts: &Path, endpoint: &str, extra: &str) -> String {
    format!(
        r#"
plan = "datagen"
output_dir = "{out}"

[model]
name = "mock-model"
endpoints = ["{endpoint}"]
dir = "{dir}"

[prompts]
path = "{prompts}"

[sampling]
temperature = 0.7

[budget]
max_hours = 10.0

[feasibility]
seed = 7
sample_size = 200
max_concurrency = 8
warmup = {{ requests = 2, max_tokens = 8, timeout_seconds = 5 }}
window = {{ min_requests = 32, min_seconds = 0.5, max_seconds = 20 }}

[generation]
max_tokens = 32
{extra}
"#,
        out = out.display(),
        dir = fixture("smollm2").display(),
        prompts = prompts.display(),
    )
}

async fn apply(
    c: &mut Client,
    text: &str,
    dry_run: bool,
) -> Result<proto::ApplyPipelineResponse, tonic::Status> {
    c.apply_pipeline(proto::ApplyPipelineRequest {
        spec_toml: text.to_string(),
        dry_run,
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner())
}

fn actions(r: &proto::ApplyPipelineResponse) -> Vec<(String, String)> {
    r.steps
        .iter()
        .map(|s| (s.step.clone(), s.action.clone()))
        .collect()
}

fn spec(task: &proto::Task) -> Value {
    serde_json::from_str(&task.spec_json).unwrap()
}

/// Events a client caused (the daemon's own, such as a run's progress, left
/// out: they come and go by themselves).
async fn client_events(c: &mut Client) -> usize {
    c.list_events(proto::ListEventsRequest {
        plan: "datagen".into(),
        limit: 10_000,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .events
    .iter()
    .filter(|e| e.actor != "todod")
    .count()
}

async fn revision(c: &mut Client) -> i64 {
    c.get_plan(proto::GetPlanRequest {
        name: "datagen".into(),
        highlight_limit: 1,
    })
    .await
    .unwrap()
    .into_inner()
    .plan
    .unwrap()
    .revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_makes_the_graph_once_and_changes_only_what_has_not_started() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let prompts = fixture("prompts/sharegpt.jsonl");
    // Nothing answers: the feasibility check fails and the generation stays
    // pending, so it can still change while the adaptation has run.
    let dead = ClosedPort::new();
    let text = pipeline_file(&out, &prompts, &dead.url(), "");
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;

    let dry = apply(&mut c, &text, true).await.unwrap();
    assert!(dry.plan.is_none());
    assert!(dry
        .steps
        .iter()
        .all(|s| s.action == "create" && s.task.is_none()));
    let plans = c
        .list_plans(proto::ListPlansRequest::default())
        .await
        .unwrap();
    assert!(plans.into_inner().plans.is_empty(), "a dry run wrote");
    assert!(!out.exists(), "a dry run made the output directory");

    let first = apply(&mut c, &text, false).await.unwrap();
    let names: Vec<_> = actions(&first);
    assert_eq!(
        names,
        [
            ("adaptation".into(), "create".into()),
            ("feasibility".into(), "create".into()),
            ("generation".into(), "create".into()),
            ("tokenization".into(), "create".into())
        ]
    );
    let tasks: Vec<proto::Task> = first
        .steps
        .iter()
        .map(|s| s.task.clone().unwrap())
        .collect();
    for pair in tasks.windows(2) {
        assert_eq!(pair[1].depends_on, [pair[0].id.clone()]);
    }
    let (adapt, gen, tok) = (spec(&tasks[0]), spec(&tasks[2]), spec(&tasks[3]));
    assert_eq!(adapt["output"], gen["prompts"]);
    assert_eq!(gen["output"], tok["input"]);
    assert_eq!(gen["concurrency"], "auto");
    assert!(out.is_dir(), "the output directory is made");

    // The same file again: nothing changes, nothing is recorded.
    let before = client_events(&mut c).await;
    let again = apply(&mut c, &text, false).await.unwrap();
    assert!(
        again.steps.iter().all(|s| s.action == "unchanged"),
        "{:?}",
        actions(&again)
    );
    assert_eq!(client_events(&mut c).await, before);
    let all = c
        .list_tasks(proto::ListTasksRequest {
            plan: "datagen".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(all.len(), 4, "one set of tasks");

    // The adaptation runs; the feasibility check fails (nothing answers).
    let adapted = wait_task(&mut c, "datagen", &tasks[0].id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(adapted.status, "completed", "{}", adapted.error);
    let written = ids(&out.join("prompts.jsonl"));
    assert_eq!(
        written.len(),
        300,
        "the 300 shared conversations are adapted"
    );
    let result: Value = serde_json::from_str(&adapted.result_json).unwrap();
    assert_eq!(result["records"], written.len(), "{result}");
    wait_task(&mut c, "datagen", &tasks[1].id, |t| t.status == "failed").await;

    // A change to a step that has not started is applied...
    let warmer = text.replace("temperature = 0.7", "temperature = 0.9");
    let dry = apply(&mut c, &warmer, true).await.unwrap();
    assert_eq!(dry.steps[2].action, "update");
    assert_eq!(dry.steps[2].changed, ["params"]);
    assert_eq!(
        spec(dry.steps[2].task.as_ref().unwrap())["params"]["temperature"],
        0.7
    );
    let updated = apply(&mut c, &warmer, false).await.unwrap();
    let gen = updated.steps[2].task.as_ref().unwrap();
    assert_eq!(spec(gen)["params"]["temperature"], 0.9);
    assert!(updated
        .steps
        .iter()
        .filter(|s| s.step != "generation")
        .all(|s| s.action == "unchanged"));

    // ...one to a step that has run is refused, and nothing changes (the
    // runs have ended, so the revision holds still).
    let before = revision(&mut c).await;
    let reformatted = warmer.replace("[prompts]\n", "[prompts]\nformat = \"sharegpt\"\n");
    let refused = apply(&mut c, &reformatted, false).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains("adaptation step has started"),
        "{}",
        refused.message()
    );
    assert!(
        refused.message().contains("input_format"),
        "{}",
        refused.message()
    );
    assert_eq!(
        revision(&mut c).await,
        before,
        "a refused apply changed the plan"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_their_path_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let prompts = fixture("prompts/sharegpt.jsonl");
    let good = pipeline_file(&out, &prompts, "http://127.0.0.1:9/v1", "");
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let cases = [
        (
            good.replace("max_tokens = 32", "max_tokens = 0"),
            "generation.max_tokens",
        ),
        (
            good.replace("max_concurrency = 8", "max_concurrency = 0"),
            "feasibility.max_concurrency",
        ),
        (
            good.replace("[generation]", "[generation]\nconcurrency = 0"),
            "generation.concurrency",
        ),
        (
            good.replace("http://127.0.0.1:9/v1", "ftp://x"),
            "model.endpoints",
        ),
        (
            good.replace(
                &fixture("smollm2").display().to_string(),
                "/nonexistent/model",
            ),
            "model.dir",
        ),
        (
            good.replace(&prompts.display().to_string(), "/nonexistent/p.jsonl"),
            "prompts.path",
        ),
        (good.replace("temperature = 0.7", "temprature ="), "file"),
        (
            good.replace("[budget]\nmax_hours = 10.0", "[budget]\nmax_hours = -1"),
            "budget.max_hours:",
        ),
        (
            format!("{good}\n[tokenization]\nformats = [\"csv\"]\n"),
            "tokenization.formats",
        ),
    ];
    for (text, path) in cases {
        let e = apply(&mut c, &text, false).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{path}: {e:?}");
        assert!(
            e.message().starts_with(path),
            "expected a refusal naming {path}, got {:?}",
            e.message()
        );
    }
    let plans = c
        .list_plans(proto::ListPlansRequest::default())
        .await
        .unwrap();
    assert!(plans.into_inner().plans.is_empty(), "a refused file wrote");
    assert!(!out.exists(), "a refused file made the output directory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_pipeline_runs_on_the_mock_with_a_kill_in_each_phase() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let out = dir.path().join("out");
    // 12,000 ShareGPT conversations: the 300 shared ones under new ids, so
    // that each phase commits progress well before it ends and a kill from
    // outside lands inside it.
    const ROUNDS: usize = 40;
    const RECORDS: usize = 300 * ROUNDS;
    let prompts = dir.path().join("sharegpt.jsonl");
    let shared = std::fs::read_to_string(fixture("prompts/sharegpt.jsonl")).unwrap();
    let mut text = String::new();
    for round in 0..ROUNDS {
        for line in shared.lines() {
            let mut v: Value = serde_json::from_str(line).unwrap();
            let id = format!("r{round}-{}", v["id"].as_str().unwrap_or("x"));
            v["id"] = Value::String(id);
            text.push_str(&v.to_string());
            text.push('\n');
        }
    }
    std::fs::write(&prompts, text).unwrap();
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(2),
        capacity: 8,
        keep_bodies: false,
        output_tokens: Some((5, 20)),
        ..Settings::default()
    })
    .await;
    let file = pipeline_file(
        &out,
        &prompts,
        &mock.url,
        "[tokenization]\nformats = [\"megatron\", \"parquet\"]",
    );

    let mut daemon = RealDaemon::spawn(&state);
    let mut c = daemon.client().await;
    let applied = apply(&mut c, &file, false).await.unwrap();
    let tasks: Vec<String> = applied
        .steps
        .iter()
        .map(|s| s.task.as_ref().unwrap().id.clone())
        .collect();
    let (ended, kills) = run_killing_each(&mut daemon, &state, "datagen", &tasks).await;
    let killed: Vec<&str> = kills.iter().map(|k| k.task.as_str()).collect();
    assert_eq!(
        killed,
        tasks.iter().map(String::as_str).collect::<Vec<_>>(),
        "a kill must land inside each phase, with work committed and not all of it: {kills:?}"
    );
    let mut c = daemon.client().await;

    // Every prompt once through every phase.
    let adapted = ids(&out.join("prompts.jsonl"));
    let unique: BTreeSet<&String> = adapted.iter().collect();
    assert_eq!(unique.len(), adapted.len(), "an adapted prompt twice");
    assert_eq!(adapted.len(), RECORDS);
    let completed = ids(&out.join("completions.jsonl"));
    let unique: BTreeSet<&String> = completed.iter().collect();
    assert_eq!(unique.len(), completed.len(), "a completion twice");
    assert_eq!(completed.len(), adapted.len());
    // What a person reads after the kills is what the files hold.
    for (step, file) in [(0, &adapted), (2, &completed)] {
        let result: Value = serde_json::from_str(&ended[step].result_json).unwrap();
        assert_eq!(
            result["records"],
            file.len(),
            "{}: {result}",
            ended[step].kind
        );
        let done = ended[step].progress.as_ref().map_or(0, |p| p.done);
        assert_eq!(done as usize, file.len(), "{}: progress", ended[step].kind);
    }
    let tok = c
        .get_task(proto::GetTaskRequest {
            id: tasks[3].clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let result: Value = serde_json::from_str(&tok.result_json).unwrap();
    assert_eq!(result["records"], RECORDS, "{result}");
    let index = todod_e2e::megatron::read(&out.join("train"));
    assert_eq!(index.sequences.len(), RECORDS);
    assert!(out.join("train.parquet").exists());
}
