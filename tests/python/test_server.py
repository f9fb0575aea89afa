"""Black-box tests of `vllm-cpp serve` on the real SmolLM2 model, driven by the official
OpenAI SDK: completions and chat (streaming and not), n, logprobs, stop strings, usage,
model listing, tokenize, metrics and errors. ServerProcess is shared with the other
test_server_*.py files."""
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time

import openai
import pytest
import requests

MODEL_NAME = "smol"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout):
    """Polls predicate every 50 ms until it holds or timeout seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class ServerProcess:
    """`vllm-cpp serve` on a free port; stderr goes to a file so a full pipe never blocks it."""

    def __init__(self, binary, *args, port=None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        cmd = [binary, "serve", "--port", str(self.port), "--served-model-name", MODEL_NAME,
               "--max-model-len", "2048", "--kv-cache-memory", "512MiB", *args]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        pytest.fail("server did not become healthy:\n" + self.output())

    def output(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail("server did not exit after SIGTERM:\n" + self.output())
        os.unlink(self.log.name)
        return self.proc.returncode

    def metrics(self):
        """The unlabelled value of each vllm:* sample (first label set wins)."""
        out = {}
        for line in requests.get(self.url + "/metrics", timeout=10).text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name_labels, value = line.rsplit(" ", 1)
            name = name_labels.split("{", 1)[0]
            out.setdefault(name, float(value))
        return out


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProcess(binary, "--seed", "0").wait_ready()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def complete(client, prompt, **kw):
    kw.setdefault("max_tokens", 12)
    kw.setdefault("temperature", 0)
    return client.completions.create(model=MODEL_NAME, prompt=prompt, **kw)


def chat(client, content, **kw):
    kw.setdefault("max_tokens", 12)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": content}], **kw)


def token_count(server, **body):
    return requests.post(server.url + "/tokenize", json=body, timeout=10).json()["count"]


def test_models_list(client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL_NAME]
    assert models[0].owned_by == "vllm"
    assert models[0].model_extra["max_model_len"] == 2048


def test_completion_greedy_and_usage(client, server):
    r = complete(client, "The capital of France is", max_tokens=8)
    assert r.object == "text_completion" and r.model == MODEL_NAME and r.id.startswith("cmpl-")
    c = r.choices[0]
    assert "Paris" in c.text
    assert c.finish_reason == "length"
    assert r.usage.prompt_tokens == token_count(server, prompt="The capital of France is")
    assert r.usage.completion_tokens == 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8


def test_completion_stream_matches_non_stream(client):
    full = complete(client, "Once upon a time", max_tokens=16).choices[0].text
    chunks = list(complete(client, "Once upon a time", max_tokens=16, stream=True,
                           stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16
    text = "".join(ch.choices[0].text for ch in chunks[:-1])
    assert text == full
    assert chunks[-2].choices[0].finish_reason == "length"


def test_completion_n2_seeded(client):
    r = complete(client, "My favourite colour is", n=2, temperature=1.0, seed=11, max_tokens=10)
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert 2 <= r.usage.completion_tokens <= 20
    again = complete(client, "My favourite colour is", n=2, temperature=1.0, seed=11, max_tokens=10)
    assert [c.text for c in r.choices] == [c.text for c in again.choices]


def test_completion_logprobs(client):
    r = complete(client, "The quick brown fox", max_tokens=6, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset[0] == 0
    assert all(b - a == len(t) for a, b, t in zip(lp.text_offset, lp.text_offset[1:], lp.tokens))
    for tok, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0 and 1 <= len(top) <= 3
        assert top[tok] == pytest.approx(logprob)
        assert logprob == pytest.approx(max(top.values()))  # greedy picks the best


def test_completion_echo_with_logprobs(client):
    r = complete(client, "Hello world", max_tokens=3, echo=True, logprobs=1)
    c = r.choices[0]
    assert c.text.startswith("Hello world")
    assert c.logprobs.token_logprobs[0] is None  # the first prompt token has none
    assert "".join(c.logprobs.tokens) == c.text


def test_completion_echo_max_tokens_zero_scores_the_prompt(client):
    r = complete(client, "Paris is the capital of France", max_tokens=0, echo=True, logprobs=0)
    c = r.choices[0]
    assert c.text == "Paris is the capital of France"
    assert r.usage.completion_tokens == 0
    assert all(x is not None for x in c.logprobs.token_logprobs[1:])


def test_completion_batch_of_prompts(client):
    prompts = ["The sky is", "Water is made of"]
    r = complete(client, prompts, max_tokens=6)
    assert [c.index for c in r.choices] == [0, 1]
    for i, p in enumerate(prompts):
        assert r.choices[i].text == complete(client, p, max_tokens=6).choices[0].text


def test_completion_token_id_prompt(client, server):
    ids = requests.post(server.url + "/tokenize", json={"prompt": "The sky is"}).json()["tokens"]
    by_ids = complete(client, ids, max_tokens=6)
    assert by_ids.choices[0].text == complete(client, "The sky is", max_tokens=6).choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids)


def test_stop_string(client):
    full = complete(client, "One, two, three, four,", max_tokens=16).choices[0].text
    stop = full.strip().split()[1]  # a word from the middle of the greedy text
    r = complete(client, "One, two, three, four,", max_tokens=16, stop=[stop])
    c = r.choices[0]
    assert c.finish_reason == "stop" and c.model_extra["stop_reason"] == stop
    assert c.text == full[: full.index(stop)]
    streamed = "".join(ch.choices[0].text for ch in complete(
        client, "One, two, three, four,", max_tokens=16, stop=[stop], stream=True))
    assert streamed == c.text


def test_seeded_sampling_reproducible(client):
    a = complete(client, "I like to eat", temperature=1.0, seed=42, max_tokens=12)
    b = complete(client, "I like to eat", temperature=1.0, seed=42, max_tokens=12)
    assert a.choices[0].text == b.choices[0].text


def test_logit_bias_forces_a_token(client, server):
    tok = requests.post(server.url + "/tokenize",
                        json={"prompt": " banana", "add_special_tokens": False}).json()["tokens"]
    r = complete(client, "Say something:", max_tokens=4, logit_bias={str(tok[0]): 100})
    assert r.choices[0].text == " banana" * 4


def test_chat_greedy_and_usage(client, server):
    r = chat(client, "What is the capital of France? Answer in one word.", max_tokens=20)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    m = r.choices[0].message
    assert m.role == "assistant" and "Paris" in m.content
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    assert r.usage.prompt_tokens == token_count(server, messages=messages)
    assert r.usage.completion_tokens <= 20


def test_chat_stream_matches_non_stream(client):
    full = chat(client, "Name three fruits.", max_tokens=24)
    chunks = list(chat(client, "Name three fruits.", max_tokens=24, stream=True,
                       stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == full.choices[0].message.content
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == [full.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_chat_logprobs(client):
    r = chat(client, "Say hi.", max_tokens=5, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(e.token for e in content) == r.choices[0].message.content
    for e in content:
        assert len(e.top_logprobs) == 3 and e.bytes == list(e.token.encode())
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob)


def test_chat_n2_and_max_completion_tokens(client):
    r = chat(client, "Tell me a story.", n=2, temperature=0.9, seed=3, max_completion_tokens=7,
             extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert all(c.finish_reason == "length" for c in r.choices)
    assert r.usage.completion_tokens == 14


def test_chat_stream_n2_indices(client):
    chunks = list(chat(client, "Hello!", n=2, temperature=1.0, seed=5, max_tokens=6, stream=True))
    finished = sorted(ch.choices[0].index for ch in chunks if ch.choices[0].finish_reason)
    assert finished == [0, 1]


def test_chat_system_message_and_content_parts(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, max_tokens=8, temperature=0,
        messages=[{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": [{"type": "text", "text": "Say yes."}]}])
    assert r.choices[0].message.content


def test_tokenize_detokenize_roundtrip(server):
    t = requests.post(server.url + "/tokenize",
                      json={"prompt": "Hello, world!", "return_token_strs": True}).json()
    assert t["count"] == len(t["tokens"]) == len(t["token_strs"]) and t["max_model_len"] == 2048
    d = requests.post(server.url + "/detokenize", json={"tokens": t["tokens"]}).json()
    assert d["prompt"].endswith("Hello, world!")


def test_health_version_metrics(server, client):
    assert requests.get(server.url + "/health").status_code == 200
    assert "version" in requests.get(server.url + "/version").json()
    complete(client, "Metrics please", max_tokens=4)
    text = requests.get(server.url + "/metrics").text
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_count",
                 "vllm:prefix_cache_queries", "vllm:prefix_cache_hits"]:
        assert f'{name}' in text and f'model_name="{MODEL_NAME}"' in text, name
    m = server.metrics()
    assert m["vllm:generation_tokens_total"] >= 4 and m["vllm:e2e_request_latency_seconds_count"] >= 1


def test_sdk_errors(client):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, "Hi", max_tokens=5000)
    assert e.value.status_code == 400 and "max_tokens" in e.value.message
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="Hi", max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        complete(client, "x " * 3000, max_tokens=4)  # prompt longer than max_model_len
    with pytest.raises(openai.BadRequestError):
        chat(client, "Hi", logprobs=False, top_logprobs=2)
    with pytest.raises(openai.BadRequestError):
        complete(client, "Hi", temperature=-1)


def test_api_key(binary):
    srv = ServerProcess(binary, "--api-key", "sekret").wait_ready()
    try:
        bad = openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        r = requests.post(srv.url + "/v1/completions", json={"prompt": "Hi"})
        assert r.status_code == 401 and r.json()["error"]["code"] == 401
        good = openai.OpenAI(base_url=srv.url + "/v1", api_key="sekret", max_retries=0)
        assert complete(good, "Hi", max_tokens=2).usage.completion_tokens == 2
        assert requests.get(srv.url + "/health").status_code == 200  # only /v1/* needs the key
    finally:
        assert srv.stop() == 0


def test_concurrent_threads_share_one_client(client):
    results = {}

    def run(i):
        results[i] = complete(client, f"Number {i} is", max_tokens=5).choices[0].text

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
