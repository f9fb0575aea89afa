"""`vllm-cpp serve` on an embedding model (all-MiniLM-L6-v2, a BERT; WITH_TEST_MODELS=1
scripts/setup.sh unpacks it): POST /v1/embeddings through the official OpenAI SDK returns
sentence-transformers' vectors (fixtures/embeddings, tools/make_embedding_fixtures.py), in
float and base64, for text and token-id inputs, in input order; bad requests get 4xx JSON; the
generation APIs are refused on an embedding model and embeddings on a generative one."""
import base64
import json
import pathlib
import subprocess
import tempfile
import threading

import numpy as np
import openai
import pytest
import requests

from test_server import ServerProcess, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
MINILM = ROOT / "models" / "all-MiniLM-L6-v2"
FIXTURES = ROOT / "fixtures" / "embeddings"
NAME = "minilm"


class EmbeddingServer(ServerProcess):
    """`serve MINILM` with the model's own limits (no --max-model-len unless given)."""

    def __init__(self, binary, *args):  # pylint: disable=super-init-not-called
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        cmd = [binary, "serve", str(MINILM), "--port", str(self.port), "--served-model-name",
               NAME, *args]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def server(binary):
    if not (MINILM / "model.safetensors").exists():
        pytest.skip(f"{MINILM} absent (WITH_TEST_MODELS=1 scripts/setup.sh)")
    srv = EmbeddingServer(binary).wait_ready()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def cases():
    return json.loads((FIXTURES / "minilm.json").read_text(encoding="utf-8"))["cases"]


def tolerance():
    return json.loads((FIXTURES / "manifest.json").read_text())["tolerance"]


def reference(case):
    return np.frombuffer(base64.b64decode(case["embedding"]), dtype="<f4").astype(np.float64)


def assert_close(got, case):
    ref = reference(case)
    got = np.asarray(got, dtype=np.float64)
    cos = float(got @ ref / (np.linalg.norm(got) * np.linalg.norm(ref)))
    err = float(np.max(np.abs(got - ref)))
    tol = tolerance()
    assert cos >= tol["cosine_min"] and err <= tol["max_abs"], (case["text"][:60], cos, err)
    return cos, err


def untruncated(max_len=256):
    return [c for c in cases() if c["max_seq_length"] == max_len and c["ids"] == c["fed_ids"]]


def test_sdk_matches_sentence_transformers(client):
    todo = untruncated()
    assert len(todo) >= 100
    worst_cos, worst_err = 1.0, 0.0
    for start in range(0, len(todo), 32):
        batch = todo[start:start + 32]
        # The SDK asks for base64 and decodes it itself when encoding_format is not given.
        r = client.embeddings.create(model=NAME, input=[c["text"] for c in batch])
        assert [d.index for d in r.data] == list(range(len(batch)))
        assert r.usage.prompt_tokens == sum(len(c["ids"]) for c in batch)
        assert r.usage.total_tokens == r.usage.prompt_tokens
        assert r.model == NAME and r.object == "list"
        for d, c in zip(r.data, batch):
            assert d.object == "embedding" and len(d.embedding) == 384
            cos, err = assert_close(d.embedding, c)
            worst_cos, worst_err = min(worst_cos, cos), max(worst_err, err)
    print(f"\n{len(todo)} texts via the OpenAI SDK: min cosine {worst_cos:.9f} "
          f"(1 - cos = {1 - worst_cos:.2g}), max abs diff {worst_err:.3g}")


def test_float_and_base64_agree(server):
    text = cases()[0]["text"]
    out = {}
    for fmt in ("float", "base64"):
        r = requests.post(server.url + "/v1/embeddings", timeout=60, json={
            "model": NAME, "input": text, "encoding_format": fmt})
        assert r.status_code == 200, r.text
        out[fmt] = r.json()["data"][0]["embedding"]
    as_float = np.asarray(out["float"], dtype=np.float32)
    assert isinstance(out["base64"], str)
    assert np.array_equal(np.frombuffer(base64.b64decode(out["base64"]), dtype="<f4"), as_float)
    assert_close(as_float, cases()[0])


def test_token_id_inputs(client):
    todo = untruncated()[:6]
    one = client.embeddings.create(model=NAME, input=todo[0]["ids"], encoding_format="float")
    assert len(one.data) == 1 and one.usage.prompt_tokens == len(todo[0]["ids"])
    assert_close(one.data[0].embedding, todo[0])
    many = client.embeddings.create(model=NAME, input=[c["ids"] for c in todo])
    for d, c in zip(many.data, todo):
        assert_close(d.embedding, c)


def test_batch_order_and_duplicates(client):
    todo = untruncated()
    picked = [todo[i] for i in (7, 0, 31, 7, 2, 50, 0)]
    r = client.embeddings.create(model=NAME, input=[c["text"] for c in picked])
    assert [d.index for d in r.data] == list(range(len(picked)))
    for d, c in zip(r.data, picked):
        assert_close(d.embedding, c)
    assert r.data[0].embedding == r.data[3].embedding


def test_concurrent_requests_get_their_own_vectors(server):
    todo = untruncated()[:24]
    errors = []

    def worker(chunk):
        try:
            r = requests.post(server.url + "/v1/embeddings", timeout=120, json={
                "model": NAME, "input": [c["text"] for c in chunk]})
            assert r.status_code == 200, r.text
            for d, c in zip(r.json()["data"], chunk):
                assert_close(d["embedding"], c)
        except AssertionError as e:  # reported from the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(todo[i:i + 4],)) for i in range(0, 24, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def long_cases(max_len):
    return [c for c in cases() if c["max_seq_length"] == max_len and c["ids"] != c["fed_ids"]]


def test_too_long_is_400_unless_truncation_asked(server, client):
    case = long_cases(256)[0]
    r = requests.post(server.url + "/v1/embeddings", timeout=60,
                      json={"model": NAME, "input": case["text"]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == (
        f"This model's maximum context length is 256 tokens. However, you requested "
        f"{len(case['ids'])} tokens in the input for embedding generation. Please reduce the "
        f"length of the input.")
    # sentence-transformers keeps [CLS], the first tokens and [SEP]: truncation_side right.
    ok = client.embeddings.create(model=NAME, input=case["text"], extra_body={
        "truncate_prompt_tokens": 256, "truncation_side": "right"})
    assert ok.usage.prompt_tokens == 256 == len(case["fed_ids"])
    assert_close(ok.data[0].embedding, case)
    # vLLM's default side (left) keeps the last tokens, still within [CLS] ... [SEP].
    left = requests.post(server.url + "/v1/embeddings", timeout=60, json={
        "model": NAME, "input": case["ids"], "truncate_prompt_tokens": -1})
    assert left.status_code == 200, left.text
    assert left.json()["usage"]["prompt_tokens"] == 256


@pytest.mark.parametrize("body, status, needle", [
    ({"input": ""}, 400, "empty string"),
    ({"input": []}, 400, "empty list"),
    ({"input": [[]]}, 400, "empty list of token ids"),
    ({"input": [1, "a"]}, 400, "'input' must be"),
    ({"input": {"text": "a"}}, 400, "'input' must be"),
    ({}, 400, "'input' is required"),
    ({"input": [101, 30522, 102]}, 400, "out of vocabulary"),
    ({"input": "a", "dimensions": 128}, 400,
     'Model "minilm" does not support matryoshka representation'),
    ({"input": "a", "encoding_format": "xml"}, 400, "encoding_format"),
    ({"input": "a", "truncate_prompt_tokens": 1000}, 400, "greater than max_model_len (256)"),
    ({"input": "a", "truncate_prompt_tokens": 0}, 400, "truncate_prompt_tokens"),
    ({"input": "a", "embed_dtype": "float16"}, 400, "embed_dtype"),
    ({"input": "a", "model": "other"}, 404, "does not exist"),
    ({"input": ["a"] * 2049}, 400, "at most 2048"),
])
def test_bad_requests_are_4xx_json(server, body, status, needle):
    r = requests.post(server.url + "/v1/embeddings", json=body, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert needle in err["message"] and err["code"] == status


def test_generation_apis_refused_models_listed(server, client):
    for path, api in (("/v1/completions", "Completions"), ("/v1/chat/completions",
                                                           "Chat Completions")):
        r = requests.post(server.url + path, timeout=30, json={
            "model": NAME, "prompt": "hi", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"] == f"The model does not support {api} API"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=NAME, prompt="hello", max_tokens=4)
    models = client.models.list().data
    assert [m.id for m in models] == [NAME]
    assert requests.get(server.url + "/v1/models", timeout=10).json()["data"][0][
        "max_model_len"] == 256
    metrics = requests.get(server.url + "/metrics", timeout=10)
    assert metrics.status_code == 200 and "vllm:num_requests_running" in metrics.text
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(str(MINILM / "tokenizer.json"))
    hf.no_truncation()
    hf.no_padding()
    tok = requests.post(server.url + "/tokenize", json={"prompt": "Héllo, World!"}, timeout=10)
    assert tok.json()["tokens"] == hf.encode("Héllo, World!").ids


def test_max_model_len_512(binary):
    if not (MINILM / "model.safetensors").exists():
        pytest.skip(f"{MINILM} absent")
    case = long_cases(512)[0]
    srv = EmbeddingServer(binary, "--max-model-len", "512", "--runner", "pooling").wait_ready()
    try:
        r = requests.post(srv.url + "/v1/embeddings", timeout=60, json={
            "model": NAME, "input": case["text"], "truncate_prompt_tokens": 512,
            "truncation_side": "right", "encoding_format": "float"})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == 512 == len(case["fed_ids"])
        assert_close(r.json()["data"][0]["embedding"], case)
    finally:
        assert srv.stop() == 0
    bad = subprocess.run([binary, "serve", str(MINILM), "--max-model-len", "513",
                          "--port", str(free_port())], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "max_position_embeddings" in bad.stderr + bad.stdout


def test_runner_flag_must_fit_the_model(binary):
    if not (MINILM / "model.safetensors").exists():
        pytest.skip(f"{MINILM} absent")
    # (A decoder with --runner pooling is served: tests/python/test_pooling.py.)
    r = subprocess.run([binary, "serve", str(MINILM), "--runner", "generate", "--port",
                        str(free_port())], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "no generate runner" in r.stderr + r.stdout, r.stderr


def test_generative_model_refuses_embeddings(binary, model):
    srv = ServerProcess(binary, model).wait_ready()
    try:
        r = requests.post(srv.url + "/v1/embeddings", json={"input": "hi"}, timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"] == "The model does not support Embeddings API"
    finally:
        assert srv.stop() == 0
