//! The numbers of a feasibility sweep, from the requests measured: per level
//! the rates, latencies and output lengths; the choice of a level; the
//! projection of a whole run with a bootstrap interval; the verdict against
//! a budget. Plain logic, no I/O, seeded randomness.
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
}

/// Percentiles of a set of values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub concurrency: usize,
    pub requests: u64,
    /// Sustained rates, by Little's law: `c` requests in flight that take
    /// `mean(latency)` each complete `c / mean(latency)` a second. Unlike a
    /// count of completions in the window, this is not quantized by the
    /// window's edges, so levels compare without that noise.
    pub requests_per_second: f64,
    pub output_tokens_per_second: f64,
    pub input_tokens_per_second: f64,
    /// What the window saw: completions of requests started in it, over its
    /// length (includes the client's own time between requests).
    pub observed_requests_per_second: f64,
    pub observed_output_tokens_per_second: f64,
    pub error_rate: f64,
    pub error_classes: std::collections::BTreeMap<String, u64>,
    pub e2e_seconds: Option<Spread>,
    pub ttft_seconds: Option<Spread>,
    /// Inter-token latency (time per output token after the first).
    pub itl_seconds: Option<Spread>,
    pub output_tokens: Option<Spread>,
    pub length_finish_share: f64,
    pub reasoning_tokens_mean: Option<f64>,
    pub bytes_per_record: f64,
}

impl Level {
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
        }
    }
}

/// Whether a geometric sweep should stop after `levels` (the last one new):
/// a doubling gained under 5 % output tokens per second, or errors passed
/// the threshold.
pub fn sweep_done(levels: &[Figures], max_error_rate: f64) -> Option<String> {
    let last = levels.last()?;
    if last.error_rate > max_error_rate {
        return Some(format!(
            "errors at concurrency {} ({:.1}%) passed the limit of {:.1}%",
            last.concurrency,
            last.error_rate * 100.0,
            max_error_rate * 100.0
        ));
    }
    let previous = levels.iter().rev().nth(1)?;
    if last.output_tokens_per_second < previous.output_tokens_per_second * 1.05 {
        return Some(format!(
            "doubling concurrency from {} to {} gained under 5% output tokens/s",
            previous.concurrency, last.concurrency
        ));
    }
    None
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

/// A value with its 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

/// What a whole run of `records` is projected to take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    pub records: u64,
    pub concurrency: usize,
    pub hours: Estimate,
    pub records_per_second: Estimate,
    pub output_tokens: Estimate,
    pub input_tokens: Estimate,
    pub bytes: Estimate,
    pub cost: Option<Estimate>,
    pub assumptions: Vec<String>,
}

/// One resample's projection.
struct Draw {
    hours: f64,
    rate: f64,
    output: f64,
    input: f64,
    bytes: f64,
    cost: Option<f64>,
}

/// A small, fast, seeded generator (SplitMix64): the bootstrap must give the
/// same interval for the same samples and seed.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Prices, when the spec gives them.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Price {
    #[serde(default)]
    pub per_gpu_hour: Option<f64>,
    #[serde(default)]
    pub gpus: Option<f64>,
    #[serde(default)]
    pub per_million_output_tokens: Option<f64>,
    #[serde(default)]
    pub per_million_input_tokens: Option<f64>,
}

impl Price {
    fn cost(&self, hours: f64, output: f64, input: f64) -> Option<f64> {
        let mut total = None;
        if let Some(p) = self.per_gpu_hour {
            *total.get_or_insert(0.0) += p * self.gpus.unwrap_or(1.0) * hours;
        }
        if let Some(p) = self.per_million_output_tokens {
            *total.get_or_insert(0.0) += p * output / 1e6;
        }
        if let Some(p) = self.per_million_input_tokens {
            *total.get_or_insert(0.0) += p * input / 1e6;
        }
        total
    }
}

/// Projects `records` records at `level`, with a bootstrap over its samples:
/// by Little's law a level of concurrency c completes c / mean(latency)
/// requests a second, so each resample of the requests gives a rate, a time,
/// token counts and bytes; the 2.5 and 97.5 percentiles bound them.
pub fn project(level: &Level, records: u64, price: &Price, seed: u64) -> Option<Projection> {
    let n = level.samples.len();
    if n == 0 {
        return None;
    }
    let c = level.concurrency as f64;
    let stats = |pick: &mut dyn FnMut() -> usize| {
        let (mut lat, mut out, mut inp, mut bytes) = (0.0, 0.0, 0.0, 0.0);
        for _ in 0..n {
            let s = &level.samples[pick()];
            lat += s.latency;
            out += s.output_tokens as f64;
            inp += s.input_tokens as f64;
            bytes += s.bytes as f64;
        }
        let k = n as f64;
        let rate = c / (lat / k).max(1e-9);
        let r = records as f64;
        let hours = r / rate / 3600.0;
        let (output, input) = (r * out / k, r * inp / k);
        Draw {
            hours,
            rate,
            output,
            input,
            bytes: r * bytes / k,
            cost: price.cost(hours, output, input),
        }
    };
    let mut i = 0;
    let point = stats(&mut || {
        i += 1;
        i - 1
    });
    let mut rng = SplitMix(seed);
    const ROUNDS: usize = 1000;
    let draws: Vec<Draw> = (0..ROUNDS).map(|_| stats(&mut || rng.below(n))).collect();
    let interval = |value: f64, get: fn(&Draw) -> f64| {
        let mut v: Vec<f64> = draws.iter().map(get).collect();
        v.sort_by(f64::total_cmp);
        Estimate {
            value,
            low: quantile(&v, 0.025).min(value),
            high: quantile(&v, 0.975).max(value),
        }
    };
    let mut hours = interval(point.hours, |d| d.hours);
    let mut rate = interval(point.rate, |d| d.rate);
    // The bootstrap covers which requests were measured; the rate the window
    // actually saw (completions over its length) covers how well Little's
    // law holds for this server. The interval spans both.
    if level.window_seconds > 0.0 {
        let seen = n as f64 / level.window_seconds;
        rate.low = rate.low.min(seen);
        rate.high = rate.high.max(seen);
        let seen_hours = records as f64 / seen / 3600.0;
        hours.low = hours.low.min(seen_hours);
        hours.high = hours.high.max(seen_hours);
    }
    let output = interval(point.output, |d| d.output);
    let input = interval(point.input, |d| d.input);
    let bytes = interval(point.bytes, |d| d.bytes);
    let cost = point
        .cost
        .map(|value| interval(value, |d| d.cost.unwrap_or(0.0)));
    Some(Projection {
        records,
        concurrency: level.concurrency,
        hours,
        records_per_second: rate,
        output_tokens: output,
        input_tokens: input,
        bytes,
        cost,
        assumptions: vec![
            "the output lengths of the sampled prompts stand for the whole set".into(),
            "the server stays as it was measured (no other load, same model and settings)".into(),
            format!(
                "the run keeps {} requests in flight throughout, by Little's law c / mean latency",
                level.concurrency
            ),
        ],
    })
}

/// A budget, all optional.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Budget {
    #[serde(default)]
    pub max_hours: Option<f64>,
    #[serde(default)]
    pub max_bytes: Option<f64>,
    #[serde(default)]
    pub max_cost: Option<f64>,
    #[serde(default)]
    pub min_tokens_per_second: Option<f64>,
}

/// Go, or the reasons for no-go in plain words.
pub fn verdict(projection: &Projection, chosen: &Figures, budget: &Budget) -> Vec<String> {
    let mut reasons = Vec::new();
    let p = projection;
    if let Some(max) = budget.max_hours {
        if p.hours.value > max {
            reasons.push(format!(
                "the run is projected to take {:.1} h ({:.1}-{:.1} h, 95%), over the budget of {max} h",
                p.hours.value, p.hours.low, p.hours.high
            ));
        }
    }
    if let Some(max) = budget.max_bytes {
        if p.bytes.value > max {
            reasons.push(format!(
                "the output is projected at {:.2} GB, over the budget of {:.2} GB",
                p.bytes.value / 1e9,
                max / 1e9
            ));
        }
    }
    if let (Some(max), Some(cost)) = (budget.max_cost, p.cost) {
        if cost.value > max {
            reasons.push(format!(
                "the run is projected to cost {:.2} ({:.2}-{:.2}), over the budget of {max}",
                cost.value, cost.low, cost.high
            ));
        }
    }
    if let Some(min) = budget.min_tokens_per_second {
        if chosen.output_tokens_per_second < min {
            reasons.push(format!(
                "the server gives {:.0} output tokens/s at concurrency {}, under the {min} required",
                chosen.output_tokens_per_second, chosen.concurrency
            ));
        }
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(c: usize, latency: f64, tokens: u64, n: usize) -> Level {
        Level {
            concurrency: c,
            measured_by: "test".into(),
            window_seconds: n as f64 * latency / c as f64,
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
                })
                .collect(),
        }
    }

    #[test]
    fn the_knee_is_the_smallest_level_near_the_best() {
        // A server of 8 slots: past 8, latency grows with the queue.
        let levels: Vec<Figures> = [(1, 1.0), (2, 1.0), (4, 1.0), (8, 1.0), (16, 2.0)]
            .iter()
            .map(|&(c, lat)| level(c, lat, 100, 200).figures())
            .collect();
        assert!(sweep_done(&levels, 0.05).is_some());
        assert!(sweep_done(&levels[..3], 0.05).is_none());
        let (i, _) = choose(&levels, Choose::Knee, 0.05, None).unwrap();
        assert_eq!(levels[i].concurrency, 8);
    }

    #[test]
    fn the_projection_holds_its_point_inside_its_interval() {
        let l = level(8, 2.0, 100, 400);
        let p = project(&l, 100_000, &Price::default(), 7).unwrap();
        // 8 in flight at about 2 s each: 4 records/s, 100k in about 6.9 h.
        assert!((p.records_per_second.value - 4.0).abs() < 0.1, "{p:?}");
        assert!(
            (p.hours.value - 100_000.0 / 4.0 / 3600.0).abs() < 0.2,
            "{p:?}"
        );
        assert!(p.hours.low <= p.hours.value && p.hours.value <= p.hours.high);
        assert_eq!(p.output_tokens.value, 10_000_000.0);
        let again = project(&l, 100_000, &Price::default(), 7).unwrap();
        assert_eq!(p, again, "same samples, same seed, same interval");
        let budget = Budget {
            max_hours: Some(5.0),
            ..Budget::default()
        };
        let reasons = verdict(&p, &l.figures(), &budget);
        assert_eq!(reasons.len(), 1);
        assert!(reasons[0].contains("over the budget of 5 h"), "{reasons:?}");
    }
}
