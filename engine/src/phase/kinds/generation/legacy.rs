//! Generations checkpointed by todod before the phase runtime, which kept the
//! committed length of the output, failures and rejects files and the ids of
//! the records written. Such a task is converted once, when it next runs,
//! into a pass state: its committed records and rejects stay committed; its
//! failures (which did not keep their prompts) are cut from the failures
//! file and their prompts sent again, which is what a retry would do.
use std::collections::HashSet;
use std::io::{self, BufRead};
use std::path::Path;

use serde_json::Value;

use super::{GenerationSpec, Stats, OUTPUT, REJECTS};
use crate::phase::cursor::Progress;
use crate::phase::files::{hex, FileState, Identity, HEAD_BYTES};
use crate::phase::lines::{self, LineReader};
use crate::phase::state::{InputState, PassCounts, PhaseState};
use crate::phase::RunContext;

/// Lines of `path` up to byte `limit`, parsed (a torn last line is left out).
fn committed_lines(path: &Path, limit: u64) -> io::Result<Vec<Value>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let file = std::fs::File::open(path)?;
    let mut reader = io::BufReader::new(io::Read::take(file, limit));
    let mut out = Vec::new();
    let mut line = Vec::new();
    while reader.read_until(b'\n', &mut line)? > 0 {
        if line.ends_with(b"\n") {
            if let Ok(value) = serde_json::from_slice(&line) {
                out.push(value);
            }
        }
        line.clear();
    }
    Ok(out)
}

fn existing_file(path: &Path, committed: u64) -> io::Result<FileState> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.file_type().is_file() || meta.len() < committed {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not the file the earlier todod wrote ({} bytes were committed)",
                path.display(),
                committed
            ),
        ));
    }
    let head_len = HEAD_BYTES.min(committed);
    let mut head = vec![0u8; head_len as usize];
    io::Read::read_exact(&mut std::fs::File::open(path)?, &mut head)?;
    use sha2::Digest;
    Ok(FileState {
        path: path.to_path_buf(),
        identity: Some(Identity {
            dev: meta.dev(),
            ino: meta.ino(),
        }),
        committed,
        head: hex(&sha2::Sha256::digest(&head)),
        head_len,
    })
}

/// Builds the pass state of a legacy checkpoint (blocking: reads the files).
fn convert_blocking(
    spec: &GenerationSpec,
    offsets: &[u64],
    ids: &[String],
) -> io::Result<(PhaseState, Vec<u64>)> {
    let offset = |i: usize| offsets.get(i).copied().unwrap_or(0);
    let committed: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let mut stats = Stats::default();
    let mut written = HashSet::new();
    for record in committed_lines(&spec.output, offset(OUTPUT))? {
        if let Some(id) = record["id"].as_str() {
            written.insert(id.to_string());
        }
        stats.records += 1;
        stats.tokens += record["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        stats.prompt_tokens += record["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        stats.length_finishes += u64::from(record["finish_reason"] == "length");
    }
    let rejected_lines: HashSet<u64> = committed_lines(&spec.rejects, offset(REJECTS))?
        .iter()
        .filter_map(|r| r["line"].as_u64())
        .collect();
    stats.rejected = rejected_lines.len() as u64;

    let id_of = |line: &[u8], _number: u64| {
        lines::json_field(line, &spec.id_field)
            .as_ref()
            .and_then(lines::id_text)
    };
    let found = lines::survey(&spec.prompts, super::prompts::MAX_LINE_BYTES, &id_of)?;
    let mut progress = Progress::new(&crate::phase::cursor::Cursor::default());
    let mut reader = LineReader::open(&spec.prompts, 0, 1, super::prompts::MAX_LINE_BYTES)?;
    while let Some(raw) = reader.next_line()? {
        let number = raw.line.number;
        let id = id_of(&raw.bytes, number).unwrap_or_else(|| format!("line-{number}"));
        let done = rejected_lines.contains(&number)
            || (committed.contains(id.as_str()) && written.contains(&id));
        if done {
            progress.mark(raw.line);
        }
    }
    let input = std::fs::File::open(&spec.prompts)?;
    let state = PhaseState {
        pass: 0,
        input: Some(InputState {
            path: spec.prompts.clone(),
            identity: crate::phase::files::InputIdentity::of(&input)?,
            lines: found.lines,
            duplicates: found.duplicates.len() as u64,
            shard: None,
        }),
        cursor: progress.snapshot(),
        complete: false,
        closed: false,
        files: vec![
            existing_file(&spec.output, offset(OUTPUT))?,
            // The failures are sent again: their file starts over.
            existing_file(&spec.failures, 0)?,
            existing_file(&spec.rejects, offset(REJECTS))?,
        ],
        counts: PassCounts {
            written: vec![stats.records, 0, stats.rejected],
            rejected: stats.rejected,
        },
        stats: serde_json::to_value(&stats).expect("stats serialize"),
        setup: Value::Null,
    };
    Ok((state, found.duplicates))
}

/// What became of a task's legacy checkpoint.
pub enum Legacy {
    /// It has none.
    None,
    Converted(Box<PhaseState>),
    /// The run lost its task while converting.
    Fenced,
}

/// Converts the task's legacy checkpoint, if it has one, and commits the
/// result.
pub async fn convert(run: &RunContext, spec: &GenerationSpec) -> Result<Legacy, String> {
    let Some((offsets, ids)) = run
        .store
        .legacy_checkpoint(run.task)
        .await
        .map_err(|e| format!("cannot load the checkpoint: {e}"))?
    else {
        return Ok(Legacy::None);
    };
    tracing::info!(task = %run.task, records = ids.len(), "converting a checkpoint of an earlier todod");
    let spec2 = spec.clone();
    let (state, duplicates) =
        tokio::task::spawn_blocking(move || convert_blocking(&spec2, &offsets, &ids))
            .await
            .map_err(|e| format!("converting the earlier checkpoint failed: {e}"))?
            .map_err(|e| {
                format!(
                    "the checkpoint of an earlier todod cannot be taken over: {}",
                    crate::phase::spec::plain_io(&e)
                )
            })?;
    match run
        .store
        .commit_phase_state(
            run.task,
            &run.attempt,
            &state.to_json(),
            Some((0, &duplicates)),
        )
        .await
    {
        Ok(()) => Ok(Legacy::Converted(Box::new(state))),
        Err(todod_store::Error::Fenced { .. }) => Ok(Legacy::Fenced),
        Err(e) => Err(format!("cannot commit the checkpoint: {e}")),
    }
}
