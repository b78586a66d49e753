//! Backups of the graph and their restore. A backup is SQLite's `VACUUM
//! INTO` on a connection of its own (a read: a consistent snapshot of every
//! committed write, while writers go on), into a staging file beside the
//! target that is fsynced and then linked into place, never over a file: a
//! daemon killed during a backup leaves no file at the target. The copy is
//! checked before it is published. A restore, offline, checks a backup
//! (`integrity_check`, a schema this version knows) before it puts it in a
//! state directory, and says which phase outputs the backup knows still
//! match the files on disk (phase outputs are the user's files: a backup
//! records their identity, never their bytes).
use std::path::{Path, PathBuf};
use std::str::FromStr;

use sha2::{Digest, Sha256};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, Row};

use todod_engine::phase::files::FileState;
use todod_engine::phase::state::PhaseState;

/// Where the state directory notes its newest backup, for the message of a
/// daemon that refuses a damaged database.
pub const LAST_BACKUP_FILE: &str = "last-backup";

/// What a backup holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupInfo {
    pub path: PathBuf,
    pub bytes: u64,
    pub schema_version: i64,
    pub plans: i64,
    pub tasks: i64,
    /// The newest event in it: every write acknowledged before the backup
    /// began is at or before it.
    pub last_seq: i64,
}

/// A failed backup or restore, said for a person.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The target appeared meanwhile (another backup, another writer).
    #[error("{0}")]
    Exists(String),
    #[error("{0}")]
    Failed(String),
}

fn err(what: impl std::fmt::Display) -> BackupError {
    BackupError::Failed(what.to_string())
}

/// The newest migration this binary knows.
pub fn schema_version() -> i64 {
    todod_store::MIGRATOR
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or(0)
}

async fn open_read_only(path: &Path) -> Result<sqlx::SqliteConnection, BackupError> {
    // Said in words before SQLite says "(code: 14) unable to open database
    // file" for all of these alike.
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(err(format!("{}: no such file", path.display())));
        }
        Err(e) => return Err(err(format!("{}: cannot be read: {e}", path.display()))),
        Ok(m) if m.is_dir() => {
            return Err(err(format!(
                "{}: is a directory, not a database file",
                path.display()
            )));
        }
        Ok(_) => {}
    }
    SqliteConnectOptions::from_str("sqlite:")
        .map_err(err)?
        .filename(path)
        .read_only(true)
        .connect()
        .await
        .map_err(|e| {
            err(format!(
                "{}: cannot be opened as a database: {e}",
                path.display()
            ))
        })
}

/// Checks a database file as a backup: sound (`integrity_check`, or the
/// faster `quick_check`), of a schema this version knows; returns what it holds.
pub async fn inspect(path: &Path, thorough: bool) -> Result<BackupInfo, BackupError> {
    let mut conn = open_read_only(path).await?;
    let pragma = if thorough {
        "PRAGMA integrity_check"
    } else {
        "PRAGMA quick_check"
    };
    let verdict: Vec<String> = sqlx::query_scalar(pragma)
        .fetch_all(&mut conn)
        .await
        .map_err(|e| err(format!("{}: not a sound database ({e})", path.display())))?;
    if verdict != ["ok"] {
        return Err(err(format!(
            "{}: damaged: {}",
            path.display(),
            verdict.join("; ")
        )));
    }
    let version: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(&mut conn)
        .await
        .map_err(|_| err(format!("{}: not a todod database", path.display())))?;
    let version = version.unwrap_or(0);
    if version > schema_version() {
        return Err(err(format!(
            "{}: its schema ({version}) is newer than this todod knows ({}); restore it with a \
             newer todod",
            path.display(),
            schema_version()
        )));
    }
    let row = sqlx::query(
        "SELECT (SELECT COUNT(*) FROM plans), (SELECT COUNT(*) FROM tasks), \
         (SELECT COALESCE(MAX(seq), 0) FROM events)",
    )
    .fetch_one(&mut conn)
    .await
    .map_err(|e| err(format!("{}: not a todod database ({e})", path.display())))?;
    conn.close().await.ok();
    Ok(BackupInfo {
        path: path.to_path_buf(),
        bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        schema_version: version,
        plans: row.get(0),
        tasks: row.get(1),
        last_seq: row.get(2),
    })
}

/// The staging files of backups into `target`: `TARGET.todod-backup-PID-N`.
fn staging_prefix(target: &Path) -> String {
    format!("{}.todod-backup-", target.display())
}

/// Removes the staging files that dead daemons' backups into `target` left
/// (a live process's are its own business).
fn remove_dead_staging(target: &Path) {
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return;
    };
    let prefix = format!("{}.todod-backup-", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = file.strip_prefix(&prefix) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !alive && entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Backs the database at `db` up into `target` (which must not exist; its
/// directory must). The copy is written to a staging file of its own beside
/// the target (created exclusively, so that no other writer's file is ever
/// touched), then linked into place.
pub async fn backup(db: &Path, target: &Path) -> Result<BackupInfo, BackupError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    remove_dead_staging(target);
    let staging = PathBuf::from(format!(
        "{}{}-{}",
        staging_prefix(target),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    // VACUUM INTO writes into an empty file: one made here, exclusively.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&staging)
        .map_err(|e| err(format!("{}: {e}", staging.display())))?;
    let published = async {
        let mut conn = open_read_only(db).await?;
        sqlx::query("VACUUM INTO ?")
            .bind(staging.display().to_string())
            .execute(&mut conn)
            .await
            .map_err(|e| err(format!("the backup could not be written: {e}")))?;
        conn.close().await.ok();
        std::fs::File::open(&staging)
            .and_then(|f| f.sync_all())
            .map_err(err)?;
        let info = inspect(&staging, false).await?;
        todod_store::failpoint::hit("backup.staged");
        std::fs::hard_link(&staging, target).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                BackupError::Exists(format!(
                    "{} appeared while the backup was written; not touched",
                    target.display()
                ))
            } else {
                err(format!("{}: {e}", target.display()))
            }
        })?;
        std::fs::remove_file(&staging).map_err(err)?;
        if let Some(dir) = target.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(err)?;
        }
        Ok(BackupInfo {
            path: target.to_path_buf(),
            ..info
        })
    }
    .await;
    if published.is_err() {
        let _ = std::fs::remove_file(&staging);
    }
    published
}

/// Notes `backup` as the state directory's newest (best effort: a backup
/// that cannot be noted is still a backup).
pub fn note_last(state_dir: &Path, backup: &Path) {
    let note = state_dir.join(LAST_BACKUP_FILE);
    if let Err(e) = std::fs::write(&note, format!("{}\n", backup.display())) {
        tracing::warn!(error = %e, "cannot note the last backup in {}", note.display());
    }
}

/// The state directory's newest backup, if it noted one.
pub fn last_backup(state_dir: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(state_dir.join(LAST_BACKUP_FILE)).ok()?;
    Some(PathBuf::from(text.trim())).filter(|p| !p.as_os_str().is_empty())
}

/// Refuses a damaged database before the daemon opens it: `quick_check`,
/// and a message that names the last backup.
pub async fn check_before_start(db: &Path, state_dir: &Path) -> Result<(), BackupError> {
    if !db.exists() {
        return Ok(());
    }
    let mut conn = open_read_only(db).await?;
    let verdict: Result<Vec<String>, _> = sqlx::query_scalar("PRAGMA quick_check")
        .fetch_all(&mut conn)
        .await;
    conn.close().await.ok();
    let problem = match verdict {
        Ok(v) if v == ["ok"] => return Ok(()),
        Ok(v) => v.join("; "),
        Err(e) => e.to_string(),
    };
    let last = match last_backup(state_dir) {
        Some(path) => format!(
            "; the last backup is {}: restore it with `todod restore {} --state-dir {} --force`",
            path.display(),
            path.display(),
            state_dir.display()
        ),
        None => "; no backup of it is known".to_string(),
    };
    Err(err(format!(
        "{} is damaged ({problem}); todod will not start on it{last}",
        db.display()
    )))
}

/// How a phase output the backup knows compares with the file on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputCheck {
    pub task: i64,
    pub path: PathBuf,
    pub verdict: &'static str,
}

fn head_hash(path: &Path, len: u64) -> Option<String> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).ok()?;
    let mut head = vec![0u8; len as usize];
    file.read_exact(&mut head).ok()?;
    Some(
        Sha256::digest(&head)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}

fn compare(file: &FileState) -> &'static str {
    let Ok(meta) = std::fs::metadata(&file.path) else {
        return "missing";
    };
    if meta.len() < file.committed {
        return "shorter than the backup's committed length";
    }
    if file.head_len > 0 && head_hash(&file.path, file.head_len).as_deref() != Some(&file.head) {
        return "replaced (its first bytes differ)";
    }
    "matches"
}

/// Restores `file` as the database of `state_dir` (offline: no daemon may
/// hold the directory). A directory that holds a database already is
/// refused unless `force`, and the database replaced is kept beside it
/// (`todod.db.replaced-TIME`, with its write-ahead log). Returns the backup's contents and how the phase
/// outputs it knows compare with the disk.
pub async fn restore(
    file: &Path,
    state_dir: &Path,
    force: bool,
) -> Result<(BackupInfo, Vec<OutputCheck>), BackupError> {
    let wal = PathBuf::from(format!("{}-wal", file.display()));
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        return Err(err(format!(
            "{} has a write-ahead log beside it ({}): it is a live database, not a backup; \
             make one with `todoctl backup`",
            file.display(),
            wal.display()
        )));
    }
    inspect(file, false).await?;
    crate::config::ensure_state_dir(state_dir)
        .map_err(|e| err(format!("{}: {e}", state_dir.display())))?;
    let _lock = crate::config::lock_state_dir(state_dir).map_err(|e| {
        err(format!(
            "{}: a daemon holds this state directory ({e}); stop it first",
            state_dir.display()
        ))
    })?;
    let db = state_dir.join(crate::config::DATABASE_FILE);
    if db.exists() && !force {
        return Err(err(format!(
            "{} holds a database already; give --force to replace it with the backup",
            state_dir.display()
        )));
    }
    let staging = todod_engine::phase::files::staging_path(&db);
    std::fs::copy(file, &staging).map_err(|e| err(format!("{}: {e}", staging.display())))?;
    std::fs::File::open(&staging)
        .and_then(|f| f.sync_all())
        .map_err(err)?;
    // What goes in place is what was checked: the copy, thoroughly.
    let info = match inspect(&staging, true).await {
        Ok(info) => BackupInfo {
            path: file.to_path_buf(),
            ..info
        },
        Err(e) => {
            let _ = std::fs::remove_file(&staging);
            return Err(e);
        }
    };
    // A replaced database is kept aside with its write-ahead log, never
    // deleted: restoring the wrong file must not lose the right one.
    if db.exists() {
        let stamp: String = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
            .to_string()
            .chars()
            .filter(|c| *c != '-' && *c != ':')
            .collect();
        for suffix in ["", "-wal", "-shm"] {
            let from = PathBuf::from(format!("{}{suffix}", db.display()));
            if from.exists() {
                let aside = format!("{}.replaced-{stamp}{suffix}", db.display());
                std::fs::rename(&from, &aside).map_err(|e| err(format!("{aside}: {e}")))?;
            }
        }
    }
    std::fs::rename(&staging, &db).map_err(|e| err(format!("{}: {e}", db.display())))?;
    std::fs::File::open(state_dir)
        .and_then(|d| d.sync_all())
        .map_err(err)?;
    let mut conn = open_read_only(&db).await?;
    let rows = sqlx::query("SELECT task_id, state FROM phase_state ORDER BY task_id")
        .fetch_all(&mut conn)
        .await
        .map_err(err)?;
    conn.close().await.ok();
    let mut checks = Vec::new();
    for row in rows {
        let task: i64 = row.get(0);
        let text: String = row.get(1);
        let Ok(state) = serde_json::from_str::<PhaseState>(&text) else {
            continue;
        };
        for file in state.files.iter().filter(|f| f.identity.is_some()) {
            checks.push(OutputCheck {
                task,
                path: file.path.clone(),
                verdict: compare(file),
            });
        }
    }
    Ok((info, checks))
}

/// Keeps a backup every `every` in `dir`, the newest `keep` of them, until
/// `shutdown` resolves.
pub async fn every(
    db: PathBuf,
    state_dir: PathBuf,
    dir: PathBuf,
    every: std::time::Duration,
    keep: usize,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let stamp: String = humantime::format_rfc3339_millis(std::time::SystemTime::now())
            .to_string()
            .chars()
            .filter(|c| *c != '-' && *c != ':')
            .collect();
        let name = format!("todod-{stamp}.db");
        match backup(&db, &dir.join(&name)).await {
            Ok(info) => {
                note_last(&state_dir, &info.path);
                tracing::info!(path = %info.path.display(), bytes = info.bytes, "backup written");
                prune(&dir, keep);
            }
            Err(e) => tracing::error!(error = %e, "periodic backup failed"),
        }
    }
}

/// Removes the oldest periodic backups of `dir` beyond `keep`.
fn prune(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut names: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("todod-") && n.ends_with("Z.db"))
        })
        .collect();
    names.sort();
    let excess = names.len().saturating_sub(keep);
    for old in names.into_iter().take(excess) {
        if let Err(e) = std::fs::remove_file(&old) {
            tracing::warn!(error = %e, "cannot remove old backup {}", old.display());
        }
    }
}
