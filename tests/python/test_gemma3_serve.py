"""`vllm-cpp serve` on a hybrid-attention model: Gemma-3-270M Q4_K_M (five sliding-window layers
to one global layer, fetched by scripts/test.sh). Its greedy continuation of llama.cpp's own
prompt ids starts as llama.cpp's (fixtures/gemma3, up to the first near tie), the
prompt text tokenizes to the same ids, and chat works with the model's template from the
shared Gemma-3 tokenizer config."""
import json
import pathlib

import pytest
import requests

from conftest import load_template_tool
from test_server import MODEL_NAME, ServerProcess

ROOT = pathlib.Path(__file__).resolve().parents[2]
GEMMA = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"
FIXTURE = ROOT / "fixtures" / "gemma3" / "llamacpp_greedy.json"
TOKENIZER_CONFIG = ROOT.parent / "shared" / "tokenizers" / "gemma3" / "tokenizer_config.json"


@pytest.fixture(scope="module")
def server(binary, tmp_path_factory):
    if not GEMMA.exists():
        pytest.skip(f"{GEMMA} absent (scripts/test.sh fetches it)")
    template = tmp_path_factory.mktemp("gemma") / "chat_template.jinja"
    template.write_text(json.loads(TOKENIZER_CONFIG.read_text())["chat_template"])
    srv = ServerProcess(binary, str(GEMMA), "--chat-template", str(template)).wait_ready()
    yield srv
    assert srv.stop() == 0


def first_case():
    return json.loads(FIXTURE.read_text())["cases"][0]


def test_prompt_tokenizes_as_llamacpp(server):
    case = first_case()
    r = requests.post(server.url + "/tokenize", json={"prompt": case["prompt"]}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == case["prompt_ids"]


def test_greedy_completion_starts_as_llamacpp(server):
    case = first_case()
    # The steps before llama.cpp's first near tie (top-2 gap < 0.05 nat, the fixture's rule).
    n = next(i for i, gap in enumerate(case["top2_gap"]) if gap < 0.05)
    assert n >= 3
    r = requests.post(server.url + "/v1/completions", timeout=120, json={
        "model": MODEL_NAME, "prompt": case["prompt_ids"], "max_tokens": n, "temperature": 0,
        "return_token_ids": True})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["token_ids"] == case["greedy_ids"][:n]


def reference_chat_prompt_tokens(messages):
    """The prompt as HF renders it (jinja2 in HF's environment) and tokenizes it."""
    from tokenizers import Tokenizer
    template = json.loads(TOKENIZER_CONFIG.read_text())["chat_template"]
    text = load_template_tool().compile_template(template).render(
        messages=messages, bos_token="<bos>", add_generation_prompt=True)
    tok = Tokenizer.from_file(str(TOKENIZER_CONFIG.parent / "tokenizer.json"))
    return len(tok.encode(text, add_special_tokens=False).ids)


def test_chat_with_the_gemma_template(server):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    r = requests.post(server.url + "/v1/chat/completions", timeout=120, json={
        "model": MODEL_NAME, "max_tokens": 8, "temperature": 0, "messages": messages})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["prompt_tokens"] == reference_chat_prompt_tokens(messages)
    assert body["choices"][0]["finish_reason"] in ("length", "stop")
    assert body["usage"]["completion_tokens"] >= 1
