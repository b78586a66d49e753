//! `status PLAN --watch`: the plan's screen, redrawn in place on a terminal
//! as its events arrive (and each second, for the times), until every task
//! of the plan has ended; the exit code then says how, as `wait`'s does.
//! Piped, it is the screen, a line per event, and the last screen: no
//! cursor movement and no colour reach a file.
use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::Result;
use futures::StreamExt;
use todod_proto::WatchPlanRequest;

use super::{emit, Ctx};
use crate::error::{CliError, Exit};
use crate::render;

/// At most this many redraws a second: a busy run commits often.
const REDRAW_EVERY: Duration = Duration::from_millis(250);
/// Redraws at least this often, for the elapsed times and ETAs.
const TICK: Duration = Duration::from_secs(1);

/// What a redraw writes: the cursor back to where the last screen began,
/// that screen cleared, the new one.
pub fn redraw(previous_lines: usize, screen: &str) -> String {
    let mut out = String::new();
    if previous_lines > 0 {
        // Up to the first column of the line the last screen began on.
        out.push_str(&format!("\x1b[{previous_lines}F"));
    }
    out.push_str("\x1b[J");
    out.push_str(screen);
    if !screen.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// The terminal's height and width, if stdout is one that says.
fn size() -> Option<(usize, usize)> {
    use std::os::fd::AsRawFd;
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills the struct it is given, on a descriptor that
    // stays open for the call.
    let rc = unsafe { libc::ioctl(std::io::stdout().as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_row > 0 && size.ws_col > 0)
        .then_some((size.ws_row as usize, size.ws_col as usize))
}

/// One line cut to `cols` characters (colour marks do not count; a cut
/// line loses its colours rather than leave one open).
fn cut(line: &str, cols: usize) -> String {
    let plain = crate::style::strip(line);
    if plain.chars().count() < cols {
        return line.to_string();
    }
    plain
        .chars()
        .take(cols.saturating_sub(2))
        .chain(['…'])
        .collect()
}

/// A screen cut to the terminal: each line to its width (a wrapped line
/// would take rows the redraw does not go back over) and the screen to
/// `rows - 1` lines (nor can it go back over lines scrolled off the top).
pub fn fit(screen: &str, size: Option<(usize, usize)>) -> String {
    let Some((rows, cols)) = size.filter(|(r, c)| *r >= 3 && *c >= 8) else {
        return screen.to_string();
    };
    let lines: Vec<String> = screen.lines().map(|l| cut(l, cols)).collect();
    if lines.len() < rows {
        return lines.join("\n") + "\n";
    }
    let keep = rows - 2;
    let mut out = lines[..keep].join("\n");
    out.push_str(&format!(
        "\n  ... {} more lines (a taller terminal, or todoctl status)\n",
        lines.len() - keep
    ));
    out
}

/// The plan's screen until `watched` (every task when empty) has ended.
pub async fn live(ctx: &Ctx, plan: String, limit: i32, watched: &[String]) -> Result<()> {
    let terminal = std::io::stdout().is_terminal();
    let mut client = ctx.client().await?;
    // From now: the screen shows where the plan stands, the stream what
    // happens after (subscribed first, so nothing falls in between).
    let mut events = client
        .watch_plan(WatchPlanRequest {
            plan: plan.clone(),
            from_now: true,
            ..Default::default()
        })
        .await?
        .into_inner();
    // The plan's revision when the screen was drawn: an event it already
    // shows needs no redraw.
    let mut drawn_revision = -1;
    let mut lines = 0;
    let mut shown = String::new();
    let mut last_draw = tokio::time::Instant::now() - REDRAW_EVERY;
    let mut dirty = true;
    let mut tick = tokio::time::interval(TICK);
    loop {
        if dirty && last_draw.elapsed() >= REDRAW_EVERY {
            let (revision, ended) = super::wait::ended(&mut client, &plan, watched).await?;
            let ended = ended.map(|(exit, _)| exit);
            let first = drawn_revision < 0;
            drawn_revision = revision;
            if terminal || ended.is_some() || first {
                let (screen, _) =
                    crate::screens::plan_screen(&mut client, plan.clone(), limit).await?;
                let mut screen = screen.trim_end().to_string() + "\n";
                if terminal {
                    screen = fit(&screen, size());
                }
                let screen = crate::safe::for_terminal(&screen);
                // A tick that changed nothing on the screen writes nothing.
                if screen != shown {
                    let mut out = std::io::stdout().lock();
                    let text = if terminal {
                        redraw(lines, &screen)
                    } else {
                        screen.clone()
                    };
                    out.write_all(text.as_bytes())?;
                    out.flush()?;
                    lines = screen.lines().count();
                    shown = screen;
                }
            }
            last_draw = tokio::time::Instant::now();
            dirty = false;
            if let Some(exit) = ended {
                return match exit {
                    Exit::Ok => Ok(()),
                    // The screen says how; the exit code alone says it too.
                    other => Err(CliError::new(other, String::new()).into()),
                };
            }
        }
        let wait_redraw = last_draw + REDRAW_EVERY;
        tokio::select! {
            next = events.next() => match next {
                Some(Ok(e)) => {
                    if !terminal {
                        emit(&render::event_line(&e, false))?;
                    }
                    // A change the screen does not show yet, or a run's
                    // progress.
                    if e.plan_revision > drawn_revision || e.r#type == "progress" {
                        dirty = true;
                    }
                }
                Some(Err(status)) => return Err(status.into()),
                None => {
                    return Err(CliError::new(
                        Exit::Unreachable,
                        "the daemon ended the event stream (shutting down?); watch again",
                    )
                    .into())
                }
            },
            _ = tick.tick(), if terminal => dirty = true,
            _ = tokio::time::sleep_until(wait_redraw), if dirty => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redraw_goes_back_over_the_last_screen_and_clears_it() {
        assert_eq!(redraw(0, "a\nb\n"), "\x1b[Ja\nb\n");
        assert_eq!(redraw(2, "c"), "\x1b[2F\x1b[Jc\n");
    }

    #[test]
    fn a_screen_taller_than_the_terminal_is_cut_to_fit() {
        let screen = "1\n2\n3\n4\n5\n";
        assert_eq!(fit(screen, None), screen);
        assert_eq!(fit(screen, Some((10, 80))), screen);
        let cut = fit(screen, Some((4, 80)));
        assert_eq!(cut.lines().count(), 3);
        assert!(cut.starts_with("1\n2\n"), "{cut}");
        assert!(cut.contains("3 more lines"), "{cut}");
        // A line wider than the terminal would wrap: it is cut.
        let wide = fit("short\nthis line is far too wide\n", Some((10, 10)));
        assert_eq!(wide, "short\nthis lin…\n");
    }
}
