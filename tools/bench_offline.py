#!/usr/bin/env python3
"""Offline throughput (vLLM's `bench throughput` shape): NUM random prompts of INPUT_LEN token
ids, OUTPUT_LEN tokens each (EOS ignored), through `vllm-cpp generate --input/--output` at each
--max-num-seqs; and llama.cpp (llama-cpp-python, one request at a time: it has no batching
across requests) on the same prompts as the peer. Prints a markdown table.

    python3 tools/bench_offline.py [--num-prompts 64] [--input-len 128] [--output-len 64] [--threads 2]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", default="1,8,32")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(100, 40000, a.input_len)] for _ in range(a.num_prompts)]
    total_tokens = a.num_prompts * (a.input_len + a.output_len)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        inp = os.path.join(d, "in.jsonl")
        with open(inp, "w") as f:
            for p in prompts:
                f.write(json.dumps({"prompt": p, "max_tokens": a.output_len, "temperature": 0,
                                    "ignore_eos": True}) + "\n")
        for c in [int(x) for x in a.concurrency.split(",")]:
            t0 = time.perf_counter()
            subprocess.run([os.path.join(ROOT, "build/vllm-cpp"), "generate", "-m", a.model,
                            "--input", inp, "--output", os.path.join(d, "out.jsonl"),
                            "--max-num-seqs", str(c), "-t", str(a.threads)],
                           check=True, capture_output=True)
            secs = time.perf_counter() - t0
            rows.append((f"vllm-cpp, max-num-seqs {c}", secs))
    from llama_cpp import Llama
    t0 = time.perf_counter()
    llm = Llama(model_path=a.model, n_ctx=a.input_len + a.output_len + 8, n_threads=a.threads,
                n_threads_batch=a.threads, n_batch=a.input_len, verbose=False)
    for p in prompts:
        llm.reset()
        llm.eval(p)
        tok = 198
        for _ in range(a.output_len - 1):
            llm.eval([tok])
    rows.append(("llama.cpp, one at a time", time.perf_counter() - t0))
    peer = total_tokens / rows[-1][1]
    print(f"{a.num_prompts} prompts x ({a.input_len} in + {a.output_len} out), {a.threads} threads; "
          f"load average after: {os.getloadavg()}")
    print("| engine | wall s | total tok/s | output tok/s | vs llama.cpp |")
    print("|---|---|---|---|---|")
    for name, secs in rows:
        tps = total_tokens / secs
        print(f"| {name} | {secs:.2f} | {tps:.0f} | {a.num_prompts * a.output_len / secs:.0f} | {tps / peer:.2f} |")


if __name__ == "__main__":
    main()
