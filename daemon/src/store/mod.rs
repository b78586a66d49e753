//! The durable store of the todo graph: SQLite through sqlx.
//!
//! One writer connection serialises every write in a `BEGIN IMMEDIATE`
//! transaction, with WAL and `synchronous=FULL`, so a write that returns `Ok` is
//! on disk. Readers use a separate pool and never block the writer. After each
//! commit the newest event sequence number is published, which is how `WatchPlan`
//! streams learn that there is something new to read.
mod checkpoints;
mod persist;
mod phases;
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
pub use checkpoints::Checkpoint;
pub use phases::{PhaseTask, DAEMON_ACTOR};
pub use read::{EventFilter, TaskFilter};
pub use views::{Detail, EventView, PlanSummary, PlanView, TaskPage, TaskView};
pub use write::{NewTask, TaskUpdate, WrittenTodos};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// How long a connection waits for a lock held by another process before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

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
        // SQLite checkpoints the WAL inside the commit that crosses 1000 pages.
        // Moving that to a background connection was measured and rejected:
        // its I/O slowed every commit near it (WriteTodos p50 0.75 -> 0.9 ms),
        // and a WAL left to grow made each commit's fdatasync dearer still.
        let writer = single().connect_with(options.clone()).await?;
        MIGRATOR.run(&writer).await?;
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
        let (committed_seq, _) = watch::channel(last.unwrap_or(0));
        Ok(Store {
            writer,
            reader,
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
        if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&self.writer)
            .await
        {
            tracing::warn!(%error, "final WAL checkpoint failed; the next start replays the WAL");
        }
        self.writer.close().await;
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
