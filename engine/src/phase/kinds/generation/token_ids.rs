//! Which request fields ask this run's servers for the token ids they
//! generate: each endpoint says what it is once, at the run's start, and is
//! asked its own way (`todod_inference::token_ids`).
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};
use todod_inference::token_ids::ask;
use todod_inference::InferenceClient;

use super::spec::{GenerationSpec, TokenIds};

/// How long an endpoint has to say what it is.
const DETECT_WITHIN: Duration = Duration::from_secs(10);

/// The fields that ask for token ids (the union of what the endpoints
/// need: a run's endpoints serve one model, on one kind of server as a
/// rule), and, per endpoint, how it was asked or why not.
pub async fn asking(
    client: &InferenceClient,
    spec: &GenerationSpec,
) -> (Map<String, Value>, BTreeMap<String, String>) {
    let mut fields = Map::new();
    let mut asked = BTreeMap::new();
    if spec.token_ids == TokenIds::Off {
        return (fields, asked);
    }
    let force = spec.token_ids == TokenIds::On;
    for (endpoint, kind) in client.server_kinds(DETECT_WITHIN).await {
        let how = match ask(&kind, spec.api, spec.stream, force) {
            Ok(ask) => {
                fields.extend(ask);
                format!("{}: asked", kind.name())
            }
            Err(why) => format!("{}: not asked: {why}", kind.name()),
        };
        tracing::info!(%endpoint, token_ids = %how, "token ids");
        asked.insert(endpoint, how);
    }
    (fields, asked)
}
