//! The end of a sharded task: once every shard is done, one run (holding the
//! whole task) puts each of the task's files together from its shards' parts,
//! in shard order, taking from each part exactly its committed bytes, and
//! writes a manifest naming the parts. Both are staged and published
//! (`files::stage`, `files::publish`): the result is a pure function of the
//! committed parts, so a run killed half-way does it again to the same
//! bytes. The parts stay where they are; the manifest says what each held.
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::files::{self, Entry, Fs, SeqReader};
use super::state::PhaseState;
use super::RunContext;
use crate::domain::shards::Shard;

/// The last checkpoints of the task's `of` shards, in shard order; an error
/// names a shard that has none (it never ran: the task cannot be
/// assembled).
pub async fn shard_states(run: &RunContext, of: u32) -> Result<Vec<(Shard, PhaseState)>, String> {
    let rows = run
        .store
        .shard_states(run.task)
        .await
        .map_err(|e| format!("cannot read the shards' checkpoints: {e}"))?;
    let mut states = Vec::with_capacity(of as usize);
    for index in 0..of {
        let shard = Shard { index, of };
        let text = rows
            .iter()
            .find(|(i, _)| *i == index)
            .and_then(|(_, s)| s.as_deref())
            .ok_or_else(|| format!("{} has no checkpoint; it has not run", shard.label()))?;
        let state: PhaseState = serde_json::from_str(text)
            .map_err(|e| format!("the checkpoint of {} cannot be read: {e}", shard.label()))?;
        states.push((shard, state));
    }
    Ok(states)
}

/// One part as the manifest names it.
fn part_entry(shard: Shard, path: &Path, bytes: u64, lines: u64) -> Value {
    json!({"shard": shard.index, "path": path.display().to_string(), "bytes": bytes, "lines": lines})
}

/// Copies the committed bytes of `path` (checked to be the file the
/// checkpoint describes) to `out`; returns the lines copied.
fn copy_part(fs: &dyn Fs, state: &files::FileState, out: &mut impl Write) -> io::Result<u64> {
    let Some(identity) = &state.identity else {
        return Ok(0); // planned, never created: nothing was written
    };
    match fs.stat(&state.path)? {
        Entry::Regular { identity: at, .. } if at == *identity => {}
        _ => {
            return Err(io::Error::other(format!(
                "{} is not the part todod wrote (moved, replaced or removed); the task \
                 cannot be put together",
                state.path.display()
            )))
        }
    }
    let file = fs.open_existing(&state.path)?;
    if file.len()? < state.committed {
        return Err(io::Error::other(format!(
            "{} is shorter than its committed {} bytes",
            state.path.display(),
            state.committed
        )));
    }
    let mut reader = SeqReader::new(file, state.committed);
    let mut buf = vec![0u8; 1 << 16];
    let mut lines = 0;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(lines);
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        out.write_all(&buf[..n])?;
    }
}

/// Puts the task's files (`finals`, in the order the phase indexes them,
/// as its shards' checkpoints do) together from the parts, and writes the
/// manifest at `manifest`. `overwrite`: files already there are replaced
/// (else one is left alone only if it already holds exactly these bytes).
/// `attempt` names the staging files: a daemon paused past its lease in the
/// middle of this, woken while another puts the same files together, then
/// never writes into the other's staging file, and both publish complete,
/// identical files. Returns the manifest.
pub fn assemble(
    fs: &dyn Fs,
    finals: &[PathBuf],
    parts: &[(Shard, PhaseState)],
    manifest: &Path,
    overwrite: bool,
    attempt: &str,
) -> io::Result<Value> {
    let mut listed = Vec::new();
    for (index, path) in finals.iter().enumerate() {
        let tmp = files::staging_path_of(path, attempt);
        let mut out = files::stage_at(fs, &tmp)?;
        let (mut bytes, mut lines, mut entries) = (0u64, 0u64, Vec::new());
        for (shard, state) in parts {
            let Some(file) = state.files.get(index) else {
                continue;
            };
            let copied = copy_part(fs, file, &mut out)?;
            let committed = if file.identity.is_some() {
                file.committed
            } else {
                0
            };
            entries.push(part_entry(*shard, &file.path, committed, copied));
            bytes += committed;
            lines += copied;
        }
        out.finish()?;
        files::publish_from(fs, &tmp, path, overwrite)?;
        listed.push(json!({
            "path": path.display().to_string(), "bytes": bytes, "lines": lines, "parts": entries,
        }));
    }
    let document = json!({"shards": parts.len(), "files": listed});
    let tmp = files::staging_path_of(manifest, attempt);
    let mut out = files::stage_at(fs, &tmp)?;
    let mut text = serde_json::to_vec_pretty(&document).map_err(io::Error::other)?;
    text.push(b'\n');
    out.write_all(&text)?;
    out.finish()?;
    // The manifest is a pure function of the parts too: replaced freely.
    files::publish_from(fs, &tmp, manifest, true)?;
    Ok(document)
}
