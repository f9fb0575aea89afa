"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/ (committed;
run again after changing a seed here). Usage: .venv/bin/python tests/fuzz/make_seeds.py"""
import json
import pathlib
import struct

import numpy as np
import gguf

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/fuzz/corpus"


def write(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def request_json():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    bodies = {
        "completion": {"model": "m", "prompt": "Hello", "max_tokens": 8, "temperature": 0.7,
                       "top_p": 0.9, "top_k": 20, "seed": 1, "stop": ["\n", "END"]},
        "completion_ids": {"prompt": [[1, 2, 3], [4, 5]], "echo": True, "logprobs": 2,
                           "max_tokens": 0, "n": 2, "best_of": 2},
        "completion_penalties": {"prompt": ["a", "b"], "presence_penalty": 1.5,
                                 "frequency_penalty": -0.5, "repetition_penalty": 1.1,
                                 "min_p": 0.05, "min_tokens": 2, "logit_bias": {"5": -100},
                                 "stop_token_ids": [2], "ignore_eos": "true",
                                 "truncate_prompt_tokens": 3, "prompt_logprobs": 1},
        "chat": {"model": "m", "messages": msgs, "max_tokens": 4, "logprobs": True,
                 "top_logprobs": 3, "stream": True, "stream_options": {"include_usage": True}},
        "chat_parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]},
                                    {"role": "assistant", "content": "y"}],
                       "continue_final_message": True, "add_generation_prompt": False},
        "chat_tools": {"messages": msgs, "tools": [{"type": "function", "function": {
            "name": "get", "description": "d", "parameters": {
                "type": "object", "properties": {"q": {"type": "string"}}}}}],
            "tool_choice": "auto"},
        "chat_template": {"messages": msgs, "chat_template":
                          "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
                          "chat_template_kwargs": {"x": 1}},
        "json_schema": {"messages": msgs, "response_format": {"type": "json_schema",
                        "json_schema": {"name": "s", "schema": {
                            "type": "object", "properties": {"a": {"type": "integer"},
                                                             "b": {"enum": ["x", "y"]}},
                            "required": ["a"]}}}},
        "json_object": {"prompt": "x", "response_format": {"type": "json_object"}},
        "regex": {"prompt": "x", "structured_outputs": {"regex": "[a-z]{1,3}[0-9]+"}},
        "choice": {"prompt": "x", "structured_outputs": {"choice": ["yes", "no"]}},
        "grammar": {"prompt": "x", "structured_outputs": {
            "grammar": "root ::= \"a\" b*\nb ::= [0-9]"}},
        "priority": {"prompt": "x", "priority": 1, "request_id": "r1",
                     "return_token_ids": True, "return_tokens_as_token_ids": True},
        "anthropic": {"model": "m", "max_tokens": 8, "system": [{"type": "text", "text": "s"}],
                      "messages": [{"role": "user", "content": "Hi"},
                                   {"role": "assistant", "content": "Hel"}],
                      "stop_sequences": ["x"], "top_k": 3, "metadata": {"user_id": "u"}},
        "anthropic_tools": {
            "model": "m", "max_tokens": 8, "tool_choice": {"type": "any"},
            "tools": [{"name": "get", "input_schema": {"type": "object", "properties": {
                "q": {"type": "string"}}}, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": [
                             {"type": "text", "text": "t"},
                             {"type": "tool_use", "id": "a", "name": "get", "input": {"q": "x"}}]},
                         {"role": "user", "content": [
                             {"type": "tool_result", "tool_use_id": "a", "is_error": True,
                              "content": [{"type": "text", "text": "r"}]}]}]},
    }
    for name, body in bodies.items():
        write("fuzz_request_json", name, json.dumps(body))
    write("fuzz_request_json", "not_object", "[1, 2, {\"a\": null}]")


def http():
    body = b'{"prompt": "Hi", "max_tokens": 1}'
    cl = b"Content-Length: %d\r\n" % len(body)
    post = b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
    get = b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
    seeds = {
        "get": get,
        "post": post + cl + b"\r\n" + body,
        "pipelined": get + post + cl + b"\r\n" + body + get,
        "chunked": post + b"Transfer-Encoding: chunked\r\n\r\n21\r\n" + body + b"\r\n0\r\n\r\n",
        "two_lengths": post + cl + b"Content-Length: 5\r\n\r\n" + body,
        "length_and_chunked": post + cl + b"Transfer-Encoding: chunked\r\n\r\n" + body,
        "no_host": b"GET /health HTTP/1.1\r\n\r\n",
        "http10": b"GET /v1/models/m HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + get,
        "obs_fold": b"GET /health HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n",
        "bad_name": b"GET /health HTTP/1.1\r\nHost: a\r\nX A: b\r\n\r\n",
        "query": b"GET /health?a=1&b=%41%zz HTTP/1.1\r\nHost: a\r\nRange: bytes=0-3\r\n\r\n",
        "expect": post + cl + b"Expect: 100-continue\r\n\r\n" + body,
        "lf_only": b"GET /health HTTP/1.1\nHost: a\n\n",
    }
    for name, raw in seeds.items():
        # Byte 0 is the read size - 1 (fuzz_http.cpp): whole reads, and 1 byte at a time.
        write("fuzz_http", name, b"\xff" + raw)
        write("fuzz_http", name + "_bytewise", b"\x00" + raw)


def jinja():
    for f in sorted((ROOT / "fixtures/chat_template").glob("*.json")):
        src = json.loads(f.read_text())["source"]
        if "inline" in src:
            write("fuzz_jinja", f.stem, src["inline"])
    small = {
        "loop": "{% for i in range(3) %}{{ loop.index }}{{ i|string|upper }}{% endfor %}",
        "macro": "{% macro f(a, b=2) %}{{ a ~ b }}{% endmacro %}{{ f(1) }}{{ f('x', b=[1]) }}",
        "set_ns": "{% set ns = namespace(n=0) %}{% for m in messages %}"
                  "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
        "filters": "{{ messages|map(attribute='role')|join(',') }}{{ tools|tojson(indent=2) }}"
                   "{{ 'abc'|replace('b','x')|trim|length }}{{ [3,1,2]|sort|first }}",
        "tests": "{% if x is defined and x is not none %}{{ x }}{% elif 1 is number %}n"
                 "{% else %}e{% endif %}{{ messages[-1]['content'] is string }}",
        "slicing": "{{ 'hello'[1:3] }}{{ messages[::2]|length }}{{ ('a' * 3).split('a') }}",
        "raise": "{{ raise_exception('bad') }}",
        "whitespace": "{%- for m in messages -%}\n  {{- m.content -}}\n{%- endfor %}",
        "dict": "{% set d = {'a': 1, 'b': [1, 2]} %}{% for k, v in d.items() %}{{ k }}={{ v }}"
                "{% endfor %}{{ d.get('c', 'none') }}",
        "with_context": "{{ x }}\x00{\"x\": [1, {\"y\": \"z\"}], \"messages\": []}",
    }
    for name, src in small.items():
        write("fuzz_jinja", name, src)


def tokenizer():
    texts = ["Hello, world! How are you?", "  leading and trailing  ", "naïve café — 東京 🙂",
             "<|begin_of_text|>hi<|eot_id|>", "<s>[INST] x [/INST]</s>", "line1\nline2\r\n\ttab",
             "12345 67.89 1e10", "'s 're 've 'll ll", "\u0300\u0301e\u0301 \ufeff\u200b"]
    for i, t in enumerate(texts):
        for sel in (0, 1, 2, 8):
            write("fuzz_tokenizer", f"text{i}_{sel}", bytes([sel]) + t.encode())
    for sel in (4, 5, 6, 12, 13):
        ids = b"".join(struct.pack("<I", v)[:3] for v in (1, 15043, 29892, 3186, 13, 128000,
                                                          128009, 0x1000, 0xFF00FF))
        write("fuzz_tokenizer", f"ids_{sel}", bytes([sel]) + ids)
    write("fuzz_tokenizer", "invalid_utf8", b"\x00\xff\xfe\xc3(\xe2\x82")


def detokenizer():
    ids = b"".join(struct.pack("<I", v)[:3] for v in (9906, 11, 1917, 0, 627, 1226, 3, 4, 128009))
    for flags in (0x00, 0x01, 0x02, 0x05, 0x0D, 0x83, 0xA4, 0xF9):
        write("fuzz_detokenizer", f"stops_{flags:02x}", bytes([flags]) + b"world\x01!\x01\n\x00" + ids)
    write("fuzz_detokenizer", "no_stops", b"\x80\x00" + ids)
    write("fuzz_detokenizer", "utf8_stop", b"\x01\xe6\x9d\xb1\x01\xf0\x9f\x99\x82\x00" + ids)


def gguf_seeds():
    path = OUT / "fuzz_gguf"
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / "tiny"
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_uint32("llama.context_length", 64)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "<s>"])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.0, -2.5])
    w.add_array("tokenizer.ggml.token_type", [1, 1, 3])
    w.add_int64("x.i64", -5)
    w.add_float64("x.f64", 0.5)
    w.add_tensor("a.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.add_tensor("b.weight", np.ones((4,), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = tmp.read_bytes()
    write("fuzz_gguf", "truncated", data[: len(data) // 2])
    write("fuzz_gguf", "header_only", data[:24])


def safetensors():
    def st(header, payload):
        h = json.dumps(header).encode()
        return struct.pack("<Q", len(h)) + h + payload

    a = np.arange(6, dtype=np.float32).tobytes()
    b = np.ones(4, dtype=np.float16).tobytes()
    write("fuzz_safetensors", "two", st({
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, len(a)]},
        "b": {"dtype": "F16", "shape": [4], "data_offsets": [len(a), len(a) + len(b)]}}, a + b))
    write("fuzz_safetensors", "bf16_i64", st({
        "c": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
        "d": {"dtype": "I64", "shape": [1], "data_offsets": [4, 12]}}, bytes(12)))
    write("fuzz_safetensors", "scalar_empty", st({
        "s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
        "e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [4, 4]}}, bytes(4)))


if __name__ == "__main__":
    request_json()
    http()
    jinja()
    tokenizer()
    detokenizer()
    gguf_seeds()
    safetensors()
