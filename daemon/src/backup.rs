//! Backups of the graph. A backup is SQLite's `VACUUM INTO` on a connection
//! of its own (a read: a consistent snapshot of every committed write, while
//! writers go on), into a staging file beside the target that is fsynced and
//! then linked into place, never over a file: a daemon killed during a
//! backup leaves no file at the target. The copy is checked before it is
//! published, and its sha256 is written beside it (`FILE.sha256`, in
//! `sha256sum`'s format) once it is in place: SQLite's pages carry no
//! checksum, so a byte changed inside a row passes `integrity_check`, and
//! only this catches it. `restore` puts a backup back.
use std::path::{Path, PathBuf};
use std::str::FromStr;

use sha2::{Digest, Sha256};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, Row};

/// Where the state directory notes its newest backup, for the message of a
/// daemon that refuses a damaged database.
pub const LAST_BACKUP_FILE: &str = "last-backup";

/// The checksum file beside a backup: `FILE.sha256`, one line in
/// `sha256sum`'s format (`sha256sum -c` checks it too).
pub fn checksum_path(backup: &Path) -> PathBuf {
    let mut name = backup.as_os_str().to_owned();
    name.push(".sha256");
    PathBuf::from(name)
}

/// The sha256 of a file's bytes, in hex.
pub fn sha256_of(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `backup`'s checksum file: to a staging name, fsynced, renamed
/// into place, the directory fsynced.
fn write_checksum(backup: &Path, sha256: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let path = checksum_path(backup);
    let staging = todod_engine::phase::files::staging_path(&path);
    let name = backup
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut file = std::fs::File::create(&staging)?;
    file.write_all(format!("{sha256}  {name}\n").as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&staging, &path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// What the checksum beside a backup says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checksum {
    /// Its bytes are the ones the backup wrote.
    Matches,
    /// None beside it (a backup of an earlier todod, or copied without it):
    /// `integrity_check` is all that vouches for it.
    Absent,
}

/// Reads `backup`'s checksum file and compares it with `sha256` (its bytes'
/// hash); refused when they differ or the checksum file is unreadable.
pub fn check_checksum(backup: &Path, sha256: &str) -> Result<Checksum, BackupError> {
    let path = checksum_path(backup);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Checksum::Absent),
        Err(e) => return Err(err(format!("{}: cannot be read: {e}", path.display()))),
    };
    let expected = text.split_whitespace().next().unwrap_or("");
    if expected.len() != 64 || !expected.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(err(format!(
            "{}: not a sha256 checksum file (it should hold `HEX  NAME`)",
            path.display()
        )));
    }
    if !expected.eq_ignore_ascii_case(sha256) {
        return Err(err(format!(
            "{}: its bytes are not the ones the backup wrote (sha256 {sha256}, where {} says \
             {expected}): the file changed after it was made; not restored",
            backup.display(),
            path.display()
        )));
    }
    Ok(Checksum::Matches)
}

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

pub(crate) fn err(what: impl std::fmt::Display) -> BackupError {
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

pub(crate) async fn open_read_only(path: &Path) -> Result<sqlx::SqliteConnection, BackupError> {
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
        let sha256 = sha256_of(&staging).map_err(|e| err(format!("{}: {e}", staging.display())))?;
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
        write_checksum(target, &sha256).map_err(|e| {
            err(format!(
                "{} is written, but its checksum file {} could not be: {e}",
                target.display(),
                checksum_path(target).display()
            ))
        })?;
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
        let _ = std::fs::remove_file(checksum_path(&old));
    }
}
