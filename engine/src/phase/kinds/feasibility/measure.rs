//! Measuring a server: the warm-up of each endpoint, and one concurrency
//! level at a time. A level keeps `c` requests in flight with prompts drawn
//! from the real prompt file; its window opens once every slot has answered
//! once (so the ramp-up does not count) and closes when it holds enough
//! requests and time; requests started inside it count, wherever they end,
//! and the ones started after are abandoned (the drain does not count).
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::stats::{Level, Sample, SplitMix};
use todod_inference::{Failure, InferenceClient, Outcome, RequestTemplate};
use crate::phase::kinds::generation::prompts::{self, Prompt};
use crate::phase::kinds::generation::GenerationSpec;

/// A seeded sample of `size` prompts of the file, by reservoir sampling,
/// and the number of usable prompts in it: the same seed draws the same
/// prompts from the same file.
pub fn sample_prompts(
    spec: &GenerationSpec,
    size: usize,
    seed: u64,
) -> Result<(Vec<Prompt>, u64), String> {
    let file = crate::phase::files::open_input(&spec.prompts)
        .map_err(|e| format!("cannot read {}: {e}", spec.prompts.display()))?;
    let mut reader = std::io::BufReader::new(file);
    let mut rng = SplitMix(seed);
    let mut chosen: Vec<Prompt> = Vec::with_capacity(size);
    let mut usable = 0u64;
    let mut lines = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| format!("cannot read {}: {e}", spec.prompts.display()))?
            == 0
        {
            break;
        }
        lines += 1;
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Ok(prompt) = prompts::parse(line, lines, spec.api, &spec.id_field, false) else {
            continue;
        };
        usable += 1;
        if chosen.len() < size {
            chosen.push(prompt);
        } else {
            let j = (rng.next_u64() % usable) as usize;
            if j < size {
                chosen[j] = prompt;
            }
        }
    }
    if chosen.is_empty() {
        return Err(format!(
            "{} has no usable prompt to measure with",
            spec.prompts.display()
        ));
    }
    Ok((chosen, usable))
}

/// The class of a failure, for counting errors.
pub fn class(failure: &Failure) -> String {
    match failure {
        Failure::Connect(_) => "connect".into(),
        Failure::Timeout { which } => format!("timeout ({which})"),
        Failure::Status { code, .. } => format!("HTTP {code}"),
        Failure::Incomplete(_) => "incomplete".into(),
        Failure::Malformed(_) => "malformed".into(),
    }
}

/// The bytes a generation would write for this answer.
fn record_bytes(spec: &GenerationSpec, prompt: &Prompt, out: &Outcome) -> u64 {
    let c = &out.completion;
    let mut record = json!({
        "id": prompt.id, "line": prompt.line, "content": c.content, "reasoning": c.reasoning,
        "finish_reason": c.finish_reason, "usage": c.usage, "model": c.model,
        "endpoint": out.endpoint, "latency_ms": out.latency.as_millis() as u64, "attempts": out.attempts,
    });
    if spec.keep_prompt {
        let key = match spec.api {
            todod_inference::Api::Chat => "messages",
            todod_inference::Api::Completions => "prompt",
        };
        record[key] = serde_json::from_str(prompt.input.get()).unwrap_or_default();
    }
    serde_json::to_vec(&record).map_or(0, |v| v.len() as u64 + 1)
}

/// Warms each endpoint up with a few short requests, bounded in time; their
/// results do not count, and a slow or failing one does not stop the phase
/// (a thinking model may answer a trivial prompt at length).
pub async fn warm_up(
    spec: &GenerationSpec,
    prompts: &[Prompt],
    requests: usize,
    max_tokens: u64,
    timeout: Duration,
) -> Vec<String> {
    let mut notes = Vec::new();
    let mut params = spec.params.clone();
    params.insert("max_tokens".into(), json!(max_tokens));
    let template = RequestTemplate::new(spec.api, &spec.model, &params, spec.stream);
    for endpoint in &spec.endpoints {
        let limits = todod_inference::Limits {
            deadline: timeout,
            idle_timeout: timeout,
            backoff: todod_inference::Backoff {
                max_attempts: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        let client = match InferenceClient::new(
            std::slice::from_ref(endpoint),
            spec.api_key_env.as_deref(),
            limits,
        ) {
            Ok(c) => c,
            Err(e) => {
                notes.push(format!("{endpoint}: {e}"));
                continue;
            }
        };
        for prompt in prompts.iter().cycle().take(requests) {
            match tokio::time::timeout(
                timeout,
                client.complete_with(&template, prompt.input.get(), &prompt.fields),
            )
            .await
            {
                Ok(Ok(_)) => {}
                Ok(Err(f)) => notes.push(format!("{endpoint}: warm-up request failed: {f}")),
                Err(_) => notes.push(format!("{endpoint}: warm-up request timed out")),
            }
        }
    }
    notes
}

/// The client a level measures with: `shape`'s endpoints and key, and a
/// failure counted, not retried (a level measures the server as it is);
/// its requests counted in `metrics`, if given.
pub fn level_client(
    shape: &GenerationSpec,
    request_deadline_seconds: u64,
    metrics: Option<todod_telemetry::RequestMetrics>,
) -> Result<Arc<InferenceClient>, String> {
    let limits = todod_inference::Limits {
        deadline: Duration::from_secs(request_deadline_seconds),
        idle_timeout: Duration::from_secs(shape.stream_idle_seconds),
        backoff: todod_inference::Backoff {
            max_attempts: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let client = InferenceClient::new(&shape.endpoints, shape.api_key_env.as_deref(), limits)?;
    Ok(Arc::new(match metrics {
        Some(metrics) => client.with_metrics(metrics),
        None => client,
    }))
}

/// How a level's window is bounded, and how long it waits, once closed,
/// for the requests it has out (a request's deadline).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub min_requests: usize,
    pub min_seconds: f64,
    pub max_seconds: f64,
    pub request_deadline_seconds: u64,
}

struct Done {
    started: Instant,
    result: Result<Sample, String>,
}

/// Runs one level: `c` requests in flight until the window is complete,
/// the prompts of the sample taken in turn from the one at `first`. The
/// sweep's levels all start at the first prompt, so that they compare on
/// the same work: a level given other prompts (longer inputs, answers that
/// end sooner) would differ by its prompts as much as by its concurrency.
pub async fn level(
    spec: &GenerationSpec,
    client: Arc<InferenceClient>,
    template: Arc<RequestTemplate>,
    prompts: Arc<Vec<Prompt>>,
    first: usize,
    c: usize,
    window: Window,
) -> Level {
    let began_level = Instant::now();
    let next = Arc::new(AtomicUsize::new(first));
    let issuing = Arc::new(AtomicBool::new(true));
    let done: Arc<Mutex<Vec<Done>>> = Arc::new(Mutex::new(Vec::new()));
    let answered = Arc::new(AtomicUsize::new(0));
    let woken = Arc::new(tokio::sync::Notify::new());
    let spec = Arc::new(spec.clone());
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..c {
        let (next, issuing, done, answered, woken) = (
            next.clone(),
            issuing.clone(),
            done.clone(),
            answered.clone(),
            woken.clone(),
        );
        let (client, template, prompts, spec) = (
            client.clone(),
            template.clone(),
            prompts.clone(),
            spec.clone(),
        );
        workers.spawn(async move {
            while issuing.load(Ordering::Acquire) {
                let index = next.fetch_add(1, Ordering::Relaxed) % prompts.len();
                let prompt = &prompts[index];
                let started = Instant::now();
                let result = client
                    .complete_with(&template, prompt.input.get(), &prompt.fields)
                    .await
                    .map(|out| {
                        let usage = out.completion.usage.clone().unwrap_or_default();
                        Sample {
                            latency: out.latency.as_secs_f64(),
                            ttft: out.completion.first_token.map(|d| d.as_secs_f64()),
                            output_tokens: usage.completion_tokens,
                            input_tokens: usage.prompt_tokens,
                            reasoning_tokens: usage.reasoning_tokens(),
                            length_finish: out.completion.finish_reason == "length",
                            bytes: record_bytes(&spec, prompt, &out),
                            // Set once the window's opening is known.
                            offset: 0.0,
                            prompt: Some(index as u32),
                            cached_tokens: usage.cached_tokens(),
                        }
                    })
                    .map_err(|failed| class(&failed.failure));
                done.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Done { started, result });
                answered.fetch_add(1, Ordering::Release);
                woken.notify_one();
            }
        });
    }
    // The window opens once every slot has answered once.
    let began = Instant::now();
    let cap = Duration::from_secs_f64(window.max_seconds);
    while answered.load(Ordering::Acquire) < c && began.elapsed() < cap {
        let _ = tokio::time::timeout(Duration::from_millis(200), woken.notified()).await;
    }
    let opened = Instant::now();
    let started_in = |d: &Done, until: Instant| d.started >= opened && d.started < until;
    // It closes when it holds enough requests, and enough time has passed.
    let closed = loop {
        let now = Instant::now();
        let elapsed = now.duration_since(opened).as_secs_f64();
        let count = {
            let done = done.lock().unwrap_or_else(|p| p.into_inner());
            done.iter().filter(|d| started_in(d, now)).count()
        };
        if (count >= window.min_requests && elapsed >= window.min_seconds)
            || elapsed >= window.max_seconds
        {
            break now;
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), woken.notified()).await;
    };
    issuing.store(false, Ordering::Release);
    // Requests started inside the window count once they end; each worker
    // has at most one out, so waiting for the workers to stop waits for
    // exactly those, bounded by a request's deadline.
    let deadline = closed + Duration::from_secs(window.request_deadline_seconds) + Duration::from_secs(5);
    // Let each worker finish the request it has out (it started before the
    // window closed, so it counts), then stop.
    let grace = deadline.saturating_duration_since(Instant::now());
    let _ = tokio::time::timeout(grace, async {
        while workers.join_next().await.is_some() {}
    })
    .await;
    workers.abort_all();
    let done = std::mem::take(&mut *done.lock().unwrap_or_else(|p| p.into_inner()));
    let mut samples = Vec::new();
    let mut errors = 0;
    let mut classes: BTreeMap<String, u64> = BTreeMap::new();
    for d in done.into_iter().filter(|d| started_in(d, closed)) {
        match d.result {
            Ok(mut sample) => {
                sample.offset = d.started.duration_since(opened).as_secs_f64();
                samples.push(sample)
            }
            Err(class) => {
                errors += 1;
                *classes.entry(class).or_default() += 1;
            }
        }
    }
    Level {
        concurrency: c,
        measured_by: String::new(),
        window_seconds: closed.duration_since(opened).as_secs_f64(),
        requests: samples.len() as u64 + errors,
        errors,
        error_classes: classes,
        samples,
        wall_seconds: began_level.elapsed().as_secs_f64(),
        server: None,
        first_prompt: first % prompts.len(),
        prompts_asked: next.load(Ordering::Relaxed) - first,
    }
}

/// For errors that name a path.
pub fn shown(path: &Path) -> String {
    path.display().to_string()
}
