#!/usr/bin/env python3
"""Tokenizer encode throughput, one thread: vllm-cpp (build/bench_tokenizer) vs HF `tokenizers`
on the same lines: the fixture corpus (fixtures/tokenizer/corpus.jsonl, multilingual, code,
whitespace) repeated to about SIZE MB, each line encoded on its own.

    python3 tools/bench_tokenizer.py [--size-mb 4] [--tokenizers ../shared/tokenizers/llama3 ...]
"""
import argparse
import json
import os
import random
import subprocess
import tempfile
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=float, default=4)
    ap.add_argument("--tokenizers", nargs="*", default=[
        os.path.join(ROOT, "../shared/tokenizers", n) for n in ("llama3", "qwen3", "gemma3", "llama2")])
    a = ap.parse_args()
    from tokenizers import Tokenizer
    rows = [json.loads(l) for l in open(os.path.join(ROOT, "fixtures/tokenizer/corpus.jsonl"))]
    corpus = [r["t"] for r in rows if "t" in r]  # lines with invalid UTF-8 are stored as bytes
    corpus = [t for t in corpus if t]
    rng = random.Random(0)
    lines, size = [], 0
    while size < a.size_mb * 1e6:
        t = rng.choice(corpus)
        lines.append(t)
        size += len(t.encode())
    print(f"{len(lines)} lines, {size / 1e6:.1f} MB")
    print("| tokenizer | vllm-cpp MB/s | HF encode() per line MB/s | HF encode_batch() MB/s (1 thread) | ratio to the faster HF |")
    print("|---|---|---|---|---|")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for t in lines:
            f.write(json.dumps(t) + "\n")
        path = f.name
    for tdir in a.tokenizers:
        out = subprocess.run([os.path.join(ROOT, "build/bench_tokenizer"), tdir, path, "3"],
                             capture_output=True, text=True, check=True).stdout
        ours = json.loads(out)["mb_s"]
        hf = Tokenizer.from_file(os.path.join(tdir, "tokenizer.json"))
        best = 1e30
        for _ in range(3):
            t0 = time.perf_counter()
            for t in lines:
                hf.encode(t, add_special_tokens=False)
            best = min(best, time.perf_counter() - t0)
        per_line = size / best / 1e6
        best = 1e30
        for _ in range(3):  # one call for all lines: no Python overhead per line
            t0 = time.perf_counter()
            hf.encode_batch(lines, add_special_tokens=False)
            best = min(best, time.perf_counter() - t0)
        batch = size / best / 1e6
        print(f"| {os.path.basename(tdir)} | {ours:.1f} | {per_line:.1f} | {batch:.1f} | "
              f"{ours / max(per_line, batch):.2f} |")
    os.unlink(path)


if __name__ == "__main__":
    main()
