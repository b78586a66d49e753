//! Many writers racing with optimistic concurrency: no update is lost, and every
//! conflict is reported as ABORTED.
use std::collections::BTreeSet;

use todod_e2e::{item, proto, write_request, TestDaemon};
use tonic::Code;

const CLIENTS: usize = 16;
const WRITES_PER_CLIENT: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_lose_no_update_and_see_every_conflict() {
    let daemon = TestDaemon::start().await;
    let mut c = daemon.client().await;
    let first = c
        .write_todos(write_request("race", vec![item("", "count 0", "", "")]))
        .await
        .unwrap()
        .into_inner();
    let counter = first.todos[0].id.clone();
    let base_revision = first.plan.unwrap().revision;

    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut c = daemon.client().await;
        let counter = counter.clone();
        clients.push(tokio::spawn(async move {
            let (mut done, mut conflicts) = (0, 0);
            while done < WRITES_PER_CLIENT {
                // Read-modify-write: increment the number in the content.
                let read = c
                    .read_todos(proto::ReadTodosRequest {
                        plan: "race".into(),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                let n: usize = read.todos[0].content["count ".len()..].parse().unwrap();
                let mut req = write_request(
                    "race",
                    vec![item(&counter, &format!("count {}", n + 1), "", "")],
                );
                req.expected_revision = read.plan.unwrap().revision;
                match c.write_todos(req).await {
                    Ok(_) => done += 1,
                    Err(e) if e.code() == Code::Aborted => conflicts += 1,
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
            conflicts
        }));
    }
    let mut conflicts = 0;
    for client in clients {
        conflicts += client.await.unwrap();
    }

    let total = CLIENTS * WRITES_PER_CLIENT;
    let read = c
        .read_todos(proto::ReadTodosRequest {
            plan: "race".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        read.todos[0].content,
        format!("count {total}"),
        "an update was lost"
    );
    assert_eq!(read.plan.unwrap().revision, base_revision + total as i64);

    // The history holds each increment exactly once, in order.
    let mut olds = BTreeSet::new();
    let mut after_seq = 0;
    loop {
        let page = c
            .list_events(proto::ListEventsRequest {
                task_id: counter.clone(),
                after_seq,
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        if page.events.is_empty() {
            break;
        }
        for e in page.events.iter().filter(|e| e.r#type == "content_changed") {
            assert!(
                olds.insert(e.old_value.clone()),
                "increment {} twice",
                e.old_value
            );
        }
        after_seq = page.last_seq;
    }
    assert_eq!(olds.len(), total);
    println!("{total} writes, {conflicts} conflicts reported as ABORTED");
    assert!(
        conflicts > 0,
        "16 racing writers should have collided at least once"
    );
}
