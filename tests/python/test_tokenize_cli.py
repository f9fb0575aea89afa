"""Black-box tests of `vllm-cpp tokenize` against Hugging Face `tokenizers` and jinja2."""
import json
import subprocess
from datetime import datetime

import pytest

from conftest import ROOT

SHARED = ROOT.parent / "shared" / "tokenizers"
TEXTS = ["Hello world", "", "  leading spaces and trailing  ", "数字 12345 and émoji 👩🏽‍💻",
         "<|im_start|>user\nhi<|im_end|>", "def f(x):\n\treturn x ** 2\n", "مرحبا بالعالم",
         "a" * 300, "\n\n\n", "The year 2024 had 366 days."]


def tokenize(binary, args, lines):
    r = subprocess.run([binary, "tokenize", *args], input="".join(l + "\n" for l in lines),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [json.loads(l) for l in r.stdout.splitlines()]


@pytest.mark.parametrize("name", ["llama3", "qwen3", "gemma3", "llama2", "deepseek_v3"])
def test_jsonl_matches_hf_tokenizers(binary, name):
    if not (SHARED / name).exists():
        pytest.skip("../shared/tokenizers absent")
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(str(SHARED / name / "tokenizer.json"))
    model = str(SHARED / name)
    lines = [json.dumps(t, ensure_ascii=False) for t in TEXTS]
    cfg = json.loads((SHARED / name / "tokenizer_config.json").read_text())

    def as_transformers(ids):
        # transformers' Llama-style fast tokenizers rebuild the post-processor from
        # tokenizer_config's add_bos_token / add_eos_token.
        def token_id(key):
            tok = cfg.get(key)
            tok = tok.get("content") if isinstance(tok, dict) else tok
            return hf.token_to_id(tok) if tok else None
        bos, eos = token_id("bos_token"), token_id("eos_token")
        if cfg.get("add_bos_token") is True and bos is not None and ids[:1] != [bos]:
            ids = [bos] + ids
        if cfg.get("add_bos_token") is False and bos is not None and ids[:1] == [bos]:
            ids = ids[1:]
        if cfg.get("add_eos_token") is True and eos is not None and ids[-1:] != [eos]:
            ids = ids + [eos]
        return ids

    for special in (False, True):
        got = tokenize(binary, ["-m", model, "--jsonl"] + (["--add-special-tokens"] if special else []), lines)
        want = [hf.encode(t, add_special_tokens=special).ids for t in TEXTS]
        if special:
            want = [as_transformers(w) for w in want]
        assert got == want, (name, special)
    decoded = tokenize(binary, ["-m", model, "--decode"], [json.dumps(i) for i in want])
    assert decoded == [hf.decode(i, skip_special_tokens=False) for i in want]


def test_chat_matches_jinja2_for_the_gguf_template(binary, model):
    import gguf
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    reader = gguf.GGUFReader(model)
    source = reader.fields["tokenizer.chat_template"].contents()
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    tmpl = env.from_string(source)
    convs = [
        {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                      {"role": "assistant", "content": "4"}, {"role": "user", "content": "  and 3+3 ?  "}]},
    ]
    got = tokenize(binary, ["-m", model, "--chat"], [json.dumps(c) for c in convs])
    for c, g in zip(convs, got):
        want = tmpl.render(messages=c["messages"], add_generation_prompt=c.get("add_generation_prompt", False),
                           bos_token="<|im_start|>", eos_token="<|im_end|>", tools=None,
                           strftime_now=lambda f: datetime.now().strftime(f))
        assert g == want


def test_bad_lines_and_missing_template(binary, model, tmp_path):
    got = tokenize(binary, ["-m", model, "--decode"], ["[1, 2]", "\"x\"", "[-1]"])
    assert isinstance(got[0], str) and "error" in got[1] and "error" in got[2]
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for x in %}")
    r = subprocess.run([binary, "tokenize", "-m", model, "--chat", "--chat-template", str(bad)],
                       input="{}\n", capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "line 1" in r.stderr
    raising = tmp_path / "raise.jinja"
    raising.write_text("{{ raise_exception('no system role') }}")
    got = tokenize(binary, ["-m", model, "--chat", "--chat-template", str(raising)],
                   [json.dumps({"messages": []})])
    assert got == [{"error": got[0]["error"]}] and "no system role" in got[0]["error"]
