//! The vocabulary of the todo graph: ids, statuses, priorities, kinds and readiness,
//! with their parsing and validation. Plain data, no I/O.
use std::fmt;
use std::str::FromStr;

use super::Error;

/// Server-assigned task id, shown as `t<number>`. Unique across plans, never reused.
///
/// Negative values are provisional ids for tasks that a batch is about to create;
/// they never leave the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub i64);

impl TaskId {
    pub fn is_provisional(self) -> bool {
        self.0 < 0
    }

    /// Parses a client-supplied id, naming `field` when it is malformed.
    pub fn parse(field: &str, text: &str) -> Result<TaskId, Error> {
        // The prefix is required: agents often send their own ids ("1", "2"),
        // which must not silently address someone else's task t1.
        let text = text.trim();
        match text.strip_prefix('t').map(|d| (d, d.parse::<i64>())) {
            Some((digits, Ok(n))) if n > 0 && digits.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(TaskId(n))
            }
            _ => Err(Error::invalid(
                field,
                format!(
                    "{:?} is not a task id of this server (ids look like t42)",
                    clip(text)
                ),
            )),
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_provisional() {
            write!(f, "new#{}", -self.0)
        } else {
            write!(f, "t{}", self.0)
        }
    }
}

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal, { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parses a client-supplied value, naming `field` when it is unknown.
            pub fn parse(field: &str, text: &str) -> Result<$name, Error> {
                text.parse().map_err(|_| {
                    let expected: Vec<&str> = Self::ALL.iter().map(|v| v.as_str()).collect();
                    Error::invalid(field, format!(
                        "unknown {} {:?}; expected one of {}", $what, clip(text), expected.join(", ")
                    ))
                })
            }
        }

        impl FromStr for $name {
            type Err = ();
            fn from_str(s: &str) -> Result<Self, ()> {
                match s { $($text => Ok($name::$variant),)+ _ => Err(()) }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// Where a task stands. See `transition` for the legal moves between them.
    Status, "status", {
    Pending => "pending",
    InProgress => "in_progress",
    Completed => "completed",
    Cancelled => "cancelled",
    Failed => "failed",
});

impl Status {
    /// Started tasks are the ones whose dependencies must all be completed.
    pub fn is_started(self) -> bool {
        matches!(self, Status::InProgress | Status::Completed)
    }
}

string_enum!(Priority, "priority", {
    High => "high",
    Medium => "medium",
    Low => "low",
});

pub use super::kind::Kind;

string_enum!(
    /// Derived, never stored: whether a pending task can start.
    Readiness, "readiness", {
    Ready => "ready",
    Blocked => "blocked",
    BlockedByFailure => "blocked_by_failure",
});

/// At most this much of a bad value is echoed back in an error message.
const ECHO_CHARS: usize = 64;

/// Cuts a client's value for quoting in an error, so that a megabyte of bad
/// input does not become a megabyte of error message.
pub fn clip(text: &str) -> String {
    match text.char_indices().nth(ECHO_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

/// Longest task content accepted, in bytes.
pub const MAX_CONTENT_BYTES: usize = 4096;
/// Longest plan name accepted, in bytes.
pub const MAX_PLAN_NAME_BYTES: usize = 128;
/// Longest reason or actor name accepted, in bytes.
pub const MAX_REASON_BYTES: usize = 1024;
/// Largest phase spec accepted, in bytes.
pub const MAX_SPEC_BYTES: usize = 64 * 1024;

/// Trims content and checks it is non-empty and bounded.
pub fn validate_content(field: &str, content: &str) -> Result<String, Error> {
    let trimmed = content.trim();
    if trimmed.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if trimmed.len() > MAX_CONTENT_BYTES {
        return Err(Error::invalid(
            field,
            format!(
                "is {} bytes; at most {MAX_CONTENT_BYTES} are allowed",
                trimmed.len()
            ),
        ));
    }
    if trimmed.chars().any(|c| c == '\0') {
        return Err(Error::invalid(field, "must not contain NUL characters"));
    }
    Ok(trimmed.to_string())
}

/// Plan names are identifiers chosen by clients: letters, digits and `._:-`.
pub fn validate_plan_name(field: &str, name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if name.len() > MAX_PLAN_NAME_BYTES {
        return Err(Error::invalid(
            field,
            format!("is longer than {MAX_PLAN_NAME_BYTES} bytes"),
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        return Err(Error::invalid(
            field,
            format!("{bad:?} is not allowed; use letters, digits and . _ : -"),
        ));
    }
    Ok(())
}

/// Reasons and actor names are free text, bounded.
pub fn validate_free_text(field: &str, text: &str) -> Result<String, Error> {
    if text.len() > MAX_REASON_BYTES {
        return Err(Error::invalid(
            field,
            format!("is longer than {MAX_REASON_BYTES} bytes"),
        ));
    }
    Ok(text.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_parse_and_print() {
        assert_eq!(TaskId::parse("id", "t42").unwrap(), TaskId(42));
        assert_eq!(TaskId::parse("id", " t7 ").unwrap(), TaskId(7));
        assert_eq!(TaskId(42).to_string(), "t42");
        for bad in ["", "1", "t", "t0", "t-1", "x1", "t1.5", "t+3", "T4"] {
            let err = TaskId::parse("todos[0].id", bad).unwrap_err();
            assert!(err.to_string().contains("todos[0].id"), "{err}");
        }
    }

    #[test]
    fn unknown_enum_values_name_the_field_and_the_choices() {
        let err = Status::parse("todos[1].status", "done").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("todos[1].status"), "{text}");
        assert!(text.contains("in_progress"), "{text}");
        assert_eq!(Priority::parse("p", "high").unwrap(), Priority::High);
    }

    #[test]
    fn content_is_trimmed_and_bounded() {
        assert_eq!(validate_content("c", "  hi \n").unwrap(), "hi");
        assert!(validate_content("c", " \t\n").is_err());
        assert!(validate_content("c", &"x".repeat(MAX_CONTENT_BYTES + 1)).is_err());
        assert!(validate_content("c", "a\0b").is_err());
    }

    #[test]
    fn plan_names_are_identifiers() {
        assert!(validate_plan_name("plan", "session-1:abc_2.x").is_ok());
        for bad in ["", "has space", "slash/x", "é"] {
            assert!(validate_plan_name("plan", bad).is_err(), "{bad}");
        }
    }
}
