//! Text output: task tables, plan summaries, task details, event lines and
//! progress bars. Pure functions from proto messages to strings.
use std::fmt::Write as _;
use todod_proto::results::ProgressCounts;

use todod_proto::{Event, PlanSummary, Progress, Task, WriteTodosResponse};

use crate::cli::STATUSES;

/// Width of the `[#####-----]` bar.
pub const BAR_WIDTH: usize = 10;

/// `[x]` completed, `[~]` in progress, `[ ]` pending, `[!]` failed, `[-]` cancelled.
pub fn marker(status: &str) -> std::borrow::Cow<'static, str> {
    let text = match status {
        "completed" => "[x]",
        "in_progress" => "[~]",
        "pending" => "[ ]",
        "failed" => "[!]",
        "cancelled" => "[-]",
        _ => "[?]",
    };
    match crate::style::of_status(status) {
        Some(style) => crate::style::paint(text, style),
        None => std::borrow::Cow::Borrowed(text),
    }
}

/// `[#####-----] 50% 500/1000`; `total` must be > 0.
pub fn progress_bar(done: i64, total: i64, width: usize) -> String {
    let total_w = i128::from(total.max(1));
    let done_w = i128::from(done).clamp(0, total_w);
    let filled = usize::try_from(done_w * width as i128 / total_w)
        .unwrap_or(width)
        .min(width);
    let pct = done_w * 100 / total_w;
    format!(
        "[{}{}] {pct}% {done}/{total}",
        "#".repeat(filled),
        "-".repeat(width - filled)
    )
}

/// The bar plus whatever else the worker reported; `None` when there is nothing.
pub fn progress_text(p: &Progress) -> Option<String> {
    let mut parts = Vec::new();
    if p.total > 0 {
        parts.push(progress_bar(p.done, p.total, BAR_WIDTH));
    } else if p.done > 0 {
        parts.push(format!("{} done", p.done));
    }
    if p.failed > 0 {
        let failed = format!("{} failed", p.failed);
        parts.push(crate::style::paint(&failed, crate::style::Style::Warning).into_owned());
    }
    if p.tokens > 0 {
        parts.push(format!("{} tokens", p.tokens));
    }
    if p.rate_per_second > 0.0 {
        parts.push(format!("{:.1}/s", p.rate_per_second));
    }
    if p.eta_seconds > 0 {
        parts.push(format!("eta {}", duration(p.eta_seconds)));
    }
    if !p.message.trim().is_empty() {
        parts.push(one_line(&p.message));
    }
    let requests = todod_proto::results::ProgressCounts::parse(&p.detail_json)
        .and_then(|c| c.requests)
        .filter(|r| r.last_minute.sent > 0 || r.run.errored() > 0);
    if let Some(r) = requests {
        // The rate now: how many requests fail and are retried, by class.
        let text = format!(
            "requests in the last {}: {}",
            duration(r.window_seconds.round() as i64),
            r.last_minute.describe()
        );
        if r.last_minute.errored() > 0 {
            parts.push(crate::style::paint(&text, crate::style::Style::Warning).into_owned());
        } else {
            parts.push(text);
        }
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

pub use todod_proto::readable::duration;

/// `2026-12-01 14:35:04Z (3m20s ago)`: the daemon's time to the second, and
/// how long ago it was, in the one duration format; `in 5m` for a time to
/// come. Text that is not a time is shown as it is.
pub fn when(rfc3339: &str) -> String {
    when_at(rfc3339, std::time::SystemTime::now())
}

/// An event's time, to the second: `2026-12-01 14:35:04Z`.
pub fn stamp(rfc3339: &str) -> String {
    match humantime::parse_rfc3339_weak(rfc3339.trim().trim_end_matches('Z')) {
        Ok(at) => humantime::format_rfc3339_seconds(at)
            .to_string()
            .replacen('T', " ", 1),
        Err(_) => rfc3339.to_string(),
    }
}

pub fn when_at(rfc3339: &str, now: std::time::SystemTime) -> String {
    let Ok(at) = humantime::parse_rfc3339_weak(rfc3339.trim().trim_end_matches('Z')) else {
        return rfc3339.to_string();
    };
    let shown = humantime::format_rfc3339_seconds(at)
        .to_string()
        .replacen('T', " ", 1);
    match now.duration_since(at) {
        Ok(ago) => format!("{shown} ({} ago)", duration(ago.as_secs() as i64)),
        Err(ahead) => format!(
            "{shown} (in {})",
            duration(ahead.duration().as_secs() as i64)
        ),
    }
}

/// One field on one line: trimmed, with newlines and every control or format
/// character shown escaped (`\n`, `\u{1b}`), so one item stays one line and
/// no client text can drive the terminal.
pub fn one_line(s: &str) -> String {
    crate::safe::escape(s.trim()).into_owned()
}

fn truncate(s: &str, max: usize) -> String {
    let s = one_line(s);
    if s.chars().count() <= max {
        return s;
    }
    let mut out: String = s.chars().take(max.saturating_sub(3)).collect();
    out.push_str("...");
    out
}

/// The status, or for a pending task its readiness (`ready`, `blocked`, ...).
pub fn state_label(t: &Task) -> &str {
    if t.status == "pending" && !t.readiness.is_empty() {
        &t.readiness
    } else {
        &t.status
    }
}

/// Content with the kind in front for phase tasks and hints after it.
fn task_text(t: &Task) -> String {
    let mut s = String::new();
    if !t.kind.is_empty() && t.kind != "todo" {
        let _ = write!(s, "[{}] ", t.kind);
    }
    s.push_str(&one_line(&t.content));
    if !t.blocked_by.is_empty() {
        let _ = write!(s, "  (blocked by {})", t.blocked_by.join(", "));
    } else if !t.depends_on.is_empty() {
        let _ = write!(s, "  (after {})", t.depends_on.join(", "));
    }
    if t.status == "in_progress" {
        if let Some(p) = t.progress.as_deref().and_then(progress_text) {
            let _ = write!(s, "  {p}");
        }
    }
    if !t.error.trim().is_empty() {
        let _ = write!(s, "  error: {}", truncate(&t.error, 100));
    }
    if t.archived {
        s.push_str("  (archived)");
    }
    s
}

/// One line per task: marker, id, priority, state, content.
pub fn task_table(tasks: &[Task]) -> String {
    if tasks.is_empty() {
        return "no tasks\n".to_string();
    }
    let id_w = tasks.iter().map(|t| t.id.len()).max().unwrap_or(0);
    let state_w = tasks
        .iter()
        .map(|t| state_label(t).len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for t in tasks {
        let _ = writeln!(
            out,
            "{} {:id_w$}  {:6}  {:state_w$}  {}",
            marker(&t.status),
            t.id,
            t.priority,
            state_label(t),
            task_text(t)
        );
    }
    out
}

fn priority_tag(t: &Task) -> String {
    match t.priority.as_str() {
        "" | "medium" => String::new(),
        p => format!("  ({p})"),
    }
}

/// The `status` screen of one plan.
pub fn plan_summary(s: &PlanSummary) -> String {
    let mut out = String::new();
    if let Some(p) = &s.plan {
        let _ = write!(out, "plan {}", p.name);
        if !p.title.trim().is_empty() {
            let _ = write!(out, " \"{}\"", one_line(&p.title));
        }
        let _ = write!(out, "  revision {}", p.revision);
        if !p.archived_at.is_empty() {
            let _ = write!(out, ", archived {}", when(&p.archived_at));
        }
        if !p.updated_at.is_empty() {
            let _ = write!(out, ", updated {}", when(&p.updated_at));
        }
        out.push('\n');
    }
    let mut counts: Vec<_> = s.counts.iter().filter(|c| c.count > 0).collect();
    counts.sort_by_key(|c| {
        STATUSES
            .iter()
            .position(|s| *s == c.status)
            .unwrap_or(STATUSES.len())
    });
    let counts: Vec<String> = counts
        .iter()
        .map(|c| format!("{} {}", c.count, c.status))
        .collect();
    let noun = if s.total == 1 { "task" } else { "tasks" };
    if counts.is_empty() {
        let _ = writeln!(out, "  {} {noun}", s.total);
    } else {
        let _ = writeln!(out, "  {} {noun}: {}", s.total, counts.join(", "));
    }
    let _ = writeln!(
        out,
        "  {} ready, {} blocked, {} blocked by failure",
        s.ready_count, s.blocked_count, s.blocked_by_failure_count
    );
    let in_progress = s
        .counts
        .iter()
        .find(|c| c.status == "in_progress")
        .map_or(0, |c| c.count);
    if !s.in_progress.is_empty() {
        out.push_str("  in progress:\n");
        for t in &s.in_progress {
            let _ = write!(
                out,
                "    {} {}  {}",
                marker(&t.status),
                t.id,
                one_line(&t.content)
            );
            if let Some(p) = t.progress.as_deref().and_then(progress_text) {
                let _ = write!(out, "  {p}");
            }
            out.push('\n');
        }
        more(&mut out, in_progress, s.in_progress.len());
    }
    if !s.ready.is_empty() {
        out.push_str("  ready next:\n");
        for t in &s.ready {
            let _ = writeln!(
                out,
                "    {} {}  {}{}",
                marker(&t.status),
                t.id,
                one_line(&t.content),
                priority_tag(t)
            );
        }
        more(&mut out, s.ready_count, s.ready.len());
    }
    if !s.blocked.is_empty() {
        out.push_str("  blocked:\n");
        for t in &s.blocked {
            let _ = writeln!(out, "  {}", blocked_line(t));
        }
        more(
            &mut out,
            s.blocked_count + s.blocked_by_failure_count,
            s.blocked.len(),
        );
    }
    out
}

/// `  t7 blocked by t3, t4: Evaluate`, or `! t8 blocked by failure of t4: Report`.
pub fn blocked_line(t: &Task) -> String {
    let blockers = if t.blocked_by.is_empty() {
        "?".to_string()
    } else {
        t.blocked_by.join(", ")
    };
    if t.readiness == "blocked_by_failure" {
        format!(
            "! {} blocked by failure of {}: {}",
            t.id,
            blockers,
            one_line(&t.content)
        )
    } else {
        format!(
            "  {} blocked by {}: {}",
            t.id,
            blockers,
            one_line(&t.content)
        )
    }
}

/// The servers the daemon runs for a plan's phases, a line each (and how
/// the last process of each ended, if one has): nothing without any.
pub fn servers_section(servers: &[todod_proto::ServerInfo]) -> String {
    let mut out = String::new();
    if servers.is_empty() {
        return out;
    }
    out.push_str("\n  servers:\n");
    for s in servers {
        let mut line = format!(
            "    {}  {}",
            crate::safe::escape(&s.name),
            crate::safe::escape(&s.state)
        );
        if s.pid != 0 {
            line.push_str(&format!("  pid {}", s.pid));
        }
        line.push_str(&format!("  {}", crate::safe::escape(&s.url)));
        if s.state == "ready" {
            line.push_str(&format!(
                "  up {}",
                todod_proto::readable::duration(s.uptime_seconds)
            ));
        }
        let plural = if s.restarts == 1 { "" } else { "s" };
        line.push_str(&format!("  {} restart{plural}", s.restarts));
        line.push_str(&format!("  ({})", crate::safe::escape(&s.tasks.join(", "))));
        out.push_str(&line);
        out.push('\n');
        if let Some(first) = s.last_exit.lines().next() {
            out.push_str(&format!(
                "      last exit: {}\n",
                crate::safe::escape(first)
            ));
        }
    }
    out
}

/// The failed tasks of a plan, each with why (the first line of its error):
/// `status` says what failed, not only how many.
pub fn failed_section(failed: &[Task], count: i64) -> String {
    let mut out = String::new();
    if failed.is_empty() {
        return out;
    }
    out.push_str("  failed:\n");
    for t in failed {
        let _ = writeln!(
            out,
            "    {} {}  {}",
            marker(&t.status),
            t.id,
            one_line(&t.content)
        );
        let why = t.error.lines().next().unwrap_or("").trim();
        if !why.is_empty() {
            let _ = writeln!(out, "        {}", one_line(why));
        }
    }
    more(&mut out, count, failed.len());
    out
}

fn more(out: &mut String, count: i64, shown: usize) {
    let rest = count - i64::try_from(shown).unwrap_or(i64::MAX);
    if rest > 0 {
        let _ = writeln!(out, "    ... and {rest} more");
    }
}

/// Every field of a task, then its history.
/// `result` is the phase's result as `phase_view` draws it, if it can.
pub fn task_details(
    t: &Task,
    events: &[Event],
    all_events: bool,
    result: Option<String>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {}  {}",
        marker(&t.status),
        t.id,
        one_line(&t.content)
    );
    let mut field = |name: &str, value: &str| {
        if !value.trim().is_empty() {
            let _ = writeln!(out, "  {name:<11} {}", one_line(value));
        }
    };
    field("plan", &t.plan);
    let status = match (t.status.as_str(), t.readiness.as_str()) {
        ("pending", r) if !r.is_empty() => format!("pending ({r})"),
        (s, _) => s.to_string(),
    };
    field("status", &status);
    field("priority", &t.priority);
    field("kind", &t.kind);
    field("owner", &t.owner);
    field("metadata", &t.metadata_json);
    field("position", &t.position.to_string());
    field("depends on", &t.depends_on.join(", "));
    field("blocked by", &t.blocked_by.join(", "));
    if let Some(p) = t.progress.as_deref().and_then(progress_text) {
        // One field, escaped whole: without the colour marks, which it
        // would show escaped.
        field("progress", &crate::style::strip(&p));
    }
    field("error", &t.error);
    field("revision", &t.revision.to_string());
    field("archived", if t.archived { "yes" } else { "" });
    let time = |at: &str| {
        if at.is_empty() {
            String::new()
        } else {
            when(at)
        }
    };
    field("created", &time(&t.created_at));
    field("updated", &time(&t.updated_at));
    field("started", &time(&t.started_at));
    field("finished", &time(&t.finished_at));
    if !t.summary.is_empty() {
        field("summary", &crate::safe::escape(&t.summary));
    }
    if let Some(s) = &t.schedule {
        field("schedule", &schedule_text(s));
    }
    json_block(&mut out, "spec", &t.spec_json);
    // A phase's result reads better summarized; --json gives all of it.
    match result {
        Some(summary) => {
            out.push_str("  result:\n");
            out.push_str(&summary);
        }
        None => json_block(&mut out, "result", &t.result_json),
    }
    if events.is_empty() {
        out.push_str("history: none\n");
    } else {
        out.push_str("history:\n");
        let shown = shown_events(events, all_events);
        let mut skipped = 0;
        for (e, show) in events.iter().zip(shown) {
            if !show {
                skipped += 1;
                continue;
            }
            if skipped > 0 {
                let _ = writeln!(
                    out,
                    "  ... {skipped} progress samples (--all-events shows them)"
                );
                skipped = 0;
            }
            let _ = writeln!(out, "  {}", event_line(e, false));
        }
        if skipped > 0 {
            let _ = writeln!(
                out,
                "  ... {skipped} progress samples (--all-events shows them)"
            );
        }
    }
    out
}

/// A JSON string field pretty-printed and indented (as is if it is not JSON).
fn json_block(out: &mut String, name: &str, raw: &str) {
    if raw.trim().is_empty() {
        return;
    }
    let pretty = serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| raw.trim().to_string());
    let _ = writeln!(out, "  {name}:");
    for line in pretty.lines() {
        let _ = writeln!(out, "    {}", crate::safe::escape(line));
    }
}

/// `#42 2025-06-01T10:00:00Z agent-42 t3 status_changed pending -> in_progress by claude (reason: ...)`.
pub fn event_line(e: &Event, with_plan: bool) -> String {
    let mut s = format!("#{}", e.seq);
    if !e.at.is_empty() {
        let _ = write!(s, " {}", stamp(&e.at));
    }
    if with_plan && !e.plan.is_empty() {
        let _ = write!(s, " {}", e.plan);
    }
    let task = if e.task_id.is_empty() {
        "-"
    } else {
        &e.task_id
    };
    let _ = write!(s, " {task} {}", e.r#type);
    // A worker's progress reads better as a bar than as its JSON.
    if e.r#type == "progress" {
        if let Some(p) = ProgressCounts::parse(&e.new_value) {
            let int = |n: Option<u64>| n.unwrap_or(0) as i64;
            let rate = p.rate_per_second.unwrap_or(0.0);
            let _ = write!(
                s,
                " {} failed {} tokens {} {rate:.1}/s eta {}s",
                progress_bar(int(p.done), int(p.total), 20),
                int(p.failed),
                int(p.tokens),
                p.eta_seconds.unwrap_or(0)
            );
            return s;
        }
    }
    // A resumption's value is the daemon's internal run id: for --json only.
    let new_value = if e.r#type == "resumed" {
        ""
    } else {
        e.new_value.as_str()
    };
    let value = match (e.old_value.trim().is_empty(), new_value.trim().is_empty()) {
        (false, false) => format!(
            "{} -> {}",
            truncate(&e.old_value, 60),
            truncate(&e.new_value, 60)
        ),
        (true, false) => truncate(new_value, 60),
        (false, true) => truncate(&e.old_value, 60),
        (true, true) => String::new(),
    };
    // A status change shows `from -> to`; an event with only one side of it
    // (task_created: `to` is the initial status) shows that side, after the value.
    let status = match (e.from_status.is_empty(), e.to_status.is_empty()) {
        (false, false) => format!("{} -> {}", e.from_status, e.to_status),
        (true, false) => e.to_status.clone(),
        (false, true) => e.from_status.clone(),
        (true, true) => String::new(),
    };
    let change = match (value.is_empty(), status.is_empty()) {
        (_, true) => value,
        (true, false) => status,
        (false, false) => format!("{value} ({status})"),
    };
    if !change.is_empty() {
        let _ = write!(s, " {change}");
    }
    if !e.actor.is_empty() {
        let _ = write!(s, " by {}", one_line(&e.actor));
    }
    if !e.reason.trim().is_empty() {
        let _ = write!(s, " (reason: {})", one_line(&e.reason));
    }
    s
}

/// The list after a write, then what the write created and archived.
pub fn write_result(r: &WriteTodosResponse) -> String {
    let mut out = task_table(&r.todos);
    if let Some(p) = &r.plan {
        let _ = write!(out, "plan {} at revision {}", p.name, p.revision);
    }
    if !r.created.is_empty() {
        let _ = write!(out, "; created {}", r.created.join(", "));
    }
    if !r.archived.is_empty() {
        let _ = write!(out, "; archived {}", r.archived.join(", "));
    }
    out.push('\n');
    out
}

/// Which events `show` prints: every change of state, and of a long run's
/// progress samples only the first, the last and a few in between, so that
/// the history of a ten-hour run stays a screen.
fn shown_events(events: &[Event], all: bool) -> Vec<bool> {
    const BETWEEN: usize = 3;
    let progress: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.r#type == "progress")
        .map(|(i, _)| i)
        .collect();
    let mut shown = vec![true; events.len()];
    if all || progress.len() <= BETWEEN + 2 {
        return shown;
    }
    let last = progress.len() - 1;
    let keep: Vec<usize> = (0..=BETWEEN + 1)
        .map(|k| k * last / (BETWEEN + 1))
        .collect();
    for (n, &i) in progress.iter().enumerate() {
        shown[i] = keep.contains(&n);
    }
    shown
}

/// `probe "*/5 * * * *" UTC, next 2026-12-01T12:05:00.000Z`.
pub fn schedule_text(s: &todod_proto::Schedule) -> String {
    let next = if s.next_fire_at.is_empty() {
        "never fires again".to_string()
    } else {
        format!("next {}", s.next_fire_at)
    };
    let mut text = format!(
        "{} \"{}\" {}, {next}",
        s.action,
        crate::safe::escape(&s.cron),
        crate::safe::escape(&s.timezone)
    );
    if !s.last_fired_at.is_empty() {
        text.push_str(&format!(", last {}", s.last_fired_at));
    }
    text
}

/// What `plan apply` did (or, with `--dry-run`, would do), one line a step.
pub fn applied_pipeline(a: &todod_proto::ApplyPipelineResponse, dry_run: bool) -> String {
    let mut out = String::new();
    let plan = a.plan.as_ref().map(|p| p.name.as_str()).unwrap_or("(new)");
    let verb = if dry_run { "would apply" } else { "applied" };
    let _ = writeln!(out, "{verb} pipeline to plan {}", crate::safe::escape(plan));
    for s in &a.steps {
        let id = s.task.as_ref().map(|t| t.id.as_str()).unwrap_or("-");
        let status = s.task.as_ref().map(|t| t.status.as_str()).unwrap_or("");
        let action = match (s.action.as_str(), dry_run) {
            ("create", true) => "create".to_string(),
            ("create", false) => "created".to_string(),
            ("update", true) => format!("update {}", s.changed.join(", ")),
            ("update", false) => format!("updated {}", s.changed.join(", ")),
            ("unchanged", _) => "unchanged".to_string(),
            ("not_in_file", _) => "kept (no longer in the file)".to_string(),
            (other, _) => other.to_string(),
        };
        let _ = writeln!(
            out,
            "  {:<13} {:<5} {:<12} {}",
            crate::safe::escape(&s.step),
            crate::safe::escape(id),
            crate::safe::escape(status),
            crate::safe::escape(&action)
        );
    }
    if a.steps.iter().all(|s| s.action == "unchanged") {
        let _ = writeln!(out, "nothing to change");
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use todod_proto::{Plan, StatusCount};

    #[test]
    fn progress_bar_renders() {
        assert_eq!(progress_bar(500, 1000, 10), "[#####-----] 50% 500/1000");
        assert_eq!(progress_bar(0, 7, 10), "[----------] 0% 0/7");
        assert_eq!(progress_bar(7, 7, 10), "[##########] 100% 7/7");
        assert_eq!(progress_bar(1, 3, 10), "[###-------] 33% 1/3");
        // Out-of-range values are clamped in the bar, not hidden in the numbers.
        assert_eq!(progress_bar(12, 10, 10), "[##########] 100% 12/10");
        assert_eq!(progress_bar(-1, 10, 4), "[----] 0% -1/10");
        assert_eq!(
            progress_bar(i64::MAX, i64::MAX, 10),
            format!("[##########] 100% {0}/{0}", i64::MAX)
        );
    }

    #[test]
    fn progress_text_adds_extras() {
        let p = Progress {
            done: 250,
            total: 1000,
            failed: 2,
            rate_per_second: 12.34,
            eta_seconds: 61,
            message: "batch 3\n".into(),
            ..Default::default()
        };
        assert_eq!(
            progress_text(&p).as_deref(),
            Some("[##--------] 25% 250/1000, 2 failed, 12.3/s, eta 1m01s, batch 3")
        );
        assert_eq!(progress_text(&Progress::default()), None);
        assert_eq!(
            progress_text(&Progress {
                done: 5,
                ..Default::default()
            })
            .as_deref(),
            Some("5 done")
        );
        assert_eq!(duration(7300), "2h01m");
    }

    fn task(id: &str, status: &str, readiness: &str, blocked_by: &[&str]) -> Task {
        Task {
            id: id.into(),
            content: format!("do {id}"),
            status: status.into(),
            readiness: readiness.into(),
            priority: "medium".into(),
            kind: "todo".into(),
            blocked_by: blocked_by.iter().map(|s| s.to_string()).collect(),
            depends_on: blocked_by.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn table_aligns_and_marks() {
        let mut t2 = task("t2", "in_progress", "", &[]);
        t2.progress = Some(Box::new(Progress {
            done: 5,
            total: 10,
            ..Default::default()
        }));
        let out = task_table(&[
            task("t1", "completed", "", &[]),
            t2,
            task("t10", "pending", "blocked", &["t2"]),
        ]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "[x] t1   medium  completed    do t1");
        assert_eq!(
            lines[1],
            "[~] t2   medium  in_progress  do t2  [#####-----] 50% 5/10"
        );
        assert_eq!(
            lines[2],
            "[ ] t10  medium  blocked      do t10  (blocked by t2)"
        );
    }

    #[test]
    fn times_say_how_long_ago_to_the_second() {
        let at = "2026-12-01T14:35:04.441Z";
        let now = humantime::parse_rfc3339("2026-12-01T14:38:24Z").unwrap();
        assert_eq!(when_at(at, now), "2026-12-01 14:35:04Z (3m19s ago)");
        let before = humantime::parse_rfc3339("2026-12-01T14:30:04Z").unwrap();
        assert_eq!(when_at(at, before), "2026-12-01 14:35:04Z (in 5m00s)");
        assert_eq!(when_at("not a time", now), "not a time");
    }

    #[test]
    fn summary_lists_blockers_and_marks_failure() {
        let s = PlanSummary {
            plan: Some(Plan {
                name: "p".into(),
                revision: 3,
                updated_at: "2025-01-01T00:00:00Z".into(),
                ..Default::default()
            }),
            counts: vec![
                StatusCount {
                    status: "failed".into(),
                    count: 1,
                },
                StatusCount {
                    status: "pending".into(),
                    count: 3,
                },
                StatusCount {
                    status: "completed".into(),
                    count: 0,
                },
            ],
            total: 4,
            ready_count: 2,
            blocked_count: 1,
            blocked_by_failure_count: 1,
            ready: vec![task("t1", "pending", "ready", &[])],
            blocked: vec![
                task("t7", "pending", "blocked", &["t3", "t4"]),
                task("t8", "pending", "blocked_by_failure", &["t4"]),
            ],
            ..Default::default()
        };
        let out = plan_summary(&s);
        assert!(out.contains("  4 tasks: 3 pending, 1 failed\n"), "{out}");
        assert!(out.contains("    t7 blocked by t3, t4: do t7\n"), "{out}");
        assert!(
            out.contains("  ! t8 blocked by failure of t4: do t8\n"),
            "{out}"
        );
        assert!(
            out.contains("  ready next:\n    [ ] t1  do t1\n    ... and 1 more\n"),
            "{out}"
        );
    }

    #[test]
    fn progress_events_show_a_bar() {
        let e = Event {
            seq: 7,
            task_id: "t9".into(),
            r#type: "progress".into(),
            new_value: r#"{"done":50,"failed":1,"total":100,"tokens":900,"rate_per_second":12.5,"eta_seconds":4}"#.into(),
            ..Default::default()
        };
        let line = event_line(&e, false);
        assert!(line.contains("50%"), "{line}");
        assert!(line.contains("12.5/s eta 4s"), "{line}");
    }

    #[test]
    fn event_lines() {
        let e = Event {
            seq: 42,
            plan: "p".into(),
            task_id: "t3".into(),
            r#type: "status_changed".into(),
            from_status: "pending".into(),
            to_status: "in_progress".into(),
            actor: "claude".into(),
            reason: "go".into(),
            at: "2025-01-01T00:00:00Z".into(),
            ..Default::default()
        };
        assert_eq!(event_line(&e, true), "#42 2025-01-01 00:00:00Z p t3 status_changed pending -> in_progress by claude (reason: go)");
        let e = Event {
            seq: 1,
            r#type: "plan_created".into(),
            ..Default::default()
        };
        assert_eq!(event_line(&e, false), "#1 - plan_created");
        // task_created carries the content and the initial status only.
        let e = Event {
            seq: 3,
            task_id: "t1".into(),
            r#type: "task_created".into(),
            to_status: "pending".into(),
            new_value: "Write the fix".into(),
            actor: "todoctl".into(),
            ..Default::default()
        };
        assert_eq!(
            event_line(&e, false),
            "#3 t1 task_created Write the fix (pending) by todoctl"
        );
    }

    #[test]
    fn show_of_a_long_run_stays_a_screen() {
        let task = Task {
            id: "t1".into(),
            status: "completed".into(),
            kind: "generation".into(),
            ..Default::default()
        };
        let mut events = vec![Event {
            seq: 1,
            task_id: "t1".into(),
            r#type: "status_changed".into(),
            from_status: "pending".into(),
            to_status: "in_progress".into(),
            ..Default::default()
        }];
        for i in 0..1000 {
            events.push(Event {
                seq: 2 + i,
                task_id: "t1".into(),
                r#type: "progress".into(),
                new_value: format!("{{\"done\": {i}, \"total\": 1000}}"),
                ..Default::default()
            });
        }
        events.push(Event {
            seq: 2000,
            task_id: "t1".into(),
            r#type: "status_changed".into(),
            from_status: "in_progress".into(),
            to_status: "completed".into(),
            ..Default::default()
        });
        let short = task_details(&task, &events, false, None);
        assert!(short.lines().count() < 40, "{short}");
        // Every change of state is there, and the first and last samples.
        assert_eq!(short.matches("status_changed").count(), 2);
        assert!(short.contains("#2 ") && short.contains("#1001 "), "{short}");
        assert!(short.contains("progress samples (--all-events shows them)"));
        let all = task_details(&task, &events, true, None);
        assert!(all.lines().count() > 1000);
    }
}
