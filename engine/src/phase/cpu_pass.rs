//! What the CPU phases (prompt adaptation, tokenization) share on top of the
//! record pipeline: one pass over the input on worker threads, and the
//! verdict on the lines it had to reject.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::files::Existing;
use super::record_pipeline::{self, PassEnd, PassPlan, Processor, RecordPhase};
use super::state::PhaseState;
use super::RunContext;

/// The pass of `input` into `files` (in the order the phase indexes them),
/// or of `shard`'s share of it into the shard's parts of them.
pub fn plan(
    input: &Path,
    files: Vec<PathBuf>,
    overwrite: bool,
    shard: Option<todod_domain::shards::Shard>,
) -> PassPlan {
    PassPlan {
        input: input.to_path_buf(),
        files: match shard {
            Some(shard) => files.iter().map(|f| shard.part_path(f)).collect(),
            None => files,
        },
        existing: Existing::when(overwrite),
        shard,
    }
}

/// Runs the pass on `threads` worker threads, or resumes it; `None` when the
/// run was told to stop.
pub async fn run<P: RecordPhase>(
    run: &RunContext,
    phase: Arc<P>,
    state: PhaseState,
    plan: &PassPlan,
    threads: usize,
    process: Arc<dyn Fn(P::Item) -> P::Output + Send + Sync>,
) -> Result<Option<PhaseState>, String> {
    run_after(run, phase, state, plan, threads, process, || Ok(())).await
}

/// [`run`], with `ready` called (on a blocking thread) once the output files
/// are opened and cut back to the checkpoint, before the first record: a
/// phase whose decisions depend on what it kept before (the filter's
/// duplicates) reads it back there.
pub async fn run_after<P: RecordPhase>(
    run: &RunContext,
    phase: Arc<P>,
    state: PhaseState,
    plan: &PassPlan,
    threads: usize,
    process: Arc<dyn Fn(P::Item) -> P::Output + Send + Sync>,
    ready: impl FnOnce() -> Result<(), String> + Send + 'static,
) -> Result<Option<PhaseState>, String> {
    let Some((opened, outputs)) = record_pipeline::open(run, &phase, state, plan).await? else {
        return Ok(None);
    };
    tokio::task::spawn_blocking(ready)
        .await
        .map_err(|e| format!("reading back what the pass kept failed: {e}"))??;
    let processor = Processor::Cpu { threads, process };
    Ok(
        match record_pipeline::run(run, phase, opened, outputs, processor).await? {
            PassEnd::Complete(state, _) => Some(*state),
            PassEnd::Stopped => None,
        },
    )
}

/// The reason a pass fails when more than `limit` (a share) of its `lines`
/// were rejected; `None` within the limit.
pub fn too_many_rejected(rejected: u64, lines: u64, limit: f64, rejects: &Path) -> Option<String> {
    let share = if lines == 0 {
        0.0
    } else {
        rejected as f64 / lines as f64
    };
    (share > limit).then(|| {
        format!(
            "{rejected} of {lines} lines were rejected ({:.1}%, over the limit of {}%); the \
             reasons are in {}",
            share * 100.0,
            limit * 100.0,
            rejects.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_a_share_of_the_lines() {
        let at = Path::new("/x/rejects.jsonl");
        assert_eq!(too_many_rejected(5, 100, 0.05, at), None);
        let why = too_many_rejected(6, 100, 0.05, at).unwrap();
        assert!(
            why.starts_with("6 of 100 lines were rejected (6.0%, over the limit of 5%)"),
            "{why}"
        );
        assert!(why.ends_with("/x/rejects.jsonl"));
        assert_eq!(too_many_rejected(0, 0, 0.0, at), None);
    }
}
