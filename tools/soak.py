#!/usr/bin/env python3
"""Soak test of a running `vllm-cpp serve` (issue #21 item 7): CLIENTS concurrent clients send
completions and chat requests for DURATION seconds; some streams hang up mid-stream, some
non-streaming requests are abandoned before their answer. Then it checks:

- errors: every request that was not dropped on purpose got a 200 and a well-formed answer
  (a stream ends with [DONE]);
- gauges: at the end every client hangs up on its request in flight at once;
  vllm:num_requests_running and vllm:num_requests_waiting are back to 0 within --settle
  seconds of that (1 s);
- KV cache: vllm:kv_cache_usage_perc is back to 0 (every block returned);
- generation after the clients: vllm:generation_tokens_total grows by at most
  --tokens-after-per-client (2) tokens per client after they left (the engine step running
  then, and one more that may start before the abort reaches the engine), and not at all
  once the gauges are 0;
- RSS drift of the server process (--pid): the resident set after the run minus the one after
  the warm-up (the first --warmup seconds) is at most --max-rss-drift-mib. The KV cache pool
  is allocated at start but its pages become resident when first written, so on a fresh
  server the drift includes the pool's first touches: measure drift on a second run.

Prints a summary (and --json FILE writes it) and exits 1 when a check fails.

    tools/soak.py --port 8000 --pid $(pgrep -f 'vllm-cpp serve') --clients 256 --duration 600 \
        --disconnect 0.3 --stream 0.7 --abandon 0.3

Only the standard library: raw HTTP/1.1 over asyncio sockets (Connection: close), so that a
client can hang up at any byte.
"""
import argparse
import asyncio
import json
import os
import random
import sys
import time
import urllib.request

PROMPTS = ["Once upon a time", "The capital of France is", "Write a poem about the sea.",
           "List three colors:", "def fibonacci(n):", "Explain gravity to a child.",
           "The quick brown fox", "Translate 'good morning' into German."]


class Stats:
    def __init__(self):
        self.requests = {"completed": 0, "stream_disconnected": 0, "abandoned": 0,
                         "cut_at_end": 0}
        self.errors = []
        self.tokens_received = 0  # completion tokens of completed requests (usage)
        self.chunks_before_disconnect = 0

    def error(self, what):
        if len(self.errors) < 20:
            self.errors.append(what)
        else:
            self.errors.append(None)  # counted, not kept


def metrics(base):
    """The first sample of each vllm:* metric (unlabelled value or first label set)."""
    out = {}
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, value = line.rsplit(" ", 1)
            out.setdefault(name_labels.split("{", 1)[0], float(value))
    return out


def rss_mib(pid):
    if not pid:
        return None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def dechunk(body):
    """The payload of a chunked transfer-encoded body (what arrived of it)."""
    out, pos = bytearray(), 0
    while True:
        end = body.find(b"\r\n", pos)
        if end < 0:
            return bytes(out)
        size = int(body[pos:end].split(b";")[0] or b"0", 16)
        if size == 0:
            return bytes(out)
        out += body[end + 2:end + 2 + size]
        pos = end + 2 + size + 2


def split_response(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1]) if lines and lines[0].startswith("HTTP/1.") else 0
    chunked = any(l.lower().startswith("transfer-encoding:") and "chunked" in l.lower()
                  for l in lines[1:])
    return status, dechunk(body) if chunked else body


def make_request(rng, stream, max_tokens, model):
    n = rng.randint(max(1, max_tokens // 4), max_tokens)
    prompt = rng.choice(PROMPTS) + f" ({rng.randrange(10**6)})"
    body = {"max_tokens": n, "temperature": 0.8, "ignore_eos": rng.random() < 0.5}
    if model:
        body["model"] = model
    if rng.random() < 0.5:
        path = "/v1/completions"
        body["prompt"] = prompt
    else:
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": prompt}]
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return path, json.dumps(body).encode()


async def one_request(args, rng, stats, deadline):
    stream = rng.random() < args.stream
    hang_up = stream and rng.random() < args.disconnect
    abandon = not stream and rng.random() < args.abandon
    path, body = make_request(rng, stream, args.max_tokens, args.model)
    try:
        reader, writer = await asyncio.open_connection(args.host, args.port)
    except OSError as e:
        stats.error(f"connect: {e}")
        await asyncio.sleep(0.1)
        return
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: {args.host}\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(body)}\r\nConnection: close"
                     f"\r\n\r\n".encode() + body)
        await writer.drain()
        if abandon:
            # Gone before the answer: the server must abort the request (issue #21 item 2).
            await asyncio.sleep(rng.uniform(0.05, 1.0))
            stats.requests["abandoned"] += 1
            return
        if hang_up:
            # Read a few events, then drop the connection mid-stream.
            want, got, data = rng.randint(1, 8), 0, b""
            while got < want:
                chunk = await asyncio.wait_for(reader.read(65536), args.request_timeout)
                if not chunk:
                    break
                data += chunk
                got = data.count(b"data: ")
            if not data.startswith(b"HTTP/1.1 200"):
                stats.error(f"{path} stream: {data[:120]!r}")
                return
            stats.requests["stream_disconnected"] += 1
            stats.chunks_before_disconnect += got
            return
        raw = await asyncio.wait_for(reader.read(-1), args.request_timeout)
        status, payload = split_response(raw)
        if status != 200:
            stats.error(f"{path} -> {status}: {payload[:200]!r}")
            return
        if stream:
            events = [l[6:] for l in payload.split(b"\n") if l.startswith(b"data: ")]
            if not events or events[-1].strip() != b"[DONE]":
                stats.error(f"{path} stream without [DONE] ({len(events)} events)")
                return
            usage = None
            for e in events[:-1]:
                d = json.loads(e)
                if "error" in d:
                    stats.error(f"{path} stream error event: {e[:200]!r}")
                    return
                usage = d.get("usage") or usage
            stats.tokens_received += (usage or {}).get("completion_tokens", 0)
        else:
            d = json.loads(payload)
            if not d.get("choices"):
                stats.error(f"{path} answer without choices: {payload[:200]!r}")
                return
            stats.tokens_received += d["usage"]["completion_tokens"]
        stats.requests["completed"] += 1
    except (OSError, asyncio.TimeoutError, ValueError, KeyError) as e:
        stats.error(f"{path}: {type(e).__name__}: {e}")
    finally:
        writer.transport.abort()  # a hard close (RST when unread data remains)


async def client(args, seed, stats, deadline):
    rng = random.Random(seed)
    await asyncio.sleep(rng.uniform(0, min(2.0, args.duration / 10)))  # stagger the start
    while True:
        try:
            await one_request(args, rng, stats, deadline)
        except asyncio.CancelledError:
            # The run is over: every client hangs up on its request in flight at once.
            stats.requests["cut_at_end"] += 1
            raise


def check_after(args, base, stats, t_last, gen_at_last):
    """Polls /metrics until running and waiting are 0 (or --settle + 10 s pass)."""
    settled_after = None
    while time.monotonic() - t_last < args.settle + 10:
        m = metrics(base)
        if m.get("vllm:num_requests_running", 0) == 0 and m.get("vllm:num_requests_waiting", 0) == 0:
            settled_after = time.monotonic() - t_last
            break
        time.sleep(0.02)
    m = metrics(base)
    gen_settled = m.get("vllm:generation_tokens_total", 0)
    time.sleep(1.0)
    m2 = metrics(base)
    return {
        "settled_after_s": settled_after,
        "kv_cache_usage_perc": m2.get("vllm:kv_cache_usage_perc"),
        "tokens_after_last_client": gen_settled - gen_at_last,
        "tokens_while_idle": m2.get("vllm:generation_tokens_total", 0) - gen_settled,
        "running": m2.get("vllm:num_requests_running"),
        "waiting": m2.get("vllm:num_requests_waiting"),
    }


async def run(args):
    base = f"http://{args.host}:{args.port}"
    stats = Stats()
    m0 = metrics(base)
    t0 = time.monotonic()
    deadline = t0 + args.duration
    rss = {"start": rss_mib(args.pid)}
    rss_samples = []

    async def sample_rss():
        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            r = rss_mib(args.pid)
            if r is not None:
                rss_samples.append((time.monotonic() - t0, r))

    sampler = asyncio.create_task(sample_rss())
    tasks = [asyncio.create_task(client(args, args.seed * 100003 + i, stats, deadline))
             for i in range(args.clients)]
    await asyncio.sleep(args.duration)
    gen_at_last = metrics(base).get("vllm:generation_tokens_total", 0)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    t_last = time.monotonic()
    sampler.cancel()
    after = check_after(args, base, stats, t_last, gen_at_last)
    rss["after_warmup"] = next((r for t, r in rss_samples if t >= args.warmup), rss["start"])
    rss["peak"] = max([r for _, r in rss_samples] + [rss["start"] or 0]) if args.pid else None
    rss["end"] = rss_mib(args.pid)
    m1 = metrics(base)
    generated = m1.get("vllm:generation_tokens_total", 0) - m0.get("vllm:generation_tokens_total", 0)
    summary = {
        "config": {k: getattr(args, k) for k in ("clients", "duration", "stream", "disconnect",
                                                 "abandon", "max_tokens", "seed")},
        "wall_s": round(t_last - t0, 1),
        "requests": stats.requests,
        "errors": len(stats.errors),
        "error_examples": [e for e in stats.errors if e][:5],
        "generation_tokens_server": generated,
        "completion_tokens_delivered": stats.tokens_received,
        "generation_tok_per_s": round(generated / max(t_last - t0, 1e-9), 1),
        **after,
        "rss_mib": {k: (round(v, 1) if v is not None else None) for k, v in rss.items()},
        # (seconds into the run, MiB) every 30 s: first touches of the KV cache pool (which
        # the engine allocates up front) show as growth that levels off; a leak keeps growing.
        "rss_samples_mib": [(round(t), round(r)) for t, r in rss_samples if round(t) % 30 == 0],
    }
    checks = {
        "0 errors": len(stats.errors) == 0,
        f"running/waiting 0 within {args.settle} s": after["settled_after_s"] is not None
        and after["settled_after_s"] <= args.settle,
        "KV blocks all returned": after["kv_cache_usage_perc"] == 0,
        f"<= {args.tokens_after_per_client} tokens per client after they left":
        after["tokens_after_last_client"] <= args.tokens_after_per_client * args.clients,
        "no tokens once idle": after["tokens_while_idle"] == 0,
    }
    if args.pid:
        drift = rss["end"] - rss["after_warmup"]
        summary["rss_mib"]["drift"] = round(drift, 1)
        checks[f"RSS drift <= {args.max_rss_drift_mib} MiB"] = drift <= args.max_rss_drift_mib
    summary["checks"] = checks
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--pid", type=int, help="the server's process id (RSS drift check)")
    ap.add_argument("--model", help="model name to send (default: none, the server's)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients (16)")
    ap.add_argument("--duration", type=float, default=15, help="seconds of load (15)")
    ap.add_argument("--stream", type=float, default=0.7, help="share of streaming requests")
    ap.add_argument("--disconnect", type=float, default=0.3,
                    help="share of streams that hang up mid-stream (0.3)")
    ap.add_argument("--abandon", type=float, default=0.3,
                    help="share of non-streaming requests abandoned before the answer (0.3)")
    ap.add_argument("--max-tokens", type=int, default=64, help="max_tokens drawn up to this")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds after the last client for the gauges to reach 0 (1)")
    ap.add_argument("--tokens-after-per-client", type=int, default=2,
                    help="tokens a request may still get after its client left (2: the step "
                    "running then, and the one the engine may start before the abort)")
    ap.add_argument("--warmup", type=float, default=10.0,
                    help="RSS drift is measured from this many seconds in (10)")
    ap.add_argument("--max-rss-drift-mib", type=float, default=64.0)
    ap.add_argument("--request-timeout", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the summary to this file")
    args = ap.parse_args()
    summary = asyncio.run(run(args))
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    failed = [name for name, ok in summary["checks"].items() if not ok]
    print("soak: " + ("FAILED: " + "; ".join(failed) if failed else "all checks passed"),
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
