//! What a phase task's result says, for a person: a feasibility sweep as a
//! table with a chart of tokens/s and p99 latency against concurrency, the
//! projection and the verdict; a tokenization's counts and length histogram;
//! an adaptation's or a generation's counts. Pure functions from the typed
//! results both ends share (`todod_proto::results`) to lines; a kind this
//! version does not know reads as the daemon's own summary line of it.
use std::fmt::Write as _;

use serde_json::Value;
use todod_proto::readable::{count, size};
use todod_proto::results::{
    self, AdaptationResult, Estimate, FeasibilityResult, GenerationResult, TokenizationResult,
};

use crate::safe::escape;

fn bar(value: f64, max: f64, width: usize) -> String {
    let n = if max > 0.0 {
        ((value / max) * width as f64).round() as usize
    } else {
        0
    };
    "#".repeat(n.min(width))
}

/// `v (low to high, 95%)`, each figure in `unit`'s own form.
fn span(e: &Estimate, unit: fn(f64) -> String) -> String {
    format!(
        "{} ({} to {}, 95%)",
        unit(e.value),
        unit(e.low),
        unit(e.high)
    )
}

/// A pipeline's phase tasks, one line each (and a second for a schedule):
/// state, counts, rate, and for a generation held to a feasibility's
/// projection, the projection against the live total.
pub fn pipeline(tasks: &[todod_proto::Task]) -> String {
    let mut out = String::from("  phases:\n");
    for t in tasks {
        let mut parts: Vec<String> = Vec::new();
        let p = t.progress.as_deref();
        match t.status.as_str() {
            "in_progress" => {
                if let Some(p) = p.and_then(crate::render::progress_text) {
                    parts.push(p);
                }
            }
            "pending" if !t.blocked_by.is_empty() => {
                parts.push(format!("waits for {}", t.blocked_by.join(", ")))
            }
            "failed" => parts.push(escape(t.error.lines().next().unwrap_or("")).into_owned()),
            // What the task's kind makes of its result.
            _ if !t.summary.is_empty() => parts.push(escape(&t.summary).into_owned()),
            _ => {
                if let Some(p) = p.filter(|p| p.done > 0 || p.failed > 0) {
                    parts.push(counts(p));
                }
            }
        }
        if t.status == "in_progress" {
            parts.extend(held_live(t, tasks));
        }
        let _ = writeln!(
            out,
            "    {} {:<4} {:<18} {:<12} {}",
            crate::render::marker(&t.status),
            t.id,
            t.kind,
            t.status,
            parts.join("; ")
        );
        if let Some(lease) = t.lease.as_ref().filter(|_| t.status == "in_progress") {
            let _ = writeln!(out, "         {}", lease_text(lease));
        }
        if t.status == "in_progress" {
            for shard in &t.shards {
                let _ = writeln!(out, "         {}", shard_text(shard));
            }
        }
        if let Some(s) = &t.schedule {
            let _ = writeln!(out, "         schedule {}", crate::render::schedule_text(s));
        }
    }
    out
}

/// Who runs a task and until when: `held by node-3-4121 (attempt 2),
/// lease until 2026-12-05 10:00:30Z (in 24s)`.
pub fn lease_text(lease: &todod_proto::Lease) -> String {
    let (daemon, attempt) = todod_proto::lease::holder_parts(&lease.holder);
    let mut text = format!("held by {}", escape(daemon));
    if !attempt.is_empty() {
        text.push_str(&format!(" (attempt {})", escape(attempt)));
    }
    if !lease.expires_at.is_empty() {
        text.push_str(&format!(
            ", lease until {}",
            crate::render::when(&lease.expires_at)
        ));
    }
    text
}

/// One shard of a running sharded task: `shard 1 of 3: held by node-2-4121
/// (attempt 5), lease until ...`, `done`, or `waiting` (nobody holds it).
pub fn shard_text(shard: &todod_proto::Shard) -> String {
    let state = match (&shard.lease, shard.done) {
        (_, true) => "done".to_string(),
        (Some(lease), false) => lease_text(lease),
        (None, false) => "waiting for a daemon".to_string(),
    };
    format!("shard {} of {}: {state}", shard.index, shard.of)
}

/// A progress's counts: `170 done, 2 failed, ...`.
fn counts(p: &todod_proto::Progress) -> String {
    let mut s = format!("{} done", p.done);
    if p.failed > 0 {
        s.push_str(&format!(", {} failed", p.failed));
    }
    if p.rejected > 0 {
        s.push_str(&format!(", {} rejected", p.rejected));
    }
    // Left out by the spec's own rules: not failures.
    let detail: Value = serde_json::from_str(&p.detail_json).unwrap_or_default();
    for (key, what) in [
        ("dropped", "dropped by the spec"),
        ("not_sampled", "not in the sample"),
    ] {
        if let Some(n) = detail[key].as_u64().filter(|n| *n > 0) {
            s.push_str(&format!(", {n} {what}"));
        }
    }
    s
}

/// A running task held to a feasibility's projection (one it depends on
/// that has one): its calibration, and its live total against the
/// projected band.
fn held_live(t: &todod_proto::Task, tasks: &[todod_proto::Task]) -> Vec<String> {
    let mut parts = Vec::new();
    let Some(p) = t.progress.as_ref() else {
        return parts;
    };
    let detail: Value = serde_json::from_str(&p.detail_json).unwrap_or_default();
    if let Some(message) = detail["calibration"]["message"].as_str() {
        parts.push(format!("calibration {}", escape(message)));
    }
    let projected = tasks
        .iter()
        .filter(|d| t.depends_on.contains(&d.id) && d.status == "completed")
        .filter_map(|d| results::parse::<FeasibilityResult>(&d.result_json))
        .find_map(|r| r.projection.map(|p| p.hours));
    if let (Some(h), Some(elapsed)) = (projected, elapsed_seconds(&t.started_at)) {
        if p.eta_seconds > 0 {
            // Minutes re-measurements held the run were not projected: they
            // are left out of the comparison.
            let held = detail["held_for_remeasures_seconds"]
                .as_f64()
                .unwrap_or(0.0);
            let live = ((elapsed - held).max(0.0) + p.eta_seconds as f64) / 3600.0;
            let verdict = if live > h.high {
                "slower than projected"
            } else if live < h.low {
                "faster than projected"
            } else {
                "on track"
            };
            parts.push(format!(
                "live {} vs projected {}: {verdict}",
                hours(live),
                hours(h.value)
            ));
        }
    }
    parts
}

/// Hours as the CLI writes every duration: `45s`, `3m20s`, `2h05m`.
fn hours(h: f64) -> String {
    crate::render::duration((h * 3600.0).round() as i64)
}

/// Seconds since an RFC 3339 UTC time of the daemon's (`...Z`).
fn elapsed_seconds(rfc3339: &str) -> Option<f64> {
    let at = humantime::parse_rfc3339_weak(rfc3339.trim_end_matches('Z')).ok()?;
    std::time::SystemTime::now()
        .duration_since(at)
        .ok()
        .map(|d| d.as_secs_f64())
}

/// The summary of `result` for a task of `kind`: the kinds this version
/// draws in detail; `None` for the others (and for a result that is not
/// the kind's), which read as the daemon's summary line and the JSON.
pub fn summary(kind: &str, result: &str) -> Option<String> {
    match kind {
        "feasibility" => results::parse(result).map(|r| feasibility(&r)),
        "tokenization" => results::parse(result).map(|r| tokenization(&r)),
        "prompt_adaptation" => results::parse(result).map(|r| adaptation(&r)),
        "generation" => results::parse(result).map(|r| generation(&r)),
        _ => None,
    }
}

fn feasibility(v: &FeasibilityResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "  verdict     {}", v.verdict.to_uppercase());
    for reason in &v.reasons {
        let _ = writeln!(out, "    - {}", escape(reason));
    }
    let chosen = v.choice.as_ref().map(|c| c.concurrency);
    if let Some(c) = &v.choice {
        let _ = writeln!(
            out,
            "  chosen      concurrency {}: {}",
            c.concurrency,
            escape(&c.why)
        );
    }
    if let Some(p) = &v.projection {
        let _ = writeln!(
            out,
            "  projection  {} records: {}",
            p.records,
            span(&p.hours, hours)
        );
        let _ = writeln!(
            out,
            "              {} output tokens, {}",
            span(&p.output_tokens, count),
            span(&p.bytes, size)
        );
        if let Some(cost) = &p.cost {
            let _ = writeln!(
                out,
                "              cost {}",
                span(cost, |c| format!("{c:.2}"))
            );
        }
    }
    if !v.levels.is_empty() {
        let best = v
            .levels
            .iter()
            .map(|l| l.output_tokens_per_second)
            .fold(0.0, f64::max);
        let p99 = |l: &results::LevelFigures| l.e2e_seconds.map_or(0.0, |s| s.p99);
        let slowest = v.levels.iter().map(p99).fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "  sweep        conc   req/s   out tok/s  p50 s   p99 s  err%  tok/s {:<12} p99 {:<12}",
            "", ""
        );
        for l in &v.levels {
            let mark = if Some(l.concurrency) == chosen {
                '*'
            } else {
                ' '
            };
            let _ = writeln!(
                out,
                "             {mark}{:>4} {:>7.2} {:>11.1} {:>6.2} {:>7.2} {:>5.1}  {:<18} {:<16}",
                l.concurrency,
                l.requests_per_second,
                l.output_tokens_per_second,
                l.e2e_seconds.map_or(0.0, |s| s.p50),
                p99(l),
                l.error_rate * 100.0,
                bar(l.output_tokens_per_second, best, 18),
                bar(p99(l), slowest, 16),
            );
        }
    }
    if let Some(again) = &v.confirmation {
        let _ = writeln!(
            out,
            "  confirmed   concurrency {} measured again: {:.1} output tokens/s (projected from this)",
            again.concurrency, again.output_tokens_per_second
        );
    }
    if let Some(why) = &v.sweep_stopped {
        let _ = writeln!(out, "  stopped     {}", escape(why));
    }
    if let Some(sweep) = &v.sweep {
        if !sweep.between.is_empty() {
            let between: Vec<String> = sweep.between.iter().map(|c| c.to_string()).collect();
            let _ = writeln!(
                out,
                "  between     measured {} around the best",
                between.join(", ")
            );
        }
        let share = sweep
            .share_of_run
            .map_or(String::new(), |s| format!(", {:.1}% of the run", s * 100.0));
        let _ = writeln!(
            out,
            "  sweep cost  {}{share} (at most {:.0}% of it, at least {})",
            hours(sweep.seconds / 3600.0),
            sweep.max_share * 100.0,
            hours(sweep.min_seconds / 3600.0)
        );
    }
    if let Some(method) = v.projection.as_ref().and_then(|p| p.interval.as_deref()) {
        let _ = writeln!(out, "  interval    {}", escape(method));
    }
    let _ = writeln!(
        out,
        "  sample      {} prompts, seed {}",
        v.sample.size, v.sample.seed
    );
    out
}

fn tokenization(v: &TokenizationResult) -> String {
    let mut out = String::new();
    let dropped: Vec<String> = v.dropped.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let _ = writeln!(
        out,
        "  records     {} ({} tokens, {} trained on, {} masked)",
        v.records, v.tokens, v.trained_tokens, v.masked_tokens
    );
    let _ = writeln!(
        out,
        "  set aside   {} rejected, dropped: {}",
        v.rejected,
        if dropped.is_empty() {
            "none".into()
        } else {
            dropped.join(", ")
        }
    );
    if let Some(drift) = &v.drift {
        let _ = writeln!(
            out,
            "  drift       {} of {} records train on other ids than their model generated{}",
            drift.differing,
            drift.checked,
            if drift.prompts_checked > 0 {
                format!(
                    "; {} of {} prompts are tokenized otherwise than the server did",
                    drift.prompts_differing, drift.prompts_checked
                )
            } else {
                String::new()
            }
        );
        for e in &drift.examples {
            let _ = writeln!(
                out,
                "              {} differs at position {}: generated {:?}, trained {:?}, from {:?}",
                escape(&e.id),
                e.index,
                e.generated,
                e.trained,
                escape(&e.trained_text)
            );
        }
    }
    if let Some(n) = v.answers_from_generated_ids {
        let _ = writeln!(
            out,
            "  answer ids  the ids their model generated, for {n} of {} records",
            v.records
        );
    }
    if v.straddling_tokens > 0 {
        let _ = writeln!(
            out,
            "  straddling  {} tokens cross the edge of a trained span (not trained on)",
            v.straddling_tokens
        );
    }
    let most = v.length_histogram.iter().map(|b| b.1).max().unwrap_or(0);
    if !v.length_histogram.is_empty() {
        let _ = writeln!(out, "  lengths     (tokens: records; max {})", v.max_length);
        for &(k, n) in &v.length_histogram {
            let (lo, hi) = if k == 0 {
                (0, 1)
            } else {
                (1u64 << k, (1u64 << (k + 1)) - 1)
            };
            let _ = writeln!(
                out,
                "    {:>15} {:>9}  {}",
                format!("{lo}-{hi}"),
                n,
                bar(n as f64, most as f64, 30)
            );
        }
    }
    for (key, path) in [
        ("bin", Some(&v.bin)),
        ("idx", Some(&v.idx)),
        ("parquet", v.parquet.as_ref()),
        ("manifest", Some(&v.manifest)),
    ] {
        if let Some(path) = path {
            let _ = writeln!(out, "  {key:<11} {}", escape(path));
        }
    }
    out
}

fn adaptation(v: &AdaptationResult) -> String {
    let mut out = String::new();
    let join = |o: &std::collections::BTreeMap<String, u64>| -> String {
        o.iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        out,
        "  prompts     {} adapted, {} rejected",
        v.records, v.rejected
    );
    let _ = writeln!(out, "  formats     {}", join(&v.formats));
    let _ = writeln!(out, "  roles       {}", join(&v.roles));
    let s = &v.system_prompts;
    let _ = writeln!(
        out,
        "  system      kept {}, dropped {}, folded {}, replaced {}",
        s.kept, s.dropped, s.folded, s.replaced
    );
    if let Some(t) = &v.prompt_tokens {
        let n = |x: Option<u64>| x.map_or("-".into(), |x| x.to_string());
        let _ = writeln!(
            out,
            "  tokens      p50 {} p99 {} max {}",
            n(t.p50),
            n(t.p99),
            n(t.max)
        );
    }
    if let Some(sha) = &v.template_sha256 {
        let _ = writeln!(out, "  template    sha256 {sha}");
    }
    let _ = writeln!(out, "  output      {}", escape(&v.output));
    out
}

fn generation(v: &GenerationResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  records     {} written, {} failed, {} rejected, {} ended at length",
        v.records, v.failed, v.rejected, v.length_finishes
    );
    let _ = writeln!(
        out,
        "  tokens      {} out, {} in",
        v.tokens, v.prompt_tokens
    );
    if !v.failures_by_class.is_empty() {
        let classes: Vec<String> = v
            .failures_by_class
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        let _ = writeln!(out, "  failures    {}", classes.join(", "));
    }
    if let Some(requests) = &v.requests {
        let _ = writeln!(out, "  requests    {}", requests.describe());
    }
    if let Some(kept) = &v.token_ids {
        let asked: Vec<String> = kept
            .endpoints
            .iter()
            .map(|(url, how)| format!("{}: {}", escape(url), escape(how)))
            .collect();
        let _ = writeln!(
            out,
            "  token ids   {} of {} records kept the ids their model generated ({} with the prompt's \
             count and hash{}); {}",
            kept.records_with_ids,
            v.records,
            kept.with_prompt_hash,
            if kept.incomplete > 0 {
                format!(", {} returned incomplete and not kept", kept.incomplete)
            } else {
                String::new()
            },
            asked.join("; ")
        );
    }
    if let Some(p) = &v.projection {
        let _ = writeln!(
            out,
            "  projected   {} (feasibility {}); actual {}{}{}",
            span(&p.projected_hours, hours),
            escape(&p.feasibility),
            hours(p.actual_hours),
            if p.held_for_remeasures_hours > 0.0 {
                format!(
                    " of which {} held for re-measurements",
                    hours(p.held_for_remeasures_hours)
                )
            } else {
                String::new()
            },
            if p.inside_interval {
                ", inside the interval"
            } else {
                ", outside the interval"
            }
        );
    }
    let _ = writeln!(out, "  output      {}", escape(&v.output));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lease_names_the_daemon_and_attempt_and_escapes_them() {
        let lease = todod_proto::Lease {
            holder: "node-3.cluster-4121-18a2b3c4d5e6f.2".into(),
            expires_at: "2026-12-05T10:00:30Z".into(),
        };
        let text = lease_text(&lease);
        assert!(
            text.starts_with(
                "held by node-3.cluster-4121 (attempt 2), lease until 2026-12-05 10:00:30Z ("
            ),
            "{text}"
        );
        let hostile = todod_proto::Lease {
            holder: "evil\u{1b}[2J-1-2.3".into(),
            expires_at: String::new(),
        };
        assert_eq!(lease_text(&hostile), "held by evil\\u{1b}[2J-1 (attempt 3)");
        let shard = todod_proto::Shard {
            index: 1,
            of: 3,
            lease: Some(hostile.clone()),
            done: false,
        };
        assert_eq!(
            shard_text(&shard),
            "shard 1 of 3: held by evil\\u{1b}[2J-1 (attempt 3)"
        );
        let done = todod_proto::Shard {
            done: true,
            ..shard.clone()
        };
        assert_eq!(shard_text(&done), "shard 1 of 3: done");
        let waiting = todod_proto::Shard {
            lease: None,
            ..shard
        };
        assert_eq!(shard_text(&waiting), "shard 1 of 3: waiting for a daemon");
    }

    fn estimate(v: f64, lo: f64, hi: f64) -> Value {
        json!({"value": v, "low": lo, "high": hi})
    }

    fn level(c: u64, rps: f64, tps: f64, p99: f64) -> Value {
        json!({"concurrency": c, "requests": 10, "requests_per_second": rps,
            "output_tokens_per_second": tps, "input_tokens_per_second": 1.0,
            "observed_requests_per_second": rps, "observed_output_tokens_per_second": tps,
            "error_rate": 0.0, "error_classes": {},
            "e2e_seconds": {"p50": 1.0, "p90": p99, "p99": p99, "mean": 1.0},
            "ttft_seconds": null, "itl_seconds": null, "output_tokens": null,
            "length_finish_share": 0.0, "reasoning_tokens_mean": null, "bytes_per_record": 1.0})
    }

    fn sweep() -> Value {
        json!({
            "records": 1000, "usable_prompts": 1000, "prompts": "/p", "model": "m",
            "endpoints": ["http://e"], "warmup": {"requests_per_endpoint": 2, "max_tokens": 8},
            "sweep_stopped": null, "drift_after_seconds": 180.0, "calibrate_after_seconds": 120.0,
            "verdict": "no-go", "reasons": ["over the budget of 5 h"],
            "choice": {"concurrency": 4, "why": "the knee"},
            "projection": {"records": 1000, "concurrency": 4,
                           "hours": estimate(6.9, 6.5, 7.3),
                           "records_per_second": estimate(0.04, 0.038, 0.043),
                           "output_tokens": estimate(1e7, 9e6, 1.1e7),
                           "input_tokens": estimate(1e6, 9e5, 1.1e6),
                           "bytes": estimate(3e8, 2.9e8, 3.1e8), "cost": null, "assumptions": []},
            "levels": [level(1, 1.0, 100.0, 1.1), level(4, 4.0, 400.0, 1.2)],
            "sample": {"size": 100, "seed": 7},
            "sweep": {"seconds": 150.0, "levels": 2, "projected_run_seconds": 24840.0,
                      "share_of_run": 0.006, "max_share": 0.02, "min_seconds": 300.0,
                      "between": [6, 12], "allowed_seconds": 500.0, "cut_short": null},
        })
    }

    #[test]
    fn a_sweep_reads_as_a_table_with_its_choice_marked() {
        let result = sweep();
        let text = summary("feasibility", &result.to_string()).unwrap();
        assert!(text.contains("NO-GO") && text.contains("over the budget"));
        assert!(text.contains("measured 6, 12 around the best"), "{text}");
        assert!(
            text.contains("sweep cost  2m30s, 0.6% of the run (at most 2% of it, at least 5m00s)"),
            "{text}"
        );
        assert!(text.contains("6h54m (6h30m to 7h18m, 95%)"), "{text}");
        assert!(
            text.contains("10.00M (9.00M to 11.00M, 95%) output tokens"),
            "{text}"
        );
        assert!(text.contains("300.0 MB"), "{text}");
        assert!(!text.contains("confirmed"), "{text}");
        let mut confirmed = result.clone();
        confirmed["confirmation"] = level(4, 3.6, 360.0, 1.2);
        let text = summary("feasibility", &confirmed.to_string()).unwrap();
        assert!(
            text.contains("concurrency 4 measured again: 360.0 output tokens/s"),
            "{text}"
        );
        // A short run reads in minutes, not as 0.0 h.
        let mut short = result.clone();
        short["projection"]["hours"] = estimate(0.04, 0.036, 0.043);
        let text = summary("feasibility", &short.to_string()).unwrap();
        assert!(text.contains("2m24s (2m10s to 2m35s, 95%)"), "{text}");
        assert!(text.lines().any(|l| l.contains("*   4")), "{text}");
        assert!(text.lines().count() < 40);
        // Not a sweep's result: left to the daemon's summary and the JSON.
        assert!(summary("feasibility", r#"{"verdict": "go"}"#).is_none());
        assert!(summary("filter", &result.to_string()).is_none());
    }

    #[test]
    fn a_running_generation_shows_its_calibration_and_its_band() {
        let detail = json!({
            "calibration": {"message": "after 120 s: 0.8 records/s against 1.0 projected \
                            (0.9-1.1): 20% slower than projected", "on_track": false},
        });
        let task = todod_proto::Task {
            id: "t3".into(),
            kind: "generation".into(),
            status: "in_progress".into(),
            depends_on: vec!["t2".into()],
            started_at: "2020-01-01T00:00:00Z".into(),
            progress: Some(Box::new(todod_proto::Progress {
                done: 10,
                total: 100,
                eta_seconds: 60,
                detail_json: detail.to_string(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let feasibility = todod_proto::Task {
            id: "t2".into(),
            kind: "feasibility".into(),
            status: "completed".into(),
            result_json: sweep().to_string(),
            summary: "no-go".into(),
            ..Default::default()
        };
        let text = pipeline(&[feasibility, task]);
        assert!(
            text.contains("calibration after 120 s: 0.8 records/s against 1.0 projected"),
            "{text}"
        );
        assert!(text.contains("20% slower than projected"), "{text}");
        // Years into a 7-hour run: far slower than the band.
        assert!(
            text.contains("vs projected 6h54m: slower than projected"),
            "{text}"
        );
        assert!(
            text.contains("t2   feasibility        completed    no-go"),
            "{text}"
        );
    }

    #[test]
    fn a_tokenization_shows_its_histogram() {
        let result = json!({
            "records": 10, "tokens": 300, "trained_tokens": 100, "masked_tokens": 200,
            "rejected": 1, "dropped": {"length_finish": 2}, "straddling_tokens": 0,
            "length_histogram": [[4, 3], [5, 7]], "max_length": 60,
            "bin": "/o/train.bin", "idx": "/o/train.idx", "manifest": "/o/train.json",
            "rejects": "/o/train.rejects.jsonl",
        });
        let text = summary("tokenization", &result.to_string()).unwrap();
        assert!(text.contains("16-31") && text.contains("32-63"), "{text}");
        assert!(text.contains("2 length_finish"));
        assert!(!text.contains("drift"), "{text}");
    }

    #[test]
    fn the_drift_and_the_kept_ids_are_shown() {
        let result = json!({
            "records": 10, "tokens": 300, "trained_tokens": 100, "masked_tokens": 200,
            "rejected": 0, "dropped": {}, "straddling_tokens": 0,
            "length_histogram": [[5, 10]], "max_length": 60,
            "bin": "/o/t.bin", "idx": "/o/t.idx", "manifest": "/o/t.json",
            "rejects": "/o/t.rejects.jsonl", "answers_from_generated_ids": 9,
            "drift": {"checked": 9, "differing": 2, "prompts_checked": 0, "prompts_differing": 0,
                "examples": [{"id": "q1\u{1b}[2J", "index": 4, "generated": [1, 2], "trained": [1, 3],
                    "trained_text": " Tokyo"}]},
        });
        let text = summary("tokenization", &result.to_string()).unwrap();
        assert!(text.contains("2 of 9 records train on other ids"), "{text}");
        assert!(
            text.contains(
                "differs at position 4: generated [1, 2], trained [1, 3], from \" Tokyo\""
            ),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'), "a record's id is escaped: {text}");
        assert!(text.contains("for 9 of 10 records"), "{text}");
        let generation = json!({"records": 3, "failed": 0, "rejected": 0, "tokens": 30,
            "passes": 1, "output": "/o/c.jsonl", "failures": "/o/f", "rejects": "/o/r",
            "token_ids": {"records_with_ids": 3, "with_prompt_hash": 0, "incomplete": 0,
                "endpoints": {"http://h:8080": "llamacpp: asked"}}});
        let text = summary("generation", &generation.to_string()).unwrap();
        assert!(
            text.contains("3 of 3 records kept the ids their model generated (0 with the prompt's count and hash); http://h:8080: llamacpp: asked"),
            "{text}"
        );
    }
}
