//! The checkpoint document of a phase task, as the store keeps it (one JSON
//! text per task, replaced by each batch's commit): which pass the task is
//! in, what that pass reads, which of its lines are committed, the output
//! files with their identities and committed lengths, and the counters that
//! progress and results report. Everything a resume needs is here, so that
//! numbers survive any number of restarts.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cursor::Cursor;
use super::files::{FileState, InputIdentity};
use crate::phase::PhaseStore;
use todod_domain::TaskId;

/// The input of a pass, surveyed before its first line was processed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputState {
    pub path: PathBuf,
    pub identity: InputIdentity,
    /// Lines in the file.
    pub lines: u64,
    /// Lines whose record id repeats an earlier line's (listed in the store).
    pub duplicates: u64,
    /// The shard whose lines this pass takes (the others' are skipped),
    /// if the pass is one shard's share of the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<todod_domain::shards::Shard>,
}

impl InputState {
    /// The lines this pass takes: all of them, or its shard's.
    pub fn own_lines(&self) -> u64 {
        self.shard.map_or(self.lines, |s| s.lines_of(self.lines))
    }

    /// How many of the lines `cursor` says are committed are this pass's.
    pub fn own_committed(&self, cursor: &super::cursor::Cursor) -> u64 {
        let Some(shard) = self.shard else {
            return cursor.committed();
        };
        shard.count_in(1, cursor.next - 1)
            + cursor
                .ahead
                .iter()
                .map(|s| shard.count_in(s.first, s.last))
                .sum::<u64>()
    }
}

/// Counters of the current pass, kept by the record pipeline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassCounts {
    /// Lines appended to each output file in this pass.
    pub written: Vec<u64>,
    /// Lines of the input rejected (bad lines and duplicates).
    pub rejected: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseState {
    /// Passes over an input: 0 first; a generation's retry of its failures
    /// starts another.
    pub pass: u32,
    /// The survey of this pass's input is committed (its duplicates too).
    #[serde(default)]
    pub input: Option<InputState>,
    #[serde(default)]
    pub cursor: Cursor,
    /// Every line of the pass is committed.
    #[serde(default)]
    pub complete: bool,
    /// The pass's end was recorded together with the task's final status.
    #[serde(default)]
    pub closed: bool,
    #[serde(default)]
    pub files: Vec<FileState>,
    #[serde(default)]
    pub counts: PassCounts,
    /// The phase kind's own counters (cumulative over passes).
    #[serde(default)]
    pub stats: Value,
    /// The phase kind's own bookkeeping of how the pass was set up.
    #[serde(default)]
    pub setup: Value,
}

impl PhaseState {
    pub async fn load(store: &PhaseStore, task: TaskId) -> Result<Option<PhaseState>, String> {
        PhaseState::load_of(store, task, None).await
    }

    /// The last checkpoint of `task`'s `shard` (of the whole task if `None`).
    pub async fn load_of(
        store: &PhaseStore,
        task: TaskId,
        shard: Option<u32>,
    ) -> Result<Option<PhaseState>, String> {
        let Some(text) = store
            .load_phase_state(task, shard)
            .await
            .map_err(|e| format!("cannot load the checkpoint: {e}"))?
        else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("the checkpoint cannot be read by this version of todod: {e}"))
    }

    /// The checkpoint a run resumes from: the task's last one, or a fresh
    /// one for its first run.
    pub async fn resume(store: &PhaseStore, task: TaskId) -> Result<PhaseState, String> {
        Ok(PhaseState::load(store, task).await?.unwrap_or_default())
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a checkpoint serializes")
    }

    /// The phase's own counters, typed.
    pub fn stats<T: serde::de::DeserializeOwned + Default>(&self) -> Result<T, String> {
        if self.stats.is_null() {
            return Ok(T::default());
        }
        serde_json::from_value(self.stats.clone())
            .map_err(|e| format!("the checkpoint's counters cannot be read: {e}"))
    }

    pub fn set_stats<T: Serialize>(&mut self, stats: &T) {
        self.stats = serde_json::to_value(stats).expect("stats serialize");
    }
}
