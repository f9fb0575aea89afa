"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) on SmolLM2, black-box
through the official `anthropic` SDK, whose typed models are the shape oracle for every
response and stream event: the text equals /v1/chat/completions' for the same conversation;
system prompts, stop_sequences and max_tokens end as Anthropic says; a stream's deltas make up
its final message; tool_choice any/tool returns tool_use blocks whose input validates
(jsonschema) against input_schema, and a tool round trip renders as the equivalent chat
conversation; count_tokens equals usage.input_tokens and /tokenize; reasoning becomes thinking
blocks; unknown fields and bad input are 400s in Anthropic's error shape; x-api-key works."""
import copy
import json
import pathlib
from types import SimpleNamespace

import anthropic
import jsonschema
import openai
import pytest
import requests
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from test_server import MODEL_NAME, ServerProcess

HERMES = pathlib.Path(__file__).resolve().parents[3] / "shared/chat_templates/hermes_tools.jinja"

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 16},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
SEARCH = {
    "name": "search",
    "description": "Search the web",
    "input_schema": {
        "type": "object",
        "properties": {"query": {"type": "string", "maxLength": 20}},
        "required": ["query"],
        "additionalProperties": False,
    },
}
TOOLS = [WEATHER, SEARCH]
SCHEMAS = {t["name"]: t["input_schema"] for t in TOOLS}
OPENAI_TOOLS = [{"type": "function",
                 "function": {"name": t["name"], "description": t["description"],
                              "parameters": t["input_schema"]}} for t in TOOLS]
USER = [{"role": "user", "content": "Write one sentence about the sea."}]
EVENTS = TypeAdapter(RawMessageStreamEvent)


def start(binary, *args):
    return ServerProcess(binary, "--seed", "0", *args).wait_ready()


@pytest.fixture(scope="module")
def server(binary):
    srv = start(binary, "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def hermes(binary):
    """A template that renders tools, tool calls and tool results (SmolLM2's own does not)."""
    srv = start(binary, "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                "--chat-template", str(HERMES))
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def create(claude, temperature=0, **kw):
    kw.setdefault("model", MODEL_NAME)
    kw.setdefault("max_tokens", 24)
    kw.setdefault("messages", USER)
    # The SDK no longer types temperature, top_p and top_k; vLLM (and vllm-cpp) take them.
    kw.setdefault("extra_body", {"temperature": temperature})
    m = claude.messages.create(**kw)
    assert isinstance(m, Message)
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL_NAME
    assert m.id.startswith("msg_")
    return m


def text_of(m):
    return "".join(b.text for b in m.content if b.type == "text")


def tokenize(server, messages, tools=None):
    body = {"model": MODEL_NAME, "messages": messages}
    if tools:
        body["tools"] = tools
    r = requests.post(server.url + "/tokenize", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["count"]


def test_text_equals_chat_completions(claude, oai):
    m = create(claude)
    c = oai.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=24, temperature=0)
    assert text_of(m) == c.choices[0].message.content
    assert [b.type for b in m.content] == ["text"]
    assert m.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[c.choices[0].finish_reason]
    assert m.stop_sequence is None
    assert m.usage.input_tokens == c.usage.prompt_tokens
    assert m.usage.output_tokens == c.usage.completion_tokens


def test_system_as_string_and_blocks(claude, oai):
    sys_text = "You are a pirate. Answer like one."
    as_string = create(claude, system=sys_text)
    as_blocks = create(claude, system=[{"type": "text", "text": sys_text}])
    chat = oai.chat.completions.create(
        model=MODEL_NAME, max_tokens=24, temperature=0,
        messages=[{"role": "system", "content": sys_text}, *USER])
    assert text_of(as_string) == text_of(as_blocks) == chat.choices[0].message.content
    assert as_string.usage.input_tokens == chat.usage.prompt_tokens
    # Two blocks are the system message's two text parts.
    parts = [{"type": "text", "text": "You are a pirate."}, {"type": "text", "text": "Be brief."}]
    two = create(claude, system=parts)
    chat = oai.chat.completions.create(model=MODEL_NAME, max_tokens=24, temperature=0,
                                       messages=[{"role": "system", "content": parts}, *USER])
    assert text_of(two) == chat.choices[0].message.content


def test_multi_turn_and_content_blocks(claude, oai):
    turns = [{"role": "user", "content": [{"type": "text", "text": "Hi!"},
                                          {"type": "text", "text": "Name a colour."}]},
             {"role": "assistant", "content": "Blue."},
             {"role": "user", "content": "And another one?"}]
    m = create(claude, messages=turns)
    chat_turns = [{"role": "user", "content": [{"type": "text", "text": "Hi!"},
                                               {"type": "text", "text": "Name a colour."}]},
                  {"role": "assistant", "content": "Blue."},
                  {"role": "user", "content": "And another one?"}]
    c = oai.chat.completions.create(model=MODEL_NAME, messages=chat_turns, max_tokens=24,
                                    temperature=0)
    assert text_of(m) == c.choices[0].message.content


def test_final_assistant_turn_is_continued(claude, oai, server):
    prefill = [*USER, {"role": "assistant", "content": "The sea is"}]
    m = create(claude, messages=prefill)
    c = oai.chat.completions.create(model=MODEL_NAME, messages=prefill, max_tokens=24,
                                    temperature=0, extra_body={"continue_final_message": True,
                                                               "add_generation_prompt": False})
    assert text_of(m) == c.choices[0].message.content
    assert m.usage.input_tokens == c.usage.prompt_tokens
    counted = claude.messages.count_tokens(model=MODEL_NAME, messages=prefill)
    assert counted.input_tokens == m.usage.input_tokens
    r = post(server, "/tokenize", {"model": MODEL_NAME, "messages": prefill,
                                   "continue_final_message": True, "add_generation_prompt": False})
    assert r.json()["count"] == counted.input_tokens


@pytest.mark.parametrize("extra", [{"temperature": 1.0, "top_k": 1},
                                   {"temperature": 1.0, "top_p": 1e-9}])
def test_top_k_and_top_p_take_effect(claude, extra):
    # One candidate token left: sampling at temperature 1 is greedy decoding.
    greedy = text_of(create(claude, max_tokens=30))
    for _ in range(2):
        assert text_of(create(claude, max_tokens=30, extra_body=extra)) == greedy


def test_cache_control_and_metadata_accepted(claude):
    # The hints change nothing in the answer: the prefix cache is automatic.
    plain = create(claude, system="Be brief.")
    m = create(claude, metadata={"user_id": "user-1"}, cache_control={"type": "ephemeral"},
               system=[{"type": "text", "text": "Be brief.",
                        "cache_control": {"type": "ephemeral"}}],
               messages=[{"role": "user", "content": [
                   {"type": "text", "text": USER[0]["content"],
                    "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}])
    assert text_of(m) == text_of(plain)
    assert m.usage.input_tokens == plain.usage.input_tokens


def test_output_config_format_is_enforced(claude):
    schema = {"type": "object", "properties": {"colour": {"enum": ["red", "green"]},
                                               "count": {"type": "integer"}},
              "required": ["colour", "count"], "additionalProperties": False}
    m = create(claude, max_tokens=60, output_config={
        "format": {"type": "json_schema", "schema": schema}, "effort": "low"},
        messages=[{"role": "user", "content": "Name a colour and a number."}])
    assert m.stop_reason == "end_turn"
    jsonschema.validate(json.loads(text_of(m)), schema)


def middle(text):
    """Five characters from the middle of `text`, a stop sequence it is sure to contain."""
    assert len(text) >= 20, text
    return text[len(text) // 2:len(text) // 2 + 5]


def test_stop_sequence(claude):
    full = text_of(create(claude, max_tokens=40))
    stop = middle(full)
    m = create(claude, max_tokens=40, stop_sequences=["NEVER-SEEN", stop])
    assert m.stop_reason == "stop_sequence"
    assert m.stop_sequence == stop
    assert text_of(m) == full[:full.index(stop)]


def test_max_tokens(claude):
    m = create(claude, max_tokens=3)
    assert m.stop_reason == "max_tokens"
    assert m.usage.output_tokens == 3
    assert m.stop_sequence is None


def stream_events(server, body, headers=None):
    """The raw SSE of a streamed request: [(event name, parsed SDK event)]."""
    r = requests.post(server.url + "/v1/messages", json={**body, "stream": True},
                      headers=headers, stream=True, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events, name = [], None
    for line in r.iter_lines(decode_unicode=True):
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: ") and name == "ping":  # the SDK skips pings
            assert json.loads(line[len("data: "):]) == {"type": "ping"}
            events.append(SimpleNamespace(type="ping"))
        elif line.startswith("data: "):
            ev = EVENTS.validate_json(line[len("data: "):])
            assert ev.type == name
            events.append(ev)
    return events


def test_stream_deltas_make_the_final_message(claude, server):
    whole = create(claude, max_tokens=30)
    with claude.messages.stream(model=MODEL_NAME, max_tokens=30, messages=USER,
                                extra_body={"temperature": 0}) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == text_of(final) == text_of(whole)
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens
    events = stream_events(server, {"model": MODEL_NAME, "max_tokens": 30, "temperature": 0,
                                    "messages": USER})
    types = [e.type for e in events]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert types[1:3] == ["ping", "content_block_start"]
    assert types[-3] == "content_block_stop"
    assert set(types[3:-3]) == {"content_block_delta"}
    assert events[-2].usage.output_tokens == whole.usage.output_tokens


def test_stream_stop_sequence(claude, server):
    full = text_of(create(claude, max_tokens=40))
    stop = middle(full)
    events = stream_events(server, {"model": MODEL_NAME, "max_tokens": 40, "temperature": 0,
                                    "messages": USER, "stop_sequences": [stop]})
    delta = events[-2]
    assert delta.delta.stop_reason == "stop_sequence" and delta.delta.stop_sequence == stop
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == full[:full.index(stop)]


WEATHER_Q = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.mark.parametrize("temperature", [0, 1])
def test_tool_choice_any_input_validates(claude, temperature):
    m = create(claude, messages=WEATHER_Q, tools=TOOLS, tool_choice={"type": "any"},
               max_tokens=300, temperature=temperature)
    uses = [b for b in m.content if b.type == "tool_use"]
    assert all(b.type == "tool_use" for b in m.content)
    # Sampled, the list of calls may run past max_tokens (then nothing parses); greedy ends.
    assert m.stop_reason == "tool_use" and uses or temperature and m.stop_reason == "max_tokens"
    for b in uses:
        jsonschema.validate(b.input, SCHEMAS[b.name])
        assert b.id


def test_tool_choice_tool_and_no_parallel(claude):
    m = create(claude, messages=WEATHER_Q, tools=TOOLS, max_tokens=200,
               tool_choice={"type": "tool", "name": "search"})
    (use,) = m.content
    assert use.type == "tool_use" and use.name == "search"
    jsonschema.validate(use.input, SCHEMAS["search"])
    assert m.stop_reason == "tool_use"
    m = create(claude, messages=WEATHER_Q, tools=TOOLS, max_tokens=300,
               tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert len(m.content) == 1 and m.content[0].type == "tool_use"


def test_tool_use_streams_like_non_streaming(claude, server):
    kw = dict(model=MODEL_NAME, messages=WEATHER_Q, tools=TOOLS, tool_choice={"type": "any"},
              max_tokens=300)
    whole = claude.messages.create(**kw, extra_body={"temperature": 0})
    with claude.messages.stream(**kw, extra_body={"temperature": 0}) as s:
        final = s.get_final_message()
    assert [(b.name, b.input) for b in final.content] == [(b.name, b.input) for b in whole.content]
    assert final.stop_reason == "tool_use"
    events = stream_events(server, {**kw, "temperature": 0})
    assert any(e.type == "content_block_delta" and e.delta.type == "input_json_delta"
               for e in events)


def test_tool_round_trip(claude, hermes):
    server = hermes
    claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    first = create(claude, messages=WEATHER_Q, tools=TOOLS, max_tokens=200,
                   tool_choice={"type": "tool", "name": "get_weather"})
    (use,) = first.content
    convo = [*WEATHER_Q,
             {"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
                                               use.model_dump()]},
             {"role": "user", "content": [
                 {"type": "tool_result", "tool_use_id": use.id,
                  "content": [{"type": "text", "text": "Sunny, 21 C"}]},
                 {"type": "text", "text": "Thanks, and tomorrow?"}]}]
    reply = create(claude, messages=convo, tools=TOOLS, tool_choice={"type": "none"})
    assert reply.stop_reason in ("end_turn", "max_tokens")
    assert all(b.type == "text" for b in reply.content)
    counted = claude.messages.count_tokens(model=MODEL_NAME, messages=convo, tools=TOOLS)
    assert counted.input_tokens == reply.usage.input_tokens
    chat = [*WEATHER_Q,
            {"role": "assistant", "content": "Let me check.",
             "tool_calls": [{"id": use.id, "type": "function",
                             "function": {"name": use.name, "arguments": json.dumps(use.input)}}]},
            {"role": "tool", "tool_call_id": use.id, "name": use.name, "content": "Sunny, 21 C"},
            {"role": "user", "content": "Thanks, and tomorrow?"}]
    assert counted.input_tokens == tokenize(server, chat, OPENAI_TOOLS)


def test_tool_result_is_error_reaches_the_prompt(hermes):
    claude = anthropic.Anthropic(base_url=hermes.url, api_key="unused", max_retries=0)

    def convo(is_error):
        return [*WEATHER_Q,
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                                                   "name": "search", "input": {"query": "x"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                              "content": "timeout", "is_error": is_error}]}]
    ok = claude.messages.count_tokens(model=MODEL_NAME, messages=convo(False), tools=TOOLS)
    err = claude.messages.count_tokens(model=MODEL_NAME, messages=convo(True), tools=TOOLS)
    assert err.input_tokens > ok.input_tokens


@pytest.mark.parametrize("extra", [
    {},
    {"system": "You are terse."},
    {"tools": TOOLS},
    {"system": [{"type": "text", "text": "Be kind."}], "tools": [SEARCH],
     "tool_choice": {"type": "auto"}},
])
def test_count_tokens_matches_create_and_tokenize(claude, server, extra):
    counted = claude.messages.count_tokens(model=MODEL_NAME, messages=USER, **extra)
    m = create(claude, max_tokens=2, **extra)
    assert counted.input_tokens == m.usage.input_tokens
    chat = list(USER)
    if "system" in extra:
        s = extra["system"]
        chat.insert(0, {"role": "system", "content": s if isinstance(s, str) else s[0]["text"]})
    tools = [t for t in OPENAI_TOOLS if t["function"]["name"] in
             {x["name"] for x in extra.get("tools", [])}]
    assert counted.input_tokens == tokenize(server, chat, tools)


def post(server, path, body, **kw):
    return requests.post(server.url + path, json=body, timeout=30, **kw)


BASE = {"model": MODEL_NAME, "max_tokens": 8, "messages": USER}


@pytest.mark.parametrize("body,names", [
    ({**BASE, "frequency_penalty": 1}, "frequency_penalty"),
    ({**BASE, "service_tier": "auto"}, "service_tier"),
    ({**BASE, "output_config": {"effort": "huge"}}, "output_config.effort"),
    ({**BASE, "output_config": {"format": {"type": "json_schema"}}}, "output_config.format.schema"),
    ({k: v for k, v in BASE.items() if k != "max_tokens"}, "max_tokens"),
    ({**BASE, "max_tokens": 0}, "max_tokens"),
    ({**BASE, "max_tokens": "8"}, "max_tokens"),
    ({k: v for k, v in BASE.items() if k != "model"}, "model"),
    ({**BASE, "messages": []}, "messages"),
    ({**BASE, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({**BASE, "messages": [{"role": "user", "content": []}]}, "messages[0].content"),
    ({**BASE, "messages": [{"role": "user", "content": "x", "name": "bob"}]}, "messages[0].name"),
    ({**BASE, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}]},
     "messages[0].content[0]"),
    ({**BASE, "messages": [{"role": "user", "content": [
        {"type": "tool_use", "id": "a", "name": "search", "input": {}}]}]},
     "messages[0].content[0]"),
    ({**BASE, "messages": [{"role": "user", "content": [{"type": "text", "text": "x",
                                                          "foo": 1}]}]},
     "messages[0].content[0].foo"),
    ({**BASE, "stop_sequences": "END"}, "stop_sequences"),
    ({**BASE, "metadata": {"user_id": "u", "plan": "pro"}}, "metadata.plan"),
    ({**BASE, "tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({**BASE, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({**BASE, "tools": TOOLS, "tool_choice": {"type": "tool"}}, "tool_choice.name"),
    ({**BASE, "tools": TOOLS, "tool_choice": {"type": "maybe"}}, "tool_choice.type"),
    ({**BASE, "tool_choice": {"type": "any"}}, "tool_choice"),
    ({**BASE, "thinking": {"type": "enabled", "budget_tokens": 1024}}, "--reasoning-parser"),
    ({**BASE, "system": [{"type": "image", "source": {}}]}, "system[0]"),
])
def test_bad_requests_are_anthropic_400s(server, body, names):
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        if path.endswith("count_tokens"):
            create_only = ("max_tokens", "stop_sequences", "metadata", "output_config")
            body = {k: v for k, v in body.items() if k not in create_only}
            if names.startswith(create_only):
                continue
        r = post(server, path, body)
        assert r.status_code == 400, (path, r.text)
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
        assert names in err["error"]["message"], err


def test_sdk_raises_bad_request(claude):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=MODEL_NAME, max_tokens=8, messages=USER,
                               extra_body={"presence_penalty": 1})
    assert e.value.status_code == 400
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "presence_penalty" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as e:
        claude.messages.create(model="claude-nope", max_tokens=8, messages=USER)
    assert e.value.body["error"]["type"] == "not_found_error"


def test_non_json_body_is_anthropic_400(server):
    r = requests.post(server.url + "/v1/messages", data="{",
                      headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 400
    assert r.json()["type"] == "error"


def test_x_api_key(binary):
    srv = start(binary, "--api-key", "sekret")
    try:
        good = anthropic.Anthropic(base_url=srv.url, api_key="sekret", max_retries=0)
        assert create(good, max_tokens=2).usage.output_tokens == 2
        bearer = anthropic.Anthropic(base_url=srv.url, auth_token="sekret", max_retries=0)
        assert bearer.messages.count_tokens(model=MODEL_NAME, messages=USER).input_tokens > 0
        bad = anthropic.Anthropic(base_url=srv.url, api_key="wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as e:
            bad.messages.create(model=MODEL_NAME, max_tokens=2, messages=USER)
        assert e.value.body["error"]["type"] == "authentication_error"
        # The OpenAI routes keep vLLM's rule: only the Bearer header.
        r = requests.post(srv.url + "/v1/chat/completions", headers={"x-api-key": "sekret"},
                          json={"model": MODEL_NAME, "messages": USER, "max_tokens": 2})
        assert r.status_code == 401
    finally:
        assert srv.stop() == 0


def test_reasoning_becomes_thinking_blocks(binary):
    # deepseek_r1 reads all text before a </think> SmolLM2 never writes as reasoning.
    srv = start(binary, "--reasoning-parser", "deepseek_r1")
    try:
        claude = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
        oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
        c = oai.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=20,
                                        temperature=0)
        reasoning = c.choices[0].message.model_extra["reasoning"]
        assert reasoning
        kw = dict(model=MODEL_NAME, messages=USER, max_tokens=20,
                  thinking={"type": "enabled"}, extra_body={"temperature": 0})
        m = claude.messages.create(**kw)
        assert [b.type for b in m.content] == ["thinking"]
        assert m.content[0].thinking == reasoning
        with claude.messages.stream(**kw) as s:
            final = s.get_final_message()
        assert [b.type for b in final.content] == ["thinking"]
        assert final.content[0].thinking == reasoning
        r = post(srv, "/v1/messages", {**BASE, "thinking": {"type": "enabled",
                                                            "budget_tokens": 2048}})
        assert r.status_code == 400 and "budget_tokens" in r.json()["error"]["message"]
    finally:
        assert srv.stop() == 0


DELETE = object()
SEEDS = [
    {"model": MODEL_NAME, "max_tokens": 1, "system": [{"type": "text", "text": "s"}],
     "stop_sequences": ["x"], "top_k": 3, "metadata": {"user_id": "u"},
     "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "He"}]},
    {"model": MODEL_NAME, "max_tokens": 1, "tool_choice": {"type": "tool", "name": "search"},
     "tools": [SEARCH],
     "messages": [{"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": [
                      {"type": "text", "text": "t"},
                      {"type": "tool_use", "id": "a", "name": "search", "input": {"query": "q"}}]},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": "a", "is_error": True,
                       "content": [{"type": "text", "text": "r"}]},
                      {"type": "text", "text": "ok?"}]}]},
]


def mutants(body):
    """The body with each of its nodes deleted or replaced by a value of every JSON type."""
    def walk(node, path):
        if path:
            yield path
        items = node.items() if isinstance(node, dict) else \
            enumerate(node) if isinstance(node, list) else []
        for k, v in items:
            yield from walk(v, path + [k])
    for path in list(walk(body, [])):
        for value in (DELETE, None, 7, -1.5, "x", [], {}, True):
            b = copy.deepcopy(body)
            parent = b
            for k in path[:-1]:
                parent = parent[k]
            if value is DELETE:
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            yield b


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_mutated_bodies_get_a_message_or_a_4xx(server, seed):
    n = 0
    for body in mutants(SEEDS[seed]):
        body.pop("stream", None)
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            r = post(server, path, body)
            n += 1
            if r.status_code == 200:
                if path.endswith("count_tokens"):
                    assert r.json()["input_tokens"] > 0
                else:
                    Message.model_validate(r.json())
                continue
            assert r.status_code in (400, 404), (body, r.status_code, r.text)
            err = r.json()
            assert err["type"] == "error" and err["error"]["message"], err
    assert n > 250
    assert requests.get(server.url + "/health", timeout=5).status_code == 200
