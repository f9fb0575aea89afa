"""Raw-HTTP tests of `vllm-cpp serve`: a table of malformed and hostile requests (each must get
the right status and OpenAI-style error JSON, and the server must stay healthy), 64 concurrent
streaming chats with correct, non-interleaved content, and clients that vanish mid-stream."""
import concurrent.futures
import json
import socket
import struct
import time

import openai
import pytest
import requests

from test_server import MODEL_NAME, ServerProcess

LONG = "hello " * 3000  # > max_model_len (2048) tokens


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProcess(binary, "--trust-request-chat-template").wait_ready()
    yield srv
    assert srv.stop() == 0


def cmpl(**kw):
    return {"prompt": "Hi", "max_tokens": 2, **kw}


def msgs(**kw):
    return {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, **kw}


# (id, method, path, body: dict -> JSON, str/bytes -> raw, expected status)
CASES = [
    ("bad-json", "POST", "/v1/completions", "{", 400),
    ("json-array", "POST", "/v1/completions", "[]", 400),
    ("json-null", "POST", "/v1/completions", "null", 400),
    ("json-string", "POST", "/v1/completions", '"prompt"', 400),
    ("empty-body", "POST", "/v1/completions", "", 400),
    ("no-prompt", "POST", "/v1/completions", {"max_tokens": 2}, 400),
    ("prompt-number", "POST", "/v1/completions", {"prompt": 123}, 400),
    ("prompt-empty-list", "POST", "/v1/completions", {"prompt": []}, 400),
    ("prompt-empty-ids", "POST", "/v1/completions", {"prompt": [[]]}, 400),
    ("prompt-float-ids", "POST", "/v1/completions", {"prompt": [1.5, 2]}, 400),
    ("prompt-negative-id", "POST", "/v1/completions", {"prompt": [1, -1]}, 400),
    ("prompt-id-out-of-vocab", "POST", "/v1/completions", {"prompt": [1, 99999999]}, 400),
    ("prompt-bool-list", "POST", "/v1/completions", {"prompt": [True]}, 400),
    ("prompt-too-long", "POST", "/v1/completions", {"prompt": LONG}, 400),
    ("max-tokens-string", "POST", "/v1/completions", cmpl(max_tokens="ten"), 400),
    ("max-tokens-negative", "POST", "/v1/completions", cmpl(max_tokens=-1), 400),
    ("max-tokens-beyond-context", "POST", "/v1/completions", cmpl(max_tokens=100000), 400),
    ("temperature-string", "POST", "/v1/completions", cmpl(temperature="hot"), 400),
    ("temperature-negative", "POST", "/v1/completions", cmpl(temperature=-0.5), 400),
    ("top-p-zero", "POST", "/v1/completions", cmpl(top_p=0), 400),
    ("top-p-two", "POST", "/v1/completions", cmpl(top_p=2), 400),
    ("n-zero", "POST", "/v1/completions", cmpl(n=0), 400),
    ("n-huge", "POST", "/v1/completions", cmpl(n=100000), 400),
    ("best-of", "POST", "/v1/completions", cmpl(n=1, best_of=4), 400),
    ("logprobs-too-many", "POST", "/v1/completions", cmpl(logprobs=21), 400),
    ("logprobs-string", "POST", "/v1/completions", cmpl(logprobs="yes"), 400),
    ("stop-number", "POST", "/v1/completions", cmpl(stop=5), 400),
    ("stop-empty-string", "POST", "/v1/completions", cmpl(stop=[""]), 400),
    ("logit-bias-list", "POST", "/v1/completions", cmpl(logit_bias=[1, 2]), 400),
    ("logit-bias-bad-key", "POST", "/v1/completions", cmpl(logit_bias={"abc": 1}), 400),
    ("logit-bias-out-of-vocab", "POST", "/v1/completions", cmpl(logit_bias={"99999999": 1}), 400),
    ("unknown-model", "POST", "/v1/completions", cmpl(model="gpt-4"), 404),
    # pydantic reads "yes" as true (test_server_fields.py); other strings are no boolean.
    ("stream-string", "POST", "/v1/completions", cmpl(stream="sometimes"), 400),
    ("stream-options-no-stream", "POST", "/v1/completions",
     cmpl(stream_options={"include_usage": True}), 400),
    ("seed-string", "POST", "/v1/completions", cmpl(seed="abc"), 400),
    ("ignore-eos-string", "POST", "/v1/completions", cmpl(ignore_eos="x"), 400),
    ("priority-string", "POST", "/v1/completions", cmpl(priority="high"), 400),
    ("beam-search", "POST", "/v1/completions", cmpl(use_beam_search=True), 400),
    ("guided-json-unsupported", "POST", "/v1/completions", cmpl(guided_json={"not": {}}), 400),
    ("deep-nesting", "POST", "/v1/completions", '{"prompt": ' + "[" * 100000 + "]" * 100000 + "}", 400),
    ("invalid-utf8", "POST", "/v1/completions", b'{"prompt": "\xff\xfe"}', 400),
    ("unknown-route", "GET", "/v2/nothing", None, 404),
    ("get-on-post-route", "GET", "/v1/completions", None, 405),
    ("post-on-get-route", "POST", "/v1/models", {}, 405),
    ("chat-no-messages", "POST", "/v1/chat/completions", {"max_tokens": 2}, 400),
    ("chat-empty-messages", "POST", "/v1/chat/completions", {"messages": []}, 400),
    ("chat-messages-string", "POST", "/v1/chat/completions", {"messages": "hi"}, 400),
    ("chat-no-role", "POST", "/v1/chat/completions", {"messages": [{"content": "x"}]}, 400),
    ("chat-content-number", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": 5}]}, 400),
    ("chat-image-part", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     400),
    ("chat-top-logprobs-without-logprobs", "POST", "/v1/chat/completions", msgs(top_logprobs=2), 400),
    ("chat-top-logprobs-too-many", "POST", "/v1/chat/completions",
     msgs(logprobs=True, top_logprobs=50), 400),
    ("chat-max-completion-tokens-beyond", "POST", "/v1/chat/completions",
     msgs(max_completion_tokens=100000), 400),
    ("chat-prompt-too-long", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": LONG}]}, 400),
    ("chat-template-raises", "POST", "/v1/chat/completions",
     msgs(chat_template="{{ raise_exception('no system messages') }}"), 400),
    ("chat-template-syntax", "POST", "/v1/chat/completions", msgs(chat_template="{% for %}"), 400),
    ("chat-tool-choice-required", "POST", "/v1/chat/completions", msgs(tool_choice="required"), 400),
    ("chat-response-format-schema", "POST", "/v1/chat/completions",
     msgs(response_format={"type": "json_schema"}), 400),
    ("chat-unknown-model", "POST", "/v1/chat/completions", msgs(model="nope"), 404),
    ("tokenize-no-prompt", "POST", "/tokenize", {}, 400),
    ("detokenize-bad-ids", "POST", "/detokenize", {"tokens": [-5]}, 400),
]


def assert_error_json(r, status):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["object"] == "error"
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    assert "param" in err and err["code"] == status


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_request(server, case):
    _, method, path, body, status = case
    kw = {}
    if isinstance(body, dict):
        kw["json"] = body
    elif body is not None:
        kw["data"] = body.encode() if isinstance(body, str) else body
        kw["headers"] = {"Content-Type": "application/json"}
    r = requests.request(method, server.url + path, timeout=30, **kw)
    assert_error_json(r, status)


def raw_exchange(server, data, read_timeout=10):
    """Sends raw bytes; returns the response head (status line and headers)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=read_timeout) as s:
        s.sendall(data)
        got = b""
        try:
            while b"\r\n\r\n" not in got:
                b = s.recv(65536)
                if not b:
                    break
                got += b
        except (socket.timeout, ConnectionResetError):
            pass
    return got


def test_body_too_large_is_413(server):
    r = requests.post(server.url + "/v1/completions", data=b"x" * (33 << 20), timeout=60)
    assert_error_json(r, 413)


def test_garbage_request_line_and_truncated_body(server):
    assert raw_exchange(server, b"GARBAGE\r\n\r\n").startswith(b"HTTP/1.1 400")
    # Claims 100 bytes, sends 10 and hangs up: the server must shrug it off.
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
    bad_chunk = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                 b"Connection: close\r\n\r\nZZZ\r\nabc\r\n0\r\n\r\n")
    assert raw_exchange(server, bad_chunk).startswith(b"HTTP/1.1 400")
    assert requests.get(server.url + "/health", timeout=5).status_code == 200


def test_number_beyond_a_double_is_invalid_json(server):
    # Found by tests/fuzz/fuzz_request_json: nlohmann's out_of_range escaped parse_body and was
    # answered as "invalid request: [json.exception.out_of_range.406] ...".
    r = requests.post(server.url + "/v1/completions", timeout=30,
                      data=b'{"prompt": "Hi", "max_tokens": 1, "temperature": 1e400}',
                      headers={"Content-Type": "application/json"})
    assert_error_json(r, 400)
    assert r.json()["error"]["message"].startswith("invalid JSON in the request body"), r.text


def test_prompt_ids_ending_inside_a_character(server):
    # Found by tests/fuzz/fuzz_detokenizer: SmolLM2 spells U+1F642 as tokens 10813 (F0 9F) and
    # 38887 (99 82). With the prompt ending in 10813, the generated 38887 completes the
    # character: it is emitted whole (as tokenizers' DecodeStream does), where the text used
    # to start with a stray continuation byte (sent as U+FFFD).
    body = {"prompt": [504, 10813], "max_tokens": 1, "temperature": 0,
            "logit_bias": {"38887": 100}}
    r = requests.post(server.url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == "\U0001F642"
    chunks = requests.post(server.url + "/v1/completions", json={**body, "stream": True},
                           timeout=30).content.decode()
    texts = [json.loads(l[6:])["choices"][0]["text"] for l in chunks.splitlines()
             if l.startswith("data: {")]
    assert "".join(texts) == "\U0001F642"


def test_server_healthy_after_table(server):
    r = requests.post(server.url + "/v1/completions", json=cmpl(max_tokens=3), timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    m = server.metrics()
    assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0


def test_64_concurrent_streaming_chats(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    prompts = [f"Write one sentence about the number {i}." for i in range(16)]
    kw = dict(model=MODEL_NAME, max_tokens=16, temperature=0)

    def alone(p):
        r = client.chat.completions.create(messages=[{"role": "user", "content": p}], **kw)
        return r.choices[0].message.content

    expected = [alone(p) for p in prompts]

    def stream(i):
        p = prompts[i % len(prompts)]
        ids, text, finishes = set(), "", []
        for ch in client.chat.completions.create(
                messages=[{"role": "user", "content": p}], stream=True, **kw):
            ids.add(ch.id)
            if ch.choices:
                text += ch.choices[0].delta.content or ""
                if ch.choices[0].finish_reason:
                    finishes.append(ch.choices[0].finish_reason)
        return i, ids, text, finishes

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(stream, range(64)))
    for i, ids, text, finishes in results:
        assert len(ids) == 1, "chunks of one stream carry one id"
        assert len(finishes) == 1
        assert text == expected[i % len(prompts)], f"stream {i}"
    m = server.metrics()
    assert m["vllm:num_requests_running"] == 0


def test_clients_disconnecting_mid_stream_free_the_kv_cache(server):
    aborted_before = server.metrics().get("vllm:request_success_total", 0)
    body = json.dumps({"prompt": "Tell me a very long story.", "max_tokens": 1500,
                       "ignore_eos": True, "stream": True}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    socks = []
    for _ in range(12):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        s.sendall(req)
        socks.append(s)
    for k, s in enumerate(socks):
        got = b""
        while got.count(b"data: ") < 2:  # mid-stream: a few tokens in
            got += s.recv(65536)
        if k % 2:  # half hang up with a reset, half with a normal close
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        m = server.metrics()
        if m["vllm:num_requests_running"] == 0 and m["vllm:kv_cache_usage_perc"] == 0:
            break
        time.sleep(0.2)
    assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
    assert m["vllm:kv_cache_usage_perc"] == 0
    text = requests.get(server.url + "/metrics").text
    aborted = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total") and 'finished_reason="abort"' in line]
    assert aborted and aborted[0] >= 12
    del aborted_before
