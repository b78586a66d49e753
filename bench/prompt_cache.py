#!/usr/bin/env python3
"""How much faster an inference server answers prompts it has seen: the
agentic prompts of fixtures/prompts/tool_use_rendered.jsonl (rendered with
Qwen3's chat template, about 450 tokens each) sent as completions, 40 at a
time, 8 in flight, each batch twice in a row. Prints records/s and the
prompt tokens the server says it took from its cache (llama.cpp's
`timings.cache_n`; `usage.prompt_tokens_details.cached_tokens` elsewhere).

    scripts/local-backend start --port 8088
    python3 bench/prompt_cache.py http://127.0.0.1:8088 [ROUNDS]

Python 3 standard library only. BENCHMARKS.md ("Prompts the server has
seen") has the figures.
"""
import concurrent.futures as cf
import json
import os
import sys
import time
import urllib.request

URL = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "fixtures", "prompts", "tool_use_rendered.jsonl")


def prompts():
    """One rendering per conversation (its first template's)."""
    seen, texts = set(), []
    for line in open(FIXTURE, encoding="utf-8"):
        row = json.loads(line)
        if "expected" in row and row["id"] not in seen:
            seen.add(row["id"])
            texts.append(row["expected"])
    return texts


def ask(text, max_tokens=96):
    body = json.dumps({"model": "m", "prompt": text, "max_tokens": max_tokens,
                       "temperature": 0.7, "top_p": 0.9}).encode()
    request = urllib.request.Request(URL + "/v1/completions", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as r:
        return json.load(r)


def cached(answer):
    timings = answer.get("timings") or {}
    if "cache_n" in timings:
        return timings["cache_n"], timings["cache_n"] + timings.get("prompt_n", 0)
    usage = answer.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return details.get("cached_tokens", 0), usage.get("prompt_tokens", 0)


def batch(name, texts, concurrency=8):
    began = time.monotonic()
    hit = total = 0
    with cf.ThreadPoolExecutor(concurrency) as pool:
        for answer in pool.map(ask, texts):
            c, t = cached(answer)
            hit, total = hit + c, total + t
    elapsed = time.monotonic() - began
    print(f"{name}: {len(texts)} records in {elapsed:.1f} s, {len(texts) / elapsed:.2f} records/s, "
          f"{hit} of {total} prompt tokens cached", flush=True)
    return len(texts) / elapsed


def main():
    texts = prompts()
    for r in range(ROUNDS):
        part = texts[40 * r:40 * r + 40]
        if len(part) < 40:
            break
        first = batch(f"round {r + 1}, first time", part)
        again = batch(f"round {r + 1}, asked again", part)
        print(f"round {r + 1}: again / first = {again / first:.1f}x", flush=True)


if __name__ == "__main__":
    main()
