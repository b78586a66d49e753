//! What the generation tests share: prompt files, specs, and reading back
//! what a generation wrote, so that every count a user reads can be held
//! against the files.
use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};

use crate::mock_openai::expected_content;
use crate::proto;

/// `n` prompts `{id: pN, messages: [{user, "question N"}]}`; with
/// `bad_lines`, six unusable lines in the middle (blank, not JSON, wrong
/// shape, a duplicate id, a 2 MB line, invalid UTF-8 at the end).
pub fn write_prompts(path: &Path, n: usize, bad_lines: bool) {
    let mut text = String::new();
    for i in 0..n {
        let line = json!({"id": format!("p{i}"), "messages": [{"role": "user", "content": format!("question {i}")}]});
        text.push_str(&format!("{line}\n"));
        if bad_lines && i == n / 2 {
            text.push('\n'); // blank
            text.push_str("not json\n");
            text.push_str("{\"id\": \"w\", \"messages\": \"hello\"}\n");
            text.push_str(
                "{\"id\": \"p0\", \"messages\": [{\"role\": \"user\", \"content\": \"dup\"}]}\n",
            );
            text.push_str(&format!(
                "{{\"id\": \"big\", \"prompt\": \"{}\"}}\n",
                "x".repeat(2 << 20)
            ));
        }
    }
    let mut bytes = text.into_bytes();
    if bad_lines {
        bytes.extend_from_slice(b"{\"id\": \"\xff\xfe\"}\n");
    }
    std::fs::write(path, bytes).unwrap();
}

/// The spec of a generation of `dir/prompts.jsonl` into `dir/out.jsonl`.
pub fn spec(dir: &Path, url: &str, concurrency: usize) -> Value {
    json!({
        "prompts": dir.join("prompts.jsonl"),
        "output": dir.join("out.jsonl"),
        "endpoints": [url],
        "model": "mock-model",
        "params": {"temperature": 0.0},
        "max_tokens": 32,
        "concurrency": concurrency,
        "max_attempts": 3,
    })
}

/// Prompt ids and their texts, as `write_prompts` makes them.
pub fn prompt_texts(n: usize) -> HashMap<String, String> {
    (0..n)
        .map(|i| (format!("p{i}"), format!("question {i}")))
        .collect()
}

fn lines(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: torn line {l:?}: {e}", path.display()))
        })
        .collect()
}

/// What the files of a generation into `dir/out.jsonl` hold.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// How often each id appears in the output and failures files together.
    pub ids: HashMap<String, usize>,
    pub records: u64,
    pub failed: u64,
    pub rejected: u64,
    pub tokens: u64,
}

/// Reads the files back; every output record must be the mock's answer.
pub fn written(dir: &Path, prompts: &HashMap<String, String>) -> Written {
    read_back(
        &dir.join("out.jsonl"),
        &dir.join("out.jsonl.failures.jsonl"),
        &dir.join("out.jsonl.rejects.jsonl"),
        prompts,
    )
}

/// What a generation's output, failures and rejects files hold.
fn read_back(
    output: &Path,
    failures: &Path,
    rejects: &Path,
    prompts: &HashMap<String, String>,
) -> Written {
    let mut w = Written::default();
    for record in lines(output) {
        let id = record["id"].as_str().unwrap().to_string();
        assert_eq!(record["content"], expected_content(&prompts[&id]), "{id}");
        w.tokens += record["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        w.records += 1;
        *w.ids.entry(id).or_default() += 1;
    }
    for record in lines(failures) {
        let id = record["id"].as_str().unwrap().to_string();
        assert!(record["failure"]["error"].is_string(), "{record}");
        assert!(record["line"].as_u64().is_some(), "{record}");
        w.failed += 1;
        *w.ids.entry(id).or_default() += 1;
    }
    w.rejected = lines(rejects).len() as u64;
    w
}

/// Holds a finished task's result and progress against the files.
pub fn assert_result_matches(task: &proto::Task, files: &Written, context: &str) {
    let result: Value = serde_json::from_str(&task.result_json)
        .unwrap_or_else(|e| panic!("{context}: result_json {:?}: {e}", task.result_json));
    assert_eq!(result["records"], files.records, "{context}: records");
    assert_eq!(result["failed"], files.failed, "{context}: failed");
    assert_eq!(result["rejected"], files.rejected, "{context}: rejected");
    assert_eq!(result["tokens"], files.tokens, "{context}: tokens");
    let progress = task.progress.clone().unwrap_or_default();
    assert_eq!(
        progress.done as u64, files.records,
        "{context}: progress.done"
    );
    assert_eq!(
        progress.failed as u64, files.failed,
        "{context}: progress.failed"
    );
    assert_eq!(
        progress.rejected as u64, files.rejected,
        "{context}: progress.rejected"
    );
    assert_eq!(
        progress.total as u64,
        files.records + files.failed,
        "{context}: progress.total"
    );
}

/// What the part files of shard `index` of a generation into
/// `dir/out.jsonl` hold (`out.part-0000.jsonl`, ...).
pub fn written_part(dir: &Path, prompts: &HashMap<String, String>, index: u32) -> Written {
    let part = |name: &str| dir.join(format!("{name}.part-{index:04}.jsonl"));
    read_back(
        &part("out"),
        &part("out.jsonl.failures"),
        &part("out.jsonl.rejects"),
        prompts,
    )
}

/// Holds a sharded generation's files against each other: the output,
/// failures and rejects files are their parts put together in shard order
/// (byte for byte), the manifest names every part, and each id is in one
/// part only. Returns what the parts hold, added up.
pub fn assert_parts_make_the_whole(
    dir: &Path,
    prompts: &HashMap<String, String>,
    shards: u32,
) -> Written {
    let mut sum = Written::default();
    for (name, ext) in [
        ("out", "jsonl"),
        ("out.jsonl.failures", "jsonl"),
        ("out.jsonl.rejects", "jsonl"),
    ] {
        let mut joined = Vec::new();
        for index in 0..shards {
            let part = dir.join(format!("{name}.part-{index:04}.{ext}"));
            joined.extend(std::fs::read(&part).unwrap_or_default());
        }
        let whole = std::fs::read(dir.join(format!("{name}.{ext}"))).unwrap_or_default();
        assert!(
            whole == joined,
            "{name}.{ext} is not its parts put together ({} bytes against {})",
            whole.len(),
            joined.len()
        );
    }
    for index in 0..shards {
        let part = written_part(dir, prompts, index);
        for (id, n) in part.ids {
            *sum.ids.entry(id).or_default() += n;
        }
        sum.records += part.records;
        sum.failed += part.failed;
        sum.rejected += part.rejected;
        sum.tokens += part.tokens;
    }
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out.jsonl.manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["shards"], shards);
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(files.len(), 3, "{manifest}");
    assert_eq!(files[0]["lines"], sum.records, "{manifest}");
    assert_eq!(files[0]["parts"].as_array().unwrap().len(), shards as usize);
    sum
}
