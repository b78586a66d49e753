//! The durable store of the todo graph: SQLite through sqlx.
//!
//! One writer connection serialises every write in a `BEGIN IMMEDIATE`
//! transaction, with WAL and `synchronous=FULL`, so a write that returns `Ok` is
//! on disk. Readers use a separate pool and never block the writer. After each
//! commit the newest event sequence number is published, which is how `WatchPlan`
//! streams learn that there is something new to read.
mod persist;
mod read;
mod sqlite;
mod views;
mod write;

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tokio::sync::watch;

use crate::domain;
pub use read::{EventFilter, TaskFilter};
pub use views::{Detail, EventView, PlanSummary, PlanView, TaskPage, TaskView};
pub use write::{NewTask, TaskUpdate, WrittenTodos};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// How long a connection waits for a lock held by another process before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// WAL checkpoints run in the background, batched this long after a commit.
const CHECKPOINT_DELAY: Duration = Duration::from_millis(200);
/// Safety net: the writer checkpoints by itself only if the WAL grows this big
/// (pages), i.e. if the background checkpointer falls far behind.
const WRITER_AUTOCHECKPOINT_PAGES: &str = "20000";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Rule(#[from] domain::Error),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
    #[error("sqlite: {0}")]
    Sqlite(String),
    #[error("the database holds data this version cannot read: {0}")]
    Corrupt(String),
}

/// Who asks for a write and why; recorded on every event it causes.
#[derive(Debug, Clone, Default)]
pub struct WriteContext {
    pub actor: String,
    pub reason: String,
    /// When set, the plan must be at exactly this revision.
    pub expected_revision: Option<i64>,
}

#[derive(Clone)]
pub struct Store {
    writer: SqlitePool,
    reader: SqlitePool,
    checkpointer: SqlitePool,
    committed_seq: watch::Sender<i64>,
}

impl Store {
    /// Opens (creating if needed) the database at `path` and runs migrations.
    pub async fn open(path: &Path) -> Result<Store, Error> {
        let options = SqliteConnectOptions::from_str("sqlite:")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let single = || {
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .acquire_timeout(Duration::from_secs(60))
                .idle_timeout(None)
                .max_lifetime(None)
        };
        // SQLite's automatic checkpoint runs inside the COMMIT that crosses the
        // threshold (every 1000 pages by default), adding milliseconds to one
        // client's write in a hundred. A separate connection checkpoints in the
        // background instead; PASSIVE checkpoints never block the writer.
        let writer = single()
            .connect_with(
                options
                    .clone()
                    .pragma("wal_autocheckpoint", WRITER_AUTOCHECKPOINT_PAGES),
            )
            .await?;
        MIGRATOR.run(&writer).await?;
        let checkpointer = single().connect_with(options.clone()).await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options.read_only(true))
            .await?;
        let last: Option<i64> = sqlx::query_scalar("SELECT MAX(seq) FROM events")
            .fetch_one(&writer)
            .await?;
        let (committed_seq, committed) = watch::channel(last.unwrap_or(0));
        tokio::spawn(checkpoint_after_commits(checkpointer.clone(), committed));
        Ok(Store {
            writer,
            reader,
            checkpointer,
            committed_seq,
        })
    }

    /// The sequence number of the newest committed event, updated after commit.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.committed_seq.subscribe()
    }

    fn published(&self, seq: Option<i64>) {
        if let Some(seq) = seq {
            self.committed_seq.send_if_modified(|current| {
                let newer = seq > *current;
                if newer {
                    *current = seq;
                }
                newer
            });
        }
    }

    /// `PRAGMA integrity_check`: "ok" for a sound database.
    pub async fn integrity_check(&self) -> Result<String, Error> {
        Ok(sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(&self.writer)
            .await?)
    }

    /// Closes the pools after a last checkpoint that empties the WAL.
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
        if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&self.checkpointer)
            .await
        {
            tracing::warn!(%error, "final WAL checkpoint failed; the next start replays the WAL");
        }
        self.checkpointer.close().await;
    }
}

/// Checkpoints the WAL shortly after commits, batching bursts. Ends when the
/// store is dropped or closed.
async fn checkpoint_after_commits(pool: SqlitePool, mut committed: watch::Receiver<i64>) {
    while committed.changed().await.is_ok() {
        tokio::time::sleep(CHECKPOINT_DELAY).await;
        committed.borrow_and_update();
        if pool.is_closed() {
            return;
        }
        if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&pool)
            .await
        {
            tracing::warn!(%error, "background WAL checkpoint failed");
        }
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
