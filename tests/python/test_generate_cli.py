"""Black-box tests of `vllm-cpp generate` on the real SmolLM2 model."""
import shutil

from conftest import ROOT, run


def test_answers_capital_of_france(binary):
    r = run(binary, "generate", "The capital of France is", "-n", "8")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("The capital of France is")
    assert "Paris" in r.stdout
    assert "tok/s" in r.stderr  # the timing line


def test_greedy_is_deterministic_and_threads_agree(binary, model):
    a = run(binary, "generate", "-m", model, "Once upon a time", "-n", "20", "-t", "1", "-q")
    b = run(binary, "generate", "-m", model, "Once upon a time", "-n", "20", "-t", "2", "-q")
    assert a.returncode == 0 and b.returncode == 0
    assert a.stdout == b.stdout
    assert a.stderr == ""


def test_seeded_sampling_reproducible(binary, model):
    args = ["generate", "-m", model, "My favourite food is", "-n", "24", "--temperature", "1.0",
            "--top-p", "0.95", "-q"]
    first = run(binary, *args, "--seed", "7")
    again = run(binary, *args, "--seed", "7")
    other = run(binary, *args, "--seed", "8")
    assert first.returncode == 0
    assert first.stdout == again.stdout
    assert first.stdout != other.stdout


def test_max_tokens_zero_prints_prompt_only(binary, model):
    r = run(binary, "generate", "-m", model, "Hello", "-n", "0", "-q")
    assert r.returncode == 0
    assert r.stdout.strip() == "Hello"


def test_missing_model_is_a_clear_error(binary, tmp_path):
    r = run(binary, "generate", "-m", str(tmp_path / "nope.gguf"), "hi")
    assert r.returncode != 0
    assert "nope.gguf" in r.stderr and "no such file" in r.stderr


def test_truncated_gguf_is_a_clear_error(binary, model, tmp_path):
    bad = tmp_path / "cut.gguf"
    with open(model, "rb") as f:
        bad.write_bytes(f.read(1 << 20))
    r = run(binary, "generate", "-m", str(bad), "hi")
    assert r.returncode != 0
    assert "cut.gguf" in r.stderr
    assert "Traceback" not in r.stderr and "terminate" not in r.stderr


def test_not_a_model_directory(binary, tmp_path):
    r = run(binary, "generate", "-m", str(tmp_path), "hi")
    assert r.returncode != 0
    assert "config.json" in r.stderr


def test_directory_without_tokenizer(binary, tmp_path):
    d = tmp_path / "tiny"
    shutil.copytree(ROOT / "fixtures" / "tiny" / "llama", d)
    r = run(binary, "generate", "-m", str(d), "hi")
    assert r.returncode != 0
    assert "tokenizer" in r.stderr


def test_bad_arguments(binary):
    for args in (["--temperature", "-1"], ["-n", "abc"], ["--top-p", "2"], ["--bogus"]):
        r = run(binary, "generate", "hi", *args)
        assert r.returncode != 0, args
        assert r.stderr, args
    r = run(binary, "generate")
    assert r.returncode != 0 and "prompt" in r.stderr


def test_prompt_longer_than_max_model_len(binary, model):
    r = run(binary, "generate", "-m", model, "word " * 300, "--max-model-len", "64")
    assert r.returncode != 0
    assert "max_model_len" in r.stderr
