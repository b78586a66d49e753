//! No client text reaches a terminal as control sequences: content, reasons
//! and errors carrying ESC sequences, C1 controls and bidirectional overrides
//! come out of every todoctl view escaped; `--json` keeps the exact text.
use serde_json::{json, Value};
use todod_e2e::cli::{await_line, spawn_watch, strings, Env};

const HOSTILE: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31mred\u{202e}desrever\u{2066}x";

/// A raw byte or character that would act on a terminal.
fn dangerous(text: &str) -> Option<char> {
    text.chars().find(|&c| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
    })
}

fn assert_safe(what: &str, text: &str) {
    if let Some(c) = dangerous(text) {
        panic!("{what}: {c:?} reached the terminal in {text:?}");
    }
}

#[test]
fn every_view_escapes_control_and_bidi_characters() {
    let env = Env::start();
    let plan = "hostile";
    let out = env.write(
        plan,
        &json!([{"content": format!("title {HOSTILE}")}, {"content": "second"}]),
    );
    let [a, b] = <[String; 2]>::try_from(strings(&out["created"])).expect("two");
    env.ok(&["dep", "add", &b, &a, "--reason", HOSTILE]);
    env.ok(&["start", &a, "--reason", HOSTILE]);

    let views: Vec<Vec<&str>> = vec![
        vec!["status"],
        vec!["status", plan],
        vec!["list", "-p", plan],
        vec!["list", "-p", plan, "--all"],
        vec!["show", &a],
        vec!["show", &b],
        vec!["graph", "-p", plan],
        vec!["read", "-p", plan],
        vec!["plan", "list"],
        vec!["plan", "show", plan],
    ];
    for view in &views {
        let shown = env.ok(view);
        assert_safe(&format!("{view:?}"), &shown);
        // The text is still there, escaped, for a person to see.
        if view[0] == "show" && view[1] == a {
            assert!(shown.contains("\\u{1b}]0;pwned"), "{shown}");
            assert!(shown.contains("\\u{202e}"), "{shown}");
        }
    }
    // --json keeps the exact text.
    let task: Value = env.json(&["show", &a]);
    assert_eq!(
        task["task"]["content"].as_str(),
        Some(format!("title {HOSTILE}").as_str())
    );

    // An error that quotes client text is escaped on stderr too.
    let run = env.run_stdin(
        &["write", "-p", plan],
        json!([{"content": "x", "status": HOSTILE}])
            .to_string()
            .as_bytes(),
    );
    assert_eq!(run.code, 2, "{run:#?}");
    assert_safe("stderr of a refused write", &run.stderr);

    // watch, in text.
    let (watch, lines) = spawn_watch(&env, &["watch", "-p", plan, "--from-start"]);
    let line = await_line(&lines, "the start of the hostile task", |l| {
        l.contains("status_changed")
    });
    assert_safe("watch", &line);
    drop(watch);
}

/// Colour only where a person asked for it or looks at a terminal: piped
/// output (as here) has none by default, `--color always` colours
/// todoctl's own markers and never client text, `--json` never.
#[test]
fn colour_only_when_asked_and_never_around_client_text() {
    let env = Env::start();
    let plan = "colours";
    let out = env.write(
        plan,
        &json!([
            {"content": "Done", "status": "completed"},
            {"content": format!("Broken {HOSTILE}"), "status": "in_progress"},
        ]),
    );
    let broken = strings(&out["created"])[1].clone();
    env.ok(&["fail", &broken, "--reason", "it broke"]);
    let plain = env.ok(&["list", "-p", plan]);
    assert!(!plain.contains('\u{1b}'), "{plain:?}");
    let coloured = env.ok(&["--color", "always", "list", "-p", plan]);
    assert!(coloured.contains("\u{1b}[32m[x]\u{1b}[0m"), "{coloured:?}");
    assert!(
        coloured.contains("\u{1b}[1;31m[!]\u{1b}[0m"),
        "{coloured:?}"
    );
    // The only escapes are the colours' own: the hostile content is still
    // shown escaped.
    let stripped = coloured
        .replace("\u{1b}[32m", "")
        .replace("\u{1b}[1;31m", "")
        .replace("\u{1b}[0m", "");
    assert_safe("list --color always", &stripped);
    let status = env.ok(&["--color", "never", "status", plan]);
    assert!(!status.contains('\u{1b}'), "{status:?}");
    let json = env.ok(&["--color", "always", "--json", "list", "-p", plan]);
    assert!(!json.contains("\u{1b}[3"), "{json:?}");
}
