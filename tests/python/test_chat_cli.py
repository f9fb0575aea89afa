"""`vllm-cpp chat` driven through a pseudo-terminal (pexpect), against a running server and with
the model loaded in-process. The oracle for every reply is the server's own chat completions
answer at temperature 0 through the official openai SDK; the history a turn carried is checked
through the server's prompt token counter against /tokenize of the expected conversation."""
import subprocess
import time

import openai
import pexpect
import pytest
import requests

from test_server import MODEL_NAME, ServerProcess, free_port, wait_for

MAX_TOKENS = 32
Q1 = "What is the capital of France?"
Q2 = "And what about Germany?"


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProcess(binary).wait_ready()
    yield srv
    assert srv.stop() == 0


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def api_reply(server, messages):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    out = client.chat.completions.create(model=MODEL_NAME, messages=messages, temperature=0,
                                         max_tokens=MAX_TOKENS)
    return out.choices[0].message.content


def prompt_tokens(server, messages):
    r = requests.post(server.url + "/tokenize", timeout=30,
                      json={"model": MODEL_NAME, "messages": messages, "add_generation_prompt": True})
    assert r.status_code == 200, r.text
    return r.json()["count"]


def spawn(binary, *args):
    child = pexpect.spawn(binary, ["chat", *args], encoding="utf-8", timeout=120, echo=False,
                          dimensions=(40, 300))
    child.expect("Using model: ")
    child.expect("\r\n> ")
    return child


def ask(child, text):
    """Sends one line; returns what was printed before the next prompt (the reply)."""
    child.sendline(text)
    child.expect("\r\n> ")
    return child.before.replace("\r\n", "\n")


def end(child):
    child.sendeof()
    child.expect(pexpect.EOF, timeout=30)
    child.close()
    return child.exitstatus


def test_remote_chat_history_and_clear(binary, server):
    child = spawn(binary, "--url", server.url + "/v1", "--temperature", "0",
                  "--max-tokens", str(MAX_TOKENS))
    a1 = ask(child, Q1)
    assert a1 == api_reply(server, [user(Q1)])
    # The second turn carries the first: the server saw exactly the whole conversation.
    before = server.metrics()["vllm:prompt_tokens_total"]
    a2 = ask(child, Q2)
    history = [user(Q1), assistant(a1), user(Q2)]
    assert server.metrics()["vllm:prompt_tokens_total"] - before == prompt_tokens(server, history)
    assert a2 == api_reply(server, history)
    # /clear: the next turn is alone again.
    child.sendline("/clear")
    child.expect("conversation cleared")
    child.expect("\r\n> ")
    before = server.metrics()["vllm:prompt_tokens_total"]
    a3 = ask(child, Q2)
    assert server.metrics()["vllm:prompt_tokens_total"] - before == prompt_tokens(server, [user(Q2)])
    assert a3 == api_reply(server, [user(Q2)])
    assert end(child) == 0


def test_ctrl_c_stops_a_streamed_reply_not_the_chat(binary, server):
    child = spawn(binary, "--url", server.url + "/v1", "--temperature", "0", "--ignore-eos",
                  "--max-tokens", "1500")
    child.sendline("Tell me a long story.")
    # Text arrives while the request is still running: the reply is streamed.
    seen = ""
    while len(seen) < 40:
        seen += child.read_nonblocking(4096, timeout=60)
    assert server.metrics()["vllm:num_requests_running"] == 1
    child.sendintr()
    child.expect(r"\[stopped\]\r\n> ", timeout=15)
    assert wait_for(lambda: server.metrics()["vllm:num_requests_running"] == 0, 5)
    assert child.isalive()
    assert end(child) == 0


def test_system_prompt_and_quick(binary, server):
    system = "You are a pirate. Answer like one."
    r = subprocess.run([binary, "chat", "--url", server.url + "/v1", "--system-prompt", system,
                        "--temperature", "0", "--max-tokens", str(MAX_TOKENS), "-q", Q1],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    reply = api_reply(server, [{"role": "system", "content": system}, user(Q1)])
    assert r.stdout == f"Using model: {MODEL_NAME}\n{reply}\n"


def test_in_process_chat_matches_the_server(binary, model, server):
    with_history = [user(Q1), assistant(api_reply(server, [user(Q1)])), user(Q2)]
    # The check below only shows the history when the history changes the answer.
    assert api_reply(server, with_history) != api_reply(server, [user(Q2)])
    child = spawn(binary, "-m", model, "--temperature", "0", "--max-tokens", str(MAX_TOKENS))
    assert ask(child, Q1) == with_history[1]["content"]
    assert ask(child, Q2) == api_reply(server, with_history)
    child.sendline("/clear")
    child.expect("conversation cleared")
    child.expect("\r\n> ")
    assert ask(child, Q2) == api_reply(server, [user(Q2)])
    assert end(child) == 0


def test_in_process_ctrl_c_and_exit(binary, model):
    child = spawn(binary, "-m", model, "--ignore-eos", "--max-tokens", "2000")
    child.sendline("Tell me a long story.")
    seen = ""
    while len(seen) < 40:
        seen += child.read_nonblocking(4096, timeout=60)
    t0 = time.monotonic()
    child.sendintr()
    child.expect(r"\[stopped\]\r\n> ", timeout=15)
    assert time.monotonic() - t0 < 5
    child.sendline("/exit")
    child.expect(pexpect.EOF, timeout=30)
    child.close()
    assert child.exitstatus == 0


def test_errors_are_clear_and_fail(binary):
    port = free_port()  # nothing listens there
    r = subprocess.run([binary, "chat", "--url", f"http://127.0.0.1:{port}/v1", "-q", "hi"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "cannot reach the server" in r.stderr, r.stderr
    r = subprocess.run([binary, "chat", "-m", "/nonexistent/model.gguf", "-q", "hi"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert r.stderr.startswith("error: ") and "/nonexistent/model.gguf" in r.stderr, r.stderr


def test_wrong_api_key_is_reported(binary):
    srv = ServerProcess(binary, "--api-key", "sesame").wait_ready()
    try:
        r = subprocess.run([binary, "chat", "--url", srv.url + "/v1", "--api-key", "wrong",
                            "-q", "hi"], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "401" in r.stderr, r.stderr
        r = subprocess.run([binary, "chat", "--url", srv.url + "/v1", "--api-key", "sesame",
                            "--max-tokens", "4", "-q", "hi"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
    finally:
        assert srv.stop() == 0
