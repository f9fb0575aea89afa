#!/usr/bin/env python3
"""Chat-template oracle: renders every shared chat template with Python jinja2 configured exactly
like transformers' apply_chat_template, over a fixed set of conversations, and writes the outputs
(or the error each render raises) to fixtures/chat_template/<template>.json.

Templates: ../shared/tokenizers/*/tokenizer_config.json (chat_template, string or named list),
../shared/chat_templates/*.jinja (bos/eos from the tokenizer that README pairs them with) and
SmolLM2's GGUF template (stored inline: the GGUF is not shared). Shared files are referenced by
path and read by the C++ test at run time; only rendered outputs are stored here.

Usage: python3 tools/make_chat_template_fixtures.py [--shared ../shared] [--gguf PATH]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared", default=os.path.join(REPO, "..", "shared"))
    parser.add_argument("--gguf", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--out", default=os.path.join(REPO, "fixtures", "chat_template"))
    args = parser.parse_args()
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
