"""Every vLLM request field the server accepts takes effect, and the ones it cannot honour are
a 400 naming them: allowed_token_ids, return_token_ids, return_tokens_as_token_ids,
truncate_prompt_tokens / truncation_side, chat echo, prompt_tokens_details, request_id, and
vLLM's validation details (pydantic's string booleans, seed range, logit_bias keys)."""
import json
import re

import openai
import pytest
import requests

from test_server import MODEL_NAME, ServerProcess

VOCAB_SIZE = 49152  # SmolLM2-135M's config.json vocab_size


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProcess(binary, "--seed", "0", "--enable-prompt-tokens-details").wait_ready()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def tokenize(server, text, special=True):
    r = requests.post(server.url + "/tokenize",
                      json={"prompt": text, "add_special_tokens": special}, timeout=10)
    return r.json()["tokens"]


def post(server, path, **body):
    body.setdefault("model", MODEL_NAME)
    return requests.post(server.url + path, json=body, timeout=60)


def completion(server, **body):
    body.setdefault("max_tokens", 8)
    body.setdefault("temperature", 0)
    r = post(server, "/v1/completions", **body)
    assert r.status_code == 200, r.text
    return r.json()


def chat(server, messages, **body):
    body.setdefault("max_tokens", 8)
    body.setdefault("temperature", 0)
    r = post(server, "/v1/chat/completions", messages=messages, **body)
    assert r.status_code == 200, r.text
    return r.json()


def user(text):
    return [{"role": "user", "content": text}]


def sse_chunks(response):
    chunks = []
    for line in response.iter_lines(decode_unicode=True):
        if line.startswith("data: ") and line != "data: [DONE]":
            chunks.append(json.loads(line[len("data: "):]))
    return chunks


# allowed_token_ids: vLLM masks every other id before sampling, greedy or not.
@pytest.mark.parametrize("temperature", [0, 1.0])
def test_allowed_token_ids_one_id_completions(server, temperature):
    only = tokenize(server, " banana", special=False)[0]
    r = completion(server, prompt="My favourite fruit is", allowed_token_ids=[only],
                   temperature=temperature, seed=3, max_tokens=6, return_token_ids=True,
                   ignore_eos=True)
    assert r["choices"][0]["token_ids"] == [only] * 6
    assert r["choices"][0]["text"] == " banana" * 6


def test_allowed_token_ids_sampling_stays_inside_the_set(server):
    allowed = [tokenize(server, w, special=False)[0] for w in (" red", " blue", " green")]
    r = chat(server, user("Name a colour."), allowed_token_ids=allowed, temperature=1.0,
             seed=5, n=3, max_tokens=10, return_token_ids=True, ignore_eos=True)
    for c in r["choices"]:
        assert len(c["token_ids"]) == 10 and set(c["token_ids"]) <= set(allowed)


def test_return_token_ids_completions(server):
    r = completion(server, prompt="The capital of France is", return_token_ids=True)
    c = r["choices"][0]
    assert c["prompt_token_ids"] == tokenize(server, "The capital of France is")
    assert len(c["prompt_token_ids"]) == r["usage"]["prompt_tokens"]
    assert len(c["token_ids"]) == r["usage"]["completion_tokens"] == 8
    detok = post(server, "/detokenize", tokens=c["token_ids"]).json()["prompt"]
    assert detok == c["text"]
    plain = completion(server, prompt="The capital of France is")
    assert plain["choices"][0]["token_ids"] is None
    assert plain["choices"][0]["prompt_token_ids"] is None


def test_return_token_ids_chat_and_streaming(server):
    r = chat(server, user("Say hello."), return_token_ids=True, max_tokens=10)
    ids = r["choices"][0]["token_ids"]
    assert len(r["prompt_token_ids"]) == r["usage"]["prompt_tokens"]
    assert len(ids) == r["usage"]["completion_tokens"]
    stream = post(server, "/v1/chat/completions", messages=user("Say hello."), max_tokens=10,
                  temperature=0, return_token_ids=True, stream=True)
    chunks = sse_chunks(stream)
    assert chunks[0]["prompt_token_ids"] == r["prompt_token_ids"]
    assert all("prompt_token_ids" not in ch for ch in chunks[1:])
    streamed = [t for ch in chunks[1:] for t in ch["choices"][0]["token_ids"]]
    assert streamed == ids
    stream = post(server, "/v1/completions", prompt="One, two,", max_tokens=6, temperature=0,
                  return_token_ids=True, stream=True)
    chunks = sse_chunks(stream)
    assert chunks[0]["choices"][0]["prompt_token_ids"] == tokenize(server, "One, two,")
    streamed = [t for ch in chunks for t in ch["choices"][0]["token_ids"]]
    full = completion(server, prompt="One, two,", max_tokens=6, return_token_ids=True)
    assert streamed == full["choices"][0]["token_ids"]


def test_return_tokens_as_token_ids(server):
    r = completion(server, prompt="The sky is", logprobs=2, return_token_ids=True,
                   return_tokens_as_token_ids=True)
    c = r["choices"][0]
    assert c["logprobs"]["tokens"] == [f"token_id:{t}" for t in c["token_ids"]]
    for top in c["logprobs"]["top_logprobs"]:
        assert all(re.fullmatch(r"token_id:\d+", k) for k in top)
    # vLLM's text_offset counts the characters of these token strings.
    offsets = c["logprobs"]["text_offset"]
    assert [b - a for a, b in zip(offsets, offsets[1:])] == [len(t) for t in
                                                          c["logprobs"]["tokens"][:-1]]
    r = chat(server, user("Hi"), logprobs=True, top_logprobs=2, return_token_ids=True,
             return_tokens_as_token_ids=True)
    content = r["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in content] == [f"token_id:{t}" for t in r["choices"][0]["token_ids"]]
    assert all(e["bytes"] == list(e["token"].encode()) for e in content)
    assert all(re.fullmatch(r"token_id:\d+", t["token"]) for e in content
               for t in e["top_logprobs"])


PROMPT = "Once upon a time there was a little girl"


@pytest.mark.parametrize("side", [None, "left", "right"])
def test_truncate_prompt_tokens_completions(server, side):
    full = tokenize(server, PROMPT)
    assert len(full) > 4
    body = {"prompt": PROMPT, "truncate_prompt_tokens": 4, "return_token_ids": True}
    if side:
        body["truncation_side"] = side
    r = completion(server, **body)
    assert r["usage"]["prompt_tokens"] == 4
    kept = full[:4] if side == "right" else full[-4:]  # vLLM keeps the last N by default
    assert r["choices"][0]["prompt_token_ids"] == kept
    # The truncated prompt is what the model saw: the same as sending those ids.
    by_ids = completion(server, prompt=kept)
    assert by_ids["choices"][0]["text"] == r["choices"][0]["text"]


def test_truncate_prompt_tokens_chat_and_minus_one(server):
    r = chat(server, user(PROMPT), truncate_prompt_tokens=4)
    assert r["usage"]["prompt_tokens"] == 4
    whole = chat(server, user(PROMPT))["usage"]["prompt_tokens"]
    r = chat(server, user(PROMPT), truncate_prompt_tokens=-1)  # -1: all the room there is
    assert r["usage"]["prompt_tokens"] == whole
    r = completion(server, prompt=PROMPT, truncate_prompt_tokens=-1, echo=True, max_tokens=1)
    assert r["choices"][0]["text"].startswith(PROMPT)


def test_chat_echo_prepends_the_last_assistant_message(server, client):
    messages = [{"role": "user", "content": "Where is Paris?"},
                {"role": "assistant", "content": "Paris is the capital of"}]
    plain = chat(server, messages, continue_final_message=True, add_generation_prompt=False)
    r = chat(server, messages, echo=True, continue_final_message=True,
             add_generation_prompt=False)
    m = r["choices"][0]["message"]
    assert m["role"] == "assistant"
    assert m["content"] == "Paris is the capital of" + plain["choices"][0]["message"]["content"]
    for k in ("prompt_tokens", "completion_tokens"):
        assert r["usage"][k] == plain["usage"][k]
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, messages=messages, max_tokens=8, temperature=0, stream=True,
        extra_body={"echo": True, "continue_final_message": True,
                    "add_generation_prompt": False}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[1].choices[0].delta.content == "Paris is the capital of"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == m["content"]
    # With a generation prompt the last message is the user's: nothing to echo.
    r = chat(server, user("Hi"), echo=True)
    assert r["choices"][0]["message"]["content"] == chat(server, user("Hi"))["choices"][0][
        "message"]["content"]


def test_prompt_tokens_details_cached_tokens(server, binary):
    prompt = "The history of the city of Rome spans two and a half thousand years. " * 4
    first = completion(server, prompt=prompt, max_tokens=2)
    assert first["usage"]["prompt_tokens_details"] is None  # a miss has no details, as in vLLM
    second = completion(server, prompt=prompt, max_tokens=2)
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    # Whole 16-token blocks, never the last prompt token (it is computed again for logits).
    assert 16 <= cached < second["usage"]["prompt_tokens"] and cached % 16 == 0
    chat(server, user(prompt), max_tokens=2)
    again = chat(server, user(prompt), max_tokens=2)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16
    srv = ServerProcess(binary, "--seed", "0").wait_ready()  # without the flag: always null
    try:
        for _ in range(2):
            r = completion(srv, prompt=prompt, max_tokens=2)
        assert r["usage"]["prompt_tokens_details"] is None
    finally:
        assert srv.stop() == 0


def test_request_id_names_the_response(server):
    assert completion(server, prompt="Hi", request_id="abc-1")["id"] == "cmpl-abc-1"
    assert chat(server, user("Hi"), request_id="abc-2")["id"] == "chatcmpl-abc-2"


def test_string_booleans_as_pydantic_reads_them(server):
    r = completion(server, prompt="Hello world", echo="true", max_tokens=2)
    assert r["choices"][0]["text"].startswith("Hello world")
    r = completion(server, prompt="Hello", ignore_eos="True", max_tokens=5, return_token_ids="1")
    assert len(r["choices"][0]["token_ids"]) == 5
    stream = post(server, "/v1/completions", prompt="Hi", max_tokens=2, stream="yes")
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert sse_chunks(stream)


# Each case: endpoint, extra body fields, the param named, text the message must hold.
BAD_REQUESTS = [
    ("cmpl", {"seed": 2**63}, "seed", "9223372036854775807"),
    ("cmpl", {"seed": -2**63 - 1}, "seed", "-9223372036854775808"),
    ("chat", {"seed": 2**64}, "seed", "9223372036854775807"),
    ("cmpl", {"logit_bias": {"x": 1, "12": 2, "y": 3}}, "logit_bias", "'x', 'y'"),
    ("cmpl", {"logit_bias": {"49152": 1, "60000": 2, "5": 1}}, "logit_bias",
     f"[49152, 60000] in logit_bias contain out-of-vocab token ids. Vocabulary size: "
     f"{VOCAB_SIZE}"),
    ("cmpl", {"allowed_token_ids": []}, "allowed_token_ids", "allowed_token_ids"),
    ("chat", {"allowed_token_ids": [1, 99999]}, "allowed_token_ids", "[99999]"),
    ("cmpl", {"truncate_prompt_tokens": -2}, "truncate_prompt_tokens", "-1"),
    ("cmpl", {"truncate_prompt_tokens": 5000}, "truncate_prompt_tokens", "max_model_len"),
    ("chat", {"truncation_side": "middle", "truncate_prompt_tokens": 2}, "truncation_side",
     "'left' or 'right'"),
    ("cmpl", {"echo": "maybe"}, "echo", "boolean"),
    ("chat", {"echo": 2}, "echo", "boolean"),
    ("cmpl", {"return_token_ids": "sure"}, "return_token_ids", "boolean"),
    ("cmpl", {"cache_salt": "s3cret"}, "cache_salt", "not supported"),
    ("chat", {"kv_transfer_params": {"do_remote_decode": True}}, "kv_transfer_params",
     "not supported"),
    ("chat", {"logits_processors": ["my.Processor"]}, "logits_processors", "not supported"),
    ("cmpl", {"vllm_xargs": {"k": 1}}, "vllm_xargs", "not supported"),
    ("chat", {"structural_tag": "{}"}, "structural_tag", "'structures' must be a list"),
    ("cmpl", {"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs.structural_tag",
     "'structures' must be a list"),
    ("chat", {"mm_processor_kwargs": {"num_crops": 4}}, "mm_processor_kwargs", "not supported"),
    ("cmpl", {"priority": 3}, "priority", "Priority scheduling is not enabled"),
    ("chat", {"spaces_between_special_tokens": "perhaps"}, "spaces_between_special_tokens",
     "boolean"),
]


@pytest.mark.parametrize("endpoint,fields,param,text", BAD_REQUESTS,
                         ids=[f"{e}-{p}-{i}" for i, (e, _, p, _) in enumerate(BAD_REQUESTS)])
def test_bad_fields_are_a_400_naming_them(server, endpoint, fields, param, text):
    if endpoint == "cmpl":
        r = post(server, "/v1/completions", prompt="Hi", max_tokens=2, **fields)
    else:
        r = post(server, "/v1/chat/completions", messages=user("Hi"), max_tokens=2, **fields)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert param in err["message"] and text in err["message"], err
    if err["param"] is not None:
        assert err["param"] == param


def test_unknown_fields_are_ignored_with_a_warning(server):
    r = completion(server, prompt="Hi", max_tokens=2, no_such_field=1)
    assert r["usage"]["completion_tokens"] == 2
    assert "ignored: {'no_such_field'}" in server.output()


def test_sdk_sees_the_fields(client):
    r = client.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=4,
                                  temperature=0, extra_body={"return_token_ids": True,
                                                             "truncate_prompt_tokens": 2})
    assert r.usage.prompt_tokens == 2
    assert len(r.choices[0].model_extra["token_ids"]) == r.usage.completion_tokens
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2, seed=2**63)
    assert "seed" in e.value.message
