"""`vllm-cpp serve` on FP8 checkpoints and with `--quantization fp8` (fixtures/fp8, made by
tools/make_fp8_fixtures.py with ml_dtypes' float8 casts): each serves the greedy tokens of the
same weights dequantized to f32 (fixtures/fp8/<name>/dequantized), one request at a time and
all at once. Prompts go in as token ids (the tiny tokenizer only lets the server start)."""
import concurrent.futures
import json
import pathlib
import re

import pytest
import requests

from conftest import run
from test_server import MODEL_NAME, ServerProcess

ROOT = pathlib.Path(__file__).resolve().parents[2]
FP8 = ROOT / "fixtures" / "fp8"
TINY = ROOT / "fixtures" / "tiny"


def complete(url, ids, n):
    body = {"model": MODEL_NAME, "prompt": ids, "max_tokens": n, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True}
    r = requests.post(url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def greedy(binary, model_dir, *flags):
    """Each reference prompt's 24-token greedy continuation: alone, then 12 requests at once."""
    prompts = [p["prompt_ids"] for p in
               json.loads((TINY / "deepseek_v3" / "reference.json").read_text())["prompts"]]
    srv = ServerProcess(binary, str(model_dir), "--max-model-len", "256", "--block-size", "8",
                        *flags).wait_ready()
    try:
        alone = [complete(srv.url, p, 24) for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            batched = list(pool.map(lambda p: complete(srv.url, p, 24), prompts * 4))
    finally:
        assert srv.stop() == 0
    return alone, batched


def llama_dir(tmp_path, weights_dir):
    """A servable copy of a tiny llama directory: its files linked, plus a tokenizer."""
    d = tmp_path / weights_dir.name
    d.mkdir()
    for f in ("config.json", "generation_config.json", "model.safetensors"):
        (d / f).symlink_to(weights_dir / f)
    (d / "tokenizer.json").symlink_to(TINY / "deepseek_v3" / "tokenizer.json")
    return d


def test_fp8_deepseek_v3_serves_the_dequantized_tokens(binary):
    name = FP8 / "deepseek_v3_block"
    alone, batched = greedy(binary, name)
    ref_alone, ref_batched = greedy(binary, name / "dequantized")
    assert alone == ref_alone
    assert batched == ref_batched == alone * 4
    # Control: the quantized model is not the f32 one it came from.
    assert alone != greedy(binary, TINY / "deepseek_v3")[0]


def test_quantization_fp8_serves_the_per_tensor_recipe(binary, tmp_path):
    alone, batched = greedy(binary, llama_dir(tmp_path, TINY / "llama"), "--quantization", "fp8")
    ref = llama_dir(tmp_path, FP8 / "llama_tensor" / "dequantized")
    assert (alone, batched) == greedy(binary, ref)
    assert batched == alone * 4


def test_quantization_errors_are_clear(binary, model):
    r = run(binary, "serve", model, "--quantization", "fp8", "--port", "0")
    assert r.returncode != 0
    assert "is a GGUF file" in r.stderr, r.stderr
    r = run(binary, "serve", str(FP8 / "llama_tensor"), "--quantization", "awq")
    assert r.returncode != 0
    assert "--quantization" in r.stderr, r.stderr


def test_kv_cache_dtype_fp8_serves_and_reports_the_smaller_cache(binary, model):
    srv = ServerProcess(binary, model, "--kv-cache-dtype", "fp8").wait_ready()
    try:
        r = requests.post(srv.url + "/v1/completions", timeout=60, json={
            "model": MODEL_NAME, "prompt": "The capital of France is", "max_tokens": 8,
            "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 8
        log = srv.output()
    finally:
        assert srv.stop() == 0
    plain = ServerProcess(binary, model).wait_ready()
    try:
        plain_log = plain.output()
    finally:
        assert plain.stop() == 0
    # The same --kv-cache-memory holds twice the tokens of the f16 cache, at one byte a value
    # (give or take the block the halving leaves over).
    fp8, f16 = [int(re.search(r"KV cache size: (\d+) tokens", text).group(1))
                for text in (log, plain_log)]
    assert 2 * f16 <= fp8 <= 2 * f16 + 16, (log, plain_log)


def test_kv_cache_dtype_errors_are_clear(binary, model):
    r = run(binary, "serve", model, "--kv-cache-dtype", "fp8_e5m2")
    assert r.returncode != 0 and "--kv-cache-dtype" in r.stderr, r.stderr
    r = run(binary, "serve", str(TINY / "deepseek_v3"), "--kv-cache-dtype", "fp8", "--port", "0")
    assert r.returncode != 0 and "latent attention" in r.stderr, r.stderr
