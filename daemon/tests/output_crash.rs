//! Exactly-once phase output under SIGKILL: a child process appends records in
//! batches (files fsynced, then the checkpoint committed in SQLite) and is
//! killed at random moments; each restart resumes from the checkpoint. At the
//! end every record is in the files exactly once and every line is whole.
//!
//! The child is this same test binary, started again with TODOD_OUTPUT_CHILD
//! set, running `child_writer`.
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use todod::domain::{Kind, Priority, TaskId};
use todod::store::{NewTask, Store, WriteContext};
use todod::worker::output::OutputFiles;

const RECORDS: usize = 3000;
const BATCH: usize = 7;
const KILLS: usize = 20;

fn paths(dir: &Path) -> Vec<PathBuf> {
    vec![dir.join("output.jsonl"), dir.join("failures.jsonl")]
}

/// The child's work: resume from the checkpoint, write what is left, in batches.
async fn write_all(dir: &Path) {
    let store = Store::open(&dir.join("todod.db")).await.unwrap();
    let task = TaskId(1);
    let checkpoint = store.load_checkpoint(task).await.unwrap();
    let mut files = OutputFiles::open(&paths(dir), &checkpoint.offsets).unwrap();
    let mut batch = Vec::new();
    for i in 0..RECORDS {
        let id = format!("r{i}");
        if checkpoint.records.contains(&id) {
            continue;
        }
        // Every 13th record "fails" and goes to the failures file.
        let file = usize::from(i % 13 == 0);
        let line = format!("{{\"id\":\"{id}\",\"content\":\"answer {i}\"}}");
        files.append(file, line.as_bytes()).unwrap();
        batch.push(id);
        if batch.len() == BATCH || i + 1 == RECORDS {
            let offsets = files.sync().unwrap();
            store
                .commit_checkpoint(task, &offsets, &batch)
                .await
                .unwrap();
            println!("committed {}", batch.len());
            batch.clear();
        }
    }
    println!("done");
}

#[test]
fn child_writer() {
    // Only does something when started by the test below.
    if let Some(dir) = std::env::var_os("TODOD_OUTPUT_CHILD") {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(write_all(Path::new(&dir)));
    }
}

fn spawn_child(dir: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .env("TODOD_OUTPUT_CHILD", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// What a resumed worker sees after a kill: once the files are cut back to the
/// checkpoint, they hold exactly the committed records, each once, every line
/// whole.
fn check_consistent(dir: &Path, seed: u64) {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = Store::open(&dir.join("todod.db")).await.unwrap();
        let checkpoint = store.load_checkpoint(TaskId(1)).await.unwrap();
        store.close().await;
        let files = OutputFiles::open(&paths(dir), &checkpoint.offsets).unwrap();
        let mut seen = std::collections::HashSet::new();
        for (i, path) in paths(dir).iter().enumerate() {
            let text = std::fs::read_to_string(path).unwrap();
            assert_eq!(
                text.len() as u64,
                files.lengths()[i],
                "{} (seed {seed})",
                path.display()
            );
            for line in text.lines() {
                let value: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("torn line {line:?}: {e} (seed {seed})"));
                let id = value["id"].as_str().unwrap().to_string();
                assert!(seen.insert(id.clone()), "{id} twice (seed {seed})");
            }
        }
        assert_eq!(
            seen, checkpoint.records,
            "files and checkpoint disagree (seed {seed})"
        );
    });
}

#[test]
fn records_are_written_exactly_once_across_kills() {
    let dir = tempfile::tempdir().unwrap();
    // The task the checkpoint belongs to.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = Store::open(&dir.path().join("todod.db")).await.unwrap();
        let ctx = WriteContext::default();
        store.create_plan("p", "", &ctx).await.unwrap();
        let new = NewTask {
            plan: "p".into(),
            content: "generate".into(),
            priority: Priority::Medium,
            kind: Kind::Generation,
            spec: "{}".into(),
            depends_on: vec![],
        };
        assert_eq!(store.create_task(&new, &ctx).await.unwrap().id, TaskId(1));
        store.close().await;
    });

    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut state = seed | 1;
    let mut random = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    println!("seed {seed}");
    let mut kills = 0;
    let mut finished = false;
    while !finished {
        let mut child = spawn_child(dir.path());
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        if kills < KILLS {
            // Let it commit a few batches, then kill it mid-flight.
            let wanted = 1 + random(20);
            let mut seen = 0;
            for line in lines.by_ref() {
                let line = line.unwrap();
                if line == "done" {
                    finished = true;
                    break;
                }
                if line.starts_with("committed") {
                    seen += 1;
                    if seen == wanted {
                        break;
                    }
                }
            }
            std::thread::sleep(Duration::from_micros(random(3000)));
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
            kills += 1;
            check_consistent(dir.path(), seed);
        } else {
            finished = lines.any(|l| l.unwrap() == "done");
            assert!(child.wait().unwrap().success());
        }
    }
    assert!(kills >= KILLS, "only {kills} kills (seed {seed})");

    let mut count: HashMap<String, usize> = HashMap::new();
    for path in paths(dir.path()) {
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: torn line {line:?}: {e}", path.display()));
            *count
                .entry(value["id"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    for i in 0..RECORDS {
        assert_eq!(count.get(&format!("r{i}")), Some(&1), "r{i} (seed {seed})");
    }
    assert_eq!(count.len(), RECORDS);
    println!("{kills} kills, {RECORDS} records, each exactly once");
}
