//! Several daemons on one PostgreSQL database, as the tests start and
//! watch them: a daemon with a short lease, who holds a task or its shards
//! (by process id), signals, and polling a task until a state is reached.
use std::path::Path;
use std::time::{Duration, Instant};

use crate::{proto, Client, RealDaemon};

/// The daemons' lease: short, so that takeovers take seconds (renewed
/// every third of it). `TODOD_TEST_LEASE` sets another, to measure the
/// takeover time with it (the figure is printed).
pub fn lease() -> String {
    std::env::var("TODOD_TEST_LEASE").unwrap_or_else(|_| "2s".into())
}

/// A daemon on the shared database `url`, with a state directory of its own
/// (its token, its socket), and `env` for it alone.
pub fn daemon(state: &Path, url: &str, env: &[(&str, &str)]) -> RealDaemon {
    daemon_with_lease(state, url, &lease(), env)
}

pub fn daemon_with_lease(state: &Path, url: &str, lease: &str, env: &[(&str, &str)]) -> RealDaemon {
    RealDaemon::spawn_env(state, &["--database", url, "--lease", lease], env)
}

/// The process id in a lease holder (`HOST-PID-NANOS.N`).
pub fn holder_pid(holder: &str) -> u32 {
    let mut parts = proto::lease::run_of(holder).rsplit('-');
    parts.next(); // the nanoseconds
    parts
        .next()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no process id in lease holder {holder:?}"))
}

pub fn signal(daemon: &RealDaemon, signal: i32) {
    // SAFETY: a signal to our own child, by its pid.
    unsafe {
        libc::kill(daemon.child.id() as i32, signal);
    }
}

/// The files under `dir` that process `pid` holds open, as /proc names
/// them (a file unlinked since ends in " (deleted)").
pub fn open_files_under(pid: u32, dir: &Path) -> Vec<String> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.starts_with(dir))
        .map(|target| target.display().to_string())
        .collect()
}

/// Waits (up to `limit`) until process `pid` holds nothing open under
/// `dir`: a woken daemon whose run was taken over has let go of its files.
pub async fn let_go(pid: u32, dir: &Path, limit: Duration) {
    let started = Instant::now();
    loop {
        let held = open_files_under(pid, dir);
        if held.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "process {pid} still holds {held:?} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every file directly in `dir`, by name, with its bytes.
pub fn files_in(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

pub async fn task(c: &mut Client, id: &str) -> proto::Task {
    c.get_task(proto::GetTaskRequest { id: id.into() })
        .await
        .unwrap()
        .into_inner()
}

/// Polls `task` through `c` until `done` holds (or fails after `limit`,
/// saying `what`). Polling, not a watch: the daemon answering may be the
/// only one not paused, and the state looked for (a lease's holder) is not
/// announced by an event of its own.
pub async fn poll(
    c: &mut Client,
    id: &str,
    what: &str,
    limit: Duration,
    done: impl Fn(&proto::Task) -> bool,
) -> proto::Task {
    let began = Instant::now();
    loop {
        let now = task(c, id).await;
        if done(&now) {
            return now;
        }
        assert!(
            began.elapsed() < limit,
            "{what}: not within {limit:?}; the task is {} ({:?}, {:?})",
            now.status,
            now.lease,
            now.progress
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn holder(t: &proto::Task) -> Option<u32> {
    t.lease
        .as_ref()
        .filter(|_| t.status == "in_progress")
        .map(|l| holder_pid(&l.holder))
}

pub fn done(t: &proto::Task) -> i64 {
    t.progress.as_ref().map_or(0, |p| p.done)
}

/// The daemon (process id) holding each shard of a running sharded task,
/// by shard index; `None` for a shard nobody holds (or done).
pub fn shard_holders(t: &proto::Task) -> Vec<Option<u32>> {
    let of = t.shards.first().map_or(0, |s| s.of) as usize;
    let mut holders = vec![None; of];
    if t.status != "in_progress" {
        return holders;
    }
    for s in &t.shards {
        if let (Some(lease), false) = (&s.lease, s.done) {
            holders[s.index as usize] = Some(holder_pid(&lease.holder));
        }
    }
    holders
}

/// Which of `daemons` is process `pid` (a lease holder's).
pub fn daemon_index(daemons: &[RealDaemon], pid: u32) -> usize {
    daemons
        .iter()
        .position(|d| d.child.id() == pid)
        .unwrap_or_else(|| panic!("held by pid {pid}, none of the daemons"))
}
