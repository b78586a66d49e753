//! Liveness that tells the truth, from outside: health turns NOT_SERVING
//! while a write waits past the bound for a writer that a stalled disk holds
//! (a failpoint), and SERVING again once writes go through; and one daemon
//! driven through a long mixed series of hostile and normal calls, thousands
//! of watch streams opened and dropped, phase tasks paused and cancelled,
//! then answers every read and write within a second.
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use todod_e2e::mock_openai::{MockOpenAi, Settings};
use todod_e2e::{create_generation, gen, proto, Client, RealDaemon};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const SERVICE: &str = "todod.v1.Todos";

async fn health(
    daemon: &RealDaemon,
) -> HealthClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        impl tonic::service::Interceptor,
    >,
> {
    let channel = tonic::transport::Channel::from_shared(daemon.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let token = daemon.token.clone();
    HealthClient::with_interceptor(channel, move |mut request: tonic::Request<()>| {
        if let Some(token) = &token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        Ok(request)
    })
}

/// The next status a health watch reports.
async fn next_status(
    s: &mut tonic::Streaming<tonic_health::pb::HealthCheckResponse>,
) -> ServingStatus {
    tokio::time::timeout(Duration::from_secs(60), s.next())
        .await
        .expect("a health change within a minute")
        .expect("the stream goes on")
        .unwrap()
        .status()
}

fn keyed_task(plan: &str, content: &str) -> proto::CreateTaskRequest {
    proto::CreateTaskRequest {
        plan: plan.into(),
        content: content.into(),
        request_id: todod::proto::local::new_request_id(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_says_not_serving_while_the_writer_is_stuck_and_serving_once_it_is_free() {
    let state = tempfile::tempdir().unwrap();
    // The second keyed write holds the writer for 4 s, as a stalled disk
    // would; the bound is 1 s.
    let daemon = RealDaemon::spawn_env(
        state.path(),
        &["--writer-stall", "1s"],
        &[("TODOD_FAILPOINTS", "store.client_write=stall4000@2")],
    );
    let mut c = daemon.client().await;
    let mut statuses = health(&daemon)
        .await
        .watch(HealthCheckRequest {
            service: SERVICE.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next_status(&mut statuses).await, ServingStatus::Serving);
    c.create_plan(proto::CreatePlanRequest {
        name: "p".into(),
        request_id: todod::proto::local::new_request_id(),
        ..Default::default()
    })
    .await
    .unwrap();
    let (mut c1, mut c2) = (daemon.client().await, daemon.client().await);
    let stuck = tokio::spawn(async move { c1.create_task(keyed_task("p", "held")).await });
    // Starts once the first holds the writer (its failpoint is hit inside).
    let waiting = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        c2.create_task(keyed_task("p", "waits")).await
    });
    assert_eq!(next_status(&mut statuses).await, ServingStatus::NotServing);
    assert_eq!(next_status(&mut statuses).await, ServingStatus::Serving);
    assert!(stuck.await.unwrap().is_ok());
    assert!(waiting.await.unwrap().is_ok());
}

/// One call, which must answer within a second.
async fn within_a_second<T>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> T {
    match tokio::time::timeout(Duration::from_secs(1), call).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(status)) => panic!("{what}: {status:?}"),
        Err(_) => panic!("{what}: no answer within 1 s"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_long_hostile_series_every_call_still_answers_within_a_second() {
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(50),
        keep_bodies: false,
        ..Settings::default()
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let daemon = RealDaemon::spawn(state.path());
    let mut c: Client = daemon.client().await;
    c.create_plan(proto::CreatePlanRequest {
        name: "soak".into(),
        ..Default::default()
    })
    .await
    .unwrap();

    // Phase tasks, started by the daemon, then paused and cancelled.
    let mut phases = Vec::new();
    for i in 0..4 {
        let dir = data.path().join(format!("g{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        gen::write_prompts(&dir.join("prompts.jsonl"), 400, false);
        phases.push(
            create_generation(&mut c, "soak", gen::spec(&dir, &mock.url, 4).to_string()).await,
        );
    }

    let (mut hostile, mut normal) = (0, 0);
    for round in 0..60 {
        // Hostile: each refused, none may wedge the daemon.
        let big = "x".repeat(3 << 20);
        let calls: Vec<Result<(), tonic::Status>> = vec![
            c.create_task(proto::CreateTaskRequest {
                plan: "soak".into(),
                content: "x".repeat(100_000),
                ..Default::default()
            })
            .await
            .map(drop),
            c.create_task(proto::CreateTaskRequest {
                plan: "soak".into(),
                content: "m".into(),
                metadata_json: json!({"k": big}).to_string(),
                ..Default::default()
            })
            .await
            .map(drop),
            c.transition_task(proto::TransitionTaskRequest {
                id: "t1".into(),
                to: "wizard".into(),
                ..Default::default()
            })
            .await
            .map(drop),
            c.get_task(proto::GetTaskRequest {
                id: "'; DROP TABLE tasks; --".into(),
            })
            .await
            .map(drop),
            c.create_task(proto::CreateTaskRequest {
                plan: "soak".into(),
                content: "g".into(),
                kind: "generation".into(),
                spec_json: "{\"prompts\":".into(),
                ..Default::default()
            })
            .await
            .map(drop),
        ];
        for call in calls {
            assert!(call.is_err(), "round {round}: a hostile call was accepted");
            hostile += 1;
        }
        // Normal: a task made, changed, started and done; a list written.
        let task = c
            .create_task(keyed_task("soak", &format!("task {round}")))
            .await
            .unwrap()
            .into_inner();
        c.update_task(proto::UpdateTaskRequest {
            id: task.id.clone(),
            content: Some(format!("task {round}, renamed")),
            metadata_patch_json: Some(json!({"round": round}).to_string()),
            ..Default::default()
        })
        .await
        .unwrap();
        for to in ["in_progress", "completed"] {
            c.transition_task(proto::TransitionTaskRequest {
                id: task.id.clone(),
                to: to.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        }
        c.write_todos(proto::WriteTodosRequest {
            plan: format!("list{}", round % 5),
            todos: (0..20)
                .map(|i| proto::TodoItem {
                    content: format!("item {i}"),
                    status: if i < round % 20 {
                        "completed".into()
                    } else {
                        "pending".into()
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .await
        .unwrap();
        normal += 5;
        // Watch streams opened and dropped, some after their first event.
        for w in 0..40 {
            let mut stream = c
                .watch_plan(proto::WatchPlanRequest {
                    plan: "soak".into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            if w % 4 == 0 {
                let _ = stream.next().await;
            }
        }
        if round == 10 {
            for id in &phases[..2] {
                let _ = c
                    .transition_task(proto::TransitionTaskRequest {
                        id: id.clone(),
                        to: "pending".into(),
                        reason: "paused".into(),
                        ..Default::default()
                    })
                    .await;
            }
        }
        if round == 20 {
            for id in &phases {
                let _ = c
                    .transition_task(proto::TransitionTaskRequest {
                        id: id.clone(),
                        to: "cancelled".into(),
                        reason: "soak".into(),
                        ..Default::default()
                    })
                    .await;
            }
        }
    }
    assert!(
        hostile >= 300 && normal >= 300,
        "{hostile} hostile, {normal} normal"
    );

    // Now every read and write answers within a second.
    let mut fresh = daemon.client().await;
    let status = within_a_second(
        "health",
        health(&daemon).await.check(HealthCheckRequest {
            service: SERVICE.into(),
        }),
    )
    .await;
    assert_eq!(status.into_inner().status(), ServingStatus::Serving);
    within_a_second(
        "ListPlans",
        fresh.list_plans(proto::ListPlansRequest {
            highlight_limit: 5,
            include_archived: true,
        }),
    )
    .await;
    within_a_second(
        "GetPlan",
        fresh.get_plan(proto::GetPlanRequest {
            name: "soak".into(),
            highlight_limit: 5,
        }),
    )
    .await;
    within_a_second(
        "ListTasks",
        fresh.list_tasks(proto::ListTasksRequest {
            plan: "soak".into(),
            ..Default::default()
        }),
    )
    .await;
    within_a_second(
        "ReadTodos",
        fresh.read_todos(proto::ReadTodosRequest {
            plan: "list0".into(),
        }),
    )
    .await;
    let task = within_a_second(
        "CreateTask",
        fresh.create_task(keyed_task("soak", "after the soak")),
    )
    .await
    .into_inner();
    within_a_second(
        "UpdateTask",
        fresh.update_task(proto::UpdateTaskRequest {
            id: task.id.clone(),
            priority: Some("high".into()),
            ..Default::default()
        }),
    )
    .await;
    within_a_second(
        "TransitionTask",
        fresh.transition_task(proto::TransitionTaskRequest {
            id: task.id,
            to: "in_progress".into(),
            ..Default::default()
        }),
    )
    .await;
    within_a_second(
        "WriteTodos",
        fresh.write_todos(proto::WriteTodosRequest {
            plan: "after".into(),
            todos: vec![proto::TodoItem {
                content: "one".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
    )
    .await;
    let mut stream = within_a_second(
        "WatchPlan",
        fresh.watch_plan(proto::WatchPlanRequest {
            plan: "soak".into(),
            ..Default::default()
        }),
    )
    .await
    .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
    assert!(
        matches!(first, Ok(Some(Ok(_)))),
        "a watch's first event within 1 s: {first:?}"
    );
    for id in &phases {
        let t = within_a_second(
            "GetTask",
            fresh.get_task(proto::GetTaskRequest { id: id.clone() }),
        )
        .await
        .into_inner();
        assert!(
            ["cancelled", "completed"].contains(&t.status.as_str()),
            "{id}: {}",
            t.status
        );
    }
}
