"""Structured output on every tiny random-weight checkpoint (fixtures/tiny: Llama, Qwen2/3,
Mistral, Gemma-3, Phi-3, OLMo-2, Granite, sliding-window Qwen2, Qwen3-MoE, DeepSeek-V2/V3 with
MLA), black-box through `vllm-cpp serve`: with random weights the model has no preference of
its own, so at temperature 1 the grammar alone keeps the output valid. Every output under a
JSON schema validates with `jsonschema`, under a regex `re.fullmatch` accepts it, under a choice
it is one of the choices, at temperature 0 and 1, and each ends with EOS once the grammar
accepts (finish_reason "stop").

The MoE checkpoints carry tools/make_tiny_tokenizer.py's byte-level tokenizer.json; the others
borrow it (same vocabulary size, 384, and the same special ids) through a directory of links."""
import json
import pathlib
import re

import jsonschema
import pytest
import requests

from test_server import MODEL_NAME, ServerProcess

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = ROOT / "fixtures" / "tiny"
ARCHS = sorted(p.name for p in TINY.iterdir() if (p / "config.json").exists())
TOKENIZER = TINY / "deepseek_v2" / "tokenizer.json"

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "age", "ok"],
    "additionalProperties": False,
}
# ASCII digits: `\d` is Unicode's decimal digits (Nd) here as in llguidance, from Unicode 16's
# tables, and a random model finds digits that Python 3.11's re (Unicode 14) does not know
# (U+16130..9 Gurung Khema, U+16D70..9 Kirat Rai: unassigned before Unicode 16).
REGEX = r"[a-f]{2,5}-[0-9]{1,3}"
CHOICES = ["alpha", "beta", "gamma delta"]


@pytest.fixture(scope="module", params=ARCHS)
def tiny_server(request, binary, tmp_path_factory):
    src = TINY / request.param
    d = tmp_path_factory.mktemp(request.param)
    for f in src.iterdir():
        (d / f.name).symlink_to(f)
    if not (d / "tokenizer.json").exists():
        (d / "tokenizer.json").symlink_to(TOKENIZER)
    srv = ServerProcess(binary, str(d), "--max-model-len", "512", "--block-size", "8").wait_ready()
    yield srv
    assert srv.stop() == 0


def generate(srv, temperature, **constraint):
    body = {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 160,
            "temperature": temperature, "n": 3, "seed": 11, **constraint}
    r = requests.post(srv.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert len(choices) == 3
    for c in choices:
        assert c["finish_reason"] == "stop", c
    return [c["text"] for c in choices]


@pytest.mark.parametrize("temperature", [0, 1])
def test_json_schema_outputs_validate(tiny_server, temperature):
    # Compact JSON: under the default (any JSON whitespace between tokens) a model with no
    # preference of its own spends its tokens on whitespace and rarely closes the object.
    constraint = {"json": SCHEMA, "disable_any_whitespace": True}
    for text in generate(tiny_server, temperature, structured_outputs=constraint):
        jsonschema.validate(json.loads(text), SCHEMA)


@pytest.mark.parametrize("temperature", [0, 1])
def test_regex_outputs_fullmatch(tiny_server, temperature):
    for text in generate(tiny_server, temperature, structured_outputs={"regex": REGEX}):
        assert re.fullmatch(REGEX, text), text


@pytest.mark.parametrize("temperature", [0, 1])
def test_choice_outputs_are_choices(tiny_server, temperature):
    for text in generate(tiny_server, temperature, structured_outputs={"choice": CHOICES}):
        assert text in CHOICES, text
