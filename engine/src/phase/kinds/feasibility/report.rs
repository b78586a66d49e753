//! The readable report of a feasibility result: one self-contained HTML file
//! (no scripts, no external assets) with the verdict, the projection with
//! its interval, the sweep as a table and two charts (output tokens/s and
//! p99 latency against concurrency). It is made from the result JSON alone,
//! so that it says exactly what the task's result says, byte for byte the
//! same for the same result.
use std::io::Write;
use std::path::Path;

use crate::phase::files::{self, Fs};

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn fmt(value: Option<f64>, digits: usize) -> String {
    value.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// A line chart of `points` (x, y), x on a log2 axis.
fn chart(title: &str, unit: &str, points: &[(f64, f64)], chosen: Option<f64>) -> String {
    const W: f64 = 420.0;
    const H: f64 = 220.0;
    const PAD: f64 = 44.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{t}\">\
         <text x=\"{PAD}\" y=\"16\" font-size=\"13\">{t} ({u})</text>",
        t = escape(title),
        u = escape(unit)
    );
    if points.is_empty() {
        svg.push_str("<text x=\"50\" y=\"110\">no data</text></svg>");
        return svg;
    }
    let lx = |x: f64| x.max(1.0).log2();
    let (x0, x1) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
        (a.min(lx(p.0)), b.max(lx(p.0)))
    });
    let y1 = points.iter().map(|p| p.1).fold(0.0_f64, f64::max).max(1e-9) * 1.1;
    let span = (x1 - x0).max(1.0);
    let px = |x: f64| PAD + (lx(x) - x0) / span * (W - 2.0 * PAD);
    let py = |y: f64| H - PAD + 10.0 - y / y1 * (H - 2.0 * PAD);
    svg.push_str(&format!(
        "<line x1=\"{PAD}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#888\"/>\
         <line x1=\"{PAD}\" y1=\"{top}\" x2=\"{PAD}\" y2=\"{b}\" stroke=\"#888\"/>\
         <text x=\"4\" y=\"{top2}\" font-size=\"10\">{max}</text>\
         <text x=\"4\" y=\"{b}\" font-size=\"10\">0</text>",
        b = py(0.0),
        r = W - PAD,
        top = py(y1),
        top2 = py(y1) + 10.0,
        max = significant(y1 / 1.1, 3),
    ));
    let path: Vec<String> = points
        .iter()
        .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
        .collect();
    svg.push_str(&format!(
        "<polyline fill=\"none\" stroke=\"#2563eb\" stroke-width=\"2\" points=\"{}\"/>",
        path.join(" ")
    ));
    for &(x, y) in points {
        let fill = if Some(x) == chosen {
            "#dc2626"
        } else {
            "#2563eb"
        };
        svg.push_str(&format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{fill}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">{x}</text>",
            px(x),
            py(y),
            px(x),
            py(0.0) + 14.0
        ));
    }
    svg.push_str("</svg>");
    svg
}

use todod_proto::results::{Estimate, FeasibilityResult, HeldOutcome, ServerSummary};
use todod_proto::readable::{count, duration, significant, size, words};

/// The task a report is of, and its plan: the report links back to the
/// plan's status page.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    pub task: &'a str,
    pub plan: &'a str,
}

/// A plan's name as a URL path segment.
fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// An estimate as `v (lo–hi, 95%)` in `show`'s units.
fn estimate_with(e: Option<&Estimate>, show: impl Fn(f64) -> String) -> String {
    match e {
        Some(e) => format!("{} ({}–{}, 95%)", show(e.value), show(e.low), show(e.high)),
        None => "-".into(),
    }
}

/// A level's server figures, `running / queued / KV max`, or "-" for a
/// server without `/metrics`.
fn server_figures(server: Option<&ServerSummary>) -> String {
    let Some(server) = server else {
        return "-".into();
    };
    format!(
        "{} / {} / {}",
        fmt(server.running, 1),
        fmt(server.waiting, 1),
        fmt(server.max_kv_cache_usage.map(|v| v * 100.0), 0) + "%"
    )
}

/// How a generation held to this feasibility's projection went: the
/// generation's task id and its result's `projection`.
pub type Outcome<'a> = (&'a str, &'a HeldOutcome);

/// The actual wall time of each run against the projected band: a line of
/// text and a strip with the band, the projected value and the actual.
fn outcomes(runs: &[Outcome]) -> String {
    let mut out = String::new();
    for (task, o) in runs {
        let h = &o.projected_hours;
        let held = o.held_for_remeasures_hours;
        // What is compared: the run's time less its holds.
        let compared = o.compared_hours();
        let secs = |hours: f64| duration((hours * 3600.0).round() as i64);
        let error = if h.value > 0.0 {
            compared / h.value - 1.0
        } else {
            0.0
        };
        if out.is_empty() {
            out.push_str("<h2>How the generation went</h2>");
        }
        out.push_str(&format!(
            "<p class=\"actual\">Generation {} took <b>{}</b>{} against {} projected \
             ({}–{}, 95%): {:.1} % {} than projected, <b>{}</b> the band.</p>",
            escape(task),
            secs(compared),
            if held > 0.0 {
                format!(" (and {} held for re-measurements)", secs(held))
            } else {
                String::new()
            },
            secs(h.value),
            secs(h.low),
            secs(h.high),
            error.abs() * 100.0,
            if error > 0.0 { "slower" } else { "faster" },
            if h.contains(compared) {
                "inside"
            } else {
                "outside"
            },
        ));
        out.push_str(&band_strip(h, compared, &secs));
    }
    out
}

/// A horizontal strip: the projected band (filled), its value (dashed) and
/// the actual (a diamond), on one time axis.
fn band_strip(h: &Estimate, actual: f64, show: &dyn Fn(f64) -> String) -> String {
    const W: f64 = 420.0;
    const H: f64 = 64.0;
    const PAD: f64 = 24.0;
    let (lo, v, hi) = (h.low, h.value, h.high);
    let (a, b) = (lo.min(actual) * 0.9, hi.max(actual) * 1.1);
    let span = (b - a).max(1e-12);
    let x = |t: f64| PAD + (t - a) / span * (W - 2.0 * PAD);
    format!(
        "<svg class=\"band\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"actual {act} against projected {val} \
         ({low} to {high})\"><rect x=\"{x0:.1}\" y=\"14\" width=\"{w:.1}\" height=\"22\" \
         fill=\"#E69F00\" fill-opacity=\"0.35\"/><line x1=\"{xv:.1}\" x2=\"{xv:.1}\" y1=\"10\" \
         y2=\"40\" stroke=\"#E69F00\" stroke-width=\"2\" stroke-dasharray=\"4 3\"/>\
         <path d=\"M{xa:.1} 15 l7 10 l-7 10 l-7 -10 z\" fill=\"#0072B2\"/>\
         <text x=\"{xa:.1}\" y=\"56\" font-size=\"11\" text-anchor=\"middle\">actual {act}</text>\
         <text x=\"{x0:.1}\" y=\"10\" font-size=\"10\">{low}</text>\
         <text x=\"{x1:.1}\" y=\"10\" font-size=\"10\" text-anchor=\"end\">{high}</text></svg>",
        act = show(actual),
        val = show(v),
        low = show(lo),
        high = show(hi),
        x0 = x(lo),
        x1 = x(hi),
        w = (x(hi) - x(lo)).max(1.0),
        xv = x(v),
        xa = x(actual),
    )
}

/// The report of `result`.
pub fn html(result: &FeasibilityResult, origin: Origin) -> String {
    html_with_runs(result, origin, &[])
}

/// The report of `result`, with how the generations held to it went.
pub fn html_with_runs(result: &FeasibilityResult, origin: Origin, runs: &[Outcome]) -> String {
    let chosen = result.choice.as_ref().map(|c| c.concurrency);
    let mut out = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>todod feasibility</title>\
         <style>body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}\
         table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td{white-space:nowrap}\
         .scroll{overflow-x:auto;max-width:100%}svg{max-width:100%;height:auto}\
         .go{color:#15803d}.nogo{color:#b91c1c}tr.chosen{background:#fef3c7}</style></head><body>",
    );
    out.push_str(&format!(
        "<h1>Feasibility: <span class=\"{}\">{}</span></h1>",
        if result.is_go() { "go" } else { "nogo" },
        escape(&result.verdict)
    ));
    out.push_str(&format!(
        "<p class=\"origin\">Task {} of plan <a href=\"/plans/{}\">{}</a> \
         (<code>todoctl status {}</code>).</p>",
        escape(origin.task),
        escape(&path_segment(origin.plan)),
        escape(origin.plan),
        escape(origin.plan),
    ));
    out.push_str(&format!(
        "<p>Model {} at {}; prompts {} ({} usable, sample of {} with seed {}).</p>",
        escape(&result.model),
        escape(&words(&result.endpoints)),
        escape(&result.prompts),
        result.usable_prompts,
        result.sample.size,
        result.sample.seed,
    ));
    if !result.reasons.is_empty() {
        out.push_str("<ul>");
        for reason in &result.reasons {
            out.push_str(&format!("<li>{}</li>", escape(reason)));
        }
        out.push_str("</ul>");
    }
    if let Some(p) = &result.projection {
        out.push_str(&format!(
            "<h2>Projection for {} records at concurrency {}</h2><table>\
             <tr><th>wall time</th><td>{}</td></tr>\
             <tr><th>records/s</th><td>{}</td></tr>\
             <tr><th>output tokens</th><td>{}</td></tr>\
             <tr><th>input tokens</th><td>{}</td></tr>\
             <tr><th>output size</th><td>{}</td></tr>",
            p.records,
            p.concurrency,
            estimate_with(Some(&p.hours), |h| duration((h * 3600.0).round() as i64)),
            estimate_with(Some(&p.records_per_second), |v| format!("{v:.2}")),
            estimate_with(Some(&p.output_tokens), count),
            estimate_with(Some(&p.input_tokens), count),
            estimate_with(Some(&p.bytes), size),
        ));
        if p.cost.is_some() {
            out.push_str(&format!(
                "<tr><th>cost</th><td>{}</td></tr>",
                estimate_with(p.cost.as_ref(), |v| format!("{v:.2}"))
            ));
        }
        out.push_str("</table><p>Assumes:</p><ul>");
        for a in &p.assumptions {
            out.push_str(&format!("<li>{}</li>", escape(a)));
        }
        out.push_str("</ul>");
    }
    out.push_str(&outcomes(runs));
    if let Some(choice) = &result.choice {
        out.push_str(&format!(
            "<p>Chosen: concurrency {}, {}.</p>",
            choice.concurrency,
            escape(&choice.why)
        ));
    }
    if let Some(again) = &result.confirmation {
        let first = result
            .levels
            .iter()
            .find(|l| l.concurrency == again.concurrency);
        let cache = match (first.and_then(|l| l.cached_input_share), again.cached_input_share) {
            (Some(seen), Some(new)) => format!(
                " The server took {:.0} % of these prompts' tokens from its prefix cache, and \
                 {:.0} % of the sweep's, which every level asked again.",
                new * 100.0,
                seen * 100.0
            ),
            _ => String::new(),
        };
        out.push_str(&format!(
            "<p>Measured again to confirm: {:.1} output tokens/s at concurrency {} (the sweep \
             measured {:.1}), on the sampled prompts after those the levels asked, as the run \
             asks each prompt once; \
             the projection is made from this second window, which was not chosen for being \
             high.{cache}</p>",
            again.output_tokens_per_second,
            again.concurrency,
            first.map_or(0.0, |l| l.output_tokens_per_second)
        ));
    }
    let tps: Vec<(f64, f64)> = result
        .levels
        .iter()
        .map(|l| (l.concurrency as f64, l.output_tokens_per_second))
        .collect();
    let p99: Vec<(f64, f64)> = result
        .levels
        .iter()
        .filter_map(|l| Some((l.concurrency as f64, l.e2e_seconds?.p99)))
        .collect();
    let chosen_x = chosen.map(|c| c as f64);
    out.push_str("<h2>Sweep</h2><div>");
    out.push_str(&chart("output tokens/s", "by concurrency", &tps, chosen_x));
    out.push_str(&chart("p99 latency", "s, by concurrency", &p99, chosen_x));
    out.push_str(
        "</div><div class=\"scroll\"><table><tr><th>concurrency</th><th>requests</th><th>req/s</th><th>out tok/s</th>\
         <th>in tok/s</th><th>TTFT p50</th><th>ITL p50</th><th>e2e p50</th><th>e2e p90</th>\
         <th>e2e p99</th><th>out len p50</th><th>out len p99</th><th>at length</th>\
         <th>errors</th><th>bytes/rec</th><th>prompt cached</th>\
         <th>server: running / queued / KV max</th>\
         <th>limited by</th></tr>",
    );
    for l in &result.levels {
        let row_class = if Some(l.concurrency) == chosen {
            " class=\"chosen\""
        } else {
            ""
        };
        out.push_str(&format!(
            "<tr{row_class}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}%</td>\
             <td>{}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            l.concurrency,
            l.requests,
            fmt(Some(l.requests_per_second), 2),
            fmt(Some(l.output_tokens_per_second), 1),
            fmt(Some(l.input_tokens_per_second), 1),
            fmt(l.ttft_seconds.map(|s| s.p50), 3),
            fmt(l.itl_seconds.map(|s| s.p50 * 1000.0), 1) + " ms",
            fmt(l.e2e_seconds.map(|s| s.p50), 2),
            fmt(l.e2e_seconds.map(|s| s.p90), 2),
            fmt(l.e2e_seconds.map(|s| s.p99), 2),
            fmt(l.output_tokens.map(|s| s.p50), 0),
            fmt(l.output_tokens.map(|s| s.p99), 0),
            fmt(Some(l.length_finish_share * 100.0), 1),
            fmt(Some(l.error_rate * 100.0), 1),
            fmt(Some(l.bytes_per_record), 0),
            l.cached_input_share
                .map_or("-".to_string(), |s| format!("{:.0}%", s * 100.0)),
            server_figures(l.server.as_ref()),
            escape(l.limited_by.as_deref().unwrap_or("-")),
        ));
    }
    out.push_str("</table></div>");
    if let Some(why) = &result.sweep_stopped {
        out.push_str(&format!("<p>The sweep stopped: {}.</p>", escape(why)));
    }
    out.push_str("</body></html>\n");
    out
}

/// Writes the report at `path` through the staging file: it appears whole or
/// not at all.
/// Writes one of the phase's files (`what`: "report", "result file"),
/// staged and published whole.
pub fn write(
    fs: &dyn Fs,
    what: &str,
    path: &Path,
    bytes: &[u8],
    replace: bool,
) -> Result<(), String> {
    let fail = |e: std::io::Error| {
        format!(
            "cannot write the {what} {}: {}",
            path.display(),
            crate::phase::spec::plain_io(&e)
        )
    };
    let mut staged = files::stage(fs, path).map_err(fail)?;
    staged.write_all(bytes).map_err(fail)?;
    staged.finish().map_err(fail)?;
    files::publish(fs, path, replace).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const ORIGIN: Origin = Origin {
        task: "t2",
        plan: "data gen",
    };

    #[test]
    fn the_report_says_whose_it_is_and_its_figures_in_words() {
        let r = result(json!({
            "endpoints": ["http://a:8000", "http://b:8000", "http://c:8000"],
            "prompts": "/data/prompts.jsonl",
            "levels": [level(1, 273.615, 1.0), level(2, 200.0, 1.5)],
        }));
        let page = html(&r, ORIGIN);
        assert!(
            page.contains(
                "Task t2 of plan <a href=\"/plans/data%20gen\">data gen</a> \
                 (<code>todoctl status data gen</code>)."
            ),
            "{page}"
        );
        assert!(
            page.contains("at http://a:8000, http://b:8000 and http://c:8000; prompts /data/prompts.jsonl ("),
            "{page}"
        );
        // The axis's top label to three significant figures.
        assert!(page.contains(">274</text>") && !page.contains("273.615"), "{page}");
    }

    /// A result with every required field, `over` laid on top.
    fn result(over: Value) -> FeasibilityResult {
        let mut base = json!({
            "records": 500, "usable_prompts": 500, "prompts": "p.jsonl", "model": "m",
            "endpoints": ["http://e"], "sample": {"size": 100, "seed": 1},
            "warmup": {"requests_per_endpoint": 2, "max_tokens": 8}, "levels": [],
            "sweep_stopped": null, "drift_after_seconds": 180.0,
            "calibrate_after_seconds": 120.0, "verdict": "go", "reasons": [],
        });
        for (k, v) in over.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn level(c: usize, tps: f64, p99: f64) -> Value {
        json!({"concurrency": c, "requests": 10, "requests_per_second": 1.0,
            "output_tokens_per_second": tps, "input_tokens_per_second": 1.0,
            "observed_requests_per_second": 1.0, "observed_output_tokens_per_second": tps,
            "error_rate": 0.0, "error_classes": {},
            "e2e_seconds": {"p50": p99 / 2.0, "p90": p99, "p99": p99, "mean": p99 / 2.0},
            "ttft_seconds": null, "itl_seconds": null, "output_tokens": null,
            "length_finish_share": 0.0, "reasoning_tokens_mean": null, "bytes_per_record": 100.0})
    }

    #[test]
    fn the_report_escapes_what_it_shows_and_marks_the_choice() {
        let r = result(json!({
            "verdict": "no-go", "model": "<b>m</b>", "reasons": ["over <budget>"],
            "choice": {"concurrency": 4, "why": "knee"},
            "levels": [level(1, 10.0, 1.0), level(4, 38.0, 1.2)],
        }));
        let page = html(&r, ORIGIN);
        assert!(page.contains("&lt;b&gt;m&lt;/b&gt;") && !page.contains("<b>m</b>"));
        assert!(page.contains("over &lt;budget&gt;"));
        assert!(page.contains("class=\"chosen\""));
        assert_eq!(page.matches("<svg").count(), 2);
        assert_eq!(page, html(&r, ORIGIN), "the same result, the same bytes");
    }

    fn projection() -> Value {
        let e = |v: f64, lo: f64, hi: f64| json!({"value": v, "low": lo, "high": hi});
        json!({
            "records": 500, "concurrency": 8,
            "hours": e(2.0 / 60.0, 1.7 / 60.0, 2.3 / 60.0),
            "records_per_second": e(4.0, 3.5, 4.5),
            "output_tokens": e(1e5, 9e4, 1.1e5), "input_tokens": e(1e4, 9e3, 1.1e4),
            "bytes": e(2.5e6, 2.0e6, 3.0e6), "cost": null, "assumptions": [],
        })
    }

    #[test]
    fn figures_read_in_units_a_person_uses() {
        // A two-minute run reads as minutes and megabytes, not 0.0 h and
        // 0.000 GB; the server's figures and what limited a level show.
        let mut l = level(8, 100.0, 2.0);
        l["server"] = json!({"samples": 5, "running": 7.9, "waiting": 3.0,
                             "max_kv_cache_usage": 0.42});
        l["limited_by"] = json!("requests <queued>");
        let page = html(&result(json!({"projection": projection(), "levels": [l]})), ORIGIN);
        assert!(page.contains("2m00s (1m42s–2m18s, 95%)"), "{page}");
        assert!(page.contains("2.5 MB (2.0 MB–3.0 MB, 95%)"), "{page}");
        assert!(page.contains("7.9 / 3.0 / 42%"), "{page}");
        assert!(page.contains("requests &lt;queued&gt;"), "{page}");
        assert!(page.contains("class=\"scroll\""));
    }

    #[test]
    fn a_run_held_to_the_projection_is_shown_against_its_band() {
        let r = result(json!({"projection": projection()}));
        let band = Estimate {
            value: 0.08,
            low: 0.07,
            high: 0.09,
        };
        let outcome = HeldOutcome {
            feasibility: "t2".into(),
            projected_hours: band,
            actual_hours: 0.075,
            held_for_remeasures_hours: 0.0,
            inside_interval: true,
            error: -0.0625,
        };
        let page = html_with_runs(&r, ORIGIN, &[("t3", &outcome)]);
        assert!(
            page.contains("Generation t3 took <b>4m30s</b> against 4m48s projected (4m12s–5m24s, 95%): 6.2 % faster than projected, <b>inside</b> the band."),
            "{page}"
        );
        assert!(page.contains("class=\"band\""));
        // A run that took longer than the band, with a hold left out.
        let slow = HeldOutcome {
            actual_hours: 0.2,
            held_for_remeasures_hours: 0.1,
            ..outcome
        };
        let page = html_with_runs(&r, ORIGIN, &[("<t9>", &slow)]);
        assert!(
            page.contains(
                "Generation &lt;t9&gt; took <b>6m00s</b> (and 6m00s held for re-measurements)"
            ),
            "{page}"
        );
        assert!(
            page.contains("25.0 % slower than projected, <b>outside</b> the band"),
            "{page}"
        );
        assert!(!html(&r, ORIGIN).contains("How the generation went"));
    }
}
