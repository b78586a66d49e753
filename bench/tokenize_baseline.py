#!/usr/bin/env python3
"""Baseline for the tokenization benchmark: Python `tokenizers` and `tiktoken`
batch encoding of the same texts, on the same cores.

  python3 bench/tokenize_baseline.py --texts FILE.jsonl --model DIR --threads N

FILE.jsonl has one {"text": ...} per line. DIR is a model directory:
tokenizer.json (Hugging Face `tokenizers`, `encode_batch`, no special tokens
added, RAYON_NUM_THREADS=N), or tiktoken.model + tokenizer_config.json laid
out as Kimi K2's (`tiktoken.Encoding` with Kimi's pattern and special tokens,
`encode_batch(allowed_special="all", num_threads=N)`). Prints a human line,
then a JSON line {"tokens", "seconds", "tokens_per_second"}; the time covers
encoding only (not reading the file).

Needs: pip install tokenizers tiktoken
"""
import argparse
import base64
import json
import os
import sys
import time

# Kimi K2's split pattern, as its tokenization_kimi.py hard-codes it.
KIMI_PAT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
RESERVED = 256 + 2  # range(base, base + num_reserved_special_tokens + 2), as K2 does


def kimi_encoding(model_dir):
    import tiktoken
    cfg = json.load(open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8"))
    ranks = {}
    for line in open(os.path.join(model_dir, "tiktoken.model"), "rb"):
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    base = len(ranks)
    names = {int(i): t["content"] for i, t in cfg["added_tokens_decoder"].items()}
    specials = {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(base, base + RESERVED)}
    return tiktoken.Encoding(name="kimi", pat_str=cfg.get("pat_str", KIMI_PAT),
                             mergeable_ranks=ranks, special_tokens=specials)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    texts = [json.loads(l)["text"] for l in open(args.texts, encoding="utf-8") if l.strip()]
    if os.path.exists(os.path.join(args.model, "tokenizer.json")):
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)
        from tokenizers import Tokenizer
        tk = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
        tk.encode_batch(texts[:1000], add_special_tokens=False)  # warm-up, starts the pool
        t0 = time.perf_counter()
        out = tk.encode_batch(texts, add_special_tokens=False)
        dt = time.perf_counter() - t0
        tokens = sum(len(e.ids) for e in out)
        what = "tokenizers encode_batch"
    else:
        enc = kimi_encoding(args.model)
        enc.encode_batch(texts[:1000], allowed_special="all", num_threads=args.threads)
        t0 = time.perf_counter()
        out = enc.encode_batch(texts, allowed_special="all", num_threads=args.threads)
        dt = time.perf_counter() - t0
        tokens = sum(map(len, out))
        what = "tiktoken encode_batch"
    print(f"{what}, {args.threads} threads: {len(texts)} texts, {tokens} tokens in {dt:.2f} s, "
          f"{tokens / dt / 1e6:.2f} Mtok/s", file=sys.stderr)
    print(json.dumps({"tokens": tokens, "seconds": dt, "tokens_per_second": tokens / dt}))


if __name__ == "__main__":
    main()
