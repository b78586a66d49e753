//! A generation's requests where people look: the run's counts (kept in
//! its checkpoint's counters, so that they add up across restarts, passes
//! and shards) and the last minute's, the rate an operator needs before
//! retries turn into failures; and a history event when the share failing
//! passes the spec's `warn_error_share`, once until it is back under.
//!
//! The counts are the increments of the counters `/metrics` exports
//! (`RequestMetrics::counts`); this module only keeps their recent past.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use todod_proto::readable::duration;
use todod_proto::results::{RequestCounts, RequestFigures};

/// The window of the rate now.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Fewer requests than this in the window say nothing of a share: a run's
/// first three requests failing is not an event.
pub const MIN_REQUESTS: u64 = 20;

/// The run's totals over the last minute, and whether the share failing
/// has been reported.
pub struct RequestWatch {
    /// The run's totals at earlier looks, oldest first; the first is the
    /// newest one at least [`WINDOW`] old (or the run's start).
    snapshots: VecDeque<(Instant, RequestCounts)>,
    warn_share: f64,
    reported: bool,
}

impl RequestWatch {
    /// A watch for a run that started at `started` with `before` counted by
    /// its earlier runs.
    pub fn new(started: Instant, before: RequestCounts, warn_share: f64) -> RequestWatch {
        RequestWatch {
            snapshots: VecDeque::from([(started, before)]),
            warn_share,
            reported: false,
        }
    }

    /// The figures at `now`, when the run has counted `run` in all; and the
    /// payload of an `errors` event when the last minute's share failing
    /// passed the threshold for the first time since it was under.
    pub fn look(&mut self, now: Instant, run: &RequestCounts) -> (RequestFigures, Option<Value>) {
        self.snapshots.push_back((now, run.clone()));
        while self
            .snapshots
            .get(1)
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= WINDOW)
        {
            self.snapshots.pop_front();
        }
        let (since, earlier) = &self.snapshots[0];
        let window = now.saturating_duration_since(*since);
        let last_minute = run.since(earlier);
        let share = last_minute.error_share().unwrap_or(0.0);
        let event = if last_minute.sent >= MIN_REQUESTS && share > self.warn_share {
            (!self.reported).then(|| {
                self.reported = true;
                json!({
                    "message": format!(
                        "{:.1} % of requests failed over the last {}: {}; warned past {} %",
                        share * 100.0,
                        duration(window.as_secs() as i64),
                        last_minute.describe(),
                        self.warn_share * 100.0,
                    ),
                    "share": share,
                    "window_seconds": window.as_secs_f64(),
                    "requests": last_minute,
                })
            })
        } else {
            if share <= self.warn_share {
                self.reported = false;
            }
            None
        };
        let figures = RequestFigures {
            run: run.clone(),
            last_minute,
            window_seconds: window.as_secs_f64(),
        };
        (figures, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(sent: u64, server_errors: u64, retried: u64) -> RequestCounts {
        RequestCounts {
            sent,
            retried,
            errors: [("server_error".to_string(), server_errors)]
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
        }
    }

    #[test]
    fn the_last_minute_is_the_run_since_a_minute_ago() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut watch = RequestWatch::new(start, counts(1000, 10, 10), 0.05);
        // Ten seconds in: the window is the run's ten seconds.
        let (f, _) = watch.look(at(10), &counts(1100, 10, 10));
        assert_eq!((f.last_minute.sent, f.window_seconds), (100, 10.0));
        assert_eq!(f.run.sent, 1100);
        for s in (20..=90).step_by(10) {
            watch.look(at(s), &counts(1000 + 10 * s, 10, 10));
        }
        // At 100 s the window starts at the look of 40 s.
        let (f, _) = watch.look(at(100), &counts(2000, 12, 12));
        assert_eq!(f.window_seconds, 60.0);
        assert_eq!(f.last_minute, counts(600, 2, 2));
    }

    #[test]
    fn a_share_past_the_threshold_is_reported_once_until_it_is_back_under() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut watch = RequestWatch::new(start, RequestCounts::default(), 0.05);
        // Too few requests to say anything.
        assert!(watch.look(at(1), &counts(10, 5, 5)).1.is_none());
        let event = watch.look(at(2), &counts(100, 20, 20)).1.expect("reported");
        assert_eq!(event["share"], 0.2);
        assert!(
            event["message"]
                .as_str()
                .unwrap()
                .starts_with("20.0 % of requests failed over the last 2s: 100 requests, 20 failed"),
            "{event}"
        );
        assert!(watch.look(at(3), &counts(200, 40, 40)).1.is_none(), "once");
        // Back under over a minute of clean requests, then past it again.
        assert!(watch.look(at(70), &counts(2000, 40, 40)).1.is_none());
        assert!(watch.look(at(71), &counts(2100, 200, 200)).1.is_some());
    }
}
