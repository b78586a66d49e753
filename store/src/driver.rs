//! What the two database drivers (`sqlite`, `postgres`) share with the
//! statements above them (`sql`): bound parameters, column values, the
//! kinds of failure and of transaction, and the error for a statement the
//! store got wrong. It names neither driver, so the drivers stand on it
//! and `sql` stands on them, with no loop between the three.
use super::Error;

/// A bound parameter.
#[derive(Debug, Clone, Copy)]
pub(super) enum Param<'a> {
    Null,
    Int(i64),
    Text(&'a str),
}

impl From<i64> for Param<'_> {
    fn from(n: i64) -> Self {
        Param::Int(n)
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(text: &'a str) -> Self {
        Param::Text(text)
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(text: &'a String) -> Self {
        Param::Text(text)
    }
}

impl<'a, T: Into<Param<'a>>> From<Option<T>> for Param<'a> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Param::Null, Into::into)
    }
}

/// What kind of failure the database reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Another connection holds a lock past the timeout, or the database
    /// gave up a transaction to resolve a conflict: retrying may succeed.
    Busy,
    /// The disk (or the database's size limit) is full.
    Full,
    /// A constraint (unique, check, foreign key, trigger) refused the change.
    Constraint,
    /// Anything else: I/O errors, misuse, corruption, a lost connection.
    Other,
}

/// The kind of transaction to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Begin {
    /// A read transaction: one consistent snapshot.
    Read,
    /// A write transaction, serialised with every other write to the
    /// database (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: an advisory lock).
    Write,
}

/// A statement the store got wrong (a bug, not the database's failure).
pub(super) fn misuse(message: impl Into<String>) -> Error {
    Error::Misuse(message.into())
}

/// One column of a row.
pub(super) enum Value<'a> {
    Null,
    Integer(i64),
    Text(&'a str),
}
