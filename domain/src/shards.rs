//! Sharded phase tasks: one task's records split over shards that several
//! daemons (or several runs of one daemon) run at once. Plain rules, no I/O:
//! which input lines a shard owns, what its part files are called, how a
//! generation's concurrency is split between its shards, how many shards a
//! daemon takes when others share the work, and how the shards' progress
//! adds up to the task's.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The most shards a task may be split into.
pub const MAX_SHARDS: u32 = 64;

/// Shard `index` (from 0) of a task split into `of`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub of: u32,
}

impl Shard {
    /// Whether input line `number` (from 1) is this shard's: line `n` is
    /// shard `(n - 1) mod of`'s. Dealt out line by line, the shards get the
    /// same share of every part of the input (no survey is needed first,
    /// and a slow stretch of long prompts is shared too).
    pub fn owns(&self, number: u64) -> bool {
        number >= 1 && (number - 1) % u64::from(self.of) == u64::from(self.index)
    }

    /// How many of the lines `first..=last` are this shard's.
    pub fn count_in(&self, first: u64, last: u64) -> u64 {
        if last < first || first == 0 {
            return 0;
        }
        // Lines 1..=n owned: those n' <= n with n' - 1 = index (mod of).
        let upto = |n: u64| -> u64 {
            let (of, index) = (u64::from(self.of), u64::from(self.index));
            if n <= index {
                0
            } else {
                (n - 1 - index) / of + 1
            }
        };
        upto(last) - upto(first - 1)
    }

    /// The shard's part of a task's file: `completions.jsonl` becomes
    /// `completions.part-0007.jsonl` (the part number before the last
    /// extension, so that tools still know the format).
    pub fn part_path(&self, path: &Path) -> PathBuf {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        let part = format!("part-{:04}", self.index);
        let named = match name.rfind('.') {
            Some(dot) if dot > 0 => format!("{}.{part}{}", &name[..dot], &name[dot..]),
            _ => format!("{name}.{part}"),
        };
        path.with_file_name(named)
    }

    /// How many of lines `1..=lines` are this shard's.
    pub fn lines_of(&self, lines: u64) -> u64 {
        self.count_in(1, lines)
    }

    /// `shard 3 of 8` (counted from 0, as the part files are).
    pub fn label(&self) -> String {
        format!("shard {} of {}", self.index, self.of)
    }
}

/// The concurrency each of `of` shards runs with, so that the shards
/// together keep `concurrency` requests in flight, not `of` times as many.
pub fn split_concurrency(concurrency: usize, of: u32) -> usize {
    concurrency.div_ceil(of.max(1) as usize).max(1)
}

/// How many of a task's `shards` one daemon runs at once when `daemons`
/// daemons are alive on the database: its fair share, rounded up so that
/// every shard has a daemon.
pub fn fair_share(shards: u32, daemons: usize) -> usize {
    (shards as usize).div_ceil(daemons.max(1))
}

/// Progress fields that are a time to wait, not a count: the task waits as
/// long as its slowest shard.
const LONGEST: &[&str] = &[
    "eta_seconds",
    "held_for_remeasures_seconds",
    // The span a generation's last-minute request counts cover.
    "window_seconds",
];
/// Progress fields that say something of the whole (the server's own
/// metrics, read by every shard): the first shard's is kept.
const SHARED: &[&str] = &["server", "remeasuring"];
/// Lists kept to this many entries (the newest failures' messages).
const LIST_KEEP: usize = 5;

/// The progress of a sharded task: its shards' progress added up (counts
/// and rates summed, times to wait the longest, lists joined), with
/// `shards` (how many) and `shards_done` (how many finished).
pub fn combine_progress(parts: &[Value], shards: u32, done: u32) -> Value {
    let mut sum = Map::new();
    for part in parts {
        if let Value::Object(fields) = part {
            add_into(&mut sum, fields);
        }
    }
    sum.insert("shards".into(), Value::from(shards));
    sum.insert("shards_done".into(), Value::from(done));
    Value::Object(sum)
}

fn add_into(sum: &mut Map<String, Value>, fields: &Map<String, Value>) {
    for (key, value) in fields {
        let Some(have) = sum.get_mut(key) else {
            sum.insert(key.clone(), value.clone());
            continue;
        };
        if SHARED.contains(&key.as_str()) {
            continue;
        }
        match (have, value) {
            (have @ Value::Number(_), Value::Number(more)) => {
                *have = if LONGEST.contains(&key.as_str()) {
                    max_number(have, more)
                } else {
                    add_numbers(have, more)
                };
            }
            (Value::Object(have), Value::Object(more)) => add_into(have, more),
            (Value::Array(have), Value::Array(more)) => {
                have.extend(more.iter().cloned());
                let extra = have.len().saturating_sub(LIST_KEEP);
                have.drain(..extra);
            }
            // Anything else (a flag, a word) is the first shard's.
            _ => {}
        }
    }
}

fn add_numbers(a: &Value, b: &serde_json::Number) -> Value {
    match (a.as_u64(), b.as_u64()) {
        (Some(x), Some(y)) => Value::from(x.saturating_add(y)),
        _ => match (a.as_i64(), b.as_i64()) {
            (Some(x), Some(y)) => Value::from(x.saturating_add(y)),
            _ => serde_json::json!(a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0)),
        },
    }
}

fn max_number(a: &Value, b: &serde_json::Number) -> Value {
    if b.as_f64().unwrap_or(0.0) > a.as_f64().unwrap_or(0.0) {
        Value::Number(b.clone())
    } else {
        a.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_line_belongs_to_exactly_one_shard_and_the_counts_agree() {
        for of in 1..=7u32 {
            let shards: Vec<Shard> = (0..of).map(|index| Shard { index, of }).collect();
            for n in 1..=100u64 {
                assert_eq!(
                    shards.iter().filter(|s| s.owns(n)).count(),
                    1,
                    "{n} of {of}"
                );
            }
            for s in &shards {
                for (first, last) in [(1, 100), (3, 3), (5, 17), (10, 9), (0, 4)] {
                    let counted = (first.max(1)..=last).filter(|&n| s.owns(n)).count() as u64;
                    let expect = if first == 0 { 0 } else { counted };
                    assert_eq!(s.count_in(first, last), expect, "{s:?} {first}..={last}");
                }
            }
        }
    }

    #[test]
    fn part_files_keep_their_extension() {
        let s = Shard { index: 7, of: 12 };
        assert_eq!(
            s.part_path(Path::new("/d/completions.jsonl")),
            Path::new("/d/completions.part-0007.jsonl")
        );
        assert_eq!(
            s.part_path(Path::new("/d/out.failures.jsonl")),
            Path::new("/d/out.failures.part-0007.jsonl")
        );
        assert_eq!(
            s.part_path(Path::new("/d/noext")),
            Path::new("/d/noext.part-0007")
        );
        assert_eq!(
            s.part_path(Path::new("/d/.hidden")),
            Path::new("/d/.hidden.part-0007")
        );
    }

    #[test]
    fn concurrency_is_split_not_multiplied_and_shares_cover_every_shard() {
        assert_eq!(split_concurrency(64, 3), 22);
        assert_eq!(split_concurrency(2, 3), 1);
        assert_eq!(split_concurrency(8, 1), 8);
        assert_eq!(fair_share(3, 3), 1);
        assert_eq!(fair_share(3, 2), 2);
        assert_eq!(fair_share(3, 1), 3);
        assert_eq!(fair_share(3, 0), 3);
        assert_eq!(fair_share(8, 3), 3);
    }

    #[test]
    fn progress_adds_up_counts_and_rates_and_waits_for_the_slowest() {
        let a = json!({"done": 10, "total": 34, "rate_per_second": 1.5, "eta_seconds": 16,
            "failures_by_class": {"timeout": 2}, "recent_errors": ["a", "b"],
            "server": {"running": 3}});
        let b = json!({"done": 5, "total": 33, "rate_per_second": 2.0, "eta_seconds": 40,
            "failures_by_class": {"timeout": 1, "http_500": 4}, "recent_errors": ["c", "d", "e", "f"],
            "server": {"running": 9}});
        let c = combine_progress(&[a, b], 3, 1);
        assert_eq!(c["done"], 15);
        assert_eq!(c["total"], 67);
        assert_eq!(c["rate_per_second"], 3.5);
        assert_eq!(c["eta_seconds"], 40);
        assert_eq!(c["failures_by_class"], json!({"timeout": 3, "http_500": 4}));
        assert_eq!(c["recent_errors"], json!(["b", "c", "d", "e", "f"]));
        assert_eq!(c["server"], json!({"running": 3}));
        assert_eq!(c["shards"], 3);
        assert_eq!(c["shards_done"], 1);
    }
}
