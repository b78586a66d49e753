//! A running phase's progress over time, for the page's rates and chart:
//! read from the store's progress events once, then only the new ones on
//! each update, and thinned so that a run of days stays a few thousand
//! points.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use todod_domain::TaskId;
use todod_store::{ProgressPoint, Store};

/// Points kept per task: halved (every other one dropped) when passed.
const MAX_POINTS: usize = 4096;
/// How often a run reports its progress, at most.
const PROGRESS_EVERY_MS: i64 = 1000;
/// Events read per query, so a long history is read in bounded steps.
const READ_STEP: usize = 20_000;

#[derive(Default)]
pub struct SeriesCache {
    tasks: Mutex<HashMap<TaskId, Arc<tokio::sync::Mutex<Series>>>>,
}

#[derive(Debug, Default, Clone)]
struct Series {
    last_seq: i64,
    points: Vec<ProgressPoint>,
}

impl Series {
    fn extend(&mut self, new: &[ProgressPoint]) {
        if let Some(last) = new.last() {
            self.last_seq = last.seq;
        }
        self.points.extend_from_slice(new);
        if self.points.len() > MAX_POINTS {
            self.points = thin(&self.points);
        }
    }
}

/// Every other point, the first and the last kept.
fn thin(points: &[ProgressPoint]) -> Vec<ProgressPoint> {
    let mut out: Vec<ProgressPoint> = points.iter().step_by(2).copied().collect();
    if let (Some(last), Some(kept)) = (points.last(), out.last()) {
        if last.seq != kept.seq {
            out.push(*last);
        }
    }
    out
}

impl SeriesCache {
    /// `task`'s progress points so far, oldest first.
    pub async fn points(
        &self,
        store: &Store,
        task: TaskId,
    ) -> Result<Vec<ProgressPoint>, todod_store::Error> {
        let series = {
            let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
            tasks.entry(task).or_default().clone()
        };
        let mut series = series.lock().await;
        loop {
            let new = store
                .progress_points(task, series.last_seq, READ_STEP)
                .await?;
            series.extend(&new);
            if new.len() < READ_STEP {
                break;
            }
        }
        Ok(series.points.clone())
    }

    /// Forgets the series of tasks that no longer run.
    pub fn forget(&self, stopped: &[TaskId]) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        for id in stopped {
            tasks.remove(id);
        }
    }
}

/// Records answered per second over the last `seconds` of `points` (or
/// over what there is, if the run is younger), with the span it covers.
pub fn rate_over(points: &[ProgressPoint], seconds: f64) -> Option<(f64, f64)> {
    let last = points.last()?;
    let from_ms = last.at_ms - (seconds * 1000.0) as i64;
    // The newest point at or before the window's start, else the first.
    let start = points
        .iter()
        .rev()
        .find(|p| p.at_ms <= from_ms)
        .or(points.first())?;
    let span = (last.at_ms - start.at_ms) as f64 / 1000.0;
    if span <= 0.0 {
        return None;
    }
    Some((
        last.answered.saturating_sub(start.answered) as f64 / span,
        span,
    ))
}

/// Records answered at `at_ms`, read off the line between the points
/// either side of it (progress is reported about once a second, so a
/// step at each point would draw a saw).
fn answered_at(points: &[ProgressPoint], at_ms: i64) -> f64 {
    let i = points.partition_point(|p| p.at_ms <= at_ms);
    match (i.checked_sub(1).map(|j| points[j]), points.get(i)) {
        (Some(a), Some(b)) if b.at_ms > a.at_ms => {
            let share = (at_ms - a.at_ms) as f64 / (b.at_ms - a.at_ms) as f64;
            a.answered as f64 + share * (b.answered as f64 - a.answered as f64)
        }
        (Some(a), _) => a.answered as f64,
        (None, Some(b)) => b.answered as f64,
        (None, None) => 0.0,
    }
}

/// The rate in equal spans of the series' time, as (span's end in ms,
/// records/s): at most `buckets` spans, and no more than the series has
/// points to tell them apart.
pub fn bucketed_rates(points: &[ProgressPoint], buckets: usize) -> Vec<(i64, f64)> {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return Vec::new();
    };
    let total = last.at_ms - first.at_ms;
    // No more spans than points, nor narrower than a second: a run reports
    // about once a second, and a sharded task's shards each report, in a
    // burst of points a few ms apart; spans between bursts would read 0.
    let buckets = buckets
        .min(points.len().saturating_sub(1))
        .min((total / PROGRESS_EVERY_MS) as usize);
    if total <= 0 || buckets == 0 {
        return Vec::new();
    }
    let width = total as f64 / buckets as f64;
    let mut out = Vec::with_capacity(buckets);
    let mut before = first.answered as f64;
    for i in 1..=buckets {
        let end = if i == buckets {
            last.at_ms
        } else {
            first.at_ms + (width * i as f64).round() as i64
        };
        let now = answered_at(points, end);
        out.push((end, (now - before).max(0.0) / (width / 1000.0)));
        before = now;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(seq: i64, s: i64, answered: u64) -> ProgressPoint {
        ProgressPoint {
            seq,
            at_ms: s * 1000,
            answered,
            tokens: answered * 10,
        }
    }

    /// A sharded task's shards each report once a second, a few ms apart:
    /// the chart's spans are no narrower than a second, so the rate reads
    /// steady, not a saw between the bursts and nothing.
    #[test]
    fn bursts_of_shard_reports_draw_a_steady_rate() {
        let mut points = Vec::new();
        for s in 0..60i64 {
            for shard in 0..3 {
                let seq = s * 3 + shard;
                points.push(ProgressPoint {
                    seq,
                    at_ms: s * 1000 + shard * 5,
                    answered: (30 * s + 10 * (shard + 1)) as u64,
                    tokens: 0,
                });
            }
        }
        let rates = bucketed_rates(&points, 200);
        assert!(rates.len() <= 60, "{}", rates.len());
        for (at, rate) in &rates {
            assert!((20.0..=40.0).contains(rate), "{rate} at {at}: {rates:?}");
        }
    }

    #[test]
    fn rates_are_over_their_window_or_the_run_so_far() {
        // 2 records/s for 100 s, then 4 records/s for 100 s.
        let points: Vec<_> = (0..=200)
            .map(|s| {
                p(
                    s,
                    s,
                    if s <= 100 { 2 * s } else { 200 + 4 * (s - 100) } as u64,
                )
            })
            .collect();
        let (one, span) = rate_over(&points, 60.0).unwrap();
        assert_eq!((one, span), (4.0, 60.0));
        let (all, span) = rate_over(&points, 900.0).unwrap();
        assert_eq!((all, span), (3.0, 200.0));
        assert_eq!(rate_over(&points[..1], 60.0), None);
    }

    #[test]
    fn buckets_show_the_change_of_rate() {
        let points: Vec<_> = (0..=200)
            .map(|s| {
                p(
                    s,
                    s,
                    if s <= 100 { 2 * s } else { 200 + 4 * (s - 100) } as u64,
                )
            })
            .collect();
        let rates = bucketed_rates(&points, 4);
        let values: Vec<f64> = rates.iter().map(|r| r.1).collect();
        assert_eq!(values, vec![2.0, 2.0, 4.0, 4.0]);
        // Two reports a second apart make one span, not a spike.
        assert_eq!(bucketed_rates(&points[..2], 48), vec![(1000, 2.0)]);
        // Reports further apart than the spans: the line between them.
        let sparse = [p(1, 0, 0), p(2, 10, 100)];
        assert_eq!(bucketed_rates(&sparse, 48).len(), 1);
        assert_eq!(rates.last().unwrap().0, 200_000);
    }

    #[test]
    fn a_long_history_is_thinned_keeping_both_ends() {
        let mut series = Series::default();
        let points: Vec<_> = (0..MAX_POINTS as i64 + 1)
            .map(|s| p(s + 1, s, s as u64))
            .collect();
        series.extend(&points);
        assert!(series.points.len() <= MAX_POINTS / 2 + 2);
        assert_eq!(series.points.first().unwrap().seq, 1);
        assert_eq!(series.points.last().unwrap().seq, MAX_POINTS as i64 + 1);
        assert_eq!(series.last_seq, MAX_POINTS as i64 + 1);
    }
}
