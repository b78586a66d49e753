//! The page's HTML, rendered on the server with maud, which escapes every
//! value it splices in: task contents, errors, plan titles and anything
//! else a client wrote reach the page as text, never as markup. The live
//! part (`<main id="live">`) is also what each server-sent event carries.
use maud::{html, Markup, DOCTYPE};
use std::collections::BTreeMap;

use serde_json::Value;
use todod_proto::readable::{count, duration};

use super::chart::{self, Band};
use super::series::rate_over;
use super::view::{Overview, PhaseDetail, PlanPage};
use crate::proto::results::{Estimate, HeldOutcome, ProgressCounts};
use todod_domain::time::rfc3339;
use todod_domain::{Status, TaskId};
use todod_store::TaskView;

/// A whole page around its live part.
pub fn page(title: &str, events_url: &str, live: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · todod" }
                link rel="stylesheet" href="/page.css";
                script src="/page.js" defer {}
            }
            body {
                header {
                    a href="/" class="home" { "todod" }
                    span id="conn" class="conn" { "loading" }
                }
                main id="live" data-events=(events_url) { (live) }
            }
        }
    }
    .into_string()
}

/// A status as a word and a mark, so it reads without its colour.
fn status(status: Status) -> Markup {
    let (mark, word) = match status {
        Status::Pending => ("○", "pending"),
        Status::InProgress => ("▶", "in progress"),
        Status::Completed => ("✓", "completed"),
        Status::Failed => ("✗", "failed"),
        Status::Cancelled => ("–", "cancelled"),
    };
    html! { span class=(format!("status s-{}", status.as_str())) { (mark) " " (word) } }
}

/// `2026-12-02 19:08:09`, UTC, to the second.
fn when(ms: i64) -> String {
    let text = rfc3339(ms).replace('T', " ");
    text.split('.')
        .next()
        .unwrap_or(&text)
        .trim_end_matches('Z')
        .to_string()
}

fn counts_line(counts: &[(Status, i64)]) -> Markup {
    html! {
        ul class="counts" {
            @for (s, n) in counts.iter().filter(|(_, n)| *n > 0) {
                li { (status(*s)) " " strong { (n) } }
            }
        }
    }
}

fn percent(done: i64, total: i64) -> String {
    if total > 0 {
        format!("{:.1} %", done as f64 * 100.0 / total as f64)
    } else {
        "-".into()
    }
}

pub fn overview(o: &Overview) -> Markup {
    html! {
        h1 { "Plans" }
        p class="meta" { "As of " (when(o.now_ms)) " UTC. " (o.plans.len()) " live plans." }
        @if o.plans.is_empty() {
            p { "No plans yet: " code { "todoctl apply plan.toml" } " starts one." }
        }
        @for card in &o.plans {
            section class="plan" {
                h2 { a href=(format!("/plans/{}", card.plan.name)) { (card.plan.name) } }
                @if !card.plan.title.is_empty() { p class="title" { (card.plan.title) } }
                (counts_line(&card.counts))
                @if !card.phases.is_empty() {
                    table class="phases" {
                        @for t in &card.phases { (phase_row(t)) }
                    }
                }
            }
        }
    }
}

fn phase_row(t: &TaskView) -> Markup {
    let p = t
        .progress
        .as_deref()
        .and_then(ProgressCounts::parse)
        .unwrap_or_default();
    let done = p.done.unwrap_or(0) as i64;
    let total = p.total.unwrap_or(0) as i64;
    html! {
        tr {
            td { (t.id) }
            td { (t.kind) }
            td { (status(t.status)) }
            td class="wide" { (t.content) }
            td {
                @if t.status == Status::InProgress && total > 0 {
                    progress value=(done) max=(total) {}
                    " " (percent(done, total))
                }
            }
        }
    }
}

pub fn plan(p: &PlanPage) -> Markup {
    html! {
        h1 { "Plan " (p.plan.name) }
        @if !p.plan.title.is_empty() { p class="title" { (p.plan.title) } }
        p class="meta" { "As of " (when(p.now_ms)) " UTC · revision " (p.plan.revision) }
        (counts_line(&p.counts))
        @for phase in &p.phases { (phase_section(phase, p.now_ms)) }
        @if !p.todos.is_empty() {
            section class="todos" {
                h2 { "Tasks" }
                table {
                    thead { tr { th { "id" } th { "status" } th { "priority" } th { "task" } th { "after" } } }
                    tbody {
                        @for t in &p.todos {
                            tr id=(t.id.to_string()) {
                                td { (t.id) }
                                td { (status(t.status)) }
                                td { (t.priority) }
                                td class="wide content" { (t.content) }
                                td { (ids(&t.depends_on)) }
                            }
                        }
                    }
                }
                @if p.more_todos > 0 { p class="meta" { "and " (p.more_todos) " more (todoctl tasks)" } }
            }
        }
    }
}

fn ids(ids: &[TaskId]) -> String {
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn band(e: &Estimate) -> Band {
    Band {
        value: e.value,
        low: e.low,
        high: e.high,
    }
}

fn phase_section(d: &PhaseDetail, now_ms: i64) -> Markup {
    let t = &d.task;
    html! {
        section class="phase" id=(t.id.to_string()) {
            h2 {
                (status(t.status)) " " span class="kind" { (t.kind) } " " (t.id) " "
                span class="content" { (t.content) }
            }
            @if !t.depends_on.is_empty() { p class="meta" { "after " (ids(&t.depends_on)) } }
            @match t.status {
                Status::InProgress => { (running(d, now_ms)) }
                Status::Pending if !t.blocked_by.is_empty() => { p { "Waits for " (ids(&t.blocked_by)) "." } }
                Status::Failed => { p class="error" { (t.error.as_deref().unwrap_or("")) } }
                Status::Completed => { (finished(d)) }
                _ => {}
            }
            @if !d.events.is_empty() {
                details class="events" open[t.status == Status::InProgress] {
                    summary { "Schedule firings, drift, errors and restarts" }
                    ul {
                        @for e in &d.events {
                            li { time { (when(e.at_ms)) } " " strong { (e.event_type.replace('_', " ")) } " " (event_text(e)) }
                        }
                    }
                }
            }
        }
    }
}

fn event_text(e: &todod_store::NotableEvent) -> String {
    let value: Value = serde_json::from_str(&e.value).unwrap_or(Value::Null);
    match value["message"].as_str() {
        Some(message) => message.to_string(),
        // Its first line: a server's exit quotes its log's end below it,
        // which the page leaves to `todoctl show` (so no dangling "ends:").
        None if !e.reason.is_empty() => {
            let first = e.reason.lines().next().unwrap_or_default();
            first.trim_end_matches("; its log ends:").to_string()
        }
        None => e.value.clone(),
    }
}

fn running(d: &PhaseDetail, now_ms: i64) -> Markup {
    let p = &d.progress;
    let c = &d.counts;
    let int = |n: Option<u64>| n.unwrap_or(0) as i64;
    let (done, failed, rejected, total) =
        (int(c.done), int(c.failed), int(c.rejected), int(c.total));
    let answered = done + failed;
    // A window is shown once the run is older than the one before it: a
    // young run's three rates would be the same figure.
    let windows = [
        (60.0, "1 min", 0.0),
        (300.0, "5 min", 60.0),
        (900.0, "15 min", 300.0),
    ];
    let age = match (d.points.first(), d.points.last()) {
        (Some(a), Some(b)) => (b.at_ms - a.at_ms) as f64 / 1000.0,
        _ => 0.0,
    };
    let eta = c.eta_seconds.unwrap_or(0);
    let projected = d.projection.as_ref().map(band);
    html! {
        @if total > 0 {
            progress class="bar" value=(answered) max=(total) {}
        }
        p class="progress-text" {
            (count(done as f64)) " of " (count(total as f64)) " records (" (percent(answered, total)) ")"
            @if failed > 0 { " · " (failed) " failed" }
            @if rejected > 0 { " · " (rejected) " rejected" }
            @if let Some(message) = &c.message { " · " (message) }
        }
        @if !d.points.is_empty() {
            ul class="rates" {
                @for (seconds, name, _) in windows.into_iter().filter(|w| age > w.2 || w.2 == 0.0) {
                    li {
                        "last " (name) ": "
                        @match rate_over(&d.points, seconds) {
                            Some((r, span)) => {
                                strong { (format!("{r:.2}")) } " records/s"
                                @if span + 1.0 < seconds { " (over " (duration(span as i64)) ")" }
                            }
                            None => { "-" }
                        }
                    }
                }
            }
        }
        p class="eta" {
            @if eta > 0 {
                "Ends in " strong { (duration(eta)) } ", at " (when(now_ms + eta * 1000)) " UTC"
            } @else { "End not known yet" }
            @if let Some(b) = projected {
                " · projected " (format!("{:.2}", b.value)) " records/s ("
                (format!("{:.2}", b.low)) " to " (format!("{:.2}", b.high)) ", 95%)"
            }
            @if let Some(message) = p["calibration"]["message"].as_str() { " · calibration: " (message) }
            @if p["remeasuring"] == true { " · held while the server is measured again" }
        }
        @if let Some((holder, expires)) = &d.task.lease {
            @let (daemon, attempt) = todod_proto::lease::holder_parts(holder);
            p class="meta lease" {
                "Run by " strong { (daemon) }
                @if !attempt.is_empty() { " (attempt " (attempt) ")" }
                @if let Some(at) = expires { ", lease until " (when(*at)) " UTC" }
            }
        }
        @for shard in &d.task.shards {
            p class="meta lease" {
                "Shard " (shard.shard.index) " of " (shard.shard.of) ": "
                @if shard.done { "done" }
                @else if let (Some(holder), Some(at)) = (&shard.lease_owner, shard.expires_at.filter(|at| *at > 0)) {
                    @let (daemon, attempt) = todod_proto::lease::holder_parts(holder);
                    "run by " strong { (daemon) }
                    @if !attempt.is_empty() { " (attempt " (attempt) ")" }
                    ", lease until " (when(at)) " UTC"
                }
                @else { "waiting for a daemon" }
            }
        }
        (chart::throughput(&d.points, projected))
        @if let Some(r) = &c.requests { (requests(r)) }
        (servers(&p["server"]))
        (failures(p))
    }
}

/// Requests sent, retried and failed by class: the last minute's (the rate
/// now, before retries become failures) and the run's.
fn requests(r: &todod_proto::results::RequestFigures) -> Markup {
    let window = duration(r.window_seconds.round() as i64);
    let failing = r.last_minute.error_share().unwrap_or(0.0) > 0.0;
    html! {
        section class="requests" {
            h3 { "Requests" }
            ul {
                li class=[failing.then_some("error")] { "last " (window) ": " (r.last_minute.describe()) }
                li { "the run: " (r.run.describe()) }
            }
        }
    }
}

fn servers(server: &Value) -> Markup {
    let Some(endpoints) = server.as_object().filter(|m| !m.is_empty()) else {
        return html! {};
    };
    let figure = |v: &Value, k: &str| {
        v[k].as_f64()
            .map(|x| format!("{x:.0}"))
            .unwrap_or("-".into())
    };
    html! {
        table class="servers" {
            caption { "What the inference servers say of themselves" }
            thead { tr { th { "endpoint" } th { "running" } th { "waiting" } th { "KV cache" } th { "tokens/s" } } }
            tbody {
                @for (endpoint, v) in endpoints {
                    tr {
                        td class="wide" { (endpoint) }
                        td { (figure(v, "running")) }
                        td { (figure(v, "waiting")) }
                        td { (v["kv_cache_usage"].as_f64().map(|x| format!("{:.0} %", x * 100.0)).unwrap_or("-".into())) }
                        td { (figure(v, "generation_tokens_per_second")) }
                    }
                }
            }
        }
    }
}

fn failures(p: &Value) -> Markup {
    let classes: BTreeMap<String, u64> =
        serde_json::from_value(p["failures_by_class"].clone()).unwrap_or_default();
    let errors: Vec<String> =
        serde_json::from_value(p["recent_errors"].clone()).unwrap_or_default();
    failure_table(&classes, &errors)
}

/// Failures by class, with the latest errors (newest first).
fn failure_table(classes: &BTreeMap<String, u64>, errors: &[String]) -> Markup {
    if classes.is_empty() {
        return html! {};
    }
    html! {
        section class="failures" {
            h3 { "Failures by class" }
            table {
                tbody {
                    @for (class, n) in classes {
                        tr { td { (class.replace('_', " ")) } td { (n) } }
                    }
                }
            }
            @if !errors.is_empty() {
                h3 { "Latest errors" }
                ol class="errors" reversed {
                    @for e in errors.iter().rev() { li { (e) } }
                }
            }
        }
    }
}

fn finished(d: &PhaseDetail) -> Markup {
    let Some(view) = &d.view else {
        return html! {};
    };
    html! {
        p class="progress-text" {
            (view.summary_apart_from_held.as_deref().filter(|_| view.held.is_some()).unwrap_or(&view.summary))
        }
        @if !view.notes.is_empty() {
            ul { @for note in &view.notes { li { (note) } } }
        }
        @if let Some(held) = &view.held { (held_to(held)) }
        (failure_table(&view.failures_by_class, &[]))
        @if view.report {
            p { a href=(format!("/tasks/{}/report", d.task.id)) { "The report" } }
        }
    }
}

/// A run held to a projection: its time against the projected band.
fn held_to(o: &HeldOutcome) -> Markup {
    let h = &o.projected_hours;
    let compared = o.compared_hours();
    let secs = |hours: f64| duration((hours * 3600.0).round() as i64);
    html! {
        p class="actual" {
            "Took " strong { (secs(compared)) } " against " (secs(h.value)) " projected ("
            (secs(h.low)) " to " (secs(h.high)) ", 95%): "
            strong { @if h.contains(compared) { "inside" } @else { "outside" } } " the band"
            " (" a href=(format!("/tasks/{}/report", o.feasibility)) { "the report" } ")."
        }
    }
}

/// The 401 page: what to do to get in.
pub fn login_needed() -> String {
    page(
        "login",
        "",
        html! {
            h1 { "Login needed" }
            p { "This page shows what the API shows, so it asks for the same: run "
                code { "todoctl open" } " on a machine that reaches the daemon, and open the link it prints (it works once, for five minutes)." }
        },
    )
}
