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

/// The fields that ask for token ids, and, per endpoint, how it was asked
/// or why not. Every request goes to whichever endpoint is least loaded,
/// with the same body: the endpoints are asked only when they all are,
/// the same way (a run's endpoints serve one model on one kind of server as
/// a rule); one that would refuse the fields, or could not say what it is
/// at the start, leaves them all unasked, and says so.
pub async fn asking(
    client: &InferenceClient,
    spec: &GenerationSpec,
) -> (Map<String, Value>, BTreeMap<String, String>) {
    let mut asked = BTreeMap::new();
    if spec.token_ids == TokenIds::Off {
        return (Map::new(), asked);
    }
    let force = spec.token_ids == TokenIds::On;
    let kinds = client.server_kinds(DETECT_WITHIN).await;
    let asks: Vec<_> = kinds
        .iter()
        .map(|(_, kind)| ask(kind, spec.api, spec.stream, force))
        .collect();
    let first = asks.first().and_then(|a| a.as_ref().ok());
    let alike = first.is_some() && asks.iter().all(|a| a.as_ref().ok() == first);
    let names: Vec<&str> = kinds.iter().map(|(_, k)| k.name()).collect();
    for ((endpoint, kind), ask) in kinds.iter().zip(&asks) {
        let how = match ask {
            Ok(_) if alike => format!("{}: asked", kind.name()),
            Ok(_) => format!(
                "{}: not asked: the endpoints are not all asked alike ({})",
                kind.name(),
                names.join(", ")
            ),
            Err(why) => format!("{}: not asked: {why}", kind.name()),
        };
        tracing::info!(%endpoint, token_ids = %how, "token ids");
        asked.insert(endpoint.clone(), how);
    }
    let fields = if alike { first.cloned().unwrap_or_default() } else { Map::new() };
    (fields, asked)
}
