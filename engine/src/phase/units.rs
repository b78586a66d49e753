//! What the phase runtime runs, decided without I/O: a unit of work is a
//! whole phase task, or one shard of a sharded one. From the phase tasks and
//! their shards as the store has them, the units this daemon runs and how
//! many daemons are alive, [`plan`] says which units to start (and how),
//! and which of this daemon's shard runs to hand back because it holds more
//! than its fair share; [`holds`] says whether a run still holds its unit.
use std::collections::HashMap;

use super::kinds;
use todod_domain::shards::{fair_share, Shard};
use todod_domain::{Status, TaskId};
use todod_store::{PhaseTask, ShardRow};

/// A whole task (`shard: None`; for a sharded task, the run that puts its
/// done shards together), or one of its shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Unit {
    pub task: TaskId,
    pub shard: Option<Shard>,
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.shard {
            Some(shard) => write!(f, "{} ({})", self.task, shard.label()),
            None => write!(f, "{}", self.task),
        }
    }
}

/// How a unit is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A pending unsharded task: moved to in progress and held, at once.
    Begin(Unit),
    /// A pending sharded task: moved to in progress; its shards are taken
    /// at the next look.
    Open(TaskId),
    /// An in-progress task (or a sharded one whose shards are all done),
    /// taken over from whoever held it.
    Take(Unit),
    /// A shard, taken (made the first time).
    TakeShard(Unit),
}

/// A run of this daemon: its unit and whether it was told to stop.
#[derive(Debug, Clone, Copy)]
pub struct Mine {
    pub unit: Unit,
    pub stopping: bool,
}

/// What the daemon sees at one look.
pub struct Look<'a> {
    pub tasks: &'a [PhaseTask],
    /// The shards runs have taken so far, by task.
    pub shards: &'a HashMap<TaskId, Vec<ShardRow>>,
    pub mine: &'a [Mine],
    /// Daemons alive on the database (this one counted).
    pub daemons: usize,
    /// Of those, how many said they cannot reach a task's directories, by
    /// task: they take none of its shards, so they count in no share.
    pub cannot_reach: &'a HashMap<TaskId, usize>,
    /// Whether other daemons may share the database.
    pub shared: bool,
    pub run_id: &'a str,
    /// How many more runs this daemon may start.
    pub room: usize,
}

/// How many shards a task's spec splits it into (1: not split).
pub fn shards_in(spec: &str) -> u32 {
    serde_json::from_str::<serde_json::Value>(spec)
        .ok()
        .and_then(|v| v.get("shards").and_then(serde_json::Value::as_u64))
        .map_or(1, |n| {
            n.clamp(1, u64::from(todod_domain::shards::MAX_SHARDS)) as u32
        })
}

/// Whether the runtime should start `task` (a whole one) now.
fn should_start(task: &PhaseTask) -> bool {
    match task.status {
        Status::InProgress => true,
        Status::Pending => task.ready && !task.held && kinds::auto_start(&task.spec),
        _ => false,
    }
}

/// The units to start, and the runs to stop (this daemon holds more of a
/// task's shards than its share, now that more daemons are alive: handed
/// back, they go to the others).
pub fn plan(look: &Look<'_>) -> (Vec<Start>, Vec<Unit>) {
    let (mut starts, mut stops) = (Vec::new(), Vec::new());
    let mut room = look.room;
    let running = |unit: Unit| look.mine.iter().any(|m| m.unit == unit);
    for task in look.tasks.iter().filter(|t| kinds::get(t.kind).is_some()) {
        let of = shards_in(&task.spec);
        let whole = Unit {
            task: task.id,
            shard: None,
        };
        let elsewhere = look.shared && task.held_elsewhere(look.run_id);
        if of <= 1 {
            if room > 0 && !running(whole) && should_start(task) && !elsewhere {
                starts.push(match task.status {
                    Status::InProgress => Start::Take(whole),
                    _ => Start::Begin(whole),
                });
                room -= 1;
            }
            continue;
        }
        match task.status {
            Status::Pending if should_start(task) => starts.push(Start::Open(task.id)),
            Status::InProgress => {
                let rows = look.shards.get(&task.id).map_or(&[][..], Vec::as_slice);
                let done = rows.iter().filter(|r| r.done).count();
                if done as u32 >= of {
                    if room > 0 && !running(whole) && !elsewhere {
                        starts.push(Start::Take(whole));
                        room -= 1;
                    }
                    continue;
                }
                let away = look.cannot_reach.get(&task.id).copied().unwrap_or(0);
                let share = fair_share(of, look.daemons.saturating_sub(away));
                let mut held: Vec<Unit> = look
                    .mine
                    .iter()
                    .filter(|m| m.unit.task == task.id && m.unit.shard.is_some() && !m.stopping)
                    .map(|m| m.unit)
                    .collect();
                if held.len() > share {
                    held.sort();
                    stops.extend(held.split_off(share));
                    continue;
                }
                let mut mine = held.len();
                for index in 0..of {
                    if mine >= share || room == 0 {
                        break;
                    }
                    let unit = Unit {
                        task: task.id,
                        shard: Some(Shard { index, of }),
                    };
                    let row = rows.iter().find(|r| r.shard.index == index);
                    if running(unit)
                        || row.is_some_and(|r| r.done)
                        || (look.shared && row.is_some_and(|r| r.held_elsewhere(look.run_id)))
                    {
                        continue;
                    }
                    starts.push(Start::TakeShard(unit));
                    mine += 1;
                    room -= 1;
                }
            }
            _ => {}
        }
    }
    (starts, stops)
}

/// Whether `attempt`, running `unit`, still holds it: the task in
/// progress, and held by the attempt (its shard, for a shard's run).
pub fn holds(
    unit: Unit,
    attempt: &str,
    tasks: &[PhaseTask],
    shards: &HashMap<TaskId, Vec<ShardRow>>,
) -> bool {
    let Some(task) = tasks
        .iter()
        .find(|t| t.id == unit.task && t.status == Status::InProgress)
    else {
        return false;
    };
    match unit.shard {
        None => task.lease_owner.as_deref() == Some(attempt),
        Some(shard) => shards.get(&unit.task).is_some_and(|rows| {
            rows.iter().any(|r| {
                r.shard.index == shard.index && !r.done && r.lease_owner.as_deref() == Some(attempt)
            })
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use todod_domain::Kind;

    fn task(id: i64, status: Status, shards: u32) -> PhaseTask {
        PhaseTask {
            id: TaskId(id),
            kind: Kind::named("generation"),
            status,
            spec: format!(r#"{{"shards": {shards}}}"#),
            lease_owner: None,
            ready: true,
            held: false,
            lease_live: false,
        }
    }

    fn row(index: u32, of: u32, owner: Option<&str>, live: bool, done: bool) -> ShardRow {
        ShardRow {
            shard: Shard { index, of },
            lease_owner: owner.map(str::to_string),
            expires_at: None,
            lease_live: live,
            done,
        }
    }

    fn look<'a>(
        tasks: &'a [PhaseTask],
        shards: &'a HashMap<TaskId, Vec<ShardRow>>,
        mine: &'a [Mine],
        daemons: usize,
    ) -> Look<'a> {
        static NONE: std::sync::OnceLock<HashMap<TaskId, usize>> = std::sync::OnceLock::new();
        Look {
            tasks,
            shards,
            mine,
            daemons,
            cannot_reach: NONE.get_or_init(HashMap::new),
            shared: true,
            run_id: "a",
            room: 4,
        }
    }

    fn shard_unit(task: i64, index: u32, of: u32) -> Unit {
        Unit {
            task: TaskId(task),
            shard: Some(Shard { index, of }),
        }
    }

    #[test]
    fn a_pending_sharded_task_is_opened_then_its_shards_shared_out() {
        let none = HashMap::new();
        let (starts, _) = plan(&look(&[task(1, Status::Pending, 3)], &none, &[], 3));
        assert_eq!(starts, vec![Start::Open(TaskId(1))]);
        // Three daemons alive: this one takes one shard.
        let (starts, _) = plan(&look(&[task(1, Status::InProgress, 3)], &none, &[], 3));
        assert_eq!(starts, vec![Start::TakeShard(shard_unit(1, 0, 3))]);
        // Alone: all three, at once.
        let (starts, _) = plan(&look(&[task(1, Status::InProgress, 3)], &none, &[], 1));
        assert_eq!(starts.len(), 3);
    }

    #[test]
    fn shards_others_hold_live_or_done_are_left_and_an_expired_one_is_taken() {
        let mut shards = HashMap::new();
        shards.insert(
            TaskId(1),
            vec![
                row(0, 3, Some("b.1"), true, false),
                row(1, 3, Some("c.1"), false, false),
                row(2, 3, Some("a.1"), false, true),
            ],
        );
        let tasks = [task(1, Status::InProgress, 3)];
        let (starts, _) = plan(&look(&tasks, &shards, &[], 3));
        assert_eq!(starts, vec![Start::TakeShard(shard_unit(1, 1, 3))]);
    }

    #[test]
    fn a_daemon_that_cannot_reach_a_task_counts_in_no_share_of_it() {
        let none = HashMap::new();
        let tasks = [task(1, Status::InProgress, 3)];
        let mut away = HashMap::new();
        away.insert(TaskId(1), 1);
        // Three alive, one of them out of reach: two take the three shards.
        let look = Look {
            cannot_reach: &away,
            ..look(&tasks, &none, &[], 3)
        };
        let (starts, _) = plan(&look);
        assert_eq!(
            starts,
            vec![
                Start::TakeShard(shard_unit(1, 0, 3)),
                Start::TakeShard(shard_unit(1, 1, 3))
            ]
        );
    }

    #[test]
    fn more_than_a_fair_share_is_handed_back_once_others_are_alive() {
        let none = HashMap::new();
        let mine: Vec<Mine> = (0..3)
            .map(|i| Mine {
                unit: shard_unit(1, i, 3),
                stopping: false,
            })
            .collect();
        let tasks = [task(1, Status::InProgress, 3)];
        let (starts, stops) = plan(&look(&tasks, &none, &mine, 3));
        assert!(starts.is_empty());
        assert_eq!(stops, vec![shard_unit(1, 1, 3), shard_unit(1, 2, 3)]);
        // Runs already told to stop are not counted again.
        let stopping: Vec<Mine> = mine
            .iter()
            .map(|m| Mine {
                stopping: m.unit.shard.unwrap().index > 0,
                ..*m
            })
            .collect();
        let (starts, stops) = plan(&look(&tasks, &none, &stopping, 3));
        assert!(
            starts.is_empty() && stops.is_empty(),
            "{starts:?} {stops:?}"
        );
    }

    #[test]
    fn a_task_whose_shards_are_all_done_is_taken_whole_to_be_put_together() {
        let mut shards = HashMap::new();
        shards.insert(
            TaskId(1),
            (0..3)
                .map(|i| row(i, 3, Some("b.1"), false, true))
                .collect(),
        );
        let tasks = [task(1, Status::InProgress, 3)];
        let (starts, _) = plan(&look(&tasks, &shards, &[], 3));
        assert_eq!(
            starts,
            vec![Start::Take(Unit {
                task: TaskId(1),
                shard: None
            })]
        );
        assert!(!holds(shard_unit(1, 0, 3), "b.1", &tasks, &shards));
    }

    #[test]
    fn a_run_holds_its_shard_only_while_its_attempt_owns_it() {
        let mut shards = HashMap::new();
        shards.insert(TaskId(1), vec![row(0, 2, Some("a.7"), true, false)]);
        let tasks = [task(1, Status::InProgress, 2)];
        assert!(holds(shard_unit(1, 0, 2), "a.7", &tasks, &shards));
        assert!(!holds(shard_unit(1, 0, 2), "a.8", &tasks, &shards));
        let paused = [task(1, Status::Pending, 2)];
        assert!(!holds(shard_unit(1, 0, 2), "a.7", &paused, &shards));
    }

    #[test]
    fn room_bounds_what_starts() {
        let none = HashMap::new();
        let tasks = [task(1, Status::InProgress, 8)];
        let mut l = look(&tasks, &none, &[], 1);
        l.room = 2;
        assert_eq!(plan(&l).0.len(), 2);
    }
}
