//! The OpenAI-compatible client against the mock server: every fault mode is
//! classified, retried or given up as specified, and no request outlives its
//! deadline.
use std::time::Duration;

use serde_json::{json, Map};
use todod_e2e::mock_openai::{expected_content, Fault, MockOpenAi, Settings};
use todod_inference::{Api, Backoff, CompletionRequest, Failure, InferenceClient, Limits};

fn limits(max_attempts: u32) -> Limits {
    Limits {
        connect_timeout: Duration::from_secs(5),
        deadline: Duration::from_secs(3),
        idle_timeout: Duration::from_millis(500),
        backoff: Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_millis(50),
            retry_after_cap: Duration::from_secs(1),
            max_attempts,
        },
    }
}

fn client(urls: &[&str], max_attempts: u32) -> InferenceClient {
    let urls: Vec<String> = urls.iter().map(|u| u.to_string()).collect();
    InferenceClient::new(&urls, None, limits(max_attempts)).unwrap()
}

fn chat(text: &str, stream: bool) -> CompletionRequest {
    let mut params = Map::new();
    params.insert("temperature".into(), json!(0.7));
    params.insert("max_tokens".into(), json!(64));
    params.insert(
        "chat_template_kwargs".into(),
        json!({"enable_thinking": false}),
    );
    CompletionRequest {
        api: Api::Chat,
        model: "mock-model".into(),
        input: json!([{"role": "user", "content": text}]),
        params,
        stream,
    }
}

fn completion(text: &str, stream: bool) -> CompletionRequest {
    CompletionRequest {
        api: Api::Completions,
        model: "mock-model".into(),
        input: json!(text),
        params: Map::new(),
        stream,
    }
}

#[tokio::test]
async fn both_apis_streamed_or_not_return_content_usage_and_pass_fields_through() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let c = client(&[&mock.url], 1);
    for stream in [false, true] {
        let out = c.complete(&chat("hello there", stream)).await.unwrap();
        assert_eq!(out.completion.content, expected_content("hello there"));
        assert_eq!(out.completion.finish_reason, "stop");
        assert_eq!(out.completion.model, "mock-model");
        assert_eq!(out.completion.reasoning, None);
        assert!(
            out.completion.usage.unwrap().completion_tokens > 0,
            "usage captured"
        );
        assert_eq!(
            (out.attempts, out.endpoint.as_str()),
            (1, mock.url.as_str())
        );

        let out = c.complete(&completion("once upon", stream)).await.unwrap();
        assert_eq!(out.completion.content, expected_content("once upon"));
    }
    let bodies = mock.bodies();
    assert_eq!(bodies[0]["chat_template_kwargs"]["enable_thinking"], false);
    assert_eq!(bodies[0]["temperature"], 0.7);
    assert_eq!(bodies[0]["stream"], false);
    assert_eq!(bodies[2]["stream"], true);
    assert_eq!(bodies[2]["stream_options"]["include_usage"], true);
    assert_eq!(bodies[1]["prompt"], "once upon");
}

#[tokio::test]
async fn reasoning_is_kept_apart_from_the_content() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let c = client(&[&mock.url], 1);
    for stream in [false, true] {
        mock.push([Fault::Reasoning]);
        let out = c.complete(&chat("why", stream)).await.unwrap();
        assert_eq!(out.completion.content, expected_content("why"));
        assert_eq!(
            out.completion.reasoning.as_deref(),
            Some("thinking about why")
        );
    }
}

#[tokio::test]
async fn the_api_key_goes_in_the_authorization_header() {
    let mock = MockOpenAi::start(Settings::default()).await;
    // The daemon reads the variable; the test hands the value over directly,
    // so that no thread of this process sees its environment change.
    let c = InferenceClient::with_key(
        std::slice::from_ref(&mock.url),
        Some(("TODOD_E2E_MOCK_KEY", "sk-test-123")),
        limits(1),
    )
    .unwrap();
    c.complete(&chat("x", false)).await.unwrap();
    assert_eq!(
        mock.authorizations(),
        vec!["Bearer sk-test-123".to_string()]
    );
}

/// Each transient fault fails the first attempt; the second succeeds.
#[tokio::test]
async fn transient_faults_are_retried_and_then_succeed() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let c = client(&[&mock.url], 3);
    let faults = [
        (
            Fault::Status {
                code: 429,
                retry_after: Some(1),
            },
            false,
        ),
        (
            Fault::Status {
                code: 500,
                retry_after: None,
            },
            false,
        ),
        (
            Fault::Status {
                code: 503,
                retry_after: None,
            },
            true,
        ),
        (
            Fault::Status {
                code: 408,
                retry_after: None,
            },
            false,
        ),
        (Fault::CloseWithoutDone, true),
        (Fault::CloseWithoutDone, false),
        (Fault::InvalidJson, true),
        (Fault::InvalidJson, false),
        (Fault::StallMidStream, true),
        (Fault::HangBeforeHeaders, false),
    ];
    for (fault, stream) in faults {
        let before = mock.requests();
        mock.push([fault.clone()]);
        let out = c
            .complete(&chat("retry me", stream))
            .await
            .unwrap_or_else(|e| panic!("{fault:?} (stream {stream}): {e}"));
        assert_eq!(out.attempts, 2, "{fault:?} (stream {stream})");
        assert_eq!(mock.requests() - before, 2, "{fault:?}");
        assert_eq!(out.completion.content, expected_content("retry me"));
    }
}

/// Whether a failure is what a fault should produce.
type Classified = fn(&Failure) -> bool;

/// With one attempt allowed, each fault shows how it was classified.
#[tokio::test]
async fn each_fault_is_classified() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let c = client(&[&mock.url], 1);
    let cases: Vec<(Fault, bool, Classified)> = vec![
        (
            Fault::Status {
                code: 429,
                retry_after: Some(7),
            },
            false,
            |f| matches!(f, Failure::Status { code: 429, retry_after: Some(d), .. } if d.as_secs() == 7),
        ),
        (
            Fault::Status {
                code: 503,
                retry_after: None,
            },
            true,
            |f| matches!(f, Failure::Status { code: 503, .. }),
        ),
        (Fault::HangBeforeHeaders, true, |f| {
            matches!(f, Failure::Timeout { which: "deadline" })
        }),
        (Fault::StallMidStream, true, |f| {
            matches!(f, Failure::Timeout { which: "idle" })
        }),
        (Fault::CloseWithoutDone, true, |f| {
            matches!(f, Failure::Incomplete(_))
        }),
        (Fault::CloseWithoutDone, false, |f| {
            matches!(f, Failure::Incomplete(_))
        }),
        (Fault::InvalidJson, false, |f| {
            matches!(f, Failure::Malformed(_))
        }),
        (Fault::InvalidJson, true, |f| {
            matches!(f, Failure::Malformed(_))
        }),
    ];
    for (fault, stream, check) in cases {
        mock.push([fault.clone()]);
        let failed = c.complete(&chat("x", stream)).await.unwrap_err();
        assert!(
            check(&failed.failure),
            "{fault:?} (stream {stream}): {failed}"
        );
        assert!(failed.failure.is_retryable(), "{fault:?}");
        assert_eq!(failed.attempts, 1);
    }
}

#[tokio::test]
async fn finish_reason_length_is_a_result_not_a_failure() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let c = client(&[&mock.url], 3);
    for stream in [false, true] {
        mock.push([Fault::Length]);
        let out = c.complete(&chat("long", stream)).await.unwrap();
        assert_eq!(
            (out.completion.finish_reason.as_str(), out.attempts),
            ("length", 1)
        );
    }
}

#[tokio::test]
async fn other_client_errors_are_not_retried_and_keep_the_server_message() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let c = client(&[&mock.url], 5);
    for code in [400, 401, 404, 422] {
        let before = mock.requests();
        mock.push([Fault::Status {
            code,
            retry_after: None,
        }]);
        let failed = c.complete(&chat("x", false)).await.unwrap_err();
        assert_eq!(failed.attempts, 1, "{code}");
        assert_eq!(mock.requests() - before, 1);
        match failed.failure {
            Failure::Status {
                code: got, message, ..
            } => {
                assert_eq!(got, code);
                assert_eq!(message, format!("mock says {code}"));
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn attempts_are_bounded() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let c = client(&[&mock.url], 4);
    mock.push(vec![
        Fault::Status {
            code: 500,
            retry_after: None
        };
        10
    ]);
    let failed = c.complete(&chat("x", true)).await.unwrap_err();
    assert_eq!(failed.attempts, 4);
    assert_eq!(mock.requests(), 4);
    assert!(matches!(failed.failure, Failure::Status { code: 500, .. }));
}

#[tokio::test]
async fn a_hung_request_is_abandoned_at_its_deadline() {
    let mock = MockOpenAi::start(Settings::default()).await;
    let c = client(&[&mock.url], 1);
    mock.push([Fault::HangBeforeHeaders, Fault::StallMidStream]);
    let failed = c.complete(&chat("x", false)).await.unwrap_err();
    assert_eq!(failed.failure, Failure::Timeout { which: "deadline" });
    let failed = c.complete(&chat("x", true)).await.unwrap_err();
    assert_eq!(failed.failure, Failure::Timeout { which: "idle" });
    // The client hung up on both: nothing of them is left running.
    mock.wait_abandoned(2).await;
}

#[tokio::test]
async fn a_dead_endpoint_costs_a_retry_and_the_live_one_serves() {
    let mock = MockOpenAi::start(Settings::default()).await;
    // A port this test holds without listening: connecting is refused.
    let closed = todod_e2e::ClosedPort::new();
    let dead = closed.url();
    let c = client(&[&dead, &mock.url], 3);
    let mut attempts = 0;
    for i in 0..10 {
        let out = c.complete(&chat(&format!("n{i}"), false)).await.unwrap();
        assert_eq!(out.endpoint, mock.url);
        attempts += out.attempts;
    }
    // The dead endpoint cost a retry or two at first, then no more.
    assert!(attempts <= 12, "{attempts} attempts for 10 requests");
    assert_eq!(mock.requests(), 10);
}

/// A server that keeps a connection alive after a streamed answer but drops
/// the next request sent on it unanswered, as llama.cpp's server does.
async fn closing_after_streams() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answered = std::sync::Arc::new(AtomicUsize::new(0));
    let count = answered.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut served = 0;
                loop {
                    // One request: headers, then content-length bytes.
                    let mut chunk = [0u8; 4096];
                    let (head_end, length) = loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                            let length = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            break (end + 4, length);
                        }
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    while buf.len() < head_end + length {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..head_end + length);
                    if served == 1 {
                        // The quirk: the connection was kept alive after a
                        // stream, but the next request on it gets no answer,
                        // only the close.
                        return;
                    }
                    served += 1;
                    let chunk = |s: &str| format!("{:x}\r\n{s}\r\n", s.len());
                    let events = [
                        r#"data: {"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#,
                        r#"data: {"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#,
                        "data: [DONE]",
                    ];
                    let mut body = String::new();
                    for e in events {
                        body.push_str(&chunk(&format!("{e}\n\n")));
                    }
                    body.push_str("0\r\n\r\n");
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                                transfer-encoding: chunked\r\nkeep-alive: timeout=5, max=100\r\n\r\n";
                    if socket.write_all(head.as_bytes()).await.is_err()
                        || socket.write_all(body.as_bytes()).await.is_err()
                    {
                        return;
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    (url, answered)
}

#[tokio::test]
async fn a_connection_the_server_closed_after_a_stream_costs_no_attempt() {
    let (url, answered) = closing_after_streams().await;
    // One attempt each, no retries: a request that died on the stale
    // connection must go again by itself.
    let c = client(&[&url], 1);
    for i in 0..6 {
        let out = c
            .complete(&chat(&format!("question {i}"), true))
            .await
            .unwrap_or_else(|f| panic!("request {i}: {f:?}"));
        assert_eq!(out.completion.content, "hi");
        assert_eq!(out.attempts, 1);
    }
    assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), 6);
}

#[tokio::test]
async fn answers_read_to_their_end_leave_their_connection_for_the_next_request() {
    // A response body dropped unread after `[DONE]` closes its connection:
    // at thousands of requests in flight that is a handshake per request
    // and a port in TIME_WAIT each. One connection must serve them all.
    use todod_e2e::fast_mock::{FastMock, FastSettings};
    for stream in [true, false] {
        let mock = FastMock::start(1, FastSettings::default()).await;
        let c = client(&[&mock.urls[0]], 1);
        for i in 0..8 {
            let out = c
                .complete(&chat(&format!("question {i}"), stream))
                .await
                .unwrap_or_else(|f| panic!("request {i}: {f:?}"));
            assert_eq!(
                out.completion.content,
                todod_e2e::fast_mock::expected_content(&format!("question {i}"), 16)
            );
        }
        assert_eq!(mock.counts(), vec![8]);
        assert_eq!(mock.connections(), 1, "streamed: {stream}");
    }
}
