//! The end of a sharded task: once every shard is done, one run (holding the
//! whole task) puts each of the task's files together from its shards' parts,
//! in shard order, taking from each part exactly its committed bytes, and
//! writes a manifest naming the parts. Both are staged and published
//! (`files::stage`, `files::publish`): the result is a pure function of the
//! committed parts, so a run killed half-way does it again to the same
//! bytes. The parts stay where they are; the manifest says what each held.
//!
//! Also what every kind that shards shares: which role a run has (the whole
//! task, one shard, or the put-together), the checkpoint it resumes from,
//! its part files, and the shards' counters added up.
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::files::{self, Entry, Fs, SeqReader};
use super::state::PhaseState;
use super::RunContext;
use todod_domain::shards::Shard;

/// What a run of a task its spec splits into `of` shards does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The task is not sharded: the run does all of it.
    Whole,
    /// The run does this shard's share, into its part files.
    Shard(Shard),
    /// Every shard is done: the run puts the task's files together.
    PutTogether(u32),
}

impl Role {
    pub fn of(run: &RunContext, of: u32) -> Role {
        match (of > 1, run.shard) {
            (false, _) => Role::Whole,
            (true, Some(shard)) => Role::Shard(shard),
            (true, None) => Role::PutTogether(of),
        }
    }

    /// The shard a run's pass takes, if it is one shard's.
    pub fn shard(self) -> Option<Shard> {
        match self {
            Role::Shard(shard) => Some(shard),
            _ => None,
        }
    }
}

/// The checkpoint a run resumes from: its shard's, or the task's; a fresh
/// one for its first run.
pub async fn resume(run: &RunContext) -> Result<PhaseState, String> {
    let shard = run.shard.map(|s| s.index);
    Ok(PhaseState::load_of(&run.store, run.task, shard)
        .await?
        .unwrap_or_default())
}

/// The clock (seconds) a pass's templates see as `strftime_now`: now for a
/// whole task; for a shard, the task's creation, so that every shard
/// renders alike whenever it starts (a retry moves the task's start).
pub async fn pass_clock(run: &RunContext) -> Result<i64, String> {
    if run.shard.is_none() {
        return Ok(todod_store::now_ms() / 1000);
    }
    let task = run
        .store
        .get_task(run.task)
        .await
        .map_err(|e| format!("cannot read the task: {e}"))?;
    // Part of every shard's set-up, so it must be the same for all of them.
    task.created_at
        .map(|at| at / 1000)
        .ok_or_else(|| "the task has no creation time to render its shards with".to_string())
}

/// The counters of a kind that shards: a sharded task's are its shards'
/// added up.
pub trait Counters: DeserializeOwned + Default {
    fn add(&mut self, other: &Self);
}

/// The shards' counters added up.
pub fn summed<S: Counters>(parts: &[(Shard, PhaseState)]) -> Result<S, String> {
    let mut total = S::default();
    for (shard, state) in parts {
        let stats: S = state
            .stats()
            .map_err(|e| format!("{}: {e}", shard.label()))?;
        total.add(&stats);
    }
    Ok(total)
}

/// The set-up every shard's pass recorded (the template, the tokenizer, the
/// clock), which must be the same in all of them: the parts of a task whose
/// model files changed between its shards would not be one output.
pub fn same_setup(parts: &[(Shard, PhaseState)]) -> Result<Value, String> {
    let Some((first, state)) = parts.first() else {
        return Ok(Value::Null);
    };
    for (shard, other) in &parts[1..] {
        if other.setup != state.setup {
            return Err(format!(
                "{} was not set up as {} was ({} then, {} now): the model's files changed \
                 between the shards, and their parts would not make one output. Restore them, \
                 or start a new task",
                shard.label(),
                first.label(),
                state.setup,
                other.setup
            ));
        }
    }
    Ok(state.setup.clone())
}

/// How a shard's run ends once its share is written: the shard is done,
/// with its checkpoint; the task's verdict waits for the put-together,
/// which judges the shards' counters added up.
pub fn share_done(state: PhaseState) -> super::Ended {
    super::Ended::Completed {
        result: String::new(),
        state: Some(state),
    }
}

/// Puts the task's files (`finals`) together from its shards' `parts` (on
/// a blocking thread), with the manifest naming the parts at `manifest`;
/// returns the manifest.
pub async fn put_together(
    run: &RunContext,
    parts: &[(Shard, PhaseState)],
    finals: Vec<PathBuf>,
    manifest: PathBuf,
    overwrite: bool,
) -> Result<Value, String> {
    let (fs, joined, attempt) = (run.fs.clone(), parts.to_vec(), run.attempt.clone());
    let document = tokio::task::spawn_blocking(move || {
        assemble(&*fs, &finals, &joined, &manifest, overwrite, &attempt)
    })
    .await
    .map_err(|e| format!("putting the shards together failed: {e}"))?
    .map_err(|e| {
        format!(
            "cannot put the shards together: {}",
            super::spec::plain_io(&e)
        )
    })?;
    Ok(document)
}

/// The put-together of a kind whose shards must have been set up alike
/// (the CPU kinds): the task's files (`finals`) put together from its `of`
/// shards' parts, with the manifest at `manifest`; returns the whole task's
/// checkpoint, on which the kind's verdict runs: the files as put
/// together, the input whole, the shards' set-up and counters added up, the
/// pass complete.
pub async fn join<S: Counters + Serialize>(
    run: &RunContext,
    of: u32,
    finals: Vec<PathBuf>,
    manifest: PathBuf,
    overwrite: bool,
) -> Result<PhaseState, String> {
    let parts = shard_states(run, of).await?;
    let setup = same_setup(&parts)?;
    put_together(run, &parts, finals.clone(), manifest, overwrite).await?;
    let stats: S = summed(&parts)?;
    Ok(whole_state(&parts, finals, &stats, setup))
}

/// The whole task's checkpoint once `finals` are put together from the
/// `parts`: each holds its parts' committed bytes (what `assemble` copies).
fn whole_state<S: Serialize>(
    parts: &[(Shard, PhaseState)],
    finals: Vec<PathBuf>,
    stats: &S,
    setup: Value,
) -> PhaseState {
    let files = finals
        .into_iter()
        .enumerate()
        .map(|(index, path)| {
            let mut file = files::FileState::planned(path);
            file.committed = parts
                .iter()
                .filter_map(|(_, s)| s.files.get(index))
                .filter(|f| f.identity.is_some())
                .map(|f| f.committed)
                .sum();
            file
        })
        .collect();
    let input = parts
        .first()
        .and_then(|(_, s)| s.input.clone())
        .map(|mut i| {
            i.shard = None;
            i
        });
    let mut state = PhaseState {
        pass: parts.iter().map(|(_, s)| s.pass).max().unwrap_or(0),
        input,
        complete: true,
        files,
        setup,
        ..PhaseState::default()
    };
    state.set_stats(stats);
    state
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn state(setup: Value, records: u64, lines: u64, shard: Shard) -> PhaseState {
        let mut state = PhaseState {
            setup,
            input: Some(crate::phase::state::InputState {
                path: PathBuf::from("/in.jsonl"),
                identity: files::InputIdentity {
                    dev: 1,
                    ino: 2,
                    len: 3,
                    mtime_ns: 4,
                },
                lines,
                duplicates: 0,
                shard: Some(shard),
            }),
            complete: true,
            ..PhaseState::default()
        };
        state.set_stats(&json!({ "records": records }));
        state
    }

    #[derive(Default, serde::Deserialize, Serialize)]
    struct Records {
        records: u64,
    }

    impl Counters for Records {
        fn add(&mut self, other: &Records) {
            self.records += other.records;
        }
    }

    #[test]
    fn the_whole_is_its_shards_added_up_if_they_were_set_up_alike() {
        let of = 3;
        let parts: Vec<_> = (0..of)
            .map(|index| {
                let shard = Shard { index, of };
                (
                    shard,
                    state(json!({"template": "abc"}), 10 + u64::from(index), 99, shard),
                )
            })
            .collect();
        let total: Records = summed(&parts).unwrap();
        assert_eq!(total.records, 33);
        let setup = same_setup(&parts).unwrap();
        assert_eq!(setup, json!({"template": "abc"}));
        // Each shard committed 100 bytes of its part, and one planned a
        // second file it never created (nothing of it was written).
        let mut parts = parts;
        for (shard, state) in &mut parts {
            let mut part = files::FileState::planned(shard.part_path(Path::new("/out.jsonl")));
            part.identity = Some(files::Identity { dev: 1, ino: 7 });
            part.committed = 100;
            let mut never = files::FileState::planned(PathBuf::from("/rejects.jsonl"));
            never.committed = 5;
            state.files = vec![part, never];
        }
        parts[2].1.files[0].committed = 1034;
        let finals = vec![PathBuf::from("/out.jsonl"), PathBuf::from("/rejects.jsonl")];
        let whole = whole_state(&parts, finals, &total, setup);
        assert_eq!(whole.files[1].committed, 0);
        assert_eq!(whole.files[0].path, PathBuf::from("/out.jsonl"));
        assert_eq!(whole.files[0].committed, 1234);
        let input = whole.input.as_ref().unwrap();
        assert_eq!((input.lines, input.shard), (99, None));
        assert!(whole.complete && !whole.closed);
        assert_eq!(whole.stats::<Records>().unwrap().records, 33);

        // A shard set up otherwise (the template changed in between) is named.
        let mut odd = parts.clone();
        odd[2].1.setup = json!({"template": "xyz"});
        let why = same_setup(&odd).unwrap_err();
        assert!(
            why.starts_with("shard 2 of 3 was not set up as shard 0 of 3 was"),
            "{why}"
        );
    }
}
