//! The filter phase end to end: a generation's output with known duplicates,
//! near duplicates, refusals, empty and cut answers; kill -9 again and again
//! during a long run, after which the kept records and the rejects are byte
//! for byte those of a run never interrupted, and every count a person
//! reads is what the files hold.
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use todod_e2e::rng::TestRng;
use todod_e2e::{
    assert_kill_floor, create_phase, kill_repeatedly, proto, wait_task, Client, RealDaemon,
};

const WORDS: &[&str] = &[
    "river",
    "valley",
    "delta",
    "silt",
    "glacier",
    "moraine",
    "desert",
    "dune",
    "forest",
    "canopy",
    "ocean",
    "current",
    "tide",
    "reef",
    "mountain",
    "ridge",
    "basin",
    "lake",
    "wetland",
    "estuary",
    "carries",
    "shapes",
    "feeds",
    "erodes",
    "deposits",
    "slowly",
    "quickly",
    "over",
    "centuries",
    "beside",
    "under",
    "across",
    "the",
    "a",
    "its",
    "with",
];

fn answer(rng: &mut TestRng, words: usize) -> String {
    (0..words)
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

/// Refusals of each shape the default patterns know, planted in turn: a
/// shape the filter missed would be kept, and the count of refusals fall
/// short by an eighth.
const REFUSALS: &[&str] = &[
    "I'm sorry, but I can't help with that.",
    "I’m afraid I cannot do that.",
    "I apologize, but I cannot provide that.",
    "As an AI language model, I cannot have opinions.",
    "I'm unable to provide that information.",
    "I’m unable to help with this.",
    "I won't help with that.",
    "I am not able to comply with that request.",
];

/// `n` records as a generation writes them: most distinct, and among them
/// exact repeats of earlier answers (other case and punctuation), near
/// repeats (the last word changed), refusals, empty answers and
/// answers cut at the token limit.
fn write_generation_output(path: &Path, n: usize, rng: &mut TestRng) {
    let mut text = String::new();
    let mut answers: Vec<String> = Vec::new();
    for i in 0..n {
        let (content, finish) = match i % 50 {
            7 if i > 50 => (answers[i - 40].to_uppercase() + "!", "stop"),
            13 if i > 50 => {
                // Another last word: one shingle of twenty-odd differs.
                let mut words: Vec<String> = answers[i - 31].split(' ').map(String::from).collect();
                *words.last_mut().unwrap() = "changed".into();
                (words.join(" "), "stop")
            }
            21 => (REFUSALS[(i / 50) % REFUSALS.len()].to_string(), "stop"),
            29 => (String::new(), "stop"),
            33 => (answer(rng, 30), "length"),
            _ => (answer(rng, 24 + i % 17), "stop"),
        };
        answers.push(content.clone());
        let record = json!({
            "id": format!("r{i}"), "line": i + 1,
            "messages": [{"role": "user", "content": answer(rng, 6)}],
            "content": content, "reasoning": null, "finish_reason": finish,
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            "model": "m", "endpoint": "http://x", "latency_ms": 10, "attempts": 1,
        });
        text.push_str(&format!("{record}\n"));
    }
    std::fs::write(path, text).unwrap();
}

async fn finished(c: &mut Client, plan: &str, id: &str) -> proto::Task {
    let task = wait_task(c, plan, id, |t| {
        ["completed", "failed"].contains(&t.status.as_str())
    })
    .await;
    assert_eq!(task.status, "completed", "{}", task.error);
    task
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// Kill -9 at random moments during a filter of 50,000 records; its files
/// are byte for byte those of a run that was never interrupted, and the
/// counts it tells are the files'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_killed_again_and_again_keeps_the_same_records() {
    const RECORDS: usize = 100_000;
    const KILLS: usize = 20;
    const MIN_KILLS: usize = 8;
    let mut rng = TestRng::new("a_filter_killed_again_and_again");
    let data = tempfile::tempdir().unwrap();
    let input = data.path().join("completions.jsonl");
    write_generation_output(&input, RECORDS, &mut rng);
    let spec = |name: &str| {
        json!({
            "input": input, "output": data.path().join(format!("{name}.jsonl")),
            "threads": 2,
        })
        .to_string()
    };

    // The reference: one run, never interrupted.
    let state = tempfile::tempdir().unwrap();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create_phase(&mut c, "ref", "filter", &spec("reference"), &[])
        .await
        .unwrap();
    let expected = finished(&mut c, "ref", &id).await;
    daemon.terminate();

    let state = tempfile::tempdir().unwrap();
    let mut daemon = RealDaemon::spawn(state.path());
    let mut c = daemon.client().await;
    let id = create_phase(&mut c, "kill", "filter", &spec("killed"), &[])
        .await
        .unwrap();
    let kills = kill_repeatedly(&mut daemon, state.path(), "kill", &id, KILLS, || {
        Duration::from_millis(rng.below(80))
    })
    .await;
    let mut c = daemon.client().await;
    let task = finished(&mut c, "kill", &id).await;
    daemon.terminate();
    let kills = assert_kill_floor(&kills, MIN_KILLS, &rng.replay());
    for (reference, killed) in [
        ("reference.jsonl", "killed.jsonl"),
        ("reference.rejects.jsonl", "killed.rejects.jsonl"),
    ] {
        let (a, b) = (
            std::fs::read(data.path().join(reference)).unwrap(),
            std::fs::read(data.path().join(killed)).unwrap(),
        );
        assert!(
            a == b,
            "{killed} differs after {kills} kills ({})",
            rng.replay()
        );
    }

    // What the files hold, read here.
    let kept = lines(&data.path().join("killed.jsonl"));
    let rejects = lines(&data.path().join("killed.rejects.jsonl"));
    let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
    for line in &rejects {
        let r: Value = serde_json::from_str(line).unwrap();
        *by_reason
            .entry(r["reason"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    let mut ids: Vec<String> = kept
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "a record kept twice");
    assert_eq!(kept.len() + rejects.len(), RECORDS, "every record once");
    // Each kind of record planted is found: every 50th of the kinds that
    // the writer planted, less the first ones of a kind with nothing before.
    for reason in [
        "exact_duplicate",
        "near_duplicate",
        "refusal",
        "empty",
        "length_finish",
    ] {
        let n = by_reason.get(reason).copied().unwrap_or(0);
        assert!(
            (RECORDS as u64 / 50 - 2..=RECORDS as u64 / 50 + 40).contains(&n),
            "{reason}: {n} ({by_reason:?})"
        );
    }

    let result: Value = serde_json::from_str(&task.result_json).unwrap();
    assert_eq!(result["records"], kept.len());
    assert_eq!(result["removed"], rejects.len());
    assert_eq!(result["removed_by_reason"], json!(by_reason));
    assert_eq!(result["lines"], RECORDS);
    let uninterrupted: Value = serde_json::from_str(&expected.result_json).unwrap();
    for key in ["records", "removed", "removed_by_reason", "rejected"] {
        assert_eq!(uninterrupted[key], result[key], "{key}");
    }
    let progress = task.progress.clone().unwrap();
    assert_eq!(progress.done as usize, RECORDS);
    assert_eq!(progress.total as usize, RECORDS);
    assert!(
        task.summary
            .starts_with(&format!("{} of {RECORDS} records kept", kept.len())),
        "{}",
        task.summary
    );
}
