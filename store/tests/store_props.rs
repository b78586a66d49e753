//! Property tests of the store: random operations through the real SQLite store.
//! Refused operations change nothing; the event log replays to exactly the
//! stored state (no event is lost); the SQL readiness counts agree with the
//! domain rule; and the invariants hold in what is stored.
use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use todod_domain::todo_list::TodoItem;
use todod_domain::{self as domain, Graph, Kind, Priority, Readiness, Status, TaskId};
use todod_store::{EventFilter, NewTask, Store, TaskFilter, TaskUpdate, WriteContext};

/// An item of a list write: (task index, content number, status, dependency indexes).
type ItemSpec = (Option<usize>, u8, Option<Status>, Option<Vec<usize>>);

#[derive(Debug, Clone)]
enum Op {
    Write(Vec<ItemSpec>),
    Create(u8, Vec<usize>),
    Move(usize, Status),
    Edge(usize, usize),
    Unedge(usize, usize),
    Rename(usize, u8),
}

fn status() -> impl Strategy<Value = Status> {
    prop::sample::select(Status::ALL.to_vec())
}

fn op() -> impl Strategy<Value = Op> {
    let item = (
        prop::option::of(0..20usize),
        0..8u8,
        prop::option::of(status()),
        prop::option::of(prop::collection::vec(0..20usize, 1..3)),
    );
    prop_oneof![
        2 => prop::collection::vec(item, 0..6).prop_map(Op::Write),
        2 => (0..8u8, prop::collection::vec(0..20usize, 0..2)).prop_map(|(c, d)| Op::Create(c, d)),
        5 => (0..20usize, status()).prop_map(|(t, s)| Op::Move(t, s)),
        3 => (0..20usize, 0..20usize).prop_map(|(a, b)| Op::Edge(a, b)),
        1 => (0..20usize, 0..20usize).prop_map(|(a, b)| Op::Unedge(a, b)),
        1 => (0..20usize, 0..8u8).prop_map(|(t, c)| Op::Rename(t, c)),
    ]
}

/// A task as the event log describes it.
#[derive(Debug, Default, Clone, PartialEq)]
struct Replayed {
    content: String,
    status: String,
    deps: BTreeSet<String>,
    archived: bool,
}

async fn all_tasks(store: &Store) -> Vec<todod_store::TaskView> {
    let filter = TaskFilter {
        plan: "p".into(),
        include_archived: true,
        page_size: 10_000,
        ..Default::default()
    };
    store.list_tasks(&filter).await.unwrap().tasks
}

async fn all_events(store: &Store) -> Vec<todod_store::EventView> {
    let filter = EventFilter {
        limit: 10_000,
        ..Default::default()
    };
    store.list_events(&filter).await.unwrap()
}

async fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_for_test(dir.path()).await.unwrap();
    let ctx = WriteContext {
        actor: "prop".into(),
        ..Default::default()
    };
    store.create_plan("p", "", &ctx).await.unwrap();
    let mut ids: Vec<TaskId> = Vec::new();
    let pick = |ids: &Vec<TaskId>, i: usize| {
        ids.get(i % ids.len().max(1))
            .copied()
            .unwrap_or(TaskId(999))
    };

    for op in ops {
        let before = (
            store.get_plan("p").await.unwrap(),
            all_tasks(&store).await,
            all_events(&store).await,
        );
        let result = match &op {
            Op::Write(items) => {
                let items: Vec<TodoItem> = items
                    .iter()
                    .map(|(id, c, s, deps)| TodoItem {
                        id: id.map(|i| pick(&ids, i)),
                        content: format!("task {c}"),
                        status: *s,
                        priority: None,
                        depends_on: deps
                            .as_ref()
                            .map(|d| d.iter().map(|i| pick(&ids, *i)).collect()),
                        metadata: None,
                    })
                    .collect();
                store
                    .write_todos("p", &items, &ctx)
                    .await
                    .map(|w| ids.extend(w.fresh().expect("no request id").created))
            }
            Op::Create(c, deps) => {
                let new = NewTask {
                    plan: "p".into(),
                    content: format!("task {c}"),
                    priority: Priority::Low,
                    kind: if *c == 7 {
                        Kind::named("generation")
                    } else {
                        Kind::TODO
                    },
                    spec: if *c == 7 {
                        "{\"n\":1}".into()
                    } else {
                        String::new()
                    },
                    claims: vec![],
                    depends_on: deps.iter().map(|i| pick(&ids, *i)).collect(),
                    requires_dependency: None,
                    owner: None,
                    metadata: None,
                };
                store
                    .create_task(&new, &ctx)
                    .await
                    .map(|t| ids.push(t.fresh().expect("no request id").id))
            }
            Op::Move(t, s) => store.transition(pick(&ids, *t), *s, &ctx).await.map(drop),
            Op::Edge(a, b) => store
                .add_dependency(pick(&ids, *a), pick(&ids, *b), &ctx)
                .await
                .map(drop),
            Op::Unedge(a, b) => store
                .remove_dependency(pick(&ids, *a), pick(&ids, *b), &ctx)
                .await
                .map(drop),
            Op::Rename(t, c) => {
                let update = TaskUpdate {
                    content: Some(format!("task {c}")),
                    ..Default::default()
                };
                store
                    .update_task(pick(&ids, *t), &update, &ctx)
                    .await
                    .map(drop)
            }
        };
        match result {
            Err(todod_store::Error::Rule(_)) => {
                let after = (
                    store.get_plan("p").await.unwrap(),
                    all_tasks(&store).await,
                    all_events(&store).await,
                );
                assert_eq!(after, before, "refused {op:?} changed the store");
            }
            Err(other) => panic!("{op:?}: {other}"),
            Ok(()) => {}
        }
    }

    // Replay the history.
    let events = store
        .list_events(&EventFilter {
            plan: "p".into(),
            limit: 10_000,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut replayed: BTreeMap<String, Replayed> = BTreeMap::new();
    let mut last_revision = 0;
    for e in &events {
        assert!(e.plan_revision >= last_revision, "revisions go backwards");
        last_revision = e.plan_revision;
        let Some(task) = e.task_id.map(|t| t.to_string()) else {
            continue;
        };
        let r = replayed.entry(task).or_default();
        match e.event_type.as_str() {
            "task_created" => {
                r.content = e.new_value.clone().unwrap();
                r.status = "pending".into();
            }
            "content_changed" => {
                assert_eq!(Some(&r.content), e.old_value.as_ref());
                r.content = e.new_value.clone().unwrap();
            }
            "status_changed" => {
                assert_eq!(Some(&r.status), e.from_status.as_ref());
                r.status = e.to_status.clone().unwrap();
            }
            "dependency_added" => assert!(r.deps.insert(e.new_value.clone().unwrap())),
            "dependency_removed" => assert!(r.deps.remove(e.old_value.as_ref().unwrap())),
            "archived" => r.archived = true,
            "restored" => r.archived = false,
            "priority_changed" | "spec_changed" | "moved" => {}
            other => panic!("unknown event {other}"),
        }
    }
    let plan = store.get_plan("p").await.unwrap();
    assert_eq!(
        last_revision, plan.revision,
        "the newest event carries the plan's revision"
    );

    let tasks = all_tasks(&store).await;
    let stored: BTreeMap<String, Replayed> = tasks
        .iter()
        .map(|t| {
            (
                t.id.to_string(),
                Replayed {
                    content: t.content.clone(),
                    status: t.status.to_string(),
                    deps: t.depends_on.iter().map(|d| d.to_string()).collect(),
                    archived: t.archived,
                },
            )
        })
        .collect();
    assert_eq!(
        replayed, stored,
        "the history does not replay to the stored state"
    );

    // Invariants of what is stored, and SQL readiness == the domain rule.
    let mut g = Graph::new();
    for t in tasks.iter().filter(|t| !t.archived) {
        g.insert(t.id, t.status);
    }
    for t in tasks.iter().filter(|t| !t.archived) {
        for d in &t.depends_on {
            assert!(g.contains(*d), "{} depends on archived {d}", t.id);
            g.insert_edge(t.id, *d);
        }
    }
    assert_eq!(g.find_cycle(), None);
    assert!(g.violations().is_empty(), "{:?}", g.violations());
    let summary = store.plan_summary("p", 100).await.unwrap();
    let count = |want: Readiness| {
        tasks
            .iter()
            .filter(|t| !t.archived)
            .filter(|t| g.readiness(t.id).map(|(r, _)| r) == Some(want))
            .count() as i64
    };
    assert_eq!(summary.ready, count(Readiness::Ready));
    assert_eq!(summary.blocked, count(Readiness::Blocked));
    assert_eq!(
        summary.blocked_by_failure,
        count(Readiness::BlockedByFailure)
    );
    for t in tasks.iter().filter(|t| !t.archived) {
        assert_eq!(
            t.readiness,
            domain::readiness(
                t.status,
                t.depends_on.iter().map(|d| (*d, g.status(*d).unwrap()))
            )
            .map(|r| r.0)
        );
    }
    store.close().await;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_history_replays_to_the_stored_state_and_invariants_hold(
        ops in prop::collection::vec(op(), 1..40)
    ) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(run(ops));
    }
}
