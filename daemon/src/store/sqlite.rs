//! Statements run straight through SQLite's C API on connections that sqlx
//! opens and configures, and that the store owns.
//!
//! sqlx runs each SQLite connection on a worker thread and hands every statement
//! and every row across threads: about 80 µs per statement and 1-2 µs per row on
//! this machine. A nine-statement write transaction spent most of its time in
//! those hand-offs, and listing a 100,000-task plan most of its time moving rows.
//! `SqliteConnection::lock_handle` is sqlx's door for direct FFI use: while its
//! guard lives, the worker is parked and the handle is ours. sqlx still opens
//! the connections (WAL, synchronous=FULL, busy_timeout, foreign keys) and runs
//! the migrations.
//!
//! The sharp edges of the C API are closed here, once: statements are prepared
//! once per connection and cached; a statement with trailing SQL is refused
//! (SQLite would silently ignore it); binds use 64-bit lengths; SQLite's result
//! code is kept, so that busy, full and constraint failures stay distinct; and
//! a transaction opened inside another is an error, never a silent rollback of
//! the outer one.
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
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

/// What kind of failure SQLite reported, from its primary result code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Another connection holds a lock past the busy timeout.
    Busy,
    /// The disk (or the database's size limit) is full.
    Full,
    /// A constraint (unique, check, foreign key, trigger) refused the change.
    Constraint,
    /// Anything else: I/O errors, misuse, corruption.
    Other,
}

impl Failure {
    fn of(code: c_int) -> Failure {
        match code & 0xff {
            ffi::SQLITE_BUSY | ffi::SQLITE_LOCKED => Failure::Busy,
            ffi::SQLITE_FULL => Failure::Full,
            ffi::SQLITE_CONSTRAINT => Failure::Constraint,
            _ => Failure::Other,
        }
    }
}

fn last_error(db: *mut ffi::sqlite3) -> Error {
    // SAFETY: sqlite3_errmsg returns a NUL-terminated string owned by SQLite,
    // valid until the next call on this connection; it is copied at once.
    let (code, message) = unsafe {
        let code = ffi::sqlite3_extended_errcode(db);
        let message = CStr::from_ptr(ffi::sqlite3_errmsg(db));
        (code, message.to_string_lossy().into_owned())
    };
    Error::Sqlite {
        failure: Failure::of(code),
        code,
        message,
    }
}

/// For `INSERT ... RETURNING` that returned nothing, which SQLite never does.
pub(super) fn no_row() -> Error {
    misuse("INSERT ... RETURNING gave no row")
}

pub(super) fn misuse(message: impl Into<String>) -> Error {
    Error::Sqlite {
        failure: Failure::Other,
        code: ffi::SQLITE_MISUSE,
        message: message.into(),
    }
}

/// How many prepared statements a connection keeps. The store's SQL is a few
/// dozen fixed texts plus the filter combinations of listings; past this the
/// cache starts over rather than grow.
const CACHE_CAPACITY: usize = 128;

/// Prepared statements of one connection, by SQL text.
#[derive(Default)]
struct StatementCache {
    /// The connection the statements belong to; set on first use.
    db: Option<NonNull<ffi::sqlite3>>,
    statements: HashMap<String, NonNull<ffi::sqlite3_stmt>>,
}

impl StatementCache {
    fn finalize_all(&mut self) {
        for (_, statement) in self.statements.drain() {
            // SAFETY: each statement came from sqlite3_prepare_v3 on this
            // cache's connection and is finalized exactly once, here.
            unsafe {
                ffi::sqlite3_finalize(statement.as_ptr());
            }
        }
    }
}

/// A connection the store owns: sqlx's, plus the statements prepared on it.
pub(super) struct Conn {
    // Declared first so that its statements are finalized (by `Drop for Conn`)
    // before sqlx closes the connection, which panics if any are left.
    cache: StatementCache,
    /// `None` only while closing.
    sqlx: Option<SqliteConnection>,
}

// SAFETY: the cached statement pointers are only used under sqlx's handle lock,
// through `&mut Conn`, so never from two threads at once.
unsafe impl Send for Conn {}

impl Conn {
    pub fn new(sqlx: SqliteConnection) -> Conn {
        Conn {
            cache: StatementCache::default(),
            sqlx: Some(sqlx),
        }
    }

    /// Locks the connection for direct use; statements run synchronously on the
    /// caller's thread until the `Db` is dropped.
    pub async fn lock(&mut self) -> Result<Db<'_>, Error> {
        let sqlx = self
            .sqlx
            .as_mut()
            .expect("a connection is open until closed");
        let mut guard = sqlx.lock_handle().await?;
        let raw = guard.as_raw_handle();
        if self.cache.db.is_some_and(|db| db != raw) {
            // Not expected (sqlx keeps one handle per connection), but cached
            // statements must never be used on another handle.
            self.cache.finalize_all();
        }
        self.cache.db = Some(raw);
        Ok(Db {
            raw: raw.as_ptr(),
            cache: &mut self.cache,
            _guard: guard,
        })
    }

    /// Finalizes the cached statements and closes the connection.
    pub async fn close(mut self) {
        self.cache.finalize_all();
        if let Some(sqlx) = self.sqlx.take() {
            if let Err(error) = sqlx::Connection::close(sqlx).await {
                tracing::warn!(%error, "closing a database connection failed");
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Nothing else uses the handle now: we hold the connection exclusively
        // and no command of ours is in flight on sqlx's worker.
        self.cache.finalize_all();
    }
}

/// The kind of transaction to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Begin {
    /// `BEGIN`: a read transaction, one consistent snapshot.
    Read,
    /// `BEGIN IMMEDIATE`: takes the write lock at once.
    Write,
}

/// A locked connection. Statements run synchronously on the caller's thread.
pub(super) struct Db<'c> {
    raw: *mut ffi::sqlite3,
    cache: &'c mut StatementCache,
    _guard: LockedSqliteHandle<'c>,
}

impl<'c> Db<'c> {
    fn error(&self) -> Error {
        last_error(self.raw)
    }

    fn prepare_raw(&mut self, sql: &str) -> Result<NonNull<ffi::sqlite3_stmt>, Error> {
        let len = c_int::try_from(sql.len()).map_err(|_| misuse("SQL text too long"))?;
        let mut raw = ptr::null_mut();
        let mut tail: *const c_char = ptr::null();
        // SAFETY: `self.raw` is an open connection held exclusively through
        // sqlx's lock; `sql` is valid for `len` bytes (no NUL needed when the
        // length is given) and outlives the call; `tail` points into it.
        let rc = unsafe {
            ffi::sqlite3_prepare_v3(
                self.raw,
                sql.as_ptr() as *const c_char,
                len,
                ffi::SQLITE_PREPARE_PERSISTENT,
                &mut raw,
                &mut tail,
            )
        };
        if rc != ffi::SQLITE_OK {
            return Err(self.error());
        }
        let Some(statement) = NonNull::new(raw) else {
            return Err(misuse("empty SQL statement"));
        };
        // SQLite compiles only the first statement and ignores the rest: a
        // second statement in one text would silently never run.
        let consumed = if tail.is_null() {
            sql.len()
        } else {
            tail as usize - sql.as_ptr() as usize
        };
        let rest = sql[consumed..].trim_start_matches(|c: char| c.is_whitespace() || c == ';');
        if !rest.is_empty() {
            // SAFETY: finalizing the statement prepared just above, once.
            unsafe {
                ffi::sqlite3_finalize(statement.as_ptr());
            }
            return Err(misuse(format!(
                "trailing SQL after the first statement: {:?}",
                rest.chars().take(40).collect::<String>()
            )));
        }
        Ok(statement)
    }

    fn prepare(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Statement<'_>, Error> {
        let raw = match self.cache.statements.remove(sql) {
            Some(raw) => raw,
            None => self.prepare_raw(sql)?,
        };
        let statement = Statement {
            db: self.raw,
            raw,
            sql: Some(sql.to_string()),
            cache: &mut *self.cache,
            _borrow: PhantomData,
        };
        // SAFETY: plain read of a prepared statement's parameter count.
        let expected = unsafe { ffi::sqlite3_bind_parameter_count(statement.raw.as_ptr()) };
        if expected as usize != params.len() {
            return Err(misuse(format!(
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
        Ok(unsafe { ffi::sqlite3_changes64(self.raw) } as usize)
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

    /// Runs `body` in a transaction: committed if it returns Ok, rolled back
    /// otherwise. A failed COMMIT is rolled back too, so an error never leaves
    /// a half-done write. Opening a transaction inside another is refused.
    pub fn transaction<T>(
        &mut self,
        begin: Begin,
        body: impl FnOnce(&mut Db<'c>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if !self.autocommit() {
            return Err(Error::NestedTransaction);
        }
        self.execute(
            match begin {
                Begin::Read => "BEGIN",
                Begin::Write => "BEGIN IMMEDIATE",
            },
            &[],
        )?;
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
    /// through `transaction`), so the connection never carries one into its
    /// next use.
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

/// A prepared statement; on drop it is reset and goes back to the cache. It
/// borrows the `Db` it came from, so it cannot outlive the lock.
struct Statement<'d> {
    db: *mut ffi::sqlite3,
    raw: NonNull<ffi::sqlite3_stmt>,
    /// The text it is cached under; `None` once it must not be reused.
    sql: Option<String>,
    cache: &'d mut StatementCache,
    _borrow: PhantomData<&'d mut ()>,
}

impl Drop for Statement<'_> {
    fn drop(&mut self) {
        let stmt = self.raw.as_ptr();
        // SAFETY: `raw` is a statement of the connection we hold. Reset ends
        // any step in progress (releasing its read snapshot); cleared bindings
        // keep no pointer into the caller's buffers (SQLite copied them).
        unsafe {
            ffi::sqlite3_reset(stmt);
            ffi::sqlite3_clear_bindings(stmt);
        }
        match self.sql.take() {
            Some(sql) if self.cache.statements.len() < CACHE_CAPACITY => {
                self.cache.statements.insert(sql, self.raw);
            }
            Some(sql) => {
                self.cache.finalize_all();
                self.cache.statements.insert(sql, self.raw);
            }
            // SAFETY: not cached, so finalized here exactly once.
            None => unsafe {
                ffi::sqlite3_finalize(stmt);
            },
        }
    }
}

impl Statement<'_> {
    fn bind(&self, index: usize, param: Param<'_>) -> Result<(), Error> {
        let stmt = self.raw.as_ptr();
        let i = index as c_int;
        // SAFETY: a prepared statement of the connection we hold; text is copied
        // by SQLite before returning (SQLITE_TRANSIENT), with a 64-bit length.
        let rc = unsafe {
            match param {
                Param::Null => ffi::sqlite3_bind_null(stmt, i),
                Param::Int(n) => ffi::sqlite3_bind_int64(stmt, i, n),
                Param::Text(text) => ffi::sqlite3_bind_text64(
                    stmt,
                    i,
                    text.as_ptr() as *const c_char,
                    text.len() as u64,
                    ffi::SQLITE_TRANSIENT(),
                    ffi::SQLITE_UTF8 as u8,
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
                        return Err(misuse(format!("column {index}: out of memory")));
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
