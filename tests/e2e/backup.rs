//! Backups of a running daemon and their restore, from outside: `todoctl
//! backup` while a generation runs and 16 clients write, the copy checked
//! (`integrity_check`) and restored with `todod restore` into a new state
//! directory that a daemon then serves, holding every write acknowledged
//! before the backup began; a torn file, a newer schema and a non-empty
//! state directory refused; a daemon killed during a backup leaves no file
//! at the target; a damaged database is refused at start with the last
//! backup named.
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use todod_e2e::mock_openai::{MockOpenAi, Settings};
use todod_e2e::{binary, create_generation, gen, proto, todod_command, Client, RealDaemon};

fn todoctl(daemon: &RealDaemon, args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(binary("todoctl"));
    command
        .args(["--addr", &daemon.url()])
        .args(args)
        .env("HOME", "/nonexistent");
    if let Some(token) = &daemon.token {
        command.env("TODOD_TOKEN", token);
    }
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn todod_restore(file: &Path, state: &Path, force: bool) -> (i32, String, String) {
    todod_restore_with(file, state, if force { &["--force"] } else { &[] })
}

fn todod_restore_with(file: &Path, state: &Path, flags: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(binary("todod"));
    command
        .arg("restore")
        .arg(file)
        .arg("--state-dir")
        .arg(state)
        .args(flags);
    let out = command.env("RUST_LOG", "warn").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn make_plan(c: &mut Client, name: &str) {
    c.create_plan(proto::CreatePlanRequest {
        name: name.into(),
        ..Default::default()
    })
    .await
    .unwrap();
}

async fn task_ids(c: &mut Client, plan: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut token = String::new();
    loop {
        let page = c
            .list_tasks(proto::ListTasksRequest {
                plan: plan.into(),
                page_token: token.clone(),
                view: "basic".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        ids.extend(page.tasks.into_iter().map(|t| t.id));
        if page.next_page_token.is_empty() {
            return ids;
        }
        token = page.next_page_token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_of_a_busy_daemon_restores_with_every_acknowledged_write() {
    if todod_e2e::sqlite_only("backups copy the SQLite file") {
        return;
    }
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(20),
        ..Settings::default()
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    gen::write_prompts(&data.path().join("prompts.jsonl"), 1500, false);
    let daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let generation = create_generation(
        &mut c,
        "gen",
        gen::spec(data.path(), &mock.url, 8).to_string(),
    )
    .await;
    make_plan(&mut c, "busy").await;

    // 16 writers, each noting the tasks whose creation was acknowledged.
    let acked: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..16 {
        let (acked, stop, target) = (acked.clone(), stop.clone(), daemon.target());
        writers.push(tokio::spawn(async move {
            let mut c = todod_e2e::connect(target).await;
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let task = c
                    .create_task(proto::CreateTaskRequest {
                        plan: "busy".into(),
                        content: format!("writer {w} task {n}"),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                acked.lock().unwrap().insert(task.id);
                n += 1;
            }
        }));
    }
    // Let the writers and the generation get going, then back up.
    let done = |t: &proto::Task| t.progress.as_ref().map_or(0, |p| p.done);
    todod_e2e::wait_task(&mut c, "gen", &generation, |t| done(t) >= 200).await;
    while acked.lock().unwrap().len() < 200 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before: BTreeSet<String> = acked.lock().unwrap().clone();
    let file = data.path().join("graph.backup");
    let target = file.display().to_string();
    let (code, out, err) = tokio::task::block_in_place(|| todoctl(&daemon, &["backup", &target]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("backed up to"), "{out}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let generating = c
        .get_task(proto::GetTaskRequest {
            id: generation.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        generating.status, "in_progress",
        "the backup was taken mid-run"
    );
    // The run commits more after the backup: its output grows past the
    // backup's checkpoint.
    let after = done(&generating) + 300;
    todod_e2e::wait_task(&mut c, "gen", &generation, |t| done(t) >= after).await;

    // What the original holds, before it stops: the copy's daemon would take
    // the generation over, and one output file has one writer.
    let all = acked.lock().unwrap().clone();
    assert_eq!(
        task_ids(&mut c, "busy").await,
        all,
        "every acknowledged write"
    );
    drop(daemon);

    // The copy is sound and holds every write acknowledged before it.
    let info = todod::backup::inspect(&file, true).await.unwrap();
    assert!(info.tasks as usize > before.len());
    let restored = tempfile::tempdir().unwrap();
    let empty = |dir: &Path| std::fs::read_dir(dir).unwrap().count() == 0;
    // The generation went on after the backup: its output holds more than
    // the backup's checkpoint, and the restore says by how much.
    let out_file = data.path().join("out.jsonl");
    let on_disk = std::fs::read(&out_file).unwrap();
    let complete_lines = on_disk.iter().filter(|b| **b == b'\n').count();
    let (code, out, err) = todod_restore_with(&file, restored.path(), &["--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("{} tasks", info.tasks)), "{out}");
    assert!(out.contains("dry run: nothing was changed"), "{out}");
    assert!(empty(restored.path()), "a dry run changes nothing");
    let listed = out
        .lines()
        .find(|l| l.contains("out.jsonl:"))
        .unwrap_or_else(|| panic!("the output file is listed: {out}"));
    let number_after = |text: &str, key: &str| -> u64 {
        let at = text
            .find(key)
            .unwrap_or_else(|| panic!("{key:?} in {text}"))
            + key.len();
        text[at..].split(' ').next().unwrap().parse().unwrap()
    };
    let held = number_after(listed, "checkpoint holds ");
    let redo = number_after(listed, "makes the ");
    assert_eq!(
        number_after(listed, ", the file "),
        complete_lines as u64,
        "{listed}"
    );
    assert!(redo > 0 && held + redo == complete_lines as u64, "{listed}");
    // Without --force: refused, and the directory left as it was.
    let (code, _, err) = todod_restore(&file, restored.path(), false);
    assert_ne!(code, 0);
    assert!(
        err.contains("--force") && err.contains("1 output file"),
        "{err}"
    );
    assert!(empty(restored.path()), "a refused restore changes nothing");
    let (code, out, err) = todod_restore(&file, restored.path(), true);
    assert_eq!(code, 0, "{out}{err}");
    let copy = RealDaemon::spawn(restored.path());
    let mut rc = copy.client().await;
    let held = task_ids(&mut rc, "busy").await;
    let missing: Vec<&String> = before.difference(&held).collect();
    assert!(
        missing.is_empty(),
        "acknowledged before the backup, missing from it: {missing:?}"
    );
    assert!(
        held.is_subset(&all),
        "nothing the original did not acknowledge"
    );
    // The restored daemon finishes the generation from the backup's
    // checkpoint: every record once.
    let task = todod_e2e::wait_task(&mut rc, "gen", &generation, |t| {
        t.status == "completed" || t.status == "failed"
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    let files = gen::written(data.path(), &gen::prompt_texts(1500));
    assert_eq!(files.records + files.failed, 1500);
    assert!(files.ids.values().all(|n| *n == 1), "each prompt once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_a_torn_file_a_newer_schema_and_a_database_in_the_way() {
    if todod_e2e::sqlite_only("backups copy the SQLite file") {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    make_plan(&mut c, "p").await;
    for i in 0..50 {
        c.create_task(proto::CreateTaskRequest {
            plan: "p".into(),
            content: format!("task {i} {}", "x".repeat(400)),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let good = data.path().join("good.db");
    let answer = c
        .backup(proto::BackupRequest {
            path: good.display().to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.tasks, 50);
    // The same target again: refused, and the backup left alone.
    let again = c
        .backup(proto::BackupRequest {
            path: good.display().to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::AlreadyExists, "{again:?}");
    assert!(again.message().contains("path"), "{}", again.message());
    // Inside the state directory: refused by name.
    let inside = c
        .backup(proto::BackupRequest {
            path: state.path().join("copy.db").display().to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(inside.code(), tonic::Code::InvalidArgument, "{inside:?}");
    assert!(inside.message().starts_with("path"), "{}", inside.message());

    let bytes = std::fs::read(&good).unwrap();
    let torn = data.path().join("torn.db");
    std::fs::write(&torn, &bytes[..bytes.len() / 2]).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let (code, _, err) = todod_restore(&torn, fresh.path(), false);
    assert_ne!(code, 0);
    assert!(err.contains("torn.db"), "{err}");
    assert_eq!(
        std::fs::read_dir(fresh.path()).unwrap().count(),
        0,
        "a failed restore leaves the directory as it was"
    );

    // One byte changed inside a row: integrity_check cannot see it (SQLite
    // pages carry no checksum), the checksum written beside the backup can.
    let checksum = std::fs::read_to_string(data.path().join("good.db.sha256")).unwrap();
    assert_eq!(
        checksum.split_whitespace().collect::<Vec<_>>(),
        [todod::backup::sha256_of(&good).unwrap().as_str(), "good.db"],
        "sha256sum's format"
    );
    let bent = data.path().join("bent.db");
    let mut bytes = bytes.clone();
    let marker = b"task 7 xxxx";
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("a task's content in the file")
        + marker.len();
    bytes[at] = b'y';
    std::fs::write(&bent, &bytes).unwrap();
    std::fs::write(
        data.path().join("bent.db.sha256"),
        checksum.replace("good.db", "bent.db"),
    )
    .unwrap();
    assert!(
        todod::backup::inspect(&bent, true).await.is_ok(),
        "integrity_check passes the changed byte"
    );
    let (code, out, err) = todod_restore_with(&bent, fresh.path(), &["--dry-run"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("bent.db") && err.contains("changed after it was made"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(fresh.path()).unwrap().count(), 0);

    let newer = data.path().join("newer.db");
    std::fs::copy(&good, &newer).unwrap();
    {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite:{}", newer.display()))
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (99991231000001, 'from the future', 1, x'00', 0)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
    }
    let (code, _, err) = todod_restore(&newer, fresh.path(), false);
    assert_ne!(code, 0);
    assert!(err.contains("newer"), "{err}");

    // A state directory that holds a database: only with --force.
    let (code, _, err) = todod_restore(&good, state.path(), false);
    assert_ne!(code, 0);
    assert!(
        err.contains("daemon holds") || err.contains("--force"),
        "{err}"
    );
    drop(daemon);
    let (code, _, err) = todod_restore(&good, state.path(), false);
    assert_ne!(code, 0);
    assert!(err.contains("--force"), "{err}");
    let (code, out, err) = todod_restore(&good, state.path(), true);
    assert_eq!(code, 0, "{out}{err}");
    let back = RealDaemon::spawn(state.path());
    let mut c = back.client().await;
    assert_eq!(task_ids(&mut c, "p").await.len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_during_a_backup_leaves_no_file_at_the_target() {
    if todod_e2e::sqlite_only("backups copy the SQLite file") {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let target = data.path().join("graph.backup");
    {
        // Dies after the copy is written and before it is put in place.
        let daemon = RealDaemon::spawn_env(
            state.path(),
            &[],
            &[("TODOD_FAILPOINTS", "backup.staged=abort")],
        );
        let mut c = daemon.client().await;
        make_plan(&mut c, "p").await;
        c.create_task(proto::CreateTaskRequest {
            plan: "p".into(),
            content: "kept".into(),
            ..Default::default()
        })
        .await
        .unwrap();
        let died = c
            .backup(proto::BackupRequest {
                path: target.display().to_string(),
            })
            .await;
        assert!(died.is_err(), "{died:?}");
    }
    assert!(!target.exists(), "no file at the target");
    // The next daemon backs up to the same target: the dead one's staging
    // file is no obstacle.
    let daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let done = c
        .backup(proto::BackupRequest {
            path: target.display().to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(done.tasks, 1);
    assert!(todod::backup::inspect(&target, true).await.is_ok());
    let leftovers: Vec<_> = std::fs::read_dir(data.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let mut leftovers = leftovers;
    leftovers.sort();
    assert_eq!(
        leftovers,
        ["graph.backup", "graph.backup.sha256"],
        "no staging file left"
    );

    // A damaged database is refused at start, naming the last backup.
    let mut daemon = daemon;
    assert!(daemon.terminate().success());
    let db = state.path().join("todod.db");
    let mut bytes = std::fs::read(&db).unwrap();
    assert!(bytes.len() > 4096, "{} bytes", bytes.len());
    // Every page after the first (the header) overwritten.
    for b in &mut bytes[4096..] {
        *b = 0xA5;
    }
    std::fs::write(&db, &bytes).unwrap();
    let _ = std::fs::remove_file(state.path().join("todod.db-wal"));
    let out = todod_command(
        state.path(),
        &["--listen", "127.0.0.1:0", "--socket", "none"],
    )
    .stderr(std::process::Stdio::piped())
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started on a damaged database: {err}"
    );
    assert!(err.contains("damaged"), "{err}");
    assert!(
        err.contains(&target.display().to_string()),
        "names the last backup: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_backups_keep_the_newest_few() {
    if todod_e2e::sqlite_only("backups copy the SQLite file") {
        return;
    }
    let backups = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let dir = backups.path().display().to_string();
    let daemon = RealDaemon::spawn_with(
        state.path(),
        &[
            "--backup-every",
            "300ms",
            "--backup-dir",
            &dir,
            "--backup-keep",
            "2",
        ],
    );
    let mut c = daemon.client().await;
    make_plan(&mut c, "p").await;
    // The finished backups: a backup being written meanwhile has a staging
    // name (`....db.todod-backup-PID-N`, and SQLite's `-journal` of it).
    let listed = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(backups.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("todod-") && n.ends_with("Z.db"))
            .collect();
        names.sort();
        names
    };
    // No signal says a periodic backup happened but the files themselves:
    // look until a third has replaced the first (bounded: a minute).
    let first = loop {
        if let Some(name) = listed().first().cloned() {
            break name;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // A new backup is published before the oldest is pruned: a moment with
    // three is allowed, not a state that lasts.
    let names = loop {
        let names = listed();
        if !names.contains(&first) && names.len() == 2 {
            break names;
        }
        assert!(std::time::Instant::now() < deadline, "backups: {names:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(names.len() <= 2, "kept the newest 2: {names:?}");
    for name in &names {
        // Each a sound todod database (unless the daemon, backing up every
        // 300 ms, has pruned it meanwhile; the newest it has not).
        let path = backups.path().join(name);
        match todod::backup::inspect(&path, true).await {
            Ok(_) => {}
            Err(_) if !path.exists() && name != names.last().unwrap() => {}
            Err(e) => panic!("{name}: {e}"),
        }
    }
    let noted = std::fs::read_to_string(state.path().join("last-backup")).unwrap();
    assert!(noted.contains("todod-"), "{noted}");
}
