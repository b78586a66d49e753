//! `todoctl status PLAN --watch` as a person sees it, in a pseudo-terminal:
//! the screen is redrawn in place (the cursor goes back over it, no new
//! screen below the old one), it ends when the plan's work ends with the
//! exit code `wait` would give, and `NO_COLOR` is honoured. Piped, it is a
//! line per event with no escape codes at all.
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use todod_e2e::cli::{await_line, strings, Env};

const PATIENCE: Duration = Duration::from_secs(30);

/// A pseudo-terminal: (the side todoctl writes to, the side the test reads).
fn pty() -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two fresh descriptors; names and settings are
    // left to the defaults.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both are ours and open.
    unsafe { (OwnedFd::from_raw_fd(slave), OwnedFd::from_raw_fd(master)) }
}

/// Everything the terminal received so far.
struct Screen(Arc<Mutex<Vec<u8>>>, std::sync::mpsc::Receiver<()>);

impl Screen {
    fn read_from(master: OwnedFd) -> Screen {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let sink = bytes.clone();
        let (closed, on_close) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _closed = closed; // dropped at the end: the terminal is closed
            let mut file = std::fs::File::from(master);
            let mut buf = [0u8; 4096];
            // Ends with EIO once the last writer has closed its side.
            while let Ok(n) = file.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Screen(bytes, on_close)
    }

    /// Everything the terminal received, once its writers have all closed
    /// it (the process ended and the test let go of its `Command`): the
    /// reader may lag behind the exit under load.
    fn all(&self) -> String {
        let _ = self.1.recv_timeout(PATIENCE);
        self.text()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn wait_for(&self, what: &str) {
        let deadline = Instant::now() + PATIENCE;
        while !self.text().contains(what) {
            assert!(
                Instant::now() < deadline,
                "no {what:?} on the terminal: {:?}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn exit_of(mut child: std::process::Child) -> ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the live status did not end when the plan's work did");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn live_on_a_terminal(env: &Env, plan: &str, extra_env: &[(&str, &str)]) -> (Command, Screen) {
    on_a_terminal(env, &["status", plan, "--watch"], extra_env)
}

fn on_a_terminal(env: &Env, args: &[&str], extra_env: &[(&str, &str)]) -> (Command, Screen) {
    let (slave, master) = pty();
    let mut cmd = env.cmd(args);
    cmd.env("TERM", "xterm-256color").env_remove("NO_COLOR");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(slave))
        .stderr(Stdio::piped());
    (cmd, Screen::read_from(master))
}

#[test]
fn the_live_status_redraws_in_place_and_ends_with_the_work() {
    let env = Env::start();
    let plan = "live";
    let out = env.write(
        plan,
        &json!([{"content": "Build", "status": "in_progress"}, {"content": "Ship"}]),
    );
    let [build, ship] = <[String; 2]>::try_from(strings(&out["created"])).expect("two");
    let (mut cmd, screen) = live_on_a_terminal(&env, plan, &[]);
    let child = cmd.spawn().expect("spawn todoctl");
    drop(cmd); // its copy of the terminal, so that the end is seen
    screen.wait_for("in progress:");
    env.ok(&["done", &build]);
    env.ok(&["start", &ship]);
    // Redrawn with the change (in colour: on a terminal, no NO_COLOR).
    screen.wait_for(&format!("\u{1b}[36m[~]\u{1b}[0m {ship}"));
    env.ok(&["done", &ship]);
    let status = exit_of(child);
    let text = screen.all();
    assert_eq!(status.code(), Some(0), "{text:?}");
    assert!(text.contains("\u{1b}[J"), "{text:?}");
    assert!(
        text.matches("F\u{1b}[J").count() >= 2,
        "not redrawn in place: {text:?}"
    );
    assert!(text.contains("2 tasks: 2 completed"), "{text:?}");
}

/// `watch TASK` on a terminal is the same screen, and ends with the task,
/// not with the plan.
#[test]
fn watching_a_task_on_a_terminal_redraws_and_ends_with_the_task() {
    let env = Env::start();
    let out = env.write(
        "live-task",
        &json!([{"content": "Build", "status": "in_progress"}, {"content": "Ship"}]),
    );
    let [build, ship] = <[String; 2]>::try_from(strings(&out["created"])).expect("two");
    let (mut cmd, screen) = on_a_terminal(&env, &["watch", &build], &[]);
    let child = cmd.spawn().expect("spawn todoctl");
    drop(cmd); // its copy of the terminal, so that the end is seen
    screen.wait_for("in progress:");
    env.ok(&["done", &build]);
    let status = exit_of(child);
    let text = screen.all();
    assert_eq!(status.code(), Some(0), "{text:?}");
    assert!(text.contains("F\u{1b}[J"), "not redrawn in place: {text:?}");
    // The plan goes on (Ship is still to do): only the task has ended.
    assert!(text.contains("1 pending"), "{text:?}");
    let shown = env.json(&["show", &ship]);
    assert_eq!(shown["task"]["status"], "pending");
}

#[test]
fn no_color_is_honoured_and_a_failure_ends_with_its_exit_code() {
    let env = Env::start();
    let plan = "live-fail";
    let out = env.write(
        plan,
        &json!([{"content": "Build", "status": "in_progress"}]),
    );
    let [build] = <[String; 1]>::try_from(strings(&out["created"])).expect("one");
    let (mut cmd, screen) = live_on_a_terminal(&env, plan, &[("NO_COLOR", "1")]);
    let child = cmd.spawn().expect("spawn todoctl");
    drop(cmd); // its copy of the terminal, so that the end is seen
    screen.wait_for("in progress:");
    env.ok(&["fail", &build, "--reason", "compiler crashed"]);
    let status = exit_of(child);
    let text = screen.all();
    assert_eq!(status.code(), Some(10), "{text:?}");
    assert!(
        text.contains(&format!("failed:\r\n    [!] {build}  Build")),
        "{text:?}"
    );
    // Cursor movement, but no colour.
    assert!(text.contains("\u{1b}[J"), "{text:?}");
    assert!(
        !text.contains("\u{1b}[3") && !text.contains("\u{1b}[1;3"),
        "{text:?}"
    );
}

#[test]
fn piped_it_is_a_line_per_event_with_no_escape_codes() {
    let env = Env::start();
    let plan = "live-piped";
    let out = env.write(
        plan,
        &json!([{"content": "Build", "status": "in_progress"}]),
    );
    let [build] = <[String; 1]>::try_from(strings(&out["created"])).expect("one");
    let mut cmd = env.cmd(&["status", plan, "--watch"]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn todoctl");
    let lines = todod_e2e::cli::lines_of(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    // The screen first: the watch is following from here on.
    seen.push(await_line(&lines, "the first screen", |l| {
        l.contains("1 task: 1 in_progress")
    }));
    env.ok(&["done", &build]);
    seen.push(await_line(&lines, "the change", |l| {
        l.contains("status_changed in_progress -> completed")
    }));
    seen.push(await_line(&lines, "the last screen", |l| {
        l.contains("1 task: 1 completed")
    }));
    let status = exit_of(child);
    assert_eq!(status.code(), Some(0));
    seen.extend(lines.iter()); // to the end of its output, however the reader lags
    let text = seen.join("\n");
    assert!(!text.contains('\u{1b}'), "{text:?}");
    // The history is not replayed as events.
    assert!(!text.contains("task_created"), "{text}");
}
