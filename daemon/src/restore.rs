//! `todod restore`: a backup put back as a state directory's database,
//! offline, in two steps. [`plan`] touches nothing: it checks the backup
//! (its checksum, `integrity_check`, a schema this version knows, each
//! error naming the user's file) and says what the restore will do, for
//! each phase task's output file: the records the backup's checkpoint holds,
//! the records the file holds now, and what the restored daemon will then
//! do (a file that grew past the checkpoint is cut back to it and the
//! records after it are made again). [`apply`] does it, and a failure
//! leaves the state directory as it found it.
//!
//! Phase outputs are the user's files: a backup records their identity and
//! committed length, never their bytes.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use sqlx::{Connection, Row};

use crate::backup::{err, BackupError, BackupInfo, Checksum};
use todod_engine::phase::files::FileState;
use todod_engine::phase::state::PhaseState;

/// What a restore will do, found before anything is changed.
#[derive(Debug, Clone)]
pub struct Plan {
    pub backup: BackupInfo,
    pub checksum: Checksum,
    pub state_dir: PathBuf,
    /// The database the state directory holds now, which the restore keeps
    /// aside (`todod.db.replaced-TIME`).
    pub replaces: Option<PathBuf>,
    pub outputs: Vec<OutputPlan>,
    /// The backup's bytes' hash: the copy put in place must have it.
    sha256: String,
}

/// One output file a phase task's checkpoint in the backup knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPlan {
    pub task: i64,
    /// The shard whose part file it is, for a sharded task.
    pub shard: Option<i64>,
    pub path: PathBuf,
    /// Bytes and lines (records, for a JSON lines file) the checkpoint holds.
    pub checkpoint: Extent,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub bytes: u64,
    /// `None` for a file that is not JSON lines (Parquet, Megatron's).
    pub records: Option<u64>,
}

/// How the file on disk stands against the backup's checkpoint, and so what
/// the restored daemon will do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// As the checkpoint left it: kept.
    Matches,
    /// Longer: the run that resumes cuts it back to the checkpoint and
    /// makes what was after it again.
    CutBack {
        file: Extent,
    },
    /// Shorter than the checkpoint: the run stops with an error naming it.
    Shorter {
        file: Extent,
    },
    /// Its first bytes are not the ones the checkpoint knew.
    Replaced,
    Missing,
}

impl Verdict {
    /// Whether restoring changes or loses something of this file.
    fn costs(&self) -> bool {
        !matches!(self, Verdict::Matches)
    }
}

/// Checks `file` as a backup and finds what restoring it into `state_dir`
/// will do. Nothing is created or changed.
pub async fn plan(file: &Path, state_dir: &Path) -> Result<Plan, BackupError> {
    let wal = PathBuf::from(format!("{}-wal", file.display()));
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        return Err(err(format!(
            "{} has a write-ahead log beside it ({}): it is a live database, not a backup; \
             make one with `todoctl backup`",
            file.display(),
            wal.display()
        )));
    }
    // open_read_only says a missing or unreadable file in words first.
    crate::backup::open_read_only(file)
        .await?
        .close()
        .await
        .ok();
    let sha256 = crate::backup::sha256_of(file)
        .map_err(|e| err(format!("{}: cannot be read: {e}", file.display())))?;
    let checksum = crate::backup::check_checksum(file, &sha256)?;
    let backup = crate::backup::inspect(file, true).await?;
    let outputs = outputs_of(file).await?;
    let db = state_dir.join(crate::config::DATABASE_FILE);
    Ok(Plan {
        backup,
        checksum,
        state_dir: state_dir.to_path_buf(),
        replaces: db.exists().then_some(db),
        outputs,
        sha256,
    })
}

/// Every output file the backup's checkpoints know (whole tasks' and
/// shards'), against the disk.
async fn outputs_of(file: &Path) -> Result<Vec<OutputPlan>, BackupError> {
    let mut conn = crate::backup::open_read_only(file).await?;
    let whole = sqlx::query("SELECT task_id, NULL, state FROM phase_state ORDER BY task_id")
        .fetch_all(&mut conn)
        .await
        .map_err(|e| {
            err(format!(
                "{}: its checkpoints cannot be read: {e}",
                file.display()
            ))
        })?;
    // A backup of a todod before shards has no such table.
    let shards = sqlx::query(
        "SELECT task_id, shard, state FROM phase_shards WHERE state IS NOT NULL \
         ORDER BY task_id, shard",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap_or_default();
    conn.close().await.ok();
    let mut outputs = Vec::new();
    for row in whole.iter().chain(&shards) {
        let task: i64 = row.get(0);
        let shard: Option<i64> = row.get(1);
        let text: String = row.get(2);
        let Ok(state) = serde_json::from_str::<PhaseState>(&text) else {
            continue;
        };
        for file in state.files.iter().filter(|f| f.identity.is_some()) {
            outputs.push(OutputPlan {
                task,
                shard,
                path: file.path.clone(),
                checkpoint: Extent {
                    bytes: file.committed,
                    records: lines_in(&file.path, Some(file.committed)),
                },
                verdict: compare(file),
            });
        }
    }
    Ok(outputs)
}

/// Whether a file is JSON lines, whose records are its lines.
fn is_lines(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e == "jsonl" || e == "ndjson")
}

/// The lines in the first `upto` bytes of a JSON lines file (all of it
/// without `upto`); `None` for another kind of file or one not readable.
fn lines_in(path: &Path, upto: Option<u64>) -> Option<u64> {
    use std::io::Read as _;
    if !is_lines(path) {
        return None;
    }
    let file = std::fs::File::open(path).ok()?;
    let mut reader = file.take(upto.unwrap_or(u64::MAX));
    let mut buffer = vec![0u8; 1 << 20];
    let mut lines = 0u64;
    loop {
        let n = reader.read(&mut buffer).ok()?;
        if n == 0 {
            return Some(lines);
        }
        lines += buffer[..n].iter().filter(|b| **b == b'\n').count() as u64;
    }
}

fn head_hash(path: &Path, len: u64) -> Option<String> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).ok()?;
    let mut head = vec![0u8; len as usize];
    file.read_exact(&mut head).ok()?;
    Some(crate::backup::hex(&Sha256::digest(&head)))
}

fn compare(file: &FileState) -> Verdict {
    let Ok(meta) = std::fs::metadata(&file.path) else {
        return Verdict::Missing;
    };
    let now = Extent {
        bytes: meta.len(),
        records: lines_in(&file.path, None),
    };
    if meta.len() < file.committed {
        return Verdict::Shorter { file: now };
    }
    if file.head_len > 0 && head_hash(&file.path, file.head_len).as_deref() != Some(&file.head) {
        return Verdict::Replaced;
    }
    if meta.len() > file.committed {
        return Verdict::CutBack { file: now };
    }
    Verdict::Matches
}

fn records(n: u64) -> String {
    format!("{n} record{}", if n == 1 { "" } else { "s" })
}

fn extent(e: &Extent) -> String {
    match e.records {
        Some(n) => format!("{} ({} bytes)", records(n), e.bytes),
        None => format!("{} bytes", e.bytes),
    }
}

impl OutputPlan {
    /// `t3 /data/out.jsonl: the backup's checkpoint holds 1000 records
    /// (...), the file 3600 (...): the restored daemon cuts it back to the
    /// checkpoint and makes the 2600 records after it again`.
    pub fn describe(&self) -> String {
        let shard = self
            .shard
            .map(|s| format!(" shard {s}"))
            .unwrap_or_default();
        let held = extent(&self.checkpoint);
        let what = match &self.verdict {
            Verdict::Matches => {
                format!("the backup's checkpoint holds {held}, as the file does: kept")
            }
            Verdict::CutBack { file } => {
                let again = match (file.records, self.checkpoint.records) {
                    (Some(now), Some(then)) => {
                        format!("the {} after it", records(now.saturating_sub(then)))
                    }
                    _ => format!("the {} bytes after it", file.bytes - self.checkpoint.bytes),
                };
                format!(
                    "the backup's checkpoint holds {held}, the file {}: the restored daemon cuts \
                     it back to the checkpoint and makes {again} again",
                    extent(file)
                )
            }
            Verdict::Shorter { file } => format!(
                "the backup's checkpoint holds {held}, the file only {}: the restored task \
                 cannot resume from it and will stop with an error naming it",
                extent(file)
            ),
            Verdict::Replaced => format!(
                "the backup's checkpoint holds {held}, but the file's first bytes are not the \
                 ones it knew (replaced since): the restored task will stop with an error naming it"
            ),
            Verdict::Missing => format!(
                "the backup's checkpoint holds {held}, and the file is missing: the restored \
                 task will stop with an error naming it"
            ),
        };
        format!("t{}{shard} {}: {what}", self.task, self.path.display())
    }
}

impl Plan {
    /// Whether the restore replaces a database or costs an output file
    /// something: it then needs `--force`.
    pub fn needs_force(&self) -> bool {
        self.replaces.is_some() || self.outputs.iter().any(|o| o.verdict.costs())
    }

    /// Why it needs `--force`, in words.
    pub fn why_force(&self) -> Vec<String> {
        let mut why = Vec::new();
        if let Some(db) = &self.replaces {
            why.push(format!("it replaces {} (kept aside)", db.display()));
        }
        let costly = self.outputs.iter().filter(|o| o.verdict.costs()).count();
        if costly > 0 {
            why.push(format!(
                "{costly} output file{} on disk {} not as the backup's checkpoints left them",
                if costly == 1 { "" } else { "s" },
                if costly == 1 { "is" } else { "are" }
            ));
        }
        why
    }

    /// What the restore does, a line each: the backup, the database it
    /// replaces, each output file.
    pub fn describe(&self) -> String {
        let b = &self.backup;
        let mut text = format!(
            "restore {} into {}\n  the backup: {} plans, {} tasks, events up to {} (schema {}); {}\n",
            b.path.display(),
            self.state_dir.display(),
            b.plans,
            b.tasks,
            b.last_seq,
            b.schema_version,
            match self.checksum {
                Checksum::Matches => format!(
                    "its bytes match {}",
                    crate::backup::checksum_path(&b.path).display()
                ),
                Checksum::Absent => format!(
                    "no checksum beside it ({}): integrity_check alone vouches for it",
                    crate::backup::checksum_path(&b.path).display()
                ),
            }
        );
        if let Some(db) = &self.replaces {
            let _ = writeln!(
                text,
                "  replaces {} (kept aside as todod.db.replaced-TIME)",
                db.display()
            );
        }
        for output in &self.outputs {
            let _ = writeln!(text, "  {}", output.describe());
        }
        text
    }
}

/// Puts the planned backup in place as the state directory's database (no
/// daemon may hold the directory). The database replaced is kept beside it
/// with its write-ahead log. A failure leaves the directory as it was.
pub async fn apply(plan: &Plan) -> Result<BackupInfo, BackupError> {
    let state_dir = &plan.state_dir;
    let created_dir = !state_dir.exists();
    crate::config::ensure_state_dir(state_dir)
        .map_err(|e| err(format!("{}: cannot be created: {e}", state_dir.display())))?;
    let lock_file = state_dir.join(crate::config::LOCK_FILE);
    let had_lock_file = lock_file.exists();
    let db = state_dir.join(crate::config::DATABASE_FILE);
    let staging = todod_engine::phase::files::staging_path(&db);
    let done = put_in_place(plan, &db, &staging).await;
    if done.is_err() {
        // As it was found: no staging copy, no lock file or directory this
        // restore made.
        let _ = std::fs::remove_file(&staging);
        if !had_lock_file {
            let _ = std::fs::remove_file(&lock_file);
        }
        if created_dir {
            let _ = std::fs::remove_dir(state_dir);
        }
    }
    done
}

async fn put_in_place(plan: &Plan, db: &Path, staging: &Path) -> Result<BackupInfo, BackupError> {
    let state_dir = &plan.state_dir;
    let _lock = crate::config::lock_state_dir(state_dir).map_err(|e| {
        err(format!(
            "{}: a daemon holds this state directory ({e}); stop it first",
            state_dir.display()
        ))
    })?;
    if db.exists() != plan.replaces.is_some() {
        return Err(err(format!(
            "{}: its database appeared or went while the restore was planned; nothing was changed",
            state_dir.display()
        )));
    }
    let file = &plan.backup.path;
    std::fs::copy(file, staging).map_err(|e| {
        err(format!(
            "{} could not be copied into {}: {e}",
            file.display(),
            state_dir.display()
        ))
    })?;
    std::fs::File::open(staging)
        .and_then(|f| f.sync_all())
        .map_err(|e| err(format!("{}: {e}", state_dir.display())))?;
    // What goes in place is what was checked: the copy has its bytes.
    let copied = crate::backup::sha256_of(staging)
        .map_err(|e| err(format!("{}: {e}", state_dir.display())))?;
    if copied != plan.sha256 {
        return Err(err(format!(
            "{} changed while it was restored (its copy's sha256 is not the one checked); \
             nothing was changed",
            file.display()
        )));
    }
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
    std::fs::rename(staging, db).map_err(|e| err(format!("{}: {e}", db.display())))?;
    std::fs::File::open(state_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| err(format!("{}: {e}", state_dir.display())))?;
    Ok(plan.backup.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_longer_than_its_checkpoint_is_cut_back_and_says_how_much() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n").unwrap();
        let mut file = FileState::planned(path.clone());
        file.identity = None;
        file.committed = 16;
        assert_eq!(
            compare(&file),
            Verdict::CutBack {
                file: Extent {
                    bytes: 24,
                    records: Some(3)
                }
            }
        );
        let plan = OutputPlan {
            task: 3,
            shard: None,
            path: path.clone(),
            checkpoint: Extent {
                bytes: 16,
                records: lines_in(&path, Some(16)),
            },
            verdict: compare(&file),
        };
        let text = plan.describe();
        assert!(
            text.contains("holds 2 records (16 bytes), the file 3 records (24 bytes)"),
            "{text}"
        );
        assert!(
            text.ends_with("makes the 1 record after it again"),
            "{text}"
        );
        file.committed = 24;
        assert_eq!(compare(&file), Verdict::Matches);
        file.committed = 30;
        assert!(matches!(compare(&file), Verdict::Shorter { .. }));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(compare(&file), Verdict::Missing);
    }
}
