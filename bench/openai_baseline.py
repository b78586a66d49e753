#!/usr/bin/env python3
"""Baseline for the generation benchmark: a plain script with the official
`openai` package's AsyncOpenAI client, at a fixed concurrency, writing one JSONL
record per prompt. No checkpoints, no durability: the simplest thing people run.

    python3 bench/openai_baseline.py --base-url http://127.0.0.1:PORT/v1 \
        --prompts prompts.jsonl --output out.jsonl --concurrency 64

Prints one line: `records N seconds S records_per_second R`.
"""
import argparse
import asyncio
import json
import time

from openai import AsyncOpenAI


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--model", default="mock-model")
    args = parser.parse_args()

    client = AsyncOpenAI(base_url=args.base_url, api_key="unused", max_retries=3)
    with open(args.prompts) as f:
        prompts = [json.loads(line) for line in f if line.strip()]
    gate = asyncio.Semaphore(args.concurrency)

    async def one(prompt, out):
        async with gate:
            r = await client.chat.completions.create(
                model=args.model, messages=prompt["messages"], max_tokens=32, temperature=0.0
            )
            out.write(json.dumps({
                "id": prompt["id"],
                "content": r.choices[0].message.content,
                "finish_reason": r.choices[0].finish_reason,
                "usage": r.usage.model_dump() if r.usage else None,
            }) + "\n")

    start = time.perf_counter()
    with open(args.output, "w") as out:
        await asyncio.gather(*(one(p, out) for p in prompts))
    seconds = time.perf_counter() - start
    print(f"records {len(prompts)} seconds {seconds:.3f} records_per_second {len(prompts) / seconds:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
