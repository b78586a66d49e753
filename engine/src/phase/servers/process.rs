//! A server's process: started in a process group of its own with its
//! output in a log file, stopped group and all (SIGTERM, then SIGKILL after
//! the grace period), and recorded on disk (pid, process group, start time)
//! so that the next daemon after a kill -9 finds it and stops it, and never
//! runs a second one beside it.
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};

use super::spec::ServerSpec;

/// Old logs kept beside the current one (`NAME.log.1` ... `.3`).
const OLD_LOGS: u32 = 3;

/// The bytes of the log's end read for a refusal or an event, and the
/// lines of it quoted.
const TAIL_BYTES: u64 = 4096;
const TAIL_LINES: usize = 8;

/// A running server process.
pub struct Launched {
    pub child: Child,
    pub pid: u32,
    pub log: PathBuf,
    record: PathBuf,
}

/// What a daemon writes of each server it starts, for the next one.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    pid: i32,
    /// The process's start, in clock ticks since boot (`/proc/PID/stat`
    /// field 22): a pid reused by another process has another.
    start_ticks: u64,
    stop_grace_seconds: u64,
    command: Vec<String>,
}

/// Starts `spec` on `port`; its output goes to `dir/KEY.log` (the previous
/// logs moved to `.1`, `.2`, ...), and its record to `dir/KEY.json`.
pub fn launch(spec: &ServerSpec, key: &str, port: u16, dir: &Path) -> io::Result<Launched> {
    std::fs::create_dir_all(dir)?;
    let log = dir.join(format!("{key}.log"));
    rotate(&log)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)?;
    let (command, env) = spec.with_port(port);
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .envs(&env)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        // Its own group: a stop reaches the workers it forks (vLLM's engine
        // and its GPU workers), and a signal to the daemon's group does not
        // reach it.
        .process_group(0)
        .kill_on_drop(false);
    let child = cmd.spawn()?;
    let pid = child.id().unwrap_or(0);
    let record = dir.join(format!("{key}.json"));
    let written = Record {
        pid: pid as i32,
        start_ticks: start_ticks(pid as i32).unwrap_or(0),
        stop_grace_seconds: spec.stop_grace_seconds,
        command,
    };
    if let Err(error) = write_record(&record, &written) {
        // Unrecorded, it could outlive a kill -9 of the daemon unseen: it
        // goes (tokio reaps the child it drops).
        signal_group(pid as i32, libc::SIGKILL);
        return Err(io::Error::new(
            error.kind(),
            format!("cannot record it in {}: {error}", record.display()),
        ));
    }
    Ok(Launched {
        child,
        pid,
        log,
        record,
    })
}

impl Launched {
    /// Stops the process group: SIGTERM, then SIGKILL once `grace` has
    /// passed; returns how the leader ended. The record goes with it.
    pub async fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        let group = self.pid as i32;
        signal_group(group, libc::SIGTERM);
        let status = match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                signal_group(group, libc::SIGKILL);
                self.child.wait().await.ok()
            }
        };
        // Workers it left behind go with it.
        signal_group(group, libc::SIGKILL);
        self.forget();
        status
    }

    /// After the leader exited: what it left of its group goes too, and so
    /// does the record.
    pub fn reap(&mut self) {
        signal_group(self.pid as i32, libc::SIGKILL);
        self.forget();
    }

    fn forget(&self) {
        let _ = std::fs::remove_file(&self.record);
    }

    /// The last lines of its log, for a refusal or an event.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }
}

/// The end of a log file (the last `TAIL_BYTES`, from a line start).
pub fn log_tail(path: &Path) -> String {
    let read = || -> io::Result<String> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        let from = len.saturating_sub(TAIL_BYTES);
        file.seek(SeekFrom::Start(from))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let text = match (from > 0, text.find('\n')) {
            (true, Some(at)) => text[at + 1..].to_string(),
            _ => text,
        };
        let lines: Vec<&str> = text.trim_end().lines().collect();
        let last = &lines[lines.len().saturating_sub(TAIL_LINES)..];
        // A line may be long (a stack dump): each is cut at 300 characters.
        let cut: Vec<String> = last
            .iter()
            .map(|l| match l.char_indices().nth(300) {
                Some((at, _)) => format!("{}…", &l[..at]),
                None => l.to_string(),
            })
            .collect();
        Ok(cut.join("\n"))
    };
    read().unwrap_or_default()
}

/// How a process ended, in words: "exited with code 3", "killed by signal 9".
pub fn describe(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => format!("killed by signal {signal} ({})", signal_name(signal)),
            _ => "ended".into(),
        },
        None => "ended (its status could not be read)".into(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGINT => "SIGINT",
        libc::SIGBUS => "SIGBUS",
        _ => "another signal",
    }
}

fn signal_group(group: i32, signal: i32) {
    if group > 1 {
        // SAFETY: kill(2) with a negative pid signals that process group;
        // it touches no memory of ours.
        unsafe {
            libc::kill(-group, signal);
        }
    }
}

fn group_alive(group: i32) -> bool {
    // SAFETY: signal 0 only checks that the group exists.
    group > 1 && unsafe { libc::kill(-group, 0) } == 0
}

/// `/proc/PID/stat` field 22: when the process started, in ticks since boot.
fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

fn rotate(log: &Path) -> io::Result<()> {
    if !log.exists() {
        return Ok(());
    }
    let numbered = |n: u32| {
        let mut name = log.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    for n in (1..OLD_LOGS).rev() {
        let from = numbered(n);
        if from.exists() {
            std::fs::rename(&from, numbered(n + 1))?;
        }
    }
    std::fs::rename(log, numbered(1))
}

fn write_record(path: &Path, record: &Record) -> io::Result<()> {
    use std::io::Write;
    let staging = path.with_extension("json.todod-tmp");
    let mut file = std::fs::File::create(&staging)?;
    file.write_all(&serde_json::to_vec(record).map_err(io::Error::other)?)?;
    file.sync_all()?;
    std::fs::rename(&staging, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Stops what an earlier daemon left running: each recorded server whose
/// process (or group) is still there, by the record's pid, process group
/// and start time. Returns what it stopped, for the log.
pub async fn stop_left_over(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut stopped = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let Ok(record) = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<Record>(&b).map_err(|e| e.to_string()))
        else {
            let _ = std::fs::remove_file(&path);
            continue;
        };
        let leader_is_ours =
            record.start_ticks != 0 && start_ticks(record.pid) == Some(record.start_ticks);
        let leader_gone = start_ticks(record.pid).is_none();
        // A group whose leader is gone but whose workers live on is still
        // the server's (a pid is not reused while its group exists).
        if leader_is_ours || (leader_gone && group_alive(record.pid)) {
            signal_group(record.pid, libc::SIGTERM);
            let grace = Duration::from_secs(record.stop_grace_seconds);
            let deadline = tokio::time::Instant::now() + grace;
            while group_alive(record.pid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            signal_group(record.pid, libc::SIGKILL);
            // Bounded: a killed process nobody reaps (no init to adopt it
            // in some containers) stays in its group as a zombie.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while group_alive(record.pid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            stopped.push(format!("pid {} ({})", record.pid, record.command.join(" ")));
        }
        let _ = std::fs::remove_file(&path);
    }
    stopped
}

/// A free TCP port on the loopback interface, for `{port}`.
pub fn free_port() -> io::Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}
