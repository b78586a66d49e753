//! The deep probe: a server is ready, and stays so, only while
//! `/v1/models` answers and a one-token completion comes back. A live
//! `/health` proves nothing about the engine behind it (vLLM answers 200
//! with its engine dead, vLLM #7633).
use std::time::Duration;

use serde_json::{json, Value};

/// Asks `base` (`http://127.0.0.1:PORT/v1`) for its models, then for one
/// token of the first; `Err` says what did not answer, and how.
pub async fn deep(http: &reqwest::Client, base: &str, within: Duration) -> Result<(), String> {
    match tokio::time::timeout(within, ask(http, base)).await {
        Ok(answer) => answer,
        Err(_) => Err(format!(
            "no answer within {}",
            todod_proto::readable::duration(within.as_secs() as i64)
        )),
    }
}

async fn ask(http: &reqwest::Client, base: &str) -> Result<(), String> {
    let models: Value = http
        .get(format!("{base}/models"))
        .send()
        .await
        .map_err(|e| format!("GET /v1/models: {}", plain(&e)))?
        .error_for_status()
        .map_err(|e| format!("GET /v1/models: {}", plain(&e)))?
        .json()
        .await
        .map_err(|e| format!("GET /v1/models: not JSON: {}", plain(&e)))?;
    let model = models["data"][0]["id"]
        .as_str()
        .ok_or("GET /v1/models: no model listed")?
        .to_string();
    let body = json!({"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0});
    let response = http
        .post(format!("{base}/completions"))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("a one-token completion: {}", plain(&e)))?;
    let status = response.status();
    let answer: Value = response
        .json()
        .await
        .map_err(|e| format!("a one-token completion: {status}, not JSON: {}", plain(&e)))?;
    if !status.is_success() || answer["choices"].as_array().is_none_or(Vec::is_empty) {
        let said: String = answer.to_string().chars().take(300).collect();
        return Err(format!("a one-token completion: {status}: {said}"));
    }
    Ok(())
}

/// reqwest's error with its causes.
fn plain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// The client the probes go through: no proxy (the server is on this
/// machine), its own connections.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(1)
        .build()
        .unwrap_or_default()
}
