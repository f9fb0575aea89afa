"""Connection floods (issue #21 item 3): stalled request heads do not starve other clients
and are cut off at the head deadline; a burst of connections is answered in full."""
import socket
import time

import pytest

from flood_probe import burst, health_latency, slow_headers
from test_server import ServerProcess


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProcess(binary).wait_ready()
    yield srv
    assert srv.stop() == 0


def test_slow_headers_do_not_starve_others(server):
    socks = slow_headers(server.port, 600)  # more than the old fixed pool of 288 threads
    try:
        latency = health_latency(server.port, timeout=10)
        assert latency is not None and latency < 2.0, latency
    finally:
        for s in socks:
            s.close()


def test_trickled_head_is_cut_off(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
    t0 = time.monotonic()
    closed_after = None
    while time.monotonic() - t0 < 25:
        try:
            s.sendall(b"X-Slow: 1\r\n")  # each line well inside the per-read timeout
        except OSError:
            closed_after = time.monotonic() - t0
            break
        s.settimeout(1.0)
        try:
            data = s.recv(4096)
        except socket.timeout:
            continue
        except OSError:
            data = b""
        closed_after = time.monotonic() - t0
        assert not data.startswith(b"HTTP/1.1 200")
        break
    s.close()
    assert closed_after is not None and closed_after < 15, closed_after


def test_connection_burst_is_answered(server):
    ok, other = burst(server.port, 1500, timeout=10)
    assert ok == 1500, (ok, other)
