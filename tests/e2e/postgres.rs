//! The daemon on PostgreSQL (`todod --database postgres://...`): what differs
//! from SQLite. The rest of the suite runs there too when
//! `TODOD_TEST_DATABASE_URL` names a server (`.ci/run` starts one); without
//! one, the tests that need it say so and stop.
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use todod_e2e::{binary, proto, wait_with_timeout, RealDaemon};
use todod_store::Store;

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

/// Several daemons serve one database: a second one starts beside the first
/// and reads the graph it wrote; once the first is killed, the second goes
/// on serving, and a daemon restarted on the first's state directory finds
/// the graph, acknowledged writes included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_daemons_serve_one_database_and_outlive_a_kill() {
    let first_dir = tempfile::tempdir().unwrap();
    let second_dir = tempfile::tempdir().unwrap();
    let Some(url) = todod_e2e::postgres_only(first_dir.path()) else {
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
    let second = RealDaemon::spawn_with(second_dir.path(), &["--database", &url]);
    assert_eq!(plan_names(&second).await, ["kept-1", "kept-2"]);

    first.kill9();
    let mut c = second.client().await;
    c.create_plan(proto::CreatePlanRequest {
        name: "kept-3".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let restarted = RealDaemon::spawn(first_dir.path());
    assert_eq!(plan_names(&restarted).await, ["kept-1", "kept-2", "kept-3"]);
}

/// Two daemons' stores on one PostgreSQL database (`None` without one), and
/// a phase task of plan `p` left in progress by the first's run `run-a.1`.
async fn two_daemons_and_a_task_left_by_one(
    dir: &std::path::Path,
) -> Option<(Store, Store, todod_domain::TaskId)> {
    let url = todod_e2e::postgres_only(dir)?;
    let first = Store::connect(&url).await.unwrap();
    let second = Store::connect(&url).await.unwrap();
    let ctx = todod_store::WriteContext::default();
    first.create_plan("p", "", &ctx).await.unwrap();
    let kind = todod_domain::Kind::named("tokenization");
    let task = todod_e2e::abandoned_phase(&first, "p", kind, "{}", "run-a.1").await;
    Some((first, second, task))
}

/// Leases on a database daemons share: a task another daemon's run holds is
/// not taken while that run renews its lease; a clean stop hands it back at
/// once; the taker records the takeover, and the run that lost the task can
/// commit nothing more (the fence).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_lease_is_not_taken_and_a_released_one_is_taken_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some((first, second, task)) = two_daemons_and_a_task_left_by_one(dir.path()).await else {
        return;
    };

    assert!(!second.take_lease(task, "run-b.1").await.unwrap());
    assert_eq!(first.renew_leases("run-a").await.unwrap(), 1);
    assert!(!second.take_lease(task, "run-b.2").await.unwrap());
    // A run of the same daemon takes its own daemon's task (a retry).
    assert!(first.take_lease(task, "run-a.2").await.unwrap());

    assert_eq!(first.release_leases("run-a").await.unwrap(), 1);
    assert!(second.take_lease(task, "run-b.3").await.unwrap());
    let events = second
        .list_events(&todod_store::EventFilter {
            plan: "p".into(),
            task: Some(task),
            after_seq: 0,
            limit: 1000,
        })
        .await
        .unwrap();
    let resumed: Vec<_> = events
        .iter()
        .filter(|e| e.event_type == "resumed")
        .collect();
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert!(
        resumed[0].reason.contains("stopped renewing its lease"),
        "{resumed:?}"
    );
    let refused = first.report_progress(task, "run-a.2", "{}").await;
    assert!(
        matches!(refused, Err(todod_store::Error::Fenced { .. })),
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
    let Some(url) = todod_e2e::postgres_only(dir.path()) else {
        return;
    };
    let store = Store::connect(&url).await.unwrap();
    let ctx = todod_store::WriteContext::default();
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
            Err(todod_store::Error::Postgres {
                failure: todod_store::Failure::Busy,
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

/// A schedule's due slot is fired by one daemon of those sharing the
/// database: the first to claim it, until its claim expires (it died
/// mid-firing); a re-measurement only by the daemon whose run holds the
/// task (it holds that run through its own gate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_slot_is_claimed_by_one_daemon_until_its_claim_expires() {
    use todod_domain::schedule::{Action, Schedule};
    use todod_store::FiringClaim;
    let dir = tempfile::tempdir().unwrap();
    let Some(url) = todod_e2e::postgres_only(dir.path()) else {
        return;
    };
    let (a, b) = (
        Store::connect(&url).await.unwrap(),
        Store::connect(&url).await.unwrap(),
    );
    let ctx = todod_store::WriteContext::default();
    a.create_plan("p", "", &ctx).await.unwrap();
    let kind = todod_domain::Kind::named("generation");
    let task = todod_e2e::abandoned_phase(&a, "p", kind, "{}", "run-a.1").await;
    let now = todod_store::now_ms();
    let every_second = Schedule::parse("* * * * * *", "UTC", Action::Probe, now).unwrap();
    a.set_schedule(task, Some(every_second), &[kind], now, &ctx)
        .await
        .unwrap();
    let due = a.due_schedules(now + 5_000).await.unwrap();
    let slot = due.iter().find(|d| d.task == task).unwrap().next_fire_at;
    let term = Duration::from_millis(300);
    let mine = |claim: FiringClaim| matches!(claim, FiringClaim::Mine { .. });

    // Not due yet on the database's clock: nobody's, whatever a daemon's
    // own clock says (checked when the slot is far enough ahead to be
    // sure it has not come meanwhile).
    if slot - todod_store::now_ms() > 200 {
        assert!(!mine(
            a.claim_firing(task, slot, "run-a", term, false)
                .await
                .unwrap()
        ));
    }
    let wait = slot - todod_store::now_ms() + 50;
    tokio::time::sleep(Duration::from_millis(wait.max(0) as u64)).await;

    let claimed = a
        .claim_firing(task, slot, "run-a", term, false)
        .await
        .unwrap();
    // The database's time comes with the claim, to count the slots by.
    assert!(
        matches!(claimed, FiringClaim::Mine { database_now: Some(at) } if at >= slot),
        "{claimed:?}"
    );
    assert!(!mine(
        b.claim_firing(task, slot, "run-b", term, false)
            .await
            .unwrap()
    ));
    // The claimant may claim again (a retry after a failed record).
    assert!(mine(
        a.claim_firing(task, slot, "run-a", term, false)
            .await
            .unwrap()
    ));
    // A slot that is not the schedule's due one is nobody's.
    assert!(!mine(
        b.claim_firing(task, slot - 1, "run-b", term, false)
            .await
            .unwrap()
    ));
    tokio::time::sleep(term * 2).await;
    assert!(mine(
        b.claim_firing(task, slot, "run-b", term, false)
            .await
            .unwrap()
    ));

    // A re-measurement: run-a's run holds the task, so only run-a may fire
    // it, whoever claimed the slot before, and even once run-a's lease has
    // expired (nobody took the task over: the gate is still run-a's).
    tokio::time::sleep(term * 2).await;
    assert!(!mine(
        b.claim_firing(task, slot, "run-b", term, true)
            .await
            .unwrap()
    ));
    assert!(mine(
        a.claim_firing(task, slot, "run-a", term, true)
            .await
            .unwrap()
    ));
}

/// A schema's name may be as long as PostgreSQL allows (63 bytes): the
/// writes that announce their commits on a channel named after it must go
/// through (they failed with "channel name too long" when the channel was
/// the schema's name), and another store hears of them (by the
/// announcement or, missing one, the poll each second: this does not tell
/// which).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_with_the_longest_name_serves_and_announces() {
    let dir = tempfile::tempdir().unwrap();
    let Some(url) = todod_e2e::postgres_only(dir.path()) else {
        return;
    };
    let base = url.split("?options=").next().unwrap();
    let name = format!("long_{}_", std::process::id());
    let schema = format!("{name}{}", "x".repeat(63 - name.len()));
    assert_eq!(schema.len(), 63);
    let url = format!("{base}?options=-c%20search_path%3D{schema}");
    let (a, b) = (
        Store::connect(&url).await.unwrap(),
        Store::connect(&url).await.unwrap(),
    );
    let mut heard = b.subscribe();
    let ctx = todod_store::WriteContext::default();
    a.create_plan("p", "", &ctx).await.unwrap();
    let written = *a.subscribe().borrow();
    tokio::time::timeout(
        Duration::from_secs(30),
        heard.wait_for(|seq| *seq >= written),
    )
    .await
    .expect("the other store never heard of the commit")
    .unwrap();
}

/// Shards are held like tasks, one lease each: a live one is not taken by
/// another daemon, one handed back (a daemon giving up its share) is taken
/// at once and is not made live again by its old daemon's renewals, and a
/// checkpoint from the attempt that gave it up is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_handed_back_is_taken_at_once_and_not_renewed_by_its_old_daemon() {
    use todod_domain::shards::Shard;
    let dir = tempfile::tempdir().unwrap();
    let Some((first, second, task)) = two_daemons_and_a_task_left_by_one(dir.path()).await else {
        return;
    };
    let shard = Shard { index: 1, of: 3 };
    assert!(first.take_shard(task, shard, "run-a.2").await.unwrap());
    assert!(!second.take_shard(task, shard, "run-b.1").await.unwrap());
    first.release_attempt(task, "run-a.2").await.unwrap();
    // The old daemon's renewal goes by its run's prefix: it must skip it.
    first.renew_leases("run-a").await.unwrap();
    assert!(second.take_shard(task, shard, "run-b.2").await.unwrap());
    let refused = first
        .commit_phase_batch(task, "run-a.2", "{}", None, None)
        .await;
    assert!(
        matches!(refused, Err(todod_store::Error::Fenced { .. })),
        "{refused:?}"
    );
    second
        .commit_phase_batch(
            task,
            "run-b.2",
            "{\"pass\": 0}",
            Some("{\"done\": 4}"),
            None,
        )
        .await
        .unwrap();
    let rows = first.shards_of(&[task]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].1.lease_owner.as_deref(), Some("run-b.2"));
    assert!(rows[0].1.lease_live);
    // The task's progress is its shards' sum.
    let progress = first.get_task(task).await.unwrap().progress.unwrap();
    let progress: serde_json::Value = serde_json::from_str(&progress).unwrap();
    assert_eq!(progress["done"], 4);
    assert_eq!(progress["shards"], 3);
    assert_eq!(
        first.live_daemons().await.unwrap(),
        1,
        "run-a renewed its presence"
    );
}
