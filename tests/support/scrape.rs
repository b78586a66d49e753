//! `/metrics` as Prometheus reads it: fetched over HTTP/1.1 and parsed by
//! Prometheus' own Python parser (`tests/parse_metrics.py`, in the venv
//! `scripts/mcp-client` builds), so a format error fails the test.
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use serde_json::Value;

/// One sample of a scrape.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: serde_json::Map<String, Value>,
    pub value: f64,
}

/// GET `path` on `addr`, with a bearer token if given: the status and body.
pub async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let client = reqwest::Client::builder().http1_only().build().unwrap();
    let mut request = client.get(format!("http://{addr}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("GET");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// Scrapes `addr`'s `/metrics` (on loopback: no token) and parses it.
pub async fn scrape(addr: SocketAddr) -> Vec<Sample> {
    let (status, text) = get(addr, "/metrics", None).await;
    assert_eq!(status, 200, "/metrics: {text}");
    parse(&text)
}

/// Parses an exposition with Prometheus' parser; panics on a format error.
pub fn parse(text: &str) -> Vec<Sample> {
    let python = crate::mcp_python();
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("parse_metrics.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the parser");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "Prometheus' parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    samples
        .into_iter()
        .map(|s| Sample {
            name: s["name"].as_str().unwrap().to_string(),
            labels: s["labels"].as_object().cloned().unwrap_or_default(),
            value: s["value"].as_f64().unwrap(),
        })
        .collect()
}

/// The sum of the samples named `name` whose labels include `labels`.
pub fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).and_then(Value::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// Whether any sample is named `name`.
pub fn has(samples: &[Sample], name: &str) -> bool {
    samples.iter().any(|s| s.name == name)
}
