//! An inference server's own `/metrics`, read for the few figures that
//! explain its throughput: requests running and waiting, KV-cache use, and
//! its token rates. vLLM, SGLang and llama.cpp's server each name them their
//! own way, and rename them across versions; each figure is looked up under
//! every name it is known by, and a figure no name finds is left out (never
//! guessed). Plain logic: the HTTP is in `inference::server_watch`.
use std::time::Instant;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::Serialize;

use super::{FloatGauge, ServerLabels};

/// Gauges, by the names each server gives them (first found wins).
const RUNNING: &[&str] = &[
    "vllm:num_requests_running",
    "sglang:num_running_reqs",
    "llamacpp:requests_processing",
];
const WAITING: &[&str] = &[
    "vllm:num_requests_waiting",
    "sglang:num_queue_reqs",
    "llamacpp:requests_deferred",
];
/// A share, 0 to 1 (vLLM's "perc" is a share too).
const KV_CACHE: &[&str] = &[
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:token_usage",
    "llamacpp:kv_cache_usage_ratio",
];
/// Counters of tokens made and read; a rate comes from two readings.
const GENERATED: &[&str] = &[
    "vllm:generation_tokens_total",
    "sglang:generation_tokens_total",
    "llamacpp:tokens_predicted_total",
];
const PROMPT: &[&str] = &[
    "vllm:prompt_tokens_total",
    "sglang:prompt_tokens_total",
    "llamacpp:prompt_tokens_total",
];
/// Rates a server reports itself, used when it has no counter.
const GENERATED_RATE: &[&str] = &["sglang:gen_throughput", "llamacpp:predicted_tokens_seconds"];
const PROMPT_RATE: &[&str] = &["llamacpp:prompt_tokens_seconds"];

/// One reading of a server's `/metrics`: each name's value, summed over
/// its label sets (several engines, or models, behind one endpoint).
#[derive(Debug, Clone, Default)]
pub struct Reading {
    values: Vec<(String, f64)>,
}

impl Reading {
    /// Parses the Prometheus text format (and OpenMetrics). Lines that do
    /// not parse are skipped: a server's exposition is not ours to refuse.
    pub fn parse(text: &str) -> Reading {
        let mut values: Vec<(String, f64)> = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((name, value)) = sample(line) else {
                continue;
            };
            if !value.is_finite() {
                continue;
            }
            match values.iter_mut().find(|(n, _)| n == name) {
                Some((_, sum)) => *sum += value,
                None => values.push((name.to_string(), value)),
            }
        }
        Reading { values }
    }

    fn first(&self, names: &[&str]) -> Option<f64> {
        names
            .iter()
            .find_map(|name| self.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v))
    }

    /// Whether the reading holds any figure todod knows.
    pub fn known(&self) -> bool {
        [
            RUNNING,
            WAITING,
            KV_CACHE,
            GENERATED,
            PROMPT,
            GENERATED_RATE,
        ]
        .iter()
        .any(|names| self.first(names).is_some())
    }
}

/// `name{labels} value [timestamp]`: the name and the value.
fn sample(line: &str) -> Option<(&str, f64)> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    if rest.starts_with('{') {
        // Skip the labels, minding quoted values with escapes.
        let mut quoted = false;
        let mut escaped = false;
        let mut end = None;
        for (i, c) in rest.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                '}' if !quoted => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        rest = &rest[end? + 1..];
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().ok()?,
    };
    (!name.is_empty()).then_some((name, value))
}

/// What one endpoint's server says now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ServerSample {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<f64>,
    /// The share of the KV cache in use, 0 to 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_tokens_per_second: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_per_second: Option<f64>,
}

/// Turns successive readings of one endpoint into samples (rates need two).
#[derive(Debug, Default)]
pub struct Sampler {
    last: Option<(Instant, Option<f64>, Option<f64>)>,
}

impl Sampler {
    pub fn sample(&mut self, reading: &Reading, at: Instant) -> ServerSample {
        let generated = reading.first(GENERATED);
        let prompt = reading.first(PROMPT);
        let rate = |now: Option<f64>, before: Option<Option<f64>>, seconds: f64| match (now, before)
        {
            // A counter that went down is a restarted server: no rate.
            (Some(now), Some(Some(before))) if seconds > 0.0 && now >= before => {
                Some((now - before) / seconds)
            }
            _ => None,
        };
        let seconds = self
            .last
            .map(|(then, _, _)| at.duration_since(then).as_secs_f64())
            .unwrap_or(0.0);
        let sample = ServerSample {
            running: reading.first(RUNNING),
            waiting: reading.first(WAITING),
            kv_cache_usage: reading.first(KV_CACHE).map(|v| v.clamp(0.0, 1.0)),
            generation_tokens_per_second: rate(generated, self.last.map(|l| l.1), seconds)
                .or_else(|| generated.is_none().then(|| reading.first(GENERATED_RATE))?),
            prompt_tokens_per_second: rate(prompt, self.last.map(|l| l.2), seconds)
                .or_else(|| prompt.is_none().then(|| reading.first(PROMPT_RATE))?),
        };
        self.last = Some((at, generated, prompt));
        sample
    }
}

/// Samples over a stretch of time (a feasibility level): means, and the
/// highest KV-cache use; the type is the feasibility result's.
pub use todod_proto::results::ServerSummary as Summary;

/// The summary of `samples`, or `None` when there are none.
pub fn summarize(samples: &[ServerSample]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mean = |f: fn(&ServerSample) -> Option<f64>| {
        let values: Vec<f64> = samples.iter().filter_map(f).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    Some(Summary {
        samples: samples.len() as u64,
        running: mean(|s| s.running),
        waiting: mean(|s| s.waiting),
        max_kv_cache_usage: samples
            .iter()
            .filter_map(|s| s.kv_cache_usage)
            .reduce(f64::max),
        generation_tokens_per_second: mean(|s| s.generation_tokens_per_second),
    })
}

/// A KV cache this full holds no more sequences.
const KV_FULL: f64 = 0.95;
/// Requests waiting for a slot on average: the server queues.
const QUEUED: f64 = 0.5;

/// Whether the server was full: requests queued for a slot, or its KV
/// cache full. More requests in flight then only wait.
pub fn full(summary: &Summary) -> bool {
    summary.waiting.is_some_and(|w| w >= QUEUED)
        || summary.max_kv_cache_usage.is_some_and(|kv| kv >= KV_FULL)
}

/// What limited a level run at `concurrency`, as far as the server's
/// figures (`summary`) say.
pub fn limit(summary: &Summary, concurrency: u32) -> Option<String> {
    if let Some(kv) = summary.max_kv_cache_usage.filter(|kv| *kv >= KV_FULL) {
        return Some(format!(
            "the KV cache was full ({:.0}% used at most)",
            kv * 100.0
        ));
    }
    if let Some(waiting) = summary.waiting.filter(|w| *w >= QUEUED) {
        return Some(format!(
            "requests queued on the server ({waiting:.1} waiting on average)"
        ));
    }
    let running = summary.running?;
    if running < 0.75 * concurrency as f64 {
        Some(format!(
            "the client side: the server ran {running:.1} requests on average of \
                 {concurrency} sent at once"
        ))
    } else {
        Some(format!(
            "the server's compute: all {concurrency} requests running, none queued"
        ))
    }
}

/// How a scrape of a server's `/metrics` went.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ScrapeOutcome {
    ok,
    /// No `/metrics`, or none of the figures todod knows.
    absent,
    error,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScrapeLabels {
    pub endpoint: String,
    pub outcome: ScrapeOutcome,
}

/// The servers' figures as todod re-exports them, by endpoint.
#[derive(Clone, Default)]
pub struct Exported {
    pub running: Family<ServerLabels, FloatGauge>,
    pub waiting: Family<ServerLabels, FloatGauge>,
    pub kv_cache_usage: Family<ServerLabels, FloatGauge>,
    pub generation_tokens_per_second: Family<ServerLabels, FloatGauge>,
    pub prompt_tokens_per_second: Family<ServerLabels, FloatGauge>,
    pub scrapes: Family<ScrapeLabels, Counter>,
}

impl Exported {
    pub fn scraped(&self, endpoint: &str, outcome: ScrapeOutcome) {
        self.scrapes
            .get_or_create(&ScrapeLabels {
                endpoint: endpoint.to_string(),
                outcome,
            })
            .inc();
    }

    /// Removes an endpoint's gauges: no phase watches it any more, and a
    /// figure left at its last value would mislead.
    pub fn forget(&self, endpoint: &str) {
        let labels = ServerLabels {
            endpoint: endpoint.to_string(),
        };
        for family in [
            &self.running,
            &self.waiting,
            &self.kv_cache_usage,
            &self.generation_tokens_per_second,
            &self.prompt_tokens_per_second,
        ] {
            family.remove(&labels);
        }
    }

    /// Sets an endpoint's gauges to `sample`; a figure it lacks is removed,
    /// not left at its last value.
    pub fn set(&self, endpoint: &str, sample: &ServerSample) {
        let labels = ServerLabels {
            endpoint: endpoint.to_string(),
        };
        let put = |family: &Family<ServerLabels, FloatGauge>, value: Option<f64>| match value {
            Some(v) => {
                family.get_or_create(&labels).set(v);
            }
            None => {
                family.remove(&labels);
            }
        };
        put(&self.running, sample.running);
        put(&self.waiting, sample.waiting);
        put(&self.kv_cache_usage, sample.kv_cache_usage);
        put(
            &self.generation_tokens_per_second,
            sample.generation_tokens_per_second,
        );
        put(
            &self.prompt_tokens_per_second,
            sample.prompt_tokens_per_second,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const VLLM: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 5.0
vllm:num_requests_running{engine="1",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m {odd}\" label"} 0.42
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1000.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 5000.0 1700000000000
"#;

    #[test]
    fn reads_vllm_sums_engines_and_rates_counters() {
        let t0 = Instant::now();
        let mut sampler = Sampler::default();
        let first = sampler.sample(&Reading::parse(VLLM), t0);
        assert_eq!(first.running, Some(8.0));
        assert_eq!(first.waiting, Some(2.0));
        assert_eq!(first.kv_cache_usage, Some(0.42));
        // One reading gives no rate.
        assert_eq!(first.generation_tokens_per_second, None);
        let later = VLLM.replace("1000.0", "1500.0").replace("5000.0", "7000.0");
        let second = sampler.sample(&Reading::parse(&later), t0 + Duration::from_secs(2));
        assert_eq!(second.generation_tokens_per_second, Some(250.0));
        assert_eq!(second.prompt_tokens_per_second, Some(1000.0));
        // A restarted server's counters go down: no rate, not a negative one.
        let third = sampler.sample(&Reading::parse(VLLM), t0 + Duration::from_secs(4));
        assert_eq!(third.generation_tokens_per_second, None);
    }

    #[test]
    fn reads_sglang_and_llama_cpp_names() {
        let sglang = "sglang:num_running_reqs{model_name=\"m\"} 4\nsglang:num_queue_reqs 1\n\
                      sglang:token_usage 0.97\nsglang:gen_throughput 321.5\n";
        let s = Sampler::default().sample(&Reading::parse(sglang), Instant::now());
        assert_eq!(
            (s.running, s.waiting, s.kv_cache_usage),
            (Some(4.0), Some(1.0), Some(0.97))
        );
        assert_eq!(s.generation_tokens_per_second, Some(321.5));
        let llama = "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\n\
                     llamacpp:requests_deferred 0\nllamacpp:predicted_tokens_seconds 88.5\n";
        let s = Sampler::default().sample(&Reading::parse(llama), Instant::now());
        assert_eq!((s.running, s.waiting), (Some(2.0), Some(0.0)));
        assert_eq!(s.generation_tokens_per_second, Some(88.5));
        assert_eq!(s.kv_cache_usage, None);
    }

    #[test]
    fn tolerates_garbage_and_unknown_servers() {
        let junk = "not a metric line\n{}\nvllm:num_requests_running{unclosed=\"x 3\n\
                    vllm:num_requests_waiting NaN\nweird_metric 7\n\u{0}\u{ff}\n";
        let reading = Reading::parse(junk);
        assert!(!reading.known());
        let s = Sampler::default().sample(&reading, Instant::now());
        assert_eq!(s, ServerSample::default());
        assert!(!Reading::parse("<html>404</html>").known());
    }

    #[test]
    fn says_what_limited_a_level() {
        let s = |running, waiting, kv| Summary {
            samples: 3,
            running: Some(running),
            waiting: Some(waiting),
            max_kv_cache_usage: kv,
            generation_tokens_per_second: None,
        };
        assert!(limit(&s(8.0, 0.0, Some(0.99)), 8)
            .unwrap()
            .contains("KV cache"));
        assert!(limit(&s(8.0, 4.0, None), 12).unwrap().contains("queued"));
        assert!(limit(&s(2.0, 0.0, None), 8)
            .unwrap()
            .contains("client side"));
        assert!(limit(&s(8.0, 0.0, None), 8).unwrap().contains("compute"));
        let none = Summary {
            samples: 1,
            ..Summary::default()
        };
        assert_eq!(limit(&none, 8), None);
        assert_eq!(summarize(&[]), None);
    }
}
