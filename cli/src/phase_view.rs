//! What a phase task's result says, for a person: a feasibility sweep as a
//! table with a chart of tokens/s and p99 latency against concurrency, the
//! projection and the verdict; a tokenization's counts and length histogram;
//! an adaptation's or a generation's counts. Pure functions from the result
//! JSON to lines; `None` when the result is not one of these.
use std::fmt::Write as _;

use serde_json::Value;

use crate::safe::escape;

fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn bar(value: f64, max: f64, width: usize) -> String {
    let n = if max > 0.0 {
        ((value / max) * width as f64).round() as usize
    } else {
        0
    };
    "#".repeat(n.min(width))
}

/// `v (low to high, 95%)`, each figure in `unit`'s own form.
fn span(e: &Value, unit: fn(f64) -> String) -> String {
    match (f(&e["value"]), f(&e["low"]), f(&e["high"])) {
        (Some(v), Some(lo), Some(hi)) => {
            format!("{} ({} to {}, 95%)", unit(v), unit(lo), unit(hi))
        }
        _ => "-".into(),
    }
}

use todod_proto::units::{count, size};

/// A pipeline's phase tasks, one line each (and a second for a schedule):
/// state, counts, rate, and for a generation with a feasibility projection,
/// the projection against the live total.
pub fn pipeline(tasks: &[todod_proto::Task]) -> String {
    let mut out = String::from("  phases:\n");
    let projection = tasks
        .iter()
        .rev()
        .filter(|t| t.kind == "feasibility" && t.status == "completed")
        .find_map(|t| serde_json::from_str::<Value>(&t.result_json).ok())
        .map(|r| r["projection"]["hours"].clone());
    for t in tasks {
        let mut parts: Vec<String> = Vec::new();
        let p = t.progress.as_ref();
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
            // A sweep's progress counts levels, not records.
            _ if t.kind == "feasibility" => {}
            _ => {
                if let Some(p) = p.filter(|p| p.done > 0 || p.failed > 0) {
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
                    parts.push(s);
                }
            }
        }
        if t.kind == "feasibility" && t.status == "completed" {
            if let Ok(r) = serde_json::from_str::<Value>(&t.result_json) {
                let h = &r["projection"]["hours"];
                if let (Some(v), Some(lo), Some(hi)) = (f(&h["value"]), f(&h["low"]), f(&h["high"]))
                {
                    parts.push(format!(
                        "go: {} ({} to {}) at concurrency {}",
                        hours(v),
                        hours(lo),
                        hours(hi),
                        r["choice"]["concurrency"]
                    ));
                }
            }
        }
        if t.kind == "generation" && t.status == "in_progress" {
            let detail: Value = p
                .and_then(|p| serde_json::from_str(&p.detail_json).ok())
                .unwrap_or_default();
            if let Some(message) = detail["calibration"]["message"].as_str() {
                parts.push(format!("calibration {}", escape(message)));
            }
            if let (Some(h), Some(p)) = (&projection, p) {
                let elapsed = elapsed_seconds(&t.started_at);
                if let (Some(v), Some(lo), Some(hi), Some(e)) =
                    (f(&h["value"]), f(&h["low"]), f(&h["high"]), elapsed)
                {
                    if p.eta_seconds > 0 {
                        // Minutes re-measurements held the run were not
                        // projected: they are left out of the comparison.
                        let held = serde_json::from_str::<Value>(&p.detail_json)
                            .ok()
                            .and_then(|d| f(&d["held_for_remeasures_seconds"]))
                            .unwrap_or(0.0);
                        let live = ((e - held).max(0.0) + p.eta_seconds as f64) / 3600.0;
                        let verdict = if live > hi {
                            "slower than projected"
                        } else if live < lo {
                            "faster than projected"
                        } else {
                            "on track"
                        };
                        parts.push(format!(
                            "live {} vs projected {}: {verdict}",
                            hours(live),
                            hours(v)
                        ));
                    }
                }
            }
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
        if let Some(s) = &t.schedule {
            let _ = writeln!(out, "         schedule {}", crate::render::schedule_text(s));
        }
    }
    out
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

/// The summary of `result` for a task of `kind`.
pub fn summary(kind: &str, result: &str) -> Option<String> {
    let v: Value = serde_json::from_str(result).ok()?;
    match kind {
        "feasibility" => Some(feasibility(&v)),
        "tokenization" => Some(tokenization(&v)),
        "prompt_adaptation" => Some(adaptation(&v)),
        "generation" => Some(generation(&v)),
        _ => None,
    }
}

fn feasibility(v: &Value) -> String {
    let mut out = String::new();
    let verdict = v["verdict"].as_str().unwrap_or("-");
    let _ = writeln!(out, "  verdict     {}", verdict.to_uppercase());
    for reason in v["reasons"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "    - {}", escape(reason.as_str().unwrap_or("")));
    }
    let chosen = v["choice"]["concurrency"].as_u64();
    if let Some(c) = chosen {
        let why = v["choice"]["why"].as_str().unwrap_or("");
        let _ = writeln!(out, "  chosen      concurrency {c}: {}", escape(why));
    }
    let p = &v["projection"];
    if p.is_object() {
        let _ = writeln!(
            out,
            "  projection  {} records: {}",
            p["records"],
            span(&p["hours"], hours)
        );
        let _ = writeln!(
            out,
            "              {} output tokens, {}",
            span(&p["output_tokens"], count),
            span(&p["bytes"], size)
        );
        if p["cost"].is_object() {
            let _ = writeln!(
                out,
                "              cost {}",
                span(&p["cost"], |c| format!("{c:.2}"))
            );
        }
    }
    let levels = v["levels"].as_array().cloned().unwrap_or_default();
    if !levels.is_empty() {
        let best = levels
            .iter()
            .filter_map(|l| f(&l["output_tokens_per_second"]))
            .fold(0.0, f64::max);
        let slowest = levels
            .iter()
            .filter_map(|l| f(&l["e2e_seconds"]["p99"]))
            .fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "  sweep        conc   req/s   out tok/s  p50 s   p99 s  err%  tok/s {:<12} p99 {:<12}",
            "", ""
        );
        for l in &levels {
            let c = l["concurrency"].as_u64().unwrap_or(0);
            let tps = f(&l["output_tokens_per_second"]).unwrap_or(0.0);
            let p99 = f(&l["e2e_seconds"]["p99"]).unwrap_or(0.0);
            let mark = if Some(c) == chosen { '*' } else { ' ' };
            let _ = writeln!(
                out,
                "             {mark}{c:>4} {:>7.2} {:>11.1} {:>6.2} {:>7.2} {:>5.1}  {:<18} {:<16}",
                f(&l["requests_per_second"]).unwrap_or(0.0),
                tps,
                f(&l["e2e_seconds"]["p50"]).unwrap_or(0.0),
                p99,
                f(&l["error_rate"]).unwrap_or(0.0) * 100.0,
                bar(tps, best, 18),
                bar(p99, slowest, 16),
            );
        }
    }
    if let Some(why) = v["sweep_stopped"].as_str() {
        let _ = writeln!(out, "  stopped     {}", escape(why));
    }
    let between: Vec<String> = v["sweep"]["between"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c.to_string())
        .collect();
    if !between.is_empty() {
        let _ = writeln!(
            out,
            "  between     measured {} around the best",
            between.join(", ")
        );
    }
    if let Some(seconds) = f(&v["sweep"]["seconds"]) {
        let share = f(&v["sweep"]["share_of_run"])
            .map_or(String::new(), |s| format!(", {:.1}% of the run", s * 100.0));
        let _ = writeln!(
            out,
            "  sweep cost  {}{share} (at most {:.0}% of it, at least {})",
            hours(seconds / 3600.0),
            f(&v["sweep"]["max_share"]).unwrap_or(0.0) * 100.0,
            hours(f(&v["sweep"]["min_seconds"]).unwrap_or(0.0) / 3600.0)
        );
    }
    if let Some(method) = p["interval"].as_str() {
        let _ = writeln!(out, "  interval    {}", escape(method));
    }
    let _ = writeln!(
        out,
        "  sample      {} prompts, seed {}",
        v["sample"]["size"], v["sample"]["seed"]
    );
    out
}

fn tokenization(v: &Value) -> String {
    let mut out = String::new();
    let dropped: Vec<String> = v["dropped"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let _ = writeln!(
        out,
        "  records     {} ({} tokens, {} trained on, {} masked)",
        v["records"], v["tokens"], v["trained_tokens"], v["masked_tokens"]
    );
    let _ = writeln!(
        out,
        "  set aside   {} rejected, dropped: {}",
        v["rejected"],
        if dropped.is_empty() {
            "none".into()
        } else {
            dropped.join(", ")
        }
    );
    if v["straddling_tokens"].as_u64().unwrap_or(0) > 0 {
        let _ = writeln!(
            out,
            "  straddling  {} tokens cross the edge of a trained span (not trained on)",
            v["straddling_tokens"]
        );
    }
    let buckets: Vec<(u64, u64)> = v["length_histogram"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| Some((b[0].as_u64()?, b[1].as_u64()?)))
        .collect();
    let most = buckets.iter().map(|b| b.1).max().unwrap_or(0);
    if !buckets.is_empty() {
        let _ = writeln!(
            out,
            "  lengths     (tokens: records; max {})",
            v["max_length"]
        );
        for (k, n) in buckets {
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
    for key in ["bin", "idx", "parquet", "manifest"] {
        if let Some(path) = v[key].as_str() {
            let _ = writeln!(out, "  {key:<11} {}", escape(path));
        }
    }
    out
}

fn adaptation(v: &Value) -> String {
    let mut out = String::new();
    let join = |o: &Value| -> String {
        o.as_object()
            .into_iter()
            .flatten()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        out,
        "  prompts     {} adapted, {} rejected",
        v["records"], v["rejected"]
    );
    let _ = writeln!(out, "  formats     {}", join(&v["formats"]));
    let _ = writeln!(out, "  roles       {}", join(&v["roles"]));
    let _ = writeln!(out, "  system      {}", join(&v["system_prompts"]));
    if v["prompt_tokens"].is_object() {
        let t = &v["prompt_tokens"];
        let _ = writeln!(
            out,
            "  tokens      p50 {} p99 {} max {}",
            t["p50"], t["p99"], t["max"]
        );
    }
    if let Some(sha) = v["template_sha256"].as_str() {
        let _ = writeln!(out, "  template    sha256 {sha}");
    }
    if let Some(path) = v["output"].as_str() {
        let _ = writeln!(out, "  output      {}", escape(path));
    }
    out
}

fn generation(v: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  records     {} written, {} failed, {} rejected, {} ended at length",
        v["records"], v["failed"], v["rejected"], v["length_finishes"]
    );
    let _ = writeln!(
        out,
        "  tokens      {} out, {} in",
        v["tokens"], v["prompt_tokens"]
    );
    let p = &v["projection"];
    if p.is_object() {
        let _ = writeln!(
            out,
            "  projected   {} (feasibility {}); actual {}{}{}",
            span(&p["projected_hours"], hours),
            p["feasibility"].as_str().unwrap_or("-"),
            hours(f(&p["actual_hours"]).unwrap_or(0.0)),
            match f(&p["held_for_remeasures_hours"]) {
                Some(h) if h > 0.0 => format!(" of which {} held for re-measurements", hours(h)),
                _ => String::new(),
            },
            if p["inside_interval"] == Value::Bool(true) {
                ", inside the interval"
            } else {
                ", outside the interval"
            }
        );
    }
    if let Some(path) = v["output"].as_str() {
        let _ = writeln!(out, "  output      {}", escape(path));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_reads_as_a_table_with_its_choice_marked() {
        let result = serde_json::json!({
            "verdict": "no-go", "reasons": ["over the budget of 5 h"],
            "choice": {"concurrency": 4, "why": "the knee"},
            "projection": {"records": 1000, "hours": {"value": 6.9, "low": 6.5, "high": 7.3},
                           "output_tokens": {"value": 1e7, "low": 9e6, "high": 1.1e7},
                           "bytes": {"value": 3e8, "low": 2.9e8, "high": 3.1e8}},
            "levels": [
                {"concurrency": 1, "requests_per_second": 1.0, "output_tokens_per_second": 100.0,
                 "e2e_seconds": {"p50": 1.0, "p99": 1.1}, "error_rate": 0.0},
                {"concurrency": 4, "requests_per_second": 4.0, "output_tokens_per_second": 400.0,
                 "e2e_seconds": {"p50": 1.0, "p99": 1.2}, "error_rate": 0.0},
            ],
            "sample": {"size": 100, "seed": 7},
            "sweep": {"seconds": 150.0, "share_of_run": 0.006, "max_share": 0.02,
                      "min_seconds": 300.0, "between": [6, 12]},
        });
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
        // A short run reads in minutes, not as 0.0 h.
        let mut short = result.clone();
        short["projection"]["hours"] =
            serde_json::json!({"value": 0.04, "low": 0.036, "high": 0.043});
        let text = summary("feasibility", &short.to_string()).unwrap();
        assert!(text.contains("2m24s (2m10s to 2m35s, 95%)"), "{text}");
        assert!(text.lines().any(|l| l.contains("*   4")), "{text}");
        assert!(text.lines().count() < 40);
    }

    #[test]
    fn a_running_generation_shows_its_calibration() {
        let detail = serde_json::json!({
            "calibration": {"message": "after 120 s: 0.8 records/s against 1.0 projected \
                            (0.9-1.1): 20% slower than projected", "on_track": false},
        });
        let task = todod_proto::Task {
            id: "t3".into(),
            kind: "generation".into(),
            status: "in_progress".into(),
            progress: Some(todod_proto::Progress {
                done: 10,
                total: 100,
                detail_json: detail.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let text = pipeline(&[task]);
        assert!(
            text.contains("calibration after 120 s: 0.8 records/s against 1.0 projected"),
            "{text}"
        );
        assert!(text.contains("20% slower than projected"), "{text}");
    }

    #[test]
    fn a_tokenization_shows_its_histogram() {
        let result = serde_json::json!({
            "records": 10, "tokens": 300, "trained_tokens": 100, "masked_tokens": 200,
            "rejected": 1, "dropped": {"length_finish": 2}, "straddling_tokens": 0,
            "length_histogram": [[4, 3], [5, 7]], "max_length": 60,
        });
        let text = summary("tokenization", &result.to_string()).unwrap();
        assert!(text.contains("16-31") && text.contains("32-63"), "{text}");
        assert!(text.contains("2 length_finish"));
    }
}
