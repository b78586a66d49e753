//! What mutating calls answer, and the client request ids that make them
//! safe to retry: the id is read and checked here, the request is
//! fingerprinted without it, and an answer is either converted from what
//! the store just did or decoded from the bytes it kept for the first call
//! with that id (`store::request_ids`).
use prost::Message;
use sha2::{Digest, Sha256};
use tonic::Status;

use super::{convert, ToStatus};
use crate::proto;
use todod_domain::Error as Rule;
use todod_store::{
    AnswerCodec, AppliedPipeline, Once, PlanView, RequestKey, TaskView, WrittenTodos,
};

/// The longest request id taken (a UUID is 36 characters).
const MAX_REQUEST_ID: usize = 128;

/// The request key of a call: `None` when the client sent no id.
pub fn request_key<T: Message + Clone>(
    method: &'static str,
    request_id: &str,
    request: &T,
    clear: impl FnOnce(&mut T),
) -> Result<Option<RequestKey>, Status> {
    if request_id.is_empty() {
        return Ok(None);
    }
    if request_id.len() > MAX_REQUEST_ID || !request_id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Rule::invalid(
            "request_id",
            format!("must be at most {MAX_REQUEST_ID} printable ASCII characters (a UUID, say)"),
        )
        .to_status());
    }
    let mut without = request.clone();
    clear(&mut without);
    let digest = Sha256::digest(without.encode_to_vec());
    Ok(Some(RequestKey {
        id: request_id.to_string(),
        method,
        fingerprint: digest.iter().map(|b| format!("{b:02x}")).collect(),
        codec: &Protobuf,
    }))
}

/// The answer to a call: converted from a fresh outcome, or the first
/// call's answer decoded.
pub fn answer<T, R: Message + Default>(
    once: Once<T>,
    convert: impl FnOnce(T) -> R,
) -> Result<R, Status> {
    match once {
        Once::Fresh(value) => Ok(convert(value)),
        Once::Replayed(bytes) => decode(&bytes),
    }
}

/// A kept answer, decoded.
pub fn decode<R: Message + Default>(bytes: &[u8]) -> Result<R, Status> {
    R::decode(bytes).map_err(|e| {
        tracing::error!(error = %e, "a kept answer does not decode");
        Status::internal("internal error; see the daemon's log")
    })
}

pub fn written_todos(written: WrittenTodos) -> proto::WriteTodosResponse {
    proto::WriteTodosResponse {
        plan: Some(convert::plan(written.plan)),
        todos: convert::tasks(written.todos),
        created: written.created.iter().map(ToString::to_string).collect(),
        archived: written.archived.iter().map(ToString::to_string).collect(),
    }
}

pub fn applied_pipeline(applied: AppliedPipeline) -> proto::ApplyPipelineResponse {
    proto::ApplyPipelineResponse {
        plan: applied.plan.map(convert::plan),
        steps: applied
            .steps
            .into_iter()
            .map(|s| proto::PipelineStep {
                step: s.step,
                action: s.action.as_str().to_string(),
                changed: s.changed,
                task: s.task.map(convert::task),
                spec_json: s.spec,
            })
            .collect(),
    }
}

/// The answers a store keeps for replays: the protobuf responses the first
/// call got.
struct Protobuf;

impl AnswerCodec for Protobuf {
    fn plan(&self, plan: &PlanView) -> Vec<u8> {
        convert::plan(plan.clone()).encode_to_vec()
    }

    fn task(&self, task: &TaskView) -> Vec<u8> {
        convert::task(task.clone()).encode_to_vec()
    }

    fn written_todos(&self, written: &WrittenTodos) -> Vec<u8> {
        written_todos(written.clone()).encode_to_vec()
    }

    fn applied_pipeline(&self, applied: &AppliedPipeline) -> Vec<u8> {
        applied_pipeline(applied.clone()).encode_to_vec()
    }
}
