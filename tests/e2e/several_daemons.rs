//! Several daemons on one graph (PostgreSQL): each serves the API on the
//! shared graph, a phase task is run by one of them at a time under a lease
//! judged on the database's clock, and a daemon that dies, or is paused past
//! its lease, has the task taken over without a record lost or written
//! twice. Without a server (`TODOD_TEST_DATABASE_URL`) these say so and stop.
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use todod_e2e::daemons::{
    daemon, daemon_index, daemon_with_lease, done, files_in, holder, lease, let_go,
    open_files_under, poll, shard_holders, signal, task,
};
use todod_e2e::gen::{self, assert_result_matches, prompt_texts, write_prompts, written};
use todod_e2e::mock_openai::{MockOpenAi, Settings};
use todod_e2e::{create_generation, proto, task_events, RealDaemon};

/// What the three-daemon scenarios start from: the mock (25 ms an answer),
/// `prompts` prompts in `dir/prompts.jsonl`, and three daemons on `url`,
/// each with a state directory of its own.
struct Three {
    mock: MockOpenAi,
    dir: tempfile::TempDir,
    states: Vec<tempfile::TempDir>,
    daemons: Vec<RealDaemon>,
}

async fn three_daemons(url: &str, prompts: usize) -> Three {
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(25),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), prompts, false);
    let states: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let daemons = states.iter().map(|s| daemon(s.path(), url, &[])).collect();
    Three {
        mock,
        dir,
        states,
        daemons,
    }
}

/// The scenario on one machine: three daemons on one database run a
/// generation. The one running it is paused (SIGSTOP) past its lease, and
/// another takes the task over and goes on while the paused one still holds
/// the output file (the new holder forks it: the committed bytes go on in a
/// copy that takes the file's path). The paused one is let go on (SIGCONT)
/// and writes nothing anyone reads (its run is fenced, its file is at no
/// path). Then the holder is
/// killed (SIGKILL), another takes over after the lease, and the killed one
/// is restarted. Every record is in the output once, and the counts a user
/// reads are what the files hold. On the way, a watch through one daemon
/// sees a write made through another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_daemons_share_a_generation_through_a_pause_and_a_kill() {
    // Enough that the run is still going when the last takeover is looked
    // at (the lease in /metrics and `todoctl status`), under load too.
    const PROMPTS: usize = 8000;
    let shared = tempfile::tempdir().unwrap();
    let Some(url) = todod_e2e::postgres_only(shared.path()) else {
        return;
    };
    let Three {
        mock,
        dir,
        states,
        mut daemons,
    } = three_daemons(&url, PROMPTS).await;

    // A watch through the first daemon sees a write through the second.
    let mut first = daemons[0].client().await;
    let mut second = daemons[1].client().await;
    second
        .create_plan(proto::CreatePlanRequest {
            name: "watched".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut watch = first
        .watch_plan(proto::WatchPlanRequest {
            plan: "watched".into(),
            from_now: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    second
        .write_todos(todod_e2e::write_request(
            "watched",
            vec![todod_e2e::item("", "written through B", "pending", "high")],
        ))
        .await
        .unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(30), watch.next())
        .await
        .expect("the watch through A heard nothing of B's write")
        .expect("the watch ended")
        .unwrap();
    assert_eq!(heard.r#type, "task_created", "{heard:?}");

    let id = create_generation(
        &mut first,
        "gen",
        gen::spec(dir.path(), &mock.url, 16).to_string(),
    )
    .await;

    // Pause the holder once it has committed some records.
    let running = poll(
        &mut first,
        &id,
        "the run's progress",
        Duration::from_secs(120),
        |t| holder(t).is_some() && done(t) >= 400,
    )
    .await;
    let paused = daemon_index(&daemons, holder(&running).unwrap());
    signal(&daemons[paused], libc::SIGSTOP);
    let mut other = daemons[(paused + 1) % 3].client().await;
    let taken = poll(
        &mut other,
        &id,
        "a takeover from the paused daemon",
        Duration::from_secs(60),
        |t| holder(t).is_some_and(|pid| pid != daemons[paused].child.id()),
    )
    .await;
    let taker = daemon_index(&daemons, holder(&taken).unwrap());

    // The new holder goes on while the paused one still holds the output
    // file (it forks it); the paused one wakes then, and is fenced.
    let before = done(&taken);
    // Asked through the third daemon: a call to the paused one would hang.
    let mut other = daemons[3 - paused - taker].client().await;
    let going = poll(
        &mut other,
        &id,
        "progress after the takeover, the old holder still paused",
        Duration::from_secs(120),
        |t| t.status != "in_progress" || done(t) >= before + 400,
    )
    .await;
    assert_eq!(
        going.status, "in_progress",
        "the run ended too soon to be killed: {going:?}"
    );
    signal(&daemons[paused], libc::SIGCONT);
    let killed = daemon_index(&daemons, holder(&going).unwrap());
    daemons[killed].kill9();
    let killed_at = Instant::now();
    let survivor_at = (killed + 1) % 3;
    let mut survivor = daemons[survivor_at].client().await;
    let after_kill = poll(
        &mut survivor,
        &id,
        "a takeover from the killed daemon",
        Duration::from_secs(60),
        |t| {
            t.status != "in_progress"
                || holder(t).is_some_and(|pid| pid != daemons[killed].child.id())
        },
    )
    .await;
    let takeover = killed_at.elapsed();
    // Operators see the holder and its lease in /metrics too, and the
    // takeovers so far.
    // The run cannot move on while nobody holds it: it is still going.
    assert_eq!(after_kill.status, "in_progress", "{after_kill:?}");
    {
        let lease = after_kill.lease.as_ref().expect("a running task's lease");
        let run = todod_e2e::proto::lease::run_of(&lease.holder);
        let samples = todod_e2e::scrape::scrape(daemons[survivor_at].addr).await;
        let expiry = todod_e2e::scrape::sum(
            &samples,
            "todod_phase_lease_expiry_timestamp",
            &[("task", id.as_str()), ("holder", run)],
        );
        assert!(expiry > 1.7e9, "lease expiry {expiry} for {run}");
        let takeovers = todod_e2e::scrape::sum(
            &samples,
            "todod_phase_takeovers_total",
            &[("task", id.as_str())],
        );
        assert!(takeovers >= 2.0, "{takeovers} takeovers in /metrics");
        // And in `todoctl status`, through any daemon.
        let survivor = &daemons[survivor_at];
        let status = todod_e2e::cli::run_at(
            &survivor.url(),
            survivor.token.as_deref(),
            &["status", "gen"],
        );
        let (daemon_name, _) = todod_e2e::proto::lease::holder_parts(&lease.holder);
        assert!(
            status
                .stdout
                .contains(&format!("held by {daemon_name} (attempt "))
                && status.stdout.contains(", lease until "),
            "{status:#?}"
        );
    }
    daemons[killed] = daemon(states[killed].path(), &url, &[]);

    let mut c = daemons[killed].client().await;
    let finished = poll(
        &mut c,
        &id,
        "the generation's end",
        Duration::from_secs(300),
        |t| t.status == "completed" || t.status == "failed",
    )
    .await;
    assert_eq!(finished.status, "completed", "{}", finished.error);
    let files = written(dir.path(), &prompt_texts(PROMPTS));
    for i in 0..PROMPTS {
        assert_eq!(files.ids.get(&format!("p{i}")), Some(&1), "p{i}");
    }
    assert_result_matches(
        &finished,
        &files,
        "after a pause and a kill across three daemons",
    );
    let resumed = task_events(&mut c, &id, "resumed").await;
    assert!(
        resumed.len() >= 2,
        "two takeovers, {} resumed events: {resumed:?}",
        resumed.len()
    );
    assert!(
        resumed.iter().all(|e| e.reason.contains("lease")),
        "a takeover says why: {resumed:?}"
    );
    println!(
        "{PROMPTS} records once each; paused daemon {paused}, taken by {taker}, killed {killed}; \
         {} takeovers; the killed holder's task held again after {takeover:?} (lease {})",
        resumed.len(),
        lease()
    );
}

/// Leases are judged on the database's clock: a daemon whose own clock is an
/// hour ahead (faked with libfaketime for that process alone) does not take
/// a task whose holder keeps renewing its lease, though by its clock that
/// lease expired long ago.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_an_hour_ahead_takes_no_live_lease() {
    const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    let shared = tempfile::tempdir().unwrap();
    let Some(url) = todod_e2e::postgres_only(shared.path()) else {
        return;
    };
    assert!(
        Path::new(FAKETIME).exists(),
        "{FAKETIME} is missing: apt-get install libfaketime (.ci/run does)"
    );
    // Slow answers: the run goes on for the whole test.
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(500),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 2000, false);
    let (a_state, b_state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // A lease long enough that a slow renewal on a loaded machine is not
    // what the test sees; the skewed daemon's clock is an hour past it.
    let a = daemon_with_lease(a_state.path(), &url, "5s", &[]);
    let mut c = a.client().await;
    let id = create_generation(
        &mut c,
        "gen",
        gen::spec(dir.path(), &mock.url, 2).to_string(),
    )
    .await;
    poll(&mut c, &id, "A's run", Duration::from_secs(60), |t| {
        holder(t) == Some(a.child.id())
    })
    .await;
    let ahead = daemon_with_lease(
        b_state.path(),
        &url,
        "5s",
        &[
            ("LD_PRELOAD", FAKETIME),
            ("FAKETIME", "+1h"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    // Its clock is an hour ahead: the faked time shows in what it writes.
    let mut skewed = ahead.client().await;
    let plan = skewed
        .create_plan(proto::CreatePlanRequest {
            name: "skewed".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let created = humantime::parse_rfc3339(&plan.created_at).unwrap();
    let ahead_by = created
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(
        ahead_by > Duration::from_secs(3000),
        "the daemon's clock is not ahead ({ahead_by:?}): is libfaketime working?"
    );
    // Three lease terms: the skewed daemon looks every second.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let now = task(&mut c, &id).await;
    assert_eq!(holder(&now), Some(a.child.id()), "{:?}", now.lease);
    assert!(task_events(&mut c, &id, "resumed").await.is_empty());
    drop(ahead);
}

/// Outputs go to a directory every daemon reaches, checked when a daemon
/// would claim the work: a daemon that cannot reach it (the shared file
/// system not mounted on its machine, here the directory moved away after
/// the task was accepted) does not claim the task or any of its shards, and
/// says so once in the task's history; once the directory is back, it
/// claims the task and runs it to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_that_cannot_reach_the_output_directory_does_not_claim_the_task() {
    const PROMPTS: usize = 300;
    let shared = tempfile::tempdir().unwrap();
    let Some(url) = todod_e2e::postgres_only(shared.path()) else {
        return;
    };
    let mock = MockOpenAi::start(Settings::default()).await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), PROMPTS, false);
    let mount = dir.path().join("mnt");
    std::fs::create_dir(&mount).unwrap();
    let state = tempfile::tempdir().unwrap();
    let daemon = daemon(state.path(), &url, &[]);
    let mut c = daemon.client().await;
    c.create_plan(proto::CreatePlanRequest {
        name: "reach".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let gate = c
        .create_task(proto::CreateTaskRequest {
            plan: "reach".into(),
            content: "mount the share".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    let mut spec = gen::spec(dir.path(), &mock.url, 8);
    spec["output"] = mount.join("out.jsonl").display().to_string().into();
    spec["shards"] = 2.into();
    let id = c
        .create_task(proto::CreateTaskRequest {
            plan: "reach".into(),
            content: "generate on the share".into(),
            kind: "generation".into(),
            spec_json: spec.to_string(),
            depends_on: vec![gate.clone()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id;

    // The share goes away; then the task becomes ready.
    let away = dir.path().join("mnt.away");
    std::fs::rename(&mount, &away).unwrap();
    c.transition_task(todod_e2e::transition(&gate, "completed"))
        .await
        .unwrap();
    let said = todod_e2e::wait_events(&mut c, "reach", &id, "unreachable", 1).await;
    assert!(
        said[0]
            .reason
            .contains(&format!("{} cannot be reached", mount.display())),
        "{said:?}"
    );
    assert!(said[0].reason.contains("does not claim it"), "{said:?}");
    let now = task(&mut c, &id).await;
    assert_eq!(now.status, "pending", "claimed out of reach: {now:?}");
    assert!(now.lease.is_none(), "{:?}", now.lease);
    assert!(!mount.exists(), "a daemon out of reach made the directory");

    // The share is back: the daemon claims the task and runs it.
    std::fs::rename(&away, &mount).unwrap();
    let ended = todod_e2e::wait_task(&mut c, "reach", &id, |t| {
        matches!(t.status.as_str(), "completed" | "failed")
    })
    .await;
    assert_eq!(ended.status, "completed", "{}", ended.error);
    let files = written(&mount, &prompt_texts(PROMPTS));
    assert_eq!(files.ids.len(), PROMPTS);
    assert!(files.ids.values().all(|&n| n == 1), "a record twice");
    assert_result_matches(&ended, &files, "after the share came back");
    assert_eq!(
        task_events(&mut c, &id, "unreachable").await.len(),
        1,
        "said more than once"
    );
}

/// The sharded scenario: three daemons on one database share a
/// 20k-record generation split into three shards, one shard each. The
/// holder of one shard is paused (SIGSTOP) and stays paused to the end: its
/// shard is taken over and goes on at once in a fork of the file the paused
/// one still holds; woken (SIGCONT) after the run completes, it changes
/// nothing anyone reads. The holder of
/// another is killed (SIGKILL) and its shard taken over, and the killed
/// daemon is restarted. In the end every record is in exactly one part
/// once, the parts put together are the output, and the counts a user
/// reads are what the files hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_daemons_share_a_sharded_generation_through_a_pause_and_a_kill() {
    const PROMPTS: usize = 20_000;
    const SHARDS: u32 = 3;
    let shared = tempfile::tempdir().unwrap();
    let Some(url) = todod_e2e::postgres_only(shared.path()) else {
        return;
    };
    let Three {
        mock,
        dir,
        states,
        mut daemons,
    } = three_daemons(&url, PROMPTS).await;
    let mut first = daemons[0].client().await;
    let mut spec = gen::spec(dir.path(), &mock.url, 24);
    spec["shards"] = SHARDS.into();
    let id = create_generation(&mut first, "gen", spec.to_string()).await;

    // Each daemon takes its share: one shard each.
    let spread = poll(
        &mut first,
        &id,
        "one shard on each daemon",
        Duration::from_secs(120),
        |t| {
            let holders = shard_holders(t);
            let mut pids: Vec<u32> = holders.iter().flatten().copied().collect();
            pids.sort();
            pids.dedup();
            pids.len() == 3 && done(t) >= 1000
        },
    )
    .await;
    let holders = shard_holders(&spread);
    // Operators see each shard's holder in /metrics and `todoctl status`.
    {
        let samples = todod_e2e::scrape::scrape(daemons[1].addr).await;
        for shard in 0..SHARDS {
            let expiry = todod_e2e::scrape::sum(
                &samples,
                "todod_phase_shard_lease_expiry_timestamp",
                &[("task", id.as_str()), ("shard", &shard.to_string())],
            );
            assert!(expiry > 1.7e9, "shard {shard}: lease expiry {expiry}");
        }
        let status = todod_e2e::cli::run_at(
            &daemons[2].url(),
            daemons[2].token.as_deref(),
            &["status", "gen"],
        );
        for shard in 0..SHARDS {
            assert!(
                status
                    .stdout
                    .contains(&format!("shard {shard} of {SHARDS}: ")),
                "{status:#?}"
            );
        }
    }

    // Pause the holder of shard 0 past its lease: its shard is taken over.
    let paused = daemon_index(&daemons, holders[0].unwrap());
    signal(&daemons[paused], libc::SIGSTOP);
    let paused_pid = daemons[paused].child.id();
    let mut other = daemons[(paused + 1) % 3].client().await;
    let taken = poll(
        &mut other,
        &id,
        "shard 0 taken from the paused daemon",
        Duration::from_secs(60),
        |t| shard_holders(t)[0].is_some_and(|pid| pid != paused_pid),
    )
    .await;
    // It stays paused to the end: a daemon frozen for good (a paused VM,
    // a stopped container) holds nothing up.

    // Kill the holder of a shard still going once the run has gone on (the
    // taker of shard 0 if it still runs it: that shard, held up by the
    // pause, is the last to end); its shard is taken over, and the killed
    // daemon comes back.
    let before = done(&taken);
    let live_shard = |t: &todod_e2e::proto::Task| -> Option<usize> {
        let holders = shard_holders(t);
        let live = |i: &usize| holders[*i].is_some_and(|pid| pid != paused_pid);
        [0, 1, 2].into_iter().find(live)
    };
    let going = poll(
        &mut other,
        &id,
        "progress after the takeover",
        Duration::from_secs(120),
        |t| t.status != "in_progress" || (done(t) >= before + 500 && live_shard(t).is_some()),
    )
    .await;
    assert_eq!(
        going.status, "in_progress",
        "the run ended too soon to be killed: {going:?}"
    );
    let shard = live_shard(&going).unwrap();
    let killed = daemon_index(&daemons, shard_holders(&going)[shard].unwrap());
    let killed_pid = daemons[killed].child.id();
    daemons[killed].kill9();
    let killed_at = Instant::now();
    let mut survivor = daemons[3 - paused - killed].client().await;
    let after_kill = poll(
        &mut survivor,
        &id,
        "the shard taken from the killed daemon",
        Duration::from_secs(60),
        |t| {
            t.status != "in_progress"
                || t.shards.iter().any(|s| s.index as usize == shard && s.done)
                || shard_holders(t)[shard].is_some_and(|pid| pid != killed_pid)
        },
    )
    .await;
    let takeover = killed_at.elapsed();
    assert_eq!(after_kill.status, "in_progress", "{after_kill:?}");
    daemons[killed] = daemon(states[killed].path(), &url, &[]);

    let mut c = daemons[killed].client().await;
    let finished = poll(
        &mut c,
        &id,
        "the generation's end",
        Duration::from_secs(600),
        |t| t.status == "completed" || t.status == "failed",
    )
    .await;
    assert_eq!(finished.status, "completed", "{}", finished.error);
    let prompts = prompt_texts(PROMPTS);
    let parts = gen::assert_parts_make_the_whole(dir.path(), &prompts, SHARDS);
    let files = written(dir.path(), &prompts);
    assert_eq!(files, parts, "the output against its parts");
    for i in 0..PROMPTS {
        assert_eq!(files.ids.get(&format!("p{i}")), Some(&1), "p{i}");
    }
    assert_result_matches(
        &finished,
        &files,
        "a sharded generation after a pause and a kill across three daemons",
    );
    let resumed = task_events(&mut c, &id, "resumed").await;
    assert!(
        resumed.len() >= 2,
        "two takeovers, {} resumed events: {resumed:?}",
        resumed.len()
    );
    assert_eq!(
        task_events(&mut c, &id, "shard_done").await.len(),
        SHARDS as usize
    );
    // The history says the frozen holder's files were taken over.
    let forked = task_events(&mut c, &id, "forked").await;
    assert!(
        forked
            .iter()
            .any(|e| e.reason.contains("out.part-0000.jsonl")),
        "{forked:?}"
    );

    // Woken at last, the paused daemon finds its run fenced and its file at
    // no path: it lets go, and nothing anyone reads has changed.
    let before_wake = files_in(dir.path());
    let held = open_files_under(paused_pid, dir.path());
    assert!(
        held.iter()
            .any(|f| f.contains("out.part-0000.jsonl") && f.ends_with("(deleted)")),
        "the paused daemon held its shard's old file, now at no path: {held:?}"
    );
    signal(&daemons[paused], libc::SIGCONT);
    let_go(paused_pid, dir.path(), Duration::from_secs(60)).await;
    assert!(
        before_wake == files_in(dir.path()),
        "the woken daemon changed the files"
    );
    let after_wake = task(&mut c, &id).await;
    assert_eq!(after_wake.status, "completed");
    assert_eq!(
        after_wake.result_json, finished.result_json,
        "the result changed"
    );
    assert_eq!(
        after_wake.updated_at, finished.updated_at,
        "the task changed"
    );
    println!(
        "{PROMPTS} records over {SHARDS} shards once each; paused daemon {paused} (woken only at the end), killed {killed} (holding shard {shard}); \
         {} takeovers; the killed holder's shard held again after {takeover:?} (lease {})",
        resumed.len(),
        lease()
    );
}

/// The benchmark behind BENCHMARKS.md's "Sharded generation: records/s by
/// daemons": one generation of `TODOD_BENCH_PROMPTS` prompts (30,000) at a
/// total concurrency of `TODOD_BENCH_CONCURRENCY` (96) against the fast
/// mock (`TODOD_BENCH_LATENCY_MS`, 20 ms an answer), unsharded on one
/// daemon (the baseline), then in three shards on 1, 2 and 3 daemons, each
/// on a fresh schema; prints records/s and the ratio to the baseline.
/// Ignored: a measurement, not a test. Run it on release binaries:
/// `cargo build --release --workspace && TODOD_TEST_DATABASE_URL=... cargo
/// test --release -p todod-e2e --test several_daemons records_per_second --
/// --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn sharded_records_per_second_with_one_two_and_three_daemons() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let prompts = env("TODOD_BENCH_PROMPTS", 30_000) as usize;
    let concurrency = env("TODOD_BENCH_CONCURRENCY", 96);
    let latency = Duration::from_millis(env("TODOD_BENCH_LATENCY_MS", 20));
    let probe = tempfile::tempdir().unwrap();
    if todod_e2e::postgres_only(probe.path()).is_none() {
        return;
    }
    let mock = todod_e2e::fast_mock::FastMock::start(
        1,
        todod_e2e::fast_mock::FastSettings {
            latency,
            ..Default::default()
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), prompts, false);
    let mut baseline = None;
    for (daemons, shards) in [(1usize, 1u32), (1, 3), (2, 3), (3, 3)] {
        let shared = tempfile::tempdir().unwrap();
        let url = todod_e2e::postgres_only(shared.path()).unwrap();
        let out = tempfile::tempdir().unwrap();
        let states: Vec<_> = (0..daemons).map(|_| tempfile::tempdir().unwrap()).collect();
        let running: Vec<RealDaemon> = states.iter().map(|s| daemon(s.path(), &url, &[])).collect();
        let mut c = running[0].client().await;
        let mut spec = gen::spec(out.path(), &mock.urls[0], concurrency as usize);
        spec["prompts"] = dir
            .path()
            .join("prompts.jsonl")
            .display()
            .to_string()
            .into();
        spec["shards"] = shards.into();
        let began = Instant::now();
        let id = create_generation(&mut c, "gen", spec.to_string()).await;
        let finished = poll(
            &mut c,
            &id,
            "the generation's end",
            Duration::from_secs(1800),
            |t| t.status == "completed" || t.status == "failed",
        )
        .await;
        let elapsed = began.elapsed().as_secs_f64();
        assert_eq!(finished.status, "completed", "{}", finished.error);
        let rate = prompts as f64 / elapsed;
        let base = *baseline.get_or_insert(rate);
        println!(
            "daemons {daemons}, shards {shards}: {prompts} records in {elapsed:.1} s = {rate:.0} \
             records/s ({:.2} of one daemon unsharded)",
            rate / base
        );
        drop(running);
    }
}
