#!/usr/bin/env python3
"""llama.cpp's CPU speed on a GGUF file, measured like `vllm-cpp bench latency`: prefill of
INPUT_LEN prompt tokens, then OUTPUT_LEN greedy decode steps, on THREADS threads.

    python3 tools/bench_llamacpp.py MODEL.gguf [--input-len 512] [--output-len 128] [--threads 2]
Prints one JSON line: prefill_tok_s, decode_tok_s, peak_rss_mb.
"""
import argparse
import json
import resource
import time

import numpy as np
from llama_cpp import Llama


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    llm = Llama(model_path=a.model, n_ctx=a.input_len + a.output_len + 8, n_threads=a.threads,
                n_threads_batch=a.threads, n_batch=a.input_len, n_ubatch=a.input_len,
                verbose=False)
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(100, 40000, a.input_len)]
    best_prefill = best_decode = 0.0
    for _ in range(a.repeats):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        tok = 198
        for _ in range(a.output_len):
            llm.eval([tok])  # a fixed token: the cost of a step does not depend on which
        t2 = time.perf_counter()
        best_prefill = max(best_prefill, a.input_len / (t1 - t0))
        best_decode = max(best_decode, a.output_len / (t2 - t1))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"engine": "llama.cpp (llama-cpp-python)", "prefill_tok_s": round(best_prefill, 1),
                      "decode_tok_s": round(best_decode, 1), "peak_rss_mb": round(rss, 1),
                      "threads": a.threads}))


if __name__ == "__main__":
    main()
