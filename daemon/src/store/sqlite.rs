//! Statements run straight through SQLite's C API on a connection that sqlx
//! owns and has locked for us.
//!
//! sqlx runs each SQLite connection on a worker thread and hands every statement
//! and every row across threads: about 80 µs per statement and 1-2 µs per row on
//! this machine. A nine-statement write transaction spent most of its time in
//! those hand-offs, and listing a 100,000-task plan most of its time moving rows.
//! `SqliteConnection::lock_handle` is sqlx's door for direct FFI use: while its
//! guard lives, the worker is parked and the handle is ours. sqlx still opens
//! the connections (WAL, synchronous=FULL, busy_timeout, foreign keys), pools
//! them and runs the migrations.
use std::ffi::{c_char, c_int, CStr, CString};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use libsqlite3_sys as ffi;
use sqlx::sqlite::LockedSqliteHandle;
use sqlx::SqliteConnection;

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

fn last_error(db: *mut ffi::sqlite3) -> Error {
    // SAFETY: sqlite3_errmsg returns a NUL-terminated string owned by SQLite,
    // valid until the next call on this connection; it is copied at once.
    let message = unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(db)) };
    Error::Sqlite(message.to_string_lossy().into_owned())
}

/// A locked connection. Statements run synchronously on the caller's thread.
pub(super) struct Db<'c> {
    raw: *mut ffi::sqlite3,
    _guard: LockedSqliteHandle<'c>,
}

impl<'c> Db<'c> {
    pub async fn lock(conn: &'c mut SqliteConnection) -> Result<Db<'c>, Error> {
        let mut guard = conn.lock_handle().await?;
        let raw = guard.as_raw_handle().as_ptr();
        Ok(Db { raw, _guard: guard })
    }

    fn error(&self) -> Error {
        last_error(self.raw)
    }

    fn prepare(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Statement<'_>, Error> {
        let c_sql = CString::new(sql).map_err(|_| Error::Sqlite("NUL in SQL".into()))?;
        let mut raw = ptr::null_mut();
        // SAFETY: `self.raw` is an open connection held exclusively through
        // sqlx's lock; `c_sql` is NUL-terminated and outlives the call.
        let rc = unsafe {
            ffi::sqlite3_prepare_v2(self.raw, c_sql.as_ptr(), -1, &mut raw, ptr::null_mut())
        };
        let statement = match NonNull::new(raw) {
            Some(raw) if rc == ffi::SQLITE_OK => Statement {
                db: self.raw,
                raw,
                _borrow: PhantomData,
            },
            _ => return Err(self.error()),
        };
        // SAFETY: plain read of a prepared statement's parameter count.
        let expected = unsafe { ffi::sqlite3_bind_parameter_count(statement.raw.as_ptr()) };
        if expected as usize != params.len() {
            return Err(Error::Sqlite(format!(
                "statement takes {expected} parameters, {} given",
                params.len()
            )));
        }
        for (i, param) in params.iter().enumerate() {
            statement.bind(i + 1, *param)?;
        }
        Ok(statement)
    }

    /// Runs a statement that returns no rows; returns the rows it changed.
    pub fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<usize, Error> {
        let mut statement = self.prepare(sql, params)?;
        while statement.step()? {}
        drop(statement);
        // SAFETY: plain read of the connection's change counter.
        Ok(unsafe { ffi::sqlite3_changes(self.raw) } as usize)
    }

    /// Runs a query and maps every row, in order.
    pub fn query<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        mut each: impl FnMut(&Row<'_>) -> Result<T, Error>,
    ) -> Result<Vec<T>, Error> {
        let mut statement = self.prepare(sql, params)?;
        let mut out = Vec::new();
        while statement.step()? {
            out.push(each(&Row {
                statement: &statement,
            })?);
        }
        Ok(out)
    }

    /// The first row of a query, if any.
    pub fn query_row<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        each: impl FnOnce(&Row<'_>) -> Result<T, Error>,
    ) -> Result<Option<T>, Error> {
        let mut statement = self.prepare(sql, params)?;
        if statement.step()? {
            each(&Row {
                statement: &statement,
            })
            .map(Some)
        } else {
            Ok(None)
        }
    }

    /// Runs `body` in a transaction opened with `begin` ("BEGIN IMMEDIATE" for
    /// writes): committed if it returns Ok, rolled back otherwise. A failed
    /// COMMIT is rolled back too, so an error never leaves a half-done write.
    pub fn transaction<T>(
        &mut self,
        begin: &str,
        body: impl FnOnce(&mut Db<'c>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.rollback_if_open();
        self.execute(begin, &[])?;
        let result = body(self).and_then(|value| {
            self.execute("COMMIT", &[])?;
            Ok(value)
        });
        if result.is_err() {
            self.rollback_if_open();
        }
        result
    }

    /// Ends a transaction left open (by an error, or by a panic unwinding
    /// through `transaction`), so the pooled connection never carries one into
    /// its next use.
    fn rollback_if_open(&mut self) {
        if !self.autocommit() {
            if let Err(error) = self.execute("ROLLBACK", &[]) {
                tracing::error!(%error, "ROLLBACK failed");
            }
        }
    }

    fn autocommit(&self) -> bool {
        // SAFETY: plain read of the connection's transaction state.
        unsafe { ffi::sqlite3_get_autocommit(self.raw) != 0 }
    }
}

impl Drop for Db<'_> {
    fn drop(&mut self) {
        self.rollback_if_open();
    }
}

/// A prepared statement, finalized on drop. It borrows the `Db` it came from,
/// so it cannot outlive the lock.
struct Statement<'d> {
    db: *mut ffi::sqlite3,
    raw: NonNull<ffi::sqlite3_stmt>,
    _borrow: PhantomData<&'d mut ()>,
}

impl Drop for Statement<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from sqlite3_prepare_v2 and is finalized once.
        unsafe {
            ffi::sqlite3_finalize(self.raw.as_ptr());
        }
    }
}

impl Statement<'_> {
    fn bind(&self, index: usize, param: Param<'_>) -> Result<(), Error> {
        let stmt = self.raw.as_ptr();
        let i = index as c_int;
        // SAFETY: a prepared statement of the connection we hold; text is copied
        // by SQLite before returning (SQLITE_TRANSIENT).
        let rc = unsafe {
            match param {
                Param::Null => ffi::sqlite3_bind_null(stmt, i),
                Param::Int(n) => ffi::sqlite3_bind_int64(stmt, i, n),
                Param::Text(text) => ffi::sqlite3_bind_text(
                    stmt,
                    i,
                    text.as_ptr() as *const c_char,
                    text.len() as c_int,
                    ffi::SQLITE_TRANSIENT(),
                ),
            }
        };
        if rc == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(last_error(self.db))
        }
    }

    /// Advances to the next row; `false` when there is none.
    fn step(&mut self) -> Result<bool, Error> {
        // SAFETY: a prepared statement of an open connection we hold.
        match unsafe { ffi::sqlite3_step(self.raw.as_ptr()) } {
            ffi::SQLITE_ROW => Ok(true),
            ffi::SQLITE_DONE => Ok(false),
            _ => Err(last_error(self.db)),
        }
    }
}

/// One column of the current row.
enum Value<'a> {
    Null,
    Integer(i64),
    Text(&'a str),
}

/// The current row of a query. Its text borrows SQLite's buffers, valid until
/// the statement steps again, which the borrow checker rules out while a `Row`
/// is alive.
pub(super) struct Row<'s> {
    statement: &'s Statement<'s>,
}

impl Row<'_> {
    fn value(&self, index: usize) -> Result<Value<'_>, Error> {
        let stmt = self.statement.raw.as_ptr();
        let i = index as c_int;
        // SAFETY: the statement has a current row (we only build a Row after
        // step() returned one); the pointer and length describe SQLite's buffer
        // for this column, valid for the lifetime of this borrow.
        unsafe {
            match ffi::sqlite3_column_type(stmt, i) {
                ffi::SQLITE_NULL => Ok(Value::Null),
                ffi::SQLITE_INTEGER => Ok(Value::Integer(ffi::sqlite3_column_int64(stmt, i))),
                _ => {
                    let text = ffi::sqlite3_column_text(stmt, i);
                    if text.is_null() {
                        // NULL text for a non-NULL column means SQLite ran out of memory.
                        return Err(Error::Sqlite(format!("column {index}: out of memory")));
                    }
                    let len = ffi::sqlite3_column_bytes(stmt, i) as usize;
                    std::str::from_utf8(std::slice::from_raw_parts(text, len))
                        .map(Value::Text)
                        .map_err(|_| Error::Corrupt(format!("column {index} is not UTF-8")))
                }
            }
        }
    }

    pub fn int(&self, index: usize) -> Result<i64, Error> {
        match self.value(index)? {
            Value::Integer(n) => Ok(n),
            _ => Err(Error::Corrupt(format!("column {index} is not an integer"))),
        }
    }

    pub fn opt_int(&self, index: usize) -> Result<Option<i64>, Error> {
        match self.value(index)? {
            Value::Null => Ok(None),
            Value::Integer(n) => Ok(Some(n)),
            Value::Text(_) => Err(Error::Corrupt(format!("column {index} is not an integer"))),
        }
    }

    pub fn text(&self, index: usize) -> Result<&str, Error> {
        match self.value(index)? {
            Value::Text(t) => Ok(t),
            _ => Err(Error::Corrupt(format!("column {index} is not text"))),
        }
    }

    pub fn opt_text(&self, index: usize) -> Result<Option<&str>, Error> {
        match self.value(index)? {
            Value::Null => Ok(None),
            Value::Text(t) => Ok(Some(t)),
            Value::Integer(_) => Err(Error::Corrupt(format!("column {index} is not text"))),
        }
    }

    /// A text column parsed into a domain value (status, priority, kind).
    pub fn parsed<T: std::str::FromStr>(&self, index: usize, what: &str) -> Result<T, Error> {
        let text = self.text(index)?;
        text.parse()
            .map_err(|_| Error::Corrupt(format!("unknown {what} {text:?} in the database")))
    }
}
