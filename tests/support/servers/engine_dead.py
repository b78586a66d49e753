#!/usr/bin/env python3
"""A test server that breaks as vLLM does when its engine dies (vLLM #7633,
#42363): /health keeps answering 200 while every completion fails with a
500 EngineDeadError. For the daemon's server supervision tests
(tests/e2e/servers.rs), which start it as a spec's server.

    engine_dead.py --port PORT --state FILE --healthy N

Its first start answers N completions and then fails every one; a later
start (FILE says how many there were) answers them all. OpenAI's chat API,
not streamed: {"choices": [{"message": {"content": "answer to <last user
message>"}}], "usage": ...}. Python 3 standard library only.
"""
import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--state", required=True)
ap.add_argument("--healthy", type=int, default=10)
args = ap.parse_args()

starts = int(open(args.state).read()) if os.path.exists(args.state) else 0
starts += 1
with open(args.state, "w") as f:
    f.write(str(starts))
answered = 0
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.send(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self.send(200, {"object": "list", "data": [{"id": "mock", "object": "model", "owned_by": "engine-dead-test"}]})
        else:
            self.send(404, {"error": "not found"})

    def do_POST(self):
        global answered
        length = int(self.headers.get("content-length", 0))
        request = json.loads(self.rfile.read(length) or b"{}")
        with lock:
            dead = starts == 1 and answered >= args.healthy
            if not dead:
                answered += 1
        if dead:
            print("EngineDeadError: the engine loop has died", flush=True)
            self.send(500, {"error": {"message": "EngineDeadError: the engine loop has died", "type": "InternalServerError", "code": 500}})
            return
        if self.path == "/v1/completions":
            text = "k"
            self.send(200, {"id": "c", "object": "text_completion", "model": "mock",
                            "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
            return
        last = next((m.get("content") for m in reversed(request.get("messages", [])) if m.get("role") == "user"), "")
        self.send(200, {"id": "c", "object": "chat.completion", "model": "mock",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": f"answer to {last}"},
                                     "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}})


print(f"engine_dead: start {starts} on port {args.port}", flush=True)
ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
