"""`vllm-cpp serve MODEL --runner pooling` on a decoder (SmolLM2-135M-Instruct Q4_1): each
input's vector is the final-norm hidden state of its last token (vLLM's pooling of a generative
checkpoint), L2-normalised by default, compared with llama.cpp's LLAMA_POOLING_TYPE_LAST vectors
(fixtures/embeddings/smollm2_last.json, tools/make_last_token_pooling_fixture.py) through the
official OpenAI SDK. POST /pooling (vLLM's PoolingCompletionRequest / PoolingResponse) on the
decoder and on all-MiniLM-L6-v2 (sentence-transformers' vectors); the generation APIs are refused
on a pooling server, /pooling on a generative one, and unsupported fields are 400s naming them."""
import base64
import json
import pathlib
import subprocess

import numpy as np
import openai
import pytest
import requests

from test_embeddings import MINILM, EmbeddingServer
from test_embeddings import assert_close as assert_close_minilm
from test_embeddings import untruncated
from test_server import ServerProcess, free_port, MODEL_NAME

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "embeddings"


def cases():
    return json.loads((FIXTURES / "smollm2_last.json").read_text(encoding="utf-8"))["cases"]


def tolerance():
    return json.loads((FIXTURES / "manifest.json").read_text())["tolerance_last_token"]


def reference(case, normalize):
    v = np.frombuffer(base64.b64decode(case["embedding"]), dtype="<f4").astype(np.float64)
    return v / max(np.linalg.norm(v), 1e-12) if normalize else v


def assert_close(got, case, normalize=True):
    ref = reference(case, normalize)
    got = np.asarray(got, dtype=np.float64)
    cos = float(got @ ref / (np.linalg.norm(got) * np.linalg.norm(ref)))
    err = float(np.max(np.abs(got - ref)))
    tol = tolerance()
    bound = tol["max_abs_normalized"] if normalize else tol["max_abs"]
    assert cos >= tol["cosine_min"] and err <= bound, (case["text"][:60], cos, err)
    return cos, err


@pytest.fixture(scope="module")
def server(binary, model):
    srv = ServerProcess(binary, model, "--runner", "pooling").wait_ready()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def same_tokens(server):
    """The fixture cases our tokenizer splits as llama.cpp did (the text the server gets)."""
    out = []
    for c in cases():
        r = requests.post(server.url + "/tokenize", json={"prompt": c["text"]}, timeout=30)
        assert r.status_code == 200, r.text
        if r.json()["tokens"] == c["ids"]:
            out.append(c)
    return out


def test_sdk_text_matches_llamacpp(server, client):
    todo = same_tokens(server)
    print(f"\n{len(todo)} of {len(cases())} texts tokenized as llama.cpp did")
    assert len(todo) >= 20
    r = client.embeddings.create(model=MODEL_NAME, input=[c["text"] for c in todo])
    assert [d.index for d in r.data] == list(range(len(todo)))
    assert r.usage.prompt_tokens == sum(len(c["ids"]) for c in todo)
    worst_cos, worst_err = 1.0, 0.0
    for d, c in zip(r.data, todo):
        assert d.object == "embedding" and len(d.embedding) == 576
        assert abs(np.linalg.norm(d.embedding) - 1) < 1e-5
        cos, err = assert_close(d.embedding, c)
        worst_cos, worst_err = min(worst_cos, cos), max(worst_err, err)
    print(f"normalised: min cosine {worst_cos:.9f}, max abs diff {worst_err:.3g}")


def test_token_ids_unnormalized_match_llamacpp(server):
    todo = cases()
    r = requests.post(server.url + "/v1/embeddings", timeout=120, json={
        "input": [c["ids"] for c in todo], "normalize": False, "encoding_format": "float"})
    assert r.status_code == 200, r.text
    worst_cos, worst_err = 1.0, 0.0
    for d, c in zip(r.json()["data"], todo):
        cos, err = assert_close(d["embedding"], c, normalize=False)
        worst_cos, worst_err = min(worst_cos, cos), max(worst_err, err)
    print(f"\nraw: min cosine {worst_cos:.9f}, max abs diff {worst_err:.3g}")


def test_pooling_route_shape_and_vectors(server):
    c = cases()[1]
    emb = requests.post(server.url + "/v1/embeddings", timeout=60, json={
        "input": c["ids"], "encoding_format": "float"}).json()
    r = requests.post(server.url + "/pooling", timeout=60, json={
        "model": MODEL_NAME, "input": [c["ids"], c["ids"][:3]], "task": "embed"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["id"].startswith("pool-")
    assert body["model"] == MODEL_NAME and isinstance(body["created"], int)
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(d["object"] == "pooling" and set(d) == {"index", "object", "data"}
               for d in body["data"])
    assert body["data"][0]["data"] == emb["data"][0]["embedding"]
    assert_close(body["data"][0]["data"], c)
    assert body["usage"]["prompt_tokens"] == len(c["ids"]) + 3 == body["usage"]["total_tokens"]
    # use_activation false: the raw hidden state; base64 carries the same float32 bytes.
    raw = requests.post(server.url + "/pooling", timeout=60, json={
        "input": c["ids"], "use_activation": False, "encoding_format": "base64"}).json()
    got = np.frombuffer(base64.b64decode(raw["data"][0]["data"]), dtype="<f4")
    assert_close(got, c, normalize=False)
    assert np.linalg.norm(got) > 2


def test_pooling_truncation(server):
    c = max(cases(), key=lambda c: len(c["ids"]))
    r = requests.post(server.url + "/pooling", timeout=60, json={
        "input": c["ids"], "truncate_prompt_tokens": 10, "truncation_side": "right"})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 10
    head = requests.post(server.url + "/pooling", timeout=60, json={"input": c["ids"][:10]})
    assert r.json()["data"] == head.json()["data"]


@pytest.mark.parametrize("body, needle, param", [
    ({"input": "a", "task": "token_embed"}, "Unsupported task: 'token_embed'", "task"),
    ({"input": "a", "task": "classify"}, "Unsupported task: 'classify'", "task"),
    ({"input": "a", "dimensions": 64}, "dimensions is currently not supported", "dimensions"),
    ({"input": "a", "padding": "max_length"}, "'padding'", "padding"),
    ({"input": "a", "frobnicate": 1}, "'frobnicate'", None),
    ({"input": "a", "messages": []}, "'messages'", None),
    ({"input": "a", "use_activation": True, "normalize": False}, "disagree", "use_activation"),
    ({"input": "a", "encoding_format": "bytes"}, "encoding_format", "encoding_format"),
    ({"input": ""}, "empty string", "input"),
])
def test_pooling_bad_requests(server, body, needle, param):
    r = requests.post(server.url + "/pooling", json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert needle in err["message"] and err["code"] == 400
    if param:
        assert err["param"] == param


def test_generation_refused_on_pooling_server(server, client):
    for path, api in (("/v1/completions", "Completions"),
                      ("/v1/chat/completions", "Chat Completions")):
        r = requests.post(server.url + path, timeout=30, json={
            "prompt": "hi", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"] == f"The model does not support {api} API"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_NAME, prompt="hello", max_tokens=4)


def test_pooling_refused_on_generate_server(binary, model):
    srv = ServerProcess(binary, model).wait_ready()
    try:
        r = requests.post(srv.url + "/pooling", json={"input": "hi"}, timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"] == "The model does not support Pooling API"
    finally:
        assert srv.stop() == 0


def test_minilm_pooling_route(binary):
    if not (MINILM / "model.safetensors").exists():
        pytest.skip(f"{MINILM} absent (WITH_TEST_MODELS=1 scripts/setup.sh)")
    srv = EmbeddingServer(binary).wait_ready()
    try:
        todo = untruncated()[:8]
        r = requests.post(srv.url + "/pooling", timeout=60, json={
            "model": "minilm", "input": [c["text"] for c in todo]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["object"] == "list" and body["usage"]["prompt_tokens"] == sum(
            len(c["ids"]) for c in todo)
        for d, c in zip(body["data"], todo):
            assert d["object"] == "pooling" and len(d["data"]) == 384
            assert_close_minilm(d["data"], c)
        bad = requests.post(srv.url + "/pooling", timeout=30, json={"input": "a", "extra": 1})
        assert bad.status_code == 400 and "'extra'" in bad.json()["error"]["message"]
    finally:
        assert srv.stop() == 0


@pytest.mark.parametrize("flags, needle", [
    (["--tensor-parallel-size", "2"], "one rank"),
    (["--nnodes", "2"], "one process"),
    (["--device", "cuda"], "cuda"),
    (["--max-model-len", "8193"], "max_position_embeddings"),
])
def test_pooling_startup_errors(binary, model, flags, needle):
    r = subprocess.run([binary, "serve", model, "--runner", "pooling", "--port",
                        str(free_port()), *flags], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and needle in (r.stderr + r.stdout).lower(), r.stderr
