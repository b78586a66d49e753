//! The store's statements, whichever database runs them: a connection
//! ([`Conn`]), a locked connection running statements and transactions
//! ([`Db`]), and the rows they return ([`Row`]).
//!
//! Statements are written in SQLite's dialect with `?` / `?N` placeholders;
//! the PostgreSQL backend renumbers the placeholders, and the few statements
//! whose text differs between the two ask [`Db::dialect`] which to run.
//! Transactions are opened here, once, for both: a failed body or a failed
//! `COMMIT` is rolled back, and a transaction inside another is refused.
pub(super) use super::driver::{misuse, Begin, Param, Value};
use super::{postgres, sqlite, Error};

/// Which SQL the database speaks, for the statements that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// A subquery giving the texts of the JSON array bound at `param`, as
    /// column `value` (for `x IN (...)`).
    pub fn json_texts(self, param: &str) -> String {
        match self {
            Dialect::Sqlite => format!("SELECT value FROM json_each({param})"),
            Dialect::Postgres => {
                format!("SELECT jsonb_array_elements_text(CAST(CAST({param} AS TEXT) AS jsonb)) AS value")
            }
        }
    }

    /// A subquery giving the integers of the JSON array bound at `param`, as
    /// column `value`.
    pub fn json_ints(self, param: &str) -> String {
        match self {
            Dialect::Sqlite => format!("SELECT value FROM json_each({param})"),
            Dialect::Postgres => format!(
                "SELECT CAST(jsonb_array_elements_text(CAST(CAST({param} AS TEXT) AS jsonb)) AS BIGINT) AS value"
            ),
        }
    }

    /// An aggregate joining `expr` of the rows with commas, ordered by `order`.
    pub fn joined(self, expr: &str, order: &str) -> String {
        match self {
            Dialect::Sqlite => format!("group_concat({expr}, ',' ORDER BY {order})"),
            Dialect::Postgres => format!("string_agg(CAST({expr} AS TEXT), ',' ORDER BY {order})"),
        }
    }

    /// A compact JSON object of `(key, column)` pairs, as SQLite's
    /// `json_object` writes it (PostgreSQL's own adds spaces).
    pub fn json_object(self, pairs: &[(&str, &str)]) -> String {
        match self {
            Dialect::Sqlite => {
                let args: Vec<String> = pairs
                    .iter()
                    .map(|(key, column)| format!("'{key}', {column}"))
                    .collect();
                format!("json_object({})", args.join(", "))
            }
            Dialect::Postgres => {
                let parts: Vec<String> = pairs
                    .iter()
                    .enumerate()
                    .map(|(i, (key, column))| {
                        let comma = if i == 0 { "{" } else { "," };
                        format!("'{comma}\"{key}\":' || COALESCE(to_json({column})::text, 'null')")
                    })
                    .collect();
                format!("({} || '}}')", parts.join(" || "))
            }
        }
    }

    /// The number at `key` of the JSON object in `column` (NULL if absent).
    pub fn json_number(self, column: &str, key: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_extract({column}, '$.{key}')"),
            Dialect::Postgres => {
                format!("CAST(CAST({column} AS jsonb) ->> '{key}' AS DOUBLE PRECISION)")
            }
        }
    }

    /// The text at `key` of the JSON object in `column` (NULL if absent).
    pub fn json_text(self, column: &str, key: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_extract({column}, '$.{key}')"),
            Dialect::Postgres => format!("(CAST({column} AS jsonb) ->> '{key}')"),
        }
    }

    /// `INSERT` that skips rows whose key is taken: the words before the
    /// table and after the values.
    pub fn insert_or_skip(self) -> (&'static str, &'static str) {
        match self {
            Dialect::Sqlite => ("INSERT OR IGNORE", ""),
            Dialect::Postgres => ("INSERT", " ON CONFLICT DO NOTHING"),
        }
    }
}

/// For `INSERT ... RETURNING` that returned nothing, which never happens.
pub(super) fn no_row() -> Error {
    misuse("INSERT ... RETURNING gave no row")
}

/// A connection the store owns.
pub(super) enum Conn {
    Sqlite(sqlite::Conn),
    Postgres(postgres::Conn),
}

impl Conn {
    /// The connection for direct use; statements run synchronously on the
    /// caller's thread.
    pub fn lock(&mut self) -> Db<'_> {
        match self {
            Conn::Sqlite(conn) => Db::Sqlite(conn.lock()),
            Conn::Postgres(conn) => Db::Postgres(conn),
        }
    }

    /// Runs `work` (statements on this connection) from an async caller.
    /// SQLite's statements run on the caller's worker: they take
    /// microseconds to milliseconds, and handing them over costs more. A
    /// PostgreSQL round trip may wait seconds (another daemon's write holds
    /// the write lock), so on a runtime of several threads the worker is
    /// handed over first and the API goes on meanwhile.
    pub fn blocking<T>(&mut self, work: impl FnOnce(&mut Conn) -> T) -> T {
        let several_threads = matches!(self, Conn::Postgres(_))
            && tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if several_threads {
            tokio::task::block_in_place(|| work(self))
        } else {
            work(self)
        }
    }
}

/// A locked connection.
pub(super) enum Db<'c> {
    Sqlite(sqlite::Db<'c>),
    Postgres(&'c mut postgres::Conn),
}

impl<'c> Db<'c> {
    /// Now, in milliseconds, on the database's clock when it has one of its
    /// own (PostgreSQL, shared by every daemon on it: leases and claims are
    /// judged by it, never by a daemon's clock), else on this machine's.
    pub fn clock_ms(&mut self) -> Result<i64, Error> {
        match self.dialect() {
            Dialect::Sqlite => Ok(super::now_ms()),
            Dialect::Postgres => self
                .query_row(
                    "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
                    &[],
                    |row| row.int(0),
                )?
                .ok_or_else(no_row),
        }
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Tells the other processes on this database, at commit, that events up
    /// to `seq` are committed (PostgreSQL; on SQLite the daemon is alone).
    pub fn announce(&mut self, seq: i64) -> Result<(), Error> {
        match self {
            Db::Sqlite(_) => Ok(()),
            Db::Postgres(db) => db.query(postgres::ANNOUNCE, &[seq.into()]).map(|_| ()),
        }
    }

    /// Runs a statement that returns no rows; returns the rows it changed.
    pub fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<usize, Error> {
        match self {
            Db::Sqlite(db) => db.execute(sql, params),
            Db::Postgres(db) => db.execute(sql, params),
        }
    }

    /// Runs a query and maps every row, in order.
    pub fn query<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        each: impl FnMut(&Row<'_>) -> Result<T, Error>,
    ) -> Result<Vec<T>, Error> {
        self.query_sized(sql, params, 0, each)
    }

    /// [`Db::query`] of a query that returns `at_most` rows (its LIMIT): a
    /// large result takes room for the rest of its bound once it is large,
    /// so that a page of thousands of rows is not copied as it grows.
    pub fn query_sized<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        at_most: usize,
        mut each: impl FnMut(&Row<'_>) -> Result<T, Error>,
    ) -> Result<Vec<T>, Error> {
        match self {
            Db::Sqlite(db) => db.query(sql, params, at_most, |row| each(&Row::Sqlite(*row))),
            Db::Postgres(db) => db
                .query(sql, params)?
                .iter()
                .map(|row| each(&Row::Postgres(row)))
                .collect(),
        }
    }

    /// The first row of a query, if any.
    pub fn query_row<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        each: impl FnOnce(&Row<'_>) -> Result<T, Error>,
    ) -> Result<Option<T>, Error> {
        match self {
            Db::Sqlite(db) => db.query_row(sql, params, |row| each(&Row::Sqlite(*row))),
            Db::Postgres(db) => match db.query(sql, params)?.first() {
                Some(row) => each(&Row::Postgres(row)).map(Some),
                None => Ok(None),
            },
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
        if self.in_transaction() {
            return Err(Error::NestedTransaction);
        }
        let opened = match self {
            Db::Sqlite(db) => db
                .execute(
                    match begin {
                        Begin::Read => "BEGIN",
                        Begin::Write => "BEGIN IMMEDIATE",
                    },
                    &[],
                )
                .map(|_| ()),
            Db::Postgres(db) => db.begin(begin),
        };
        if let Err(error) = opened {
            self.rollback_if_open();
            return Err(error);
        }
        let result = body(self).and_then(|value| {
            self.end("COMMIT")?;
            Ok(value)
        });
        if result.is_err() {
            self.rollback_if_open();
        }
        result
    }

    /// `COMMIT` or `ROLLBACK`: afterwards no transaction is open, whether
    /// it succeeded or not.
    fn end(&mut self, word: &'static str) -> Result<(), Error> {
        match self {
            Db::Sqlite(db) => db.execute(word, &[]).map(|_| ()),
            Db::Postgres(db) => db.end(word),
        }
    }

    fn in_transaction(&self) -> bool {
        match self {
            Db::Sqlite(db) => !db.autocommit(),
            Db::Postgres(db) => db.in_transaction(),
        }
    }

    /// Ends a transaction left open (by an error, or by a panic unwinding
    /// through `transaction`), so the connection never carries one into its
    /// next use.
    fn rollback_if_open(&mut self) {
        if self.in_transaction() {
            if let Err(error) = self.end("ROLLBACK") {
                tracing::error!(%error, "ROLLBACK failed");
            }
        }
    }
}

impl Drop for Db<'_> {
    fn drop(&mut self) {
        self.rollback_if_open();
    }
}

/// A row of a query's result.
pub(super) enum Row<'s> {
    Sqlite(sqlite::Row<'s>),
    Postgres(&'s [postgres::Value]),
}

impl Row<'_> {
    fn value(&self, index: usize) -> Result<Value<'_>, Error> {
        match self {
            Row::Sqlite(row) => row.value(index),
            Row::Postgres(row) => match row.get(index) {
                Some(postgres::Value::Null) => Ok(Value::Null),
                Some(postgres::Value::Integer(n)) => Ok(Value::Integer(*n)),
                Some(postgres::Value::Text(text)) => Ok(Value::Text(text)),
                None => Err(misuse(format!("no column {index}"))),
            },
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
