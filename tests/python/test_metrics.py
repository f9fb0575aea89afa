"""/metrics against vLLM's own metric families (fixtures/vllm_metrics, from vLLM's source at a
pinned version), and its values against what the requests of this test actually got."""
import concurrent.futures
import json
import pathlib
import subprocess
import tempfile

import pytest
import requests

from test_server import MODEL_NAME, ServerProcess, free_port

FIXTURE = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "vllm_metrics"
MAX_MODEL_LEN = 256

# vLLM families we do not expose, and why. Any other family of the fixture must be there.
ABSENT = {
    "vllm:estimated_flops_per_gpu_total": "no FLOP/byte model of the forward pass (vLLM's MFU metrics)",
    "vllm:estimated_read_bytes_per_gpu_total": "no FLOP/byte model of the forward pass",
    "vllm:estimated_write_bytes_per_gpu_total": "no FLOP/byte model of the forward pass",
    "vllm:lora_requests_info": "no LoRA (vLLM: only with a LoRA config)",
    "vllm:num_requests_kv_fetch_by_stage": "no KV transfer (vLLM: only as a KV consumer)",
    "vllm:corrupted_requests_total": "no NaN check of the logits (vLLM: VLLM_COMPUTE_NANS_IN_LOGITS)",
    "vllm:watermark_requests_total": "no watermarking (vLLM: only with a watermark config)",
    "vllm:kv_block_lifetime_seconds": "no KV block residency sampling (vLLM: --kv-cache-metrics)",
    "vllm:kv_block_idle_before_evict_seconds": "no KV block residency sampling",
    "vllm:kv_block_reuse_gap_seconds": "no KV block residency sampling",
}
# CacheConfig fields every cache_config_info must carry (the rest are vLLM's options we lack).
CACHE_INFO_LABELS = {"engine", "block_size", "num_gpu_blocks", "enable_prefix_caching",
                     "gpu_memory_utilization", "cache_dtype"}


def parse(text):
    """{family: {"type", "samples": [(sample name, {label: value}, value)]}}"""
    fams, current = {}, None
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, current, kind = line.split(" ")
            fams[current] = {"type": kind, "samples": []}
            continue
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, rest = head.partition("{")
        labels = {}
        for part in rest.rstrip("}").split('",') if rest else []:
            k, _, v = part.partition('="')
            labels[k] = v.rstrip('"')
        assert current and name.startswith(current), line
        fams[current]["samples"].append((name, labels, float(value)))
    return fams


def value(fams, sample, **labels):
    family = max((f for f in fams if sample.startswith(f)), key=len)
    hits = [v for n, ls, v in fams[family]["samples"]
            if n == sample and all(ls.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (sample, labels, hits)
    return hits[0]


def buckets_1_2_5(max_value):
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return out
            out.append(float(m * scale))
        scale *= 10


class Server(ServerProcess):
    """A server with a small KV cache and few sequences, so requests queue and get preempted."""

    def __init__(self, binary, *args):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [binary, "serve", "--port", str(self.port), "--served-model-name", MODEL_NAME,
             "--max-model-len", str(MAX_MODEL_LEN), *args],
            stdout=self.log, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def server(binary):
    # 3 running at most, KV for about 350 tokens: three 190-token requests get preempted.
    srv = Server(binary, "--max-num-seqs", "3", "--kv-cache-memory", "8MiB",
                 "--seed", "0").wait_ready()
    yield srv
    assert srv.stop() == 0


def scrape(server):
    return parse(requests.get(server.url + "/metrics", timeout=10).text)


def test_families_match_vllm(server):
    manifest = json.loads((FIXTURE / "manifest.json").read_text())
    assert manifest["version"] and manifest["generator"].startswith("tools/vllm_metric_families.py")
    vllm = {f["name"]: f for f in json.loads((FIXTURE / "families.json").read_text())["families"]}
    ours = scrape(server)
    assert set(ABSENT) <= set(vllm), "ABSENT names a family vLLM does not have"
    assert not set(ours) - set(vllm), "families vLLM does not have"
    for name, fam in vllm.items():
        if name in ABSENT:
            assert name not in ours, name
            continue
        assert name in ours, f"missing {name}"
        assert ours[name]["type"] == fam["type"], name
        label_sets = {frozenset(ls) - {"le"} for _, ls, _ in ours[name]["samples"]}
        assert len(label_sets) == 1, name
        labels = set(label_sets.pop())
        if name == "vllm:cache_config_info":
            assert CACHE_INFO_LABELS <= labels <= set(fam["labels"]), labels - set(fam["labels"])
        else:
            assert labels == set(fam["labels"]), name
        for label, values in fam.get("label_values", {}).items():
            got = [ls[label] for n, ls, _ in ours[name]["samples"]]
            assert sorted(got) == sorted(values), name
        if fam["type"] == "histogram":
            expect = (buckets_1_2_5(MAX_MODEL_LEN) if fam["bucket_family"] == "request_tokens"
                      else [float(b) for b in fam["buckets"]])
            les = [ls["le"] for n, ls, _ in ours[name]["samples"] if n == name + "_bucket"]
            assert les == [repr(b) for b in expect] + ["+Inf"], name


def completion(server, prompt, **kw):
    body = {"model": MODEL_NAME, "prompt": prompt, "temperature": 0, **kw}
    r = requests.post(server.url + "/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["usage"]


def streamed_chat(server, content, **kw):
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": content}],
            "stream": True, "stream_options": {"include_usage": True}, "temperature": 0, **kw}
    usage = None
    with requests.post(server.url + "/v1/chat/completions", json=body, stream=True,
                       timeout=300) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
    return usage


def test_values_follow_the_requests(server):
    before = scrape(server)
    assert value(before, "vllm:e2e_request_latency_seconds_count") == 0
    long_prompt = "The history of the city of Paris, from its founding to the present day. " * 3
    # (usage, n) per request: sequential ones, then 6 long ones at once on 3 seats.
    done = [(completion(server, long_prompt, max_tokens=8), 1),
            (completion(server, long_prompt, max_tokens=5), 1),  # prefix cache hit
            (completion(server, "Two answers:", max_tokens=6, n=2, temperature=1, seed=1), 2),
            (streamed_chat(server, "Count to five.", max_tokens=7), 1)]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        done += [(u, 1) for u in pool.map(
            lambda i: completion(server, f"Story {i}: once upon a time", max_tokens=180,
                                 ignore_eos=True), range(6))]
    m = scrape(server)

    finished = sum(n for _, n in done)
    reasons = {r: value(m, "vllm:request_success_total", finished_reason=r)
               for r in ("stop", "length", "abort", "error", "repetition")}
    assert sum(reasons.values()) == finished and reasons["length"] >= 6
    for h in ("e2e_request_latency_seconds", "request_queue_time_seconds",
              "request_inference_time_seconds", "request_prefill_time_seconds",
              "request_decode_time_seconds", "time_to_first_token_seconds",
              "request_prompt_tokens", "request_generation_tokens", "request_num_preemptions",
              "request_prefill_kv_computed_tokens", "request_time_per_output_token_seconds",
              "request_params_max_tokens"):
        assert value(m, f"vllm:{h}_count") == finished, h
        assert value(m, f"vllm:{h}_bucket", le="+Inf") == finished, h
    assert value(m, "vllm:request_params_n_count") == len(done)
    assert value(m, "vllm:request_params_n_sum") == finished
    assert value(m, "vllm:request_max_num_generation_tokens_count") == len(done)

    # Tokens: what the responses' usage says, counted once per completion.
    gen = sum(u["completion_tokens"] for u, _ in done)
    prompt = sum(u["prompt_tokens"] * n for u, n in done)
    assert value(m, "vllm:generation_tokens_total") == gen
    assert value(m, "vllm:request_generation_tokens_sum") == gen
    assert value(m, "vllm:prompt_tokens_total") == prompt
    assert value(m, "vllm:request_prompt_tokens_sum") == prompt
    assert value(m, "vllm:request_params_max_tokens_sum") >= gen
    # One inter-token sample per decode step of each completion after its first token.
    assert value(m, "vllm:inter_token_latency_seconds_count") == gen - finished

    cached = value(m, "vllm:prompt_tokens_cached_total")
    assert cached > 0, "the repeated prompt hits the prefix cache"
    assert value(m, "vllm:prompt_tokens_by_source_total", source="local_cache_hit") == cached
    computed = value(m, "vllm:prompt_tokens_by_source_total", source="local_compute")
    assert computed == prompt - cached == value(m, "vllm:request_prefill_kv_computed_tokens_sum")
    assert (value(m, "vllm:prompt_tokens_cached_by_source_total", source="device")
            == value(m, "vllm:prefix_cache_hits_total") > 0)
    assert value(m, "vllm:prefix_cache_queries_total") >= value(m, "vllm:prefix_cache_hits_total")
    # Each step ran its prefill chunks and decodes; recomputation after preemption adds to it.
    assert value(m, "vllm:iteration_tokens_total_sum") >= computed + gen - finished
    assert value(m, "vllm:iteration_tokens_total_count") >= max(u["completion_tokens"] for u, _ in done)

    # Six long requests on three seats and KV for about two: some waited, some were preempted.
    preemptions = value(m, "vllm:num_preemptions_total")
    assert preemptions > 0 and value(m, "vllm:request_num_preemptions_sum") == preemptions
    assert value(m, "vllm:request_queue_time_seconds_sum") > 0.5

    # Phases: e2e covers queueing and inference; inference is prefill then decode.
    e2e, queue = value(m, "vllm:e2e_request_latency_seconds_sum"), value(m, "vllm:request_queue_time_seconds_sum")
    infer, prefill = value(m, "vllm:request_inference_time_seconds_sum"), value(m, "vllm:request_prefill_time_seconds_sum")
    decode = value(m, "vllm:request_decode_time_seconds_sum")
    ttft = value(m, "vllm:time_to_first_token_seconds_sum")
    assert e2e >= queue + infer > 0 and e2e >= ttft >= queue + prefill - 1e-6
    assert abs(infer - prefill - decode) < 1e-6 * finished
    assert value(m, "vllm:inter_token_latency_seconds_sum") <= decode + 1e-6

    assert value(m, "vllm:num_requests_running") == 0 and value(m, "vllm:num_requests_waiting") == 0
    assert value(m, "vllm:num_requests_waiting_by_reason", reason="capacity") == 0
    assert value(m, "vllm:engine_sleep_state", sleep_state="awake") == 1
    info = m["vllm:cache_config_info"]["samples"]
    assert len(info) == 1 and info[0][2] == 1
    assert info[0][1]["block_size"] == "16" and info[0][1]["engine"] == "0"
    assert info[0][1]["enable_prefix_caching"] == "True" and int(info[0][1]["num_gpu_blocks"]) > 0
