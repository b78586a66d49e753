//! The store's statements on PostgreSQL, through sqlx's Postgres driver.
//!
//! The store's transaction bodies are synchronous (`FnOnce(&mut Db)`, as
//! SQLite's C API runs them), and sqlx is async. So each connection lives on
//! a thread of its own with a current-thread runtime, and each statement is
//! a blocking round trip to it: the body runs on the caller's thread, as it
//! does on SQLite, from a current-thread runtime (tests) or a multi-thread
//! one (the daemon) alike.
//!
//! Statements arrive in SQLite's dialect; `?` and `?N` become `$N`, numbered
//! as SQLite numbers them (a bare `?` takes the highest number so far plus
//! one). Parameters are bound as the types the server inferred when it
//! prepared the statement (sqlx caches the prepared statement per
//! connection), so `?` compared with a BIGINT column gets an i64 and a NULL
//! gets whatever type its place needs.
//!
//! A write transaction takes one advisory lock first: writes through every
//! daemon on the database are serialised, as SQLite's single writer does, so
//! the store's read-decide-write bodies (revisions, positions, the cycle
//! check, the fence check) and `events.seq` in commit order hold unchanged.
use std::sync::mpsc;

use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgRow, PgTypeInfo};
use sqlx::{Arguments, Column, Connection, Either, Executor, Row as _, Statement, TypeInfo};

use super::driver::{misuse, Begin, Failure, Param};
use super::Error;

/// Every write transaction takes this advisory lock first, for the
/// transaction. Its second key is the schema's hash, so that daemons (and
/// tests) on different schemas of one server do not wait for each other.
const WRITE_LOCK: &str = "pg_advisory_xact_lock(1953457263, hashtext(current_schema()))";

/// Announces a commit's newest event to the schema's listeners, in the
/// write's transaction (PostgreSQL delivers it at commit, never before).
/// The channel is named by a hash of the schema: a channel name is at most
/// 63 bytes, a schema's name may be as long.
pub(super) const ANNOUNCE: &str =
    "SELECT pg_notify('todod_' || md5(current_schema()), CAST(? AS TEXT))";

/// The longest a statement may run on the server before it is cancelled
/// (a wedged server, a lock never released): the write fails as busy
/// instead of holding a worker for ever.
const STATEMENT_TIMEOUT_S: u64 = 60;
/// The longest a write waits for the write lock (another daemon's write).
const LOCK_TIMEOUT_S: u64 = 30;
/// How long this process waits for any one round trip (connecting included)
/// before it gives the connection up as lost: the server's own timeout, and
/// then some, for a server that stopped answering at all (a dropped route,
/// a host gone without a FIN).
const ROUND_TRIP_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(STATEMENT_TIMEOUT_S + 15);

/// `options` with the session settings every store connection runs with:
/// statement, lock and idle-in-transaction timeouts, and TCP keepalives on
/// the server's side of the socket, so that the session of a host that died
/// without closing it (and any lock it held) ends within about a minute
/// instead of hours.
pub(super) fn session(options: &PgConnectOptions) -> PgConnectOptions {
    options.clone().options([
        ("statement_timeout", format!("{STATEMENT_TIMEOUT_S}s")),
        ("lock_timeout", format!("{LOCK_TIMEOUT_S}s")),
        // A transaction's statements follow each other within
        // milliseconds; a session idle inside one this long belongs to a
        // daemon that was paused (SIGSTOP, a frozen VM) or lost, and holds
        // the write lock every other daemon waits for.
        ("idle_in_transaction_session_timeout", "10s".to_string()),
        ("tcp_keepalives_idle", "30".to_string()),
        ("tcp_keepalives_interval", "10".to_string()),
        ("tcp_keepalives_count", "3".to_string()),
    ])
}

/// Connects within [`ROUND_TRIP_TIMEOUT`].
async fn connect(options: &PgConnectOptions) -> Result<PgConnection, Error> {
    match tokio::time::timeout(ROUND_TRIP_TIMEOUT, PgConnection::connect_with(options)).await {
        Ok(connected) => connected.map_err(error_of),
        Err(_) => Err(lost("connecting to the database timed out")),
    }
}

/// The connection itself failed (no SQLSTATE): it is replaced before the
/// next transaction.
pub(super) fn lost(message: &str) -> Error {
    Error::Postgres {
        failure: Failure::Other,
        code: String::new(),
        message: message.into(),
    }
}

/// How often a follower also reads the newest event, for announcements lost
/// while its listening connection was down.
const POLL_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Follows the commits made through any store on this schema, this
/// process's or another's: `seen(seq)` with the newest event sequence of
/// each announcement, and of a poll every second (the fallback when an
/// announcement was missed). Ends when `seen` returns false.
pub(super) async fn follow_commits(options: PgConnectOptions, mut seen: impl FnMut(i64) -> bool) {
    loop {
        match listen(&options).await {
            Ok(mut listener) => {
                let mut poll = tokio::time::interval(POLL_EVERY);
                loop {
                    let seq = tokio::select! {
                        heard = listener.recv() => match heard {
                            Ok(notification) => notification.payload().parse().ok(),
                            Err(error) => {
                                tracing::warn!(%error, "lost the commit announcements; listening again");
                                break;
                            }
                        },
                        _ = poll.tick() => {
                            let newest = tokio::time::timeout(
                                ROUND_TRIP_TIMEOUT,
                                sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(seq) FROM events")
                                    .fetch_one(&mut listener),
                            )
                            .await
                            .unwrap_or(Err(sqlx::Error::PoolTimedOut));
                            match newest {
                                Ok(seq) => seq,
                                Err(error) => {
                                    tracing::warn!(%error, "cannot read the newest event; listening again");
                                    break;
                                }
                            }
                        }
                    };
                    // 0 (no event yet, or a payload not understood) is never
                    // news; the call still asks whether the store is alive.
                    if !seen(seq.unwrap_or(0)) {
                        return;
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for commit announcements; trying again");
                if !seen(0) {
                    return;
                }
            }
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

async fn listen(options: &PgConnectOptions) -> Result<sqlx::postgres::PgListener, sqlx::Error> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(ROUND_TRIP_TIMEOUT)
        .connect_lazy_with(session(options));
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
    let channel: String = sqlx::query_scalar("SELECT 'todod_' || md5(current_schema())")
        .fetch_one(&mut listener)
        .await?;
    listener.listen(&channel).await?;
    Ok(listener)
}

/// One column of a row, as the store reads it: booleans come as 0 and 1.
#[derive(Debug)]
pub(super) enum Value {
    Null,
    Integer(i64),
    Text(String),
}

/// A parameter, owned, on its way to the connection's thread.
enum Owned {
    Null,
    Int(i64),
    Text(String),
}

enum Work {
    /// A statement with `$N` parameters; `rows`: return its rows.
    Statement {
        sql: String,
        params: Vec<Owned>,
        rows: bool,
    },
    /// Statements without parameters, sent as they are (BEGIN, COMMIT).
    Simple(String),
}

enum Reply {
    Changed(usize),
    Rows(Vec<Vec<Value>>),
}

struct Request {
    work: Work,
    /// Whether the caller is outside a transaction: only then may a lost
    /// connection be replaced (inside one, the transaction died with it).
    fresh: bool,
    reply: mpsc::SyncSender<Result<Reply, Error>>,
}

/// A connection to PostgreSQL, served by a thread of its own.
pub(super) struct Conn {
    requests: mpsc::Sender<Request>,
    in_transaction: bool,
}

impl Conn {
    /// Connects (on a new thread) and waits until the connection is up.
    pub fn open(options: &PgConnectOptions) -> Result<Conn, Error> {
        let (requests, incoming) = mpsc::channel::<Request>();
        let (ready_tx, ready) = mpsc::sync_channel(1);
        let options = options.clone();
        std::thread::Builder::new()
            .name("todod-postgres".into())
            .spawn(move || serve(options, incoming, ready_tx))
            .map_err(|e| misuse(format!("cannot start a database thread: {e}")))?;
        ready
            .recv()
            .map_err(|_| misuse("the database thread ended before connecting"))??;
        Ok(Conn {
            requests,
            in_transaction: false,
        })
    }

    fn call(&mut self, work: Work) -> Result<Reply, Error> {
        let (reply, answer) = mpsc::sync_channel(1);
        let request = Request {
            work,
            fresh: !self.in_transaction,
            reply,
        };
        self.requests
            .send(request)
            .map_err(|_| misuse("the database thread has ended"))?;
        answer
            .recv()
            .map_err(|_| misuse("the database thread ended mid-statement"))?
    }

    pub fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// Opens a transaction: reads see one snapshot; writes wait for the
    /// store's write lock, held until they commit or roll back.
    pub fn begin(&mut self, begin: Begin) -> Result<(), Error> {
        let sql = match begin {
            Begin::Read => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_string(),
            Begin::Write => format!("BEGIN; SELECT {WRITE_LOCK}"),
        };
        // Open before it is sent: if BEGIN went through and the lock did
        // not, the server is inside a failed transaction, which only the
        // caller's ROLLBACK (sent for an open one) ends.
        self.in_transaction = true;
        self.call(Work::Simple(sql)).map(|_| ())
    }

    /// `COMMIT` or `ROLLBACK`. Afterwards no transaction is open, failed or
    /// not: a failed COMMIT rolls back, and a lost connection took the
    /// transaction along.
    pub fn end(&mut self, word: &'static str) -> Result<(), Error> {
        let result = self.call(Work::Simple(word.to_string()));
        self.in_transaction = false;
        result.map(|_| ())
    }

    pub fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<usize, Error> {
        match self.call(statement(sql, params, false))? {
            Reply::Changed(n) => Ok(n),
            Reply::Rows(_) => Ok(0),
        }
    }

    pub fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Vec<Value>>, Error> {
        match self.call(statement(sql, params, true))? {
            Reply::Rows(rows) => Ok(rows),
            Reply::Changed(_) => Ok(Vec::new()),
        }
    }
}

fn statement(sql: &str, params: &[Param<'_>], rows: bool) -> Work {
    Work::Statement {
        sql: placeholders(sql),
        params: params
            .iter()
            .map(|p| match p {
                Param::Null => Owned::Null,
                Param::Int(n) => Owned::Int(*n),
                Param::Text(t) => Owned::Text(t.to_string()),
            })
            .collect(),
        rows,
    }
}

/// SQLite's `?` and `?N` as `$N`, numbered as SQLite numbers them. Quoted
/// text and identifiers are left alone.
pub(super) fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut highest = 0u32;
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                let n = match digits.parse::<u32>() {
                    Ok(n) => n,
                    Err(_) => highest + 1,
                };
                highest = highest.max(n);
                out.push('$');
                out.push_str(&n.to_string());
            }
            None => out.push(c),
        }
    }
    out
}

/// The connection's thread: connects, answers requests one by one, and
/// replaces a lost connection when no transaction depended on it.
fn serve(
    options: PgConnectOptions,
    incoming: mpsc::Receiver<Request>,
    ready: mpsc::SyncSender<Result<(), Error>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(misuse(format!("cannot start a runtime: {e}"))));
            return;
        }
    };
    let options = session(&options);
    let mut conn = match runtime.block_on(connect(&options)) {
        Ok(conn) => Some(conn),
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    while let Ok(request) = incoming.recv() {
        if conn.is_none() && request.fresh {
            conn = runtime.block_on(connect(&options)).ok();
        }
        let result = match conn.as_mut() {
            // The timer is made inside the runtime, which it needs.
            Some(c) => runtime
                .block_on(async {
                    tokio::time::timeout(ROUND_TRIP_TIMEOUT, run(c, request.work)).await
                })
                .unwrap_or_else(|_| Err(lost("the database did not answer in time"))),
            None if matches!(&request.work, Work::Simple(sql) if sql == "ROLLBACK") => {
                Ok(Reply::Changed(0)) // the transaction went with the connection
            }
            None => Err(lost("the connection to the database was lost")),
        };
        if let Err(Error::Postgres { code, .. }) = &result {
            // Not the server refusing a statement: the connection itself.
            if code.is_empty() {
                conn = None;
            }
        }
        let _ = request.reply.send(result);
    }
    if let Some(conn) = conn {
        let _ = runtime.block_on(conn.close());
    }
}

async fn run(conn: &mut PgConnection, work: Work) -> Result<Reply, Error> {
    let (sql, params, rows) = match work {
        Work::Simple(sql) => {
            sqlx::raw_sql(&sql)
                .execute(&mut *conn)
                .await
                .map_err(error_of)?;
            return Ok(Reply::Changed(0));
        }
        Work::Statement { sql, params, rows } => (sql, params, rows),
    };
    // Prepared once per connection (sqlx caches it by its text), with the
    // parameters' types left to the server.
    let prepared = conn.prepare(&sql).await.map_err(error_of)?;
    let types: Vec<PgTypeInfo> = match prepared.parameters() {
        Some(Either::Left(types)) => types.to_vec(),
        _ => Vec::new(),
    };
    if types.len() != params.len() {
        return Err(misuse(format!(
            "statement takes {} parameters, {} given",
            types.len(),
            params.len()
        )));
    }
    let mut args = PgArguments::default();
    for (i, (ty, param)) in types.iter().zip(params).enumerate() {
        bind(&mut args, ty, param).map_err(|why| misuse(format!("parameter ${}: {why}", i + 1)))?;
    }
    let query = prepared.query_with(args);
    if rows {
        let rows = query.fetch_all(&mut *conn).await.map_err(error_of)?;
        rows.iter()
            .map(values)
            .collect::<Result<_, _>>()
            .map(Reply::Rows)
    } else {
        let done = query.execute(&mut *conn).await.map_err(error_of)?;
        Ok(Reply::Changed(done.rows_affected() as usize))
    }
}

/// Binds `param` as the type the server expects in its place.
fn bind(args: &mut PgArguments, ty: &PgTypeInfo, param: Owned) -> Result<(), String> {
    let added = match (ty.name(), param) {
        ("INT8", Owned::Int(n)) => args.add(n),
        ("INT8", Owned::Null) => args.add(None::<i64>),
        ("INT4", Owned::Int(n)) => args.add(i32::try_from(n).map_err(|_| "out of range")?),
        ("INT4", Owned::Null) => args.add(None::<i32>),
        ("INT2", Owned::Int(n)) => args.add(i16::try_from(n).map_err(|_| "out of range")?),
        ("INT2", Owned::Null) => args.add(None::<i16>),
        ("BOOL", Owned::Int(n)) => args.add(n != 0),
        ("BOOL", Owned::Null) => args.add(None::<bool>),
        ("TEXT" | "VARCHAR" | "BPCHAR" | "NAME" | "UNKNOWN", Owned::Text(t)) => args.add(t),
        ("TEXT" | "VARCHAR" | "BPCHAR" | "NAME" | "UNKNOWN", Owned::Int(n)) => {
            args.add(n.to_string())
        }
        ("TEXT" | "VARCHAR" | "BPCHAR" | "NAME" | "UNKNOWN", Owned::Null) => {
            args.add(None::<String>)
        }
        (name, Owned::Text(_)) => return Err(format!("text given where {name} is expected")),
        (name, _) => return Err(format!("type {name} is not bound by the store")),
    };
    added.map_err(|e| e.to_string())
}

/// A row's columns as the store reads them.
fn values(row: &PgRow) -> Result<Vec<Value>, Error> {
    let decode = |e: sqlx::Error| Error::Corrupt(e.to_string());
    row.columns()
        .iter()
        .enumerate()
        .map(|(i, column)| {
            Ok(match column.type_info().name() {
                "INT8" => row
                    .try_get::<Option<i64>, _>(i)
                    .map_err(decode)?
                    .map_or(Value::Null, Value::Integer),
                "INT4" => row
                    .try_get::<Option<i32>, _>(i)
                    .map_err(decode)?
                    .map_or(Value::Null, |n| Value::Integer(n.into())),
                "INT2" => row
                    .try_get::<Option<i16>, _>(i)
                    .map_err(decode)?
                    .map_or(Value::Null, |n| Value::Integer(n.into())),
                "BOOL" => row
                    .try_get::<Option<bool>, _>(i)
                    .map_err(decode)?
                    .map_or(Value::Null, |b| Value::Integer(b.into())),
                "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" | "UNKNOWN" => row
                    .try_get::<Option<String>, _>(i)
                    .map_err(decode)?
                    .map_or(Value::Null, Value::Text),
                "VOID" => Value::Null,
                other => {
                    return Err(misuse(format!(
                        "column {i} ({}) is of type {other}, which the store does not read",
                        column.name()
                    )))
                }
            })
        })
        .collect()
}

/// sqlx's error as the store's: the server's SQLSTATE says what kind of
/// failure it is; an error without one is the connection's.
fn error_of(error: sqlx::Error) -> Error {
    match &error {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.to_string()).unwrap_or_default();
            Error::Postgres {
                failure: failure_of(&code),
                message: db.message().to_string(),
                code: if code.is_empty() { "?".into() } else { code },
            }
        }
        _ => Error::Postgres {
            failure: Failure::Other,
            code: String::new(),
            message: error.to_string(),
        },
    }
}

/// What kind of failure a SQLSTATE is.
fn failure_of(code: &str) -> Failure {
    match code {
        // serialization failure, deadlock, lock not available, cancelled
        // (statement timeout), too many connections
        "40001" | "40P01" | "55P03" | "57014" | "53300" => Failure::Busy,
        // disk full
        "53100" => Failure::Full,
        _ if code.starts_with("23") => Failure::Constraint,
        _ => Failure::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::placeholders;

    #[test]
    fn placeholders_are_numbered_as_sqlite_numbers_them() {
        assert_eq!(placeholders("a = ? AND b = ?"), "a = $1 AND b = $2");
        assert_eq!(
            placeholders("x = ?1, y = ?2, z = ?1 WHERE id = ? AND r = ?"),
            "x = $1, y = $2, z = $1 WHERE id = $3 AND r = $4"
        );
        assert_eq!(
            placeholders("SELECT '?', \"a?\" FROM t WHERE c = ?"),
            "SELECT '?', \"a?\" FROM t WHERE c = $1"
        );
    }
}
