//! Text from clients (task content, reasons, client names, errors quoted from
//! servers) made safe for a terminal: control characters (C0, DEL, C1, so
//! ESC sequences too) and Unicode format and bidirectional controls are shown
//! escaped (`\u{202e}`) instead of acting on the terminal. `--json` output
//! keeps the exact text.
use std::borrow::Cow;

/// Unicode characters that change how text around them is displayed without
/// showing themselves: bidirectional embeddings, overrides and isolates, and
/// other format characters (zero-width joiners, the BOM, ...).
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{E0000}'..='\u{E007F}'
    )
}

/// todoctl's own colour marks (see `style`): escaped in client fields, kept
/// by the last guard, which then makes them colours.
fn is_colour_mark(c: char) -> bool {
    c == crate::style::OPEN || c == crate::style::CLOSE
}

fn unsafe_char(c: char, keep_newlines: bool) -> bool {
    (c.is_control() && !(keep_newlines && c == '\n'))
        || is_format(c)
        || (!keep_newlines && is_colour_mark(c))
}

fn escape_with(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    if !s.chars().any(|c| unsafe_char(c, keep_newlines)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            _ if !unsafe_char(c, keep_newlines) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// Every control and format character escaped, newlines included: for one
/// field on one line.
pub fn escape(s: &str) -> Cow<'_, str> {
    escape_with(s, false)
}

/// The same, keeping newlines: the last guard on everything todoctl prints
/// as text, so that a view that forgot to escape a field still cannot reach
/// the terminal's control sequences.
pub fn escape_keep_newlines(s: &str) -> Cow<'_, str> {
    escape_with(s, true)
}

/// What todoctl writes to stdout as text: every control escaped, then its
/// own colour marks made colours.
pub fn for_terminal(s: &str) -> String {
    crate::style::to_ansi(&escape_keep_newlines(s)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_are_shown_escaped() {
        assert_eq!(escape("plain text é"), "plain text é");
        assert_eq!(
            escape("\u{1b}]0;title\u{7}\u{1b}[2J"),
            "\\u{1b}]0;title\\u{7}\\u{1b}[2J"
        );
        assert_eq!(escape("a\u{202e}b\u{9b}c"), "a\\u{202e}b\\u{9b}c");
        assert_eq!(escape("two\nlines\t"), "two\\nlines\\t");
        assert_eq!(
            escape_keep_newlines("two\nlines\u{7f}"),
            "two\nlines\\u{7f}"
        );
    }
}
