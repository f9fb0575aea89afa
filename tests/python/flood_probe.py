"""Connection-flood probes for `vllm-cpp serve` (used by test_server_flood.py; also a tool):

    python tests/python/flood_probe.py PORT [SLOW] [BURST]

opens SLOW connections that send half a request head and stall, times a normal GET /health
beside them, then opens BURST connections at once, each sending GET /health, and counts the
answers that arrive within 10 s."""
import selectors
import socket
import sys
import time

HEALTH = b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"


def slow_headers(port, n):
    """n connections stalled in the middle of their request head."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        socks.append(s)
    return socks


def health_latency(port, timeout=30.0):
    """Seconds until GET /health is answered with 200 (None: no answer within timeout)."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(HEALTH)
            data = s.recv(64)
    except OSError:
        return None
    return time.monotonic() - t0 if data.startswith(b"HTTP/1.1 200") else None


def burst(port, n, timeout=10.0):
    """Opens n connections at once, each sending GET /health; (200s, other answers) within
    timeout seconds of the start."""
    sel = selectors.DefaultSelector()
    t0 = time.monotonic()
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_WRITE, b"")
    ok = other = 0
    while sel.get_map() and time.monotonic() - t0 < timeout:
        for key, events in sel.select(timeout=0.1):
            s = key.fileobj
            if events & selectors.EVENT_WRITE:
                try:
                    s.send(HEALTH)
                except OSError:
                    pass  # not connected after all: the read below sees it
                sel.modify(s, selectors.EVENT_READ, b"")
                continue
            try:
                data = s.recv(64)
            except OSError:
                data = b""
            if data.startswith(b"HTTP/1.1 200"):
                ok += 1
            elif data:
                other += 1
            sel.unregister(s)
            s.close()
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    return ok, other


if __name__ == "__main__":
    port = int(sys.argv[1])
    slow = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    t0 = time.monotonic()
    socks = slow_headers(port, slow)
    print(f"{slow} slow-header connections opened in {time.monotonic() - t0:.2f} s")
    print(f"GET /health beside them: {health_latency(port)} s")
    for s in socks:
        s.close()
    time.sleep(1)
    ok, other = burst(port, count)
    print(f"{count} simultaneous connections: {ok} answered 200, {other} other answers, "
          f"{count - ok - other} unanswered within 10 s")
