"""`vllm serve`'s surface beyond the core endpoints, as vLLM has it: repeated flags take the
last value, --root-path, --enable-request-id-headers, VLLM_API_KEY, --uds, --max-logprobs,
--return-tokens-as-token-ids, --enable-force-include-usage, /load, /tokenizer_info,
/v1/models/{id}, /v1/chat/completions/batch, /ping, /invocations, /openapi.json, and the
JSON Content-Type check."""
import json
import os
import signal
import subprocess
import tempfile
import time

import httpx2
import openai
import pytest
import requests

from test_server import MODEL_NAME, ServerProcess, free_port

FLAGS = ["--max-model-len", "1024", "--root-path", "/api/", "--enable-request-id-headers",
         "--max-logprobs", "5", "--max-logprobs", "3", "--return-tokens-as-token-ids",
         "--enable-force-include-usage", "--enable-server-load-tracking",
         "--enable-tokenizer-info-endpoint", "--served-model-name", MODEL_NAME, "alias"]


@pytest.fixture(scope="module")
def flagged(binary):
    """Every new flag on; --max-model-len and --max-logprobs given twice."""
    srv = ServerProcess(binary, *FLAGS).wait_ready()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def plain(binary):
    srv = ServerProcess(binary).wait_ready()
    yield srv
    assert srv.stop() == 0


def client_for(url, **kw):
    return openai.OpenAI(base_url=url, api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)


def chat_body(content="What is the capital of France?", **kw):
    return {"model": MODEL_NAME, "messages": [{"role": "user", "content": content}],
            "max_tokens": 8, "temperature": 0, **kw}


def assert_error(r, status, needle=None):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["object"] == "error" and body["error"]["code"] == status, body
    if needle:
        assert needle in body["error"]["message"], body


# --- repeated flags ---------------------------------------------------------------------------

def test_repeated_flags_take_the_last_value(flagged):
    # ServerProcess passes --max-model-len 2048 first; FLAGS repeats it with 1024.
    cards = requests.get(flagged.url + "/v1/models", timeout=10).json()["data"]
    assert cards[0]["max_model_len"] == 1024
    # A list option too: the last occurrence's list replaces the earlier one.
    assert [c["id"] for c in cards] == [MODEL_NAME, "alias"]
    # --max-logprobs 5 then 3: 3 is the limit.
    ok = requests.post(flagged.url + "/v1/completions", timeout=30, json={
        "model": MODEL_NAME, "prompt": "Hi", "max_tokens": 1, "logprobs": 3})
    assert ok.status_code == 200, ok.text
    assert len(ok.json()["choices"][0]["logprobs"]["top_logprobs"][0]) == 3
    assert_error(requests.post(flagged.url + "/v1/completions", timeout=30, json={
        "model": MODEL_NAME, "prompt": "Hi", "max_tokens": 1, "logprobs": 4}), 400,
        "greater than max allowed: 3")


def test_repeated_flag_on_other_subcommands(binary, model):
    r = subprocess.run([binary, "generate", "-m", model, "-n", "4", "-n", "2", "Hello"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_cli_errors(binary):
    for args, needle in [(["--root-path", "api"], "--root-path"),
                         (["--max-logprobs", "-2"], "--max-logprobs")]:
        r = subprocess.run([binary, "serve", "--port", str(free_port()), *args],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and r.returncode < 128, (args, r.returncode)
        assert needle in r.stderr, (args, r.stderr)


def test_help_lists_new_flags(binary):
    out = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True,
                         timeout=30).stdout
    for flag in ["--root-path", "--enable-request-id-headers", "--uds", "--max-logprobs",
                 "--return-tokens-as-token-ids", "--enable-force-include-usage",
                 "--enable-server-load-tracking", "--enable-tokenizer-info-endpoint",
                 "VLLM_API_KEY"]:
        assert flag in out, flag


# --- root path, API key -----------------------------------------------------------------------

def test_root_path_serves_under_prefix_and_without(flagged):
    under = requests.get(flagged.url + "/api/v1/models", timeout=10)
    bare = requests.get(flagged.url + "/v1/models", timeout=10)
    assert under.status_code == 200 and bare.status_code == 200
    assert [m["id"] for m in under.json()["data"]] == [m["id"] for m in bare.json()["data"]]
    r = client_for(flagged.url + "/api/v1").chat.completions.create(**chat_body())
    same = client_for(flagged.url + "/v1").chat.completions.create(**chat_body())
    assert r.choices[0].message.content == same.choices[0].message.content
    assert r.usage.completion_tokens == 8
    assert requests.get(flagged.url + "/api/health", timeout=10).status_code == 200
    assert_error(requests.get(flagged.url + "/apix/v1/models", timeout=10), 404)


def test_api_key_from_environment_also_under_root_path(binary, monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "env-key")
    srv = ServerProcess(binary, "--root-path", "/api").wait_ready()
    try:
        for path in ["/v1/models", "/api/v1/models"]:
            assert_error(requests.get(srv.url + path, timeout=10), 401)
            ok = requests.get(srv.url + path, headers={"Authorization": "Bearer env-key"},
                              timeout=10)
            assert ok.status_code == 200, (path, ok.text)
        assert requests.get(srv.url + "/api/health", timeout=10).status_code == 200
        models = client_for(srv.url + "/api/v1", api_key="env-key").models.list().data
        assert [m.id for m in models] == [MODEL_NAME]
    finally:
        assert srv.stop() == 0


def test_api_key_flag_wins_over_environment(binary, monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "env-key")
    srv = ServerProcess(binary, "--api-key", "flag-key", "--max-logprobs", "-1").wait_ready()
    try:
        auth = {"Authorization": "Bearer flag-key"}
        assert_error(requests.get(srv.url + "/v1/models", timeout=10,
                                  headers={"Authorization": "Bearer env-key"}), 401)
        assert requests.get(srv.url + "/v1/models", headers=auth, timeout=10).status_code == 200
        # --max-logprobs -1 (no limit) meets the engine's own cap of 20, with a warning.
        assert "the engine computes at most 20 logprobs" in srv.output()
        r = requests.post(srv.url + "/v1/chat/completions", headers=auth, timeout=30,
                          json=chat_body(max_tokens=1, logprobs=True, top_logprobs=20))
        assert r.status_code == 200, r.text
        assert len(r.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 20
        assert_error(requests.post(srv.url + "/v1/chat/completions", headers=auth, timeout=30,
                                   json=chat_body(logprobs=True, top_logprobs=21)), 400,
                     "max allowed: 20")
    finally:
        assert srv.stop() == 0


# --- request id headers -----------------------------------------------------------------------

def test_request_id_header_echoed_or_made(flagged, plain):
    mine = requests.post(flagged.url + "/v1/chat/completions", json=chat_body(), timeout=30,
                         headers={"X-Request-Id": "my-id-42"})
    assert mine.status_code == 200
    assert mine.headers["X-Request-Id"] == "my-id-42"
    assert mine.json()["id"] == "chatcmpl-my-id-42"
    made = requests.post(flagged.url + "/v1/completions", timeout=30,
                         json={"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 2})
    assert made.headers["X-Request-Id"] == made.json()["id"]
    with requests.post(flagged.url + "/v1/chat/completions", json=chat_body(stream=True),
                       stream=True, timeout=30) as s:
        first = next(line for line in s.iter_lines() if line.startswith(b"data: "))
        assert s.headers["X-Request-Id"] == json.loads(first[6:])["id"]
    other = requests.get(flagged.url + "/version", timeout=10)
    assert len(other.headers["X-Request-Id"]) == 32
    err = requests.get(flagged.url + "/no/such/route", headers={"X-Request-Id": "e1"}, timeout=10)
    assert err.status_code == 404 and err.headers["X-Request-Id"] == "e1"
    off = requests.post(plain.url + "/v1/chat/completions", json=chat_body(), timeout=30,
                        headers={"X-Request-Id": "my-id-42"})
    assert off.status_code == 200 and "X-Request-Id" not in off.headers


# --- logprobs, token ids, usage ---------------------------------------------------------------

def test_max_logprobs_default_is_20(plain):
    base = {"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 1}
    ok = requests.post(plain.url + "/v1/completions", json={**base, "logprobs": 20}, timeout=30)
    assert ok.status_code == 200, ok.text
    for extra, needle in [({"logprobs": 21}, "sample logprobs of 21"),
                          ({"prompt_logprobs": 21}, "prompt logprobs of 21"),
                          ({"prompt_logprobs": -1}, "prompt logprobs of")]:
        r = requests.post(plain.url + "/v1/completions", json={**base, **extra}, timeout=30)
        assert_error(r, 400, needle)
        assert "max allowed: 20" in r.json()["error"]["message"]
    assert_error(requests.post(plain.url + "/v1/chat/completions", timeout=30,
                               json=chat_body(logprobs=True, top_logprobs=21)), 400,
                 "max allowed: 20")


def test_return_tokens_as_token_ids_default(flagged, plain):
    body = chat_body(max_tokens=2, logprobs=True, top_logprobs=1)
    on = requests.post(flagged.url + "/v1/chat/completions", json=body, timeout=30).json()
    assert on["choices"][0]["logprobs"]["content"][0]["token"].startswith("token_id:")
    off = requests.post(flagged.url + "/v1/chat/completions", timeout=30,
                        json={**body, "return_tokens_as_token_ids": False}).json()
    assert not off["choices"][0]["logprobs"]["content"][0]["token"].startswith("token_id:")
    dflt = requests.post(plain.url + "/v1/chat/completions", json=body, timeout=30).json()
    assert not dflt["choices"][0]["logprobs"]["content"][0]["token"].startswith("token_id:")


def test_force_include_usage(flagged, plain):
    kw = dict(max_tokens=5, stream=True, extra_body={"ignore_eos": True})
    chunks = list(client_for(flagged.url + "/v1").chat.completions.create(
        **{k: v for k, v in chat_body().items() if k != "max_tokens"}, **kw))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    plain_chunks = list(client_for(plain.url + "/v1").chat.completions.create(
        **{k: v for k, v in chat_body().items() if k != "max_tokens"}, **kw))
    assert all(c.usage is None for c in plain_chunks)
    done = list(client_for(flagged.url + "/v1").completions.create(
        model=MODEL_NAME, prompt="Hi", **kw))
    assert done[-1].usage.completion_tokens == 5


# --- /load, /tokenizer_info, /v1/models/{id} --------------------------------------------------

def load_during_stream(srv):
    body = {"model": MODEL_NAME, "prompt": "Count:", "max_tokens": 400, "ignore_eos": True,
            "stream": True}
    with requests.post(srv.url + "/v1/completions", json=body, stream=True, timeout=60) as s:
        lines = s.iter_lines()
        next(line for line in lines if line.startswith(b"data: "))
        during = requests.get(srv.url + "/load", timeout=10).json()["server_load"]
    return during


def test_server_load(flagged, plain):
    assert load_during_stream(flagged) == 1
    deadline = time.time() + 10
    while requests.get(flagged.url + "/load", timeout=10).json()["server_load"] != 0:
        assert time.time() < deadline, "load did not return to 0"
        time.sleep(0.05)
    assert load_during_stream(plain) == 0


def test_tokenizer_info(flagged, plain):
    info = requests.get(flagged.url + "/tokenizer_info", timeout=10).json()
    assert isinstance(info["tokenizer_class"], str) and info["tokenizer_class"]
    assert "<|im_start|>" in info["chat_template"]
    assert info["eos_token"] == "<|im_end|>"
    ids = requests.post(flagged.url + "/tokenize", timeout=10,
                        json={"prompt": "<|im_end|>", "add_special_tokens": False}).json()
    assert info["eos_token_id"] == ids["tokens"][0]
    assert info["added_tokens_decoder"][str(info["eos_token_id"])]["content"] == "<|im_end|>"
    assert_error(requests.get(plain.url + "/tokenizer_info", timeout=10), 404)


def test_model_by_id(plain):
    card = client_for(plain.url + "/v1").models.retrieve(MODEL_NAME)
    assert card.id == MODEL_NAME and card.object == "model"
    assert card.model_extra["max_model_len"] == 2048
    r = requests.get(plain.url + "/v1/models/some/other-model", timeout=10)
    assert_error(r, 404, "some/other-model")
    assert r.json()["error"]["type"] == "NotFoundError"


# --- batch chat, ping, invocations ------------------------------------------------------------

def test_chat_completions_batch(plain):
    convs = [[{"role": "user", "content": "What is the capital of France?"}],
             [{"role": "user", "content": "Name a colour."}]]
    r = requests.post(plain.url + "/v1/chat/completions/batch", timeout=60,
                      json={"model": MODEL_NAME, "messages": convs, "max_tokens": 8,
                            "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert [c["index"] for c in body["choices"]] == [0, 1]
    client = client_for(plain.url + "/v1")
    singles = [client.chat.completions.create(model=MODEL_NAME, messages=m, max_tokens=8,
                                              temperature=0) for m in convs]
    for choice, single in zip(body["choices"], singles):
        assert choice["message"]["content"] == single.choices[0].message.content
        assert choice["message"]["role"] == "assistant"
    assert body["usage"]["prompt_tokens"] == sum(s.usage.prompt_tokens for s in singles)
    assert body["usage"]["completion_tokens"] == sum(s.usage.completion_tokens for s in singles)
    url = plain.url + "/v1/chat/completions/batch"
    assert_error(requests.post(url, json=chat_body(), timeout=30), 400, "list of conversations")
    assert_error(requests.post(url, json={"messages": convs, "stream": True}, timeout=30), 400,
                 "stream")
    assert_error(requests.post(url, json={"messages": [], "max_tokens": 2}, timeout=30), 400)


def test_ping_and_invocations(plain):
    assert requests.get(plain.url + "/ping", timeout=10).status_code == 200
    assert requests.post(plain.url + "/ping", timeout=10).status_code == 200
    chat = requests.post(plain.url + "/invocations", json=chat_body(), timeout=30)
    assert chat.status_code == 200 and chat.json()["object"] == "chat.completion"
    direct = requests.post(plain.url + "/v1/chat/completions", json=chat_body(), timeout=30)
    assert chat.json()["choices"][0]["message"] == direct.json()["choices"][0]["message"]
    cmpl = requests.post(plain.url + "/invocations", timeout=30,
                         json={"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 2})
    assert cmpl.status_code == 200 and cmpl.json()["object"] == "text_completion"
    assert_error(requests.post(plain.url + "/invocations", json={"input": "x"}, timeout=30),
                 400, "Cannot find suitable handler")


# --- Content-Type, OpenAPI --------------------------------------------------------------------

def test_json_body_needs_json_content_type(plain):
    raw = json.dumps(chat_body(max_tokens=1))
    for ctype in ["text/plain", "application/x-www-form-urlencoded", None]:
        headers = {"Content-Type": ctype} if ctype else {}
        r = requests.post(plain.url + "/v1/chat/completions", data=raw, headers=headers,
                          timeout=30)
        assert_error(r, 400, "Only 'application/json' is allowed")
    ok = requests.post(plain.url + "/v1/chat/completions", data=raw, timeout=30,
                       headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert ok.status_code == 200, ok.text


def test_openapi_lists_exactly_what_is_served(flagged, plain):
    doc = requests.get(plain.url + "/openapi.json", timeout=10).json()
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    for path, method in [("/v1/chat/completions", "post"), ("/v1/completions", "post"),
                         ("/v1/chat/completions/batch", "post"), ("/v1/models", "get"),
                         ("/v1/models/{model}", "get"), ("/ping", "get"), ("/ping", "post"),
                         ("/invocations", "post"), ("/load", "get"), ("/openapi.json", "get")]:
        assert method in paths[path], (path, method)
    assert "/tokenizer_info" not in paths
    # Every documented (path, method) is routed: never 404/405 (bodies may be refused: 400).
    for path, ops in paths.items():
        for method in ops:
            url = plain.url + path.replace("{model}", MODEL_NAME)
            r = requests.request(method.upper(), url, json={}, timeout=30)
            if "{response_id}" in path and r.status_code == 404:  # routed: no such response
                assert r.json()["error"]["param"] == "response_id", r.text
                continue
            assert r.status_code not in (404, 405), (path, method, r.status_code)
    on = requests.get(flagged.url + "/openapi.json", timeout=10).json()
    assert "get" in on["paths"]["/tokenizer_info"]
    assert on["servers"] == [{"url": "/api"}]


# --- Unix domain socket -----------------------------------------------------------------------

def test_uds(binary):
    sock = os.path.join(tempfile.mkdtemp(), "vllm.sock")
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen([binary, "serve", "--uds", sock, "--served-model-name", MODEL_NAME,
                             "--max-model-len", "1024", "--kv-cache-memory", "256MiB"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        http = httpx2.Client(transport=httpx2.HTTPTransport(uds=sock), timeout=30)
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None, open(log.name).read()
            try:
                if http.get("http://localhost/health").status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert time.time() < deadline, open(log.name).read()
            time.sleep(0.05)
        client = openai.OpenAI(base_url="http://localhost/v1", api_key="unused",
                               http_client=http, max_retries=0)
        r = client.chat.completions.create(**chat_body())
        assert r.choices[0].message.content and r.usage.completion_tokens == 8
        # Streams over the Unix socket (the stream pump), twice on one kept-alive connection:
        # the greedy text is the non-streaming one.
        for _ in range(2):
            chunks = list(client.chat.completions.create(**chat_body(), stream=True))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert text == r.choices[0].message.content
        assert "unix:" + sock in open(log.name).read()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert not os.path.exists(sock)
    # A path that is a regular file is not ours to replace.
    with open(sock, "w") as f:
        f.write("keep me")
    r = subprocess.run([binary, "serve", "--uds", sock], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "not a socket" in r.stderr
    assert open(sock).read() == "keep me"
