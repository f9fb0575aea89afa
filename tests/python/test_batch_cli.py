"""Black-box tests of offline batches: `vllm-cpp generate --input --output`."""
import json

from conftest import run


def write_lines(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_batch_keeps_order_and_fields(binary, model, tmp_path):
    rows = [
        {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0},
        {"prompt": "Count: one, two,", "max_tokens": 6, "temperature": 0, "logprobs": 2},
        {"prompt": [504, 3575, 282, 4649, 314], "max_tokens": 8, "temperature": 0},
        {"prompt": "Tell me a story.", "max_tokens": 12, "temperature": 0.9, "seed": 1, "n": 2},
        {"prompt": "Name three colors:", "max_tokens": 40, "temperature": 0, "stop": ["\n"]},
    ]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(inp, rows)
    r = run(binary, "generate", "-m", model, "--input", str(inp), "--output", str(out),
            "--max-num-seqs", "3")
    assert r.returncode == 0, r.stderr
    assert "KV cache size" in r.stderr
    res = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(res) == len(rows)
    assert "Paris" in res[0]["text"]
    assert res[0]["finish_reason"] == "length" and len(res[0]["token_ids"]) == 8
    # Text prompt and its token ids give the same greedy continuation.
    assert res[2]["token_ids"] == res[0]["token_ids"]
    assert len(res[1]["logprobs"]) == 6
    assert all(len(lp["top_logprobs"]) == 2 for lp in res[1]["logprobs"])
    assert all(lp["logprob"] <= 0 for lp in res[1]["logprobs"])
    assert len(res[3]["outputs"]) == 2
    assert res[3]["outputs"][0]["token_ids"] != res[3]["outputs"][1]["token_ids"]
    assert "\n" not in res[4]["text"]
    assert res[4]["finish_reason"] in ("stop", "length")


def test_batch_equals_single_greedy(binary, model, tmp_path):
    prompts = ["Hello, my name is", "The weather today", "In the year 2000,", "def add(a, b):"]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(inp, [{"prompt": p, "max_tokens": 10, "temperature": 0, "ignore_eos": True}
                      for p in prompts])
    assert run(binary, "generate", "-m", model, "--input", str(inp), "--output", str(out)).returncode == 0
    batched = [json.loads(line)["text"] for line in out.read_text().splitlines()]
    for p, text in zip(prompts, batched):
        single = run(binary, "generate", "-m", model, p, "-n", "10", "--ignore-eos", "-q")
        assert single.stdout.rstrip("\n") == p + text


def test_bad_lines_are_reported_per_line(binary, model, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(inp, [
        {"prompt": "ok", "max_tokens": 2},
        "{not json",
        {"max_tokens": 3},
        {"prompt": "x", "temperature": "hot"},
        {"prompt": "x", "max_tokens": 100000},
        {"prompt": [1, 2, 99999999]},
    ])
    r = run(binary, "generate", "-m", model, "--input", str(inp), "--output", str(out))
    assert r.returncode == 1
    res = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(res) == 6
    assert "error" not in res[0] and len(res[0]["token_ids"]) == 2
    for i, word in [(1, "parse"), (2, "prompt"), (3, "temperature"), (4, "max_tokens"), (5, "token id")]:
        assert word in res[i]["error"], res[i]


def test_missing_input_file(binary, model, tmp_path):
    r = run(binary, "generate", "-m", model, "--input", str(tmp_path / "nope.jsonl"),
            "--output", str(tmp_path / "o.jsonl"))
    assert r.returncode != 0 and "nope.jsonl" in r.stderr
