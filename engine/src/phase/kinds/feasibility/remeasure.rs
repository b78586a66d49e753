//! A re-measurement during a generation (the `remeasure` schedule action):
//! the feasibility check run again at the level the generation sends at, so
//! that a run of days learns when the server itself changed.
//!
//! The run is held for it through its gate: the requests out finish, no new
//! one starts, the level is measured on a server that serves only the
//! measurement (as the feasibility sweep measured it), and the run goes on.
//! Measuring beside a running generation would measure a server at twice
//! the load, and compare with nothing. What it finds (figures against the
//! sweep's at the same level, and a projection of the records left) is the
//! firing's event, and the run's drift check is held against it from then
//! on. A daemon killed in the middle records nothing: the slot is still due
//! and fires again when it starts.
use todod_proto::results::ProgressCounts;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::projection::{self, Projection};
use super::stats::Level;
use super::{measure, FeasibilitySpec, DEFAULT_SEED};
use todod_domain::{Status, TaskId};
use crate::phase::gate::Gates;
use crate::phase::kinds::generation::held::{self as vouch, Vouch};
use crate::phase::kinds::generation::prompts::Prompt;
use crate::phase::kinds::generation::GenerationSpec;
use todod_proto::results::{self, Compared, FeasibilityResult, Remeasured};
use crate::phase::PhaseStore;

/// How much longer than a request's deadline the drain may take.
const DRAIN_SLACK: Duration = Duration::from_secs(30);

/// Re-measures for generation `task`; the outcome for the firing's event.
/// Its requests are counted in `telemetry` under the generation's task,
/// kind `remeasure`.
pub async fn remeasure(
    store: &PhaseStore,
    gates: &Gates,
    telemetry: &todod_telemetry::Telemetry,
    task: TaskId,
) -> Value {
    match inner(store, gates, telemetry, task).await {
        Ok(outcome) => outcome,
        Err(error) => json!({ "error": error }),
    }
}

async fn inner(
    store: &PhaseStore,
    gates: &Gates,
    telemetry: &todod_telemetry::Telemetry,
    task: TaskId,
) -> Result<Value, String> {
    let generation = store
        .get_task(task)
        .await
        .map_err(|e| format!("cannot read task {task}: {e}"))?;
    if generation.status != Status::InProgress {
        return Ok(json!({
            "skipped": format!(
                "generation {task} is {}, not running: there is no run to measure for",
                generation.status
            )
        }));
    }
    let Some(gate) = gates.get(task) else {
        return Ok(json!({
            "skipped": format!("generation {task} is starting or stopping; the next firing measures")
        }));
    };
    let Some(vouch) = vouch::of(store, task).await? else {
        return Err(format!(
            "no completed feasibility task vouches for generation {task}: add one as its \
             dependency, there is nothing to measure against"
        ));
    };
    let feasibility = store
        .get_task(vouch.task)
        .await
        .map_err(|e| format!("cannot read feasibility task {}: {e}", vouch.task))?;
    let spec =
        FeasibilitySpec::parse(feasibility.spec.as_deref().unwrap_or("{}")).map_err(|e| {
            format!(
                "the spec of feasibility task {} is not valid: {e}",
                vouch.task
            )
        })?;
    let shape = GenerationSpec::parse(generation.spec.as_deref().unwrap_or("{}"))
        .map_err(|e| format!("the spec of generation {task} is not valid: {e}"))?;
    let seed = spec.seed.unwrap_or(DEFAULT_SEED);
    let (sample, _) = measure::sample_prompts(&shape, spec.sample_size, seed)?;
    let client = measure::level_client(
        &shape,
        spec.request_deadline_seconds,
        Some(telemetry.requests(task, "remeasure")),
    )?;
    let template = Arc::new(shape.request_template());
    let c = gate.concurrency();
    let window = measure::Window {
        min_requests: spec.min_requests,
        min_seconds: spec.min_seconds,
        max_seconds: spec.max_seconds,
        request_deadline_seconds: spec.request_deadline_seconds,
    };

    // Bounded by one request's deadline: a request out through its
    // retries would stall the run (new requests queue behind the hold)
    // for longer than a measurement is worth; the run then goes on.
    let drain = Duration::from_secs(shape.request_deadline_seconds) + DRAIN_SLACK;
    let holding = Instant::now();
    let Some(hold) = gate.hold(drain).await else {
        // The wait stalled the run: it is part of what the firing cost.
        let waited = holding.elapsed().as_secs_f64();
        if gate.run_ended() {
            return Ok(json!({
                "skipped": format!("the run of generation {task} ended before it could be held"),
                "held_seconds": waited,
            }));
        }
        return Ok(json!({
            "error": format!(
                "the run's requests did not finish within {} s; it was not held, and is not \
                 measured",
                drain.as_secs()
            ),
            "held_seconds": waited,
        }));
    };
    let drained = holding.elapsed().as_secs_f64();
    let asked = feasibility
        .result
        .as_deref()
        .and_then(results::parse::<FeasibilityResult>)
        .map_or(0, |r| r.sample.asked);
    let position = match store.get_task(task).await {
        Ok(now) => ended_of(&now.progress).0,
        Err(_) => ended_of(&generation.progress).0,
    };
    let measured = measure::level(
        &shape,
        client,
        template,
        Arc::new(unseen(sample, asked, position + c as u64)),
        0,
        c,
        window,
    );
    let level = tokio::select! {
        level = measured => level,
        // Stopped, cancelled or paused meanwhile: a measurement for a run
        // that is not there (or beside the task's next run) says nothing.
        _ = gate.until_run_ends() => {
            return Ok(json!({
                "skipped": format!("the run of generation {task} ended during the measurement"),
                "held_seconds": holding.elapsed().as_secs_f64(),
            }));
        }
    };
    // The run's last report, from while it was held: what is left now.
    let left = match store.get_task(task).await {
        Ok(now) => left_of(&now.progress),
        Err(_) => left_of(&generation.progress),
    };
    let lengths = projection::prompt_lengths([&level]);
    let projection = projection::project(
        &level,
        &lengths,
        left,
        projection::Seen::NONE,
        &spec.price,
        seed,
    );
    if let Some(projection) = &projection {
        hold.rebase(projection.clone());
    }
    let held = holding.elapsed().as_secs_f64();
    drop(hold);
    let found = outcome(
        &vouch,
        feasibility.result.as_deref(),
        &level,
        projection.as_ref(),
        left,
        &spec,
        (drained, held),
    );
    Ok(serde_json::to_value(found).unwrap_or_default())
}

/// Records the run has still to answer, by its last progress report.
/// The sample's prompts in the order a re-measurement asks them: first
/// those a server with a prefix cache has not seen, as far as can be told
/// (not the `asked` the sweep asked, and past line `position` of the file,
/// which the run has not reached; nearest first, so that the next
/// re-measurement, once the run has passed them, asks others), then the
/// rest of the sample, so that a window longer than the unseen prompts
/// repeats none of them too soon. A run asks each prompt once; prompts the
/// server answers from its cache would measure it faster than the run
/// finds it.
fn unseen(sample: Vec<Prompt>, asked: usize, position: u64) -> Vec<Prompt> {
    let (mut ahead, mut rest): (Vec<_>, Vec<_>) = sample
        .into_iter()
        .enumerate()
        .partition(|(i, p)| *i >= asked && p.line > position);
    ahead.sort_by_key(|(_, p)| p.line);
    // Of the rest, the run's own (asked once, by the run) before the
    // sweep's (asked at every level).
    rest.sort_by_key(|(i, _)| std::cmp::Reverse(*i >= asked));
    ahead.into_iter().chain(rest).map(|(_, p)| p).collect()
}

/// What the run's progress says: the records it has ended (done or
/// failed: how far into its prompt file it is) and its total.
fn ended_of(progress: &Option<String>) -> (u64, u64) {
    let p = progress
        .as_deref()
        .and_then(ProgressCounts::parse)
        .unwrap_or_default();
    (p.answered(), p.total.unwrap_or(0))
}

fn left_of(progress: &Option<String>) -> u64 {
    let (ended, total) = ended_of(progress);
    total.saturating_sub(ended)
}

fn outcome(
    vouch: &Vouch,
    sweep: Option<&str>,
    level: &Level,
    projection: Option<&Projection>,
    left: u64,
    spec: &FeasibilitySpec,
    (drained, held): (f64, f64),
) -> Remeasured {
    let now = level.figures();
    // The confirmation, where it measured this level: like this
    // measurement, it asked prompts the server had not seen.
    let then = sweep
        .and_then(results::parse::<FeasibilityResult>)
        .and_then(|r| {
            r.confirmation
                .into_iter()
                .chain(r.levels)
                .find(|l| l.concurrency == level.concurrency)
        });
    let tokens = Compared::new(
        now.output_tokens_per_second,
        then.as_ref().map(|t| t.output_tokens_per_second),
    );
    let mut notes = Vec::new();
    if now.error_rate > spec.max_error_rate {
        notes.push(format!(
            "{:.1}% of the measurement's requests failed, over the feasibility limit of {:.1}%",
            now.error_rate * 100.0,
            spec.max_error_rate * 100.0
        ));
    }
    let message = match projection {
        Some(p) => Some(format!(
            "at concurrency {}: {:.0} output tokens/s{}; the {left} records left are \
             projected at {:.2} h ({:.2}-{:.2})",
            level.concurrency,
            now.output_tokens_per_second,
            match tokens.ratio {
                Some(r) => format!(" ({:.0}% of the feasibility sweep's)", r * 100.0),
                None => String::new(),
            },
            p.hours.value,
            p.hours.low,
            p.hours.high
        )),
        None => {
            notes.push(format!(
                "no request of the measurement at concurrency {} succeeded; nothing to project \
                 from",
                level.concurrency
            ));
            None
        }
    };
    Remeasured {
        feasibility: vouch.task.to_string(),
        concurrency: level.concurrency,
        held_seconds: held,
        drain_seconds: drained,
        requests: now.requests,
        error_rate: now.error_rate,
        output_tokens_per_second: tokens,
        requests_per_second: Compared::new(
            now.requests_per_second,
            then.as_ref().map(|t| t.requests_per_second),
        ),
        p99_seconds: now.e2e_seconds.map(|s| s.p99),
        left,
        projection: projection.cloned(),
        message,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_records_left_come_from_the_last_progress() {
        let p = Some(r#"{"done": 70, "failed": 5, "total": 100}"#.to_string());
        assert_eq!(left_of(&p), 25);
        assert_eq!(left_of(&None), 0);
        let over = Some(r#"{"done": 120, "total": 100}"#.to_string());
        assert_eq!(left_of(&over), 0);
    }

    fn prompt(line: u64) -> Prompt {
        Prompt {
            id: format!("p{line}"),
            line,
            input: serde_json::value::RawValue::from_string(format!("\"{line}\"")).unwrap(),
            fields: Vec::new(),
        }
    }

    #[test]
    fn a_remeasure_asks_prompts_neither_the_sweep_nor_the_run_has_asked() {
        // The sample in its drawn order; the sweep asked its first three.
        let sample: Vec<Prompt> = [50, 10, 90, 70, 20, 80, 60].map(prompt).into();
        let lines = |v: Vec<Prompt>| v.iter().map(|p| p.line).collect::<Vec<_>>();
        // The run is past line 30: 20 is behind it; nearest first, then
        // the run's, then the sweep's.
        assert_eq!(
            lines(unseen(sample.clone(), 3, 30)),
            [60, 70, 80, 20, 50, 10, 90]
        );
        assert_eq!(
            lines(unseen(sample.clone(), 3, 75)),
            [80, 70, 20, 60, 50, 10, 90]
        );
        // None unseen: the run's, then the sweep's, each as drawn.
        assert_eq!(
            lines(unseen(sample.clone(), 3, 100)),
            [70, 20, 80, 60, 50, 10, 90]
        );
        assert_eq!(lines(unseen(sample, 7, 0)), [50, 10, 90, 70, 20, 80, 60]);
    }
}
