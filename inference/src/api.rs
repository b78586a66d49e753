//! Which of the two OpenAI-compatible APIs a request uses.

/// `/v1/chat/completions` or `/v1/completions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Chat,
    Completions,
}
