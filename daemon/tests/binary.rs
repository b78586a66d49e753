//! The `todod` binary as a shell meets it before it serves anything: its
//! version and usage, and a clear refusal of a flag it does not know.
//!
//! It is also why the README's test command builds `target/<profile>/todod`:
//! cargo builds a package's binaries for that package's integration tests,
//! and the end-to-end suite (another package) starts this binary.
use std::process::Command;

fn todod(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_todod"))
        .args(args)
        .env_remove("TODOD_STATE_DIR")
        .output()
        .expect("todod runs")
}

#[test]
fn it_says_its_version_and_usage() {
    let version = todod(&["--version"]);
    assert!(version.status.success(), "{version:?}");
    let text = String::from_utf8_lossy(&version.stdout);
    assert!(
        text.starts_with("todod ") && text.contains(env!("CARGO_PKG_VERSION")),
        "{text}"
    );
    let help = todod(&["--help"]);
    assert!(help.status.success(), "{help:?}");
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in ["--state-dir", "--listen", "--socket"] {
        assert!(text.contains(flag), "--help names {flag}:\n{text}");
    }
}

#[test]
fn an_unknown_flag_is_refused_by_name_and_starts_nothing() {
    let out = todod(&["--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("--no-such-flag"), "{text}");
}

/// A user's mistake is said in words, with its cause, and never as a stack
/// trace, even with RUST_BACKTRACE=1 in the environment (as on many
/// machines): a restore of a file that does not exist, which also changes
/// nothing on disk.
#[test]
fn a_user_error_prints_no_stack_trace() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-backup.db");
    let out = Command::new(env!("CARGO_BIN_EXE_todod"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("restore")
        .arg(&missing)
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .output()
        .expect("todod runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.starts_with("todod: "), "{text}");
    assert!(
        text.contains("no-such-backup.db: no such file"),
        "names the file and the reason in words: {text}"
    );
    assert!(
        !dir.path().join("state").exists(),
        "a failed restore leaves the state directory as it found it (absent)"
    );
    for trace in [
        "Stack backtrace",
        "stack backtrace",
        "backtrace:",
        "at /rustc/",
        "  0: ",
    ] {
        assert!(!text.contains(trace), "a stack trace ({trace:?}):\n{text}");
    }
}
