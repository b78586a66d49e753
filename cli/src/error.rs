//! Exit codes and turning any failure into one plain-words line for stderr.
use std::fmt;

use tonic::Code;

/// Exit codes, as shown at the end of `todoctl --help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  other error
  2  usage error or invalid input (including INVALID_ARGUMENT from the daemon)
  3  not found (unknown plan or task)
  4  failed precondition or conflict (illegal transition, unfinished
     dependencies, already exists, stale --expected-revision)
  5  daemon unreachable
  6  unauthenticated or permission denied
  `wait` only:
  10 the task (or a task of the plan) failed, or can no longer run because a
     dependency failed
  11 the task (or a task of the plan) was cancelled
  124 --timeout passed first";

/// The command's own words for the API's fields: the daemon names a bad
/// field as the request does (`spec_json: ...`), a person typed `--spec`.
static WORDS: std::sync::OnceLock<&'static [(&'static str, &'static str)]> =
    std::sync::OnceLock::new();

/// Set once, by the command about to run.
pub fn use_words(words: &'static [(&'static str, &'static str)]) {
    let _ = WORDS.set(words);
}

/// `message` with its leading field (`field: ...`, `field[2]: ...`,
/// `field.sub: ...`) in the command's words.
pub fn in_cli_words(message: &str, words: &[(&str, &str)]) -> String {
    for (field, said) in words {
        if let Some(rest) = message.strip_prefix(field) {
            if rest.starts_with(':') || rest.starts_with('[') || rest.starts_with('.') {
                return format!("{said}{rest}");
            }
        }
    }
    message.to_string()
}

/// What kind of failure ended the run; its discriminant is the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    Other = 1,
    Usage = 2,
    NotFound = 3,
    Conflict = 4,
    Unreachable = 5,
    Auth = 6,
    /// `wait`: what was waited for failed.
    Failed = 10,
    /// `wait`: what was waited for was cancelled.
    Cancelled = 11,
    /// `wait`: the timeout passed first (as coreutils' `timeout`).
    TimedOut = 124,
}

impl Exit {
    /// Exit code for a gRPC status code.
    pub fn from_code(code: Code) -> Exit {
        match code {
            Code::Ok => Exit::Ok,
            Code::InvalidArgument | Code::OutOfRange => Exit::Usage,
            Code::NotFound => Exit::NotFound,
            Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted => Exit::Conflict,
            Code::Unavailable => Exit::Unreachable,
            Code::Unauthenticated | Code::PermissionDenied => Exit::Auth,
            _ => Exit::Other,
        }
    }
}

/// An error raised by the client itself, carrying its exit code.
#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    pub message: String,
}

impl CliError {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        CliError {
            exit,
            message: message.into(),
        }
    }

    /// Invalid input or usage (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// What the error report needs to know about the invocation.
pub struct ReportCtx<'a> {
    pub addr: &'a str,
    pub token_set: bool,
}

/// The message for "cannot connect", naming the address and the root cause.
pub fn unreachable_message(addr: &str, cause: &str) -> String {
    format!("cannot reach todod at {addr}: {cause} (is the daemon running? start it with `todod`)")
}

/// The innermost cause of an error chain, which is where the useful words are
/// ("Connection refused (os error 111)" rather than "transport error").
pub fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = err;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// Maps a failure to its exit code and the line printed after `todoctl: `.
/// Returns `None` for a closed stdout (`todoctl ... | head`), which is not an error.
pub fn classify(err: &anyhow::Error, ctx: &ReportCtx<'_>) -> Option<(Exit, String)> {
    for cause in err.chain() {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::BrokenPipe {
                return None;
            }
        }
    }
    if let Some(e) = err.downcast_ref::<CliError>() {
        return Some((e.exit, e.message.clone()));
    }
    if let Some(status) = err.downcast_ref::<tonic::Status>() {
        return Some(status_message(status, ctx));
    }
    Some((Exit::Other, format!("{err:#}")))
}

fn status_message(status: &tonic::Status, ctx: &ReportCtx<'_>) -> (Exit, String) {
    let exit = Exit::from_code(status.code());
    let mut msg = status.message().trim().to_string();
    if msg.is_empty() {
        msg = status.code().description().to_string();
    }
    let msg = match exit {
        Exit::Unreachable => {
            let cause = match std::error::Error::source(status) {
                Some(src) => root_cause(src),
                None => msg,
            };
            unreachable_message(ctx.addr, &cause)
        }
        Exit::Auth if status.code() == Code::Unauthenticated => {
            if ctx.token_set {
                format!("{msg} (check --token / TODOD_TOKEN)")
            } else {
                format!("{msg} (the daemon wants a token: pass --token or set TODOD_TOKEN)")
            }
        }
        _ => in_cli_words(&msg, WORDS.get().copied().unwrap_or_default()),
    };
    (exit, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: ReportCtx<'static> = ReportCtx {
        addr: "http://127.0.0.1:50710",
        token_set: false,
    };

    fn classify_status(status: tonic::Status) -> (Exit, String) {
        classify(&anyhow::Error::new(status), &CTX).expect("an error")
    }

    #[test]
    fn grpc_codes_map_to_exit_codes() {
        assert_eq!(Exit::from_code(Code::InvalidArgument) as i32, 2);
        assert_eq!(Exit::from_code(Code::NotFound) as i32, 3);
        for c in [Code::FailedPrecondition, Code::AlreadyExists, Code::Aborted] {
            assert_eq!(Exit::from_code(c) as i32, 4);
        }
        assert_eq!(Exit::from_code(Code::Unavailable) as i32, 5);
        assert_eq!(Exit::from_code(Code::Unauthenticated) as i32, 6);
        assert_eq!(Exit::from_code(Code::PermissionDenied) as i32, 6);
        assert_eq!(Exit::from_code(Code::Internal) as i32, 1);
    }

    #[test]
    fn fields_are_named_in_the_commands_words() {
        let words = [
            ("spec_json", "--spec"),
            ("id", "TASK"),
            ("depends_on", "--after"),
        ];
        assert_eq!(
            in_cli_words("spec_json: not JSON", &words),
            "--spec: not JSON"
        );
        assert_eq!(
            in_cli_words("depends_on[1]: unknown", &words),
            "--after[1]: unknown"
        );
        assert_eq!(in_cli_words("identity: x", &words), "identity: x");
        assert_eq!(
            in_cli_words("task t9 not found", &words),
            "task t9 not found"
        );
    }

    #[test]
    fn status_uses_the_message_not_debug() {
        let (exit, msg) = classify_status(tonic::Status::not_found("task t9 not found"));
        assert_eq!(exit, Exit::NotFound);
        assert_eq!(msg, "task t9 not found");
    }

    #[test]
    fn context_does_not_hide_the_status() {
        let err =
            anyhow::Error::new(tonic::Status::aborted("stale revision")).context("writing todos");
        let (exit, _) = classify(&err, &CTX).expect("an error");
        assert_eq!(exit, Exit::Conflict);
    }

    #[test]
    fn unavailable_names_the_address() {
        let (exit, msg) = classify_status(tonic::Status::unavailable("connection refused"));
        assert_eq!(exit, Exit::Unreachable);
        assert!(msg.starts_with("cannot reach todod at http://127.0.0.1:50710: connection refused"));
        assert!(msg.contains("start it with `todod`"));
    }

    #[test]
    fn unauthenticated_hints_at_the_token() {
        let (exit, msg) = classify_status(tonic::Status::unauthenticated("missing token"));
        assert_eq!(exit, Exit::Auth);
        assert!(msg.contains("TODOD_TOKEN"), "{msg}");
    }

    #[test]
    fn broken_pipe_is_not_reported() {
        let err = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(classify(&err, &CTX).is_none());
    }
}
