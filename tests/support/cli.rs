//! The harness for the `todoctl` end-to-end tests (`tests/cli_*.rs`): the
//! real CLI binary run against a real `todod` of the test's own, with its exit
//! code, stdout and stderr captured ([`Env`], [`Run`]); long-running commands
//! (`watch`, a daemon on a Unix socket) followed line by line ([`Spawned`],
//! [`lines_of`], [`await_line`]); and small helpers that pick apart
//! `todoctl --json` output ([`ids`], [`strings`], [`task`], [`count`]).
//!
//! `todoctl` always gets `--addr` and `TODOD_ADDR`, and the other `TODOD_*`
//! variables are cleared, so nothing from the environment (or a default port)
//! leaks in.
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use crate::{binary, RealDaemon};

/// Only a safety net: nothing below waits this long unless something hangs.
pub const SAFETY_TIMEOUT: Duration = Duration::from_secs(30);

/// What one `todoctl` run left behind.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts the exit code and that stderr is exactly one plain
    /// `todoctl: ...` line (no Debug dump of a gRPC status); returns the message.
    pub fn refused(&self, code: i32) -> &str {
        assert_eq!(self.code, code, "expected exit {code}: {self:#?}");
        assert!(self.stdout.is_empty(), "nothing on stdout: {self:#?}");
        let message = self
            .stderr
            .strip_prefix("todoctl: ")
            .and_then(|m| m.strip_suffix('\n'))
            .unwrap_or_else(|| panic!("stderr is not one `todoctl: ` line: {self:#?}"));
        assert!(!message.contains('\n'), "one line only: {self:#?}");
        for noise in [
            "Status {",
            "MetadataMap",
            "details: [",
            "source: Some",
            "Error {",
        ] {
            assert!(
                !message.contains(noise),
                "plain message expected: {message}"
            );
        }
        message
    }
}

fn kill(pid: u32, signal: i32) {
    // SAFETY: sending a signal to a child process of ours, by its pid.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

/// Waits for a spawned todoctl, feeding it `stdin`, with the safety timeout.
pub fn finish(mut child: Child, stdin: Option<Vec<u8>>) -> Run {
    let pid = child.id();
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("stdin piped");
        // A refused input may make todoctl exit before reading all of it.
        std::thread::spawn(move || {
            let _ = pipe.write_all(&bytes);
        });
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(SAFETY_TIMEOUT) {
        Ok(output) => output.expect("wait for todoctl"),
        Err(_) => {
            kill(pid, libc::SIGKILL);
            panic!("todoctl did not finish within {SAFETY_TIMEOUT:?}");
        }
    };
    Run {
        code: output.status.code().expect("todoctl exited (not killed)"),
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    }
}

/// Runs `todoctl ARGS` with only the given address and token.
pub fn run_at(addr: &str, token: Option<&str>, args: &[&str]) -> Run {
    let mut cmd = todoctl_at(addr, token);
    cmd.args(args);
    run_cmd(cmd, None)
}

/// `todoctl` with only the given address, token and environment.
pub fn todoctl_at(addr: &str, token: Option<&str>) -> Command {
    let mut cmd = Command::new(binary("todoctl"));
    for var in [
        "TODOD_TOKEN",
        "TODOD_PLAN",
        "TODOD_CLIENT",
        "TODOD_ADDR",
        "TODOD_STATE_DIR",
        "XDG_STATE_HOME",
        "TODOCTL_COLOR",
    ] {
        cmd.env_remove(var);
    }
    // No token file of the machine's own daemon may leak in.
    cmd.env("HOME", "/nonexistent");
    cmd.env("TODOD_ADDR", addr).arg("--addr").arg(addr);
    if let Some(token) = token {
        cmd.arg("--token").arg(token);
    }
    cmd
}

pub fn run_cmd(mut cmd: Command, stdin: Option<&[u8]>) -> Run {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn todoctl");
    finish(child, stdin.map(<[u8]>::to_vec))
}

/// One daemon of this test's own, and `todoctl` pointed at it.
///
/// The fields are public so a test can rebuild an `Env` around the same daemon,
/// e.g. with a token set: `Env { token: Some(..), ..env }`.
pub struct Env {
    pub daemon: RealDaemon,
    pub token: Option<String>,
    pub _dir: TempDir,
}

impl Env {
    pub fn start() -> Env {
        Env::start_with(&[])
    }

    /// `extra` goes to todod; todoctl sends no token until one is set.
    pub fn start_with(extra: &[&str]) -> Env {
        let dir = tempfile::tempdir().expect("temp dir");
        let daemon = RealDaemon::spawn_with(dir.path(), extra);
        Env {
            daemon,
            token: None,
            _dir: dir,
        }
    }

    pub fn addr(&self) -> String {
        self.daemon.url()
    }

    /// todoctl as the daemon's owner runs it: it finds the token in the
    /// daemon's state directory.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = todoctl_at(&self.addr(), self.token.as_deref());
        cmd.env("TODOD_STATE_DIR", &self.daemon.state_dir);
        cmd.args(args);
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        run_cmd(self.cmd(args), None)
    }

    pub fn run_stdin(&self, args: &[&str], stdin: &[u8]) -> Run {
        run_cmd(self.cmd(args), Some(stdin))
    }

    /// Runs a command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let run = self.run(args);
        assert_eq!(run.code, 0, "todoctl {args:?} failed: {run:#?}");
        assert!(run.stderr.is_empty(), "todoctl {args:?} warned: {run:#?}");
        run.stdout
    }

    /// `todoctl --json ARGS`, parsed.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.ok(&all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
    }

    /// `todoctl --json write -p PLAN` with `todos` on stdin; must succeed.
    pub fn write(&self, plan: &str, todos: &Value) -> Value {
        let input = serde_json::to_vec(todos).expect("serialise");
        let run = self.run_stdin(&["--json", "write", "-p", plan], &input);
        assert_eq!(run.code, 0, "write {todos}: {run:#?}");
        serde_json::from_str(&run.stdout).expect("write --json prints JSON")
    }

    /// `todoctl add CONTENT -p PLAN ...`: prints just the new id.
    pub fn add(&self, plan: &str, content: &str, extra: &[&str]) -> String {
        let mut args = vec!["add", content, "-p", plan];
        args.extend_from_slice(extra);
        let id = self.ok(&args).trim().to_string();
        assert!(is_task_id(&id), "add prints the id, got {id:?}");
        id
    }

    /// Everything todoctl can observe of the store, for "nothing changed".
    pub fn snapshot(&self) -> String {
        let mut out = self.ok(&["--json", "plan", "list"]);
        let plans = serde_json::from_str::<Value>(&out).expect("plan list JSON")["plans"]
            .as_array()
            .expect("plans")
            .iter()
            .map(|p| p["plan"]["name"].as_str().expect("name").to_string())
            .collect::<Vec<_>>();
        for plan in plans {
            out += &self.ok(&["--json", "list", "-p", &plan, "--all"]);
            out += &self.ok(&["--json", "status", &plan, "--limit", "100"]);
            let tasks = self.json(&["list", "-p", &plan, "--all"]);
            for t in tasks["tasks"].as_array().expect("tasks") {
                out += &self.ok(&["--json", "show", t["id"].as_str().expect("id")]);
            }
        }
        out
    }
}

pub fn is_task_id(s: &str) -> bool {
    s.strip_prefix('t')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

pub fn ids(tasks: &Value) -> Vec<String> {
    tasks
        .as_array()
        .expect("an array of tasks")
        .iter()
        .map(|t| t["id"].as_str().expect("id").to_string())
        .collect()
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

pub fn task<'a>(tasks: &'a Value, id: &str) -> &'a Value {
    tasks
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {tasks}"))
}

pub fn count(summary: &Value, status: &str) -> i64 {
    summary["counts"][status]
        .as_i64()
        .unwrap_or_else(|| panic!("no count for {status} in {}", summary["counts"]))
}

/// The lines a child prints, as they come, over a channel.
pub fn lines_of(stream: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Reads lines until one satisfies `want`; panics after the safety timeout.
pub fn await_line(
    rx: &mpsc::Receiver<String>,
    what: &str,
    mut want: impl FnMut(&str) -> bool,
) -> String {
    let deadline = Instant::now() + SAFETY_TIMEOUT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if want(&line) => return line,
            Ok(line) => seen.push(line),
            Err(e) => panic!("no line with {what} ({e:?}); saw {seen:#?}"),
        }
    }
}

/// A spawned process that is killed if the test fails before it ends.
pub struct Spawned(pub Option<Child>);

impl Spawned {
    /// SIGINT (Ctrl-C), then the exit status, with the safety timeout.
    pub fn interrupt(self) -> ExitStatus {
        self.signal_and_wait(libc::SIGINT)
    }

    /// The exit status once the process ends by itself, with the safety timeout.
    pub fn wait_exit(self) -> ExitStatus {
        self.signal_and_wait(0)
    }

    /// `signal` (0: none), then the exit status, with the safety timeout.
    pub fn signal_and_wait(mut self, signal: i32) -> ExitStatus {
        let mut child = self.0.take().expect("child");
        let pid = child.id();
        if signal != 0 {
            kill(pid, signal);
        }
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        match rx.recv_timeout(SAFETY_TIMEOUT) {
            Ok(status) => status.expect("wait"),
            Err(_) => {
                kill(pid, libc::SIGKILL);
                panic!("process {pid} ignored signal {signal}");
            }
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn spawn_watch(env: &Env, args: &[&str]) -> (Spawned, mpsc::Receiver<String>) {
    let mut cmd = env.cmd(args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().expect("spawn todoctl watch");
    let lines = lines_of(child.stdout.take().expect("stdout"));
    (Spawned(Some(child)), lines)
}

/// `spawn_watch`, with stderr as lines too (where watch says what it follows).
pub fn spawn_watch_both(
    env: &Env,
    args: &[&str],
) -> (Spawned, mpsc::Receiver<String>, mpsc::Receiver<String>) {
    let mut cmd = env.cmd(args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn todoctl watch");
    let out = lines_of(child.stdout.take().expect("stdout"));
    let err = lines_of(child.stderr.take().expect("stderr"));
    (Spawned(Some(child)), out, err)
}

/// The real `todod` serving only a Unix socket; returns once it is listening.
pub fn spawn_unix_daemon(state_dir: &Path, socket: &Path) -> Spawned {
    let socket_arg = socket.to_str().expect("UTF-8 socket path");
    let mut child = crate::todod_command(state_dir, &["--listen", "none", "--socket", socket_arg])
        .spawn()
        .expect("spawn todod");
    let addr = crate::read_readiness(&mut BufReader::new(child.stdout.take().expect("stdout")));
    assert_eq!(addr, format!("unix:{}", socket.display()));
    Spawned(Some(child))
}
