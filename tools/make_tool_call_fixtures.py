#!/usr/bin/env python3
"""Tool-call oracle: the exact text a model trained on each real chat template emits when it
calls tools, with the calls it came from. Every assistant turn with tool_calls is rendered with
jinja2 configured as transformers' apply_chat_template (tools/make_chat_template_fixtures.py);
the model's output is what the full conversation adds after the generation prompt, up to the
end-of-turn token (which the server strips as a special token). The C++ test
(tests/server/test_tool_call_fixtures.cpp) parses each output back with the named
--tool-call-parser (and --reasoning-parser) and must recover the calls.

Templates: ../shared/chat_templates/*.jinja (bos/eos from the tokenizer their README names) and
../shared/tokenizers/{qwen3,deepseek_v3}/tokenizer_config.json. Only rendered outputs are
stored in fixtures/tool_calls/tool_calls.json.

Usage: python3 tools/make_tool_call_fixtures.py [--shared ../shared]
"""
import argparse
import json
import os
import platform

import jinja2

from make_chat_template_fixtures import (REPO, TEMPLATE_TOKENIZER, compile_template,
                                         special_tokens)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "detail": {"type": "object"}, "hours": {"type": "array"}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search_docs", "description": "Search the docs.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]}}}
TOOLS = [WEATHER, SEARCH]

# (name, calls): arguments as the client sent them (objects); several for parallel calls.
CALLS = [
    ("one_call", [("get_weather", {"city": "Paris", "days": 3})]),
    ("unicode_and_quotes", [("search_docs", {"query": "naïve \"quoted\" 東京\nline", "limit": 5})]),
    ("nested", [("get_weather", {"city": "Oslo", "detail": {"wind": True, "uv": None},
                                 "hours": [1, 2.5, "x"]})]),
    ("two_calls", [("get_weather", {"city": "Rome", "unit": "celsius"}),
                   ("search_docs", {"query": "tool calling"})]),
]

# (fixture name, template source, tokenizer for bos/eos, parser, reasoning parser,
#  arguments passed to the template as JSON text (the template concatenates strings), end of turn,
#  single call only)
TARGETS = [
    ("hermes_tools", ("chat_templates", "hermes_tools.jinja"), "qwen3", "hermes", None, False,
     "<|im_end|>", False),
    ("qwen3", ("tokenizers", "qwen3"), "qwen3", "hermes", "qwen3", False, "<|im_end|>", False),
    ("qwen3_coder_tools", ("chat_templates", "qwen3_coder_tools.jinja"), "qwen3", "qwen3_coder",
     None, False, "<|im_end|>", False),
    ("llama3.1_json_tools", ("chat_templates", "llama3.1_json_tools.jinja"), "llama3",
     "llama3_json", None, False, "<|eot_id|>", True),
    ("mistral3_tools", ("chat_templates", "mistral3_tools.jinja"), "llama2", "mistral", None,
     False, "</s>", False),
    ("deepseek_v3", ("tokenizers", "deepseek_v3"), "deepseek_v3", "deepseek_v3", None, True,
     "<｜end▁of▁sentence｜>", False),
]

REASONING = "The user wants data; I should call the tool."


def load(shared, where, tok):
    config = json.load(open(os.path.join(shared, "tokenizers", tok, "tokenizer_config.json"),
                            encoding="utf-8"))
    if where[0] == "tokenizers":
        return config["chat_template"], special_tokens(config)
    path = os.path.join(shared, *where)
    assert TEMPLATE_TOKENIZER[os.path.splitext(where[1])[0]] == tok
    return open(path, encoding="utf-8", newline="").read(), special_tokens(config)


def model_output(template, tokens, messages, end_of_turn):
    """What the model generates for messages[1]: the render of the conversation (tool results
    after the call, so that templates close the turn) minus the prompt render, up to the end of
    the turn."""
    ctx = {"tools": TOOLS, "documents": None, **tokens}
    prompt = template.render(messages=messages[:1], add_generation_prompt=True, **ctx)
    full = template.render(messages=messages, add_generation_prompt=False, **ctx)
    assert full.startswith(prompt), "the template does not extend the prompt"
    out = full[len(prompt):]
    # DeepSeek-V3's template closes a single call's turn only with the tool outputs.
    found = [i for i in (out.find(e) for e in (end_of_turn, "<｜tool▁outputs▁begin｜>")) if i >= 0]
    assert found, f"no {end_of_turn!r} after the assistant turn"
    return out[:min(found)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", default=os.path.join(REPO, "..", "shared"))
    ap.add_argument("--out", default=os.path.join(REPO, "fixtures", "tool_calls"))
    args = ap.parse_args()
    cases = []
    for name, where, tok, parser, reasoning, string_args, eot, single in TARGETS:
        source, tokens = load(os.path.abspath(args.shared), where, tok)
        template = compile_template(source)
        for case_name, calls in CALLS:
            if single and len(calls) > 1:
                continue
            tool_calls = [{"id": f"call{i}abcdefgh", "type": "function",
                           "function": {"name": n,
                                        "arguments": json.dumps(a, ensure_ascii=False)
                                        if string_args else a}}
                          for i, (n, a) in enumerate(calls)]
            assistant = {"role": "assistant", "content": None if string_args else "",
                         "tool_calls": tool_calls}
            if reasoning:
                assistant["reasoning_content"] = REASONING
            messages = [{"role": "user", "content": "Weather in Paris?"}, assistant]
            messages += [{"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                          "content": "ok"}
                         for c in tool_calls]
            cases.append({
                "name": f"{name}/{case_name}", "template": name, "parser": parser,
                "reasoning_parser": reasoning, "tools": TOOLS,
                "output": model_output(template, tokens, messages, eot),
                "reasoning": REASONING if reasoning else None,
                "calls": [{"name": n, "arguments": a} for n, a in calls],
                # deepseek_v3 passes the arguments on as written: compare the text
                "arguments_text": [json.dumps(a, ensure_ascii=False) for _, a in calls]
                if string_args else None,
            })
    os.makedirs(args.out, exist_ok=True)
    fixture = {"manifest": {"tool": "tools/make_tool_call_fixtures.py",
                            "jinja2_version": jinja2.__version__,
                            "python_version": platform.python_version()},
               "cases": cases}
    path = os.path.join(args.out, "tool_calls.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{path}: {len(cases)} cases")


if __name__ == "__main__":
    main()
