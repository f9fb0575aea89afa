import importlib.util
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_template_tool():
    """tools/make_chat_template_fixtures.py as a module: its compile_template renders a chat
    template as transformers does (jinja2, HF's environment), the reference for prompts."""
    spec = importlib.util.spec_from_file_location(
        "make_chat_template_fixtures", ROOT / "tools" / "make_chat_template_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def binary():
    path = os.environ.get("VLLM_CPP_BIN", str(ROOT / "build" / "vllm-cpp"))
    if not os.path.exists(path):
        pytest.fail(f"{path} not built (run scripts/setup.sh)")
    return path


@pytest.fixture(scope="session")
def model():
    if not MODEL.exists():
        pytest.fail(f"{MODEL} missing (run scripts/setup.sh)")
    return str(MODEL)


def run(binary, *args, timeout=120):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)
