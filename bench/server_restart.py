#!/usr/bin/env python3
"""How long a generation goes without records when its server dies: the
time from a kill -9 of the server the daemon runs to the first record the
restarted server answers, next to that server's own start-up time (its
"ready after" in the task's history). BENCHMARKS.md ("A server the daemon
runs") has the figures.

    cargo build --release --locked -p todod -p todoctl
    bench/server_restart.py [KILLS]        # 5 kills by default

A fresh daemon in a temporary state directory runs one generation of 2,000
short prompts on llama.cpp's llama-server (scripts/local-backend serve,
8 slots, restart_backoff_seconds 0), and the server is killed KILLS times,
each once the restarted one has written records again. Records are watched
in the output file (a line is appended when its answer arrives, before its
checkpoint), every 20 ms. Python 3 standard library only.
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release")
KILLS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def server_pid(state):
    d = os.path.join(state, "servers")
    for name in os.listdir(d) if os.path.isdir(d) else []:
        if name.endswith(".json"):
            try:
                return json.load(open(os.path.join(d, name)))["pid"]
            except (OSError, ValueError, KeyError):
                pass
    return None


def main():
    work = tempfile.mkdtemp(prefix="server-restart-")
    state = os.path.join(work, "state")
    prompts = os.path.join(work, "prompts.jsonl")
    out = os.path.join(work, "out.jsonl")
    with open(prompts, "w") as f:
        for i in range(2000):
            f.write(json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"question {i}"}]}) + "\n")
    script = os.path.join(ROOT, "scripts", "local-backend")
    spec = {"prompts": prompts, "output": out, "endpoints": ["server:local"], "model": "smollm2",
            "max_tokens": 8, "concurrency": 8,
            "servers": {"local": {"command": [script, "serve", "--port", "{port}", "--parallel", "8"],
                                  "restart_backoff_seconds": 0, "max_restarts": KILLS + 1}}}
    env = dict(os.environ, TODOD_ADDR=f"unix:{state}/todod.sock", RUST_LOG="warn")
    daemon = subprocess.Popen([os.path.join(BIN, "todod"), "--state-dir", state, "--listen", "none",
                               "--allow-server-command", script], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ctl = lambda *a: subprocess.run([os.path.join(BIN, "todoctl"), *a], env=env, check=True,
                                    capture_output=True, text=True).stdout
    try:
        ctl("ping", "--wait", "30s")
        ctl("plan", "create", "bench")
        task = ctl("add", "generate", "-p", "bench", "--kind", "generation", "--spec", json.dumps(spec)).strip()
        gaps = []
        for k in range(KILLS):
            # Running, with records coming.
            start = lines(out)
            while lines(out) < start + 20:
                time.sleep(0.02)
            pid = server_pid(state)
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            # Ready again: another process, answering (ListServers).
            while True:
                listed = json.loads(ctl("servers", "--json"))["servers"]
                if listed and listed[0]["state"] == "ready" and listed[0]["pid"] not in (0, pid):
                    break
                time.sleep(0.02)
            ready_at = time.monotonic()
            after = lines(out)
            while lines(out) <= after:
                time.sleep(0.02)
            first = time.monotonic()
            gaps.append((first - killed, ready_at - killed, first - ready_at))
        events = json.loads(ctl("show", task, "--json", "--all-events"))
        text = json.dumps(events)
        ready = [float(x) for x in re.findall(r"ready after ([0-9.]+) s", text)]
        print(f"kills: {KILLS}")
        backoffs = re.findall(r"restarting \([0-9]+ of [0-9]+ within [^)]*\) in ([0-9a-z]+)", text)
        print("kill  backoff  kill->ready  of it start-up  ready->first record  kill->first record")
        for k, (whole, to_ready, to_first) in enumerate(gaps):
            print(f"{k + 1:>4}  {backoffs[k] if k < len(backoffs) else '?':>7}  {to_ready:>10.2f}s"
                  f"  {ready[k + 1] if k + 1 < len(ready) else float('nan'):>14.1f}s"
                  f"  {to_first:>18.2f}s  {whole:>17.2f}s")
        print(f"median ready->first record {statistics.median(g[2] for g in gaps):.2f} s; "
              f"median start-up {statistics.median(ready):.1f} s")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait()


if __name__ == "__main__":
    main()
