//! Property tests of the rules: whatever sequence of operations clients try, the
//! graph stays acyclic and no started task stands on unfinished work.
use std::collections::BTreeMap;

use proptest::prelude::*;
use todod_domain::todo_list::{reconcile, StoredTask, TodoItem};
use todod_domain::{Change, Graph, Kind, Priority, Status, TaskId};

#[derive(Debug, Clone)]
enum Op {
    Add,
    Edge(usize, usize),
    Unedge(usize, usize),
    Move(usize, Status),
    Remove(usize),
}

fn status() -> impl Strategy<Value = Status> {
    prop::sample::select(Status::ALL.to_vec())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Add),
        3 => (0..12usize, 0..12usize).prop_map(|(a, b)| Op::Edge(a, b)),
        1 => (0..12usize, 0..12usize).prop_map(|(a, b)| Op::Unedge(a, b)),
        5 => (0..12usize, status()).prop_map(|(a, s)| Op::Move(a, s)),
        1 => (0..12usize).prop_map(Op::Remove),
    ]
}

fn assert_sound(g: &Graph) {
    assert_eq!(g.find_cycle(), None, "cycle in {g:?}");
    assert!(g.violations().is_empty(), "violations {:?}", g.violations());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn graph_operations_keep_the_invariants(ops in prop::collection::vec(op(), 1..80)) {
        let mut g = Graph::new();
        let mut ids: Vec<TaskId> = Vec::new();
        for op in ops {
            let pick = |i: usize| ids.get(i % ids.len().max(1)).copied();
            let before = g.clone();
            let result = match op {
                Op::Add => {
                    let id = TaskId(ids.len() as i64 + 1);
                    ids.push(id);
                    g.insert(id, Status::Pending);
                    Ok(())
                }
                Op::Edge(a, b) => match (pick(a), pick(b)) {
                    (Some(a), Some(b)) if g.contains(a) && g.contains(b) => g.add_edge(a, b).map(drop),
                    _ => Ok(()),
                },
                Op::Unedge(a, b) => {
                    if let (Some(a), Some(b)) = (pick(a), pick(b)) {
                        g.remove_edge(a, b);
                    }
                    Ok(())
                }
                Op::Move(a, to) => match pick(a) {
                    Some(a) if g.contains(a) => g.transition(a, to).map(drop),
                    _ => Ok(()),
                },
                Op::Remove(a) => {
                    if let Some(a) = pick(a) {
                        g.remove(a);
                    }
                    Ok(())
                }
            };
            if result.is_err() {
                // A refused operation changes nothing.
                prop_assert_eq!(format!("{g:?}"), format!("{before:?}"));
            }
            assert_sound(&g);
        }
    }

    /// The refused side: a list that restates the plan exactly as read (what
    /// an agent that lost its context sends back) is accepted and changes
    /// nothing, whatever the plan holds, phase tasks included.
    #[test]
    fn restating_the_plan_is_accepted_and_changes_nothing(setup in prop::collection::vec(op(), 0..40)) {
        let (_, stored) = stored_plan(setup);
        let items: Vec<TodoItem> = stored.iter().map(|t| TodoItem {
            id: Some(t.id),
            content: t.content.clone(),
            status: Some(t.status),
            priority: Some(t.priority),
            depends_on: None,
            metadata: None,
        }).collect();
        let write = reconcile(&stored, &items);
        prop_assert!(write.is_ok(), "refused: {:?}", write.err());
        let write = write.unwrap();
        prop_assert!(write.changes.is_empty(), "changes: {:?}", write.changes);
    }

    /// And a new pending item added at the end of that list is accepted too,
    /// with nothing else changed.
    #[test]
    fn appending_an_item_is_accepted(setup in prop::collection::vec(op(), 0..40)) {
        let (_, stored) = stored_plan(setup);
        let mut items: Vec<TodoItem> = stored.iter().map(|t| TodoItem {
            id: Some(t.id),
            content: t.content.clone(),
            status: None,
            priority: None,
            depends_on: None,
            metadata: None,
        }).collect();
        items.push(TodoItem { id: None, content: "a new task".into(), status: None, priority: None, depends_on: None, metadata: None });
        let write = reconcile(&stored, &items);
        prop_assert!(write.is_ok(), "refused: {:?}", write.err());
        let changes = write.unwrap().changes;
        prop_assert_eq!(changes.len(), 1, "{:?}", changes);
        prop_assert!(matches!(changes[0], Change::Created { .. }), "{:?}", changes);
    }
}

/// Any list written over any plan: an accepted write leaves the graph sound
/// and every status it asked for holds. A refusal is the rules at work and
/// is not checked here; but a run that refused nearly every write would
/// check nothing, so a share of the writes must be accepted.
#[test]
fn list_writes_keep_the_invariants() {
    use proptest::test_runner::{Config, TestRunner};
    const CASES: u32 = 256;
    let accepted = std::cell::Cell::new(0u32);
    let items = prop::collection::vec(
        (
            prop::option::of(0..12usize),
            0..6usize,
            prop::option::of(status()),
            prop::option::of(prop::collection::vec(0..12usize, 0..3)),
        ),
        0..10,
    );
    let mut runner = TestRunner::new(Config {
        source_file: Some(file!()),
        ..Config::with_cases(CASES)
    });
    let strategy = (prop::collection::vec(op(), 0..40), items);
    runner
        .run(&strategy, |(setup, items)| {
            let (g, stored) = stored_plan(setup);
            let ids: Vec<TaskId> = g.ids().collect();
            let items: Vec<TodoItem> = items
                .into_iter()
                .map(|(id, content, status, deps)| TodoItem {
                    id: id.and_then(|i| ids.get(i % ids.len().max(1)).copied()),
                    content: format!("task {content}"),
                    status,
                    priority: None,
                    depends_on: deps
                        .map(|d| {
                            d.into_iter()
                                .filter_map(|i| ids.get(i % ids.len().max(1)).copied())
                                .collect::<Vec<_>>()
                        })
                        .filter(|d| !d.is_empty()),
                    metadata: None,
                })
                .collect();
            let Ok(write) = reconcile(&stored, &items) else {
                return Ok(());
            };
            accepted.set(accepted.get() + 1);
            // Apply the changes to a model: the result must be sound, every
            // item's requested status must hold, and phase tasks stay live.
            let mut model: BTreeMap<TaskId, (Status, bool)> =
                stored.iter().map(|t| (t.id, (t.status, false))).collect();
            let mut after = g.clone();
            for change in &write.changes {
                match change {
                    Change::Created { id, .. } => {
                        model.insert(*id, (Status::Pending, false));
                        after.insert(*id, Status::Pending);
                    }
                    Change::StatusChanged { id, from, to } => {
                        prop_assert_eq!(model[id].0, *from);
                        model.get_mut(id).unwrap().0 = *to;
                        after.insert(*id, *to);
                    }
                    Change::DependencyAdded { id, depends_on } => {
                        after.insert_edge(*id, *depends_on)
                    }
                    Change::DependencyRemoved { id, depends_on } => {
                        after.remove_edge(*id, *depends_on);
                    }
                    Change::Archived { id } => {
                        prop_assert!(!stored.iter().any(|t| t.id == *id && t.kind.is_phase()));
                        model.get_mut(id).unwrap().1 = true;
                        prop_assert_eq!(
                            after.dependencies(*id).count() + after.dependents(*id).count(),
                            0
                        );
                        after.remove(*id);
                    }
                    _ => {}
                }
            }
            assert_sound(&after);
            for (item, id) in items.iter().zip(&write.resolved) {
                if let Some(s) = item.status {
                    prop_assert_eq!(model[id].0, s);
                }
            }
            Ok(())
        })
        .unwrap();
    // The floor: at least one write in sixteen is accepted.
    assert!(
        accepted.get() >= CASES / 16,
        "only {} of {CASES} writes were accepted: the invariants were hardly checked",
        accepted.get()
    );
}

/// A sound stored plan built from random operations; every fifth task is a
/// phase task.
fn stored_plan(setup: Vec<Op>) -> (Graph, Vec<StoredTask>) {
    let mut g = Graph::new();
    let mut next = 1;
    for op in setup {
        let ids: Vec<TaskId> = g.ids().collect();
        let pick = |i: usize| ids.get(i % ids.len().max(1)).copied();
        match op {
            Op::Add => {
                g.insert(TaskId(next), Status::Pending);
                next += 1;
            }
            Op::Edge(a, b) => {
                if let (Some(a), Some(b)) = (pick(a), pick(b)) {
                    let _ = g.add_edge(a, b);
                }
            }
            Op::Move(a, s) => {
                if let Some(a) = pick(a) {
                    let _ = g.transition(a, s);
                }
            }
            _ => {}
        }
    }
    let stored = g
        .ids()
        .map(|id| StoredTask {
            id,
            content: format!("task {}", id.0 % 4),
            status: g.status(id).unwrap(),
            priority: Priority::Medium,
            kind: if id.0 % 5 == 0 {
                Kind::named("generation")
            } else {
                Kind::TODO
            },
            position: id.0,
            depends_on: g.dependencies(id).collect(),
            archived: false,
            metadata: None,
        })
        .collect();
    (g, stored)
}
