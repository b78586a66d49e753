//! The feasibility phase: measure an inference server with the requests of
//! the generation it vouches for, project that whole run with an interval,
//! and decide go or no-go against a budget. Its result is the gate in the
//! graph: a no-go fails the task (keeping its figures), so the generation
//! after it stays blocked until someone decides.
//!
//! Each level measured is committed to the checkpoint as soon as it is
//! complete, by the attempt that measured it whole; a run killed in the
//! middle of a level measures that level again from the start, so no level
//! mixes two runs. A retry after the task ended measures everything again.
pub mod kind;
pub mod measure;
pub mod outcomes;
pub mod projection;
pub mod remeasure;
mod report;
pub mod spec;
pub mod stats;
pub mod sweep;
#[cfg(test)]
mod tests;

use todod_proto::results::ProgressCounts;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use todod_domain::Status;
use crate::phase::kinds::generation::GenerationSpec;
use crate::phase::{Ended, PhaseState, RunContext};
use todod_proto::results::{
    Choice, FeasibilityResult, MeasuredBy, SweepCost, SweepSample, Warmup,
};
use todod_store::Error as StoreError;
pub use spec::{FeasibilitySpec, ShapeSource};
use stats::{Figures, Level};

/// The seed of the prompt sample and the bootstrap when the spec gives none.
pub const DEFAULT_SEED: u64 = 0x7d0d_5eed;

/// The sweep so far (`PhaseState::stats`); `PhaseState::pass` counts the
/// measurements, `closed` says this one has its verdict.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Sweep {
    levels: Vec<Level>,
    /// Why the geometric part of the sweep (1, 2, 4, ...) stopped.
    #[serde(default)]
    stopped_because: Option<String>,
    /// Why the sweep stopped short of what it would have measured (its
    /// cost bound).
    #[serde(default)]
    cut_short: Option<String>,
    /// What the sweep was last allowed to spend, in seconds.
    #[serde(default)]
    allowed_seconds: Option<f64>,
    /// What the first warm-up of this measurement said (later ones, on
    /// resume, go to the log), so that the result does not depend on how
    /// often the run was interrupted.
    #[serde(default)]
    warmup_notes: Option<Vec<String>>,
    /// The chosen level measured once more, after the sweep: see
    /// [`Step::Confirm`].
    #[serde(default)]
    confirmation: Option<Level>,
}

/// What the next measurement is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A level of the plan (1, 2, 4, ... or the levels given).
    Sweep,
    /// Between the best level and a neighbour that differs from it.
    Between,
    /// The level the sweep would choose, measured again in a window of its
    /// own. Choosing the level that measured best picks, among levels
    /// within their noise, the one whose window ran fast: on llama.cpp's
    /// server the chosen level measured 19-23 % above what a later sweep
    /// found, and its generation took 30 % longer than projected, in two
    /// runs of three (BENCHMARKS.md, "Runs in a row"). A second
    /// measurement of that one level is not chosen for being high, so the
    /// projection is made from it.
    ///
    /// It asks the sample's prompts that no level asked. Servers keep a
    /// prefix cache (vLLM, SGLang, llama.cpp by default), and the levels ask
    /// the same prompts again and again: on llama.cpp's server, agentic
    /// prompts of about 450 tokens asked a second time were answered 2.4×
    /// as fast (BENCHMARKS.md, "Prompts the server has seen"). A run asks
    /// each prompt once; a projection from prompts the server has cached
    /// would promise it that speed.
    Confirm,
}

impl Sweep {
    /// The levels measured between the best and its neighbours: those not
    /// in the plan (a midpoint of two planned levels is never planned).
    fn between(&self, planned: &[usize]) -> Vec<usize> {
        self.levels
            .iter()
            .map(|l| l.concurrency)
            .filter(|c| !planned.contains(c))
            .collect()
    }

    /// How far into the sample the levels and the confirmation have asked:
    /// the prompts before it are the ones the server has seen.
    fn prompts_asked(&self) -> usize {
        self.levels_asked().max(
            self.confirmation
                .as_ref()
                .map_or(0, |l| l.first_prompt + l.prompts_asked),
        )
    }

    /// How far into the sample the levels alone have asked.
    fn levels_asked(&self) -> usize {
        self.levels
            .iter()
            .map(|l| l.first_prompt + l.prompts_asked)
            .max()
            .unwrap_or(0)
    }

    /// What measuring took, the confirmation included.
    fn spent_seconds(&self) -> f64 {
        self.levels
            .iter()
            .chain(&self.confirmation)
            .map(|l| l.wall_seconds)
            .sum()
    }
}

/// The request shape the spec points at; `None` if the run was told to stop
/// while it waited for a generation to depend on it.
async fn shape(run: &RunContext, spec: &FeasibilitySpec) -> Result<Option<GenerationSpec>, String> {
    let from_task = |task: &todod_store::TaskView| -> Result<GenerationSpec, String> {
        let json = task.spec.as_deref().unwrap_or("{}");
        GenerationSpec::parse(json)
            .map_err(|e| format!("the spec of generation task {} is not valid: {e}", task.id))
    };
    match &spec.shape {
        ShapeSource::Inline(inline) => Ok(Some((**inline).clone())),
        ShapeSource::Task(id) => {
            let task = run
                .store
                .get_task(*id)
                .await
                .map_err(|e| format!("cannot read generation task {id}: {e}"))?;
            if task.kind != crate::phase::kinds::generation::kind::KIND {
                return Err(format!(
                    "task {id} is a {} task, not a generation",
                    task.kind
                ));
            }
            from_task(&task).map(Some)
        }
        ShapeSource::Dependent => {
            // A feasibility task is added before the generation that depends
            // on it: until that one exists, wait for it.
            let mut committed = run.store.subscribe();
            let mut stop = run.stop.clone();
            let mut said = false;
            loop {
                let dependents =
                    run.store.dependents(run.task).await.map_err(|e| {
                        format!("cannot read the tasks that depend on this one: {e}")
                    })?;
                let generations: Vec<_> = dependents
                    .iter()
                    .filter(|t| t.kind == crate::phase::kinds::generation::kind::KIND)
                    .collect();
                match generations.as_slice() {
                    [one] => return from_task(one).map(Some),
                    [] => {}
                    several => {
                        return Err(format!(
                            "{} generation tasks depend on this one ({}); name the one to \
                             measure in spec.generation",
                            several.len(),
                            several
                                .iter()
                                .map(|t| t.id.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    }
                }
                if !said {
                    let note = json!({
                        "stage": "waiting",
                        "message": "waiting for a generation task that depends on this one \
                                    (or name one in spec.generation)",
                    });
                    if !progress(run, note).await? {
                        return Ok(None);
                    }
                    said = true;
                }
                tokio::select! {
                    _ = committed.changed() => {}
                    _ = crate::phase::stopped(&mut stop) => return Ok(None),
                }
            }
        }
    }
}

/// Commits the sweep, fenced. `false`: the run lost its task.
async fn commit(run: &RunContext, state: &PhaseState) -> Result<bool, String> {
    match run
        .store
        .commit_phase_state(run.task, &run.attempt, &state.to_json(), None)
        .await
    {
        Ok(()) => Ok(true),
        Err(StoreError::Fenced { .. }) => Ok(false),
        Err(e) => Err(format!("cannot commit the sweep: {e}")),
    }
}

async fn progress(run: &RunContext, value: Value) -> Result<bool, String> {
    match run
        .store
        .report_progress(run.task, &run.attempt, &value.to_string())
        .await
    {
        Ok(()) => Ok(true),
        Err(StoreError::Fenced { .. }) => Ok(false),
        Err(e) => Err(format!("cannot report progress: {e}")),
    }
}

/// The levels a sweep measures, in order.
fn planned_levels(spec: &FeasibilitySpec) -> Vec<usize> {
    match &spec.levels {
        Some(levels) => levels.clone(),
        None => {
            let mut levels = Vec::new();
            let mut c = spec.min_concurrency;
            while c < spec.max_concurrency {
                levels.push(c);
                c *= 2;
            }
            levels.push(spec.max_concurrency);
            levels
        }
    }
}

fn rules(spec: &FeasibilitySpec) -> sweep::Rules {
    sweep::Rules {
        max_error_rate: spec.max_error_rate,
        max_p99_latency_seconds: spec.max_p99_latency_seconds,
        min_gain: spec.min_gain,
    }
}

/// The next level to measure, or `None` when the sweep is over (its reasons
/// then set in `sweep`).
fn next_level(
    spec: &FeasibilitySpec,
    sweep: &mut Sweep,
    planned: &[usize],
    records: u64,
) -> Option<(usize, Step)> {
    let figures: Vec<Figures> = sweep.levels.iter().map(Level::figures).collect();
    if sweep.cut_short.is_none() {
        if let Some(next) = next_in_sweep(spec, sweep, planned, &figures) {
            // Within the sweep's budget: what it spent and what the next
            // level is likely to cost (as much as the last one did).
            let spent = sweep.spent_seconds();
            let likely = sweep.levels.last().map_or(0.0, |l| l.wall_seconds);
            let run = projected_run_seconds(spec, &figures, records);
            let allowed =
                sweep::allowed_seconds(run, spec.max_sweep_share, spec.min_sweep_seconds);
            sweep.allowed_seconds = Some(allowed);
            if sweep.levels.is_empty() || spent + likely <= allowed {
                return Some(next);
            }
            sweep.cut_short = Some(format!(
                "the sweep's budget: {spent:.0} s spent, and concurrency {} would take about \
                 {likely:.0} s more, over the {allowed:.0} s allowed ({:.0}% of the projected \
                 run, at least {:.0} s)",
                next.0,
                spec.max_sweep_share * 100.0,
                spec.min_sweep_seconds
            ));
        }
    }
    // A geometric sweep of more than one level confirms its choice, within
    // its budget or not: the levels after the first asked prompts the
    // server had seen, and a projection from them alone can promise a run
    // twice as fast as it will be (`Step::Confirm`). Its cost is counted
    // with the sweep's. Levels given (a re-measurement's one level) are
    // what is asked.
    if spec.levels.is_some() || sweep.levels.len() < 2 || sweep.confirmation.is_some() {
        return None;
    }
    let (index, _) = choose(spec, &figures)?;
    Some((figures[index].concurrency, Step::Confirm))
}

/// The next level of the sweep itself (one planned, or one between the
/// best and a neighbour), if any is left; sets why the planned levels
/// stopped.
fn next_in_sweep(
    spec: &FeasibilitySpec,
    sweep: &mut Sweep,
    planned: &[usize],
    figures: &[Figures],
) -> Option<(usize, Step)> {
    let measured = |c: usize| sweep.levels.iter().any(|l| l.concurrency == c);
    if sweep.stopped_because.is_none() {
        match planned.iter().copied().find(|&c| !measured(c)) {
            Some(c) => return Some((c, Step::Sweep)),
            None => {
                sweep.stopped_because = Some(match &spec.levels {
                    Some(_) => "every level given was measured".into(),
                    None => format!("the level cap of {} was reached", spec.max_concurrency),
                });
            }
        }
    }
    // Given levels are measured as given; a geometric sweep then measures
    // between the best and its neighbours.
    if spec.levels.is_some() {
        return None;
    }
    let c = sweep::between(figures, &rules(spec)).into_iter().next()?;
    Some((c, Step::Between))
}

/// The level the rules choose among `figures` (sorted or not), and why.
fn choose(spec: &FeasibilitySpec, figures: &[Figures]) -> Option<(usize, String)> {
    stats::choose(
        figures,
        spec.choose,
        spec.max_error_rate,
        spec.max_p99_latency_seconds,
    )
}

/// How long the run takes at the best level measured so far, roughly (the
/// sweep's budget is a share of it).
fn projected_run_seconds(spec: &FeasibilitySpec, figures: &[Figures], records: u64) -> Option<f64> {
    let rules = rules(spec);
    let best = figures
        .iter()
        .filter(|f| rules.usable(f) && f.requests_per_second > 0.0)
        .map(|f| f.requests_per_second)
        .max_by(f64::total_cmp)?;
    Some(records as f64 / best)
}

/// What the sweep cost, for the result.
fn cost(
    spec: &FeasibilitySpec,
    sweep: &Sweep,
    projection: Option<&projection::Projection>,
) -> SweepCost {
    let spent = sweep.spent_seconds();
    let run = projection.map(|p| p.hours.value * 3600.0);
    SweepCost {
        seconds: spent,
        levels: sweep.levels.len(),
        between: sweep.between(&planned_levels(spec)),
        projected_run_seconds: run,
        share_of_run: run.filter(|r| *r > 0.0).map(|r| spent / r),
        max_share: spec.max_sweep_share,
        min_seconds: spec.min_sweep_seconds,
        allowed_seconds: sweep.allowed_seconds,
        cut_short: sweep.cut_short.clone(),
    }
}

fn summary(figures: &[Figures]) -> Value {
    figures
        .iter()
        .map(|f| {
            json!({
                "concurrency": f.concurrency,
                "output_tokens_per_second": f.output_tokens_per_second,
                "p99_seconds": f.e2e_seconds.map(|s| s.p99),
                "error_rate": f.error_rate,
            })
        })
        .collect()
}

/// Runs (or resumes) one attempt; `Err` breaks it off (see `kind.rs`).
async fn run_inner(run: &RunContext, spec: FeasibilitySpec) -> Result<Ended, String> {
    let mut state = PhaseState::resume(&run.store, run.task).await?;
    if state.closed {
        // A retry after a verdict: measure again, from nothing.
        state = PhaseState {
            pass: state.pass + 1,
            ..PhaseState::default()
        };
    }
    let sweep: Sweep = state.stats()?;
    let Some(shape) = shape(run, &spec).await? else {
        return Ok(Ended::Stopped);
    };
    // Servers the daemon runs for the shape are measured once ready, and
    // kept for the whole sweep; one that gives up breaks the run off,
    // naming it.
    use crate::phase::kinds::generation::serving;
    let Some((shape, servers)) = serving::attach(run, &shape).await? else {
        return Ok(Ended::Stopped);
    };
    let watched = serving::Watched::new(run, &servers);
    match measure_on(&watched.run, spec, state, sweep, shape).await {
        Ok(Ended::Stopped) => match watched.gave_up() {
            Some(why) => Err(why),
            None => Ok(Ended::Stopped),
        },
        other => other,
    }
}

/// The sweep, on servers that are ready.
async fn measure_on(
    run: &RunContext,
    spec: FeasibilitySpec,
    mut state: PhaseState,
    mut sweep: Sweep,
    shape: GenerationSpec,
) -> Result<Ended, String> {
    let seed = spec.seed.unwrap_or(DEFAULT_SEED);
    let (sample, usable) = measure::sample_prompts(&shape, spec.sample_size, seed)?;
    let records = spec.records.unwrap_or(usable);
    let sample = Arc::new(sample);
    let mut stop = run.stop.clone();

    let mut warming = json!({"stage": "warm-up"});
    ProgressCounts {
        done: Some(sweep.levels.len() as u64),
        message: Some(format!("warming up {} endpoint(s)", shape.endpoints.len())),
        ..ProgressCounts::default()
    }
    .merge_into(&mut warming);
    if !progress(run, warming).await? {
        return Ok(Ended::Stopped);
    }
    let warm = measure::warm_up(
        &shape,
        &sample,
        spec.warmup_requests,
        spec.warmup_max_tokens,
        Duration::from_secs(spec.warmup_timeout_seconds),
    );
    let notes = tokio::select! {
        notes = warm => notes,
        _ = crate::phase::stopped(&mut stop) => return Ok(Ended::Stopped),
    };
    for note in &notes {
        tracing::info!(task = %run.task, %note, "warm-up");
    }
    if sweep.warmup_notes.is_none() {
        sweep.warmup_notes = Some(notes);
        state.set_stats(&sweep);
        if !commit(run, &state).await? {
            return Ok(Ended::Stopped);
        }
    }

    let client = measure::level_client(
        &shape,
        spec.request_deadline_seconds,
        Some(run.telemetry.requests(run.task, "feasibility")),
    )?;
    let template = Arc::new(shape.request_template());
    let window = measure::Window {
        min_requests: spec.min_requests,
        min_seconds: spec.min_seconds,
        max_seconds: spec.max_seconds,
        request_deadline_seconds: spec.request_deadline_seconds,
    };
    let planned = planned_levels(&spec);
    // The servers' own figures, each second: what limited each level.
    let server = todod_inference::server_watch::ServerWatch::start(
        &shape.endpoints,
        std::time::Duration::from_secs(1),
        run.telemetry.servers().clone(),
    );
    loop {
        let figures: Vec<Figures> = sweep.levels.iter().map(Level::figures).collect();
        let Some((c, step)) = next_level(&spec, &mut sweep, &planned, records) else {
            break;
        };
        let mut note = json!({
            "stage": if step == Step::Confirm { "confirming" } else { "measuring" },
            "concurrency": c,
            "levels_done": sweep.levels.len(),
            "levels_planned": planned.len(),
            "levels": summary(&figures),
        });
        ProgressCounts {
            done: Some(sweep.levels.len() as u64),
            total: Some(planned.len().max(sweep.levels.len() + 1) as u64),
            message: Some(match step {
                Step::Sweep => format!("measuring concurrency {c}"),
                Step::Between => {
                    format!("measuring concurrency {c}, between the best level and a neighbour")
                }
                Step::Confirm => format!(
                    "measuring concurrency {c} again: the level chosen, in a window of its own"
                ),
            }),
            ..ProgressCounts::default()
        }
        .merge_into(&mut note);
        if !progress(run, note).await? {
            return Ok(Ended::Stopped);
        }
        let began = std::time::Instant::now();
        // The confirmation asks prompts no level asked, as the run will:
        // see `Step::Confirm`.
        let first = match step {
            Step::Confirm => sweep.prompts_asked(),
            Step::Sweep | Step::Between => 0,
        };
        let measured = measure::level(
            &shape,
            client.clone(),
            template.clone(),
            sample.clone(),
            first,
            c,
            window,
        );
        let mut level = tokio::select! {
            level = measured => level,
            _ = crate::phase::stopped(&mut stop) => return Ok(Ended::Stopped),
        };
        level.measured_by = run.attempt.clone();
        level.server = server.summary_since(began);
        if step == Step::Confirm {
            sweep.confirmation = Some(level);
        } else {
            sweep.levels.push(level);
        }
        if step == Step::Sweep {
            // The geometric levels, in the order measured, decide its stop;
            // given levels stop only on errors.
            let geometric: Vec<Figures> = sweep
                .levels
                .iter()
                .filter(|l| planned.contains(&l.concurrency))
                .map(Level::figures)
                .collect();
            let why = sweep::stop_after(&geometric, &rules(&spec));
            sweep.stopped_because = match (&spec.levels, why) {
                (Some(_), Some(why)) if why.starts_with("errors") => Some(why),
                (Some(_), _) => None,
                (None, why) => why,
            };
        }
        state.set_stats(&sweep);
        if !commit(run, &state).await? {
            return Ok(Ended::Stopped);
        }
    }
    state.closed = true;
    state.complete = true;
    state.set_stats(&sweep);
    let decided = decide(&spec, &shape, &sweep, records, usable, seed);
    // The last report says where the sweep ended, not the level it was
    // measuring before: a finished task's progress must not look unfinished.
    let figures: Vec<Figures> = sweep.levels.iter().map(Level::figures).collect();
    let mut note = json!({
        "stage": "decided",
        "levels_done": sweep.levels.len(),
        "levels_planned": planned.len(),
        "levels": summary(&figures),
    });
    ProgressCounts {
        done: Some(sweep.levels.len() as u64),
        total: Some(sweep.levels.len() as u64),
        message: Some(format!(
            "{} level(s) measured: {}",
            sweep.levels.len(),
            decided.result.verdict
        )),
        ..ProgressCounts::default()
    }
    .merge_into(&mut note);
    if !progress(run, note).await? {
        return Ok(Ended::Stopped);
    }
    // A re-measurement replaces its own earlier files; the first one never
    // replaces a file it did not write (the same bytes, from an interrupted
    // finish, are accepted).
    let replace = state.pass > 0;
    let result = serde_json::to_string(&decided.result).unwrap_or_default();
    if let Some(path) = &spec.report {
        let plan = run
            .store
            .get_task(run.task)
            .await
            .map_err(|e| format!("cannot read the task: {e}"))?
            .plan;
        let task = run.task.to_string();
        let origin = report::Origin {
            task: &task,
            plan: &plan,
        };
        let html = report::html(&decided.result, origin);
        report::write(run.fs.as_ref(), "report", path, html.as_bytes(), replace)?;
    }
    if let Some(path) = &spec.result_file {
        let mut json = serde_json::to_vec_pretty(&decided.result).unwrap_or_default();
        json.push(b'\n');
        report::write(run.fs.as_ref(), "result file", path, &json, replace)?;
    }
    Ok(if decided.reasons.is_empty() {
        Ended::Completed {
            result,
            state: Some(state),
        }
    } else {
        Ended::Refused {
            error: format!("no-go: {}", decided.reasons.join("; ")),
            result,
            state: Some(state),
        }
    })
}

struct Decided {
    result: FeasibilityResult,
    reasons: Vec<String>,
}

/// The choice, the projection and the verdict of a finished sweep.
fn decide(
    spec: &FeasibilitySpec,
    shape: &GenerationSpec,
    sweep: &Sweep,
    records: u64,
    usable: u64,
    seed: u64,
) -> Decided {
    // In order of concurrency: the levels measured between come last.
    let mut levels: Vec<&Level> = sweep.levels.iter().collect();
    levels.sort_by_key(|l| l.concurrency);
    let figures: Vec<Figures> = levels.iter().map(|l| l.figures()).collect();
    let chosen = choose(spec, &figures);
    let mut reasons = Vec::new();
    let mut choice = None;
    let mut projected = None;
    match chosen {
        None => {
            reasons.push(match spec.max_p99_latency_seconds {
                Some(bound) => format!(
                    "no level measured kept errors under {:.1}% and p99 latency under {bound} s",
                    spec.max_error_rate * 100.0
                ),
                None => format!(
                    "no level measured kept errors under {:.1}%",
                    spec.max_error_rate * 100.0
                ),
            });
        }
        Some((index, why)) => {
            // The projection is the confirmation's, when it measured the
            // level chosen and answered (see `Step::Confirm`).
            let sample = spec.sample_size.min(usable as usize);
            let (level, seen, repeated) = match &sweep.confirmation {
                Some(again)
                    if again.concurrency == levels[index].concurrency
                        && !again.samples.is_empty() =>
                {
                    // The run asks again the prompts the sweep asked: the
                    // ones the server answers from its cache, if it has one.
                    let seen = projection::Seen {
                        records: sweep.prompts_asked().min(sample) as u64,
                        speedup: projection::cache_speedup(levels[index], again),
                    };
                    // A sample too small for the confirmation's window
                    // wraps to prompts the levels asked.
                    let fresh = sample.saturating_sub(sweep.levels_asked());
                    (again, seen, again.prompts_asked.saturating_sub(fresh))
                }
                _ => (levels[index], projection::Seen::NONE, 0),
            };
            choice = Some(Choice {
                concurrency: level.concurrency,
                why,
            });
            let lengths =
                projection::prompt_lengths(sweep.levels.iter().chain(&sweep.confirmation));
            match projection::project(level, &lengths, records, seen, &spec.price, seed) {
                Some(mut projection) => {
                    if repeated > 0 {
                        projection.assumptions.push(format!(
                            "the sample ran out: {repeated} of the confirmation's {} requests \
                             asked prompts the levels had asked, which a server with a prefix \
                             cache answers faster (a larger sample_size or prompt file avoids it)",
                            level.prompts_asked
                        ));
                    }
                    reasons = projection::verdict(&projection, &level.figures(), &spec.budget);
                    projected = Some(projection);
                }
                None => reasons.push(format!(
                    "concurrency {} measured no successful request to project from",
                    level.concurrency
                )),
            }
        }
    }
    let result = FeasibilityResult {
        records,
        usable_prompts: usable,
        prompts: shape.prompts.display().to_string(),
        model: shape.model.clone(),
        endpoints: shape.endpoints.clone(),
        sample: SweepSample {
            size: spec.sample_size.min(usable as usize),
            seed,
            asked: sweep.prompts_asked().min(spec.sample_size.min(usable as usize)),
        },
        warmup: Warmup {
            requests_per_endpoint: spec.warmup_requests,
            max_tokens: spec.warmup_max_tokens,
            notes: sweep.warmup_notes.clone().unwrap_or_default(),
        },
        sweep_stopped: sweep
            .cut_short
            .as_ref()
            .or(sweep.stopped_because.as_ref())
            .cloned(),
        measured_by: levels
            .iter()
            .map(|l| MeasuredBy {
                concurrency: l.concurrency,
                attempt: l.measured_by.clone(),
            })
            .collect(),
        levels: figures,
        confirmation: sweep.confirmation.as_ref().map(Level::figures),
        drift_after_seconds: spec.drift_after_seconds,
        calibrate_after_seconds: spec.calibrate_after_seconds,
        budget: serde_json::to_value(spec.budget).unwrap_or_default(),
        choice,
        sweep: Some(cost(spec, sweep, projected.as_ref())),
        projection: projected,
        verdict: if reasons.is_empty() { "go" } else { "no-go" }.into(),
        reasons: reasons.clone(),
    };
    Decided { result, reasons }
}

/// Whether `status` of a feasibility task lets its dependents go.
pub fn vouches(status: Status) -> bool {
    status == Status::Completed
}
