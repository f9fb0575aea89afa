"""Start-up and shutdown of `vllm-cpp serve`: start-up log, flag checks, a taken port, and
SIGTERM/SIGINT draining (in-flight streams finish, new work gets 503, exit status 0; past
the drain timeout the rest is aborted)."""
import json
import signal
import subprocess
import threading
import time

import requests

from test_server import ServerProcess, free_port


def stream_completion(url, body, out):
    """Collects the SSE payloads of one streaming completion into `out`."""
    with requests.post(url + "/v1/completions", json={**body, "stream": True}, stream=True,
                       timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith(b"data: "):
                out.append(line[6:].decode())


def test_startup_log_names_kv_capacity(binary):
    srv = ServerProcess(binary, "--gpu-memory-utilization", "0.9").wait_ready()
    try:
        log = srv.output()
        assert "KV cache size:" in log and "maximum concurrency" in log
        assert "--gpu-memory-utilization does not apply on CPU" in log
        assert f"http://127.0.0.1:{srv.port}" in log
    finally:
        assert srv.stop() == 0


def test_unsupported_flags_are_clear_errors(binary):
    for args, needle in [(["--dtype", "float16"], "--dtype"), (["--dtype", "int8"], "--dtype"),
                         (["--tensor-parallel-size", "2"], "--tensor-parallel-size"),
                         (["--log-level", "loud"], "--log-level"),
                         (["--chat-template", "/no/such/file"], "--chat-template"),
                         (["/no/such/model.gguf"], "/no/such/model.gguf")]:
        r = subprocess.run([binary, "serve", "--port", str(free_port()), *args],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0, args
        assert needle in r.stderr, (args, r.stderr)


def test_port_already_taken(binary):
    first = ServerProcess(binary).wait_ready()
    try:
        r = subprocess.run([binary, "serve", "--port", str(first.port)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0
        assert "address already in use" in r.stderr
        assert requests.get(first.url + "/health", timeout=5).status_code == 200
    finally:
        assert first.stop() == 0


def test_sigterm_drains_in_flight_streams(binary):
    srv = ServerProcess(binary, "--drain-timeout", "30").wait_ready()
    events = []
    t = threading.Thread(target=stream_completion, args=(
        srv.url, {"prompt": "Once upon a time", "max_tokens": 48, "ignore_eos": True}, events))
    t.start()
    while not events:
        time.sleep(0.01)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    try:
        r = requests.post(srv.url + "/v1/completions", json={"prompt": "x"}, timeout=10)
        assert r.status_code == 503 and r.json()["error"]["code"] == 503
        assert requests.get(srv.url + "/health", timeout=5).status_code == 503
    except requests.ConnectionError:
        pass  # already stopped listening: also a refusal
    t.join(60)
    assert events[-1] == "[DONE]"
    finals = [json.loads(e)["choices"][0]["finish_reason"] for e in events[:-1]]
    assert finals[-1] == "length"
    assert srv.proc.wait(30) == 0
    assert "Shutdown complete" in srv.output()
    srv.stop()


def test_drain_timeout_aborts_and_sigint_exits_zero(binary):
    srv = ServerProcess(binary, "--drain-timeout", "1").wait_ready()
    events = []
    t = threading.Thread(target=stream_completion, args=(
        srv.url, {"prompt": "Once upon a time", "max_tokens": 1900, "ignore_eos": True}, events))
    t.start()
    while not events:
        time.sleep(0.01)
    start = time.time()
    srv.proc.send_signal(signal.SIGINT)
    t.join(30)
    assert srv.proc.wait(30) == 0
    assert time.time() - start < 10
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "abort"
    srv.stop()
