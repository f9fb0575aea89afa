"""Tool calling and reasoning on SmolLM2, black-box through the OpenAI SDK: tool_choice
"required" and named functions return arguments that validate (PyPI jsonschema) against the
tool's schema; tool_choice "auto" with --tool-call-parser hermes and --reasoning-parser
deepseek_r1 reads calls and reasoning out of known text (forced with a structured-output regex,
so the parsers see exactly what a tool-calling model writes), whole and streamed, with vLLM's
delta shapes and finish reasons; a tool result goes back through the chat template as jinja2
renders it; bad tool_choice values are 400s naming the field; bad parser flags stop start-up."""
import json
import pathlib
import re

import jsonschema
import openai
import pytest
import requests

from conftest import load_template_tool, run
from test_server import MODEL_NAME, ServerProcess, client, server  # noqa: F401 (fixtures)

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERMES = ROOT.parent / "shared" / "chat_templates" / "hermes_tools.jinja"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 16},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "maxLength": 20}},
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, SEARCH]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def regex_escape(text):
    return re.escape(text).replace("\\\n", "\n")


def hermes_call(name, args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def collect_stream(stream):
    """(reasoning, content, calls [{id, name, arguments}], finish_reason, first entries)."""
    reasoning, content, calls, finish, firsts = "", "", [], None, []
    for chunk in stream:
        for ch in chunk.choices:
            d = ch.delta
            extra = d.model_extra or {}
            if extra.get("reasoning"):
                assert extra.get("reasoning_content") == extra["reasoning"]
                reasoning += extra["reasoning"]
            content += d.content or ""
            for tc in d.tool_calls or []:
                if tc.index == len(calls):
                    firsts.append(tc)
                    calls.append({"id": tc.id, "name": tc.function.name, "arguments": ""})
                else:
                    assert tc.id is None and tc.function.name is None, tc
                calls[tc.index]["arguments"] += tc.function.arguments or ""
            if ch.finish_reason:
                finish = ch.finish_reason
    return reasoning, content, calls, finish, firsts


# ---- tool_choice required and named, on the plain server ----

@pytest.mark.parametrize("temperature", [0, 1])
def test_required_arguments_validate(client, temperature):
    r = client.chat.completions.create(model=MODEL_NAME, messages=USER, tools=TOOLS,
                                       tool_choice="required", max_tokens=300,
                                       temperature=temperature, seed=3)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content == ""
    assert ch.message.tool_calls, ch.message
    for call in ch.message.tool_calls:
        assert call.type == "function"
        assert re.fullmatch(r"chatcmpl-tool-[0-9a-f]{32}", call.id)
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize("temperature", [0, 1])
def test_named_function_arguments_validate(client, temperature):
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=USER, tools=TOOLS, max_tokens=200, temperature=temperature,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, seed=5)
    ch = r.choices[0]
    assert ch.finish_reason == "stop"  # as OpenAI and vLLM: a named call ends with "stop"
    assert ch.message.content == ""
    (call,) = ch.message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS["get_weather"])


def test_named_function_streams_name_first(client):
    stream = client.chat.completions.create(
        model=MODEL_NAME, messages=USER, tools=TOOLS, max_tokens=200, temperature=0, stream=True,
        tool_choice={"type": "function", "function": {"name": "search"}})
    reasoning, content, calls, finish, firsts = collect_stream(stream)
    assert content == "" and reasoning == ""
    assert finish == "stop"
    (call,) = calls
    assert firsts[0].type == "function" and firsts[0].id and firsts[0].function.name == "search"
    jsonschema.validate(json.loads(call["arguments"]), SCHEMAS["search"])


def test_required_streams_like_non_streaming(client):
    kw = dict(model=MODEL_NAME, messages=USER, tools=TOOLS, tool_choice="required",
              max_tokens=300, temperature=0)
    whole = client.chat.completions.create(**kw).choices[0]
    reasoning, content, calls, finish, firsts = collect_stream(
        client.chat.completions.create(stream=True, **kw))
    assert finish == "tool_calls"
    assert [(c["name"], c["arguments"]) for c in calls] == [
        (c.function.name, c.function.arguments) for c in whole.message.tool_calls]
    assert all(f.id and f.type == "function" for f in firsts)


@pytest.mark.parametrize("body,message", [
    ({"tool_choice": "auto", "tools": TOOLS}, "--enable-auto-tool-choice"),
    ({"tools": TOOLS}, "--enable-auto-tool-choice"),  # tools default tool_choice to auto
    ({"tool_choice": "required"}, "`tools` must be set"),
    ({"tool_choice": "sometimes", "tools": TOOLS}, "Invalid value for `tool_choice`"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": TOOLS},
     "does not match any of the specified `tools`"),
    ({"tool_choice": {"type": "function"}, "tools": TOOLS}, "Invalid value for `function`"),
    ({"tool_choice": {"type": "function", "function": {}}, "tools": TOOLS},
     "Expected field `name`"),
    ({"tool_choice": "required", "tools": TOOLS, "structured_outputs": {"regex": "a"}},
     "structured output"),
    ({"tool_choice": "required", "tools": TOOLS, "parallel_tool_calls": "maybe"},
     "parallel_tool_calls"),
])
def test_bad_tool_choice_is_400(server, body, message):
    r = requests.post(server.url + "/v1/chat/completions",
                      json={"messages": USER, "max_tokens": 4, **body}, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert message in err["message"]
    assert err["param"] in ("tool_choice", "tools", "parallel_tool_calls")


def test_tool_choice_none_and_empty_required_are_plain_chat(client):
    for kw in ({"tool_choice": "none", "tools": TOOLS}, {"tool_choice": "required", "tools": []}):
        r = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=5,
                                           temperature=0, **kw)
        assert r.choices[0].message.tool_calls == []
        assert r.choices[0].finish_reason == "length"


# ---- tool_choice auto and reasoning, with the parsers ----

@pytest.fixture(scope="module")
def parsers(binary):
    srv = ServerProcess(binary, "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                        "--reasoning-parser", "deepseek_r1", "--chat-template", str(HERMES),
                        "--structured-outputs-config", '{"enable_in_reasoning": true}').wait_ready()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def pclient(parsers):
    return openai.OpenAI(base_url=parsers.url + "/v1", api_key="unused", max_retries=0)


def forced(pclient, text, stream=False, **kw):
    return pclient.chat.completions.create(
        model=MODEL_NAME, messages=USER, tools=TOOLS, max_tokens=120, temperature=0,
        stream=stream, extra_body={"structured_outputs": {"regex": regex_escape(text)}}, **kw)


THINK_AND_CALL = "<think>abc</think>hi" + hermes_call("get_weather", {"city": "Paris", "unit": "celsius"})


def test_auto_reads_reasoning_content_and_calls(pclient):
    ch = forced(pclient, THINK_AND_CALL).choices[0]
    extra = ch.message.model_extra
    assert extra["reasoning_content"] == "abc" and extra["reasoning"] == "abc"
    assert ch.message.content == "hi"
    (call,) = ch.message.tool_calls
    assert call.function.name == "get_weather"
    assert call.function.arguments == '{"city": "Paris", "unit": "celsius"}'  # json.dumps form
    assert ch.finish_reason == "tool_calls"


def test_auto_stream_deltas(pclient):
    reasoning, content, calls, finish, firsts = collect_stream(
        forced(pclient, THINK_AND_CALL, stream=True))
    assert reasoning == "abc" and content == "hi"
    assert finish == "tool_calls"
    (call,) = calls
    assert re.fullmatch(r"chatcmpl-tool-[0-9a-f]{32}", call["id"])
    assert firsts[0].type == "function" and firsts[0].function.name == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris", "unit": "celsius"}
    assert call["arguments"] == '{"city": "Paris", "unit": "celsius"}'


def test_auto_without_a_call_is_content(pclient):
    ch = forced(pclient, "<think>x</think>just text").choices[0]
    assert ch.message.content == "just text" and ch.message.tool_calls == []
    assert ch.finish_reason == "stop"


def test_stop_inside_think_block_and_missing_open_tag(pclient):
    ch = forced(pclient, "<think>still thinking").choices[0]  # stops inside the block
    assert ch.message.model_extra["reasoning"] == "still thinking"
    assert ch.message.content is None
    ch = forced(pclient, "plan</think>done").choices[0]  # R1 omits <think>
    assert ch.message.model_extra["reasoning"] == "plan"
    assert ch.message.content == "done"


def test_include_reasoning_false_and_parallel_tool_calls_false(pclient):
    two = "<think>r</think>" + hermes_call("get_weather", {"city": "A", "unit": "celsius"}) + \
        "\n" + hermes_call("search", {"query": "q"})
    ch = forced(pclient, two).choices[0]
    assert [c.function.name for c in ch.message.tool_calls] == ["get_weather", "search"]
    r = pclient.chat.completions.create(
        model=MODEL_NAME, messages=USER, tools=TOOLS, max_tokens=120, temperature=0,
        parallel_tool_calls=False,
        extra_body={"include_reasoning": False, "structured_outputs": {"regex": regex_escape(two)}})
    ch = r.choices[0]
    assert [c.function.name for c in ch.message.tool_calls] == ["get_weather"]
    assert ch.message.model_extra["reasoning"] is None
    _, _, calls, _, _ = collect_stream(pclient.chat.completions.create(
        model=MODEL_NAME, messages=USER, tools=TOOLS, max_tokens=120, temperature=0, stream=True,
        parallel_tool_calls=False, extra_body={"structured_outputs": {"regex": regex_escape(two)}}))
    assert [c["name"] for c in calls] == ["get_weather"]


def test_tool_result_round_trip(pclient, parsers):
    """A call from the server goes back with its result; the prompt is jinja2's render."""
    ch = forced(pclient, THINK_AND_CALL).choices[0]
    call = ch.message.tool_calls[0]
    messages = USER + [
        {"role": "assistant", "content": ch.message.content,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name,
                                      "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "name": "get_weather", "content": "21 C"}]
    r = pclient.chat.completions.create(model=MODEL_NAME, messages=messages, tools=TOOLS,
                                        max_tokens=4, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")
    # The prompt: vLLM hands the template the arguments as a mapping.
    prepared = json.loads(json.dumps(messages))
    prepared[1]["tool_calls"][0]["function"]["arguments"] = json.loads(call.function.arguments)
    gen = load_template_tool()
    tmpl = gen.compile_template(HERMES.read_text())
    want = tmpl.render(messages=prepared, tools=TOOLS, documents=None, add_generation_prompt=True,
                       bos_token="<|im_start|>", eos_token="<|im_end|>")
    got = requests.post(parsers.url + "/tokenize", timeout=30,
                        json={"messages": messages, "tools": TOOLS}).json()["tokens"]
    want_ids = requests.post(parsers.url + "/tokenize", timeout=30,
                             json={"prompt": want, "add_special_tokens": False}).json()["tokens"]
    assert got == want_ids
    assert "21 C" in want


@pytest.fixture(scope="module")
def qwen3(binary):
    srv = ServerProcess(binary, "--reasoning-parser", "qwen3",
                        "--trust-request-chat-template").wait_ready()
    yield srv
    assert srv.stop() == 0


def test_qwen3_enable_thinking_false_is_content_and_grammar_applies(qwen3):
    c = openai.OpenAI(base_url=qwen3.url + "/v1", api_key="unused", max_retries=0)
    r = c.chat.completions.create(
        model=MODEL_NAME, messages=USER, max_tokens=20, temperature=0,
        extra_body={"chat_template_kwargs": {"enable_thinking": False},
                    "structured_outputs": {"regex": "hello"}})
    m = r.choices[0].message
    assert m.content == "hello" and m.model_extra["reasoning"] is None


def test_qwen3_grammar_waits_for_the_end_of_reasoning(qwen3):
    # Thinking on: the grammar starts after </think>, which SmolLM2 does not write here, so
    # the free text is reasoning (a model stopped inside its think block) and no content.
    c = openai.OpenAI(base_url=qwen3.url + "/v1", api_key="unused", max_retries=0)
    r = c.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=8, temperature=0,
                                  extra_body={"structured_outputs": {"regex": "zzz"}})
    m = r.choices[0].message
    assert m.content is None
    assert m.model_extra["reasoning"] and "zzz" not in m.model_extra["reasoning"]


@pytest.mark.parametrize("args,message", [
    (["--tool-call-parser", "nope"], "--tool-call-parser"),
    (["--reasoning-parser", "nope"], "--reasoning-parser"),
    (["--enable-auto-tool-choice"], "--tool-call-parser"),
    (["--structured-outputs-config", '{"nope": 1}'], "--structured-outputs-config"),
])
def test_bad_parser_flags_stop_start_up(binary, model, args, message):
    r = run(binary, "serve", model, *args, timeout=60)
    assert r.returncode != 0
    assert message in r.stderr + r.stdout


def test_stop_token_is_not_text_even_with_special_tokens(client):
    """vLLM's detokenizer leaves out the token that stopped the completion (EOS here) unless
    include_stop_str_in_output: the hermes and mistral parsers turn skip_special_tokens off."""
    def content(**extra):
        r = client.chat.completions.create(
            model=MODEL_NAME, messages=USER, max_tokens=10, temperature=0,
            extra_body={"structured_outputs": {"regex": "ok"}, "skip_special_tokens": False,
                        **extra})
        assert r.choices[0].finish_reason == "stop"
        return r.choices[0].message.content
    assert content() == "ok"
    assert content(include_stop_str_in_output=True) == "ok<|im_end|>"


def test_enable_thinking_reaches_the_template(qwen3):
    """chat_template_kwargs go to the template: Qwen3's own template with enable_thinking false
    renders the empty think block, as jinja2 renders it."""
    config = json.loads((ROOT.parent / "shared" / "tokenizers" / "qwen3" /
                         "tokenizer_config.json").read_text())
    source = config["chat_template"]
    tmpl = load_template_tool().compile_template(source)
    for thinking in (False, True):
        want = tmpl.render(messages=USER, tools=None, documents=None, add_generation_prompt=True,
                           enable_thinking=thinking, bos_token=None, eos_token=config["eos_token"])
        assert ("<think>\n\n</think>" in want) == (not thinking)
        got = requests.post(qwen3.url + "/tokenize", timeout=30, json={
            "messages": USER, "chat_template": source,
            "chat_template_kwargs": {"enable_thinking": thinking}}).json()["tokens"]
        want_ids = requests.post(qwen3.url + "/tokenize", timeout=30, json={
            "prompt": want, "add_special_tokens": False}).json()["tokens"]
        assert got == want_ids
