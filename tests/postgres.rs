//! The daemon on PostgreSQL (`todod --database postgres://...`): what differs
//! from SQLite. The rest of the suite runs there too when
//! `TODOD_TEST_DATABASE_URL` names a server (`.ci/run` starts one); without
//! one, the tests that need it say so and stop.
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use todod::store::Store;
use todod_e2e::{binary, proto, todod_command, wait_with_timeout, RealDaemon};

/// A todod on `state_dir` and `database` that is expected to refuse to start:
/// its exit status and what it said.
fn refused_start(state_dir: &std::path::Path, database: &str) -> (bool, String) {
    let mut child = Command::new(binary("todod"))
        .arg("--state-dir")
        .arg(state_dir)
        .args(["--listen", "127.0.0.1:0", "--socket", "none"])
        .args(["--database", database])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn todod");
    let status = wait_with_timeout(&mut child, Duration::from_secs(60));
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.success(), stderr)
}

async fn plan_names(daemon: &RealDaemon) -> Vec<String> {
    let mut client = daemon.client().await;
    let plans = client
        .list_plans(proto::ListPlansRequest::default())
        .await
        .unwrap()
        .into_inner()
        .plans;
    plans
        .into_iter()
        .filter_map(|p| p.plan.map(|plan| plan.name))
        .collect()
}

#[test]
fn a_database_that_is_not_postgres_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stderr) = refused_start(dir.path(), "mysql://db/todod");
    assert!(!ok);
    assert!(
        stderr.contains("--database") && stderr.contains("postgres://"),
        "{stderr}"
    );
}

/// One daemon per database, as one per state directory on SQLite: a second
/// one refuses to start, naming why; once the first is killed (its session,
/// and the lock with it, ends with the process), another starts on the same
/// database and finds the graph, acknowledged writes included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_daemon_per_database_and_the_next_finds_the_graph_after_a_kill() {
    let first_dir = tempfile::tempdir().unwrap();
    let second_dir = tempfile::tempdir().unwrap();
    let Some(url) = Store::test_database_url(first_dir.path()) else {
        eprintln!("no PostgreSQL server (TODOD_TEST_DATABASE_URL): not run");
        return;
    };
    let mut first = RealDaemon::spawn(first_dir.path());
    let mut client = first.client().await;
    for name in ["kept-1", "kept-2"] {
        client
            .create_plan(proto::CreatePlanRequest {
                name: name.into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }

    let (ok, stderr) = refused_start(second_dir.path(), &url);
    assert!(!ok, "a second daemon started on the same database");
    assert!(
        stderr.contains("another todod is serving this database"),
        "{stderr}"
    );

    first.kill9();
    // The server ends the dead session when it reads the closed socket,
    // which no signal here announces: the next daemon tries until it may.
    let mut tries = 0;
    let second = loop {
        match try_start(second_dir.path(), &url) {
            Ok(daemon) => break daemon,
            Err(stderr) => {
                assert!(
                    stderr.contains("another todod is serving this database"),
                    "{stderr}"
                );
                tries += 1;
                assert!(tries < 100, "the killed daemon's lock was never released");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(plan_names(&second).await, ["kept-1", "kept-2"]);
}

/// A todod on `state_dir` and `database`, serving; or what it said when it
/// refused to start.
fn try_start(state_dir: &std::path::Path, database: &str) -> Result<RealDaemon, String> {
    let mut child = todod_command(
        state_dir,
        &[
            "--listen",
            "127.0.0.1:0",
            "--socket",
            "none",
            "--database",
            database,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn todod");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let Some(addr) = line.trim().strip_prefix("todod listening on ") else {
        wait_with_timeout(&mut child, Duration::from_secs(60));
        let mut said = String::new();
        stderr.read_to_string(&mut said).unwrap();
        return Err(said);
    };
    // What it logs from now on goes to the test's output (a full pipe
    // would stop it).
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::stderr()));
    let token = std::fs::read_to_string(state_dir.join(todod::config::TOKEN_FILE))
        .ok()
        .map(|t| t.trim().to_string());
    Ok(RealDaemon {
        child,
        addr: addr.parse().unwrap(),
        state_dir: state_dir.to_path_buf(),
        token,
    })
}

/// Leases on a database daemons share: a task another daemon's run holds is
/// not taken while that run renews its lease; a clean stop hands it back at
/// once; the taker records the takeover, and the run that lost the task can
/// commit nothing more (the fence).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_lease_is_not_taken_and_a_released_one_is_taken_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some(url) = Store::test_database_url(dir.path()) else {
        eprintln!("no PostgreSQL server (TODOD_TEST_DATABASE_URL): not run");
        return;
    };
    let first = Store::connect_shared(&url).await.unwrap();
    let second = Store::connect_shared(&url).await.unwrap();
    let ctx = todod::store::WriteContext::default();
    first.create_plan("p", "", &ctx).await.unwrap();
    let kind = todod::domain::Kind::named("tokenization");
    let task = todod_e2e::abandoned_phase(&first, "p", kind, "{}", "run-a.1").await;

    assert!(!second.take_lease(task, "run-b.1").await.unwrap());
    assert_eq!(first.renew_leases("run-a").await.unwrap(), 1);
    assert!(!second.take_lease(task, "run-b.2").await.unwrap());
    // A run of the same daemon takes its own daemon's task (a retry).
    assert!(first.take_lease(task, "run-a.2").await.unwrap());

    assert_eq!(first.release_leases("run-a").await.unwrap(), 1);
    assert!(second.take_lease(task, "run-b.3").await.unwrap());
    let events = second
        .list_events(&todod::store::EventFilter {
            plan: "p".into(),
            task: Some(task),
            after_seq: 0,
            limit: 1000,
        })
        .await
        .unwrap();
    let resumed: Vec<_> = events.iter().filter(|e| e.kind == "resumed").collect();
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert!(
        resumed[0].reason.contains("stopped renewing its lease"),
        "{resumed:?}"
    );
    let refused = first.report_progress(task, "run-a.2", "{}").await;
    assert!(
        matches!(refused, Err(todod::store::Error::Fenced { .. })),
        "{refused:?}"
    );
    // And the lease moved with the task: the first daemon cannot take it back.
    assert!(!first.take_lease(task, "run-a.3").await.unwrap());
}

/// A write whose wait for the store's write lock is cancelled (a
/// statement_timeout, an operator's pg_cancel_backend) fails as busy, and the
/// writer serves the next write: the failed transaction it was left in is
/// rolled back, not carried into every write after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_cancelled_while_waiting_for_the_lock_leaves_the_writer_usable() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let Some(url) = Store::test_database_url(dir.path()) else {
        eprintln!("no PostgreSQL server (TODOD_TEST_DATABASE_URL): not run");
        return;
    };
    let store = Store::connect(&url).await.unwrap();
    let ctx = todod::store::WriteContext::default();
    store.create_plan("before", "", &ctx).await.unwrap();

    // Another session holds the write lock, as a write in progress would.
    let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT pg_advisory_xact_lock(1953457263, hashtext(current_schema()))")
        .execute(&mut holder)
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let store = store.clone();
        let ctx = ctx.clone();
        async move { store.create_plan("cancelled", "", &ctx).await }
    });
    // The store's writer, once it waits for this schema's write lock: cancel
    // that wait. (Seen from a session of its own, outside the holder's
    // transaction.)
    let mut watcher = sqlx::PgConnection::connect(&url).await.unwrap();
    let cancelled = loop {
        let cancelled: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_cancel_backend(pid) FROM pg_locks WHERE locktype = 'advisory' \
             AND NOT granted AND classid = 1953457263 \
             AND objid = CAST(hashtext(current_schema()) AS oid) AND objsubid = 2",
        )
        .fetch_all(&mut watcher)
        .await
        .unwrap();
        if !cancelled.is_empty() {
            break cancelled;
        }
        assert!(
            !waiting.is_finished(),
            "the write did not wait for the lock"
        );
        tokio::task::yield_now().await;
    };
    assert_eq!(cancelled, [true]);
    let refused = waiting.await.unwrap();
    assert!(
        matches!(
            refused,
            Err(todod::store::Error::Postgres {
                failure: todod::store::Failure::Busy,
                ..
            })
        ),
        "{refused:?}"
    );
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();

    store.create_plan("after", "", &ctx).await.unwrap();
    let names: Vec<String> = store
        .list_plans(false)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["after", "before"]);
}
