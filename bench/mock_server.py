#!/usr/bin/env python3
"""A fast OpenAI-compatible mock inference server, for benchmarks.

It answers instantly, so whatever a benchmark measures against it is the
client's own cost (todod, or the baseline script) plus this server's floor,
which `wrk` measures on its own (see bench/README.md).

    python3 bench/mock_server.py [--port 0] [--host 127.0.0.1] [--coalesce]

--coalesce sends a streamed answer in one write instead of one per event
(the framing is the same): the server's own floor, not a realistic stream.

Once it accepts connections it prints exactly one line to stdout,
`listening on http://HOST:PORT` (port 0 picks a free one), then serves until
SIGTERM or SIGINT, on which it exits with status 0.

What it answers, the same as the Rust test mock (tests/support/mock_openai.rs):

- POST /v1/chat/completions and POST /v1/completions. The content is
  `"answer to: " + input`, where input is the last message's `content` (chat)
  or the `prompt` string (completions).
- usage: prompt_tokens = the input's whitespace-separated words;
  completion_tokens = the content's pieces when split after each space (Rust's
  `split_inclusive(' ')`), which are also the streamed deltas.
- `"stream": true`: a chunked `text/event-stream`, one SSE event per HTTP chunk:
  one per piece, a final one with `finish_reason: "stop"`, the usage event
  (`"choices": []`) when `stream_options.include_usage` is true, and
  `data: [DONE]`. `max_tokens` and sampling parameters are ignored.
- GET /v1/models lists the one model `mock-model`; anything else is a 404.

Only the Python 3.11 standard library: one asyncio.Protocol per connection,
HTTP/1.1 keep-alive, request bodies by Content-Length (pipelined requests are
answered in order, as a side effect of the parse loop). No flow control toward
slow readers: a benchmark client reads everything, and answers are small.
"""
import argparse
import asyncio
import itertools
import json
import signal
import socket
import time

def split_inclusive(text: str) -> list[str]:
    """The pieces of a text split after each space, like Rust's
    `split_inclusive(' ')`: the Rust test mock's tokens."""
    # str.split with the separator put back is about 1.6x as fast as
    # re.findall here, and it runs on every request.
    parts = text.split(" ")
    pieces = [p + " " for p in parts[:-1]]
    if parts[-1]:
        pieces.append(parts[-1])
    return pieces


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# A str as a JSON string literal: the C function json.dumps ends in, without
# the encoder object it builds on every call.
_quote = json.encoder.encode_basestring
# json.loads on bytes first sniffs their encoding; a str is twice as fast.
_decode = json.JSONDecoder().decode
_ids = itertools.count(1)

_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found",
            405: b"Method Not Allowed", 411: b"Length Required",
            413: b"Payload Too Large"}
_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024
_MODELS = _dumps({"object": "list", "data": [
    {"id": "mock-model", "object": "model", "created": 0, "owned_by": "mock"}]}).encode()

# Templates of the answers, compact JSON as the servers send it. Their %s
# fields are JSON already (quoted strings, the usage object).
_USAGE = '{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}'
_CHAT_ANSWER = ('{"id":"chatcmpl-%d","object":"chat.completion","created":%d,"model":%s,'
                '"choices":[{"index":0,"message":{"role":"assistant","content":%s},'
                '"finish_reason":"stop"}],"usage":%s}')
_TEXT_ANSWER = ('{"id":"cmpl-%d","object":"text_completion","created":%d,"model":%s,'
                '"choices":[{"index":0,"text":%s,"logprobs":null,"finish_reason":"stop"}],'
                '"usage":%s}')
# An event is a head (id, object, created, model) and one of the tails.
_CHAT_EVENT_HEAD = 'data: {"id":"chatcmpl-%d","object":"chat.completion.chunk","created":%d,"model":%s,'
_TEXT_EVENT_HEAD = 'data: {"id":"cmpl-%d","object":"text_completion","created":%d,"model":%s,'
_CHAT_PIECE = '"choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}\n\n'
_TEXT_PIECE = '"choices":[{"index":0,"text":%s,"logprobs":null,"finish_reason":null}]}\n\n'
_CHAT_STOP = '"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
_TEXT_STOP = '"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop"}]}\n\n'
_USAGE_EVENT = '"choices":[],"usage":%s}\n\n'
_STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
_DONE_CHUNK = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"  # [DONE], then the last chunk


def _input_of(body: dict, chat: bool) -> str:
    """The last message's content (chat) or the prompt; "" if it is not a
    string (content parts, a list of prompts)."""
    if chat:
        messages = body.get("messages")
        last = messages[-1] if isinstance(messages, list) and messages else None
        content = last.get("content") if isinstance(last, dict) else None
    else:
        content = body.get("prompt")
    return content if isinstance(content, str) else ""


def error_body(status: int, message: str) -> bytes:
    """An OpenAI-style error body. Shared with bench/aiohttp_server.py."""
    return _dumps({"error": {"message": message, "type": "invalid_request_error",
                             "code": status}}).encode()


def build_answer(raw: bytes, chat: bool):
    """The answer to a request body: the JSON body (bytes) of an answer not
    streamed, or the SSE events (a list of bytes, without the final
    `data: [DONE]`) of a streamed one. A ValueError for a body that is not a
    JSON object. Shared with bench/aiohttp_server.py."""
    body = _decode(raw.decode())
    if not isinstance(body, dict):
        raise ValueError("the body is not a JSON object")
    text = _input_of(body, chat)
    model = body.get("model")
    model = _quote(model if isinstance(model, str) else "mock-model")
    content = "answer to: " + text
    pieces = split_inclusive(content)
    prompt_tokens = len(text.split())
    usage = _USAGE % (prompt_tokens, len(pieces), prompt_tokens + len(pieces))
    n = next(_ids)
    created = int(time.time())

    # The answers are JSON text put together from templates: the only
    # values that need escaping are the model and the content pieces, and
    # json.dumps of a dict per event was a third of a streamed request's
    # CPU time.
    if body.get("stream") is not True:
        template = _CHAT_ANSWER if chat else _TEXT_ANSWER
        return (template % (n, created, model, _quote(content), usage)).encode()

    head = (_CHAT_EVENT_HEAD if chat else _TEXT_EVENT_HEAD) % (n, created, model)
    piece = _CHAT_PIECE if chat else _TEXT_PIECE
    events = [head + piece % _quote(p) for p in pieces]
    events.append(head + (_CHAT_STOP if chat else _TEXT_STOP))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        events.append(head + _USAGE_EVENT % usage)
    return [e.encode() for e in events]


class MockHttp(asyncio.Protocol):
    """One connection: buffer bytes, answer every complete request in it."""

    __slots__ = ("transport", "buf", "pending", "coalesce")

    def __init__(self, coalesce: bool):
        self.transport = None
        self.buf = bytearray()
        self.pending = None  # the parsed head of a request whose body is not all here
        self.coalesce = coalesce

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.transport = None

    def data_received(self, data: bytes):
        buf = self.buf
        buf += data
        # A loop, not one parse: a read may hold more than one request.
        while self.transport is not None and not self.transport.is_closing():
            if self.pending is None:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > _MAX_HEAD:
                        self._error(413, "request head too large", close=True)
                    return
                head = bytes(buf[:end]).decode("latin-1")
                del buf[:end + 4]
                # The head is parsed once: a large body comes in many reads.
                self.pending = self._parse_head(head)
                if self.pending is None:
                    return  # answered with an error and closed
            method, path, length, keep_alive = self.pending
            if len(buf) < length:
                return  # wait for the rest of the body
            body = bytes(buf[:length])
            del buf[:length]
            self.pending = None
            self._answer(method, path, body)
            if not keep_alive and self.transport is not None:
                self.transport.close()

    def _parse_head(self, head: str):
        """(method, path, body length, keep-alive) of a request head, or None
        after answering an error."""
        lines = head.split("\r\n")
        request_line = lines[0].split(" ")
        if len(request_line) != 3:
            self._error(400, "bad request line", close=True)
            return None
        method, target, version = request_line
        length = 0
        keep_alive = version == "HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                try:
                    length = int(value)
                except ValueError:
                    self._error(400, "bad content-length", close=True)
                    return None
            elif name == "connection":
                value = value.strip().lower()
                keep_alive = value == "keep-alive" or (keep_alive and value != "close")
            elif name == "transfer-encoding":
                # Clients send JSON bodies with a Content-Length; a chunked
                # request body would need a decoder nothing here uses.
                self._error(411, "send a content-length", close=True)
                return None
            elif name == "expect" and value.strip().lower() == "100-continue":
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if length < 0 or length > _MAX_BODY:
            self._error(413, "body too large", close=True)
            return None
        return method, target.partition("?")[0], length, keep_alive

    def _answer(self, method: str, path: str, raw: bytes):
        if path == "/v1/chat/completions":
            chat = True
        elif path == "/v1/completions":
            chat = False
        elif path == "/v1/models" and method == "GET":
            self._send(200, b"application/json", _MODELS)
            return
        else:
            self._error(404, f"no route for {method} {path}")
            return
        if method != "POST":
            self._error(405, "use POST")
            return
        try:
            answer = build_answer(raw, chat)
        except ValueError as e:  # also a UnicodeDecodeError or a JSONDecodeError
            self._error(400, f"bad request body: {e}")
            return
        if isinstance(answer, bytes):
            self._send(200, b"application/json", answer)
            return
        chunks = []
        for event in answer:
            chunks.append(b"%x\r\n%s\r\n" % (len(event), event))  # one HTTP chunk
        chunks.append(_DONE_CHUNK)

        if self.coalesce:
            # One send for the whole answer: the server's floor, not how a real
            # server behaves (it flushes each token as it is generated).
            self.transport.write(_STREAM_HEAD + b"".join(chunks))
        else:
            # The head, then one write (one send, as TCP_NODELAY is on) per
            # event, so the client sees events arrive separately.
            transport = self.transport
            transport.write(_STREAM_HEAD)
            for chunk in chunks:
                if transport.is_closing():
                    # The peer is gone (wrk drops its connections at the end):
                    # asyncio would log a warning for every further write.
                    return
                transport.write(chunk)

    def _send(self, status: int, kind: bytes, payload: bytes, close: bool = False):
        head = b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n" % (
            status, _REASONS[status], kind, len(payload))
        if close:
            head += b"connection: close\r\n"
        self.transport.write(head + b"\r\n" + payload)
        if close:
            self.transport.close()

    def _error(self, status: int, message: str, close: bool = False):
        self._send(status, b"application/json", error_body(status, message), close=close)


async def serve(host: str, port: int, coalesce: bool) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A deep backlog: wrk opens all its connections at once.
    server = await loop.create_server(lambda: MockHttp(coalesce), host, port,
                                      backlog=1024)
    bound = next(s for s in server.sockets if s.family in (socket.AF_INET, socket.AF_INET6))
    shown = bound.getsockname()[0]
    if ":" in shown:
        shown = f"[{shown}]"
    print(f"listening on http://{shown}:{bound.getsockname()[1]}", flush=True)
    await stop.wait()
    server.close()
    # Not wait_closed(): in 3.11 it does not wait for open connections anyway,
    # and idle keep-alive connections would have nothing to finish.


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--coalesce", action="store_true",
                        help="write each streamed answer in one send (still one chunk per event)")
    args = parser.parse_args()
    asyncio.run(serve(args.host, args.port, args.coalesce))


if __name__ == "__main__":
    main()
