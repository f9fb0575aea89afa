#!/usr/bin/env python3
"""A GGUF model's prefill/decode on the CPU: vllm-cpp vs llama.cpp on the same GGUF, alternating runs
so both see the same machine state. Prints a markdown table row per engine (median of the
rounds) and the load average.

    python3 tools/bench_cpu.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf] [--threads 2]
        [--ours-args '--cpu-order llamacpp']
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--ours-args", default="",
                    help="extra flags for vllm-cpp bench latency, e.g. '--cpu-order llamacpp'")
    a = ap.parse_args()
    common = ["--input-len", str(a.input_len), "--output-len", str(a.output_len),
              "--threads", str(a.threads)]
    ours_cmd = [os.environ.get("VLLM_CPP_BIN", os.path.join(ROOT, "build/vllm-cpp")), "bench", "latency", "-m", a.model,
                "--repeats", "2"] + common + a.ours_args.split()
    peer_cmd = [sys.executable, os.path.join(ROOT, "tools/bench_llamacpp.py"), a.model,
                "--repeats", "2"] + common
    res = {"vllm-cpp": [], "llama.cpp": []}
    for _ in range(a.rounds):
        res["vllm-cpp"].append(run(ours_cmd))
        res["llama.cpp"].append(run(peer_cmd))
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("prefill_tok_s", "decode_tok_s", "peak_rss_mb")}
           for k, v in res.items()}
    print(f"load average after: {os.getloadavg()}")
    print("| engine | prefill tok/s | decode tok/s | peak RSS MB |")
    print("|---|---|---|---|")
    for k, m in med.items():
        print(f"| {k} | {m['prefill_tok_s']:.1f} | {m['decode_tok_s']:.1f} | {m['peak_rss_mb']:.0f} |")
    o, p = med["vllm-cpp"], med["llama.cpp"]
    print(f"| ratio (ours / llama.cpp) | {o['prefill_tok_s'] / p['prefill_tok_s']:.2f} | "
          f"{o['decode_tok_s'] / p['decode_tok_s']:.2f} | {o['peak_rss_mb'] / p['peak_rss_mb']:.2f} |")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
