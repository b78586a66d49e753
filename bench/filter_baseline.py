"""The filter's baseline: what a data team runs today, datasketch's MinHash
and MinHashLSH (pip install datasketch) with the same parameters as todod's
filter (128 permutations, 5-word shingles, threshold 0.8, words lowercased
with punctuation dropped) plus an exact-duplicate set, over the same file,
one process. Prints one JSON line: records, kept, seconds, records/s.

    python3 bench/filter_baseline.py completions.jsonl
"""
import json
import re
import sys
import time

from datasketch import MinHash, MinHashLSH

WORD = re.compile(r"[^\W_]+", re.UNICODE)


def main(path):
    started = time.perf_counter()
    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    exact = set()
    records = kept = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            records += 1
            r = json.loads(line)
            if r.get("finish_reason") == "length" or not (r.get("content") or "").strip():
                continue
            words = [w.lower() for w in WORD.findall(r["content"])]
            key = " ".join(words)
            if key in exact:
                continue
            m = None
            if len(words) >= 5:
                m = MinHash(num_perm=128)
                for i in range(len(words) - 4):
                    m.update(" ".join(words[i : i + 5]).encode())
                if lsh.query(m):
                    continue
            exact.add(key)
            if m is not None:
                lsh.insert(r["id"], m)
            kept += 1
    seconds = time.perf_counter() - started
    print(json.dumps({"records": records, "kept": kept, "seconds": seconds,
                      "records_per_second": records / seconds}))


if __name__ == "__main__":
    main(sys.argv[1])
