"""`vllm-cpp serve` on the tiny random-weight mixture-of-experts checkpoints (fixtures/tiny:
DeepSeek-V2 with MLA and group-limited routing, DeepSeek-V3 with q-LoRA and biased sigmoid
routing, Qwen3-MoE). Prompts go in as token ids; the greedy continuations that come back, one
request at a time and all at once (batched), are transformers' (reference.json). Their
tokenizer.json only lets the server start (tools/make_tiny_tokenizer.py)."""
import concurrent.futures
import json
import pathlib

import pytest
import requests

from test_server import MODEL_NAME, ServerProcess

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARCHS = ["deepseek_v2", "deepseek_v3", "qwen3_moe"]


@pytest.fixture(scope="module", params=ARCHS)
def served(request, binary):
    d = ROOT / "fixtures" / "tiny" / request.param
    srv = ServerProcess(binary, str(d), "--max-model-len", "256", "--block-size", "8").wait_ready()
    yield srv, json.loads((d / "reference.json").read_text())
    assert srv.stop() == 0


def complete(url, prompt):
    body = {"model": MODEL_NAME, "prompt": prompt["prompt_ids"], "max_tokens": len(prompt["greedy_ids"]),
            "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    r = requests.post(url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def test_greedy_tokens_are_transformers(served):
    srv, ref = served
    for p in ref["prompts"]:
        assert complete(srv.url, p) == p["greedy_ids"]


def test_batched_greedy_tokens_are_transformers(served):
    srv, ref = served
    prompts = ref["prompts"] * 4
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(lambda p: complete(srv.url, p), prompts))
    assert got == [p["greedy_ids"] for p in prompts]
