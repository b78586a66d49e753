//! A client for OpenAI-compatible servers (SGLang, vLLM, llama.cpp, OpenAI
//! itself): `/v1/chat/completions` and `/v1/completions`, streamed or not, with
//! a connect timeout, a total deadline, an idle timeout between stream chunks,
//! TCP keepalive, retries with backoff, and several endpoints.
use std::fmt;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::endpoints::Endpoints;
use super::retry::{unit_random, Backoff, Failure};
use super::sse::{SseParser, SsePayload};
use super::token_ids::ServerKind;

pub use super::api::Api;

/// What to send: the input, and everything else passed through as is
/// (sampling parameters, `max_tokens`, `chat_template_kwargs`, ...).
#[derive(Debug, Clone)]
pub struct CompletionRequest {
    pub api: Api,
    pub model: String,
    /// `messages` (an array) for chat, `prompt` (a string) for completions.
    pub input: Value,
    pub params: Map<String, Value>,
    pub stream: bool,
}

/// What every request of a run shares, serialized once: the body up to the
/// input (`{...params, "model", "stream"`), so that a request costs one copy
/// of its input and no JSON tree.
#[derive(Debug, Clone)]
pub struct RequestTemplate {
    pub api: Api,
    pub stream: bool,
    head: Vec<u8>,
    /// The body's fields, for a request whose own fields replace some.
    fields: Map<String, Value>,
}

/// A request's own body fields beside its input (a prompt's `tools`,
/// `tool_choice`, ...), as the JSON text it came with.
pub type RequestFields = [(&'static str, Box<RawValue>)];

impl RequestTemplate {
    pub fn new(
        api: Api,
        model: &str,
        params: &Map<String, Value>,
        stream: bool,
    ) -> RequestTemplate {
        let mut body = params.clone();
        body.insert("model".into(), Value::String(model.to_string()));
        body.insert("stream".into(), Value::Bool(stream));
        if stream && !body.contains_key("stream_options") {
            // Ask for the usage chunk at the end of the stream.
            body.insert(
                "stream_options".into(),
                serde_json::json!({ "include_usage": true }),
            );
        }
        body.remove(Self::input_key(api));
        let mut head = serde_json::to_vec(&body).expect("a map serializes");
        head.pop(); // the closing brace: the input goes last
        RequestTemplate {
            api,
            stream,
            head,
            fields: body,
        }
    }

    fn input_key(api: Api) -> &'static str {
        match api {
            Api::Chat => "messages",
            Api::Completions => "prompt",
        }
    }

    /// The body for one input, given as its JSON text, with the request's
    /// own `fields` (which win over the run's parameters of the same name).
    pub fn body(&self, input_json: &str, fields: &RequestFields) -> Vec<u8> {
        let input_key = Self::input_key(self.api);
        if fields.iter().any(|(k, _)| self.fields.contains_key(*k)) {
            // Rare: a prompt's own field replaces a run-wide one. The head
            // is made again without it, so that no key is given twice.
            let mut shared = self.fields.clone();
            for (key, _) in fields {
                shared.remove(*key);
            }
            let mut head = serde_json::to_vec(&shared).expect("a map serializes");
            head.pop();
            return Self::assemble(&head, fields, input_key, input_json);
        }
        Self::assemble(&self.head, fields, input_key, input_json)
    }

    fn assemble(head: &[u8], fields: &RequestFields, input_key: &str, input_json: &str) -> Vec<u8> {
        let extra: usize = fields
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum();
        let mut body =
            Vec::with_capacity(head.len() + extra + input_json.len() + input_key.len() + 5);
        body.extend_from_slice(head);
        for (key, raw) in fields {
            body.extend_from_slice(format!(",\"{key}\":").as_bytes());
            body.extend_from_slice(raw.get().as_bytes());
        }
        body.extend_from_slice(format!(",\"{input_key}\":").as_bytes());
        body.extend_from_slice(input_json.as_bytes());
        body.push(b'}');
        body
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    /// What some servers (vLLM, OpenAI) say of the completion's tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
    /// What some servers (llama.cpp, vLLM, OpenAI) say of the prompt's
    /// tokens: how many came from their prefix cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PromptTokensDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CompletionTokensDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    pub fn reasoning_tokens(&self) -> Option<u64> {
        self.completion_tokens_details
            .as_ref()
            .and_then(|d| d.reasoning_tokens)
    }

    /// The prompt's tokens the server took from its prefix cache, if it
    /// says.
    pub fn cached_tokens(&self) -> Option<u64> {
        self.prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
    }
}

/// A finished completion. Reasoning (`reasoning_content` or `reasoning`) is
/// kept apart from the content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completion {
    pub content: String,
    pub reasoning: Option<String>,
    /// The calls an answer makes, as a client SDK assembles them (a
    /// stream's deltas put together by index).
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: String,
    pub usage: Option<Usage>,
    pub model: String,
    /// For a stream: from sending the request to its first content (or
    /// reasoning) piece, the time to first token.
    pub first_token: Option<Duration>,
    /// The ids the model generated, as the server sampled them (before it
    /// parsed reasoning and tool calls out of their text), when it returns
    /// them: vLLM's and SGLang's `token_ids` (SGLang's
    /// `response_token_ids` since August 2026), llama.cpp's log
    /// probabilities' `id`s. See `token_ids`.
    pub token_ids: Option<Vec<u32>>,
    /// The ids of the prompt as the server rendered and tokenized it, when
    /// it returns them (vLLM, SGLang).
    pub prompt_token_ids: Option<Vec<u32>>,
    /// The server returned fewer ids than the tokens it says it generated,
    /// so none are kept (`token_ids` is `None`): llama.cpp's server leaves
    /// out the entry of a token that ends inside a character, and in a
    /// stream those of tokens its parser holds back.
    pub token_ids_incomplete: bool,
}

impl Completion {
    fn with_whole_ids(mut self, streamed: bool) -> Completion {
        self.keep_only_whole_ids(streamed);
        self
    }

    /// Keeps the generated ids only when they are all of them: as many as
    /// the usage's completion tokens, or, in a stream that stopped, one
    /// fewer (llama.cpp sends no chunk for the end-of-turn token it stopped
    /// at). Without a usage there is nothing to count them against.
    fn keep_only_whole_ids(&mut self, streamed: bool) {
        let Some(ids) = &self.token_ids else {
            return;
        };
        let Some(generated) = self.usage.as_ref().map(|u| u.completion_tokens) else {
            return;
        };
        let n = ids.len() as u64;
        let whole = n == generated
            || (streamed && self.finish_reason == "stop" && n + 1 == generated && n > 0);
        if !whole {
            self.token_ids = None;
            self.token_ids_incomplete = true;
        }
    }
}

/// One tool call of an answer: `{id, type, function: {name, arguments}}`,
/// the arguments as the JSON text the model wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// A completion and how it was obtained.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub completion: Completion,
    pub endpoint: String,
    pub attempts: u32,
    pub latency: Duration,
}

/// The last failure once no attempt is left (or the failure is final).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{failure} (after {attempts} attempts, last at {endpoint})")]
pub struct Failed {
    pub failure: Failure,
    pub attempts: u32,
    pub endpoint: String,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub connect_timeout: Duration,
    /// The whole attempt, from sending to the last byte.
    pub deadline: Duration,
    /// The longest silence allowed between two chunks of a stream.
    pub idle_timeout: Duration,
    pub backoff: Backoff,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connect_timeout: Duration::from_secs(10),
            deadline: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(120),
            backoff: Backoff::default(),
        }
    }
}

pub struct InferenceClient {
    http: reqwest::Client,
    endpoints: Endpoints,
    /// `Bearer <key>`, read from the environment at construction; marked
    /// sensitive, never stored elsewhere, never printed (see the Debug impl).
    authorization: Option<reqwest::header::HeaderValue>,
    limits: Limits,
    /// Where each attempt is counted for `/metrics`, if anywhere.
    metrics: Option<todod_telemetry::RequestMetrics>,
}

impl fmt::Debug for InferenceClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InferenceClient")
            .field("endpoints", &self.endpoints)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .field("limits", &self.limits)
            .finish()
    }
}

impl InferenceClient {
    /// `api_key_env` names the environment variable holding the key, if any.
    pub fn new(
        endpoints: &[String],
        api_key_env: Option<&str>,
        limits: Limits,
    ) -> Result<InferenceClient, String> {
        let key = match api_key_env.filter(|name| !name.is_empty()) {
            None => None,
            Some(name) => Some((
                name,
                std::env::var(name).map_err(|_| {
                    format!("the environment variable {name} (the API key) is not set")
                })?,
            )),
        };
        InferenceClient::with_key(
            endpoints,
            key.as_ref().map(|(n, k)| (*n, k.as_str())),
            limits,
        )
    }

    /// Like `new`, with the key given as (the variable it came from, its value).
    pub fn with_key(
        endpoints: &[String],
        key: Option<(&str, &str)>,
        limits: Limits,
    ) -> Result<InferenceClient, String> {
        let endpoints = Endpoints::new(endpoints)?;
        let authorization = match key {
            None => None,
            Some((name, key)) => {
                // A key that cannot be a header fails the run at once, rather
                // than every request with "builder error".
                super::check_key_value(name, key)?;
                let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
                    .map_err(|_| format!("{name} cannot go in an HTTP header"))?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        // todod retries by its own policy (backoff, Retry-After, setting
        // endpoints aside); an inference API never redirects.
        let http = reqwest::Client::builder()
            .connect_timeout(limits.connect_timeout)
            .tcp_keepalive(Some(Duration::from_secs(30)))
            // Servers close idle keep-alive connections after a few seconds
            // (uvicorn under vLLM and SGLang, and llama.cpp's server: 5 s).
            // A request sent on one as it closes fails for nothing, so the
            // client lets go of idle connections first.
            .pool_idle_timeout(Duration::from_secs(3))
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(InferenceClient {
            http,
            endpoints,
            authorization,
            limits,
            metrics: None,
        })
    }

    /// Counts every attempt, its latencies and its retries in `metrics`.
    pub fn with_metrics(mut self, metrics: todod_telemetry::RequestMetrics) -> InferenceClient {
        self.metrics = Some(metrics);
        self
    }

    /// What each endpoint says it is (`GET /v1/models`, once, with the
    /// run's key and connect timeout, within `limit`): which way it is asked
    /// for token ids. A server that cannot be asked is `Other`, with why.
    pub async fn server_kinds(&self, limit: Duration) -> Vec<(String, ServerKind)> {
        // All at once: a server that does not answer costs the run's start
        // `limit` once, not once per endpoint.
        let asks = self.endpoints.urls().map(|url| async move {
            let mut get = self
                .http
                .get(super::token_ids::models_url(url))
                .timeout(limit);
            if let Some(value) = &self.authorization {
                get = get.header(reqwest::header::AUTHORIZATION, value.clone());
            }
            let kind = match get.send().await {
                Ok(response) if response.status().is_success() => {
                    match response.json::<Value>().await {
                        Ok(answer) => ServerKind::from_models(&answer),
                        Err(e) => ServerKind::Other(format!("/v1/models is not JSON: {e}")),
                    }
                }
                Ok(response) => {
                    ServerKind::Other(format!("/v1/models answered {}", response.status()))
                }
                Err(e) => ServerKind::Other(format!("/v1/models: {e}")),
            };
            (url.to_string(), kind)
        });
        futures::future::join_all(asks).await
    }

    /// Sends `request`, retrying as `Limits::backoff` allows, on whichever
    /// endpoint is least loaded each time.
    pub async fn complete(&self, request: &CompletionRequest) -> Result<Outcome, Failed> {
        let template =
            RequestTemplate::new(request.api, &request.model, &request.params, request.stream);
        let input = serde_json::to_string(&request.input).expect("JSON serializes");
        self.complete_with(&template, &input, &[]).await
    }

    /// Sends the request `template` makes of `input_json` (the messages
    /// array or the prompt string, as JSON text) and the request's own
    /// `fields`.
    pub async fn complete_with(
        &self,
        template: &RequestTemplate,
        input_json: &str,
        fields: &RequestFields,
    ) -> Result<Outcome, Failed> {
        let body = bytes::Bytes::from(template.body(input_json, fields));
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let lease = self.endpoints.acquire();
            let in_flight = self.metrics.as_ref().map(|m| m.started());
            let sent = Instant::now();
            let answer = self
                .attempt(lease.target(template.api), template, body.clone())
                .await;
            drop(in_flight);
            if let Some(metrics) = &self.metrics {
                match &answer {
                    Ok(c) => metrics.attempt(
                        todod_telemetry::Outcome::ok,
                        sent.elapsed(),
                        c.first_token,
                        c.usage.as_ref().map(|u| u.completion_tokens),
                    ),
                    Err(failure) => metrics.attempt(failure.class(), sent.elapsed(), None, None),
                }
            }
            match answer {
                Ok(completion) => {
                    lease.succeeded();
                    return Ok(Outcome {
                        completion,
                        endpoint: lease.url().to_string(),
                        attempts: attempt,
                        latency: started.elapsed(),
                    });
                }
                Err(failure) => {
                    lease.failed(&failure);
                    let endpoint = lease.url().to_string();
                    drop(lease);
                    let backoff = self.limits.backoff;
                    match backoff.next_delay(attempt, &failure, unit_random()) {
                        Some(wait) => {
                            tracing::debug!(%endpoint, attempt, %failure, ?wait, "retrying");
                            if let Some(metrics) = &self.metrics {
                                metrics.retried();
                            }
                            tokio::time::sleep(wait).await;
                        }
                        None => {
                            return Err(Failed {
                                failure,
                                attempts: attempt,
                                endpoint,
                            })
                        }
                    }
                }
            }
        }
    }

    async fn attempt(
        &self,
        url: &reqwest::Url,
        template: &RequestTemplate,
        body: bytes::Bytes,
    ) -> Result<Completion, Failure> {
        let deadline = tokio::time::Instant::now() + self.limits.deadline;
        let sent = Instant::now();
        // Built again for a second sending rather than cloned ahead for
        // one that almost never happens: a clone per request (its URL, its
        // headers) showed at 16k requests in flight.
        let request = |body: bytes::Bytes| {
            let mut send = self
                .http
                .post(url.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
            if let Some(value) = &self.authorization {
                send = send.header(reqwest::header::AUTHORIZATION, value.clone());
            }
            send
        };
        let mut response = tokio::time::timeout_at(deadline, request(body.clone()).send())
            .await
            .map_err(|_| Failure::Timeout { which: "deadline" })?;
        // Some servers close a kept-alive connection after a streamed
        // answer without saying so (llama.cpp's server does, every time); a
        // request sent on it then dies before any answer. That request never
        // reached the model, so it goes once more on a fresh connection,
        // not counted as an attempt.
        // Only a failure right after sending is that: a request that died
        // later (a server that crashed mid-answer) may have been worked on,
        // and goes by the retry policy like any other.
        let mut sent = sent;
        if let Err(error) = &response {
            if closed_before_answer(error) && sent.elapsed() < STALE_CONNECTION_WINDOW {
                tracing::debug!(%url, "the server had closed the connection; sending again");
                sent = Instant::now();
                response = tokio::time::timeout_at(deadline, request(body).send())
                    .await
                    .map_err(|_| Failure::Timeout { which: "deadline" })?;
            }
        }
        let response = response.map_err(transport_failure)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let text = tokio::time::timeout_at(deadline, response.text())
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            return Err(Failure::Status {
                code: status.as_u16(),
                message: server_message(&text),
                retry_after,
            });
        }
        if template.stream {
            self.read_stream(response, template.api, deadline, sent)
                .await
        } else {
            let bytes = tokio::time::timeout_at(deadline, response.bytes())
                .await
                .map_err(|_| Failure::Timeout { which: "deadline" })?
                .map_err(transport_failure)?;
            parse_whole(&bytes, template.api)
        }
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        api: Api,
        deadline: tokio::time::Instant,
        sent: Instant,
    ) -> Result<Completion, Failure> {
        let mut chunks = response.bytes_stream();
        let mut parser = SseParser::default();
        let mut acc = StreamAccumulator {
            sent,
            ..StreamAccumulator::default()
        };
        // One timer for the whole stream, set for the idle limit or the
        // deadline, whichever comes first, and moved on only when it fires
        // before its time: a server sends an event per token, and a timer
        // put into the wheel and taken out again per event was a few
        // percent of the daemon's CPU at 16k streams.
        let idle = self.limits.idle_timeout;
        let limit = |last: tokio::time::Instant| {
            let at = last + idle;
            if at < deadline {
                (at, "idle")
            } else {
                (deadline, "deadline")
            }
        };
        let mut last = tokio::time::Instant::now();
        let timer = tokio::time::sleep_until(limit(last).0);
        tokio::pin!(timer);
        loop {
            let next = tokio::select! {
                biased;
                next = chunks.next() => next,
                () = &mut timer => {
                    let (at, which) = limit(last);
                    if at <= tokio::time::Instant::now() {
                        return Err(Failure::Timeout { which });
                    }
                    timer.as_mut().reset(at);
                    continue;
                }
            };
            last = tokio::time::Instant::now();
            match next {
                Some(chunk) => {
                    let chunk = chunk.map_err(transport_failure)?;
                    let done =
                        parser.feed_each(&chunk, Failure::Malformed, |p| acc.take(p, api))?;
                    if done {
                        finish_body(&mut chunks).await;
                        return acc.finish();
                    }
                }
                None => {
                    // The body ended; a last event without its blank line counts.
                    if let Some(event) = parser.finish() {
                        if acc.take(event, api)? {
                            return acc.finish();
                        }
                    }
                    return Err(Failure::Incomplete(
                        "the stream ended without [DONE]".into(),
                    ));
                }
            }
        }
    }
}

/// Reads what follows `[DONE]` to the body's end, briefly: a connection
/// whose response body is dropped unread is closed, not pooled, so without
/// this every streamed request would open a new connection (a handshake
/// more per request, and thousands of sockets in TIME_WAIT at high
/// concurrency). The end (the last chunk of a chunked body) follows `[DONE]`
/// at once on every server seen; one that sends more, or waits, loses only
/// its connection.
async fn finish_body<S, E>(chunks: &mut S)
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
{
    const AFTER_DONE: Duration = Duration::from_millis(100);
    const MOST_BYTES: usize = 64 * 1024;
    let _ = tokio::time::timeout(AFTER_DONE, async {
        let mut read = 0;
        while let Some(Ok(chunk)) = chunks.next().await {
            read += chunk.len();
            if read > MOST_BYTES {
                break;
            }
        }
    })
    .await;
}

/// How soon after sending a dropped request counts as sent on a connection
/// the server had already closed.
const STALE_CONNECTION_WINDOW: Duration = Duration::from_millis(250);

/// A request that failed on a connection the server had already closed:
/// sent, and no byte of an answer came back.
fn closed_before_answer(error: &reqwest::Error) -> bool {
    if error.is_connect() || error.is_timeout() || !error.is_request() {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(hyper) = e.downcast_ref::<hyper::Error>() {
            return hyper.is_incomplete_message() || hyper.is_canceled();
        }
        source = e.source();
    }
    false
}

fn transport_failure(error: reqwest::Error) -> Failure {
    if error.is_timeout() {
        Failure::Timeout { which: "connect" }
    } else if error.is_connect() {
        Failure::Connect(error.to_string())
    } else if error.is_decode() || error.is_body() {
        Failure::Incomplete(format!("the body was cut: {error}"))
    } else {
        Failure::Connect(error.to_string())
    }
}

/// The server's own words: `{"error": {"message": ...}}`, else the text, cut.
fn server_message(text: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("detail"))
            .or_else(|| v.get("error"))
            .and_then(Value::as_str)
    });
    let message = message.unwrap_or(text).trim();
    match message.char_indices().nth(500) {
        Some((cut, _)) => format!("{}...", &message[..cut]),
        None => message.to_string(),
    }
}

/// The parts of an answer todod reads, borrowed from its bytes where they
/// need no unescaping. Anything else in the answer is skipped unparsed.
mod wire {
    use std::borrow::Cow;

    use serde::Deserialize;
    use serde_json::value::RawValue;

    use super::Usage;

    /// `#[serde(borrow)]` borrows a bare `Cow<str>` but not one inside an
    /// `Option`: that one is always copied. A stream sends its text (and the
    /// model's name) once per token, so each would be an allocation.
    fn borrowed<'de: 'a, 'a, D>(d: D) -> Result<Option<Cow<'a, str>>, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        #[derive(Deserialize)]
        struct Borrowed<'a>(#[serde(borrow)] Cow<'a, str>);
        Ok(Option::<Borrowed<'a>>::deserialize(d)?.map(|b| b.0))
    }

    #[derive(Deserialize, Default)]
    pub struct Text<'a> {
        #[serde(borrow, default, deserialize_with = "borrowed")]
        pub content: Option<Cow<'a, str>>,
        #[serde(borrow, default, deserialize_with = "borrowed")]
        pub reasoning_content: Option<Cow<'a, str>>,
        #[serde(borrow, default, deserialize_with = "borrowed")]
        pub reasoning: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub tool_calls: Option<Vec<Call<'a>>>,
    }

    /// A tool call, whole or a stream's delta of one.
    #[derive(Deserialize, Default)]
    pub struct Call<'a> {
        #[serde(default)]
        pub index: Option<usize>,
        #[serde(borrow, default, deserialize_with = "borrowed")]
        pub id: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "type", deserialize_with = "borrowed")]
        pub kind: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub function: Option<Function<'a>>,
    }

    #[derive(Deserialize, Default)]
    pub struct Function<'a> {
        #[serde(borrow, default, deserialize_with = "borrowed")]
        pub name: Option<Cow<'a, str>>,
        /// Text as the API sends it; an object from a lenient server.
        #[serde(borrow, default)]
        pub arguments: Option<&'a RawValue>,
    }

    impl Function<'_> {
        /// The arguments' text: a JSON string's value, or other JSON as it was.
        pub fn arguments(&self) -> String {
            match self.arguments {
                None => String::new(),
                Some(raw) => match serde_json::from_str::<Cow<str>>(raw.get()) {
                    Ok(text) => text.into_owned(),
                    Err(_) if raw.get() == "null" => String::new(),
                    Err(_) => raw.get().to_string(),
                },
            }
        }
    }

    #[derive(Deserialize)]
    pub struct Choice<'a> {
        /// A whole answer's message.
        #[serde(borrow, default)]
        pub message: Option<Text<'a>>,
        /// A stream chunk's delta.
        #[serde(borrow, default)]
        pub delta: Option<Text<'a>>,
        /// Completions (both whole and streamed).
        #[serde(borrow, default, deserialize_with = "borrowed")]
        pub text: Option<Cow<'a, str>>,
        #[serde(borrow, default, deserialize_with = "borrowed")]
        pub finish_reason: Option<Cow<'a, str>>,
        /// The generated ids (a stream chunk's own): vLLM's `token_ids`,
        /// SGLang's `token_ids`, renamed `response_token_ids` in its chat
        /// answers (sgl-project/sglang PR #35225).
        #[serde(default)]
        pub token_ids: Option<Vec<u32>>,
        #[serde(default)]
        pub response_token_ids: Option<Vec<u32>>,
        /// SGLang puts the prompt's ids in each choice.
        #[serde(default)]
        pub prompt_token_ids: Option<Vec<u32>>,
        /// llama.cpp's server gives each generated token's id in its log
        /// probabilities (`logprobs.content[].id`).
        #[serde(default)]
        pub logprobs: Option<LogProbs>,
    }

    #[derive(Deserialize)]
    pub struct LogProbs {
        #[serde(default)]
        pub content: Option<Vec<TokenLogProb>>,
    }

    #[derive(Deserialize)]
    pub struct TokenLogProb {
        #[serde(default)]
        pub id: Option<u32>,
    }

    impl Choice<'_> {
        /// The generated ids this choice carries, if it carries them: its
        /// `token_ids`, or the ids of its log probabilities when every
        /// entry has one (vLLM's entries have none).
        pub fn generated_ids(&self) -> Option<Vec<u32>> {
            if let Some(ids) = self.response_token_ids.as_ref().or(self.token_ids.as_ref()) {
                return Some(ids.clone());
            }
            let entries = self.logprobs.as_ref()?.content.as_ref()?;
            entries.iter().map(|e| e.id).collect()
        }
    }

    #[derive(Deserialize)]
    pub struct Answer<'a> {
        #[serde(borrow, default, deserialize_with = "borrowed")]
        pub model: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub choices: Option<Vec<Choice<'a>>>,
        #[serde(default)]
        pub usage: Option<Usage>,
        /// vLLM puts the prompt's ids beside the choices (a stream: in its
        /// first chunk).
        #[serde(default)]
        pub prompt_token_ids: Option<Vec<u32>>,
        /// An error object some servers put in a stream.
        #[serde(borrow, default)]
        pub error: Option<&'a RawValue>,
    }

    impl Text<'_> {
        pub fn reasoning(&self) -> Option<&str> {
            self.reasoning_content
                .as_deref()
                .or(self.reasoning.as_deref())
        }
    }
}

/// The content and reasoning of a choice, for `api`.
fn texts<'c>(
    choice: &'c wire::Choice<'_>,
    api: Api,
    whole: bool,
) -> (Option<&'c str>, Option<&'c str>) {
    match api {
        Api::Chat => {
            let text = if whole {
                &choice.message
            } else {
                &choice.delta
            };
            match text {
                Some(t) => (t.content.as_deref(), t.reasoning()),
                None => (None, None),
            }
        }
        Api::Completions => (choice.text.as_deref(), None),
    }
}

/// A non-streamed answer.
fn parse_whole(bytes: &[u8], api: Api) -> Result<Completion, Failure> {
    let answer: wire::Answer = serde_json::from_slice(bytes)
        .map_err(|e| Failure::Malformed(format!("the answer is not the JSON expected: {e}")))?;
    let choice = answer
        .choices
        .as_ref()
        .and_then(|c| c.first())
        .ok_or_else(|| Failure::Malformed("no choices in the answer".into()))?;
    let (content, reasoning) = texts(choice, api, true);
    let finish_reason = choice
        .finish_reason
        .as_deref()
        .ok_or_else(|| Failure::Incomplete("no finish_reason in the answer".into()))?;
    let tool_calls = choice
        .message
        .as_ref()
        .and_then(|m| m.tool_calls.as_ref())
        .map(|calls| {
            calls
                .iter()
                .map(|call| {
                    let function = call.function.as_ref();
                    ToolCall {
                        id: call.id.as_deref().unwrap_or_default().to_string(),
                        kind: call.kind.as_deref().unwrap_or("function").to_string(),
                        function: FunctionCall {
                            name: function
                                .and_then(|f| f.name.as_deref())
                                .unwrap_or_default()
                                .to_string(),
                            arguments: function.map(wire::Function::arguments).unwrap_or_default(),
                        },
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let token_ids = choice.generated_ids();
    let prompt_token_ids = answer
        .prompt_token_ids
        .clone()
        .or_else(|| choice.prompt_token_ids.clone());
    Ok(Completion {
        content: content.unwrap_or_default().to_string(),
        reasoning: reasoning.map(str::to_string),
        tool_calls,
        finish_reason: finish_reason.to_string(),
        usage: answer.usage,
        model: answer.model.as_deref().unwrap_or_default().to_string(),
        // Not streamed: the first token arrives with the last.
        first_token: None,
        token_ids,
        prompt_token_ids,
        token_ids_incomplete: false,
    }
    .with_whole_ids(false))
}

/// Builds a completion from stream chunks.
struct StreamAccumulator {
    completion: Completion,
    reasoning: String,
    finish_reason: Option<String>,
    /// When the request went out, for the time to first token.
    sent: Instant,
}

impl Default for StreamAccumulator {
    fn default() -> Self {
        StreamAccumulator {
            completion: Completion::default(),
            reasoning: String::new(),
            finish_reason: None,
            sent: Instant::now(),
        }
    }
}

impl StreamAccumulator {
    /// Takes one event; true once the stream is done.
    fn take(&mut self, event: SsePayload<'_>, api: Api) -> Result<bool, Failure> {
        let data = match event {
            SsePayload::Done => return Ok(true),
            SsePayload::Data(data) => data,
        };
        let chunk: wire::Answer = serde_json::from_str(data)
            .map_err(|e| Failure::Malformed(format!("a stream chunk is not JSON: {e}")))?;
        if let Some(error) = chunk.error {
            let message = server_message(error.get());
            return Err(Failure::Malformed(format!(
                "error in the stream: {message}"
            )));
        }
        if self.completion.model.is_empty() {
            if let Some(model) = chunk.model.as_deref() {
                self.completion.model = model.to_string();
            }
        }
        if let Some(usage) = chunk.usage {
            self.completion.usage = Some(usage);
        }
        if let Some(ids) = chunk.prompt_token_ids {
            self.completion.prompt_token_ids = Some(ids);
        }
        if let Some(choice) = chunk.choices.as_ref().and_then(|c| c.first()) {
            if let Some(ids) = choice.generated_ids() {
                self.completion
                    .token_ids
                    .get_or_insert_with(Vec::new)
                    .extend(ids);
            }
            if let Some(ids) = &choice.prompt_token_ids {
                self.completion.prompt_token_ids = Some(ids.clone());
            }
            let (content, reasoning) = texts(choice, api, false);
            let calls = choice.delta.as_ref().and_then(|d| d.tool_calls.as_deref());
            let piece = !content.unwrap_or_default().is_empty()
                || !reasoning.unwrap_or_default().is_empty()
                || calls.is_some_and(|c| !c.is_empty());
            for call in calls.unwrap_or_default() {
                self.take_call(call);
            }
            if piece && self.completion.first_token.is_none() {
                self.completion.first_token = Some(self.sent.elapsed());
            }
            self.completion
                .content
                .push_str(content.unwrap_or_default());
            self.reasoning.push_str(reasoning.unwrap_or_default());
            if let Some(reason) = choice.finish_reason.as_deref() {
                self.finish_reason = Some(reason.to_string());
            }
        }
        Ok(false)
    }

    /// Puts a tool-call delta into the call at its index, as the OpenAI
    /// SDK does: `type` is set, `id`, `name` and `arguments` are appended
    /// (an id a server repeats in every delta is taken once).
    fn take_call(&mut self, delta: &wire::Call<'_>) {
        let calls = &mut self.completion.tool_calls;
        // Without an index: a new call when it brings an id of its own,
        // else more of the last call.
        let last_id = calls.last().map(|c| c.id.as_str());
        let index = delta.index.unwrap_or(match delta.id.as_deref() {
            Some(id) if Some(id) != last_id => calls.len(),
            _ => calls.len().saturating_sub(1),
        });
        if index >= calls.len() {
            // An index far past the calls seen is a broken stream; it is
            // bounded so that it cannot make a huge list.
            if index > calls.len() + 64 {
                return;
            }
            calls.resize_with(index + 1, ToolCall::default);
        }
        let call = &mut calls[index];
        if let Some(kind) = delta.kind.as_deref() {
            call.kind = kind.to_string();
        }
        if let Some(id) = delta.id.as_deref() {
            if call.id != id {
                call.id.push_str(id);
            }
        }
        if let Some(function) = &delta.function {
            if let Some(name) = function.name.as_deref() {
                call.function.name.push_str(name);
            }
            call.function.arguments.push_str(&function.arguments());
        }
    }

    fn finish(mut self) -> Result<Completion, Failure> {
        for call in &mut self.completion.tool_calls {
            if call.kind.is_empty() {
                call.kind = "function".into();
            }
        }
        self.completion.finish_reason = self.finish_reason.ok_or_else(|| {
            Failure::Incomplete("the stream ended without a finish_reason".into())
        })?;
        if !self.reasoning.is_empty() {
            self.completion.reasoning = Some(self.reasoning);
        }
        self.completion.keep_only_whole_ids(true);
        Ok(self.completion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_body_passes_extra_fields_through() {
        let mut params = Map::new();
        params.insert("temperature".into(), json!(0.6));
        params.insert(
            "chat_template_kwargs".into(),
            json!({"enable_thinking": false}),
        );
        let template = RequestTemplate::new(Api::Chat, "m", &params, true);
        let body: Value =
            serde_json::from_slice(&template.body(r#"[{"role": "user", "content": "hi"}]"#, &[]))
                .unwrap();
        assert_eq!(body["chat_template_kwargs"]["enable_thinking"], false);
        assert_eq!(body["temperature"], 0.6);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["messages"][0]["content"], "hi");
    }

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_string()).unwrap()
    }

    #[test]
    fn a_prompts_own_fields_go_with_its_request_and_win_over_the_runs() {
        let mut params = Map::new();
        params.insert("temperature".into(), json!(0.6));
        let template = RequestTemplate::new(Api::Chat, "m", &params, false);
        let tools = r#"[{"type": "function", "function": {"name": "f"}}]"#;
        let fields = [("tools", raw(tools)), ("tool_choice", raw(r#""auto""#))];
        let bytes = template.body(r#"[{"role": "user", "content": "hi"}]"#, &fields);
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["tools"], serde_json::from_str::<Value>(tools).unwrap());
        assert_eq!(
            (body["tool_choice"].as_str(), body["temperature"].as_f64()),
            (Some("auto"), Some(0.6))
        );
        // A key given twice would leave the server to choose; it is given once.
        params.insert("tool_choice".into(), json!("none"));
        let template = RequestTemplate::new(Api::Chat, "m", &params, false);
        let bytes = template.body(r#"[{"role": "user", "content": "hi"}]"#, &fields);
        let text = String::from_utf8(bytes).unwrap();
        assert_eq!(text.matches("tool_choice").count(), 1, "{text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["tool_choice"], "auto");
        assert_eq!(body["messages"][0]["content"], "hi");
    }

    #[test]
    fn whole_answers_keep_their_tool_calls() {
        let answer = json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": {"y": 2}}}]},
            "finish_reason": "tool_calls"}]});
        let c = parse_whole(answer.to_string().as_bytes(), Api::Chat).unwrap();
        assert_eq!(c.content, "");
        assert_eq!(c.finish_reason, "tool_calls");
        assert_eq!(
            serde_json::to_value(&c.tool_calls).unwrap(),
            json!([{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
                   {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{\"y\":2}"}}])
        );
    }

    /// The ids each server returns, in its own shape (vLLM 0.11's
    /// protocol, SGLang's after PR #35225, llama.cpp b6xxx as vendored by
    /// llama-cpp-python 0.3.36), whole and streamed.
    #[test]
    fn token_ids_are_read_in_each_servers_shape() {
        let message = json!({"role": "assistant", "content": "hi"});
        let vllm = json!({"model": "m", "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "message": message, "finish_reason": "stop", "token_ids": [7, 8, 2]}]});
        let c = parse_whole(vllm.to_string().as_bytes(), Api::Chat).unwrap();
        assert_eq!(
            (c.prompt_token_ids, c.token_ids),
            (Some(vec![1, 2, 3]), Some(vec![7, 8, 2]))
        );

        let sglang = json!({"model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "stop",
            "prompt_token_ids": [4, 5], "response_token_ids": [9]}]});
        let c = parse_whole(sglang.to_string().as_bytes(), Api::Chat).unwrap();
        assert_eq!(
            (c.prompt_token_ids, c.token_ids),
            (Some(vec![4, 5]), Some(vec![9]))
        );

        let entry = |id: u32| {
            json!({"id": id, "token": "x", "bytes": [120], "logprob": -0.5,
            "top_logprobs": [{"id": id, "token": "x", "bytes": [120], "logprob": -0.5}]})
        };
        let llama = json!({"model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "stop",
            "logprobs": {"content": [entry(57), entry(2)]}}]});
        let c = parse_whole(llama.to_string().as_bytes(), Api::Chat).unwrap();
        assert_eq!((c.prompt_token_ids, c.token_ids), (None, Some(vec![57, 2])));

        // Fewer ids than the tokens generated (llama.cpp leaves out a token
        // that ends inside a character): none are kept, and it is said.
        let gap = json!({"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
            "choices": [{"index": 0, "message": message, "finish_reason": "stop",
            "logprobs": {"content": [entry(57), entry(2)]}}]});
        let c = parse_whole(gap.to_string().as_bytes(), Api::Chat).unwrap();
        assert_eq!((c.token_ids, c.token_ids_incomplete), (None, true));
        let whole = json!({"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            "choices": [{"index": 0, "message": message, "finish_reason": "stop",
            "token_ids": [57, 2], "response_token_ids": [57, 2]}]});
        let c = parse_whole(whole.to_string().as_bytes(), Api::Chat).unwrap();
        assert_eq!(
            (c.token_ids, c.token_ids_incomplete),
            (Some(vec![57, 2]), false)
        );

        // vLLM's log probabilities carry no ids: none are made up.
        let vllm_logprobs = json!({"model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "stop",
            "logprobs": {"content": [{"token": "hi", "logprob": -0.1, "bytes": [104, 105], "top_logprobs": []}]}}]});
        let c = parse_whole(vllm_logprobs.to_string().as_bytes(), Api::Chat).unwrap();
        assert_eq!(c.token_ids, None);
        let plain = json!({"model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": null}]});
        assert_eq!(
            parse_whole(plain.to_string().as_bytes(), Api::Chat)
                .unwrap()
                .token_ids,
            None
        );

        // Streamed: vLLM's prompt ids in the first chunk, each chunk's own
        // generated ids; llama.cpp's in each chunk's log probabilities.
        let mut acc = StreamAccumulator::default();
        for chunk in [
            json!({"prompt_token_ids": [1, 2], "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "token_ids": []}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "h"}, "token_ids": [7]}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "i"}, "token_ids": [8, 2], "finish_reason": "stop"}]}),
        ] {
            acc.take(SsePayload::Data(&chunk.to_string()), Api::Chat)
                .unwrap();
        }
        let c = acc.finish().unwrap();
        assert_eq!(
            (c.prompt_token_ids, c.token_ids),
            (Some(vec![1, 2]), Some(vec![7, 8, 2]))
        );
        let mut acc = StreamAccumulator::default();
        for chunk in [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "I"}, "logprobs": {"content": [entry(57)]}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "'m"}, "logprobs": {"content": [entry(5248)]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}),
        ] {
            acc.take(SsePayload::Data(&chunk.to_string()), Api::Chat)
                .unwrap();
        }
        let c = acc.finish().unwrap();
        // The end of turn it stopped at came in no chunk: one fewer is whole.
        assert_eq!(
            (c.prompt_token_ids, c.token_ids),
            (None, Some(vec![57, 5248]))
        );
    }

    #[test]
    fn streamed_tool_calls_are_put_together_by_index() {
        let mut acc = StreamAccumulator::default();
        let chunk = |delta: Value, finish: Value| {
            json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).to_string()
        };
        for (delta, finish) in [
            (
                json!({"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_", "arguments": ""}}]}),
                Value::Null,
            ),
            (
                json!({"tool_calls": [{"index": 0, "function": {"name": "weather", "arguments": "{\"ci"}}]}),
                Value::Null,
            ),
            (
                json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
                Value::Null,
            ),
            // vLLM-style: the id sent again with a later delta of the same call.
            (
                json!({"tool_calls": [{"index": 0, "id": "call_a", "function": {"arguments": "ty\": \"Oslo\"}"}}]}),
                Value::Null,
            ),
            (json!({}), json!("tool_calls")),
        ] {
            let data = chunk(delta, finish);
            assert!(!acc.take(SsePayload::Data(&data), Api::Chat).unwrap());
        }
        assert!(acc.take(SsePayload::Done, Api::Chat).unwrap());
        let c = acc.finish().unwrap();
        assert_eq!(c.finish_reason, "tool_calls");
        assert!(c.first_token.is_some());
        assert_eq!(
            serde_json::to_value(&c.tool_calls).unwrap(),
            json!([{"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
                   {"id": "call_b", "type": "function", "function": {"name": "f", "arguments": "{}"}}])
        );
    }

    #[test]
    fn a_stream_chunks_text_is_borrowed_and_escapes_still_read() {
        let plain =
            r#"{"model": "m", "choices": [{"delta": {"content": "hi"}, "finish_reason": null}]}"#;
        let chunk: wire::Answer = serde_json::from_str(plain).unwrap();
        let choice = &chunk.choices.as_ref().unwrap()[0];
        let content = choice.delta.as_ref().unwrap().content.as_ref().unwrap();
        assert!(matches!(content, std::borrow::Cow::Borrowed("hi")));
        assert!(matches!(chunk.model, Some(std::borrow::Cow::Borrowed("m"))));
        assert!(choice.finish_reason.is_none());
        let escaped = r#"{"choices": [{"delta": {"content": "a\nb"}}]}"#;
        let chunk: wire::Answer = serde_json::from_str(escaped).unwrap();
        let choice = &chunk.choices.as_ref().unwrap()[0];
        assert_eq!(
            choice.delta.as_ref().unwrap().content.as_deref(),
            Some("a\nb")
        );
    }

    #[test]
    fn reasoning_is_kept_apart_and_usage_captured() {
        let answer = json!({
            "model": "qwen3",
            "choices": [{"message": {"content": "42", "reasoning_content": "think"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        });
        let c = parse_whole(answer.to_string().as_bytes(), Api::Chat).unwrap();
        assert_eq!(c.content, "42");
        assert_eq!(c.reasoning.as_deref(), Some("think"));
        assert_eq!(c.usage.unwrap().total_tokens, 5);
        let missing = json!({"choices": [{"message": {"content": "x"}}]});
        assert!(matches!(
            parse_whole(missing.to_string().as_bytes(), Api::Chat),
            Err(Failure::Incomplete(_))
        ));
        assert!(matches!(
            parse_whole(b"{not json", Api::Chat),
            Err(Failure::Malformed(_))
        ));
    }

    #[test]
    fn server_messages_are_extracted_and_cut() {
        assert_eq!(
            server_message(r#"{"error": {"message": "bad model"}}"#),
            "bad model"
        );
        assert_eq!(server_message("plain text"), "plain text");
        assert!(server_message(&"x".repeat(2000)).len() < 600);
    }

    #[test]
    fn the_api_key_is_never_printed() {
        let client = InferenceClient::with_key(
            &["http://127.0.0.1:1".into()],
            Some(("TODOD_TEST_KEY", "sk-secret")),
            Limits::default(),
        )
        .unwrap();
        assert!(!format!("{client:?}").contains("sk-secret"));
        assert!(InferenceClient::with_key(
            &["http://127.0.0.1:1".into()],
            Some(("TODOD_TEST_KEY", "sk-a\r\nX-Injected: 1")),
            Limits::default()
        )
        .is_err());
        assert!(InferenceClient::new(
            &["http://127.0.0.1:1".into()],
            Some("TODOD_TEST_KEY_THAT_IS_NOT_SET"),
            Limits::default()
        )
        .is_err());
    }
}
