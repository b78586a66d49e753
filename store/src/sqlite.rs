//! Statements run straight through SQLite's C API, on connections the store
//! opens and owns (`Conn`), on the caller's thread.
//!
//! sqlx ran each SQLite connection on a worker thread and handed every
//! statement and every row across threads: about 80 µs per statement and 1-2
//! µs per row on this machine. A nine-statement write transaction spent most
//! of its time in those hand-offs, and listing a 100,000-task plan most of its
//! time moving rows. sqlx still runs the migrations (and the backups), on
//! connections of its own.
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

use super::driver::{misuse, Failure, Param, Value};
use super::Error;

/// What kind of failure SQLite's result code is.
fn failure_of(code: c_int) -> Failure {
    match code & 0xff {
        ffi::SQLITE_BUSY | ffi::SQLITE_LOCKED => Failure::Busy,
        ffi::SQLITE_FULL => Failure::Full,
        ffi::SQLITE_CONSTRAINT => Failure::Constraint,
        _ => Failure::Other,
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
        failure: failure_of(code),
        code,
        message,
    }
}

/// How many prepared statements a connection keeps. The store's SQL is a few
/// dozen fixed texts plus the filter combinations of listings; past this the
/// cache starts over rather than grow.
const CACHE_CAPACITY: usize = 128;

/// Prepared statements of one connection, by SQL text.
#[derive(Default)]
struct StatementCache {
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

/// How a connection is opened.
#[derive(Debug, Clone)]
pub(super) struct Options {
    pub path: std::path::PathBuf,
    pub read_only: bool,
    pub busy_timeout: std::time::Duration,
    /// Run once on opening, in order (`PRAGMA`s).
    pub setup: Vec<&'static str>,
}

/// A connection the store owns, opened through SQLite's C API, and the
/// statements prepared on it.
///
/// Why not sqlx's connection: sqlx runs each connection on a thread of its
/// own, and lending its handle (`lock_handle`) is a handshake with that
/// thread on every use, two thread switches per read or write. Worse, under
/// eight concurrent readers that handshake sometimes never completed: the
/// loop of `cargo bench -p todod --bench grpc` hung in ReadTodos in about one
/// run of twenty, sqlx's worker parked re-taking its own lock while nothing
/// ran, and a reader connection lost for good each time. Owning the handle
/// removes both. sqlx still runs the migrations, on a connection of its
/// own.
pub(super) struct Conn {
    cache: StatementCache,
    raw: NonNull<ffi::sqlite3>,
}

// SAFETY: the connection is opened with SQLITE_OPEN_NOMUTEX and used only
// through `&mut Conn`, so never from two threads at once; moving it between
// threads is allowed in SQLite's multi-thread mode.
unsafe impl Send for Conn {}

/// How many rows a bounded query's result grows to before it takes room
/// for the rest of its bound (see [`Db::query`]).
const GROWN_UNTIL: usize = 1024;

impl Conn {
    /// Opens the database file as `options` say and runs its setup.
    pub fn open(options: &Options) -> Result<Conn, Error> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(options.path.as_os_str().as_bytes())
            .map_err(|_| misuse("the database path contains a NUL byte"))?;
        let flags = ffi::SQLITE_OPEN_NOMUTEX
            | ffi::SQLITE_OPEN_PRIVATECACHE
            | if options.read_only {
                ffi::SQLITE_OPEN_READONLY
            } else {
                ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE
            };
        let mut raw = ptr::null_mut();
        // SAFETY: `path` is NUL-terminated and outlives the call; `raw`
        // receives a handle that must be closed even when opening failed.
        let rc = unsafe { ffi::sqlite3_open_v2(path.as_ptr(), &mut raw, flags, ptr::null()) };
        let Some(raw) = NonNull::new(raw) else {
            return Err(misuse(
                "sqlite3_open_v2 returned no connection (out of memory)",
            ));
        };
        let mut conn = Conn {
            cache: StatementCache::default(),
            raw,
        };
        if rc != ffi::SQLITE_OK {
            return Err(last_error(raw.as_ptr()));
        }
        let busy_ms = c_int::try_from(options.busy_timeout.as_millis()).unwrap_or(c_int::MAX);
        // SAFETY: an open connection, used by this thread alone.
        unsafe {
            ffi::sqlite3_extended_result_codes(raw.as_ptr(), 1);
            ffi::sqlite3_busy_timeout(raw.as_ptr(), busy_ms);
        }
        for pragma in &options.setup {
            // A pragma may answer with a row (journal_mode does): read and drop it.
            conn.lock().query(pragma, &[], 0, |_| Ok(()))?;
        }
        Ok(conn)
    }

    /// The connection for direct use; statements run synchronously on the
    /// caller's thread.
    pub fn lock(&mut self) -> Db<'_> {
        Db {
            raw: self.raw.as_ptr(),
            cache: &mut self.cache,
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Statements first: sqlite3_close refuses (SQLITE_BUSY) a connection
        // with statements left.
        self.cache.finalize_all();
        // SAFETY: the handle came from sqlite3_open_v2, is closed once, here,
        // and nothing uses it afterwards.
        let rc = unsafe { ffi::sqlite3_close(self.raw.as_ptr()) };
        if rc != ffi::SQLITE_OK {
            tracing::warn!(code = rc, "closing a database connection failed");
        }
    }
}

/// A locked connection. Statements run synchronously on the caller's thread.
pub(super) struct Db<'c> {
    raw: *mut ffi::sqlite3,
    cache: &'c mut StatementCache,
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
        // `&mut Conn`; `sql` is valid for `len` bytes (no NUL needed when the
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

    /// Runs a query and maps every row, in order. `at_most` is the most
    /// rows it can return (its LIMIT; 0 when unbounded): a result still
    /// growing at [`GROWN_UNTIL`] rows gets room for the rest at once, since
    /// growing a vector of thousands of tasks row by row copies it over and
    /// over. A small result never reserves a big page's room.
    pub fn query<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        at_most: usize,
        mut each: impl FnMut(&Row<'_>) -> Result<T, Error>,
    ) -> Result<Vec<T>, Error> {
        let mut statement = self.prepare(sql, params)?;
        let mut out = Vec::new();
        while statement.step()? {
            if out.len() == GROWN_UNTIL && at_most > GROWN_UNTIL {
                out.reserve_exact(at_most - GROWN_UNTIL);
            }
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

    /// False inside a transaction.
    pub fn autocommit(&self) -> bool {
        // SAFETY: plain read of the connection's transaction state.
        unsafe { ffi::sqlite3_get_autocommit(self.raw) != 0 }
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

/// The current row of a query. Its text borrows SQLite's buffers, valid until
/// the statement steps again, which the borrow checker rules out while a `Row`
/// is alive.
#[derive(Clone, Copy)]
pub(super) struct Row<'s> {
    statement: &'s Statement<'s>,
}

impl Row<'_> {
    pub fn value(&self, index: usize) -> Result<Value<'_>, Error> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> Conn {
        Conn::open(&Options {
            path: ":memory:".into(),
            read_only: false,
            busy_timeout: std::time::Duration::from_secs(1),
            setup: vec![],
        })
        .unwrap()
    }

    /// `n` rows counting up from 1, at most `limit` of them.
    fn counted(conn: &mut Conn, n: i64, limit: usize) -> Vec<i64> {
        let sql = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?) \
                   SELECT i FROM c LIMIT ?";
        conn.lock()
            .query(
                sql,
                &[n.into(), (limit as i64).into()],
                limit,
                |row| match row.value(0)? {
                    Value::Integer(i) => Ok(i),
                    _ => panic!("not an integer"),
                },
            )
            .unwrap()
    }

    #[test]
    fn a_bounded_query_takes_room_for_its_bound_only_once_it_is_large() {
        let mut conn = memory();
        // A few rows of a page of 10,001: no room taken for the page.
        let few = counted(&mut conn, 5, 10_001);
        assert_eq!(few, vec![1, 2, 3, 4, 5]);
        assert!(few.capacity() < GROWN_UNTIL, "{}", few.capacity());
        // Past GROWN_UNTIL: room for the whole bound at once, every row
        // kept, in order.
        let many = counted(&mut conn, 3000, 10_001);
        assert_eq!(many, (1..=3000).collect::<Vec<_>>());
        assert!(many.capacity() >= 10_001, "{}", many.capacity());
        // The bound itself is what comes back when there is more.
        assert_eq!(counted(&mut conn, 20_000, 10_001).len(), 10_001);
    }
}
