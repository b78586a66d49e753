//! The real `todod` binary as an operator meets it: where state lives, who may
//! connect, one daemon per database, and a clean stop on SIGTERM.
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use futures::StreamExt;
use todod_e2e::{
    binary, connect, item, proto, read_readiness, wait_with_timeout, write_request, Target,
};

/// A todod with a clean environment plus `env`, and `args`.
fn todod(args: &[&str], env: &[(&str, &Path)]) -> Command {
    let mut command = Command::new(binary("todod"));
    command
        .args(args)
        .env_remove("TODOD_STATE_DIR")
        .env_remove("TODOD_LISTEN")
        .env_remove("TODOD_SOCKET")
        .env_remove("TODOD_TOKEN")
        .env_remove("XDG_STATE_HOME")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

/// Kills the daemon if a test fails before stopping it.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// Starts it and waits for its readiness line, "todod listening on ADDR".
fn start(mut command: Command) -> (Running, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn todod");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let addr = read_readiness(&mut stdout);
    // Keep reading stdout so the daemon never blocks on a full pipe.
    std::thread::spawn(move || for _ in stdout.lines() {});
    (Running(child), addr)
}

/// Runs a todod that is expected to refuse to start; bounded in time.
fn refused(mut command: Command) -> Output {
    let mut child = Running(
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn todod"),
    );
    let status = wait_with_timeout(&mut child, Duration::from_secs(30));
    let mut output = Output {
        status,
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    use std::io::Read;
    if let Some(mut err) = child.stderr.take() {
        err.read_to_end(&mut output.stderr).unwrap();
    }
    output
}

fn sigterm(child: &mut Child) -> std::process::ExitStatus {
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    child.wait().unwrap()
}

/// The daemon at `addr` with the token from its state directory.
fn owner(state: &Path, addr: &str) -> Target {
    Target {
        url: format!("http://{addr}"),
        token: Some(
            std::fs::read_to_string(state.join("token"))
                .unwrap()
                .trim()
                .to_string(),
        ),
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn no_token_is_only_for_loopback_and_a_token_of_spaces_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    let base = ["--state-dir", state, "--socket", "none"];
    let out = refused(todod(
        &[&base[..], &["--listen", "0.0.0.0:0", "--insecure-no-token"]].concat(),
        &[],
    ));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("only for loopback"), "{stderr}");
    for bad in ["   ", "short", "has spaces in the middle of it"] {
        let out = refused(todod(
            &[&base[..], &["--listen", "127.0.0.1:0", "--token", bad]].concat(),
            &[],
        ));
        assert!(!out.status.success(), "--token {bad:?} was taken");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--token"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_needs_the_token_it_generated_and_the_owner_needs_no_flags() {
    let home = tempfile::tempdir().unwrap();
    let (mut child, addr) = start(todod(
        &["--listen", "127.0.0.1:0"],
        &[("HOME", home.path())],
    ));
    let state = home.path().join(".local/state/todod");
    let token_file = state.join("token");
    assert_eq!(mode(&token_file), 0o600, "token file");
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    assert!(token.len() >= 32, "{token:?}");

    // A call without the token, or with a wrong one, is refused...
    let url = format!("http://{addr}");
    let mut anonymous = connect(url.as_str()).await;
    let err = anonymous
        .list_plans(proto::ListPlansRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err}");
    let mut wrong = connect(Target {
        url: url.clone(),
        token: Some("0123456789abcdef0123".into()),
    })
    .await;
    assert!(wrong
        .list_plans(proto::ListPlansRequest::default())
        .await
        .is_err());
    // ... the token passes ...
    let mut owner = connect(Target {
        url: url.clone(),
        token: Some(token.clone()),
    })
    .await;
    owner
        .write_todos(write_request("mine", vec![item("", "only mine", "", "")]))
        .await
        .unwrap();
    // ... and todoctl, run as the same user, finds it with no flags at all.
    let out = Command::new(binary("todoctl"))
        .arg("status")
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TODOD_ADDR", &url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("only mine"),
        "{out:?}"
    );
    // The Unix socket is private to the user and needs no token.
    let socket = format!("unix:{}", state.join("todod.sock").display());
    let out = Command::new(binary("todoctl"))
        .args(["--addr", &socket, "status"])
        .env("HOME", "/nonexistent")
        .env_remove("TODOD_TOKEN")
        .env_remove("TODOD_STATE_DIR")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    // A restart keeps the same token.
    assert!(sigterm(&mut child).success());
    let (mut child, _) = start(todod(
        &["--listen", "127.0.0.1:0"],
        &[("HOME", home.path())],
    ));
    assert_eq!(std::fs::read_to_string(&token_file).unwrap().trim(), token);
    assert!(sigterm(&mut child).success());
}

#[test]
fn state_goes_to_xdg_state_home_else_home_and_is_private() {
    let xdg = tempfile::tempdir().unwrap();
    let (mut child, _) = start(todod(
        &["--listen", "127.0.0.1:0"],
        &[("XDG_STATE_HOME", xdg.path())],
    ));
    let state = xdg.path().join("todod");
    assert!(state.join("todod.db").exists());
    assert_eq!(mode(&state), 0o700, "state directory");
    assert_eq!(mode(&state.join("todod.sock")), 0o600, "socket");
    assert!(sigterm(&mut child).success());
    assert!(!state.join("todod.sock").exists(), "socket left behind");

    let home = tempfile::tempdir().unwrap();
    let (mut child, _) = start(todod(
        &["--listen", "127.0.0.1:0", "--socket", "none"],
        &[("HOME", home.path())],
    ));
    assert!(home.path().join(".local/state/todod/todod.db").exists());
    assert!(sigterm(&mut child).success());
}

#[test]
fn a_second_daemon_on_the_same_state_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    let args = [
        "--state-dir",
        state,
        "--listen",
        "127.0.0.1:0",
        "--socket",
        "none",
    ];
    let (mut first, _) = start(todod(&args, &[]));
    let out = refused(todod(&args, &[]));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("another todod already uses"), "{stderr}");
    assert!(sigterm(&mut first).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_watchers_stops_cleanly_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap().to_string();
    let args = [
        "--state-dir",
        &state,
        "--listen",
        "127.0.0.1:0",
        "--socket",
        "none",
    ];
    let (mut child, addr) = start(todod(&args, &[]));
    let mut c = connect(owner(dir.path(), &addr)).await;
    c.write_todos(write_request(
        "keep",
        vec![item("", "survive a restart", "in_progress", "")],
    ))
    .await
    .unwrap();
    let mut watch = c
        .watch_plan(proto::WatchPlanRequest {
            plan: "keep".into(),
            after_seq: 0,
            from_now: false,
        })
        .await
        .unwrap()
        .into_inner();
    // Caught up with the history: the stream is now waiting for news.
    for _ in 0..3 {
        watch.next().await.unwrap().unwrap();
    }

    let stopped = tokio::task::spawn_blocking(move || sigterm(&mut child));
    let end = tokio::time::timeout(Duration::from_secs(30), watch.next())
        .await
        .expect("the watch stream did not end at shutdown");
    // The stream ends with UNAVAILABLE (the daemon says it is stopping), or
    // cleanly; it must not go on delivering events.
    match end {
        Some(Err(status)) => assert_eq!(status.code(), tonic::Code::Unavailable, "{status}"),
        None => {}
        Some(Ok(event)) => panic!("an event after shutdown began: {event:?}"),
    }
    assert!(stopped.await.unwrap().success(), "todod did not exit 0");

    let (mut child, addr) = start(todod(&args, &[]));
    let mut c = connect(owner(dir.path(), &addr)).await;
    let read = c
        .read_todos(proto::ReadTodosRequest {
            plan: "keep".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.todos[0].content, "survive a restart");
    assert_eq!(read.todos[0].status, "in_progress");
    assert!(sigterm(&mut child).success());
}
