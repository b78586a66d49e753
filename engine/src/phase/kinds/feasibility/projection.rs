//! The projection of a whole run from a measured level, with a 95 %
//! interval, and the verdict against a budget. Plain logic, no I/O, seeded
//! randomness.
//!
//! The rate comes from the level by Little's law (c requests in flight that
//! take `mean(latency)` each complete `c / mean(latency)` a second), with the
//! latency adjusted to the output length of the whole sample of prompts (a
//! level's window sees only some of them); the lengths, tokens and bytes come
//! from every prompt the sweep measured, a prompt's repeated answers
//! averaged (at temperature > 0 they differ). The interval is the widest of:
//! a bootstrap over the level's requests and the prompts' lengths; a
//! t-interval over the rates of the level's consecutive windows (a server's
//! rate varies between windows more than a bootstrap over one window shows);
//! and the rate the window actually saw, for how well Little's law holds;
//! then one request's latency either side, for the run's start and end.
//! The records whose prompts the sweep asked count at the speed the server
//! answered them from its prefix cache ([`Seen`]), when it says it cached
//! them; the speedup's own uncertainty is not in the interval.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::stats::{quantile, Figures, Level, SplitMix};

pub use todod_proto::results::{Estimate, Projection};

/// What one prompt's answers measured, averaged over its answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lengths {
    pub output_tokens: f64,
    pub input_tokens: f64,
    pub bytes: f64,
}

/// Every prompt the sweep's levels answered, each once, its answers
/// averaged; answers from before prompts were numbered count one each.
pub fn prompt_lengths<'a>(levels: impl IntoIterator<Item = &'a Level>) -> Vec<Lengths> {
    let mut by_prompt: BTreeMap<u32, (f64, f64, f64, f64)> = BTreeMap::new();
    let mut unnumbered = Vec::new();
    for level in levels {
        for s in &level.samples {
            let l = Lengths {
                output_tokens: s.output_tokens as f64,
                input_tokens: s.input_tokens as f64,
                bytes: s.bytes as f64,
            };
            match s.prompt {
                Some(p) => {
                    let e = by_prompt.entry(p).or_default();
                    e.0 += l.output_tokens;
                    e.1 += l.input_tokens;
                    e.2 += l.bytes;
                    e.3 += 1.0;
                }
                None => unnumbered.push(l),
            }
        }
    }
    by_prompt
        .into_values()
        .map(|(o, i, b, n)| Lengths {
            output_tokens: o / n,
            input_tokens: i / n,
            bytes: b / n,
        })
        .chain(unnumbered)
        .collect()
}

/// The two-sided 97.5 % quantile of Student's t for `df` degrees of freedom.
fn t975(df: usize) -> f64 {
    const T: [f64; 10] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    ];
    match df {
        0 => f64::INFINITY,
        1..=10 => T[df - 1],
        _ => 1.96 + 2.4 / df as f64,
    }
}

/// How a level's latency follows output length: the least-squares slope of
/// latency on output tokens (seconds a token), 0 when the lengths do not
/// vary enough to say.
fn seconds_per_token(level: &Level) -> f64 {
    let n = level.samples.len() as f64;
    if n < 8.0 {
        return 0.0;
    }
    let mx = level
        .samples
        .iter()
        .map(|s| s.output_tokens as f64)
        .sum::<f64>()
        / n;
    let my = level.samples.iter().map(|s| s.latency).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for s in &level.samples {
        let dx = s.output_tokens as f64 - mx;
        sxy += dx * (s.latency - my);
        sxx += dx * dx;
    }
    if sxx < 1e-9 * n {
        return 0.0;
    }
    (sxy / sxx).max(0.0)
}

/// Records a second at concurrency `c` from answers of mean latency
/// `latency` and mean length `length`, for a set of mean length `target`.
fn rate(c: f64, latency: f64, length: f64, target: f64, slope: f64) -> f64 {
    let adjusted = (latency + slope * (target - length)).max(latency * 0.1);
    c / adjusted.max(1e-9)
}

/// The level's rate in each of its consecutive windows (by when each
/// request started), adjusted to the set's mean length like the point.
pub fn window_rates(level: &Level, target: f64, slope: f64) -> Vec<f64> {
    let c = level.concurrency as f64;
    level
        .windows()
        .iter()
        .filter(|w| !w.is_empty())
        .map(|w| {
            let m = w.len() as f64;
            let latency = w.iter().map(|s| s.latency).sum::<f64>() / m;
            let length = w.iter().map(|s| s.output_tokens as f64).sum::<f64>() / m;
            rate(c, latency, length, target, slope)
        })
        .collect()
}

/// The run's records whose prompts the server has already been asked (by
/// the sweep), and how many times as fast it answers those: a server's
/// prefix cache skips the prompt of a request it has seen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seen {
    pub records: u64,
    pub speedup: f64,
}

impl Seen {
    /// Nothing seen, or no faster: every record takes the level's time.
    pub const NONE: Seen = Seen {
        records: 0,
        speedup: 1.0,
    };

    /// The work of `records` records, counted in records of prompts the
    /// server has not seen.
    fn work(&self, records: f64) -> f64 {
        let seen = (self.records as f64).min(records);
        records - seen + seen / self.speedup.max(1.0)
    }
}

/// How many times as fast the server answered the prompts it had seen
/// (`seen`, at the concurrency chosen) as new ones (`new`, the same
/// concurrency on prompts no level had asked), by their rates; 1 unless
/// the server itself says it answered the first from its cache (a share of
/// the prompts' tokens at least 25 points above the new ones'), so that
/// two windows' noise is never taken for a cache.
pub fn cache_speedup(seen: &Level, new: &Level) -> f64 {
    let (Some(cached), Some(fresh)) = (seen.cached_input_share(), new.cached_input_share()) else {
        return 1.0;
    };
    let (a, b) = (
        seen.figures().requests_per_second,
        new.figures().requests_per_second,
    );
    if cached < fresh + 0.25 || a <= 0.0 || b <= 0.0 {
        return 1.0;
    }
    (a / b).clamp(1.0, 20.0)
}

/// Projects `records` records at `level`, the lengths taken from `lengths`,
/// `seen` of them answered faster (see the module's doc for the interval).
pub fn project(
    level: &Level,
    lengths: &[Lengths],
    records: u64,
    seen: Seen,
    price: &Price,
    seed: u64,
) -> Option<Projection> {
    let n = level.samples.len();
    if n == 0 || lengths.is_empty() {
        return None;
    }
    let c = level.concurrency as f64;
    let r = records as f64;
    let work = seen.work(r);
    let slope = seconds_per_token(level);
    let Resampled {
        point,
        draws,
        target,
    } = resample(level, lengths, r, work, slope, price, seed);
    let interval = |value: f64, get: fn(&Draw) -> f64| {
        let mut v: Vec<f64> = draws.iter().map(get).collect();
        v.sort_by(f64::total_cmp);
        Estimate {
            value,
            low: quantile(&v, 0.025).min(value),
            high: quantile(&v, 0.975).max(value),
        }
    };
    let p = lengths.len();
    let mut rate_estimate = interval(point.rate, |d| d.rate);
    let mut method = vec![format!(
        "bootstrap ({ROUNDS} resamples) over the level's {n} requests and the {p} prompts' lengths"
    )];
    method.push(widen_between_windows(
        level,
        target,
        slope,
        work,
        point.rate,
        &mut rate_estimate,
    ));
    method.extend(widen_to_the_window_rate(level, point.rate, &mut rate_estimate));
    // Below a tenth of the point the run is not projectable: say so with
    // a wide bound rather than a negative rate.
    rate_estimate.low = rate_estimate.low.max(point.rate * 0.1);
    // The rate is the run's middle. Its start and its end are not: the last
    // requests finish up to a request's latency before or after the rate
    // says (stragglers, a last round of fewer than c), and starting the run
    // takes a moment. One mean latency at the level, in seconds, on either
    // side: nothing on a run of hours, 2 % of a run of seconds, where 20
    // seeded trials held 17 to 20 times without it.
    let edges = c / point.rate.max(1e-9);
    method.push(format!(
        "± one request's latency ({edges:.2} s) for the run's start and end"
    ));
    let cached = seen.records > 0 && seen.speedup > 1.0;
    if cached {
        method.push(format!(
            "{} of the records ask prompts the sweep asked, which the server answered {:.2}× as \
             fast from its prefix cache: they count as {:.0}",
            seen.records.min(records),
            seen.speedup,
            seen.records.min(records) as f64 / seen.speedup
        ));
    }
    let hours = Estimate {
        value: point.hours,
        low: (work / rate_estimate.high - edges).max(0.0) / 3600.0,
        high: (work / rate_estimate.low + edges) / 3600.0,
    };
    let output = interval(point.output, |d| d.output);
    let input = interval(point.input, |d| d.input);
    let bytes = interval(point.bytes, |d| d.bytes);
    let cost = point.cost.map(|value| {
        let mut e = interval(value, |d| d.cost.unwrap_or(0.0));
        // The hours' wider bounds priced, where the price is by the hour.
        if let (Some(low), Some(high)) = (
            price.cost(hours.low, output.low, input.low),
            price.cost(hours.high, output.high, input.high),
        ) {
            e.low = e.low.min(low);
            e.high = e.high.max(high);
        }
        e
    });
    // The run's rate over all its records, the seen ones at their speed:
    // what its ETA, calibration and drift check hold it to.
    let over_run = r / work.max(1e-9);
    let records_per_second = Estimate {
        value: rate_estimate.value * over_run,
        low: rate_estimate.low * over_run,
        high: rate_estimate.high * over_run,
    };
    Some(Projection {
        records,
        concurrency: level.concurrency,
        hours,
        records_per_second,
        output_tokens: output,
        input_tokens: input,
        bytes,
        cost,
        interval: Some(method.join("; ")),
        assumptions: assumptions(level, p, slope, cached),
    })
}

/// Resamples of the bootstrap.
const ROUNDS: usize = 1000;

/// The point projection, its [`ROUNDS`] bootstrap resamples, and the set's
/// mean output length the point was taken at.
struct Resampled {
    point: Draw,
    draws: Vec<Draw>,
    target: f64,
}

/// The point projection from the level's requests and the set's lengths as
/// they are, and [`ROUNDS`] more from resamples of both (seeded by `seed`).
fn resample(
    level: &Level,
    lengths: &[Lengths],
    records: f64,
    work: f64,
    slope: f64,
    price: &Price,
    seed: u64,
) -> Resampled {
    let n = level.samples.len();
    let c = level.concurrency as f64;
    let mean = |pick: &mut dyn FnMut() -> usize, of: usize, get: &dyn Fn(usize) -> f64| {
        (0..of).map(|_| get(pick())).sum::<f64>() / of as f64
    };
    let latency = |i: usize| level.samples[i].latency;
    let out = |i: usize| level.samples[i].output_tokens as f64;
    let set =
        |get: fn(&Lengths) -> f64| lengths.iter().map(get).sum::<f64>() / lengths.len() as f64;
    let target = set(|l| l.output_tokens);
    let mut seq = 0;
    let mut next = || {
        seq += 1;
        (seq - 1) % n
    };
    let level_latency = mean(&mut next, n, &latency);
    let level_length = mean(&mut next, n, &out);
    let point_rate = rate(c, level_latency, level_length, target, slope);
    let point = Draw::of(
        point_rate,
        records,
        work,
        [target, set(|l| l.input_tokens), set(|l| l.bytes)],
        price,
    );
    let mut rng = SplitMix(seed);
    let p = lengths.len();
    let draws: Vec<Draw> = (0..ROUNDS)
        .map(|_| {
            // The requests of the level, drawn together (a latency goes with
            // its length), and the prompts of the set.
            let picks: Vec<usize> = (0..n).map(|_| rng.below(n)).collect();
            let lat = picks.iter().map(|&i| latency(i)).sum::<f64>() / n as f64;
            let len = picks.iter().map(|&i| out(i)).sum::<f64>() / n as f64;
            let prompts: Vec<&Lengths> = (0..p).map(|_| &lengths[rng.below(p)]).collect();
            let avg =
                |get: fn(&Lengths) -> f64| prompts.iter().map(|l| get(l)).sum::<f64>() / p as f64;
            let target = avg(|l| l.output_tokens);
            Draw::of(
                rate(c, lat, len, target, slope),
                records,
                work,
                [target, avg(|l| l.input_tokens), avg(|l| l.bytes)],
                price,
            )
        })
        .collect();
    Resampled {
        point,
        draws,
        target,
    }
}

/// Widens `estimate` (of the rate, around `point_rate`) by the spread of
/// the rate between the level's windows: the run's mean rate over its own
/// windows against the mean of the level's k windows, by Student's t. The
/// rates are taken at the set's mean output length `target` and the
/// latency's `slope` an output token. Returns what it did, in words, for
/// the method.
fn widen_between_windows(
    level: &Level,
    target: f64,
    slope: f64,
    work: f64,
    point_rate: f64,
    estimate: &mut Estimate,
) -> String {
    let bins = level.windows().len().max(1);
    let windows = window_rates(level, target, slope);
    if windows.len() < 2 {
        return "one window only: no spread between windows to widen by".into();
    }
    let k = windows.len() as f64;
    let m = windows.iter().sum::<f64>() / k;
    let sd = (windows.iter().map(|w| (w - m).powi(2)).sum::<f64>() / (k - 1.0)).sqrt();
    // A window's length is the level's over all its windows, empty ones
    // included.
    let window_seconds = level.window_seconds / bins as f64;
    let run_windows = (work / point_rate.max(1e-9) / window_seconds.max(1e-9)).max(1.0);
    let half = t975(windows.len() - 1) * sd * (1.0 / k + 1.0 / run_windows).sqrt();
    // Added to the bootstrap's half-widths in quadrature, not taken as
    // the larger: the run has its own variation (the client's, the
    // disk's) that neither shows alone; with the larger only, 17 of 20
    // seeded trials held.
    let low = point_rate - estimate.low;
    let high = estimate.high - point_rate;
    estimate.low = point_rate - (low * low + half * half).sqrt();
    estimate.high = point_rate + (high * high + half * half).sqrt();
    format!(
        "widened by the spread of the rate between {} windows of {window_seconds:.1} s \
         (Student's t, {} df: ±{:.1}%, added in quadrature)",
        windows.len(),
        windows.len() - 1,
        100.0 * half / point_rate.max(1e-9)
    )
}

/// Widens `estimate` to cover the rate the level's window saw (completions
/// over its length), which covers how well Little's law holds for this
/// server; says so for the method when that moved a bound.
fn widen_to_the_window_rate(
    level: &Level,
    point_rate: f64,
    estimate: &mut Estimate,
) -> Option<String> {
    if level.window_seconds <= 0.0 {
        return None;
    }
    let seen = level.samples.len() as f64 / level.window_seconds;
    let note = (seen < estimate.low || seen > estimate.high).then(|| {
        format!(
            "and by the rate the window saw ({seen:.2} records/s against {point_rate:.2} by \
             Little's law)"
        )
    });
    estimate.low = estimate.low.min(seen);
    estimate.high = estimate.high.max(seen);
    note
}

/// What a projection at `level` over a set of `prompts` lengths assumes.
fn assumptions(level: &Level, prompts: usize, slope: f64, cached: bool) -> Vec<String> {
    [
        format!("the output lengths of the {prompts} prompts measured stand for the whole set"),
        "the server stays as it was measured (no other load, same model and settings); \
         slower changes than the level's windows show are the drift check's to find"
            .into(),
        format!(
            "the run keeps {} requests in flight throughout, by Little's law c / mean latency{}",
            level.concurrency,
            if slope > 0.0 {
                format!(", the latency adjusted by {:.1} ms an output token", slope * 1000.0)
            } else {
                String::new()
            }
        ),
    ]
    .into_iter()
    .chain(cached.then(|| {
        "the server still holds the sweep's prompts in its prefix cache when the run asks them \
         again"
            .to_string()
    }))
    .collect()
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

impl Draw {
    /// At `rate` records a second, `records` records of these mean
    /// [output tokens, input tokens, bytes], worth `work` records' time.
    fn of(
        rate: f64,
        records: f64,
        work: f64,
        [output, input, bytes]: [f64; 3],
        price: &Price,
    ) -> Draw {
        let hours = work / rate.max(1e-9) / 3600.0;
        let (output, input) = (records * output, records * input);
        Draw {
            hours,
            rate,
            output,
            input,
            bytes: records * bytes,
            cost: price.cost(hours, output, input),
        }
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
    use crate::phase::kinds::feasibility::stats::tests::level;

    #[test]
    fn the_projection_holds_its_point_inside_its_interval() {
        let l = level(8, 2.0, 100, 400);
        let lengths = prompt_lengths([&l]);
        let p = project(&l, &lengths, 100_000, Seen::NONE, &Price::default(), 7).unwrap();
        // 8 in flight at about 2 s each: 4 records/s, 100k in about 6.9 h.
        assert!((p.records_per_second.value - 4.0).abs() < 0.1, "{p:?}");
        assert!(
            (p.hours.value - 100_000.0 / 4.0 / 3600.0).abs() < 0.2,
            "{p:?}"
        );
        assert!(p.hours.low <= p.hours.value && p.hours.value <= p.hours.high);
        assert_eq!(p.output_tokens.value, 10_000_000.0);
        assert!(p.interval.as_deref().unwrap().contains("windows"), "{p:?}");
        let again = project(&l, &lengths, 100_000, Seen::NONE, &Price::default(), 7).unwrap();
        assert_eq!(p, again, "same samples, same seed, same interval");
        let budget = Budget {
            max_hours: Some(5.0),
            ..Budget::default()
        };
        let reasons = verdict(&p, &l.figures(), &budget);
        assert_eq!(reasons.len(), 1);
        assert!(reasons[0].contains("over the budget of 5 h"), "{reasons:?}");
    }

    #[test]
    fn a_rate_that_varies_between_windows_widens_the_interval() {
        let steady = level(8, 1.0, 100, 400);
        let mut varying = steady.clone();
        for s in &mut varying.samples {
            // The second half of the window is 20 % slower.
            if s.offset >= varying.window_seconds / 2.0 {
                s.latency *= 1.2;
            }
        }
        let width = |l: &Level| {
            let p = project(l, &prompt_lengths([l]), 10_000, Seen::NONE, &Price::default(), 1).unwrap();
            (p.hours.high - p.hours.low) / p.hours.value
        };
        assert!(
            width(&varying) > 2.0 * width(&steady),
            "{} {}",
            width(&varying),
            width(&steady)
        );
    }

    #[test]
    fn lengths_come_from_every_prompt_measured_not_only_the_levels() {
        // The level answered short prompts only; the set's other prompts,
        // measured at another level, are four times as long. Latency grows
        // with length: the projection must be slower than the level alone.
        let mut short = level(4, 1.0, 50, 64);
        for (i, s) in short.samples.iter_mut().enumerate() {
            s.output_tokens = 40 + (i % 3) as u64 * 10;
            s.latency = 0.2 + 0.016 * s.output_tokens as f64;
        }
        let mut long = level(1, 1.0, 200, 64);
        for s in &mut long.samples {
            s.prompt = s.prompt.map(|p| p + 1000);
        }
        let alone = project(
            &short,
            &prompt_lengths([&short]),
            1000,
            Seen::NONE,
            &Price::default(),
            1,
        )
        .unwrap();
        let both = project(
            &short,
            &prompt_lengths([&short, &long]),
            1000,
            Seen::NONE,
            &Price::default(),
            1,
        )
        .unwrap();
        assert!(
            both.hours.value > 2.0 * alone.hours.value,
            "{alone:?} {both:?}"
        );
        assert!(both.output_tokens.value > 2.0 * alone.output_tokens.value);
    }

    /// `l` with each answer saying `share` of its prompt came from the
    /// server's cache.
    fn cached(mut l: Level, share: f64) -> Level {
        for s in &mut l.samples {
            s.cached_tokens = Some((s.input_tokens as f64 * share) as u64);
        }
        l
    }

    #[test]
    fn prompts_the_server_has_cached_count_at_the_speed_it_answered_them() {
        // Asked before: 1 s a request, 90 % of the prompt cached; new: 2.5 s.
        let seen = cached(level(8, 1.0, 100, 200), 0.9);
        let new = cached(level(8, 2.5, 100, 200), 0.0);
        let speedup = cache_speedup(&seen, &new);
        assert!((speedup - 2.5).abs() < 0.01, "{speedup}");
        let lengths = prompt_lengths([&new]);
        let price = Price::default();
        let plain = project(&new, &lengths, 1000, Seen::NONE, &price, 1).unwrap();
        let half = Seen {
            records: 500,
            speedup,
        };
        let p = project(&new, &lengths, 1000, half, &price, 1).unwrap();
        // 500 new records and 500 at 2.5× the speed: 700 records' time.
        let ratio = p.hours.value / plain.hours.value;
        assert!((ratio - 0.7).abs() < 0.01, "{ratio}");
        assert!(p.hours.low <= p.hours.value && p.hours.value <= p.hours.high);
        // The volume is every record's, whatever their speed; the rate is
        // the run's over all of them, as its hours say.
        assert_eq!(p.output_tokens.value, plain.output_tokens.value);
        let rate = p.records_per_second.value;
        assert!((1000.0 / rate / 3600.0 / p.hours.value - 1.0).abs() < 1e-9);
        assert!(p.interval.unwrap().contains("prefix cache"));
        // More seen than the run has: the run's records at most.
        let all = Seen {
            records: 5000,
            speedup,
        };
        let p = project(&new, &lengths, 1000, all, &price, 1).unwrap();
        assert!((p.hours.value / plain.hours.value - 0.4).abs() < 0.01);
    }

    #[test]
    fn no_speedup_without_the_servers_word_that_it_cached() {
        // Faster, but the server says nothing of a cache: noise or load,
        // not a cache; and a cache it says the new prompts hit as much.
        let fast = level(8, 1.0, 100, 200);
        let slow = level(8, 2.5, 100, 200);
        assert_eq!(cache_speedup(&fast, &slow), 1.0);
        let both = (cached(fast, 0.6), cached(slow, 0.5));
        assert_eq!(cache_speedup(&both.0, &both.1), 1.0);
        // Cached, but the new prompts were answered faster: no slowdown.
        let (seen, new) = (
            cached(level(8, 2.5, 100, 200), 0.9),
            cached(level(8, 1.0, 100, 200), 0.0),
        );
        assert_eq!(cache_speedup(&seen, &new), 1.0);
    }

    #[test]
    fn repeated_answers_to_one_prompt_are_one_prompts_length() {
        let mut l = level(1, 1.0, 100, 10);
        for (i, s) in l.samples.iter_mut().enumerate() {
            s.prompt = Some(if i < 9 { 0 } else { 1 });
            s.output_tokens = if i < 9 { 10 } else { 190 };
        }
        let lengths = prompt_lengths([&l]);
        assert_eq!(lengths.len(), 2);
        let mean = lengths.iter().map(|l| l.output_tokens).sum::<f64>() / 2.0;
        assert_eq!(mean, 100.0);
    }
}
