//! Template-source rewrite that makes minijinja parse a chat template the way transformers' Jinja2
//! environment does.
//!
//! minijinja and Jinja2 agree on almost everything a chat template uses; the differences that change
//! rendered bytes sit in the *lexer* (newlines, string-literal escapes, `{% raw %}`), in one syntax
//! extension (`{% generation %}`) and in one runtime check (iterating over `None`). All of them can be
//! fixed by rewriting the template source once, before it is compiled, so the engine itself stays
//! stock. The rewrite is a single left-to-right scan: template data and comments are copied verbatim,
//! and inside `{{ ... }}` / `{% ... %}` only string literals, identifiers and brackets are recognised
//! (enough to find where a tag ends, as Jinja2's lexer does with its bracket-balancing stack).
//!
//! The rules, each explained where it is applied:
//! 1. `\r\n` and lone `\r` become `\n` ([`normalize_newlines`]).
//! 2. String literals are re-encoded from Python `unicode-escape` semantics to minijinja escapes
//!    ([`rewrite_string`]).
//! 3. `{% for T in ITER ... %}` becomes `{% for T in (ITER)|__hf_iter ... %}` ([`rewrite_for`]).
//! 4. `{% generation %}` / `{% endgeneration %}` become a call block on [`GENERATION_MACRO`].
//! 5. The newline right after `{% raw %}` is doubled ([`copy_raw_block`]).

use std::borrow::Cow;

/// Name of the filter that rule 3 inserts; the environment registers it (it rejects `None`).
pub(super) const ITER_FILTER: &str = "__hf_iter";

/// Rule 4: transformers' `AssistantTracker` extension compiles `{% generation %}body{% endgeneration %}`
/// to a `CallBlock` whose caller renders the body in its own scope and returns it unchanged (it only
/// records offsets for assistant masks). A `{% call %}` of this macro is the same construct in
/// minijinja; `{% filter %}` would not do, because `set`s inside it leak out. Prepended without a
/// newline so that line numbers in error messages do not move.
const GENERATION_MACRO: &str = "{% macro __hf_generation() %}{{ caller() }}{% endmacro %}";

/// Rewrites a chat-template source for minijinja. Fails only on string-literal escapes that Jinja2
/// itself rejects or that would need the Unicode name table (`\N{...}`).
pub(super) fn preprocess(source: &str) -> Result<String, String> {
    let src = normalize_newlines(source);
    let src: &str = &src;
    let bytes = src.as_bytes();
    let n = bytes.len();
    let mut out = String::with_capacity(n + GENERATION_MACRO.len() + 64);
    let mut uses_generation = false;
    let mut i = 0;
    while i < n {
        let Some(j) = src[i..].find('{').map(|off| i + off) else {
            out.push_str(&src[i..]);
            break;
        };
        out.push_str(&src[i..j]);
        let next = bytes.get(j + 1).copied();
        if next == Some(b'%') {
            if let Some(end) = raw_block_end(src, j) {
                copy_raw_block(&src[j..end], &mut out);
                i = end;
                continue;
            }
        }
        match next {
            Some(b'#') => {
                // Comments are copied verbatim; minijinja applies the same whitespace control to them.
                let end = src[j + 2..].find("#}").map_or(n, |off| j + 2 + off + 2);
                out.push_str(&src[j..end]);
                i = end;
            }
            Some(open @ (b'%' | b'{')) => {
                i = rewrite_tag(src, j, open == b'%', &mut out, &mut uses_generation)?;
            }
            _ => {
                out.push('{');
                i = j + 1;
            }
        }
    }
    if uses_generation {
        out.insert_str(0, GENERATION_MACRO);
    }
    Ok(out)
}

/// Rule 1: Jinja2's lexer rewrites every `\r\n` and lone `\r` to its `newline_sequence` (`"\n"`), in
/// template data *and* inside string literals; minijinja keeps them (and its `trim_blocks` then eats
/// only the `\n` of a `\r\n`). Many published templates are stored with CRLF line endings.
fn normalize_newlines(source: &str) -> Cow<'_, str> {
    if source.contains('\r') {
        Cow::Owned(source.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        Cow::Borrowed(source)
    }
}

/// If a `{% raw %}` tag starts at `start` and an `{% endraw %}` follows, returns the end of the whole
/// block (after the `endraw` tag), as Jinja2's `raw` lexer rule matches it.
fn raw_block_end(src: &str, start: usize) -> Option<usize> {
    let after_open = match_keyword_tag(src, start, "raw")?;
    let mut from = after_open;
    while let Some(off) = src[from..].find("{%") {
        let at = from + off;
        if let Some(end) = match_keyword_tag(src, at, "endraw") {
            return Some(end);
        }
        from = at + 2;
    }
    None
}

/// Matches `{%[-+]?\s*KEYWORD\s*[-+]?%}` at `at`; returns the offset after the closing `%}`.
fn match_keyword_tag(src: &str, at: usize, keyword: &str) -> Option<usize> {
    let rest = src[at..].strip_prefix("{%")?;
    let rest = rest.strip_prefix(['-', '+']).unwrap_or(rest);
    let rest = rest.trim_start().strip_prefix(keyword)?.trim_start();
    let rest = rest.strip_prefix(['-', '+']).unwrap_or(rest);
    let rest = rest.strip_prefix("%}")?;
    Some(src.len() - rest.len())
}

/// Rule 5: Jinja2 does not apply `trim_blocks` to the newline right after `{% raw %}` (the raw block's
/// content is lexed verbatim), minijinja does. Doubling that newline leaves exactly one in the
/// output. Not needed when the tag ends in `-%}` (both strip) or `+%}` (both keep).
fn copy_raw_block(block: &str, out: &mut String) {
    let open_end = block.find("%}").map_or(block.len(), |p| p + 2);
    let marker = block[..open_end - 2].chars().next_back();
    out.push_str(&block[..open_end]);
    if !matches!(marker, Some('-' | '+')) && block[open_end..].starts_with('\n') {
        out.push('\n');
    }
    out.push_str(&block[open_end..]);
}

/// Copies the `{{ ... }}` or `{% ... %}` tag starting at `start`, rewriting its body; returns the
/// offset after the tag. An unterminated tag is copied as is (minijinja reports the syntax error).
fn rewrite_tag(
    src: &str,
    start: usize,
    is_block: bool,
    out: &mut String,
    uses_generation: &mut bool,
) -> Result<usize, String> {
    let bytes = src.as_bytes();
    let n = bytes.len();
    let end_marker: &[u8] = if is_block { b"%}" } else { b"}}" };
    let mut p = start + 2;
    if matches!(bytes.get(p), Some(b'-' | b'+')) {
        p += 1;
    }
    // The tag ends at `}}` / `%}` (optionally preceded by `-`/`+`) outside string literals and at
    // bracket depth 0, like Jinja2's lexer; `{{ {'a': {'b': 1}} }}` must not end at the first `}}`.
    let mut depth = 0usize;
    let mut q = p;
    while q < n {
        let c = bytes[q];
        if c == b'\'' || c == b'"' {
            q = string_literal_end(src, q).unwrap_or(q + 1);
            continue;
        }
        if depth == 0
            && (bytes[q..].starts_with(end_marker)
                || (matches!(c, b'-' | b'+') && bytes[q + 1..].starts_with(end_marker)))
        {
            break;
        }
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        q += 1;
    }
    if q >= n {
        out.push_str(&src[start..]);
        return Ok(n);
    }
    let body_end = q;
    if matches!(bytes[q], b'-' | b'+') {
        q += 1;
    }
    let body = &src[p..body_end];
    out.push_str(&src[start..p]);
    if is_block {
        rewrite_block_body(body, out, uses_generation)?;
    } else {
        for tok in tokenize(body) {
            push_token(&tok, out)?;
        }
    }
    out.push_str(&src[body_end..q + 2]);
    Ok(q + 2)
}

/// Returns the end (exclusive) of the string literal starting at `start` (a quote), or `None` when it
/// is not terminated; Jinja2's pattern is `'([^'\\]*(?:\\.[^'\\]*)*)'` (and the same with `"`).
fn string_literal_end(src: &str, start: usize) -> Option<usize> {
    let bytes = src.as_bytes();
    let quote = bytes[start];
    let mut q = start + 1;
    while q < bytes.len() {
        match bytes[q] {
            b'\\' => q += 2,
            c if c == quote => return Some(q + 1),
            _ => q += 1,
        }
    }
    None
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Name,
    Open,
    Close,
    Ws,
    Other,
}

struct Token<'a> {
    kind: Kind,
    text: &'a str,
}

/// Just enough of a tokenizer for the rewrite: string literals, identifiers, brackets, whitespace;
/// everything else is one character at a time.
fn tokenize(body: &str) -> Vec<Token<'_>> {
    let mut toks = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let c = body[i..].chars().next().unwrap_or('\0');
        let (kind, end) = match c {
            '\'' | '"' => match string_literal_end(body, i) {
                Some(end) => (Kind::Str, end),
                None => (Kind::Other, i + 1),
            },
            '(' | '[' | '{' => (Kind::Open, i + 1),
            ')' | ']' | '}' => (Kind::Close, i + 1),
            c if c.is_whitespace() => (Kind::Ws, scan_while(body, i, char::is_whitespace)),
            c if c == '_' || c.is_alphabetic() => (
                Kind::Name,
                scan_while(body, i, |c| c == '_' || c.is_alphanumeric()),
            ),
            c => (Kind::Other, i + c.len_utf8()),
        };
        toks.push(Token {
            kind,
            text: &body[i..end],
        });
        i = end;
    }
    toks
}

fn scan_while(s: &str, start: usize, pred: impl Fn(char) -> bool) -> usize {
    s[start..]
        .char_indices()
        .find(|&(_, c)| !pred(c))
        .map_or(s.len(), |(off, _)| start + off)
}

fn push_token(tok: &Token<'_>, out: &mut String) -> Result<(), String> {
    if tok.kind == Kind::Str {
        rewrite_string(tok.text, out)
    } else {
        out.push_str(tok.text);
        Ok(())
    }
}

fn rewrite_block_body(
    body: &str,
    out: &mut String,
    uses_generation: &mut bool,
) -> Result<(), String> {
    let toks = tokenize(body);
    let mut words = toks.iter().filter(|t| t.kind != Kind::Ws);
    let head = words
        .next()
        .filter(|t| t.kind == Kind::Name)
        .map(|t| t.text);
    let alone = words.next().is_none();
    match head {
        // Rule 4 (see GENERATION_MACRO).
        Some("generation") if alone => {
            *uses_generation = true;
            out.push_str(&body.replacen("generation", "call __hf_generation()", 1));
            Ok(())
        }
        Some("endgeneration") if alone => {
            out.push_str(&body.replacen("endgeneration", "endcall", 1));
            Ok(())
        }
        Some("for") => rewrite_for(&toks, out),
        _ => toks.iter().try_for_each(|t| push_token(t, out)),
    }
}

/// Rule 3: transformers always passes `tools` and `documents`, as `None` when absent, and Jinja2 raises
/// `TypeError: 'NoneType' object is not iterable` on `{% for tool in tools %}`; minijinja silently
/// loops zero times, so templates that should reject a request render it. The iterable goes through
/// a filter that raises on `None`. `ITER` ends at the first identifier `if` or `recursive` at bracket
/// depth 0: Jinja2 parses it without conditional expressions, so a bare `if` there always starts the
/// loop filter. The parentheses keep `a|b`, `a, b` and `x if c else y` intact.
fn rewrite_for(toks: &[Token<'_>], out: &mut String) -> Result<(), String> {
    #[derive(PartialEq)]
    enum State {
        Target,
        Iter,
        Rest,
    }
    let mut state = State::Target;
    let mut depth = 0i32;
    let mut iter = String::new();
    let close_iter = |iter: &str, out: &mut String| {
        out.push_str(" (");
        out.push_str(iter.trim());
        out.push_str(")|");
        out.push_str(ITER_FILTER);
        out.push(' ');
    };
    for tok in toks {
        match tok.kind {
            Kind::Open => depth += 1,
            Kind::Close => depth -= 1,
            _ => {}
        }
        let at_top_name = |word: &str| depth == 0 && tok.kind == Kind::Name && tok.text == word;
        match state {
            State::Target => {
                push_token(tok, out)?;
                if at_top_name("in") {
                    state = State::Iter;
                }
            }
            State::Iter if at_top_name("if") || at_top_name("recursive") => {
                close_iter(&iter, out);
                push_token(tok, out)?;
                state = State::Rest;
            }
            State::Iter => push_token(tok, &mut iter)?,
            State::Rest => push_token(tok, out)?,
        }
    }
    if state == State::Iter {
        close_iter(&iter, out);
    }
    Ok(())
}

/// Rule 2: Jinja2 decodes a string literal with Python's `unicode-escape` codec (after rule 1), which
/// differs from minijinja's escapes: backslash-newline is a line continuation (Python drops both,
/// minijinja keeps them; Mistral-Small-3.1 writes its default system prompt that way), `\a` and `\v`
/// exist, `\UXXXXXXXX` exists, octal escapes go up to `\777`, and an unknown escape such as `\/` keeps
/// its backslash (minijinja turns `\/` into `/`). `lit` includes its quotes.
fn rewrite_string(lit: &str, out: &mut String) -> Result<(), String> {
    let quote = &lit[..1];
    let body = &lit[1..lit.len() - 1];
    out.push_str(quote);
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('\\');
            break;
        };
        match d {
            '\n' => {}
            '\\' | '\'' | '"' | 'n' | 't' | 'r' | 'b' | 'f' => {
                out.push('\\');
                out.push(d);
            }
            'a' => out.push_str("\\x07"),
            'v' => out.push_str("\\x0b"),
            'x' | 'u' | 'U' => {
                let width = match d {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut hex = String::with_capacity(width);
                while hex.len() < width {
                    match chars.peek() {
                        Some(h) if h.is_ascii_hexdigit() => {
                            hex.push(*h);
                            chars.next();
                        }
                        _ => break,
                    }
                }
                if hex.len() < width {
                    return Err(format!("truncated \\{d} escape in string literal {lit}"));
                }
                let cp = u32::from_str_radix(&hex, 16).map_err(|e| e.to_string())?;
                if d == 'U' && cp > 0x10FFFF {
                    return Err(format!("illegal Unicode character in string literal {lit}"));
                }
                push_code_point_escape(cp, out);
            }
            '0'..='7' => {
                let mut value = d.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|o| o.to_digit(8)) {
                        Some(digit) => {
                            value = value * 8 + digit;
                            chars.next();
                        }
                        None => break,
                    }
                }
                push_code_point_escape(value, out);
            }
            'N' => {
                return Err(format!(
                    "\\N{{...}} escapes are not supported (string literal {lit})"
                ))
            }
            d if d.is_ascii() => {
                out.push_str("\\\\");
                out.push(d);
            }
            d => {
                // Jinja2 first encodes the literal with `backslashreplace`, so a backslash before a
                // non-ASCII character becomes `\\xe9` and decodes to the four characters `\xe9`.
                out.push_str("\\\\");
                let cp = d as u32;
                out.push_str(&match cp {
                    0..=0xFF => format!("x{cp:02x}"),
                    0x100..=0xFFFF => format!("u{cp:04x}"),
                    _ => format!("U{cp:08x}"),
                });
            }
        }
    }
    out.push_str(quote);
    Ok(())
}

/// Writes a code point as minijinja escapes: `\uXXXX`, or a surrogate pair, which minijinja joins.
fn push_code_point_escape(cp: u32, out: &mut String) {
    if cp > 0xFFFF {
        let v = cp - 0x10000;
        out.push_str(&format!(
            "\\u{:04x}\\u{:04x}",
            0xD800 + (v >> 10),
            0xDC00 + (v & 0x3FF)
        ));
    } else {
        out.push_str(&format!("\\u{cp:04x}"));
    }
}

#[cfg(test)]
mod tests {
    use super::preprocess;

    fn pre(s: &str) -> String {
        preprocess(s).unwrap()
    }

    #[test]
    fn newlines_are_normalised_everywhere() {
        assert_eq!(pre("a\r\nb\rc{{ 'x\r\ny' }}"), "a\nb\nc{{ 'x\ny' }}");
    }

    #[test]
    fn for_loops_get_the_none_check() {
        assert_eq!(
            pre("{% for t in tools %}"),
            "{% for t in (tools)|__hf_iter %}"
        );
        assert_eq!(
            pre("{%- for m in messages if m.role != 'system' -%}"),
            "{%- for m in (messages)|__hf_iter if m.role != 'system' -%}"
        );
        assert_eq!(
            pre("{% for k, v in d.items() recursive %}"),
            "{% for k, v in (d.items())|__hf_iter recursive %}"
        );
        assert_eq!(
            pre("{% for x in f(a if b else c) if x %}"),
            "{% for x in (f(a if b else c))|__hf_iter if x %}"
        );
        assert_eq!(
            pre("{% for x in 'in if' %}"),
            "{% for x in ('in if')|__hf_iter %}"
        );
    }

    #[test]
    fn generation_becomes_a_call_block() {
        assert_eq!(
            pre("a{%- generation -%}b{% endgeneration %}"),
            "{% macro __hf_generation() %}{{ caller() }}{% endmacro %}a{%- call __hf_generation() -%}b{% endcall %}"
        );
        assert_eq!(pre("{{ generation }}"), "{{ generation }}");
    }

    #[test]
    fn string_escapes_follow_python() {
        assert_eq!(pre("{{ 'a\\\nb' }}"), "{{ 'ab' }}");
        assert_eq!(pre(r#"{{ "\/\d\a\v" }}"#), r#"{{ "\\/\\d\x07\x0b" }}"#);
        assert_eq!(
            pre(r"{{ '\U0001F680\u00e9\101' }}"),
            r"{{ '\ud83d\ude80\u00e9\u0041' }}"
        );
        assert_eq!(pre(r"{{ '\n\t\'\\' }}"), r"{{ '\n\t\'\\' }}");
        assert_eq!(pre("{{ '\\é' }}"), r"{{ '\\xe9' }}");
        assert!(preprocess(r"{{ '\N{BULLET}' }}").is_err());
        assert!(preprocess(r"{{ '\x4' }}").is_err());
    }

    #[test]
    fn tags_end_outside_strings_and_brackets() {
        assert_eq!(
            pre("{{ {'a': {'b': '}}'}} }}x"),
            "{{ {'a': {'b': '}}'}} }}x"
        );
        assert_eq!(pre("{%- set x = '%}' -%}y"), "{%- set x = '%}' -%}y");
        assert_eq!(pre("{# {{ '\\/' }} #}"), "{# {{ '\\/' }} #}");
        assert_eq!(pre("{ a } {"), "{ a } {");
        assert_eq!(pre("{{ unterminated"), "{{ unterminated");
    }

    #[test]
    fn raw_blocks_keep_their_first_newline() {
        assert_eq!(
            pre("{% raw %}\n{{ '\\/' }}{% endraw %}"),
            "{% raw %}\n\n{{ '\\/' }}{% endraw %}"
        );
        assert_eq!(
            pre("{% raw -%}\nx{% endraw %}"),
            "{% raw -%}\nx{% endraw %}"
        );
    }
}
