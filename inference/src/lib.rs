//! Talking to OpenAI-compatible inference servers: the client the phase
//! workers use. `retry` and `sse` are plain logic; `client` does the HTTP.
mod api;
mod api_key;
pub mod client;
pub mod endpoints;
pub mod retry;
pub mod server_watch;
pub mod sse;
pub mod token_ids;

pub use api_key::check_key_value;
pub use client::{
    Api, Completion, CompletionRequest, Failed, FunctionCall, InferenceClient, Limits, Outcome,
    RequestFields, RequestTemplate, ToolCall, Usage,
};
pub use retry::{Backoff, Failure};
pub use token_ids::ServerKind;
