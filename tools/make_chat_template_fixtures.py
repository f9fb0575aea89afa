#!/usr/bin/env python3
"""Chat-template oracle: renders every shared chat template with Python jinja2 configured exactly
like transformers' apply_chat_template, over a fixed set of conversations, and writes the outputs
(or the error each render raises) to fixtures/chat_template/<template>.json.

Templates: ../shared/tokenizers/*/tokenizer_config.json (chat_template, string or named list),
../shared/chat_templates/*.jinja (bos/eos from the tokenizer that README pairs them with) and
SmolLM2's GGUF template (stored inline: the GGUF is not shared). Shared files are referenced by
path and read by the C++ test at run time; only rendered outputs are stored here.

Usage: python3 tools/make_chat_template_fixtures.py [--shared ../shared] [--gguf PATH]
       python3 tools/make_chat_template_fixtures.py --construct-table  (tables for test_jinja.cpp)
"""
import argparse
import datetime
import glob
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)
# README in shared/chat_templates: which tokenizer supplies bos/eos for each example template.
TEMPLATE_TOKENIZER = {
    "llama3.1_json_tools": "llama3",
    "hermes_tools": "qwen3",
    "qwen3_coder_tools": "qwen3",
    "mistral3_tools": "llama2",
}
SPECIAL_TOKEN_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                      "mask_token"]


class GenerationTag(jinja2.ext.Extension):
    """HF's AssistantTracker tag {% generation %}: renders its body in place."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def compile_template(source):
    """transformers.utils.chat_template_utils._compile_jinja_template, with a pinned clock."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def token_text(tok):
    if isinstance(tok, dict):
        return tok.get("content")
    return tok


def special_tokens(config):
    out = {}
    for key in SPECIAL_TOKEN_KEYS:
        value = token_text(config.get(key))
        if value is not None:
            out[key] = value
    return out


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a location.\n  Returns °C or °F.  ",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Forecast days", "minimum": 1},
            },
            "required": ["location"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Full-text search over the documentation.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Search terms"},
                "tags": {"type": "array", "items": {"type": "string"},
                         "description": "Filter tags"},
                "options": {"type": "object", "additionalProperties": {"type": "number"},
                            "description": "Ranking weights"},
                "exact": {"type": ["boolean", "integer"], "description": "Exact match only"},
            },
            "required": ["query"],
        },
        "return": {"type": "array", "description": "Matching page titles"},
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]
# A nullable union: hermes_tools' type macro recurses forever on it (jinja2 RecursionError).
NULLABLE_TOOL = {"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {
        "key": {"type": ["string", "null"], "description": "Key or null"}}}}}


# Keys out of sorted order at every level, as clients send them ("type" before "properties"
# before "required", "zeta" before "alpha"): prompts must keep this order, as Python dicts do.
FLIGHT_TOOL = {"type": "function", "function": {
    "name": "book_flight",
    "parameters": {
        "type": "object",
        "properties": {
            "zeta": {"type": "string", "description": "Destination airport"},
            "alpha": {"type": "integer", "minimum": 1, "description": "Passengers"},
            "mid": {"type": "object", "description": "Seat preferences",
                    "properties": {"window": {"type": "boolean"},
                                   "meal": {"type": "string", "enum": ["veg", "any"]}},
                    "required": ["window"]},
            "dates": {"type": "array", "items": {"type": "string", "format": "date"}},
        },
        "required": ["zeta", "alpha"],
        "additionalProperties": False,
    },
    "description": "Book a flight.",
}}
CANCEL_TOOL = {"function": {"name": "cancel_booking", "description": "Cancel a booking.",
                            "parameters": {"type": "object",
                                           "properties": {"ref": {"type": "string"}},
                                           "required": ["ref"]}},
               "type": "function"}
ORDER_TOOLS = [FLIGHT_TOOL, CANCEL_TOOL]
FLIGHT_ARGS = {"zeta": "LHR", "alpha": 2, "mid": {"window": True, "meal": "veg"},
               "dates": ["2025-01-02"]}


def tool_call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def conversations():
    """(name, messages, tools, add_generation_prompt, extra kwargs)."""
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    u1 = {"role": "user", "content": "What is the capital of France?"}
    a1 = {"role": "assistant", "content": "The capital of France is Paris."}
    u2 = {"role": "user", "content": "And of Germany?"}
    a2 = {"role": "assistant", "content": "Berlin."}
    call = tool_call("call_abc123456", "get_weather", {"location": "Paris", "unit": "celsius"})
    tool_result = {"role": "tool", "tool_call_id": "call_abc123456", "name": "get_weather",
                   "content": "{\"temperature\": 22, \"sky\": \"clear\"}"}
    weather_q = {"role": "user", "content": "What's the weather in Paris?"}
    final = {"role": "assistant", "content": "It is 22 °C and clear in Paris."}
    book_q = {"role": "user", "content": "Book LHR for two, window seat."}
    booked = {"role": "assistant", "content": "Booked: reference X1."}
    return [
        ("single_user", [{"role": "user", "content": "Hello!"}], None, True, {}),
        ("system_user", [sys_msg, u1], None, True, {}),
        ("multi_turn", [sys_msg, u1, a1, u2], None, True, {}),
        ("multi_turn_no_generation_prompt", [sys_msg, u1, a1, u2, a2], None, False, {}),
        ("no_system_multi_turn", [u1, a1, u2, a2], None, False, {}),
        ("system_only", [sys_msg], None, True, {}),
        ("empty_content", [{"role": "user", "content": ""}, {"role": "assistant", "content": ""},
                           {"role": "user", "content": ""}], None, True, {}),
        ("whitespace_content", [
            {"role": "system", "content": "  \n\tBe brief.\n  "},
            {"role": "user", "content": "\n\n  Hi   there  \n\t"},
            {"role": "assistant", "content": "  ok  \n"},
            {"role": "user", "content": " \u3000 spaced\u00a0out \r\n"}], None, True, {}),
        ("unicode_and_escapes", [{"role": "user", "content":
            "Quotes \"double\" and 'single', backslash \\ and tab\t, émoji 😀, 中文, "
            "<b>html</b> & {{ not jinja }} {% raw %} \u0001\u007f"}], None, True, {}),
        ("tools_available", [sys_msg, weather_q], TOOLS, True, {}),
        ("tools_no_system", [weather_q], TOOLS, True, {}),
        ("tool_call_roundtrip", [sys_msg, weather_q,
                                 {"role": "assistant", "content": "", "tool_calls": [call]},
                                 tool_result, final], TOOLS, False, {}),
        ("tool_call_null_content", [weather_q,
                                    {"role": "assistant", "content": None, "tool_calls": [call]},
                                    tool_result], TOOLS, True, {}),
        ("parallel_tool_calls_string_args", [weather_q, {"role": "assistant", "content": "",
            "tool_calls": [tool_call("call_paris0001", "get_weather", "{\"location\": \"Paris\"}"),
                           tool_call("call_rome00002", "get_weather", "{\"location\": \"Rome\"}")]},
            {"role": "tool", "tool_call_id": "call_paris0001", "name": "get_weather",
             "content": "22"},
            {"role": "tool", "tool_call_id": "call_rome00002", "name": "get_weather",
             "content": "25"}], TOOLS, True, {}),
        ("tool_result_without_name", [weather_q,
                                      {"role": "assistant", "content": "", "tool_calls": [call]},
                                      {"role": "tool", "tool_call_id": "call_abc123456",
                                       "content": "22"}], TOOLS, True, {}),
        ("tool_result_dict_content", [weather_q,
                                      {"role": "assistant", "content": "", "tool_calls": [call]},
                                      {"role": "tool", "tool_call_id": "call_abc123456",
                                       "name": "get_weather",
                                       "content": {"temperature": 22.5, "ok": True, "note": None,
                                                   "tags": ["a", "it's"]}}], TOOLS, True, {}),
        ("bad_role_order", [u1, u2], None, True, {}),
        ("assistant_first", [a1, u1], None, True, {}),
        ("reasoning_content", [u1, {"role": "assistant",
                                    "content": "<think>\nThe user asks about France.\n</think>\n\n"
                                               "Paris."}, u2], None, True,
         {"enable_thinking": False}),
        ("multimodal_content", [{"role": "user", "content": [
            {"type": "image"}, {"type": "text", "text": "  Describe this image.  "}]}],
         None, True, {}),
        ("empty_messages", [], None, True, {}),
        ("extra_kwargs", [u1], TOOLS, True,
         {"date_string": "01 Jan 2025", "tools_in_user_message": False, "custom_flag": 7}),
        ("tool_nullable_union_type", [weather_q], [NULLABLE_TOOL], True, {}),
        ("reasoning_content_field", [u1, {"role": "assistant", "content": "Paris.",
                                          "reasoning_content": "Capital lookup."}, u2],
         None, True, {}),
        ("long_conversation", [sys_msg] + [m for i in range(6) for m in (
            {"role": "user", "content": f"Question {i}?"},
            {"role": "assistant", "content": f"Answer {i}."})], None, False, {}),
        # key order: tools, tool calls and results, content parts with unsorted keys
        ("tools_unsorted_keys", [sys_msg, book_q], ORDER_TOOLS, True, {}),
        ("tool_call_unsorted_object_args", [book_q, {"role": "assistant", "content": "",
            "tool_calls": [tool_call("call_book00001", "book_flight", FLIGHT_ARGS)]},
            {"role": "tool", "tool_call_id": "call_book00001", "name": "book_flight",
             "content": "{\"status\": \"ok\", \"ref\": \"X1\"}"}, booked],
         ORDER_TOOLS, False, {}),
        ("tool_call_unsorted_string_args", [book_q, {"role": "assistant", "content": "",
            "tool_calls": [tool_call("call_book00001", "book_flight", json.dumps(FLIGHT_ARGS))]},
            {"role": "tool", "tool_call_id": "call_book00001", "name": "book_flight",
             "content": "booked"}], ORDER_TOOLS, True, {}),
        ("parallel_tool_calls_unsorted", [book_q, {"role": "assistant", "content": "",
            "tool_calls": [tool_call("call_book00001", "book_flight", FLIGHT_ARGS),
                           tool_call("call_cncl00002", "cancel_booking", {"ref": "X0"})]},
            {"role": "tool", "tool_call_id": "call_book00001", "name": "book_flight",
             "content": "booked"},
            {"role": "tool", "tool_call_id": "call_cncl00002", "name": "cancel_booking",
             "content": "cancelled"}], ORDER_TOOLS, True, {}),
        ("tool_result_unsorted_dict", [book_q, {"role": "assistant", "content": "",
            "tool_calls": [tool_call("call_book00001", "book_flight", FLIGHT_ARGS)]},
            {"role": "tool", "tool_call_id": "call_book00001", "name": "book_flight",
             "content": {"status": "ok", "ref": "X1",
                         "legs": [{"to": "LHR", "from": "CDG", "at": 1.5}]}}],
         ORDER_TOOLS, True, {}),
        ("content_parts_text", [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "Hello"},
                                         {"text": " world ", "type": "text"}]}],
         None, True, {}),
        ("content_parts_with_tools", [
            {"role": "user", "content": [{"type": "text", "text": "Book LHR for two."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Booking."}],
             "tool_calls": [tool_call("call_book00001", "book_flight", FLIGHT_ARGS)]},
            {"role": "tool", "tool_call_id": "call_book00001", "name": "book_flight",
             "content": [{"type": "text", "text": "{\"ref\": \"X1\", \"status\": \"ok\"}"}]}],
         ORDER_TOOLS, True, {}),
    ]


def transformers_outcome(source, context):
    """The same render through the installed transformers' own code path, when available, as a
    cross-check of the mirrored configuration above. None when transformers is missing."""
    try:
        from transformers.utils import chat_template_utils as ctu
    except Exception:
        return None
    compiled = ctu._compile_jinja_template(source)
    compiled.environment.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    kwargs = dict(context)
    messages = kwargs.pop("messages")
    try:
        rendered, _ = ctu.render_jinja_template(
            [messages], tools=kwargs.pop("tools"), documents=kwargs.pop("documents"),
            chat_template=source, add_generation_prompt=kwargs.pop("add_generation_prompt"),
            **kwargs)
        return {"expected": rendered[0]}
    except Exception as e:
        return {"error": {"type": type(e).__name__, "message": str(e)}}


def render_case(template, messages, tools, add_generation_prompt, extra, tokens):
    # apply_chat_template: render(messages, tools, documents, add_generation_prompt,
    # **special_tokens_map, **kwargs)
    context = {"messages": messages, "tools": tools, "documents": None,
               "add_generation_prompt": add_generation_prompt}
    context.update(tokens)
    context.update(extra)
    case = {"context": context}
    try:
        case["expected"] = template.render(**context)
    except Exception as e:  # the template's own error is the expected outcome
        case["error"] = {"type": type(e).__name__, "message": str(e)}
    return case


def collect_templates(shared, gguf_path):
    """(name, source reference for the fixture, template text, special tokens)."""
    out = []
    configs = {}
    for path in sorted(glob.glob(os.path.join(shared, "tokenizers", "*", "tokenizer_config.json"))):
        tok = os.path.basename(os.path.dirname(path))
        config = json.load(open(path, encoding="utf-8"))
        configs[tok] = config
        rel = os.path.relpath(path, REPO)
        chat = config.get("chat_template")
        if isinstance(chat, str):
            out.append((tok, {"tokenizer_config": rel}, chat, special_tokens(config)))
        elif isinstance(chat, list):
            for entry in chat:
                out.append((f"{tok}.{entry['name']}", {"tokenizer_config": rel, "name": entry["name"]},
                            entry["template"], special_tokens(config)))
    for path in sorted(glob.glob(os.path.join(shared, "chat_templates", "*.jinja"))):
        name = os.path.splitext(os.path.basename(path))[0]
        tokens = special_tokens(configs.get(TEMPLATE_TOKENIZER.get(name), {}))
        out.append((name, {"file": os.path.relpath(path, REPO)},
                    open(path, encoding="utf-8", newline="").read(), tokens))
    if gguf_path and os.path.exists(gguf_path):
        import gguf
        reader = gguf.GGUFReader(gguf_path)
        source = reader.fields["tokenizer.chat_template"].contents()
        vocab = reader.fields["tokenizer.ggml.tokens"].contents()
        tokens = {}
        for key, field in (("bos_token", "tokenizer.ggml.bos_token_id"),
                           ("eos_token", "tokenizer.ggml.eos_token_id")):
            if field in reader.fields:
                tokens[key] = vocab[int(reader.fields[field].contents())]
        out.append(("smollm2", {"inline": source}, source, tokens))
    else:
        print(f"warning: {gguf_path} not found, SmolLM2 fixture not regenerated", file=sys.stderr)
    return out


def construct_cases():
    """Small snippets, one construct each, for tests/tokenizer/test_jinja.cpp: {group: [(template,
    context)]}. `--construct-table` prints their jinja2 outcomes as that file's C++ tables."""
    groups = {}

    def case(group, template, ctx=None):
        groups.setdefault(group, []).append((template, ctx or {}))

    # Output of Python values
    case("Output", "{{ 'a' ~ 1 ~ none ~ true ~ 2.5 }}")
    case("Output", "{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}] }}")
    case("Output", "{{ (1,) }}{{ (1, 2) }}{{ () }}{{ {} }}{{ [] }}")
    case("Output", "{{ none }}|{{ None }}|{{ True }}|{{ false }}|{{ undefined_name }}|")
    case("Output", "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'nl\\n\\ttab', 'back\\\\slash', '\\x01\\x7f', 'é\\u200b\\u00a0中'] }}")
    case("Output", "{{ d }}", {"d": {"b": [1, 2.0, None, False], "a": {"x": "y"}, "é": "ü"}})
    case("Output", "{{ ns }}", {})
    case("Output", "{% set ns = namespace(a=1, b='x') %}{{ ns }}")
    case("Output", "{{ \"a\\tb\\n\\x41\\u00e9\\\\ \\q\" }}|{{ 'it\\'s' }}|{{ 'a' 'b' \"c\" }}")
    case("Output", "{{ 1, 'a' }}")
    # Numbers
    case("Numbers", "{{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} {{ 2**-1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 3 * 1.5 }} {{ 10 - 2.5 }}")
    case("Numbers", "{{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 1.5e-7 }} {{ 123456789.125 }} {{ 1_000 }} {{ 0x1F }} {{ 0b101 }} {{ 0o17 }} {{ 2.5e3 }}")
    case("Numbers", "{{ -x }} {{ +x }} {{ - 2 ** 2 }} {{ (-2) ** 2 }} {{ 2 ** 3 ** 2 }} {{ 10 - 3 - 2 }} {{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }}", {"x": 5})
    case("Numbers", "{{ true + 1 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' * 3 }} {{ [1] * 2 }} {{ 3 * 'ab' }}")
    case("Numbers", "{{ big }} {{ big + 1 }} {{ f }} {{ f * 2 }}", {"big": 9007199254740993, "f": 0.1})
    # Whitespace control and trimming
    case("Whitespace", "a\n  {% if true %}\n    x\n  {% endif %}\nb")
    case("Whitespace", "a  {%- if true -%}  x  {%- endif -%}  b")
    case("Whitespace", "a \n {{- 'x' -}} \n b")
    case("Whitespace", "a\n  {%+ if true %}x{% endif %}\n  {{ 'y' }}\n")
    case("Whitespace", "{% if true +%}\nx{% endif %}|{% if true %}\n\ny{% endif %}")
    case("Whitespace", "a {# c #} b\n  {# c2 #}\nc\n  {#- c3 -#}  \nd{#+ c4 +#}\ne")
    case("Whitespace", "line1\n{{ 'v' }}\nline2\n")
    case("Whitespace", "line1\n\n")
    case("Whitespace", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\rd\r\n")
    case("Whitespace", "{% raw %}{{ x }} {% if %}{% endraw %}|\n  {%- raw -%}  a  {%- endraw -%}  |")
    case("Whitespace", "  {% for i in [1, 2] %}\n    {{ i }}\n  {% endfor %}\n")
    case("Whitespace", "{% for i in [1, 2] -%}\n  {{ i }}\n{%- endfor %}")
    case("Whitespace", "x  {% set a = 1 %}  y\n\t {% set b = 2 %}\nz")
    case("Whitespace", "{{ 'a' }}  {% if true %}b{% endif %}\n   {% if true %}c{% endif %}")
    case("Whitespace", "{{ {'a': {'b': 1}} }}{{ {'a': 1}}}")
    # Control flow
    case("Control", "{% if x == 1 %}one{% elif x == 2 %}two{% elif x == 3 %}three{% else %}other{% endif %}", {"x": 3})
    case("Control", "{% if x %}t{% else %}f{% endif %}{% if not x %}T{% endif %}", {"x": []})
    case("Control", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}", {"xs": ["a", "b", "c"]})
    case("Control", "{% for x in xs %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('odd', 'even') }}]{% endfor %}", {"xs": [1, 2, 3]})
    case("Control", "{% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }}{{ loop.depth }}{{ loop.depth0 }} {% endfor %}")
    case("Control", "{% for x in [] %}body{% else %}empty{% endfor %}{% for x in [1] %}body{% else %}empty{% endfor %}")
    case("Control", "{% for x in range(10) if x is odd %}{{ x }}{{ loop.index }}{{ loop.last }} {% endfor %}")
    case("Control", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", {"d": {"z": 1, "a": 2}})
    case("Control", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}")
    case("Control", "{% for row in [[1, 2], [3]] %}{% set outer = loop %}{% for c in row %}{{ outer.index }}.{{ loop.index }}={{ c }} {% endfor %}{% endfor %}")
    case("Control", "{% for c in 'héllo' %}{{ c }}-{% endfor %}{% for x in undefined_thing %}never{% endfor %}")
    case("Control", "{% for x in [1, 2] %}{{ x }}{% for x in [3] %}{{ x }}{% endfor %}{{ x }}{% endfor %}")
    # jinja2 runs for-else unless an iteration reached the end of its body
    case("Control", "{% for x in [1, 2] %}{{ x }}{% break %}{% else %}E{% endfor %}|{% for x in [1, 2] %}{{ x }}{% continue %}{% else %}E{% endfor %}|{% for x in [1, 2] %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% else %}E{% endfor %}")
    case("Control", "{% for o in [1, 2, 3] %}{% for i in [] %}{% else %}{% if o == 2 %}{% continue %}{% endif %}{% endfor %}{{ o }}{% endfor %}")
    # Scoping of set
    case("Scoping", "{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}")
    case("Scoping", "{% for i in [1, 2] %}{% if i == 2 %}[{{ y }}]{% endif %}{% set y = i %}{% endfor %}[{{ y }}]")
    case("Scoping", "{% set ns = namespace(total=0, items=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.total }}{{ ns.items }}")
    case("Scoping", "{% if true %}{% set a = 'set in if' %}{% endif %}{{ a }}")
    case("Scoping", "{% set messages = messages[1:] %}{{ messages|length }}", {"messages": [1, 2, 3]})
    case("Scoping", "{% set a, b = 1, 2 %}{{ b }}{{ a }}{% set c = (3, 4) %}{{ c }}")
    case("Scoping", "{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}")
    case("Scoping", "{% with a = 1, b = 2 %}{{ a + b }}{% set c = 3 %}{% endwith %}[{{ a }}{{ c }}]")
    case("Scoping", "{% filter upper %}abc{{ 'd' }}{% endfilter %}{% filter replace('a', 'b') | upper %}aaa{% endfilter %}")
    case("Scoping", "{% generation %}gen{% endgeneration %}")
    # Macros
    case("Macros", "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(greeting='Yo', name='Cy') }}")
    case("Macros", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}")
    case("Macros", "{% macro m(a, b=a ~ 'x') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{{ m() }}|")
    case("Macros", "{% macro m() %}[{{ g }}]{% endmacro %}{{ m() }}{% set g = 3 %}{{ m() }}")
    case("Macros", "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1) + 'a' }}{{ m is defined }}{{ undefined_macro is defined }}")
    case("Macros", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}")
    case("Macros", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(q=2) }}")
    # Expressions
    case("Expressions", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 <= 1 >= 0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }}")
    case("Expressions", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ not 1 in [1] }} {{ 'x' in undefined_thing }}", {"d": {"k": 1}})
    case("Expressions", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or 0 }} {{ '' and 1 }} {{ [] or {} }} {{ not none }}")
    case("Expressions", "{{ 'y' if 1 else 'n' }}|{{ 'y' if 0 }}|{{ 'a' if false else 'b' if true else 'c' }}")
    case("Expressions", "{{ 'abcdef'[::-1] }} {{ 'abcdef'[1:-1] }} {{ [1, 2, 3, 4][::2] }} {{ 'héllo'[1:3] }} {{ 'abc'[-1] }} {{ [1, 2, 3][-2:] }} {{ [1, 2, 3][:-1] }} {{ 'abcdef'[5:1:-2] }} {{ [1, 2][5:] }} {{ 'abc'[10] }}|")
    case("Expressions", "{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} {{ d.missing }}| {{ l[0] }} {{ l.0 }} {{ l[-1] }} {{ l[9] }}|", {"d": {"a": 1, "b": {"c": 2}}, "l": [10, 20]})
    case("Expressions", "{{ d.items() }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('x') }} {{ d.get('x', 5) }} {{ d['items'] is defined }}", {"d": {"a": 1, "b": 2}})
    case("Expressions", "{{ [1, 2] + [3] }} {{ 'a' + 'b' }} {{ (1,) + (2,) }} {{ {'a': 1, 'b': [1, 2]} }} {{ [x, x ~ 'y'] }}", {"x": "q"})
    case("Expressions", "{{ x.y is defined }} {{ x is defined and x.y }} {{ (x or {}).y|default('d') }}", {"x": None})
    case("Expressions", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b=2) }} {{ namespace(x=1).x }}")
    case("Expressions", "{{ m == {'b': 2, 'a': 1} }} {{ [1, (2, 3)] == [1, [2, 3]] }} {{ none == none }} {{ x == y }}", {"m": {"a": 1, "b": 2}})
    # String methods
    case("StringMethods", "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a '.lstrip() }}|{{ ' a  '.rstrip() }}|{{ '\\u3000a\\xa0'.strip() }}|")
    case("StringMethods", "{{ ' a  b\\tc\\n'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a\\nb\\r\\nc'.splitlines() }}")
    case("StringMethods", "{{ 'hello'.startswith('he') }} {{ 'hello'.startswith(('x', 'hel')) }} {{ 'hello'.endswith('lo') }} {{ 'hello'.endswith('x') }} {{ 'hello'.startswith('l', 2) }}")
    case("StringMethods", "{{ 'Hello World'.upper() }} {{ 'Hello World'.lower() }} {{ 'hello wORLD'.title() }} {{ 'hELLO'.capitalize() }} {{ 'a-b'.replace('-', '+') }} {{ 'aaa'.replace('a', 'b', 2) }}")
    case("StringMethods", "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.find('l') }} {{ 'banana'.count('an') }} {{ ', '.join(['a', 'b']) }} {{ 'a{}b{x}'.format(1, x=2) }}")
    case("StringMethods", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ ' '.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'a1'.isalnum() }} {{ 'x'.removeprefix('x') }}|")
    case("StringMethods", "{{ content.split('</think>')[-1].lstrip('\\n') }}|{{ content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {"content": "<think>\nreason\n</think>\n\nanswer"})
    case("StringMethods", "{{ '%s is %d years, %.2f%%'|format('Ann', 30, 1.5) }} {{ '%s-%s' % ('a', 'b') }} {{ '%(x)s' % {'x': 1} }}")
    # Tests
    case("Tests", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ n is none }}{{ s is string }}{{ d is mapping }}{{ l is sequence }}{{ s is sequence }}{{ d is sequence }}{{ i is sequence }}", {"x": 1, "n": None, "s": "a", "d": {}, "l": [], "i": 3})
    case("Tests", "{{ l is iterable }}{{ s is iterable }}{{ i is iterable }}{{ y is iterable }}{{ i is number }}{{ f is number }}{{ b is number }}{{ i is integer }}{{ b is integer }}{{ f is float }}{{ i is float }}", {"l": [], "s": "a", "i": 3, "f": 1.5, "b": True})
    case("Tests", "{{ b is boolean }}{{ i is boolean }}{{ b is true }}{{ b is false }}{{ 1 is true }}{{ false is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}", {"b": True, "i": 1})
    case("Tests", "{{ 1 is equalto 1 }}{{ 1 is eq 2 }}{{ 1 is ne 2 }}{{ 2 is in [1, 2] }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 1 is lt 2 }}{{ 2 is ge 2 }}{{ x is not none }}{{ none is sameas none }}{{ 'upper' is filter }}{{ 'odd' is test }}", {"x": 0})
    # Filters
    case("Filters", "[{{ '  a \\n'|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ undefined_thing|trim }}] [{{ 5|trim }}]")
    case("Filters", "{{ d|tojson }} {{ [1, 'é', none, true, 2.5, '\"q\"\\n'] | tojson }} {{ 'x'|tojson }} {{ {}|tojson(indent=2) }} {{ []|tojson(indent=2) }}", {"d": {"b": 1, "a": [1, {"c": None}]}})
    case("Filters", "{{ d|tojson(indent=2) }}|{{ d|tojson(indent=0) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ d|tojson(ensure_ascii=true) }}|{{ d|tojson(indent='\\t') }}", {"d": {"z": [1, 2], "é": {"k": "😀"}}})
    case("Filters", "{{ 'abc'|length }} {{ 'héllo'|length }} {{ [1, 2]|count }} {{ {'a': 1}|length }} {{ undefined_thing|length }}")
    case("Filters", "{{ ['a', 1, none]|join }} {{ ['a', 'b']|join(', ') }} {{ users|join('/', attribute='name') }}", {"users": [{"name": "x"}, {"name": "y"}]})
    case("Filters", "{{ x|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }} {{ 0|d('z', boolean=true) }} {{ y|d }}|", {"y": 0})
    case("Filters", "{{ d|items|list }} {{ undefined_thing|items|list }} {% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}", {"d": {"a": 1, "b": 2}})
    case("Filters", "{{ users|map(attribute='name')|list }} {{ users|map(attribute='age', default=0)|list }} {{ ['a', 'b']|map('upper')|join }} {{ [' a ', 'b ']|map('trim')|list }} {{ users|map(attribute='tags.0')|list }}", {"users": [{"name": "x", "age": 3, "tags": ["t1"]}, {"name": "y", "tags": ["t2"]}]})
    case("Filters", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ [1, 5, 3]|select('gt', 2)|list }}")
    case("Filters", "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ ms|rejectattr('role', 'eq', 'user')|list|length }} {{ ms|selectattr('name', 'defined')|list|length }} {{ ms|selectattr('name', 'undefined')|list|length }} {{ ms|selectattr('content', 'none')|list|length }} {{ ms|selectattr('content')|list|length }}", {"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": None, "name": "n"}, {"role": "user", "content": "b"}]})
    case("Filters", "{{ 'hELLo wOrld'|upper }} {{ 'HeLLo'|lower }} {{ 'hello wORLD-foo(bar'|title }} {{ 'hELLO wORLD'|capitalize }} {{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }}")
    case("Filters", "{{ [3, 1, 2]|first }} {{ [3, 1, 2]|last }} {{ 'abc'|first }} {{ []|first }}| {{ 'ab'|list }} {{ {'a': 1}|list }} {{ 12|string ~ 'x' }} {{ [1]|string }}")
    case("Filters", "{{ '42'|int }} {{ ' 7 '|int }} {{ '3.9'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ true|int }} {{ '3.5'|float }} {{ 3|float }} {{ 'x'|float }} {{ none|int }}")
    # int at the ends of int64, NaN and infinities (fuzz_jinja found `5e118|int` converting out of range).
    case("Filters", "{{ 'nan'|float|int }} {{ 'nan'|float|int(7) }} {{ 'inf'|int }} {{ 'nan'|int }} {{ '1e400'|int }} {{ 9.2e18|int }} {{ -9.2e18|int }} {{ '-9223372036854775808'|int }} {{ '9223372036854775807'|int }} {{ -9223372036854775808.0|int }}")
    case("Filters", "{{ '0x10'|int }} {{ '0x10'|float }} {{ '0x1p3'|float }} {{ '0x10'|int(16) }} {{ 'infinity'|float }} {{ ' 1_0 '|int }}")
    case("Filters", "{{ (-9223372036854775807)|abs }} {{ (-9223372036854775807 - 1) % -1 }} {{ 7 // -1 }} {{ -7 // -1 }} {{ -7 % -1 }} {{ 0 // -1 }} {{ -(-9223372036854775807) }}")
    case("Filters", "{{ -3|abs }} {{ (-2.5)|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 5|round }} {{ 2.1|round(method='ceil') }} {{ 2.9|round(0, 'floor') }} {{ 1234.5|round(-2) }}")
    # unique keeps a hash set as jinja2 does (fuzz_jinja found the old scan quadratic): Python's
    # equality classes (1, 1.0, True; equal tuples), and 30,000 items within the time limit.
    case("Filters", "{{ [1, 1.0, true, '1', (1, 2), (1, 2), (1, 2.0), none, none, 2.5, 2.5, -0.0, 0]|unique|list }} {{ range(30000)|map('string')|unique|list|length }} {{ ([1, 2] * 15000)|unique|list }}")
    case("Filters", "{{ ['b', 'A', 'a', 'B']|unique|list }} {{ ['b', 'A', 'a']|unique(case_sensitive=true)|list }} {{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }}")
    case("Filters", "{{ users|sort(attribute='age')|map(attribute='name')|join }} {{ d|dictsort }} {{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }}", {"users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}, {"name": "z", "age": 2}], "d": {"b": 1, "A": 3, "c": 2}})
    case("Filters", "[{{ 'a\\nb\\n\\nc'|indent }}] [{{ 'a\\nb'|indent(2, true) }}] [{{ 'a\\n\\nb\\n'|indent(2, blank=true) }}] [{{ 'x\\ny'|indent('> ') }}]")
    case("Filters", "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 0)|list }} {{ 'one two  three'|wordcount }} {{ [1, 2, 3]|sum }} {{ [1, 5, 3]|max }} {{ [4, 2, 8]|min }} {{ ['b', 'A']|max }} {{ []|max }}|")
    case("Filters", "{{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} [{{ 'ab'|center(6) }}] {{ '<a href=\"x\">&</a>'|escape }} {{ '<b>'|safe }} {{ 'a'|safe + '<b>' }} {{ '<b>' + 'a'|safe }} {{ 'a'|safe ~ '<b>' }}")
    case("Filters", "{{ [{'a': 1}, {'a': 2}]|sum(attribute='a') }} {{ users|min(attribute='age') }} {{ users|attr('name') }}|", {"users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}]})
    # Errors raised while rendering
    case("Errors", "{{ raise_exception('Roles must alternate: ' ~ n) }}", {"n": 3})
    case("Errors", "{{ x.y }}")
    case("Errors", "{{ d.q.z }}", {"d": {}})
    case("Errors", "{{ l[5].a }}", {"l": [1]})
    case("Errors", "{{ 'a' + 1 }}")
    case("Errors", "{{ 1 + 'a' }}")
    case("Errors", "{{ none + 'a' }}")
    case("Errors", "{{ [1] + 'a' }}")
    case("Errors", "{{ 'a' + u }}")
    case("Errors", "{{ 1 < 'a' }}")
    case("Errors", "{{ 1 in 'a' }}")
    case("Errors", "{{ 'a' in none }}")
    case("Errors", "{% for x in none %}{% endfor %}")
    case("Errors", "{% for x in 3 %}{% endfor %}")
    case("Errors", "{% set x = 1 %}{% set x.a = 2 %}")
    case("Errors", "{% set l = [1] %}{{ l.append(2) }}")
    case("Errors", "{{ 1 / 0 }}")
    case("Errors", "{{ 1 // 0 }}")
    case("Errors", "{{ undefined_fn() }}")
    case("Errors", "{{ 'abc'() }}")
    case("Errors", "{{ u|tojson }}")
    case("Errors", "{{ (1 if false).b }}")
    case("Errors", "{{ [1, 2]|first + 'a' }}")
    case("Errors", "{% for a, b in [[1, 2, 3]] %}{% endfor %}")
    case("Errors", "{{ 5|items|list }}")
    case("Errors", "{{ ', '.join([1, 2]) }}")
    case("Errors", "{{ 3|length }}")
    case("Errors", "{{ x.y.z }}", {"x": {"y": None}})
    case("Errors", "{{ messages[0]['role'] }}", {"messages": []})
    case("Errors", "{{ loop.previtem.x }}{% for i in [1] %}{{ loop.previtem.x }}{% endfor %}")
    # Lazy iterators returned by map/select/items/...: truthy, one-shot, no len, no index
    case("Iterators", "{{ not ([]|select('odd')) }} {{ [1, 2]|map('int') is sequence }} {{ [1, 2]|map('int') is iterable }} {{ 2 in [1, 2, 3]|map('int') }} {{ [1, 2]|map('int') == [1, 2]|map('int') }}")
    case("Iterators", "{% set g = [1, 2, 3]|map('string') %}{{ g|first }}{{ g|list }}{{ g|list }}|{% set h = [1, 2, 3]|select %}{% for x in h %}{{ x }}{{ loop.length }}{% endfor %}{% for x in h %}{{ x }}{% else %}empty{% endfor %}")
    case("Iterators", "{% if ms|selectattr('role', 'equalto', 'system') %}always{% endif %}|{% if ms|selectattr('role', 'equalto', 'system')|list %}never{% endif %}", {"ms": [{"role": "user"}]})
    case("Iterators", "{{ [1, 2]|select('odd')|length }}")
    case("Iterators", "{{ [1, 2]|select('odd')|last }}")
    case("Iterators", "{{ ([1, 2]|select('odd'))[0] }}|{{ d.items()[0] }}|{{ d.keys() }} {{ d.values() }}", {"d": {"a": 1}})
    case("Iterators", "{{ ([1, 2]|select('odd'))[1:] }}")
    case("Iterators", "{{ [1, 2]|map('int')|tojson }}")
    case("Iterators", "{% set g = 5|map('upper') %}lazy{{ g is iterable }}{{ g|list }}")
    case("Iterators", "{{ [1, 2]|reverse|list }} {{ [1, 2]|reverse is sequence }} {{ 'abc'|reverse }} {{ {'a': 1, 'b': 2}|reverse|list }} {{ [1, 2]|map('int')|reverse }}")
    case("Errors", "{{ x[1:] }}", {"x": None})
    case("Errors", "{{ d[1:] }}", {"d": {}})
    case("Errors", "{{ 1 % 0 }}{{ 1.0 / 0 }}")
    case("Errors", "{{ 1.0 / 0 }}")
    case("Errors", "{{ 2 ** none }}")
    case("Errors", "{{ x|int }}")
    case("Errors", "{{ x|indent }}")
    case("Errors", "{{ 'abc'.find(1) }}")
    case("Errors", "{{ 'a b'.split(' ', 'x') }}")
    case("Errors", "{{ x is defined(1) }}", {"x": 1})
    case("Errors", "{{ true|last }}")
    case("Output", "{{ 'a%sb' % x }}|{{ '' % [1] }}|{{ 'x'|safe|list }}|{{ self.DEFAULT_SYSTEM_MESSAGE }}|")
    # a constant {{ }} is evaluated at compile time, where slicing a non-sequence is undefined
    case("Output", "{{ (1)[1:] }}|{{ {'a': 1}[1:] }}|{{ ('abc' if true else x)[1:] }}|{{ [1, 2][::-1][1:] }}")
    case("Errors", "{% set v = (1)[1:] %}")
    case("Errors", "{{ x[1:] }}", {"x": 1})
    # Key order: dicts keep insertion order everywhere except dictsort, sort and sort_keys
    schema = {"d": {"zeta": 1, "alpha": {"type": "object", "properties": {
        "zeta": {"type": "string"}, "alpha": {"type": "integer"}}, "required": ["zeta"]},
        "Mid": [True, None, 2.5, "it's"], "é": "ü"}}
    case("KeyOrder", "{{ d|tojson }}|{{ d.alpha|tojson(indent=2) }}", schema)
    case("KeyOrder", "{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}",
         schema)
    case("KeyOrder", "{{ d }}|{{ d|string }}|{{ [d.alpha, (d.Mid,)] }}|{{ d ~ '' }}", schema)
    case("KeyOrder", "{{ d.items()|list }}|{{ d|items|list }}|{{ d.keys()|list }}|"
         "{{ d.values()|list }}|{{ d.items() }}|{{ d.keys() }}", schema)
    case("KeyOrder", "{% for k in d %}{{ k }},{% endfor %}|{% for k, v in d.alpha.items() %}"
         "{{ k }}={{ v }};{% endfor %}|{% for k, v in d|items %}{{ k }} {% endfor %}", schema)
    case("KeyOrder", "{{ d|list }}|{{ d|first }}|{{ d|last }}|{{ d|join(',') }}|"
         "{{ d|map('upper')|list }}|{{ d|reverse|list }}|{{ d|length }}", schema)
    case("KeyOrder", "{{ d|dictsort }}|{{ d|dictsort(case_sensitive=true) }}|"
         "{{ d|dictsort(reverse=true) }}|{{ d|sort }}|{{ d.alpha.properties|dictsort }}", schema)
    case("KeyOrder", "{{ d|dictsort(by='value') }}",
         {"d": {"zeta": 3, "alpha": 1, "Mid": 2, "beta": 1}})
    case("KeyOrder", "{% set x = {'zeta': 1, 'alpha': 2, 'mid': {'z': 0, 'a': none}} %}"
         "{{ x }}|{{ x|tojson }}|{{ x.keys()|list }}|{{ x|dictsort }}")
    case("KeyOrder", "{{ {'b': 1, 'a': 2, 'b': 3} }}|{{ {1: 'a', 1.0: 'b', true: 'c', 0: 'z'} }}|"
         "{{ {'z': 1, 'a': 2} == {'a': 2, 'z': 1} }}|{{ {2: 'x', 'k': 'y'}|tojson }}")
    case("KeyOrder", "{{ dict(zeta=1, alpha=2) }}|{{ dict(d.alpha, zeta=9, aa=0) }}|"
         "{{ dict([('z', 1), ('a', 2), ('z', 3)]) }}|{{ dict(d.alpha)|tojson }}", schema)
    case("KeyOrder", "{% set ns = namespace(zeta=1, alpha=2) %}{% set ns.mid = 3 %}"
         "{% set ns.zeta = 4 %}{{ ns }}|{% set n2 = namespace(d.alpha, z=1) %}{{ n2 }}", schema)
    case("KeyOrder", "{{ d.alpha.update({'a': 1}) }}", schema)
    # past the size where string keys get hashed: order, lookups and overwrites still hold
    big = {"d": {f"k{(i * 17) % 40:02d}": i for i in range(40)}}
    case("KeyOrder", "{{ d|tojson }}|{{ d.k07 }} {{ d['k33'] }} {{ d.k99 is defined }} "
         "{{ d.get('k00') }}|{% set x = dict(d, k05='new', extra=1) %}{{ x.keys()|list }} "
         "{{ x.k05 }} {{ x|length }}|{{ (d|dictsort)[:3] }}", big)
    case("KeyOrder", "{% set x = {'z': 0, 'y': 1, 'x': 2, 'w': 3, 'v': 4, 'u': 5, 't': 6, 's': 7, 'r': 8, "
         "'q': 9, 'p': 10, 'o': 11, 'n': 12, 'm': 13, 'l': 14, 'k': 15, 'j': 16, 'i': 17, "
         "1: 'one', 'z': 'again', 1.0: 'float', true: 'bool', 'a': 18} %}{{ x }}|{{ x[1] }} "
         "{{ x['z'] }} {{ x.i }} {{ x|length }} {{ 'y' in x }} {{ true in x }}")
    case("KeyOrder", "{{ messages[0]|tojson }}|{{ messages[0].content[1] }}|"
         "{% for p in messages[0].content %}{{ p.keys()|list }}{% endfor %}",
         {"messages": [{"role": "user", "content": [
             {"type": "text", "text": "Hi"},
             {"type": "image_url", "image_url": {"url": "data:,", "detail": "low"}}]}]})
    return groups


def cpp_string(s):
    out = '"'
    for ch in s:
        if ch in '\\"':
            out += '\\' + ch
        elif ch in '\n\t\r':
            out += {'\n': '\\n', '\t': '\\t', '\r': '\\r'}[ch]
        elif ord(ch) < 0x20 or ord(ch) == 0x7f:
            out += '\\%03o' % ord(ch)
        else:
            out += ch
    return out + '"'


def cpp_raw(s):
    if '\r' in s or ')J"' in s or any(ord(c) < 0x20 and c not in '\n\t' for c in s):
        return cpp_string(s)
    return 'R"J(' + s + ')J"'


def print_construct_table():
    for group, cases in construct_cases().items():
        print(f"const Case k{group}[] = {{")
        for template, ctx in cases:
            try:
                result = f'{cpp_string(compile_template(template).render(**ctx))}, "", ""'
            except Exception as e:
                result = f'"", "{type(e).__name__}", {cpp_string(str(e))}'
            context = cpp_raw(json.dumps(ctx, ensure_ascii=False)) if ctx else '""'
            print(f"    {{{cpp_raw(template)}, {context}, {result}}},")
        print("};")
        print(f"TEST(JinjaConstructs, {group}) {{ run_cases(k{group}); }}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared", default=os.path.join(REPO, "..", "shared"))
    parser.add_argument("--gguf", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--out", default=os.path.join(REPO, "fixtures", "chat_template"))
    parser.add_argument("--construct-table", action="store_true",
                        help="print the C++ case tables of tests/tokenizer/test_jinja.cpp instead")
    args = parser.parse_args()
    if args.construct_table:
        print_construct_table()
        return
    os.makedirs(args.out, exist_ok=True)
    for name, source_ref, source, tokens in collect_templates(os.path.abspath(args.shared), args.gguf):
        template = compile_template(source)
        cases = []
        mismatches = []
        checked = True
        for conv_name, messages, tools, agp, extra in conversations():
            case = {"name": conv_name}
            case.update(render_case(template, messages, tools, agp, extra, tokens))
            cases.append(case)
            other = transformers_outcome(source, case["context"])
            if other is None:
                checked = False
            elif {k: v for k, v in case.items() if k in ("expected", "error")} != other:
                mismatches.append(conv_name)
        if mismatches:
            print(f"warning: {name}: transformers renders differently: {mismatches}", file=sys.stderr)
        fixture = {
            "template": name,
            "source": source_ref,
            "template_bytes": len(source.encode("utf-8")),
            "jinja2_version": jinja2.__version__,
            "now": NOW.isoformat(),
            "transformers_agrees": None if not checked else not mismatches,
            "cases": cases,
        }
        path = os.path.join(args.out, f"{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False, indent=1)
            f.write("\n")
        errors = sum("error" in c for c in cases)
        print(f"{path}: {len(cases)} cases, {errors} raise")


if __name__ == "__main__":
    main()
