"""The Responses API (/v1/responses) black-box through the official openai SDK, against
SmolLM2: every response object and stream event must validate as the SDK's typed models
(pydantic, strict model_validate: the SDK's types are the oracle for shape); text equals what
chat completions gives for the same conversation at temperature 0 (the same engine, template and
parsers); previous_response_id chaining renders the whole conversation (input_tokens equal
/tokenize of the chat messages); json_schema output validates with jsonschema; a tool call
round trip with tool_choice "required"; streamed deltas concatenate to the final text; the
store keeps at most its count and byte bounds, oldest evicted; fields this server cannot
honour are 400s naming them."""
import json

import jsonschema
import openai
import pytest
import requests
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from conftest import ROOT
from test_server import MODEL_NAME, ServerProcess, client, server  # noqa: F401 (fixtures)

STREAM_EVENT = TypeAdapter(ResponseStreamEvent)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 16},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
    "strict": True,
}
CHAT_WEATHER = {"type": "function", "function": {k: WEATHER[k] for k in
                                                  ("name", "description", "parameters")}}


def create(client, **kw):
    """A non-streamed create, validated strictly as the SDK's Response model."""
    kw.setdefault("model", MODEL_NAME)
    raw = client.responses.with_raw_response.create(**kw)
    data = json.loads(raw.text)
    Response.model_validate(data)
    parsed = raw.parse()
    assert parsed.id == data["id"]
    return parsed, data


def chat(client, messages, max_tokens, **kw):
    return client.chat.completions.create(model=MODEL_NAME, messages=messages,
                                          max_tokens=max_tokens, temperature=0, **kw).choices[0]


def tokens(server, messages, **kw):
    body = {"model": MODEL_NAME, "messages": messages, "add_generation_prompt": True, **kw}
    r = requests.post(server.url + "/tokenize", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["count"]


def stream_events(server, body):
    """The raw SSE stream: (event name, data) pairs, each data validated strictly."""
    body = {"model": MODEL_NAME, "stream": True, **body}
    r = requests.post(server.url + "/v1/responses", json=body, stream=True, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = []
    for block in r.text.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        data = json.loads(lines[1][len("data: "):])
        assert data["type"] == lines[0][len("event: "):]
        STREAM_EVENT.validate_python(data)
        events.append(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


# ---- text: the same as chat completions ----

@pytest.mark.parametrize("max_tokens", [6, 40])
def test_text_equals_chat(server, client, max_tokens):
    question = "What is the capital of France?"
    resp, data = create(client, input=question, max_output_tokens=max_tokens, temperature=0)
    ch = chat(client, [{"role": "user", "content": question}], max_tokens)
    assert resp.object == "response" and resp.id.startswith("resp_")
    assert resp.output_text == ch.message.content
    assert [item.type for item in resp.output] == ["message"]
    assert resp.output[0].role == "assistant" and resp.output[0].content[0].type == "output_text"
    if ch.finish_reason == "length":
        assert resp.status == "incomplete"
        assert resp.incomplete_details.reason == "max_output_tokens"
    else:
        assert resp.status == "completed" and resp.incomplete_details is None
    assert resp.usage.input_tokens == tokens(server, [{"role": "user", "content": question}])
    assert resp.usage.output_tokens >= 1
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    assert data["max_output_tokens"] == max_tokens and data["temperature"] == 0


def test_items_and_instructions_equal_chat(server, client):
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "Name a color."}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Blue."}]},
        {"role": "user", "content": "Name another one."},
    ]
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Name a color."},
                {"role": "assistant", "content": "Blue."},
                {"role": "user", "content": "Name another one."}]
    resp, data = create(client, input=items, instructions="You are terse.",
                        max_output_tokens=12, temperature=0, metadata={"k": "v"}, user="u1")
    assert resp.output_text == chat(client, messages, 12).message.content
    assert resp.usage.input_tokens == tokens(server, messages)
    assert data["instructions"] == "You are terse."
    assert data["metadata"] == {"k": "v"} and data["user"] == "u1"


# ---- store, retrieve, chaining, cancel ----

def test_chaining_renders_the_whole_conversation(server, client):
    first, _ = create(client, input="Tell me a fruit.", max_output_tokens=8, temperature=0)
    second, data = create(client, input="And a vegetable?", previous_response_id=first.id,
                          instructions="Be brief.", max_output_tokens=8, temperature=0)
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Tell me a fruit."},
                {"role": "assistant", "content": first.output_text},
                {"role": "user", "content": "And a vegetable?"}]
    assert second.usage.input_tokens == tokens(server, messages)
    assert second.output_text == chat(client, messages, 8).message.content
    assert data["previous_response_id"] == first.id
    # A third turn chains through the second (whose stored conversation starts with the first).
    third, _ = create(client, input="Thanks.", previous_response_id=second.id,
                      max_output_tokens=4, temperature=0)
    assert third.usage.input_tokens == tokens(server, messages[1:] + [
        {"role": "assistant", "content": second.output_text},
        {"role": "user", "content": "Thanks."}])


def test_retrieve_returns_the_stored_response(client):
    resp, data = create(client, input="Hello", max_output_tokens=5, temperature=0)
    raw = client.responses.with_raw_response.retrieve(resp.id)
    assert json.loads(raw.text) == data
    Response.model_validate(json.loads(raw.text))


def test_store_false_cannot_be_retrieved_or_chained(client):
    resp, data = create(client, input="Hello", max_output_tokens=5, temperature=0, store=False)
    assert data["store"] is False
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.retrieve(resp.id)
    assert resp.id in e.value.response.json()["error"]["message"]
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model=MODEL_NAME, input="Hi", previous_response_id=resp.id)
    assert e.value.response.json()["error"]["param"] == "previous_response_id"


def test_unknown_id_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.retrieve("resp_nonexistent")
    err = e.value.response.json()["error"]
    assert "resp_nonexistent" in err["message"] and err["code"] == 404


def test_cancel(client):
    resp, _ = create(client, input="Hello", max_output_tokens=5, temperature=0)
    with pytest.raises(openai.BadRequestError) as e:  # vLLM: only background ones
        client.responses.cancel(resp.id)
    assert "Cannot cancel a synchronous response" in e.value.response.json()["error"]["message"]
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_nonexistent")


# ---- structured output and tools ----

def test_json_schema_output_validates(client):
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 12},
                             "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    fmt = {"type": "json_schema", "name": "person", "schema": schema, "strict": True}
    resp, data = create(client, input="Describe a person as JSON.", text={"format": fmt},
                        max_output_tokens=80, temperature=0)
    assert resp.status == "completed"
    jsonschema.validate(json.loads(resp.output_text), schema)
    assert data["text"]["format"]["name"] == "person"


def test_tool_call_round_trip(server, client):
    user = {"role": "user", "content": "What is the weather in Paris?"}
    resp, data = create(client, input=[user], tools=[WEATHER], tool_choice="required",
                        max_output_tokens=200, temperature=0)
    calls = [item for item in resp.output if item.type == "function_call"]
    assert calls and resp.status == "completed"
    for call in calls:
        assert call.name == "get_weather" and call.call_id and call.id.startswith("fc_")
        jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    assert data["tools"][0]["name"] == "get_weather" and data["tool_choice"] == "required"
    # The same calls as chat completions make.
    ch = chat(client, [user], 200, tools=[CHAT_WEATHER], tool_choice="required")
    assert [(c.name, c.arguments) for c in calls] == [
        (c.function.name, c.function.arguments) for c in ch.message.tool_calls]
    # The results go back as function_call_output items, after the calls fed back as input.
    outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": '{"temp": 21}'}
               for c in calls]
    fed_back = [user] + [c.model_dump(exclude_none=True) for c in calls] + outputs
    again, _ = create(client, input=fed_back, tools=[WEATHER], tool_choice="none",
                      max_output_tokens=10, temperature=0)
    messages = [user,
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": c.call_id, "type": "function",
                     "function": {"name": c.name, "arguments": c.arguments}} for c in calls]}]
    messages += [{"role": "tool", "tool_call_id": c.call_id, "content": '{"temp": 21}'}
                 for c in calls]
    assert again.usage.input_tokens == tokens(server, messages, tools=[CHAT_WEATHER])
    assert again.output_text == chat(client, messages, 10, tools=[CHAT_WEATHER],
                                     tool_choice="none").message.content
    # Chained instead of resent: the same prompt.
    chained, _ = create(client, input=outputs, previous_response_id=resp.id, tools=[WEATHER],
                        tool_choice="none", max_output_tokens=10, temperature=0)
    assert chained.usage.input_tokens == again.usage.input_tokens
    assert chained.output_text == again.output_text


def test_named_tool_choice(server, client):
    body = {"input": "What is the weather in Paris?", "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "max_output_tokens": 100, "temperature": 0}
    resp, data = create(client, **body)
    (call,) = resp.output
    assert call.type == "function_call" and call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    assert data["tool_choice"] == {"type": "function", "name": "get_weather"}
    events = stream_events(server, body)
    (item,) = events[-1]["response"]["output"]
    assert (item["name"], item["arguments"]) == (call.name, call.arguments)
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert added[0]["item"]["name"] == "get_weather"  # the name comes first


# ---- streaming ----

def test_stream_deltas_concatenate_to_the_final_text(server, client):
    body = {"input": "Write one sentence about the sea.", "max_output_tokens": 30,
            "temperature": 0}
    events = stream_events(server, body)
    types = [e["type"] for e in events]
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", types[-1]]
    final = events[-1]["response"]
    assert types[-1] == ("response.incomplete" if final["status"] == "incomplete"
                         else "response.completed")
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    text = final["output"][0]["content"][0]["text"]
    assert deltas == text == events[-4]["text"]
    whole, _ = create(client, **body)
    assert text == whole.output_text
    assert final["usage"]["output_tokens"] == whole.usage.output_tokens
    # Stored like a non-streamed one.
    assert client.responses.retrieve(final["id"]).output_text == text


def test_sdk_stream_helpers(client):
    kw = dict(model=MODEL_NAME, input="Say hello.", max_output_tokens=60, temperature=0)
    events = list(client.responses.create(stream=True, **kw))
    assert events[0].type == "response.created" and events[-1].response.output_text
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    with client.responses.stream(**kw) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output_text == text == events[-1].response.output_text


def test_stream_tool_call_arguments(server, client):
    body = {"input": "What is the weather in Paris?", "tools": [WEATHER],
            "tool_choice": "required", "max_output_tokens": 200, "temperature": 0}
    events = stream_events(server, body)
    final = events[-1]["response"]
    calls = [item for item in final["output"] if item["type"] == "function_call"]
    assert calls
    for call in calls:
        deltas = "".join(e["delta"] for e in events
                         if e["type"] == "response.function_call_arguments.delta"
                         and e["item_id"] == call["id"])
        assert deltas == call["arguments"]
    whole, _ = create(client, **body)
    assert [(c["name"], c["arguments"]) for c in calls] == [
        (c.name, c.arguments) for c in whole.output if c.type == "function_call"]


# ---- fields this server cannot honour ----

@pytest.mark.parametrize("extra,param", [
    ({"frobnicate": 1}, "frobnicate"),
    ({"background": True}, "background"),
    ({"include": ["message.output_text.logprobs"]}, "include"),
    ({"truncation": "auto"}, "truncation"),
    ({"service_tier": "flex"}, "service_tier"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"max_tool_calls": 2}, "max_tool_calls"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"stream_options": {"include_obfuscation": False}}, "stream_options"),
    ({"tools": [{"type": "web_search"}]}, "tools"),
    ({"text": {"format": {"type": "text"}, "verbosity": "low"}}, "text"),
    ({"reasoning": {"summary": "auto"}}, "reasoning"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input"),
    ({"tool_choice": {"type": "web_search_preview"}, "tools": [WEATHER]}, "tool_choice"),
    ({"metadata": {"k": 1}}, "metadata"),
    ({"tools": [{"type": "function", "description": "no name"}]}, "tools"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
])
def test_unsupported_fields_are_400(server, extra, param):
    body = {"model": MODEL_NAME, "input": "Hi", "max_output_tokens": 4, **extra}
    r = requests.post(server.url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_chat_path_errors_name_responses_fields(server):
    def error(**body):
        r = requests.post(server.url + "/v1/responses", json={"model": MODEL_NAME, **body},
                          timeout=30)
        assert r.status_code == 400, r.text
        return r.json()["error"]
    err = error(input="hello " * 2100)
    assert err["param"] == "input" and "maximum context length" in err["message"]
    err = error(input="hi", text={"format": {"type": "json_schema", "name": "x",
                                             "schema": {"type": "bogus"}}})
    assert err["param"] == "text" and "'text.format'" in err["message"]


def test_max_output_tokens_is_capped_by_the_context(server, client):
    # As vLLM: more than the prompt leaves is capped (2048 here), not refused.
    resp, data = create(client, input="Hi", max_output_tokens=100000, temperature=0)
    assert resp.status == "completed" and data["max_output_tokens"] == 100000


def test_routes_in_openapi(server):
    paths = requests.get(server.url + "/openapi.json", timeout=10).json()["paths"]
    assert "post" in paths["/v1/responses"]
    assert "get" in paths["/v1/responses/{response_id}"]
    assert "post" in paths["/v1/responses/{response_id}/cancel"]


# ---- store bounds ----

@pytest.fixture(scope="module")
def small_store(binary):
    srv = ServerProcess(binary, "--responses-store-max-count", "3",
                        "--responses-store-max-bytes", "6000").wait_ready()
    yield srv
    assert srv.stop() == 0


def test_store_evicts_oldest_past_the_count(small_store):
    c = openai.OpenAI(base_url=small_store.url + "/v1", api_key="unused", max_retries=0)
    ids = [create(c, input=f"Count {i}", max_output_tokens=2, temperature=0)[0].id
           for i in range(5)]
    for old in ids[:2]:
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(old)
    for kept in ids[2:]:
        assert c.responses.retrieve(kept).id == kept


def stored_bytes(c, resp_id, user_text):
    """What the store counts for a one-turn response: its JSON and its conversation's, compact."""
    def size(v):
        return len(json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode())
    data = json.loads(c.responses.with_raw_response.retrieve(resp_id).text)
    conversation = [{"role": "user", "content": user_text},
                    {"role": "assistant", "content": data["output"][0]["content"][0]["text"]}]
    return size(data) + size(conversation)


def test_store_evicts_oldest_past_the_bytes(small_store):
    c = openai.OpenAI(base_url=small_store.url + "/v1", api_key="unused", max_retries=0)
    small = create(c, input="Hi", max_output_tokens=2, temperature=0)[0].id
    small_size = stored_bytes(c, small, "Hi")
    texts = ["hello " * 300 + str(i) for i in range(2)]
    big = [create(c, input=t, max_output_tokens=2, temperature=0)[0].id for t in texts]
    sizes = [stored_bytes(c, b, t) for b, t in zip(big, texts)]
    assert sum(sizes) <= 6000 < small_size + sum(sizes)  # the premise: only the two big fit
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(small)
    for kept in big:
        assert c.responses.retrieve(kept).id == kept
    # One response larger than the whole cap is returned but not kept, and evicts nothing.
    huge = create(c, input="hello " * 1300, max_output_tokens=2, temperature=0)[0]
    assert huge.status in ("completed", "incomplete")
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(huge.id)
    for kept in big:
        assert c.responses.retrieve(kept).id == kept


# ---- reasoning, with --reasoning-parser ----

HERMES = ROOT.parent / "shared" / "chat_templates" / "hermes_tools.jinja"
# A grammar (from the first token: enable_in_reasoning) forces output with a reasoning end tag,
# so the parser sees what a reasoning model writes: '"abc' is reasoning, 'hi"' the answer.
THINK = {"type": "json_schema", "name": "forced",
         "schema": {"type": "string", "enum": ["abc</think>hi"]}}


@pytest.fixture(scope="module")
def parsers(binary):
    srv = ServerProcess(binary, "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                        "--reasoning-parser", "deepseek_r1", "--chat-template", str(HERMES),
                        "--structured-outputs-config", '{"enable_in_reasoning": true}').wait_ready()
    yield srv
    assert srv.stop() == 0


def test_reasoning_item_equals_chat(parsers):
    c = openai.OpenAI(base_url=parsers.url + "/v1", api_key="unused", max_retries=0)
    resp, _ = create(c, input="Hi", text={"format": THINK}, max_output_tokens=40, temperature=0)
    ch = c.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=40,
        temperature=0, response_format={"type": "json_schema", "json_schema": {
            "name": "forced", "schema": THINK["schema"]}}).choices[0].message
    reasoning = ch.model_extra["reasoning_content"]
    assert reasoning and ch.content
    assert [item.type for item in resp.output] == ["reasoning", "message"]
    assert resp.output[0].content[0].text == reasoning
    assert resp.output_text == ch.content
    assert resp.usage.output_tokens_details.reasoning_tokens >= 1
    # Streamed: a reasoning item, then the message, each with its own deltas.
    events = stream_events(parsers, {"input": "Hi", "text": {"format": THINK},
                                     "max_output_tokens": 40, "temperature": 0})
    added = [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"]
    assert added == ["reasoning", "message"]
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert streamed == reasoning
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == ch.content
    final = events[-1]["response"]
    assert final["output"][0]["content"][0]["text"] == reasoning
    assert final["output"][1]["content"][0]["text"] == ch.content
