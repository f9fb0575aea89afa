"""The HTTP layer's limits as flags (issue #21 item 3): --max-connections, --request-head-timeout
and --write-timeout, each set small on one server and seen to act: the connection past the cap
gets a 503 and the rest of the server still answers, a client trickling header lines is cut
off at the head deadline, and a streaming client that stops reading is dropped by the stream
pump with its generation aborted."""
import json
import socket
import time

import pytest
import requests

from test_server import ServerProcess, wait_for

MAX_CONNECTIONS = 6
HEAD_TIMEOUT = 2
WRITE_TIMEOUT = 1


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProcess(binary, "--seed", "0", "--max-connections", str(MAX_CONNECTIONS),
                        "--request-head-timeout", str(HEAD_TIMEOUT),
                        "--write-timeout", str(WRITE_TIMEOUT)).wait_ready()
    yield srv
    assert srv.stop() == 0


def open_partial(server):
    """A connection that has sent the start of a request head and nothing more."""
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"GET /health HTTP/1.1\r\n")
    return s


def test_connections_past_the_cap_get_503(server):
    held = [open_partial(server) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.3)  # every one accepted and counted
        with socket.create_connection(("127.0.0.1", server.port)) as extra:
            extra.settimeout(5)
            extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while chunk := extra.recv(4096):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503"), answer
        assert json.loads(body)["error"]["message"] == "too many connections"
    finally:
        for s in held:
            s.close()
    # The held connections are gone: the server answers again.
    assert wait_for(lambda: requests.get(server.url + "/health", timeout=5).status_code == 200, 5)


def test_trickled_head_is_cut_at_the_deadline(server):
    s = open_partial(server)
    s.settimeout(0.2)
    start = time.monotonic()
    closed_after = None
    try:
        while time.monotonic() - start < HEAD_TIMEOUT + 8:
            try:
                s.sendall(b"X-Trickle: 1\r\n")  # a header line every 0.4 s, never the end
            except OSError:
                closed_after = time.monotonic() - start
                break
            try:
                data = s.recv(4096)
                if data == b"" or data:  # closed, or an answer (the server gives up on it)
                    closed_after = time.monotonic() - start
                    break
            except socket.timeout:
                pass
            time.sleep(0.2)
    finally:
        s.close()
    assert closed_after is not None, "the trickling connection was never cut off"
    # The default deadline is 10 s: cut near the 2 s set here, not before it.
    assert HEAD_TIMEOUT - 0.5 <= closed_after <= HEAD_TIMEOUT + 3, closed_after


def test_stream_not_read_is_dropped_and_aborted(server):
    max_tokens = 1900
    before = server.metrics()["vllm:generation_tokens_total"]
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True, "logprobs": 20, "temperature": 0}).encode()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # a small window fills fast
    s.connect(("127.0.0.1", server.port))
    start = time.monotonic()
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        # Never read: the server's writes stall once the buffers are full.
        assert wait_for(lambda: server.metrics()["vllm:num_requests_running"] == 1, 10)
        assert wait_for(lambda: server.metrics()["vllm:num_requests_running"] == 0, 30), \
            "the unread stream was never dropped"
        took = time.monotonic() - start
    finally:
        s.close()
    generated = server.metrics()["vllm:generation_tokens_total"] - before
    # Aborted, not finished: fewer tokens than asked for.
    assert generated < max_tokens, (generated, took)
    # The server goes on serving.
    assert requests.get(server.url + "/health", timeout=5).status_code == 200
