"""Key order of request JSON in rendered chat prompts, black-box: tools, tool-call arguments and
tool results whose keys are out of sorted order must reach the template in the request's order,
as Python's json.loads and jinja2 keep it. Expected prompts come from jinja2 configured as
transformers does (tools/make_chat_template_fixtures.py), never from our own output; the server
side is compared as token ids through /tokenize, the CLI side as text through `tokenize --chat`."""
import copy
import json
import subprocess

import pytest
import requests

from conftest import ROOT, MODEL, load_template_tool
from test_server import ServerProcess

SHARED = ROOT.parent / "shared"

FLIGHT_TOOL = {"type": "function", "function": {
    "name": "book_flight",
    "parameters": {
        "type": "object",
        "properties": {
            "zeta": {"type": "string", "description": "Destination"},
            "alpha": {"type": "integer", "minimum": 1},
            "mid": {"type": "object", "properties": {"window": {"type": "boolean"},
                                                     "meal": {"type": "string"}}},
        },
        "required": ["zeta", "alpha"],
    },
    "description": "Book a flight.",
}}
CANCEL_TOOL = {"function": {"name": "cancel", "parameters": {"type": "object", "properties": {
    "ref": {"type": "string"}}}, "description": "Cancel."}, "type": "function"}
ARGS = {"zeta": "LHR", "alpha": 2, "mid": {"window": True, "meal": "veg"}}
MESSAGES = [
    {"role": "system", "content": "Book flights."},
    {"role": "user", "content": [{"type": "text", "text": "Two to LHR,"},
                                 {"text": "window seat.", "type": "text"}]},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_book00001", "type": "function",
         "function": {"name": "book_flight", "arguments": json.dumps(ARGS)}},
        {"type": "function", "id": "call_cncl00002",
         "function": {"arguments": {"ref": "X0", "force": False}, "name": "cancel"}}]},
    {"role": "tool", "tool_call_id": "call_book00001", "name": "book_flight",
     "content": json.dumps({"status": "ok", "ref": "X1"})},
    {"role": "tool", "tool_call_id": "call_cncl00002", "name": "cancel", "content": "done"},
]


def templates():
    """(name, source) of the shared tool-calling templates that print tools and arguments."""
    out = []
    qwen3 = SHARED / "tokenizers" / "qwen3" / "tokenizer_config.json"
    if qwen3.exists():
        out.append(("qwen3", json.loads(qwen3.read_text())["chat_template"]))
    for name in ("hermes_tools", "qwen3_coder_tools", "mistral3_tools"):
        path = SHARED / "chat_templates" / f"{name}.jinja"
        if path.exists():
            out.append((name, path.read_text(encoding="utf-8")))
    return out


TEMPLATES = templates()


def sorted_keys(value):
    """The same data with every object's keys sorted: what an order-losing parse would give."""
    if isinstance(value, dict):
        return {k: sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(v) for v in value]
    return value


def as_server_prepares(messages):
    """vLLM's preparation of messages, which the server mirrors: text parts joined with
    newlines, tool-call arguments given as JSON strings parsed into objects (json.loads)."""
    out = copy.deepcopy(messages)
    for m in out:
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(p["text"] for p in m["content"])
        for call in m.get("tool_calls") or []:
            if isinstance(call["function"]["arguments"], str):
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


@pytest.fixture(scope="module")
def generator():
    return load_template_tool()


@pytest.fixture(scope="module")
def special_tokens(model):
    import gguf
    reader = gguf.GGUFReader(model)
    vocab = reader.fields["tokenizer.ggml.tokens"].contents()
    return {key: vocab[int(reader.fields[field].contents())]
            for key, field in (("bos_token", "tokenizer.ggml.bos_token_id"),
                               ("eos_token", "tokenizer.ggml.eos_token_id"))}


@pytest.fixture(scope="module")
def server(binary, model):
    srv = ServerProcess(binary, "--trust-request-chat-template").wait_ready()
    yield srv
    assert srv.stop() == 0


def tokenize(server, body):
    r = requests.post(server.url + "/tokenize", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def detokenize(server, ids):
    return requests.post(server.url + "/detokenize", json={"tokens": ids}, timeout=30).json()


@pytest.mark.parametrize("name,source", TEMPLATES, ids=[n for n, _ in TEMPLATES])
def test_server_prompt_keeps_request_key_order(server, generator, special_tokens, name, source):
    tmpl = generator.compile_template(source)
    tools = [FLIGHT_TOOL, CANCEL_TOOL]

    def render(messages, tools):
        return tmpl.render(messages=messages, tools=tools, documents=None,
                           add_generation_prompt=True, **special_tokens)

    want = render(as_server_prepares(MESSAGES), tools)
    sorted_want = render(as_server_prepares(sorted_keys(MESSAGES)), sorted_keys(tools))
    assert want != sorted_want, "the case must tell insertion order from sorted order"
    # The body goes out with json.dumps, which keeps each dict's insertion order.
    got = tokenize(server, {"messages": MESSAGES, "tools": tools, "chat_template": source,
                            "add_generation_prompt": True})
    want_ids = tokenize(server, {"prompt": want, "add_special_tokens": False})
    assert got == want_ids, f"rendered:\n{detokenize(server, got)}\nexpected:\n{want}"


def test_server_raw_body_order_and_duplicate_keys(server, generator, special_tokens):
    # A repeated key keeps its first place and its last value, as json.loads builds the dict.
    raw = ('{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false, '
           '"tools": [{"type": "function", "function": {"name": "f", "parameters": '
           '{"type": "object", "required": ["b"], "properties": {"b": {"type": "string"}, '
           '"a": {"type": "number"}, "b": {"type": "integer", "minimum": 0}}}}}], '
           '"chat_template": "{% for t in tools %}{{ t|tojson }}\\n{{ t }}\\n'
           '{% for k, v in t.function.parameters.properties|items %}{{ k }}={{ v }};'
           '{% endfor %}{{ t.function.parameters|dictsort }}{% endfor %}"}')
    body = json.loads(raw)
    want = generator.compile_template(body["chat_template"]).render(
        messages=body["messages"], tools=body["tools"], documents=None,
        add_generation_prompt=False, **special_tokens)
    assert '"b": {"type": "integer", "minimum": 0}, "a"' in want
    r = requests.post(server.url + "/tokenize", data=raw,
                      headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 200, r.text
    got = r.json()["tokens"]
    assert got == tokenize(server, {"prompt": want, "add_special_tokens": False}), \
        f"rendered:\n{detokenize(server, got)}\nexpected:\n{want}"


@pytest.mark.parametrize("name,source", TEMPLATES, ids=[n for n, _ in TEMPLATES])
def test_cli_chat_keeps_line_key_order(binary, generator, special_tokens, tmp_path, name, source):
    path = tmp_path / f"{name}.jinja"
    path.write_text(source, encoding="utf-8")
    messages = [m for m in copy.deepcopy(MESSAGES) if not isinstance(m["content"], list)]
    messages.insert(1, {"role": "user", "content": "Two to LHR, window seat."})
    call = messages[2]["tool_calls"][0]["function"]
    call["arguments"] = json.loads(call["arguments"])  # templates take arguments as a mapping
    request = {"messages": messages, "tools": [FLIGHT_TOOL, CANCEL_TOOL],
               "add_generation_prompt": True}
    want = generator.compile_template(source).render(documents=None, **request, **special_tokens)
    r = subprocess.run([binary, "tokenize", "-m", str(MODEL), "--chat", "--chat-template",
                        str(path)], input=json.dumps(request) + "\n", capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == want
