//! A mock OpenAI-compatible server, a test fixture (not part of the product).
//!
//! It answers `/v1/chat/completions` and `/v1/completions`, streamed or not,
//! with a content that is a pure function of the request's input
//! (`expected_content`), so tests can check every record. Settings give it a
//! latency, a token rate and a capacity; a queue of faults makes the next
//! requests fail in the ways real servers do.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};

use crate::mock_token_ids as ids;
pub use crate::mock_token_ids::{Dialect, MockTokenIds};

/// How the next request goes wrong (or not).
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// A normal answer.
    Ok,
    /// A normal chat answer with reasoning kept apart.
    Reasoning,
    /// An error status, with an optional Retry-After in seconds.
    Status { code: u16, retry_after: Option<u64> },
    /// Accepts the request and never sends headers.
    HangBeforeHeaders,
    /// Sends the headers and a first chunk, then nothing.
    StallMidStream,
    /// Sends part of the answer and closes without finish_reason or [DONE].
    CloseWithoutDone,
    /// A normal answer cut by max_tokens: finish_reason "length".
    Length,
    /// A 200 whose body is not JSON.
    InvalidJson,
}

#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Before the first byte of an answer.
    pub latency: Duration,
    /// Tokens per second for streamed answers; 0 sends them at once.
    pub tokens_per_second: f64,
    /// Requests served at once; more wait their turn.
    pub capacity: usize,
    /// Keep each request's body for `bodies()`.
    pub keep_bodies: bool,
    /// Answers of a known length distribution: each input gets a length in
    /// `min..=max` tokens (a pure function of the input), the expected
    /// content padded with filler words.
    pub output_tokens: Option<(usize, usize)>,
    /// A cold server: the first `cold_requests` requests it receives wait
    /// `cold_latency` more and answer `cold_tokens` more tokens, as a
    /// thinking model answers its first, trivial prompts at length.
    pub cold_requests: usize,
    pub cold_latency: Duration,
    pub cold_tokens: usize,
    /// A throughput curve: how fast the server is with how many requests
    /// in flight, and how it varies over time (see [`Curve`]).
    pub curve: Option<Curve>,
    /// What `GET /metrics` answers, as an inference server's own metrics.
    pub metrics: ServerMetrics,
    /// A prefix cache, as vLLM's, SGLang's and llama.cpp's: an input the
    /// mock has not answered before waits `prefill` more (its prompt is
    /// processed); one it has answered does not, and its usage says its
    /// whole prompt was cached (`prompt_tokens_details.cached_tokens`).
    /// Zero: no cache, and usage says nothing of one.
    pub prefill: Duration,
    /// Which server it answers as (`/v1/models`, reasoning, ids).
    pub dialect: Dialect,
    /// Token ids for a request that asks (`return_token_ids`), in the
    /// dialect's shape (the mock's own returns none).
    pub token_ids: Option<MockTokenIds>,
}

/// The mock's own `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServerMetrics {
    /// 404, as a server started without metrics.
    #[default]
    Absent,
    /// vLLM's names, from the mock's live state: requests being served
    /// (running), waiting for a slot (waiting), the cache filling with them
    /// (60 % when every slot is taken).
    Vllm,
    /// 200 with a body no parser makes sense of.
    Garbage,
}

/// A server whose rate depends on its load and varies over time: with `n`
/// requests in flight it completes `rate(n)` requests a second (each takes
/// `n / rate(n)`, after `latency`), times a factor drawn anew every `epoch`
/// from `1 ± jitter`, seeded.
#[derive(Debug, Clone, Copy)]
pub struct Curve {
    pub rate: fn(usize) -> f64,
    pub jitter: f64,
    pub epoch: Duration,
    pub seed: u64,
}

impl Curve {
    /// What a request that arrives `since` the server started, with
    /// `in_flight` requests there (itself included), takes.
    pub fn latency(&self, in_flight: usize, since: Duration) -> Duration {
        let n = in_flight.max(1);
        let epoch = (since.as_secs_f64() / self.epoch.as_secs_f64().max(1e-6)) as u64;
        let factor = 1.0 + self.jitter * self.draw(epoch);
        Duration::from_secs_f64(n as f64 / ((self.rate)(n) * factor).max(1e-6))
    }

    /// A uniform draw in [-1, 1] for `epoch` (SplitMix64 of seed and epoch).
    fn draw(&self, epoch: u64) -> f64 {
        let mut z = self
            .seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(epoch.wrapping_mul(0xbf58_476d_1ce4_e5b9));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            latency: Duration::ZERO,
            tokens_per_second: 0.0,
            capacity: 1024,
            keep_bodies: true,
            output_tokens: None,
            cold_requests: 0,
            cold_latency: Duration::ZERO,
            cold_tokens: 0,
            curve: None,
            metrics: ServerMetrics::Absent,
            prefill: Duration::ZERO,
            dialect: Dialect::Mock,
            token_ids: None,
        }
    }
}

#[derive(Default)]
struct State {
    /// `GET /metrics` requests received.
    metrics_scrapes: AtomicUsize,
    /// Off for benchmarks: 100k bodies are a lot of memory for nothing.
    keep_bodies: bool,
    faults: Mutex<VecDeque<Fault>>,
    requests: AtomicUsize,
    bodies: Mutex<Vec<Value>>,
    authorizations: Mutex<Vec<String>>,
    /// Inputs answered with 400 (not retried) until cleared.
    refused: Mutex<std::collections::HashSet<String>>,
    requests_changed: Notify,
    /// Requests whose client hung up before the answer was complete.
    abandoned: AtomicUsize,
    abandoned_changed: Notify,
    /// Cold requests that have waited out their `cold_latency`.
    cold_waited: AtomicUsize,
    /// Permits held away from requests: the capacity taken by `set_capacity`.
    held: Mutex<Vec<tokio::sync::OwnedSemaphorePermit>>,
    capacity: usize,
    /// Requests received and not yet answered (waiting for a slot or
    /// served), and the most there ever were.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// When the server started, for a curve's epochs.
    started: std::sync::OnceLock<std::time::Instant>,
    /// The inputs answered, by hash, for `Settings::prefill`.
    cached: Mutex<std::collections::HashSet<u64>>,
    /// `GET /v1/models` requests received.
    model_lists: AtomicUsize,
}

/// Counts a request in flight until dropped.
struct InFlight<'a>(&'a State);

impl<'a> InFlight<'a> {
    fn new(state: &'a State) -> InFlight<'a> {
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(state)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

pub struct MockOpenAi {
    pub url: String,
    state: Arc<State>,
    slots: Arc<Semaphore>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for MockOpenAi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The answer the mock gives for an input text.
pub fn expected_content(input: &str) -> String {
    format!("answer to: {input}")
}

impl MockOpenAi {
    pub async fn start(settings: Settings) -> MockOpenAi {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind mock");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(State {
            keep_bodies: settings.keep_bodies,
            capacity: settings.capacity,
            ..State::default()
        });
        let _ = state.started.set(std::time::Instant::now());
        let capacity = Arc::new(Semaphore::new(settings.capacity));
        let slots = capacity.clone();
        let serving = state.clone();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = serving.clone();
                let capacity = capacity.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, &state, settings, &capacity).await;
                });
            }
        });
        MockOpenAi {
            url,
            state,
            slots,
            server,
        }
    }

    /// Serves `n` requests at once from now on (at most the capacity it
    /// started with); requests already being served finish first.
    pub async fn set_capacity(&self, n: usize) {
        let mut held = self
            .state
            .held
            .lock()
            .unwrap()
            .drain(..)
            .collect::<Vec<_>>();
        held.clear();
        let take = self.state.capacity.saturating_sub(n) as u32;
        if take > 0 {
            let permit = self
                .slots
                .clone()
                .acquire_many_owned(take)
                .await
                .expect("semaphore");
            self.state.held.lock().unwrap().push(permit);
        }
    }

    /// Queues faults for the next requests, in order; then answers are normal.
    pub fn push(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.faults.lock().unwrap().extend(faults);
    }

    /// Answers these inputs with 400 from now on (a request the server will
    /// never take); `refuse([])` takes them back.
    pub fn refuse(&self, inputs: impl IntoIterator<Item = String>) {
        let mut refused = self.state.refused.lock().unwrap();
        refused.clear();
        refused.extend(inputs);
    }

    /// The input texts of the requests received so far (last message or prompt).
    pub fn inputs(&self) -> Vec<String> {
        self.bodies().iter().map(input_of).collect()
    }

    /// The most requests the server ever had at once (waiting or served).
    /// How many times `/metrics` was asked for.
    /// `GET /v1/models` requests received (a run asks once per endpoint).
    pub fn model_lists(&self) -> usize {
        self.state.model_lists.load(Ordering::SeqCst)
    }

    pub fn metrics_scrapes(&self) -> usize {
        self.state.metrics_scrapes.load(Ordering::SeqCst)
    }

    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Cold requests whose answer has been due (their `cold_latency` has
    /// passed), whether or not their client still waited for it.
    pub fn cold_answers_due(&self) -> usize {
        self.state.cold_waited.load(Ordering::SeqCst)
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.state.bodies.lock().unwrap().clone()
    }

    pub fn authorizations(&self) -> Vec<String> {
        self.state.authorizations.lock().unwrap().clone()
    }

    /// Waits until the mock has received `n` requests in all.
    pub async fn wait_requests(&self, n: usize) {
        loop {
            let notified = self.state.requests_changed.notified();
            if self.requests() >= n {
                return;
            }
            notified.await;
        }
    }

    /// Waits until `n` requests have been abandoned by their client.
    pub async fn wait_abandoned(&self, n: usize) {
        loop {
            let notified = self.state.abandoned_changed.notified();
            if self.state.abandoned.load(Ordering::SeqCst) >= n {
                return;
            }
            notified.await;
        }
    }
}

struct Request {
    path: String,
    authorization: String,
    body: Value,
}

async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if buffer.len() > 1 << 20 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).to_string();
    let mut lines = head.lines();
    let path = lines.next()?.split(' ').nth(1)?.to_string();
    let mut length = 0;
    let mut authorization = String::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().ok()?,
                "authorization" => authorization = value.trim().to_string(),
                _ => {}
            }
        }
    }
    while buffer.len() < header_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = if length == 0 {
        Value::Null
    } else {
        serde_json::from_slice(&buffer[header_end..header_end + length]).ok()?
    };
    Some(Request {
        path,
        authorization,
        body,
    })
}

/// Waits for the client to hang up (at most a minute); counts it.
async fn until_abandoned(stream: &mut TcpStream, state: &State) {
    let mut byte = [0u8; 1];
    if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut byte)).await {
        state.abandoned.fetch_add(1, Ordering::SeqCst);
        state.abandoned_changed.notify_waiters();
    }
}

async fn serve_metrics(
    stream: &mut TcpStream,
    state: &State,
    settings: Settings,
) -> std::io::Result<()> {
    let body = match settings.metrics {
        ServerMetrics::Absent => {
            let head = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
            return stream.write_all(head.as_bytes()).await;
        }
        ServerMetrics::Garbage => "<html>metrics moved</html>\n{{{ not prometheus\n".to_string(),
        ServerMetrics::Vllm => {
            let in_flight = state.in_flight.load(Ordering::SeqCst);
            let capacity = settings.capacity.max(1);
            let running = in_flight.min(capacity);
            let waiting = in_flight - running;
            let tokens = state.requests.load(Ordering::SeqCst) * 10;
            format!(
                "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
                 # TYPE vllm:num_requests_running gauge\n\
                 vllm:num_requests_running{{engine=\"0\",model_name=\"mock\"}} {running}.0\n\
                 # TYPE vllm:num_requests_waiting gauge\n\
                 vllm:num_requests_waiting{{engine=\"0\",model_name=\"mock\"}} {waiting}.0\n\
                 # TYPE vllm:kv_cache_usage_perc gauge\n\
                 vllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"mock\"}} {}\n\
                 # TYPE vllm:generation_tokens_total counter\n\
                 vllm:generation_tokens_total{{engine=\"0\",model_name=\"mock\"}} {tokens}.0\n",
                // Its slots, not its cache, bound it: full slots fill 60 %.
                0.6 * running as f64 / capacity as f64
            )
        }
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await
}

async fn serve(
    mut stream: TcpStream,
    state: &State,
    settings: Settings,
    capacity: &Semaphore,
) -> std::io::Result<()> {
    let Some(request) = read_request(&mut stream).await else {
        return Ok(());
    };
    if request.path == "/metrics" {
        state.metrics_scrapes.fetch_add(1, Ordering::SeqCst);
        return serve_metrics(&mut stream, state, settings).await;
    }
    if request.path == "/v1/models" {
        // Not a completion: not counted.
        state.model_lists.fetch_add(1, Ordering::SeqCst);
        let body = ids::models_body("mock-model", settings.dialect);
        return write_json(&mut stream, "200 OK", &body).await;
    }
    // Not counted from the last write on: the client may send its next
    // request as soon as it has read it, before this task drops the count.
    let counted = InFlight::new(state);
    let _slot = capacity.acquire().await.expect("semaphore");
    state.requests.fetch_add(1, Ordering::SeqCst);
    state.requests_changed.notify_waiters();
    if state.keep_bodies {
        state.bodies.lock().unwrap().push(request.body.clone());
    }
    state
        .authorizations
        .lock()
        .unwrap()
        .push(request.authorization.clone());
    let chat = request.path.ends_with("/chat/completions");
    let streamed = request.body["stream"].as_bool().unwrap_or(false);
    let input = input_of(&request.body);
    let fault = if state.refused.lock().unwrap().contains(&input) {
        Fault::Status {
            code: 400,
            retry_after: None,
        }
    } else {
        state
            .faults
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Fault::Ok)
    };
    let cold = state.requests.load(Ordering::SeqCst) <= settings.cold_requests;
    let mut content = expected_content(&input);
    if let Some((min, max)) = settings.output_tokens {
        let words = content.split_inclusive(' ').count();
        let want = min + (fnv(&input) % (max - min + 1) as u64) as usize;
        for i in words..want {
            content.push_str(&format!(" w{i}"));
        }
    }
    if cold {
        for i in 0..settings.cold_tokens {
            content.push_str(&format!(" think{i}"));
        }
    }
    let model = request.body["model"].as_str().unwrap_or("mock").to_string();
    tokio::time::sleep(settings.latency).await;
    if let Some(curve) = &settings.curve {
        let since = state.started.get().map_or(Duration::ZERO, |t| t.elapsed());
        let n = state.in_flight.load(Ordering::SeqCst);
        tokio::time::sleep(curve.latency(n, since)).await;
    }
    // Whether the prompt came from the cache; a prompt is cached once it
    // has been processed, as a server's is.
    let prompt_cached = !settings.prefill.is_zero() && {
        let key = fnv(&input);
        let hit = state.cached.lock().unwrap().contains(&key);
        if !hit {
            tokio::time::sleep(settings.prefill).await;
            state.cached.lock().unwrap().insert(key);
        }
        hit
    };
    if cold {
        tokio::time::sleep(settings.cold_latency).await;
        state.cold_waited.fetch_add(1, Ordering::SeqCst);
    }

    match fault {
        Fault::HangBeforeHeaders => {
            until_abandoned(&mut stream, state).await;
            return Ok(());
        }
        Fault::Status { code, retry_after } => {
            let body = json!({"error": {"message": format!("mock says {code}")}}).to_string();
            let retry = retry_after
                .map(|s| format!("retry-after: {s}\r\n"))
                .unwrap_or_default();
            let head = format!(
                "HTTP/1.1 {code} Mock\r\ncontent-type: application/json\r\n{retry}\
                 content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
            return stream.shutdown().await;
        }
        Fault::InvalidJson => {
            let body = if streamed {
                "data: {not json\n\n"
            } else {
                "{not json"
            };
            let kind = if streamed {
                "text/event-stream"
            } else {
                "application/json"
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
            return stream.shutdown().await;
        }
        _ => {}
    }

    let calls = if chat && fault == Fault::Ok {
        expected_tool_calls(&request.body)
    } else {
        Vec::new()
    };
    // The ids, when the request asks and the mock speaks a dialect that
    // returns them: (the prompt's, the answer's).
    let asked = request.body["return_token_ids"] == true;
    if asked && settings.dialect == Dialect::Sglang && streamed && chat {
        let body = json!({"object": "error", "type": "BadRequestError", "code": 400,
            "message": "return_token_ids is not supported for streaming chat completions"});
        return write_json(&mut stream, "400 Bad Request", &body.to_string()).await;
    }
    let token_ids = settings
        .token_ids
        .filter(|_| asked && settings.dialect != Dialect::Mock)
        .map(|mode| {
            let text = ids::generated_text(&content, &calls, mode);
            let mut generated = ids::generated_ids(&text);
            if fault == Fault::Length {
                // Cut at its limit: no end of turn was generated.
                generated.pop();
            }
            (ids::prompt_ids(&input), generated)
        });
    if !calls.is_empty() {
        drop(counted);
        let ids = token_ids.map(|(prompt, generated)| (settings.dialect, prompt, generated));
        return answer_with_calls(&mut stream, &model, &calls, streamed, ids).await;
    }
    let finish = if fault == Fault::Length {
        "length"
    } else {
        "stop"
    };
    let reasoning = (fault == Fault::Reasoning).then(|| format!("thinking about {input}"));
    let tokens: Vec<String> = content.split_inclusive(' ').map(str::to_string).collect();
    let mut usage = json!({"prompt_tokens": input.split_whitespace().count(),
                       "completion_tokens": tokens.len(),
                       "total_tokens": input.split_whitespace().count() + tokens.len()});
    if let Some((_, generated)) = &token_ids {
        // A server that returns ids counts the tokens it generated in them.
        usage["completion_tokens"] = json!(generated.len());
        usage["total_tokens"] = json!(input.split_whitespace().count() + generated.len());
    }
    if !settings.prefill.is_zero() {
        let cached = if prompt_cached {
            usage["prompt_tokens"].clone()
        } else {
            json!(0)
        };
        usage["prompt_tokens_details"] = json!({ "cached_tokens": cached });
    }

    if !streamed {
        if fault == Fault::StallMidStream || fault == Fault::CloseWithoutDone {
            // A body cut short of its announced length.
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                        content-length: 1000\r\nconnection: close\r\n\r\n{\"choices\": [";
            stream.write_all(head.as_bytes()).await?;
            if fault == Fault::StallMidStream {
                until_abandoned(&mut stream, state).await;
                return Ok(());
            }
            return stream.shutdown().await;
        }
        let message = match (&reasoning, chat) {
            (Some(r), true) => {
                let mut message = json!({"role": "assistant", "content": content});
                message[settings.dialect.reasoning_field()] = json!(r);
                message
            }
            (None, true) => json!({"role": "assistant", "content": content}),
            _ => Value::Null,
        };
        let choice = if chat {
            json!({"index": 0, "message": message, "finish_reason": finish})
        } else {
            json!({"index": 0, "text": content, "finish_reason": finish})
        };
        let mut answer = json!({"id": "mock", "model": model, "usage": usage, "choices": [choice]});
        if let Some((prompt, generated)) = &token_ids {
            ids::put_whole(&mut answer, settings.dialect, prompt, generated);
        }
        let body = answer.to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        drop(counted);
        stream.write_all(body.as_bytes()).await?;
        return stream.shutdown().await;
    }

    // Streamed: close-delimited event stream.
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).await?;
    // vLLM sends each chunk's own ids: here the answer's ids are dealt
    // out over the content chunks in order, the end of turn with the last
    // chunk (the one with the finish_reason), the prompt's with the first.
    let dealt = token_ids.as_ref().map(|(prompt, generated)| {
        let (answer, end) = generated.split_at(generated.len() - 1);
        (prompt.clone(), deal(answer, tokens.len()), end.to_vec())
    });
    let delta = |field: &str, text: &str, i: Option<usize>| {
        let mut choice = if chat {
            json!({"index": 0, "delta": {field: text}, "finish_reason": null})
        } else {
            json!({"index": 0, "text": text, "finish_reason": null})
        };
        let mut chunk = json!({"model": model});
        if let (Some((prompt, pieces, _)), Some(i)) = (&dealt, i) {
            choice["token_ids"] = json!(pieces[i]);
            if i == 0 {
                chunk["prompt_token_ids"] = json!(prompt);
            }
        }
        chunk["choices"] = json!([choice]);
        format!("data: {chunk}\n\n")
    };
    if let Some(r) = &reasoning {
        stream
            .write_all(delta(settings.dialect.reasoning_field(), r, None).as_bytes())
            .await?;
    }
    let pace = (settings.tokens_per_second > 0.0)
        .then(|| Duration::from_secs_f64(1.0 / settings.tokens_per_second));
    for (i, token) in tokens.iter().enumerate() {
        stream
            .write_all(delta("content", token, Some(i)).as_bytes())
            .await?;
        if i == 0 && fault == Fault::StallMidStream {
            until_abandoned(&mut stream, state).await;
            return Ok(());
        }
        if let Some(pace) = pace {
            tokio::time::sleep(pace).await;
        }
    }
    if fault == Fault::CloseWithoutDone {
        return stream.shutdown().await;
    }
    let mut last_choice = if chat {
        json!({"index": 0, "delta": {}, "finish_reason": finish})
    } else {
        json!({"index": 0, "text": "", "finish_reason": finish})
    };
    if let Some((_, _, end)) = &dealt {
        last_choice["token_ids"] = json!(end);
    }
    let last = json!({"model": model, "choices": [last_choice]});
    let usage_chunk = json!({"model": model, "choices": [], "usage": usage});
    let tail = format!("data: {last}\n\ndata: {usage_chunk}\n\ndata: [DONE]\n\n");
    drop(counted);
    stream.write_all(tail.as_bytes()).await?;
    stream.shutdown().await
}

/// The tool calls the mock answers a chat request with: when it offers
/// tools (and `tool_choice` is not "none"), a call of its first tool, and
/// with two or more tools a second, parallel call of the second; the
/// arguments and ids are pure functions of the input.
pub fn expected_tool_calls(body: &Value) -> Vec<Value> {
    let Some(tools) = body["tools"].as_array() else {
        return Vec::new();
    };
    if body["tool_choice"] == "none" {
        return Vec::new();
    }
    let input = input_of(body);
    tools
        .iter()
        .take(2)
        .enumerate()
        .map(|(k, tool)| {
            let name = tool["function"]["name"]
                .as_str()
                .or(tool["name"].as_str())
                .unwrap_or("tool");
            let arguments = json!({"query": expected_content(&input), "call": k}).to_string();
            json!({"id": format!("call_{:08x}_{k}", fnv(&input) as u32), "type": "function",
                   "function": {"name": name, "arguments": arguments}})
        })
        .collect()
}

/// Answers with `calls`, whole or as a stream whose deltas split each
/// call's arguments in three and interleave the calls, as servers that
/// stream parallel calls do.
async fn answer_with_calls(
    stream: &mut TcpStream,
    model: &str,
    calls: &[Value],
    streamed: bool,
    token_ids: Option<(Dialect, Vec<u32>, Vec<u32>)>,
) -> std::io::Result<()> {
    let arguments: Vec<&str> = calls
        .iter()
        .map(|c| c["function"]["arguments"].as_str().unwrap())
        .collect();
    let tokens: usize = arguments.iter().map(|a| a.split(' ').count()).sum();
    // A server that returns ids counts the tokens it generated in them.
    let tokens = token_ids
        .as_ref()
        .map_or(tokens, |(_, _, generated)| generated.len());
    let usage =
        json!({"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1});
    if !streamed {
        let mut answer = json!({"id": "mock", "model": model, "usage": usage, "choices": [{"index": 0,
            "message": {"role": "assistant", "content": null, "tool_calls": calls},
            "finish_reason": "tool_calls"}]});
        if let Some((dialect, prompt, generated)) = &token_ids {
            ids::put_whole(&mut answer, *dialect, prompt, generated);
        }
        return write_json(stream, "200 OK", &answer.to_string()).await;
    }
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let thirds = |text: &str| -> [String; 3] {
        let chars: Vec<char> = text.chars().collect();
        let (a, b) = (chars.len() / 3, 2 * chars.len() / 3);
        [
            chars[..a].iter().collect(),
            chars[a..b].iter().collect(),
            chars[b..].iter().collect(),
        ]
    };
    let mut first = json!({"model": model, "choices": [{"index": 0,
        "delta": {"role": "assistant", "content": null}, "finish_reason": null}]});
    let mut last = json!({"model": model, "choices": [{"index": 0, "delta": {},
        "finish_reason": "tool_calls"}]});
    if let Some((_, prompt, generated)) = &token_ids {
        // A tool parser holds the text back until a call is whole; the ids
        // come as they are generated: here, all but the end of turn with
        // the first chunk, the end of turn with the last.
        let (answer, end) = generated.split_at(generated.len() - 1);
        first["prompt_token_ids"] = json!(prompt);
        first["choices"][0]["token_ids"] = json!(answer);
        last["choices"][0]["token_ids"] = json!(end);
    }
    let mut events = vec![format!("data: {first}\n\n")];
    let pieces: Vec<[String; 3]> = arguments.iter().map(|a| thirds(a)).collect();
    for part in 0..3 {
        for (index, (call, piece)) in calls.iter().zip(&pieces).enumerate() {
            let mut delta = json!({"index": index, "function": {"arguments": piece[part]}});
            if part == 0 {
                delta["id"] = call["id"].clone();
                delta["type"] = json!("function");
                delta["function"]["name"] = call["function"]["name"].clone();
            }
            events.push(chunk(json!({"tool_calls": [delta]}), Value::Null));
        }
    }
    events.push(format!("data: {last}\n\n"));
    events.push(format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"model": model, "choices": [], "usage": usage})
    ));
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).await?;
    for event in events {
        stream.write_all(event.as_bytes()).await?;
    }
    stream.shutdown().await
}

/// A whole JSON answer with `status` (`"200 OK"`), and the connection
/// closed.
async fn write_json(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// `ids` dealt out over `pieces` chunks, in order, as evenly as they go.
fn deal(ids: &[u32], pieces: usize) -> Vec<Vec<u32>> {
    let pieces = pieces.max(1);
    (0..pieces)
        .map(|i| ids[i * ids.len() / pieces..(i + 1) * ids.len() / pieces].to_vec())
        .collect()
}

/// FNV-1a: a stable hash for the mock's pure functions of the input.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The number of output tokens the mock answers `input` with, under
/// `output_tokens: Some((min, max))`.
pub fn answer_tokens(input: &str, min: usize, max: usize) -> usize {
    let words = expected_content(input).split_inclusive(' ').count();
    (min + (fnv(input) % (max - min + 1) as u64) as usize).max(words)
}

/// The input text of a request body: the last message's content (chat) or
/// the prompt (completions).
pub fn input_of(body: &Value) -> String {
    match body["messages"].as_array() {
        Some(messages) => messages
            .last()
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string(),
        None => body["prompt"].as_str().unwrap_or_default().to_string(),
    }
}
