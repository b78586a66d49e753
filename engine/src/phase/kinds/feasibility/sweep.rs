//! Which level a sweep measures next, and when it stops: plain rules over
//! the figures measured so far, no I/O.
//!
//! A geometric sweep (1, 2, 4, ...) does not stop at the first flat
//! doubling: servers are often flat at low concurrency (batch-size buckets,
//! prefill against decode, a CPU-bound tokenizer) and gain above it. It
//! stops after two doublings in a row that gain under the threshold once
//! the server says it is full (requests queued for a slot, or its KV cache
//! full: more in flight can only wait), when throughput falls, when errors
//! pass `max_error_rate` or p99 latency its bound. A plateau with slots
//! free, or on a server that does not say, does not stop it, nor does a
//! fall on a server that says it had room: llama.cpp's server with 8 slots
//! on a CPU was flat from 1 to 4 and 55 % faster at 8, and one sweep
//! measured it 19 % slower at 2 than at 1 (BENCHMARKS.md). The sweep's
//! budget bounds what looking past costs. Then the best level's
//! neighbours: where one differs from the best by more than the threshold,
//! the level between them is measured too (6 and 12 around 8), so that the
//! choice is not off by a factor of two. All of it within the sweep's own
//! budget, a share of the run it projects.
use super::stats::Figures;

/// What the rules read of the spec.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    pub max_error_rate: f64,
    pub max_p99_latency_seconds: Option<f64>,
    /// A doubling that gains less than this share is flat.
    pub min_gain: f64,
}

impl Rules {
    /// Whether a level's figures may be chosen at all.
    pub fn usable(&self, f: &Figures) -> bool {
        f.requests > 0
            && f.error_rate <= self.max_error_rate
            && match (self.max_p99_latency_seconds, &f.e2e_seconds) {
                (Some(bound), Some(e2e)) => e2e.p99 <= bound,
                (Some(_), None) => false,
                (None, _) => true,
            }
    }
}

fn gain(from: &Figures, to: &Figures) -> f64 {
    if from.output_tokens_per_second <= 0.0 {
        return if to.output_tokens_per_second > 0.0 {
            f64::INFINITY
        } else {
            0.0
        };
    }
    to.output_tokens_per_second / from.output_tokens_per_second - 1.0
}

/// Whether the server said it was full at a level (its own `/metrics`):
/// past that, more requests in flight only wait.
fn server_full(f: &Figures) -> bool {
    f.server
        .as_ref()
        .is_some_and(todod_telemetry::server_metrics::full)
}

/// Whether the server said it had room at a level: it reported, and was
/// not full. A fall there is the server's noise, not its limit.
fn server_had_room(f: &Figures) -> bool {
    f.server
        .as_ref()
        .is_some_and(|s| s.running.is_some() && !todod_telemetry::server_metrics::full(s))
}

/// Why a geometric sweep stops after `levels` (in the order measured, the
/// last one new), if it does.
pub fn stop_after(levels: &[Figures], rules: &Rules) -> Option<String> {
    let last = levels.last()?;
    if last.error_rate > rules.max_error_rate {
        return Some(format!(
            "errors at concurrency {} ({:.1}%) passed the limit of {:.1}%",
            last.concurrency,
            last.error_rate * 100.0,
            rules.max_error_rate * 100.0
        ));
    }
    if let (Some(bound), Some(e2e)) = (rules.max_p99_latency_seconds, &last.e2e_seconds) {
        if e2e.p99 > bound {
            return Some(format!(
                "p99 latency at concurrency {} ({:.2} s) passed the bound of {bound} s",
                last.concurrency, e2e.p99
            ));
        }
    }
    let n = levels.len();
    if n < 2 {
        return None;
    }
    let (before, previous) = (levels.get(n.wrapping_sub(3)), &levels[n - 2]);
    let step = gain(previous, last);
    // A fall is one only if it is more than the two levels' noise (twice
    // the standard error of their difference) says it could be by chance.
    let noise = match (
        previous.output_tokens_per_second_se,
        last.output_tokens_per_second_se,
    ) {
        (Some(a), Some(b)) => 2.0 * (a * a + b * b).sqrt(),
        _ => 0.0,
    };
    let fell = previous.output_tokens_per_second - last.output_tokens_per_second;
    // On a server that says it still had room (every request running, none
    // queued), a fall is its noise over time, not its limit: llama.cpp's
    // server on a CPU measured 110 then 89 output tokens/s at 1 and 2, and
    // 150 at 8.
    if step < -rules.min_gain && fell > noise && !server_had_room(last) {
        return Some(format!(
            "output tokens/s fell from {:.0} at concurrency {} to {:.0} at {}",
            previous.output_tokens_per_second,
            previous.concurrency,
            last.output_tokens_per_second,
            last.concurrency
        ));
    }
    let percent = rules.min_gain * 100.0;
    match before {
        Some(before)
            if step < rules.min_gain
                && gain(before, previous) < rules.min_gain
                && server_full(last) =>
        {
            Some(format!(
                "two doublings in a row gained under {percent:.0}% output tokens/s each \
                 ({} → {} → {}), and the server queued requests at {}",
                before.concurrency, previous.concurrency, last.concurrency, last.concurrency
            ))
        }
        _ => None,
    }
}

/// The levels between the best usable level and a measured neighbour that
/// differs from it by more than the threshold (or is not usable), more than
/// half a doubling away, not yet measured; in ascending order.
pub fn between(levels: &[Figures], rules: &Rules) -> Vec<usize> {
    let Some(best) = levels.iter().filter(|f| rules.usable(f)).max_by(|a, b| {
        a.output_tokens_per_second
            .total_cmp(&b.output_tokens_per_second)
            .then(b.concurrency.cmp(&a.concurrency))
    }) else {
        return Vec::new();
    };
    let lower = levels
        .iter()
        .filter(|f| f.concurrency < best.concurrency)
        .max_by_key(|f| f.concurrency);
    let upper = levels
        .iter()
        .filter(|f| f.concurrency > best.concurrency)
        .min_by_key(|f| f.concurrency);
    let differs = |f: &Figures| {
        !rules.usable(f)
            || (f.output_tokens_per_second - best.output_tokens_per_second).abs()
                > rules.min_gain * best.output_tokens_per_second
    };
    let mut out = Vec::new();
    for neighbour in [lower, upper].into_iter().flatten() {
        // Finer than half a doubling is not worth a level: the knee is
        // chosen within the threshold anyway.
        let (small, large) = if neighbour.concurrency < best.concurrency {
            (neighbour.concurrency, best.concurrency)
        } else {
            (best.concurrency, neighbour.concurrency)
        };
        if !differs(neighbour) || (large as f64) <= 1.5 * small as f64 {
            continue;
        }
        let mid = (neighbour.concurrency + best.concurrency).div_ceil(2);
        let measured = levels.iter().any(|f| f.concurrency == mid);
        if mid != best.concurrency && mid != neighbour.concurrency && !measured {
            out.push(mid);
        }
    }
    out
}

/// What the sweep may spend, in seconds: `share` of the run it projects, at
/// least `floor` (a tiny run's 2 % would not measure one level).
pub fn allowed_seconds(projected_run_seconds: Option<f64>, share: f64, floor: f64) -> f64 {
    projected_run_seconds.map_or(floor, |run| (run * share).max(floor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phase::kinds::feasibility::stats::tests::level;

    const RULES: Rules = Rules {
        max_error_rate: 0.05,
        max_p99_latency_seconds: None,
        min_gain: 0.05,
    };

    /// Figures at concurrency `c` giving `tps` output tokens a second.
    fn at(c: usize, tps: f64) -> Figures {
        // c in flight of 100 tokens each: c * 100 / latency = tps.
        level(c, c as f64 * 100.0 / tps, 100, 200).figures()
    }

    #[test]
    fn a_flat_first_doubling_does_not_stop_the_sweep() {
        // Flat 1 → 2, +40 % at 4, +30 % at 8, flat at 16 and 32.
        let curve = [
            (1, 100.0),
            (2, 101.0),
            (4, 141.0),
            (8, 183.0),
            (16, 185.0),
            (32, 186.0),
        ];
        let mut levels: Vec<Figures> = curve.iter().map(|&(c, t)| at(c, t)).collect();
        for n in 1..=5 {
            assert_eq!(stop_after(&levels[..n], &RULES), None, "after {n} levels");
        }
        // Flat at 16 and 32 stops it only once the server says it queues.
        assert_eq!(stop_after(&levels, &RULES), None, "no word from the server");
        levels[5].server = Some(server(8.0, 24.0, 0.6));
        let why = stop_after(&levels, &RULES).expect("two flat doublings, the server full");
        assert!(why.contains("two doublings in a row"), "{why}");
        levels[5].server = Some(server(32.0, 0.0, 0.99));
        assert!(stop_after(&levels, &RULES).is_some(), "a full KV cache is full");
    }

    /// What a server said of itself during a level.
    fn server(running: f64, waiting: f64, kv: f64) -> todod_telemetry::server_metrics::Summary {
        todod_telemetry::server_metrics::Summary {
            running: Some(running),
            waiting: Some(waiting),
            max_kv_cache_usage: Some(kv),
            ..Default::default()
        }
    }

    #[test]
    fn a_plateau_with_slots_free_does_not_stop_the_sweep() {
        // llama.cpp's server, 8 slots on 2 CPU cores (BENCHMARKS.md): flat
        // from 1 to 4 with every request running and none queued, 55 %
        // faster at 8.
        let mut levels = vec![at(1, 92.0), at(2, 93.0), at(4, 95.0)];
        for (level, running) in levels.iter_mut().zip([1.0, 2.0, 4.0]) {
            level.server = Some(server(running, 0.0, 0.1));
        }
        assert_eq!(stop_after(&levels, &RULES), None);
        levels[2].server = Some(server(2.0, 2.0, 0.3));
        assert!(stop_after(&levels, &RULES).is_some(), "queued at 4: full");
        // A fall with room on the server is noise; without a word from the
        // server, or with it full, a fall beyond noise stops the sweep.
        let mut fell = vec![at(1, 110.0), at(2, 89.0)];
        fell[1].server = Some(server(2.0, 0.0, 0.1));
        assert_eq!(stop_after(&fell, &RULES), None);
        fell[1].server = Some(server(2.0, 3.0, 0.5));
        assert!(stop_after(&fell, &RULES).unwrap().contains("fell"));
        fell[1].server = None;
        assert!(stop_after(&fell, &RULES).unwrap().contains("fell"));
    }

    #[test]
    fn a_fall_errors_and_latency_stop_the_sweep() {
        let fell = [at(1, 100.0), at(2, 180.0), at(4, 150.0)];
        assert!(stop_after(&fell, &RULES).unwrap().contains("fell"));
        // The same fall within the levels' noise is only a flat step.
        let mut noisy = fell.clone();
        noisy[1].output_tokens_per_second_se = Some(12.0);
        noisy[2].output_tokens_per_second_se = Some(12.0);
        assert_eq!(stop_after(&noisy, &RULES), None);
        let mut failing = at(4, 300.0);
        failing.error_rate = 0.2;
        let why = stop_after(&[at(1, 100.0), at(2, 180.0), failing], &RULES).unwrap();
        assert!(why.contains("errors at concurrency 4"), "{why}");
        let slow = Rules {
            max_p99_latency_seconds: Some(1.5),
            ..RULES
        };
        // At 4, 400 tokens in about 2 s: p99 about 2.2 s.
        let why = stop_after(&[at(1, 100.0), at(2, 200.0), at(4, 200.0)], &slow).unwrap();
        assert!(why.contains("p99 latency at concurrency 4"), "{why}");
    }

    #[test]
    fn the_levels_around_the_best_are_measured_where_they_differ() {
        let levels = [
            at(1, 100.0),
            at(2, 101.0),
            at(4, 141.0),
            at(8, 183.0),
            at(16, 150.0),
        ];
        assert_eq!(between(&levels, &RULES), vec![6, 12]);
        // A neighbour within the threshold needs nothing between.
        let flat_above = [at(4, 141.0), at(8, 183.0), at(16, 180.0)];
        assert_eq!(between(&flat_above, &RULES), vec![6]);
        // Once measured, not again; and not finer than half a doubling.
        let mut more = levels.to_vec();
        more.extend([at(6, 170.0), at(12, 170.0)]);
        assert!(between(&more, &RULES).is_empty());
        // Adjacent integers: nothing between.
        assert!(between(&[at(1, 100.0), at(2, 200.0)], &RULES).is_empty());
    }

    #[test]
    fn the_sweeps_budget_is_a_share_of_the_run_with_a_floor() {
        assert_eq!(allowed_seconds(Some(36_000.0), 0.02, 120.0), 720.0);
        assert_eq!(allowed_seconds(Some(300.0), 0.02, 120.0), 120.0);
        assert_eq!(allowed_seconds(None, 0.02, 120.0), 120.0);
    }
}
