//! Colour for a person at a terminal, and none anywhere else: `--color
//! auto` (the default) colours only when stdout is a terminal, `NO_COLOR`
//! is not set and `TERM` is not `dumb`; `always` and `never` decide it.
//! Colour is only ever put around todoctl's own words (markers, counts),
//! never around text a client stored, which is escaped as it always is.
//!
//! A view marks its colours with two private-use characters, which the
//! escaping of client text escapes like any control; the last guard on
//! output escapes every control and then turns the marks, and only them,
//! into SGR sequences. So a field no view escaped still cannot reach the
//! terminal's controls, and client text cannot colour anything.
use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

static ON: AtomicBool = AtomicBool::new(false);

/// Decides once, at start-up.
pub fn init(choice: &str) {
    let on = match choice {
        "always" => true,
        "never" => false,
        _ => {
            std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
        }
    };
    ON.store(on, Ordering::Relaxed);
}

#[derive(Debug, Clone, Copy)]
pub enum Style {
    Done,
    Running,
    Failed,
    Warning,
    Dim,
}

impl Style {
    fn code(self) -> &'static str {
        match self {
            Style::Done => "32",
            Style::Running => "36",
            Style::Failed => "1;31",
            Style::Warning => "33",
            Style::Dim => "2",
        }
    }
}

/// Opens a colour; the next character names the style.
pub const OPEN: char = '\u{F8F0}';
/// Ends it.
pub const CLOSE: char = '\u{F8F1}';

const STYLES: [Style; 5] = [
    Style::Done,
    Style::Running,
    Style::Failed,
    Style::Warning,
    Style::Dim,
];

/// `text` marked for `style` when colour is on (as `init` decided).
pub fn paint(text: &str, style: Style) -> Cow<'_, str> {
    paint_if(ON.load(Ordering::Relaxed), text, style)
}

/// `text` marked for `style` when `colour` says so: the choice is the
/// caller's, for this call alone.
pub fn paint_if(colour: bool, text: &str, style: Style) -> Cow<'_, str> {
    if colour {
        let index = STYLES
            .iter()
            .position(|s| s.code() == style.code())
            .unwrap_or(0);
        let name = char::from(b'a' + index as u8);
        Cow::Owned(format!("{OPEN}{name}{text}{CLOSE}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// Text without its colour marks (for a view that escapes it whole).
pub fn strip(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            OPEN => {
                chars.next();
            }
            CLOSE => {}
            c => out.push(c),
        }
    }
    out
}

/// The colour marks of escaped output made SGR sequences (or dropped when
/// a mark is malformed).
pub fn to_ansi(text: &str) -> Cow<'_, str> {
    if !text.contains([OPEN, CLOSE]) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            OPEN => {
                let style = chars
                    .next()
                    .and_then(|n| (n as u32).checked_sub(u32::from(b'a')))
                    .and_then(|i| STYLES.get(i as usize));
                if let Some(style) = style {
                    out.push_str(&format!("\x1b[{}m", style.code()));
                }
            }
            CLOSE => out.push_str("\x1b[0m"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The style of a status marker.
pub fn of_status(status: &str) -> Option<Style> {
    match status {
        "completed" => Some(Style::Done),
        "in_progress" => Some(Style::Running),
        "failed" => Some(Style::Failed),
        "cancelled" => Some(Style::Dim),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paint_marks_only_when_on_and_the_marks_become_sgr() {
        // The choice per call: the process's flag, which the render tests
        // beside this one read, is left alone.
        assert_eq!(paint_if(false, "[x]", Style::Done), "[x]");
        let marked = paint_if(true, "[x]", Style::Done).into_owned();
        assert_eq!(marked, format!("{OPEN}a[x]{CLOSE}"));
        assert_eq!(to_ansi(&marked), "\x1b[32m[x]\x1b[0m");
        let failed = format!("{OPEN}c[!]{CLOSE}");
        assert_eq!(to_ansi(&failed), "\x1b[1;31m[!]\x1b[0m");
        assert_eq!(to_ansi("plain"), "plain");
        assert_eq!(strip(&failed), "[!]");
    }

    #[test]
    fn client_text_cannot_carry_a_mark_through_escaping() {
        let hostile = format!("{OPEN}ared{CLOSE}");
        let shown = crate::safe::escape(&hostile);
        assert!(!shown.contains(OPEN) && !shown.contains(CLOSE), "{shown}");
    }
}
