#!/usr/bin/env python3
"""Embedding throughput: sentences/s for one batch of short sentences, vllm-cpp `serve`'s
POST /v1/embeddings (HTTP and JSON included) against sentence-transformers' encode() in the
same run on the same machine, one after the other (never at once). Each side: warm-up, then
the median of --repeats timed batches; the two vector sets are compared as a sanity check.

Needs sentence-transformers (torch), so run it from the same separate environment as
tools/make_embedding_fixtures.py:
  /tmp/st/bin/python tools/bench_embeddings.py --bin build/vllm-cpp [--batch 64] [--threads 2]
"""
import argparse
import base64
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import time
import urllib.request

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

SUBJECTS = ["The cat", "A young woman", "Our new server", "The old bridge", "My neighbour",
            "A small robot", "The committee", "This recipe"]
VERBS = ["quietly watches", "finally repaired", "never forgets", "slowly crosses",
         "happily explains", "carefully measures", "often visits", "suddenly ignored"]
OBJECTS = ["the river at dawn.", "every broken clock.", "a list of old songs.",
           "the noisy street market.", "its first benchmark.", "the long winter.",
           "a map of the city.", "the last train home."]


def sentences(n):
    out = []
    for i in range(n):
        out.append(f"{SUBJECTS[i % 8]} {VERBS[(i // 8) % 8]} {OBJECTS[(i * 3 + i // 8) % 8]}")
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def timed(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def bench_ours(binary, model, texts, repeats, threads):
    port = free_port()
    proc = subprocess.Popen(
        [binary, "serve", model, "--port", str(port), "--threads", str(threads)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        body = {"input": texts, "encoding_format": "base64"}
        t, out = timed(lambda: post(url + "/v1/embeddings", body), repeats)
        vecs = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4")
                         for d in out["data"]])
        return t, vecs
    finally:
        proc.terminate()
        proc.wait(30)


def bench_st(model, texts, repeats, threads):
    torch.set_num_threads(threads)
    st = SentenceTransformer(model, device="cpu")
    with torch.inference_mode():
        return timed(lambda: st.encode(texts, batch_size=len(texts), convert_to_numpy=True),
                     repeats)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/vllm-cpp")
    ap.add_argument("--model", default="models/all-MiniLM-L6-v2")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    texts = sentences(args.batch)
    t_ours, v_ours = bench_ours(args.bin, args.model, texts, args.repeats, args.threads)
    t_st, v_st = bench_st(args.model, texts, args.repeats, args.threads)
    cos = float(np.min(np.sum(v_ours * v_st, axis=1) /
                       (np.linalg.norm(v_ours, axis=1) * np.linalg.norm(v_st, axis=1))))
    print(json.dumps({
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": platform.processor() or platform.machine(), "threads": args.threads,
        "batch": args.batch, "repeats": args.repeats,
        "vllm_cpp_sentences_per_s": round(args.batch / t_ours, 1),
        "sentence_transformers_sentences_per_s": round(args.batch / t_st, 1),
        "ratio": round(t_st / t_ours, 2), "min_cosine": round(cos, 7),
        "torch": torch.__version__, "load_avg": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
