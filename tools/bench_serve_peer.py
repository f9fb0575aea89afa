#!/usr/bin/env python3
"""Concurrency sweep of `vllm-cpp bench serve` against vllm-cpp and, optionally, a peer
OpenAI-compatible server (vLLM, llama.cpp's llama-server, ...) measured by the same client in
the same run; writes one vLLM-style result JSON per (engine, concurrency) and a PNG plot.

  tools/bench_serve_peer.py --binary build/vllm-cpp --concurrency 1,4,16 \
      --peer-url http://127.0.0.1:8080 --peer-name llama.cpp --out-dir out/bench_serve
  (a peer for SmolLM2 on CPU: python3 -m llama_cpp.server --model MODEL.gguf --port 8080)
  tools/bench_serve_peer.py --plot-only out/bench_serve     # re-plot saved results

Without --url, the script starts `vllm-cpp serve MODEL` itself (extra flags: --serve-args).
"""
import argparse
import glob
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url, proc, timeout=120):
    """Polls GET /v1/models (every OpenAI-compatible server has it; /health is not universal)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"{url} did not become healthy")


def run_sweep(args, engine, url, model, tokenizer_url):
    paths = []
    for c in args.concurrency:
        name = f"{engine}-c{c}.json"
        cmd = [args.binary, "bench", "serve", "--base-url", url, "--num-prompts",
               str(max(args.num_prompts, c)), "--random-input-len", str(args.input_len),
               "--random-output-len", str(args.output_len), "--max-concurrency", str(c),
               "--seed", str(args.seed), "--ignore-eos", "--save-result",
               "--result-dir", args.out_dir, "--result-filename", name,
               # Text prompts from vllm-cpp's /detokenize: the same bytes reach every engine.
               "--random-prompt-format", "text", "--tokenizer-url", tokenizer_url]
        if model:
            cmd += ["--model", model]
        if args.endpoint:
            cmd += ["--endpoint", args.endpoint]
        print("$", shlex.join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        paths.append(os.path.join(args.out_dir, name))
    return paths


def load_results(out_dir):
    """engine -> sorted [(concurrency, result dict)] from <engine>-c<N>.json files."""
    by_engine = {}
    for path in glob.glob(os.path.join(out_dir, "*-c*.json")):
        engine, _, rest = os.path.basename(path).rpartition("-c")
        with open(path) as f:
            by_engine.setdefault(engine, []).append((int(rest[:-5]), json.load(f)))
    return {e: sorted(rs, key=lambda x: x[0]) for e, rs in by_engine.items()}


def print_table(results):
    cols = ["output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms",
            "p99_e2el_ms"]
    print(f"{'engine':<14}{'conc':>6}" + "".join(f"{c:>20}" for c in cols))
    for engine, rows in results.items():
        for c, r in rows:
            print(f"{engine:<14}{c:>6}" + "".join(f"{r.get(k, 0):>20.2f}" for k in cols))
    engines = list(results)
    if len(engines) == 2:
        a, b = (dict(results[e]) for e in engines)
        for c in sorted(set(a) & set(b)):
            ratio = a[c]["output_throughput"] / max(b[c]["output_throughput"], 1e-9)
            print(f"concurrency {c}: {engines[0]} / {engines[1]} output throughput = {ratio:.2f}x")


def plot(results, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    panels = [("output_throughput", "output tokens/s"), ("median_ttft_ms", "median TTFT (ms)"),
              ("median_tpot_ms", "median TPOT (ms)"), ("p99_e2el_ms", "p99 E2E latency (ms)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for ax, (key, label) in zip(axes, panels):
        for engine, rows in results.items():
            ax.plot([c for c, _ in rows], [r.get(key, 0) for _, r in rows], marker="o",
                    label=engine)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("max concurrency")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"wrote {png}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default="build/vllm-cpp")
    p.add_argument("--model", default="", help="model for `vllm-cpp serve` (default: embedded)")
    p.add_argument("--serve-args", default="", help="extra flags for `vllm-cpp serve`")
    p.add_argument("--url", default="", help="an already running vllm-cpp server")
    p.add_argument("--peer-url", default="", help="a peer OpenAI-compatible server")
    p.add_argument("--peer-name", default="peer")
    p.add_argument("--peer-model", default="", help="model name the peer serves")
    p.add_argument("--endpoint", default="", help="default /v1/completions")
    p.add_argument("--concurrency", default="1,2,4,8,16",
                   type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="out/bench_serve")
    p.add_argument("--plot-only", default="", help="re-plot the JSON files in this directory")
    args = p.parse_args()

    if args.plot_only:
        results = load_results(args.plot_only)
        print_table(results)
        plot(results, os.path.join(args.plot_only, "bench_serve.png"))
        return
    os.makedirs(args.out_dir, exist_ok=True)
    proc = None
    url = args.url
    if not url:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [args.binary, "serve", *([args.model] if args.model else []), "--port", str(port),
               *shlex.split(args.serve_args)]
        print("$", shlex.join(cmd), flush=True)
        proc = subprocess.Popen(cmd, stderr=open(os.path.join(args.out_dir, "serve.log"), "w"))
    try:
        wait_healthy(url, proc)
        run_sweep(args, "vllm-cpp", url, "", url)
        if args.peer_url:
            wait_healthy(args.peer_url, None)
            run_sweep(args, args.peer_name, args.peer_url, args.peer_model, url)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    results = load_results(args.out_dir)
    print_table(results)
    plot(results, os.path.join(args.out_dir, "bench_serve.png"))


if __name__ == "__main__":
    main()
