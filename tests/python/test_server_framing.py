"""Strict request framing (RFC 9112, issue #21 item 4): heads that httplib would read
leniently are refused with a 400 JSON error and the connection is closed; pipelined requests
each get their answer."""
import json
import socket

import pytest

from test_server import ServerProcess

BODY = b'{"prompt": "Hi", "max_tokens": 1}'
POST = b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
CL = b"Content-Length: " + str(len(BODY)).encode() + b"\r\n"


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProcess(binary).wait_ready()
    yield srv
    assert srv.stop() == 0


def exchange(port, raw):
    """Sends raw bytes and reads until the server closes (or 10 s pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except socket.timeout:
            pass
    return data


@pytest.mark.parametrize("raw", [
    pytest.param(POST + CL + b"Content-Length: 5\r\n\r\n" + BODY, id="two-content-lengths"),
    pytest.param(POST + CL + b"Transfer-Encoding: chunked\r\n\r\n21\r\n" + BODY + b"\r\n0\r\n\r\n",
                 id="content-length-and-transfer-encoding"),
    pytest.param(b"GET /health HTTP/1.1\r\n\r\n", id="no-host"),
    pytest.param(b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", id="two-hosts"),
    pytest.param(b"GET /health HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", id="obs-fold"),
    pytest.param(b"GET /health HTTP/1.1\r\nHost: a\r\nX A: b\r\n\r\n", id="space-in-name"),
    pytest.param(b"GET /health HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n", id="space-before-colon"),
    pytest.param(b"GET /health HTTP/1.1\r\nHost: a\r\n" + b"X-A: b\r\n" * 5000 + b"\r\n",
                 id="5000-headers"),
    pytest.param(b"GET /health HTTP/1.1\r\nHost: a\r\n" + (b"X-A: " + b"b" * 4000 + b"\r\n") * 100
                 + b"\r\n", id="400KB-head"),
])
def test_bad_framing_is_refused_and_closed(server, raw):
    data = exchange(server.port, raw + b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), data[:200]
    assert b"HTTP/1.1 200" not in data  # closed: the request behind it is not read
    assert json.loads(body)["error"]["code"] == 400


def test_same_content_length_twice_is_accepted(server):
    data = exchange(server.port, POST + CL + CL + b"Connection: close\r\n\r\n" + BODY)
    assert data.startswith(b"HTTP/1.1 200"), data[:200]


def test_pipelined_requests_each_get_an_answer(server):
    raw = (b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n" + POST + CL + b"\r\n" + BODY
           + b"GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert exchange(server.port, raw).count(b"HTTP/1.1 200") == 3
