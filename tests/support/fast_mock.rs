//! A mock OpenAI-compatible server written for speed (hyper, HTTP/1.1
//! keep-alive), serving many endpoints at once, each on a port of its own:
//! a test fixture and the floor of the cluster benchmark, never part of the
//! product. What it answers is a pure function of the request, so a test can
//! check every record: the content is `answer to: INPUT` padded with
//! `word N` pieces to `tokens` pieces (each piece a token, a space after all
//! but the last), where INPUT is the last message's content (chat) or the
//! prompt (completions).
//!
//! Settings: a latency before the headers; for a streamed answer, the
//! pieces per SSE event (`chunk`) and a token rate (0: all at once). Each
//! endpoint counts the requests it answered.
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpListener;

#[derive(Debug, Clone, Copy)]
pub struct FastSettings {
    pub latency: Duration,
    /// Pieces (tokens) of every answer.
    pub tokens: usize,
    /// Pieces per SSE event of a streamed answer.
    pub chunk: usize,
    /// Tokens per second of a streamed answer; 0 sends them at once.
    pub tokens_per_second: f64,
}

impl Default for FastSettings {
    fn default() -> Self {
        FastSettings {
            latency: Duration::ZERO,
            tokens: 16,
            chunk: 1,
            tokens_per_second: 0.0,
        }
    }
}

/// The endpoints, serving until dropped.
pub struct FastMock {
    pub urls: Vec<String>,
    counts: Vec<Arc<AtomicU64>>,
    /// Connections accepted, over all endpoints.
    connections: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FastMock {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(default)]
    stream: bool,
    #[serde(borrow, default)]
    messages: Vec<Message<'a>>,
    #[serde(borrow, default)]
    prompt: Option<std::borrow::Cow<'a, str>>,
}

/// The pieces of the answer to `input`: `tokens` of them.
pub fn pieces(input: &str, tokens: usize) -> Vec<String> {
    let base = format!("answer to: {input}");
    let mut out: Vec<String> = base.split_inclusive(' ').map(str::to_string).collect();
    let mut n = out.len();
    if out.len() < tokens {
        // The words added after the input start a word of their own.
        if let Some(last) = out.last_mut().filter(|l| !l.ends_with(' ')) {
            last.push(' ');
        }
    }
    while out.len() < tokens {
        out.push(format!("word{n} "));
        n += 1;
    }
    out.truncate(tokens.max(1));
    if let Some(last) = out.last_mut() {
        let trimmed = last.trim_end().to_string();
        *last = trimmed;
    }
    out
}

/// The whole content of the answer to `input`.
pub fn expected_content(input: &str, tokens: usize) -> String {
    pieces(input, tokens).concat()
}

fn usage(input: &str, tokens: usize) -> serde_json::Value {
    let prompt = input.split_whitespace().count();
    serde_json::json!({"prompt_tokens": prompt, "completion_tokens": tokens,
                       "total_tokens": prompt + tokens})
}

type Answer = Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>;

fn full(status: StatusCode, content_type: &str, body: Vec<u8>) -> Answer {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)).boxed())
        .expect("a response")
}

async fn answer(req: Request<Incoming>, settings: FastSettings, count: Arc<AtomicU64>) -> Answer {
    let chat = req.uri().path() == "/v1/chat/completions";
    if req.method() != hyper::Method::POST || !(chat || req.uri().path() == "/v1/completions") {
        return full(StatusCode::NOT_FOUND, "text/plain", b"not found\n".to_vec());
    }
    let Ok(bytes) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return full(StatusCode::BAD_REQUEST, "text/plain", b"no body\n".to_vec());
    };
    let Ok(body) = serde_json::from_slice::<Body>(&bytes) else {
        return full(
            StatusCode::BAD_REQUEST,
            "text/plain",
            b"not JSON\n".to_vec(),
        );
    };
    let input = if chat {
        body.messages
            .last()
            .and_then(|m| m.content.as_deref())
            .unwrap_or("")
            .to_string()
    } else {
        body.prompt.as_deref().unwrap_or("").to_string()
    };
    if !settings.latency.is_zero() {
        tokio::time::sleep(settings.latency).await;
    }
    count.fetch_add(1, Ordering::Relaxed);
    let pieces = pieces(&input, settings.tokens);
    let object = if chat {
        "chat.completion"
    } else {
        "text_completion"
    };
    if !body.stream {
        let content = pieces.concat();
        let choice = if chat {
            serde_json::json!({"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": content}})
        } else {
            serde_json::json!({"index": 0, "finish_reason": "stop", "text": content})
        };
        let answer = serde_json::json!({"id": "fast", "object": object, "model": "mock-model",
            "choices": [choice], "usage": usage(&input, settings.tokens)});
        return full(
            StatusCode::OK,
            "application/json",
            serde_json::to_vec(&answer).expect("JSON"),
        );
    }
    // A stream: the events, each one HTTP chunk, paced when asked.
    let chunk = settings.chunk.max(1);
    let mut events: Vec<Bytes> = Vec::new();
    for group in pieces.chunks(chunk) {
        let text = group.concat();
        let delta = if chat {
            serde_json::json!({"index": 0, "delta": {"content": text}, "finish_reason": null})
        } else {
            serde_json::json!({"index": 0, "text": text, "finish_reason": null})
        };
        let event = serde_json::json!({"id": "fast", "object": object, "model": "mock-model",
                                       "choices": [delta]});
        events.push(Bytes::from(format!("data: {event}\n\n")));
    }
    let last = if chat {
        serde_json::json!({"index": 0, "delta": {}, "finish_reason": "stop"})
    } else {
        serde_json::json!({"index": 0, "text": "", "finish_reason": "stop"})
    };
    let end = serde_json::json!({"id": "fast", "object": object, "model": "mock-model",
        "choices": [last], "usage": usage(&input, settings.tokens)});
    events.push(Bytes::from(format!("data: {end}\n\ndata: [DONE]\n\n")));
    let pause = (settings.tokens_per_second > 0.0)
        .then(|| Duration::from_secs_f64(chunk as f64 / settings.tokens_per_second));
    let stream = futures::stream::unfold(
        (events.into_iter(), pause, true),
        |(mut events, pause, first)| async move {
            let event = events.next()?;
            if let (Some(pause), false) = (pause, first) {
                tokio::time::sleep(pause).await;
            }
            Some((
                Ok::<_, Infallible>(Frame::data(event)),
                (events, pause, false),
            ))
        },
    );
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .body(StreamBody::new(stream).boxed())
        .expect("a response")
}

impl FastMock {
    /// `endpoints` endpoints on loopback, each on a port of its own.
    pub async fn start(endpoints: usize, settings: FastSettings) -> FastMock {
        let mut urls = Vec::new();
        let mut counts = Vec::new();
        let mut tasks = Vec::new();
        let connections = Arc::new(AtomicU64::new(0));
        for _ in 0..endpoints {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr: SocketAddr = listener.local_addr().unwrap();
            urls.push(format!("http://{addr}"));
            let count = Arc::new(AtomicU64::new(0));
            counts.push(count.clone());
            let accepted = connections.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    accepted.fetch_add(1, Ordering::Relaxed);
                    let count = count.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |req| {
                            let count = count.clone();
                            async move { Ok::<_, Infallible>(answer(req, settings, count).await) }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .keep_alive(true)
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }));
        }
        FastMock {
            urls,
            counts,
            connections,
            tasks,
        }
    }

    /// Connections accepted so far, over all endpoints.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Requests answered, by endpoint.
    pub fn counts(&self) -> Vec<u64> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_has_its_pieces() {
        let p = pieces("hi there", 6);
        assert_eq!(p.len(), 6);
        assert_eq!(p.concat(), "answer to: hi there word4 word5");
        assert_eq!(expected_content("a b c d e f", 3), "answer to: a");
    }
}
