#!/usr/bin/env python3
"""How much llama.cpp's own logits depend on how the same tokens are fed, for the SmolLM2
fixture prompts (fixtures/smollm2/llamacpp_greedy.json): each prompt plus llama.cpp's greedy
continuation is evaluated once in one batch (n_batch 512, what generation does for a prompt)
and once a token at a time (n_batch 1, what it does for generated tokens), with 2 threads and
1 thread. Prints, per prompt: the first position where the schedules differ; the largest
|logprob difference| over the vocabulary; and what greedy decoding sees, the change in the gap
between the batch run's top two tokens (largest, and median over positions).

Both runs are llama.cpp (llama-cpp-python, f16 K/V cache, flash attention off); nothing of
ours is involved. The figure bounds how closely any other implementation can be expected to
follow llama.cpp's greedy path without reproducing its kernels bit for bit.

    python3 tools/llamacpp_schedule_noise.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import argparse
import json

import numpy as np
from llama_cpp import Llama


def logprobs(model, ids, n_batch, threads):
    llm = Llama(model, n_ctx=512, n_threads=threads, n_batch=n_batch, logits_all=True,
                verbose=False)
    llm.eval(ids)
    logits = np.array(llm.scores[: len(ids)], dtype=np.float64)
    top = logits.max(axis=1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--fixture", default="fixtures/smollm2/llamacpp_greedy.json")
    args = ap.parse_args()
    cases = json.load(open(args.fixture))["cases"]
    worst_all = 0.0
    for case in cases:
        ids = case["prompt_ids"] + case["greedy_ids"]
        batch = logprobs(args.model, ids, 512, 2)
        single = logprobs(args.model, ids, 1, 2)
        one_thread = logprobs(args.model, ids, 512, 1)
        diff = np.abs(batch - single).max(axis=1)
        order = np.argsort(-batch, axis=1)[:, :2]
        rows = np.arange(len(ids))
        gap_batch = batch[rows, order[:, 0]] - batch[rows, order[:, 1]]
        gap_single = single[rows, order[:, 0]] - single[rows, order[:, 1]]
        gap_change = np.abs(gap_batch - gap_single)
        first = int(np.argmax(diff > 0)) if (diff > 0).any() else None
        worst_all = max(worst_all, float(diff.max()))
        print(json.dumps({
            "prompt": case["prompt"], "positions": len(ids),
            "first_position_differing": first,
            "max_abs_logprob_diff_batch_vs_single": round(float(diff.max()), 5),
            "max_top2_gap_change": round(float(gap_change.max()), 5),
            "median_top2_gap_change": round(float(np.median(gap_change)), 5),
            "max_abs_logprob_diff_2_vs_1_threads": round(float(np.abs(batch - one_thread).max()), 5),
        }), flush=True)
    print(json.dumps({"max_over_prompts": round(worst_all, 5)}))


if __name__ == "__main__":
    main()
