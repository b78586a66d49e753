//! The numbers of a feasibility sweep, from the requests measured: per level
//! the rates, latencies and output lengths, and the choice of a level. Plain
//! logic, no I/O; the projection is in [`super::projection`], when the sweep
//! stops in [`super::sweep`].
use serde::{Deserialize, Serialize};

/// One request measured inside a level's window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Whole request, send to last byte, seconds.
    pub latency: f64,
    /// Time to first token, seconds (streams only).
    pub ttft: Option<f64>,
    pub output_tokens: u64,
    pub input_tokens: u64,
    pub reasoning_tokens: Option<u64>,
    pub length_finish: bool,
    /// The record it would be in the output file, in bytes.
    pub bytes: u64,
    /// When it started, seconds after the window opened: which of the
    /// level's windows it is in.
    #[serde(default)]
    pub offset: f64,
    /// The prompt it asked, by its place in the sample: repeated answers to
    /// one prompt count as one prompt's length.
    #[serde(default)]
    pub prompt: Option<u32>,
    /// Of `input_tokens`, those the server said it took from its prefix
    /// cache (`usage.prompt_tokens_details.cached_tokens`), if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

/// What one concurrency level measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub concurrency: usize,
    /// The attempt that measured it: a level is measured whole by one run.
    #[serde(default)]
    pub measured_by: String,
    /// The window: requests started in it count.
    pub window_seconds: f64,
    pub requests: u64,
    pub errors: u64,
    /// Errors by class ("timeout", "HTTP 503", ...).
    pub error_classes: std::collections::BTreeMap<String, u64>,
    pub samples: Vec<Sample>,
    /// What measuring it took, ramp-up and drain included: the sweep's cost.
    #[serde(default)]
    pub wall_seconds: f64,
    /// What the server said of itself while the level ran (its own
    /// `/metrics`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<todod_telemetry::server_metrics::Summary>,
    /// The sample's prompts it asked: from `first_prompt` on, in turn,
    /// `prompts_asked` of them (abandoned ones included: the server saw
    /// them), wrapping at the sample's end.
    #[serde(default)]
    pub first_prompt: usize,
    #[serde(default)]
    pub prompts_asked: usize,
}

pub use todod_proto::results::Spread;

pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // Nearest rank, as benchmark tools report percentiles.
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn spread(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(Spread {
        p50: quantile(&v, 0.5),
        p90: quantile(&v, 0.9),
        p99: quantile(&v, 0.99),
        mean: v.iter().sum::<f64>() / v.len() as f64,
    })
}

/// The figures of a level a report shows.
pub use todod_proto::results::LevelFigures as Figures;

/// The most windows a level is split into, and the fewest answers each.
/// Few and long: adjacent short windows move together (a server's swings
/// outlast them), and their spread would understate how the run varies
/// (see `projection.rs` for how it widens the interval).
const MAX_WINDOWS: usize = 4;
const PER_WINDOW: usize = 8;

impl Level {
    /// The level's answers in consecutive windows of equal length, by when
    /// each started (at least two, at most four, about eight answers
    /// each; a window may be empty); none when the answers do not say when
    /// they started.
    pub fn windows(&self) -> Vec<Vec<&Sample>> {
        let n = self.samples.len();
        let span = self.window_seconds;
        if n < 2 || span <= 0.0 || self.samples.iter().all(|s| s.offset <= 0.0) {
            return Vec::new();
        }
        let k = (n / PER_WINDOW).clamp(2, MAX_WINDOWS);
        let mut windows = vec![Vec::new(); k];
        for s in &self.samples {
            let i = ((s.offset / span * k as f64) as usize).min(k - 1);
            windows[i].push(s);
        }
        windows
    }

    /// The share of the answered prompts' tokens the server took from its
    /// prefix cache, over the answers that say.
    pub fn cached_input_share(&self) -> Option<f64> {
        let (cached, input) = self
            .samples
            .iter()
            .filter_map(|s| Some((s.cached_tokens?, s.input_tokens)))
            .fold((0u64, 0u64), |(c, i), (sc, si)| (c + sc.min(si), i + si));
        (input > 0).then(|| cached as f64 / input as f64)
    }

    /// The standard error of the level's output tokens a second, from its
    /// windows' rates.
    fn output_rate_se(&self) -> Option<f64> {
        let c = self.concurrency as f64;
        let rates: Vec<f64> = self
            .windows()
            .iter()
            .filter(|w| !w.is_empty())
            .map(|w| {
                let latency: f64 = w.iter().map(|s| s.latency).sum();
                let tokens: f64 = w.iter().map(|s| s.output_tokens as f64).sum();
                c * tokens / latency.max(1e-9)
            })
            .collect();
        let k = rates.len() as f64;
        if k < 2.0 {
            return None;
        }
        let mean = rates.iter().sum::<f64>() / k;
        let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (k - 1.0);
        Some((var / k).sqrt())
    }

    pub fn figures(&self) -> Figures {
        let t = self.window_seconds.max(1e-9);
        let ok = self.samples.len() as f64;
        let sum = |f: &dyn Fn(&Sample) -> f64| self.samples.iter().map(f).sum::<f64>();
        let reasoning: Vec<f64> = self
            .samples
            .iter()
            .filter_map(|s| s.reasoning_tokens.map(|r| r as f64))
            .collect();
        let latency = sum(&|s| s.latency);
        let per_second = |total: f64| {
            if latency > 0.0 {
                self.concurrency as f64 * total / latency
            } else {
                0.0
            }
        };
        Figures {
            concurrency: self.concurrency,
            requests: self.requests,
            requests_per_second: per_second(ok),
            output_tokens_per_second: per_second(sum(&|s| s.output_tokens as f64)),
            input_tokens_per_second: per_second(sum(&|s| s.input_tokens as f64)),
            observed_requests_per_second: ok / t,
            observed_output_tokens_per_second: sum(&|s| s.output_tokens as f64) / t,
            error_rate: if self.requests == 0 {
                0.0
            } else {
                self.errors as f64 / self.requests as f64
            },
            error_classes: self.error_classes.clone(),
            e2e_seconds: spread(self.samples.iter().map(|s| s.latency)),
            ttft_seconds: spread(self.samples.iter().filter_map(|s| s.ttft)),
            itl_seconds: spread(self.samples.iter().filter_map(|s| {
                let ttft = s.ttft?;
                (s.output_tokens > 1).then(|| (s.latency - ttft) / (s.output_tokens - 1) as f64)
            })),
            output_tokens: spread(self.samples.iter().map(|s| s.output_tokens as f64)),
            length_finish_share: if ok == 0.0 {
                0.0
            } else {
                self.samples.iter().filter(|s| s.length_finish).count() as f64 / ok
            },
            reasoning_tokens_mean: (!reasoning.is_empty())
                .then(|| reasoning.iter().sum::<f64>() / reasoning.len() as f64),
            bytes_per_record: if ok == 0.0 {
                0.0
            } else {
                sum(&|s| s.bytes as f64) / ok
            },
            output_tokens_per_second_se: self.output_rate_se(),
            cached_input_share: self.cached_input_share(),
            server: self.server.clone(),
            limited_by: self
                .server
                .as_ref()
                .and_then(|s| todod_telemetry::server_metrics::limit(s, self.concurrency as u32)),
        }
    }
}

/// How a level is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Choose {
    /// The smallest level within 5 % of the best throughput.
    Knee,
    Best,
}

/// The chosen level's index and why.
pub fn choose(
    levels: &[Figures],
    how: Choose,
    max_error_rate: f64,
    p99_bound: Option<f64>,
) -> Option<(usize, String)> {
    let usable: Vec<usize> = (0..levels.len())
        .filter(|&i| levels[i].error_rate <= max_error_rate && levels[i].requests > 0)
        .filter(|&i| match (p99_bound, &levels[i].e2e_seconds) {
            (Some(bound), Some(e2e)) => e2e.p99 <= bound,
            (Some(_), None) => false,
            (None, _) => true,
        })
        .collect();
    let best = *usable.iter().max_by(|&&a, &&b| {
        levels[a]
            .output_tokens_per_second
            .total_cmp(&levels[b].output_tokens_per_second)
    })?;
    let bound = p99_bound.map_or(String::new(), |b| format!(" with p99 latency under {b} s"));
    match how {
        Choose::Best => Some((best, format!("the best output tokens/s{bound}"))),
        Choose::Knee => {
            let floor = levels[best].output_tokens_per_second * 0.95;
            let knee = usable
                .iter()
                .copied()
                .filter(|&i| levels[i].output_tokens_per_second >= floor)
                .min_by_key(|&i| levels[i].concurrency)
                .unwrap_or(best);
            Some((
                knee,
                format!(
                    "the smallest concurrency within 5% of the best output tokens/s ({:.0} at {}){bound}",
                    levels[best].output_tokens_per_second, levels[best].concurrency
                ),
            ))
        }
    }
}

pub use crate::phase::sample::SplitMix;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A level of `n` requests at concurrency `c`, of about `latency`
    /// seconds and `tokens` output tokens each, spread over its window.
    pub(crate) fn level(c: usize, latency: f64, tokens: u64, n: usize) -> Level {
        let window = n as f64 * latency / c as f64;
        Level {
            concurrency: c,
            measured_by: "test".into(),
            window_seconds: window,
            requests: n as u64,
            errors: 0,
            error_classes: Default::default(),
            samples: (0..n)
                .map(|i| Sample {
                    latency: latency * (0.9 + 0.2 * (i % 5) as f64 / 4.0),
                    ttft: Some(0.05),
                    output_tokens: tokens,
                    input_tokens: 10,
                    reasoning_tokens: None,
                    length_finish: false,
                    bytes: 300,
                    offset: window * i as f64 / n as f64,
                    prompt: Some(i as u32),
                    cached_tokens: None,
                })
                .collect(),
            wall_seconds: window + latency,
            server: None,
            first_prompt: 0,
            prompts_asked: n,
        }
    }

    #[test]
    fn the_knee_is_the_smallest_level_near_the_best() {
        // A server of 8 slots: past 8, latency grows with the queue.
        let levels: Vec<Figures> = [(1, 1.0), (2, 1.0), (4, 1.0), (8, 1.0), (16, 2.2)]
            .iter()
            .map(|&(c, lat)| level(c, lat, 100, 200).figures())
            .collect();
        let (i, _) = choose(&levels, Choose::Knee, 0.05, None).unwrap();
        assert_eq!(levels[i].concurrency, 8);
        let (i, _) = choose(&levels, Choose::Best, 0.05, None).unwrap();
        assert_eq!(levels[i].concurrency, 8);
    }
}
