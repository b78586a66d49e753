//! What a completed feasibility task tells the generation it vouches for,
//! read from its typed result:
//! the level it chose, and the projection the running generation is held
//! against. [`Watch`] is that check, plain logic over the progress the run
//! reports: the rate over a trailing window and the mean output length,
//! compared with the projected intervals; a drift that lasts is reported
//! once, with both figures, until the run is back inside.
use todod_proto::results::ProgressCounts;
use std::collections::VecDeque;

use serde_json::{json, Value};

use todod_domain::{Kind, Status, TaskId};
use todod_proto::results::{
    self, Estimate, FeasibilityResult, HeldOutcome, Projection, Remeasured,
};
use crate::phase::PhaseStore;

/// A completed feasibility dependency's word on a generation.
#[derive(Debug, Clone)]
pub struct Vouch {
    pub task: TaskId,
    pub concurrency: usize,
    pub projection: Projection,
    /// How long a drift must last before it is reported.
    pub drift_after_seconds: f64,
    /// How long into the run its sustained rate is first held against the
    /// projection (the calibration).
    pub calibrate_after_seconds: f64,
}

impl Vouch {
    fn from_result(task: TaskId, result: &str) -> Option<Vouch> {
        let result: FeasibilityResult = results::parse(result)?;
        let (concurrency, projection) = result.chosen()?;
        Some(Vouch {
            task,
            concurrency,
            projection: projection.clone(),
            drift_after_seconds: result.drift_after_seconds,
            calibrate_after_seconds: result.calibrate_after_seconds,
        })
    }

    /// This vouch held against what a re-measurement found instead, for a
    /// run at `concurrency`: its outcome as recorded in the firing's event
    /// (`None` if it found no projection, or measured another level).
    pub fn rebased(&self, outcome: &str, concurrency: usize) -> Option<Vouch> {
        let found: Remeasured = results::parse(outcome)?;
        if found.concurrency != concurrency {
            return None;
        }
        Some(Vouch {
            concurrency,
            projection: found.projection?,
            ..self.clone()
        })
    }
}

/// The vouch of the most recently finished completed feasibility task that
/// `task` depends on, if any.
pub async fn of(store: &PhaseStore, task: TaskId) -> Result<Option<Vouch>, String> {
    let me = store
        .get_task(task)
        .await
        .map_err(|e| format!("cannot read the task: {e}"))?;
    let mut best: Option<(i64, Vouch)> = None;
    for dep in me.depends_on {
        let t = store
            .get_task(dep)
            .await
            .map_err(|e| format!("cannot read dependency {dep}: {e}"))?;
        if t.kind != Kind::named("feasibility") || t.status != Status::Completed {
            continue;
        }
        let Some(vouch) = t
            .result
            .as_deref()
            .and_then(|r| Vouch::from_result(t.id, r))
        else {
            continue;
        };
        let at = t.finished_at.unwrap_or(0);
        if best.as_ref().is_none_or(|(b, _)| at > *b) {
            best = Some((at, vouch));
        }
    }
    Ok(best.map(|(_, v)| v))
}

/// Tolerance around a projected interval before a figure counts as outside:
/// a short window is noisier than the measurement it is compared with.
const SLACK: f64 = 0.10;

fn outside(actual: f64, e: &Estimate) -> bool {
    actual < e.low.min(e.value * (1.0 - SLACK)) || actual > e.high.max(e.value * (1.0 + SLACK))
}

/// The running check of a generation against its projection.
#[derive(Debug)]
pub struct Watch {
    vouch: Vouch,
    /// Seconds of rate history the trailing rate is taken over.
    window: f64,
    /// (seconds since the run started, records answered, output tokens).
    seen: VecDeque<(f64, u64, u64)>,
    first: Option<(f64, u64, u64)>,
    outside_since: Option<f64>,
    reported: bool,
    /// The calibration's finding, once made: kept in every later progress.
    calibration: Option<Value>,
}

/// What one look found.
#[derive(Debug, Clone, PartialEq)]
pub struct Look {
    /// Progress fields to add.
    pub progress: Value,
    /// A `drift` event's payload, when a drift has lasted long enough.
    pub drift: Option<Value>,
    /// A `calibration` event's payload, the once it is made.
    pub calibration: Option<Value>,
}

impl Watch {
    pub fn new(vouch: Vouch) -> Watch {
        let window = (vouch.drift_after_seconds / 2.0).clamp(5.0, 120.0);
        Watch {
            vouch,
            window,
            seen: VecDeque::new(),
            first: None,
            outside_since: None,
            reported: false,
            calibration: None,
        }
    }

    /// The first minutes' sustained rate against the projection, once
    /// `calibrate_after_seconds` have passed since the first look: on track,
    /// or how much slower or faster, and the end re-projected from it.
    fn calibrate(&mut self, now: f64, answered: u64, left: u64) -> Option<Value> {
        let (t0, a0, _) = self.first?;
        let span = now - t0;
        if self.calibration.is_some() || span < self.vouch.calibrate_after_seconds || answered <= a0
        {
            return None;
        }
        let p = &self.vouch.projection.records_per_second;
        let rate = (answered - a0) as f64 / span;
        let eta = left as f64 / rate.max(1e-9);
        let end = todod_store::now_ms() + (eta * 1000.0) as i64;
        let inside = rate >= p.low && rate <= p.high;
        let ratio = rate / p.value.max(1e-9);
        let verdict = if inside {
            "on track".to_string()
        } else if ratio < 1.0 {
            format!("{:.0}% slower than projected", (1.0 - ratio) * 100.0)
        } else {
            format!("{:.0}% faster than projected", (ratio - 1.0) * 100.0)
        };
        let message = format!(
            "after {span:.0} s: {rate:.2} records/s against {:.2} projected ({:.2}-{:.2}): \
             {verdict}{}",
            p.value,
            p.low,
            p.high,
            if inside {
                String::new()
            } else {
                format!(
                    "; the {left} records left re-projected to end at {}",
                    todod_domain::time::rfc3339(end)
                )
            }
        );
        let found = json!({
            "feasibility": self.vouch.task.to_string(),
            "message": message,
            "on_track": inside,
            "after_seconds": span,
            "records_per_second": {"actual": rate, "projected": p},
            "ratio": ratio,
            "eta_seconds": eta,
            "projected_end": todod_domain::time::rfc3339(end),
        });
        self.calibration = Some(found.clone());
        Some(found)
    }

    pub fn vouch(&self) -> &Vouch {
        &self.vouch
    }

    /// What the calibration found, once it was made.
    pub fn calibration(&self) -> Option<&Value> {
        self.calibration.as_ref()
    }

    /// This watch with the calibration an earlier one of the run made (a
    /// run is calibrated once, across holds and restarts).
    pub fn calibrated(mut self, found: Option<Value>) -> Watch {
        if found.is_some() {
            self.calibration = found;
        }
        self
    }

    /// Looks at the run `now` seconds after it started, with `answered`
    /// records (written or failed) and `tokens` output tokens in total, and
    /// `left` records still to do.
    pub fn look(&mut self, now: f64, answered: u64, tokens: u64, left: u64) -> Look {
        self.first.get_or_insert((now, answered, tokens));
        let calibration = self.calibrate(now, answered, left);
        let p = &self.vouch.projection;
        self.seen.push_back((now, answered, tokens));
        while self.seen.len() > 2 && now - self.seen[1].0 >= self.window {
            self.seen.pop_front();
        }
        let mut progress = json!({
            "feasibility": self.vouch.task.to_string(),
            "projected_hours": p.hours,
        });
        ProgressCounts {
            projected_records_per_second: Some(p.records_per_second),
            projected_eta_seconds: Some(
                (left as f64 / p.records_per_second.value.max(1e-9)) as u64,
            ),
            ..ProgressCounts::default()
        }
        .merge_into(&mut progress);
        if let Some(found) = &self.calibration {
            progress["calibration"] =
                json!({"message": found["message"], "on_track": found["on_track"]});
        }
        let (t0, a0, k0) = self.seen[0];
        let span = now - t0;
        // Judge only a full window, and not the ramp-up of the run's start.
        let first = self.first.expect("set above");
        if span < self.window || now - first.0 < self.window || answered <= a0 {
            self.outside_since = None;
            return Look {
                progress,
                drift: None,
                calibration,
            };
        }
        let rate = (answered - a0) as f64 / span;
        let per_record = (tokens - k0) as f64 / (answered - a0) as f64;
        let records = p.records.max(1) as f64;
        let projected_length = Estimate {
            value: p.output_tokens.value / records,
            low: p.output_tokens.low / records,
            high: p.output_tokens.high / records,
        };
        let rate_out = outside(rate, &p.records_per_second);
        let length_out = outside(per_record, &projected_length);
        progress["records_per_second_now"] = json!(rate);
        progress["output_tokens_per_record_now"] = json!(per_record);
        progress["drifting"] = json!(rate_out || length_out);
        if !(rate_out || length_out) {
            self.outside_since = None;
            self.reported = false;
            return Look {
                progress,
                drift: None,
                calibration,
            };
        }
        let since = *self.outside_since.get_or_insert(now);
        if self.reported || now - since < self.vouch.drift_after_seconds {
            return Look {
                progress,
                drift: None,
                calibration,
            };
        }
        self.reported = true;
        let mut what = Vec::new();
        if rate_out {
            what.push(format!(
                "the rate is {rate:.2} records/s against {:.2} projected ({:.2}-{:.2})",
                p.records_per_second.value, p.records_per_second.low, p.records_per_second.high
            ));
        }
        if length_out {
            what.push(format!(
                "the mean output is {per_record:.0} tokens a record against {:.0} projected \
                 ({:.0}-{:.0})",
                projected_length.value, projected_length.low, projected_length.high
            ));
        }
        let reprojected = left as f64 / rate.max(1e-9) / 3600.0;
        let drift = json!({
            "feasibility": self.vouch.task.to_string(),
            "message": format!(
                "outside the projection for {:.0} s: {}; the rest is now projected at {:.2} h",
                now - since,
                what.join("; "),
                reprojected
            ),
            "for_seconds": now - since,
            "records_per_second": {"actual": rate, "projected": p.records_per_second},
            "output_tokens_per_record": {"actual": per_record, "projected": projected_length},
            "remaining_hours": {"actual_rate": reprojected, "projected": left as f64 / p.records_per_second.value.max(1e-9) / 3600.0},
        });
        Look {
            progress,
            drift: Some(drift),
            calibration,
        }
    }
}

/// The projected against the actual wall time, for the generation's result.
/// The hours re-measurements held the run are the run's wall time but not
/// what was projected: the comparison leaves them out, and says so.
pub fn outcome(vouch: &Vouch, actual_hours: f64, remeasured_hours: f64) -> HeldOutcome {
    let h = vouch.projection.hours;
    let compared = (actual_hours - remeasured_hours).max(0.0);
    HeldOutcome {
        feasibility: vouch.task.to_string(),
        projected_hours: h,
        actual_hours,
        held_for_remeasures_hours: remeasured_hours,
        inside_interval: h.contains(compared),
        error: if h.value > 0.0 {
            compared / h.value - 1.0
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vouch(rate: f64) -> Vouch {
        let e = |v: f64| Estimate {
            value: v,
            low: v * 0.97,
            high: v * 1.03,
        };
        Vouch {
            task: TaskId(1),
            concurrency: 4,
            projection: Projection {
                records: 1000,
                concurrency: 4,
                hours: e(1000.0 / rate / 3600.0),
                records_per_second: e(rate),
                output_tokens: e(100_000.0),
                input_tokens: e(10_000.0),
                bytes: e(1e6),
                cost: None,
                interval: None,
                assumptions: vec![],
            },
            drift_after_seconds: 30.0,
            calibrate_after_seconds: 60.0,
        }
    }

    /// Feeds the watch a run at `rate` (switching to `later` at `switch`),
    /// 100 tokens a record, once a second; returns when it reported a drift.
    fn run(rate: f64, later: f64, switch: f64, seconds: usize) -> Option<f64> {
        let mut w = Watch::new(vouch(10.0));
        let mut answered = 0.0;
        for s in 0..seconds {
            let t = s as f64;
            answered += if t < switch { rate } else { later };
            let a = answered as u64;
            let look = w.look(t, a, a * 100, 1000u64.saturating_sub(a));
            if look.drift.is_some() {
                return Some(t);
            }
        }
        None
    }

    #[test]
    fn a_run_as_projected_does_not_drift() {
        assert_eq!(run(10.0, 10.0, 0.0, 600), None);
        // Inside the slack too.
        assert_eq!(run(9.3, 9.3, 0.0, 600), None);
    }

    #[test]
    fn a_halved_rate_is_reported_once_after_it_lasted() {
        let at = run(10.0, 5.0, 100.0, 600).expect("drift reported");
        // The trailing window must see the new rate, then it must last.
        assert!(at > 130.0 && at < 200.0, "{at}");
        let mut w = Watch::new(vouch(10.0));
        let mut reports = 0;
        for s in 0..600u64 {
            let a = if s < 100 {
                s * 10
            } else {
                1000 + (s - 100) * 5
            };
            reports += usize::from(w.look(s as f64, a, a * 100, 0).drift.is_some());
        }
        assert_eq!(reports, 1);
    }

    #[test]
    fn longer_answers_than_projected_are_drift_too() {
        let mut w = Watch::new(vouch(10.0));
        let drift = (0..600u64).find_map(|s| w.look(s as f64, s * 10, s * 10 * 200, 0).drift);
        let drift = drift.expect("reported");
        assert!(
            drift["message"].as_str().unwrap().contains("mean output"),
            "{drift}"
        );
    }

    #[test]
    fn the_first_minutes_are_calibrated_once() {
        // Projected 10/s, 9.7-10.3; calibrated after 60 s.
        let calibrations = |rate: u64| {
            let mut w = Watch::new(vouch(10.0));
            (0..300u64)
                .filter_map(|s| {
                    let a = s * rate;
                    w.look(s as f64, a, a * 100, 3000u64.saturating_sub(a))
                        .calibration
                })
                .collect::<Vec<_>>()
        };
        let on_track = calibrations(10);
        assert_eq!(on_track.len(), 1, "{on_track:?}");
        assert_eq!(on_track[0]["on_track"], true);
        assert!(on_track[0]["message"]
            .as_str()
            .unwrap()
            .ends_with("on track"));
        let slow = calibrations(8);
        assert_eq!(slow.len(), 1);
        let message = slow[0]["message"].as_str().unwrap();
        assert!(message.contains("20% slower than projected"), "{message}");
        assert!(message.contains("re-projected to end at"), "{message}");
        // Kept in every progress after it.
        let mut w = Watch::new(vouch(10.0));
        let progress = (0..100u64)
            .map(|s| w.look(s as f64, s * 8, s * 800, 1000).progress)
            .last()
            .unwrap();
        assert_eq!(progress["calibration"]["on_track"], false);
    }

    #[test]
    fn a_remeasures_outcome_rebases_the_vouch_at_its_level_only() {
        let v = vouch(10.0);
        let mut found = vouch(5.0).projection;
        found.records = 400;
        let at = |concurrency: usize| {
            let compared = results::Compared::new(1.0, None);
            // As the firing's event keeps it, with the firing's own keys.
            let mut value = serde_json::to_value(Remeasured {
                feasibility: "t1".into(),
                concurrency,
                held_seconds: 1.0,
                drain_seconds: 0.5,
                requests: 40,
                error_rate: 0.0,
                output_tokens_per_second: compared,
                requests_per_second: compared,
                p99_seconds: None,
                left: 400,
                projection: Some(found.clone()),
                message: None,
                notes: vec![],
            })
            .unwrap();
            value["next"] = json!("2026-12-03T10:00:00.000Z");
            value.to_string()
        };
        let rebased = v.rebased(&at(4), 4).expect("same level");
        assert_eq!(rebased.projection.records_per_second.value, 5.0);
        assert_eq!(rebased.task, v.task);
        // A run at its own level, re-measured there.
        let other = at(8);
        assert!(v.rebased(&other, 4).is_none());
        assert_eq!(v.rebased(&other, 8).unwrap().concurrency, 8);
        assert!(v
            .rebased(r#"{"concurrency": 4, "error": "x"}"#, 4)
            .is_none());
    }
}
