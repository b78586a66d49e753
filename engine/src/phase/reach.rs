//! Whether this daemon can reach the directories a phase task writes into,
//! asked before it claims the task (or one of its shards) on a database
//! several daemons share. Their outputs must be on a path every daemon
//! reaches (a shared file system); a daemon on a machine where that file
//! system is not mounted (or is mounted read-only, or hangs) must leave the
//! work to the others rather than claim it and fail it, or write it to a
//! local directory of the same name.
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use crate::phase::PhaseStore;
use todod_domain::TaskId;

/// How long the directories may take to answer: a hard-mounted network file
/// system whose server is gone hangs a `stat` for ever.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// Why `dir` cannot take the task's files, or `None` if it can: there, a
/// directory, and one this process may create files in.
pub fn unusable(dir: &Path) -> Option<String> {
    match std::fs::metadata(dir) {
        Err(e) => Some(format!(
            "{} cannot be reached: {}",
            dir.display(),
            crate::phase::spec::plain_io(&e)
        )),
        Ok(meta) if !meta.is_dir() => Some(format!("{} is not a directory", dir.display())),
        Ok(_) => {
            let Ok(c_path) = CString::new(dir.as_os_str().as_bytes()) else {
                return Some(format!("{} has a NUL byte", dir.display()));
            };
            // SAFETY: a NUL-terminated path; `access` reads it only.
            // W_OK says EROFS for a file system mounted read-only.
            let allowed = unsafe { libc::access(c_path.as_ptr(), libc::W_OK | libc::X_OK) } == 0;
            (!allowed).then(|| {
                format!(
                    "{} cannot be written here: {}",
                    dir.display(),
                    crate::phase::spec::plain_io(&std::io::Error::last_os_error())
                )
            })
        }
    }
}

/// Why this daemon cannot reach the directories of `paths` (the task's
/// claimed outputs), or `None` when it can reach them all.
pub fn unreachable(paths: &[String]) -> Option<String> {
    let dirs: std::collections::BTreeSet<&Path> =
        paths.iter().filter_map(|p| Path::new(p).parent()).collect();
    dirs.into_iter().find_map(unusable)
}

/// How long an answer stands before the directories are checked again: a
/// reachable one for a while (a look is every second), an unreachable one
/// briefly (the mount may be back).
const REACHABLE_FOR: Duration = Duration::from_secs(30);
const UNREACHABLE_FOR: Duration = Duration::from_secs(2);
/// How long a look waits for a check it just started: a file system that
/// answers at all answers well within it. A slower one is left to answer
/// (on its thread) while the loop goes on, and asked again at the next
/// look.
const LOOK_WAITS: Duration = Duration::from_millis(200);

/// One task's check: the one in flight (never more than one, so a hung
/// mount holds one blocking thread per task, not one per look), and the
/// last answer (`None` inside: reachable; else why not).
#[derive(Default)]
struct Check {
    pending: Option<(
        tokio::time::Instant,
        tokio::task::JoinHandle<Option<String>>,
    )>,
    answer: Option<(tokio::time::Instant, Option<String>)>,
}

/// This daemon run's view of which tasks it can reach, and what it has
/// said of those it cannot (in the task's history, which every daemon and
/// client reads: once per reason, not at every look).
#[derive(Default)]
pub struct Unreached {
    checks: HashMap<TaskId, Check>,
    said: HashSet<(TaskId, String)>,
}

impl Unreached {
    /// Whether the answer for `task` is "out of reach", and still stands:
    /// the look leaves it out of its plan, so that it takes none of the
    /// room for runs that could start, until it is time to ask again.
    pub fn out_of_reach(&self, task: TaskId) -> bool {
        self.checks
            .get(&task)
            .and_then(|c| c.answer.as_ref())
            .is_some_and(|(at, why)| why.is_some() && at.elapsed() < UNREACHABLE_FOR)
    }

    /// Forgets the tasks no longer runnable (ended, archived).
    pub fn keep_only(&mut self, runnable: &HashSet<TaskId>) {
        self.checks.retain(|task, _| runnable.contains(task));
        self.said.retain(|(task, _)| runnable.contains(task));
    }

    /// Whether this daemon may claim `task` (or a shard of it): on a
    /// database of its own, always (a run that cannot write fails saying
    /// why, as it always has); on a shared one, only when it reaches every
    /// directory the task writes into. Not while that is still being
    /// checked. A refusal is recorded in the task's history once per
    /// reason.
    pub async fn may_claim(&mut self, store: &PhaseStore, task: TaskId, run_id: &str) -> bool {
        if !store.is_shared() {
            return true;
        }
        let Some(why) = self.answer(store, task).await else {
            return false;
        };
        let Some(why) = why else {
            self.said.retain(|(t, _)| *t != task);
            return true;
        };
        if self.said.insert((task, why.clone())) {
            tracing::warn!(%task, reason = %why, "not claiming a task whose files this daemon cannot reach");
            if let Err(error) = store.note_unreachable(task, run_id, &why).await {
                tracing::warn!(%task, %error, "cannot record that the task is out of reach");
            }
        }
        false
    }

    /// The answer for `task`: `Some(None)` reachable, `Some(Some(why))`
    /// not, `None` still being checked.
    async fn answer(&mut self, store: &PhaseStore, task: TaskId) -> Option<Option<String>> {
        let now = tokio::time::Instant::now();
        let check = self.checks.entry(task).or_default();
        if let (None, Some((at, why))) = (&check.pending, &check.answer) {
            let stands = if why.is_none() {
                REACHABLE_FOR
            } else {
                UNREACHABLE_FOR
            };
            if now.duration_since(*at) < stands {
                return Some(why.clone());
            }
        }
        let wait = if check.pending.is_some() {
            Duration::ZERO
        } else {
            let paths = match store.task_claims(task).await {
                Ok(paths) => paths,
                Err(error) => {
                    tracing::warn!(%task, %error, "cannot read the task's output paths");
                    return None;
                }
            };
            let handle = tokio::task::spawn_blocking(move || unreachable(&paths));
            check.pending = Some((now, handle));
            LOOK_WAITS
        };
        let (started, handle) = check.pending.as_mut().expect("a check in flight");
        let started = *started;
        let joined = if wait.is_zero() {
            if !handle.is_finished() {
                None
            } else {
                Some(handle.await)
            }
        } else {
            tokio::time::timeout(wait, handle).await.ok()
        };
        let why = match joined {
            Some(joined) => {
                check.pending = None;
                joined.unwrap_or_else(|e| Some(format!("the check of its directories failed: {e}")))
            }
            // A hung mount: out of reach until its one check returns.
            None if now.duration_since(started) >= ANSWER_WITHIN => Some(format!(
                "its directories did not answer within {}s",
                ANSWER_WITHIN.as_secs()
            )),
            None => return None,
        };
        check.answer = Some((tokio::time::Instant::now(), why.clone()));
        Some(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_that_is_not_there_or_not_a_directory_is_out_of_reach() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.jsonl").display().to_string();
        assert_eq!(unreachable(std::slice::from_ref(&out)), None);

        let gone = dir.path().join("mnt/shared/out.jsonl");
        let why = unreachable(&[out.clone(), gone.display().to_string()]).unwrap();
        assert!(why.contains("mnt/shared cannot be reached"), "{why}");
        assert!(why.to_lowercase().contains("no such file"), "{why}");

        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let inside = file.join("out.jsonl").display().to_string();
        let why = unreachable(&[inside]).unwrap();
        assert!(why.contains("is not a directory"), "{why}");
        assert_eq!(unreachable(&[]), None);
    }
}
