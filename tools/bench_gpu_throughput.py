#!/usr/bin/env python3
"""Offline throughput of `vllm-cpp generate --input/--output` on a GPU (vLLM's
`benchmarks/benchmark_throughput.py` with the random dataset): N prompts of random token ids,
fixed output length, EOS ignored, greedy. Prints one JSON line: rates over the whole process
(load and start-up included) and over the engine's own clock (generation only).

    python3 tools/bench_gpu_throughput.py --bin build/vllm-cpp --model /tmp/models/llama-8b \
        --num-prompts 1000 --input-len 1024 --output-len 128
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--num-prompts", type=int, default=1000)
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--quantization", default="", help="passed on (e.g. fp8)")
    ap.add_argument("--kv-cache-dtype", default="auto", help="passed on (auto, fp8)")
    ap.add_argument("--tensor-parallel-size", type=int, default=1, help="passed on")
    args = ap.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w") as f:
            for _ in range(args.num_prompts):
                ids = [rng.randrange(100, 100000) for _ in range(args.input_len)]
                f.write(json.dumps({"prompt": ids, "max_tokens": args.output_len,
                                    "ignore_eos": True, "temperature": 0}) + "\n")
        cmd = [args.bin, "generate", "--device", args.device, "-m", args.model, "--input", inp,
               "--output", out, "--max-num-seqs", str(args.max_num_seqs),
               "--max-num-batched-tokens", str(args.max_num_batched_tokens),
               "--max-model-len", str(args.input_len + args.output_len)]
        if args.enforce_eager:
            cmd.append("--enforce-eager")
        if args.quantization:
            cmd += ["--quantization", args.quantization]
        if args.kv_cache_dtype != "auto":
            cmd += ["--kv-cache-dtype", args.kv_cache_dtype]
        if args.tensor_parallel_size != 1:
            cmd += ["--tensor-parallel-size", str(args.tensor_parallel_size)]
        t0 = time.perf_counter()
        run = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
        elapsed = time.perf_counter() - t0
        sys.stderr.write(run.stderr)
        if run.returncode != 0:
            sys.exit(f"vllm-cpp generate failed with status {run.returncode}")
        # The engine's own clock (generation only, as vLLM's benchmark_throughput.py times
        # llm.generate): "N requests in Xs: ..." from `generate --input`.
        m = re.search(r"requests in ([0-9.]+)s", run.stderr)
        engine_s = float(m.group(1)) if m else None
        generated = 0
        with open(out) as f:
            for line in f:
                generated += len(json.loads(line)["token_ids"])
    total = args.num_prompts * args.input_len + generated
    print(json.dumps({"engine": "vllm-cpp", "model": args.model, "num_prompts": args.num_prompts,
                      "enforce_eager": args.enforce_eager,
                      "quantization": args.quantization or None,
                      "kv_cache_dtype": args.kv_cache_dtype,
                      "tensor_parallel_size": args.tensor_parallel_size,
                      "input_len": args.input_len, "output_len": args.output_len,
                      "generated_tokens": generated, "elapsed_s": round(elapsed, 2),
                      "total_tok_s": round(total / elapsed, 1),
                      "output_tok_s": round(generated / elapsed, 1),
                      "engine_elapsed_s": engine_s,
                      "engine_total_tok_s": round(total / engine_s, 1) if engine_s else None}),
          flush=True)


if __name__ == "__main__":
    main()
