//! Reads each endpoint's own `/metrics` (vLLM, SGLang, llama.cpp's server
//! with `--metrics`) on a timer while a phase sends it requests: the few
//! figures that explain throughput (requests running and queued, KV-cache
//! use, the server's token rates) go into the phase's progress or its
//! levels, and are re-exported under todod's names.
//!
//! A server without `/metrics`, or one whose names todod does not know, is
//! asked again only after [`ABSENT_BACKOFF`]; nothing is made up for it. A
//! scrape never blocks a request: it runs on its own task, on its own
//! connection, with a short timeout.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use todod_telemetry::server_metrics::{
    Exported, Reading, Sampler, ScrapeOutcome, ServerSample, Summary,
};

/// How long to leave a server without a usable `/metrics` alone.
pub const ABSENT_BACKOFF: Duration = Duration::from_secs(60);
/// The longest a scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// Samples kept per endpoint (a feasibility level reads its window's).
const KEPT: usize = 4096;

/// The `/metrics` URL beside an OpenAI-compatible base URL: the server's
/// root, where vLLM, SGLang and llama.cpp serve it (`…/v1` stripped).
pub fn metrics_url(endpoint: &str) -> Option<reqwest::Url> {
    let base = endpoint.trim_end_matches('/');
    let root = base.strip_suffix("/v1").unwrap_or(base);
    reqwest::Url::parse(&format!("{root}/metrics")).ok()
}

#[derive(Default)]
struct Seen {
    /// Per endpoint: its samples, oldest first, with when they were taken.
    samples: HashMap<String, Vec<(Instant, ServerSample)>>,
}

/// The watch of a phase's endpoints; stops when dropped.
pub struct ServerWatch {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
    endpoints: Vec<String>,
    exported: Exported,
}

impl Drop for ServerWatch {
    fn drop(&mut self) {
        self.task.abort();
        for endpoint in &self.endpoints {
            self.exported.forget(endpoint);
        }
    }
}

impl ServerWatch {
    /// Starts reading `endpoints`' `/metrics` every `every`.
    pub fn start(endpoints: &[String], every: Duration, exported: Exported) -> ServerWatch {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let targets: Vec<(String, reqwest::Url)> = endpoints
            .iter()
            .filter_map(|e| Some((e.clone(), metrics_url(e)?)))
            .collect();
        let task = tokio::spawn(watch(targets, every, exported.clone(), seen.clone()));
        ServerWatch {
            seen,
            task,
            endpoints: endpoints.to_vec(),
            exported,
        }
    }

    /// The newest sample of each endpoint that has one, as a JSON object
    /// by endpoint; `None` when no server has said anything.
    pub fn latest(&self) -> Option<Value> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut by_endpoint = serde_json::Map::new();
        for (endpoint, samples) in &seen.samples {
            if let Some((_, sample)) = samples.last() {
                by_endpoint.insert(endpoint.clone(), json!(sample));
            }
        }
        (!by_endpoint.is_empty()).then_some(Value::Object(by_endpoint))
    }

    /// The samples of every endpoint taken since `since`, summed across
    /// endpoints per scrape round (running and queued requests add up, the
    /// KV cache is the fullest), and summarised.
    pub fn summary_since(&self, since: Instant) -> Option<Summary> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let per_endpoint: Vec<Vec<ServerSample>> = seen
            .samples
            .values()
            .map(|s| {
                s.iter()
                    .filter(|(at, _)| *at >= since)
                    .map(|(_, sample)| *sample)
                    .collect()
            })
            .filter(|s: &Vec<ServerSample>| !s.is_empty())
            .collect();
        let rounds = per_endpoint.iter().map(Vec::len).min()?;
        let combined: Vec<ServerSample> = (0..rounds)
            .map(|i| combine(per_endpoint.iter().map(|s| &s[s.len() - rounds + i])))
            .collect();
        todod_telemetry::server_metrics::summarize(&combined)
    }
}

/// Several endpoints' samples of one moment as one server's.
fn combine<'a>(samples: impl Iterator<Item = &'a ServerSample>) -> ServerSample {
    let mut out = ServerSample::default();
    let add = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
    for s in samples {
        out.running = add(out.running, s.running);
        out.waiting = add(out.waiting, s.waiting);
        out.kv_cache_usage = match (out.kv_cache_usage, s.kv_cache_usage) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        out.generation_tokens_per_second = add(
            out.generation_tokens_per_second,
            s.generation_tokens_per_second,
        );
        out.prompt_tokens_per_second =
            add(out.prompt_tokens_per_second, s.prompt_tokens_per_second);
    }
    out
}

async fn watch(
    targets: Vec<(String, reqwest::Url)>,
    every: Duration,
    exported: Exported,
    seen: Arc<Mutex<Seen>>,
) {
    let Ok(http) = reqwest::Client::builder()
        .timeout(SCRAPE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    else {
        return;
    };
    let mut samplers: HashMap<String, Sampler> = HashMap::new();
    let mut resting: HashMap<String, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (endpoint, url) in &targets {
            if resting
                .get(endpoint)
                .is_some_and(|until| Instant::now() < *until)
            {
                continue;
            }
            let reading = match read(&http, url).await {
                Ok(reading) if reading.known() => reading,
                Ok(_) => {
                    exported.scraped(endpoint, ScrapeOutcome::absent);
                    resting.insert(endpoint.clone(), Instant::now() + ABSENT_BACKOFF);
                    continue;
                }
                Err(outcome) => {
                    exported.scraped(endpoint, outcome);
                    resting.insert(endpoint.clone(), Instant::now() + ABSENT_BACKOFF);
                    continue;
                }
            };
            resting.remove(endpoint);
            exported.scraped(endpoint, ScrapeOutcome::ok);
            let now = Instant::now();
            let sample = samplers
                .entry(endpoint.clone())
                .or_default()
                .sample(&reading, now);
            exported.set(endpoint, &sample);
            let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            let kept = seen.samples.entry(endpoint.clone()).or_default();
            if kept.len() >= KEPT {
                kept.drain(..KEPT / 2);
            }
            kept.push((now, sample));
        }
    }
}

/// One scrape: the reading, or how it failed (`absent`: no such page).
async fn read(http: &reqwest::Client, url: &reqwest::Url) -> Result<Reading, ScrapeOutcome> {
    let response = http
        .get(url.clone())
        .send()
        .await
        .map_err(|_| ScrapeOutcome::error)?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Err(ScrapeOutcome::absent);
    }
    if !response.status().is_success() {
        return Err(ScrapeOutcome::error);
    }
    let text = response.text().await.map_err(|_| ScrapeOutcome::error)?;
    Ok(Reading::parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_live_at_the_servers_root() {
        let url = |e: &str| metrics_url(e).map(|u| u.to_string());
        assert_eq!(
            url("http://gpu1:8000/v1").as_deref(),
            Some("http://gpu1:8000/metrics")
        );
        assert_eq!(
            url("http://gpu1:8000/v1/").as_deref(),
            Some("http://gpu1:8000/metrics")
        );
        assert_eq!(
            url("http://gw/llm/v1").as_deref(),
            Some("http://gw/llm/metrics")
        );
        assert_eq!(
            url("http://gpu1:8000").as_deref(),
            Some("http://gpu1:8000/metrics")
        );
    }

    #[test]
    fn endpoints_add_up_and_the_fullest_cache_counts() {
        let a = ServerSample {
            running: Some(4.0),
            waiting: Some(1.0),
            kv_cache_usage: Some(0.5),
            generation_tokens_per_second: Some(100.0),
            prompt_tokens_per_second: None,
        };
        let b = ServerSample {
            running: Some(3.0),
            waiting: None,
            kv_cache_usage: Some(0.9),
            generation_tokens_per_second: Some(50.0),
            prompt_tokens_per_second: Some(10.0),
        };
        let c = combine([a, b].iter());
        assert_eq!(c.running, Some(7.0));
        assert_eq!(c.waiting, Some(1.0));
        assert_eq!(c.kv_cache_usage, Some(0.9));
        assert_eq!(c.generation_tokens_per_second, Some(150.0));
        assert_eq!(c.prompt_tokens_per_second, Some(10.0));
    }
}
