"""Clients that go away: a non-streaming request whose client closes its connection is
aborted within an engine step or so, as streaming ones are (issue #21 item 2)."""
import json
import socket
import time

import pytest

from test_server import ServerProcess, wait_for


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProcess(binary).wait_ready()
    yield srv
    assert srv.stop() == 0


def post_raw(port, path, body):
    """Sends a request on a raw socket and returns the socket without reading the answer."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"prompt": "Once upon a time"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell a story"}]}),
])
def test_non_streaming_requests_stop_when_their_client_leaves(server, path, body):
    clients = 4
    body = {**body, "max_tokens": 1500, "ignore_eos": True}
    socks = [post_raw(server.port, path, body) for _ in range(clients)]
    # All running and generating (1500 tokens each take far longer than this test waits).
    assert wait_for(lambda: server.metrics()["vllm:num_requests_running"] == clients, 30)
    start = server.metrics()["vllm:generation_tokens_total"]
    assert wait_for(lambda: server.metrics()["vllm:generation_tokens_total"] > start + clients, 30)
    for s in socks:
        s.close()
    t0 = time.monotonic()
    assert wait_for(lambda: server.metrics()["vllm:num_requests_running"] == 0, 5), \
        "abandoned requests still running"
    stopped = time.monotonic() - t0
    after = server.metrics()["vllm:generation_tokens_total"]
    time.sleep(1.5)
    assert server.metrics()["vllm:generation_tokens_total"] - after <= clients
    assert stopped < 3, f"took {stopped:.2f} s"
    # The server serves on.
    s = post_raw(server.port, "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    s.settimeout(30)
    assert s.recv(64).startswith(b"HTTP/1.1 200")
    s.close()
