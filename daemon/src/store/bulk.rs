//! Task listings read straight through SQLite's C API.
//!
//! sqlx hands each row from its worker thread to the caller through a channel,
//! which costs a microsecond or two per row: listing a 100,000-task plan spent
//! most of its time there. Here the statement is stepped on the caller's thread
//! while sqlx's lock on the connection is held (`lock_handle`, sqlx's own door
//! for FFI), so the rows cost what SQLite costs. Only reads come this way; every
//! write still goes through sqlx.
use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr::{self, NonNull};

use libsqlite3_sys as ffi;
use sqlx::SqliteConnection;

use super::Error;

/// A prepared statement, finalized on drop.
struct Statement {
    db: *mut ffi::sqlite3,
    raw: NonNull<ffi::sqlite3_stmt>,
}

impl Drop for Statement {
    fn drop(&mut self) {
        // SAFETY: `raw` came from sqlite3_prepare_v2 and is finalized once.
        unsafe {
            ffi::sqlite3_finalize(self.raw.as_ptr());
        }
    }
}

fn last_error(db: *mut ffi::sqlite3) -> Error {
    // SAFETY: sqlite3_errmsg returns a NUL-terminated string owned by SQLite,
    // valid until the next call on this connection; it is copied at once.
    let message = unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(db)) };
    Error::Sqlite(message.to_string_lossy().into_owned())
}

/// One column of the current row. Valid until the statement steps again.
pub(super) enum Value<'a> {
    Null,
    Integer(i64),
    Text(&'a str),
}

impl Statement {
    fn prepare(db: *mut ffi::sqlite3, sql: &str) -> Result<Statement, Error> {
        let sql = CString::new(sql).map_err(|_| Error::Sqlite("NUL in SQL".into()))?;
        let mut raw = ptr::null_mut();
        // SAFETY: `db` is an open connection held exclusively through sqlx's
        // lock; `sql` is NUL-terminated and outlives the call.
        let rc =
            unsafe { ffi::sqlite3_prepare_v2(db, sql.as_ptr(), -1, &mut raw, ptr::null_mut()) };
        match NonNull::new(raw) {
            Some(raw) if rc == ffi::SQLITE_OK => Ok(Statement { db, raw }),
            _ => Err(last_error(db)),
        }
    }

    fn bind_text(&mut self, index: usize, text: &str) -> Result<(), Error> {
        // SAFETY: SQLITE_TRANSIENT makes SQLite copy the bytes before returning.
        let rc = unsafe {
            ffi::sqlite3_bind_text(
                self.raw.as_ptr(),
                index as c_int,
                text.as_ptr() as *const c_char,
                text.len() as c_int,
                ffi::SQLITE_TRANSIENT(),
            )
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

    fn column(&self, index: usize) -> Result<Value<'_>, Error> {
        let stmt = self.raw.as_ptr();
        let i = index as c_int;
        // SAFETY: called only after step() returned a row; the text pointer and
        // length describe SQLite's buffer for this column, valid until the next
        // step, which needs `&mut self` and so cannot overlap this borrow.
        unsafe {
            match ffi::sqlite3_column_type(stmt, i) {
                ffi::SQLITE_NULL => Ok(Value::Null),
                ffi::SQLITE_INTEGER => Ok(Value::Integer(ffi::sqlite3_column_int64(stmt, i))),
                _ => {
                    let text = ffi::sqlite3_column_text(stmt, i);
                    let len = ffi::sqlite3_column_bytes(stmt, i) as usize;
                    if text.is_null() {
                        return Ok(Value::Text(""));
                    }
                    let bytes = std::slice::from_raw_parts(text, len);
                    std::str::from_utf8(bytes)
                        .map(Value::Text)
                        .map_err(|_| Error::Corrupt(format!("column {index} is not UTF-8")))
                }
            }
        }
    }
}

/// A row as `read_rows` presents it to its caller.
pub(super) struct Row<'a> {
    statement: &'a Statement,
}

impl Row<'_> {
    pub fn value(&self, index: usize) -> Result<Value<'_>, Error> {
        self.statement.column(index)
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
}

/// Runs `sql` with text `binds` and hands every row to `each`, in order.
pub(super) async fn read_rows<T>(
    conn: &mut SqliteConnection,
    sql: &str,
    binds: &[&str],
    mut each: impl FnMut(&Row<'_>) -> Result<T, Error>,
) -> Result<Vec<T>, Error> {
    let mut handle = conn.lock_handle().await?;
    let db = handle.as_raw_handle().as_ptr();
    let mut statement = Statement::prepare(db, sql)?;
    for (i, bind) in binds.iter().enumerate() {
        statement.bind_text(i + 1, bind)?;
    }
    let mut out = Vec::new();
    while statement.step()? {
        out.push(each(&Row {
            statement: &statement,
        })?);
    }
    Ok(out)
}
