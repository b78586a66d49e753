//! The phase table is the one list of kinds: every kind in it is one the
//! store admits (and the store admits nothing else), one `ListKinds` names,
//! a step of the plan file and its schema (when it has one), a kind
//! `todoctl status` shows, and one the MCP server's instructions name.
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};
use sqlx::{Connection, Row};
use todod_e2e::cli::Env;
use todod_e2e::fixtures::fixture;
use todod_e2e::ClosedPort;
use todod_engine::phase::kinds::TABLE;

fn plan_file(out: &Path, endpoint: &str) -> String {
    format!(
        r#"
plan = "every-kind"
output_dir = "{out}"

[model]
name = "m"
endpoints = ["{endpoint}"]
dir = "{dir}"

[prompts]
path = "{prompts}"

[filter]
exact_duplicates = true
"#,
        out = out.display(),
        endpoint = endpoint,
        dir = fixture("smollm2").display(),
        prompts = fixture("prompts/sharegpt.jsonl").display(),
    )
}

/// The instructions `todoctl mcp` gives an MCP client when it connects.
fn mcp_instructions(env: &Env) -> String {
    let mut child = env
        .cmd(&["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("todoctl mcp");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "kinds-test", "version": "1"}}});
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{initialize}").unwrap();
    stdin.flush().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let answer: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    answer["result"]["instructions"]
        .as_str()
        .unwrap_or_else(|| panic!("no instructions: {answer}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_the_table_is_known_everywhere() {
    let env = Env::start();
    let table: Vec<&str> = TABLE.iter().map(|k| k.name()).collect();
    assert!(table.contains(&"filter"), "{table:?}");

    // ListKinds: todo, then the table, in its order.
    let listed = env.json(&["kinds"]);
    let names: Vec<&str> = listed["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    let mut expected = vec!["todo"];
    expected.extend(&table);
    assert_eq!(names, expected);
    let text = env.ok(&["kinds"]);
    for name in &table {
        assert!(text.contains(name), "{text}");
    }

    // The stored kind check: the daemon's store admits exactly these.
    if todod_e2e::sqlite_only("reads the daemon's SQLite file") {
        return;
    }
    let db = env.daemon.state_dir.join("todod.db");
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=ro", db.display()))
        .await
        .unwrap();
    let stored: Vec<String> = sqlx::query("SELECT name FROM kinds ORDER BY name")
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect();
    let mut sorted: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    sorted.sort();
    assert_eq!(stored, sorted);
    drop(conn);

    // The plan file's schema: each kind with a step has its section.
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/pipeline.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let phases = &schema["properties"]["phases"]["items"]["enum"];
    for kind in TABLE {
        if let Some(step) = kind.step() {
            assert!(
                phases.as_array().unwrap().contains(&json!(step.section)),
                "{}",
                step.section
            );
            assert!(schema["properties"][step.section].is_object());
        }
    }

    // status: a plan with a task of every phase kind shows each.
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("plan.toml");
    let endpoint = ClosedPort::new();
    std::fs::write(&file, plan_file(&out.path().join("out"), &endpoint.url())).unwrap();
    env.ok(&["plan", "apply", file.to_str().unwrap()]);
    let status = env.ok(&["status", "every-kind"]);
    for name in &table {
        assert!(
            status.contains(&format!(" {name} ")),
            "{name} is not in the status:\n{status}"
        );
    }

    // The MCP server's instructions name every phase kind.
    let instructions = mcp_instructions(&env);
    for name in &table {
        assert!(instructions.contains(name), "{name}: {instructions}");
    }
}

/// A kind the daemon does not know is refused by the API and, written
/// behind its back, by the store itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_kind_is_refused_by_the_api_and_by_the_store() {
    let env = Env::start();
    let run = env.run(&["add", "-p", "p", "--kind", "baking", "bake bread"]);
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains("unknown kind \"baking\"") && run.stderr.contains("filter"),
        "{}",
        run.stderr
    );
    let dir = tempfile::tempdir().unwrap();
    // SQLite's file, written to directly below.
    let store = todod_store::Store::open(&dir.path().join("t.db"))
        .await
        .unwrap();
    store.close().await;
    let mut conn =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}", dir.path().join("t.db").display()))
            .await
            .unwrap();
    sqlx::query("INSERT INTO plans (name, created_at, updated_at) VALUES ('p', 0, 0)")
        .execute(&mut conn)
        .await
        .unwrap();
    let insert = |kind: &'static str| {
        sqlx::query(
            "INSERT INTO tasks (plan_id, content, status, priority, kind, position, created_at, \
             updated_at) VALUES (1, 'x', 'pending', 'medium', ?, 1, 0, 0)",
        )
        .bind(kind)
    };
    insert("todo").execute(&mut conn).await.unwrap();
    let refused = insert("baking").execute(&mut conn).await.unwrap_err();
    assert!(
        refused.to_string().contains("unknown task kind"),
        "{refused}"
    );
}
