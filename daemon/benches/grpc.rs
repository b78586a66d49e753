//! Loopback gRPC benchmark of the todo graph, with the disk's raw fsync as the
//! baseline measured in the same run. Run with:
//!
//!     cargo bench -p todod --bench grpc
//!
//! It prints a Markdown table for BENCHMARKS.md. Targets (issue "The todo graph"):
//! WriteTodos of 4 items p50 <= 1 ms and p99 <= 2x raw fsync p99; >= 5,000
//! ReadTodos/s; a 100,000-task plan listed in < 200 ms; its summary instant.
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use todod::proto::todos_client::TodosClient;
use todod::proto::{self, TodoItem};
use todod::server::{self, Listeners, Options};
use todod_store::Store;
use tonic::transport::Channel;

// The daemon's binary runs on mimalloc (daemon/src/main.rs); so does this
// in-process server, or the figures would be glibc malloc's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FSYNC_SAMPLES: usize = 2000;
const WRITE_SAMPLES: usize = 2000;
const READ_SECONDS: u64 = 3;
const READERS: usize = 8;
const BIG_PLAN: usize = 100_000;

/// Says on stderr what the bench is doing (the table goes to stdout at the end).
fn stage(what: &str) {
    eprintln!("grpc bench: {what}");
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// What a durable commit costs at least: write a page and fdatasync it.
fn raw_fsync(dir: &std::path::Path) -> Vec<Duration> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.join("fsync.bin"))
        .unwrap();
    let page = [7u8; 4096];
    (0..FSYNC_SAMPLES)
        .map(|i| {
            let start = Instant::now();
            file.write_all_at(&page, (i * 4096) as u64).unwrap();
            file.sync_data().unwrap();
            start.elapsed()
        })
        .collect()
}

async fn client(url: &str) -> TodosClient<Channel> {
    let channel = Channel::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    TodosClient::new(channel).max_decoding_message_size(usize::MAX)
}

fn item(id: &str, content: &str, status: &str) -> TodoItem {
    TodoItem {
        id: id.into(),
        content: content.into(),
        status: status.into(),
        priority: "medium".into(),
        depends_on: vec![],
        metadata_patch_json: String::new(),
    }
}

async fn seed_big_plan(path: &std::path::Path) {
    // Setup only: bulk-insert straight into SQLite (100k durable API calls would
    // measure fsync, not listing). The daemon then opens the file as usual.
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO plans (name, revision, created_at, updated_at) VALUES ('big', 1, 0, 0)",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?) \
         INSERT INTO tasks (plan_id, content, status, priority, kind, position, created_at, updated_at) \
         SELECT (SELECT id FROM plans WHERE name = 'big'), 'generate shard ' || i, \
         CASE WHEN i % 7 = 0 THEN 'completed' WHEN i % 11 = 0 THEN 'in_progress' ELSE 'pending' END, \
         'medium', 'todo', i, 0, 0 FROM n",
    )
    .bind(BIG_PLAN as i64)
    .execute(&mut *tx)
    .await
    .unwrap();
    // Every tenth task waits on the one before it.
    sqlx::query(
        "INSERT INTO dependencies (task_id, depends_on) SELECT t.id, t.id - 1 FROM tasks t \
         JOIN plans p ON p.id = t.plan_id WHERE p.name = 'big' AND t.position % 10 = 0 \
         AND t.position > 0 AND t.status = 'pending'",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

#[tokio::main]
async fn main() {
    let dir =
        tempfile::tempdir_in(std::env::var_os("TODOD_BENCH_DIR").unwrap_or_else(|| ".".into()))
            .unwrap();
    let db = dir.path().join("todod.db");
    let store = Store::open(&db).await.unwrap();
    seed_big_plan(&db).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listeners = Listeners {
        tcp: Some(listener),
        unix: None,
    };
    let serving = tokio::spawn(server::run(
        store.clone(),
        listeners,
        Options::default(),
        async {
            let _ = stopped.await;
        },
    ));

    stage("fsync baseline");
    let mut fsync = raw_fsync(dir.path());
    let fsync_p50 = percentile(&mut fsync, 0.5);
    let fsync_p99 = percentile(&mut fsync, 0.99);

    stage("WriteTodos");
    // WriteTodos: a 4-item list where every call changes something, so each is
    // a real durable commit.
    let mut c = client(&url).await;
    let first = c
        .write_todos(proto::WriteTodosRequest {
            plan: "agent".into(),
            todos: (0..4)
                .map(|i| item("", &format!("step {i}"), "pending"))
                .collect(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<String> = first.todos.iter().map(|t| t.id.clone()).collect();
    let mut writes = Vec::with_capacity(WRITE_SAMPLES);
    for n in 0..WRITE_SAMPLES {
        let todos = (0..4)
            .map(|i| {
                let status = if i == n % 4 { "in_progress" } else { "pending" };
                item(&ids[i], &format!("step {i}"), status)
            })
            .collect();
        let start = Instant::now();
        c.write_todos(proto::WriteTodosRequest {
            plan: "agent".into(),
            todos,
            ..Default::default()
        })
        .await
        .unwrap();
        writes.push(start.elapsed());
    }
    let write_p50 = percentile(&mut writes, 0.5);

    stage("WriteTodos at the store");
    // The same writes at the store, without gRPC, to show where time goes.
    let ctx = todod_store::WriteContext::default();
    let mut store_writes = Vec::with_capacity(WRITE_SAMPLES);
    for n in 0..WRITE_SAMPLES {
        let items: Vec<todod_domain::todo_list::TodoItem> = (0..4)
            .map(|i| todod_domain::todo_list::TodoItem {
                id: Some(todod_domain::TaskId::parse("id", &ids[i]).unwrap()),
                content: format!("step {i}"),
                status: Some(if i == n % 4 {
                    todod_domain::Status::InProgress
                } else {
                    todod_domain::Status::Pending
                }),
                priority: None,
                depends_on: None,
                metadata: None,
            })
            .collect();
        let start = Instant::now();
        store.write_todos("agent", &items, &ctx).await.unwrap();
        store_writes.push(start.elapsed());
    }
    let store_write_p50 = percentile(&mut store_writes, 0.5);
    let store_write_p99 = percentile(&mut store_writes, 0.99);
    let write_p99 = percentile(&mut writes, 0.99);
    // Past the p99: where the commits that checkpoint the WAL sit.
    let write_p999 = percentile(&mut writes, 0.999);
    let write_max = percentile(&mut writes, 1.0);

    stage("WriteTodos that changes nothing");
    // The same call with a list that is already what the plan holds: the
    // same gRPC path, reconciliation and write transaction, but nothing to
    // commit, so no WAL write and no fsync. Beside the figures above it
    // splits a WriteTodos into its path and its durable commit.
    let unchanged: Vec<TodoItem> = (0..4)
        .map(|i| item(&ids[i], &format!("step {i}"), "pending"))
        .collect();
    let mut idle_writes = Vec::with_capacity(WRITE_SAMPLES);
    for n in 0..=WRITE_SAMPLES {
        let start = Instant::now();
        c.write_todos(proto::WriteTodosRequest {
            plan: "agent".into(),
            todos: unchanged.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
        // The first call sets the list to `unchanged`: a real commit.
        if n > 0 {
            idle_writes.push(start.elapsed());
        }
    }
    let idle_write_p50 = percentile(&mut idle_writes, 0.5);
    let idle_write_p99 = percentile(&mut idle_writes, 0.99);

    stage("one client's round trip");
    // A read from one client, one call at a time: what the gRPC path itself
    // costs a call, beside which the WriteTodos figures read.
    let mut trips = Vec::with_capacity(WRITE_SAMPLES);
    for _ in 0..WRITE_SAMPLES {
        let start = Instant::now();
        c.read_todos(proto::ReadTodosRequest {
            plan: "agent".into(),
        })
        .await
        .unwrap();
        trips.push(start.elapsed());
    }
    let trip_p50 = percentile(&mut trips, 0.5);
    let trip_p99 = percentile(&mut trips, 0.99);

    stage("ReadTodos");
    // ReadTodos throughput from several concurrent clients.
    let deadline = Instant::now() + Duration::from_secs(READ_SECONDS);
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let mut c = client(&url).await;
        readers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                c.read_todos(proto::ReadTodosRequest {
                    plan: "agent".into(),
                })
                .await
                .unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut reads = 0;
    for r in readers {
        reads += r.await.unwrap();
    }
    let reads_per_s = reads as f64 / READ_SECONDS as f64;

    stage("listing the 100k plan");
    // The 100k-task plan: every task, paged; and the status summary.
    let mut list_times = Vec::new();
    let mut full_times = Vec::new();
    let mut summary_times = Vec::new();
    for round in 0..10 {
        let view = if round % 2 == 0 { "basic" } else { "full" };
        let start = Instant::now();
        let mut token = String::new();
        let mut seen = 0;
        loop {
            let page = c
                .list_tasks(proto::ListTasksRequest {
                    plan: "big".into(),
                    page_size: 10_000,
                    page_token: token,
                    view: view.into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            seen += page.tasks.len();
            token = page.next_page_token;
            if token.is_empty() {
                break;
            }
        }
        assert_eq!(seen, BIG_PLAN);
        if view == "basic" {
            list_times.push(start.elapsed());
        } else {
            full_times.push(start.elapsed());
        }

        let start = Instant::now();
        c.list_plans(proto::ListPlansRequest {
            highlight_limit: 5,
            ..Default::default()
        })
        .await
        .unwrap();
        summary_times.push(start.elapsed());
    }
    let list_median = percentile(&mut list_times, 0.5);
    let full_median = percentile(&mut full_times, 0.5);

    stage("listing at the store");
    // The same listing at the store, without gRPC, to show where time goes.
    let mut store_times = Vec::new();
    let mut convert_times = Vec::new();
    let mut coding_times = Vec::new();
    let mut wire_bytes = 0;
    for _ in 0..5 {
        let start = Instant::now();
        let mut token = None;
        let mut converting = Duration::ZERO;
        let mut coding = Duration::ZERO;
        wire_bytes = 0;
        loop {
            let filter = todod_store::TaskFilter {
                plan: "big".into(),
                page_size: 10_000,
                page_token: token,
                detail: todod_store::Detail::Basic,
                ..Default::default()
            };
            let page = store.list_tasks(&filter).await.unwrap();
            let convert_start = Instant::now();
            let tasks = todod::api::convert::tasks(page.tasks);
            let response = proto::ListTasksResponse {
                tasks,
                ..Default::default()
            };
            std::hint::black_box(prost::Message::encoded_len(&response));
            converting += convert_start.elapsed();
            // What gRPC adds at least: encoding the page and decoding it on
            // the client's side.
            let coding_start = Instant::now();
            let bytes = prost::Message::encode_to_vec(&response);
            wire_bytes += bytes.len();
            std::hint::black_box(
                <proto::ListTasksResponse as prost::Message>::decode(bytes.as_slice()).unwrap(),
            );
            coding += coding_start.elapsed();
            token = page.next_page_token;
            if token.is_none() {
                break;
            }
        }
        store_times.push(start.elapsed() - converting - coding);
        convert_times.push(converting);
        coding_times.push(coding);
    }
    let store_median = percentile(&mut store_times, 0.5);
    let convert_median = percentile(&mut convert_times, 0.5);
    let coding_median = percentile(&mut coding_times, 0.5);
    let summary_median = percentile(&mut summary_times, 0.5);

    stage("stopping the server");
    let _ = stop.send(());
    serving.await.unwrap().unwrap();

    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let mut out = std::io::stdout().lock();
    writeln!(out, "| measure | result | target | verdict |").unwrap();
    writeln!(out, "|---|---|---|---|").unwrap();
    writeln!(
        out,
        "| raw fsync (4 KiB write + fdatasync), p50 / p99 | {} / {} | baseline | - |",
        ms(fsync_p50),
        ms(fsync_p99)
    )
    .unwrap();
    writeln!(
        out,
        "| WriteTodos, 4 items, p50 | {} | <= 1 ms | {} |",
        ms(write_p50),
        verdict(write_p50 <= Duration::from_millis(1))
    )
    .unwrap();
    writeln!(
        out,
        "| WriteTodos, 4 items, p99 | {} ({:.2}x fsync p99) | <= 2x fsync p99 | {} |",
        ms(write_p99),
        write_p99.as_secs_f64() / fsync_p99.as_secs_f64(),
        verdict(write_p99 <= fsync_p99 * 2)
    )
    .unwrap();
    writeln!(
        out,
        "| WriteTodos, 4 items, p99.9 / max (the commits that checkpoint the WAL) | {} / {} | - | - |",
        ms(write_p999),
        ms(write_max)
    )
    .unwrap();
    writeln!(
        out,
        "| WriteTodos at the store alone (no gRPC), p50 / p99 | {} / {} | - | - |",
        ms(store_write_p50),
        ms(store_write_p99)
    )
    .unwrap();
    writeln!(
        out,
        "| WriteTodos that changes nothing (no commit, no fsync), p50 / p99 | {} / {} | - | - |",
        ms(idle_write_p50),
        ms(idle_write_p99)
    )
    .unwrap();
    writeln!(
        out,
        "| ReadTodos, one client, one call at a time, p50 / p99 | {} / {} | - | - |",
        ms(trip_p50),
        ms(trip_p99)
    )
    .unwrap();
    writeln!(
        out,
        "| ReadTodos, {READERS} clients | {reads_per_s:.0} /s | >= 5,000 /s | {} |",
        verdict(reads_per_s >= 5000.0)
    )
    .unwrap();
    writeln!(
        out,
        "| ListTasks view=basic, all 100,000 tasks (pages of 10,000), median of 5 | {} | < 200 ms | {} |",
        ms(list_median),
        verdict(list_median < Duration::from_millis(200))
    )
    .unwrap();
    writeln!(
        out,
        "| ListTasks view=full (every field), same plan, median of 5 | {} | - | - |",
        ms(full_median)
    )
    .unwrap();
    writeln!(
        out,
        "| basic view: the store alone (SQLite + decode), median | {} | - | - |",
        ms(store_median)
    )
    .unwrap();
    writeln!(
        out,
        "| basic view: conversion to protobuf and sizing, median | {} | - | - |",
        ms(convert_median)
    )
    .unwrap();
    writeln!(
        out,
        "| basic view: protobuf encoding and decoding of the {:.1} MB, median | {} | - | - |",
        wire_bytes as f64 / 1e6,
        ms(coding_median)
    )
    .unwrap();
    writeln!(out, "| ListPlans with highlights (what `todoctl status` calls), 100k plan, median | {} | instant | - |", ms(summary_median)).unwrap();
}
