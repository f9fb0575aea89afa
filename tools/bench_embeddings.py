#!/usr/bin/env python3
"""Embedding throughput: sentences/s for one batch of short sentences, vllm-cpp `serve`'s
POST /v1/embeddings (HTTP and JSON included) against sentence-transformers' encode() in the
same run on the same machine, alternating in --rounds (never at once). Each round and side:
warm-up, then the median of --repeats timed batches; the figure is the median over rounds. The
two vector sets are compared as a sanity check.

Needs sentence-transformers (torch), so run it from the same separate environment as
tools/make_embedding_fixtures.py:
  /tmp/st/bin/python tools/bench_embeddings.py --bin build/vllm-cpp [--batch 64] [--threads 2]
"""
import argparse
import base64
import concurrent.futures
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


def sentences(n, words=8):
    """n distinct sentences of about `words` words (clauses of 8 words joined)."""
    out = []
    for i in range(n):
        clauses = []
        for c in range(max(1, words // 8)):
            k = i + 7 * c
            clauses.append(f"{SUBJECTS[k % 8]} {VERBS[(k // 8) % 8]} "
                           f"{OBJECTS[(k * 3 + k // 8) % 8]}")
        out.append(" ".join(clauses))
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


class Ours:
    """`vllm-cpp serve MODEL` on a free port, for the life of the benchmark."""

    def __init__(self, binary, model, threads):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [binary, "serve", model, "--port", str(port), "--threads", str(threads)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("vllm-cpp serve did not start")

    def embed(self, texts, split=1, sequential=False):
        """The texts as `split` requests, sent at once (the server batches them together) or
        one after the other."""
        def one(part):
            out = post(self.url + "/v1/embeddings", {"input": part, "encoding_format": "base64"})
            return [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4")
                    for d in out["data"]]
        step = (len(texts) + split - 1) // split
        parts = [texts[i:i + step] for i in range(0, len(texts), step)]
        with concurrent.futures.ThreadPoolExecutor(1 if sequential else len(parts)) as pool:
            return np.stack([v for vs in pool.map(one, parts) for v in vs])

    def close(self):
        self.proc.terminate()
        self.proc.wait(30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/vllm-cpp")
    ap.add_argument("--model", default="models/all-MiniLM-L6-v2")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--words", type=int, default=8, help="words per sentence (multiple of 8)")
    ap.add_argument("--repeats", type=int, default=10, help="timed batches per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two sides")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--split", type=int, default=1,
                    help="send the batch to vllm-cpp as this many concurrent requests")
    ap.add_argument("--sequential", action="store_true",
                    help="with --split: one request after the other instead")
    args = ap.parse_args()
    texts = sentences(args.batch, args.words)
    torch.set_num_threads(args.threads)
    st = SentenceTransformer(args.model, device="cpu")
    ours = Ours(args.bin, args.model, args.threads)
    t_ours, t_st = [], []
    try:
        with torch.inference_mode():
            for _ in range(args.rounds):  # alternate, so both sides see the same machine
                t, v_ours = timed(lambda: ours.embed(texts, args.split, args.sequential),
                                  args.repeats)
                t_ours.append(t)
                t, v_st = timed(lambda: st.encode(texts, batch_size=len(texts),
                                                  convert_to_numpy=True), args.repeats)
                t_st.append(t)
    finally:
        ours.close()
    t_ours, t_st = statistics.median(t_ours), statistics.median(t_st)
    cos = float(np.min(np.sum(v_ours * v_st, axis=1) /
                       (np.linalg.norm(v_ours, axis=1) * np.linalg.norm(v_st, axis=1))))
    print(json.dumps({
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": platform.processor() or platform.machine(), "threads": args.threads,
        "batch": args.batch, "words": args.words, "split": args.split, "sequential": args.sequential, "repeats": args.repeats, "rounds": args.rounds,
        "vllm_cpp_sentences_per_s": round(args.batch / t_ours, 1),
        "sentence_transformers_sentences_per_s": round(args.batch / t_st, 1),
        "ratio": round(t_st / t_ours, 2), "min_cosine": round(cos, 7),
        "torch": torch.__version__, "load_avg": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
