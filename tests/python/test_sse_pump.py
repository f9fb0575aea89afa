"""Many concurrent server-sent-event streams without a thread each (issue #21 item 3): the
stream pump writes every stream once its head is out, so the server's thread count stays flat
while hundreds of streams are open; streams still carry the same text as a non-streaming run,
clients that leave abort their requests, and keep-alive connections stream again."""
import asyncio
import json
import time

import pytest
import requests

from test_server import MODEL_NAME, ServerProcess, wait_for

STREAMS = 300
# An idle server has a few threads (5 here after a health check: main, listener, engine,
# stream pump, the pool thread that answered); opening streams adds a pool thread per connection being opened at once (at most
# OPENING, below; they idle a minute before leaving). 64 leaves room for more engine workers
# on a larger machine, while a thread per stream would be over STREAMS.
THREAD_LIMIT = 64
OPENING = 16


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProcess(binary, "--max-num-seqs", "512", "--seed", "0").wait_ready()
    yield srv
    assert srv.stop() == 0


def threads(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads: line")


def request_bytes(body, path="/v1/completions", close=False):
    data = json.dumps(body).encode()
    extra = "Connection: close\r\n" if close else ""
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"{extra}Content-Length: {len(data)}\r\n\r\n").encode() + data


class Stream:
    """One streaming response read from an asyncio connection: head, then chunked SSE."""

    def __init__(self, reader):
        self.reader = reader
        self.head = b""
        self.events = []
        self.done = False

    async def read_head(self):
        self.head = await self.reader.readuntil(b"\r\n\r\n")
        if not self.head.startswith(b"HTTP/1.1 200"):
            raise AssertionError(self.head + await self.reader.read(1000))
        assert b"Transfer-Encoding: chunked" in self.head, self.head

    async def read_chunk(self):
        """Reads one chunk; its SSE events are kept. False after the terminating chunk."""
        size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
        payload = await self.reader.readexactly(size + 2)
        assert payload.endswith(b"\r\n")
        if size == 0:
            self.done = True
            return False
        for frame in payload[:-2].decode().split("\n\n"):
            if frame.startswith("data: "):
                self.events.append(frame[len("data: "):])
        return True

    async def read_all(self):
        while await self.read_chunk():
            pass
        assert self.events[-1] == "[DONE]"

    def text(self):
        return "".join(json.loads(e)["choices"][0]["text"] for e in self.events[:-1])


async def open_stream(port, body, gate):
    async with gate:  # at most OPENING connections between connect and response head
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes({**body, "stream": True}))
        stream = Stream(reader)
        await stream.read_head()
        await stream.read_chunk()  # generating
    return stream, writer


async def open_streams(port, bodies):
    gate = asyncio.Semaphore(OPENING)
    return await asyncio.gather(*(open_stream(port, b, gate) for b in bodies))


def close_all(opened):
    """Closes the connections (a failed assertion must not leave hundreds generating)."""
    for _, writer in opened:
        writer.close()


def test_open_streams_hold_no_thread_and_closing_aborts_them(server):
    async def run():
        body = {"model": MODEL_NAME, "prompt": "Tell me a story", "max_tokens": 2000,
                "ignore_eos": True}
        opened = await open_streams(server.port, [body] * STREAMS)
        count = threads(server.proc.pid)
        print(f"\n{STREAMS} open streams: {count} server threads")
        if count >= THREAD_LIMIT:
            close_all(opened)
            raise AssertionError(f"{count} threads for {STREAMS} streams")
        # The first half leaves; the second half still streams.
        for _, writer in opened[:STREAMS // 2]:
            writer.close()
        for stream, _ in opened[STREAMS // 2:]:
            assert await asyncio.wait_for(stream.read_chunk(), 30)
        for _, writer in opened[STREAMS // 2:]:
            writer.close()
        t0 = time.monotonic()
        gone = await asyncio.to_thread(wait_for, lambda: (
            server.metrics()["vllm:num_requests_running"] == 0 and
            server.metrics()["vllm:num_requests_waiting"] == 0), 10)
        print(f"all {STREAMS} aborted {time.monotonic() - t0:.2f} s after the last close")
        assert gone, server.metrics()
    asyncio.run(run())


def test_concurrent_streams_carry_the_non_streaming_text(server):
    prompts = ["Once upon a time", "The capital of France is", "def fib(n):",
               "Water boils at", "My favourite colour"]
    common = {"model": MODEL_NAME, "max_tokens": 16, "temperature": 0}
    expected = {}
    for p in prompts:
        r = requests.post(server.url + "/v1/completions", json={**common, "prompt": p}, timeout=60)
        assert r.status_code == 200, r.text
        expected[p] = r.json()["choices"][0]["text"]

    async def run():
        bodies = [{**common, "prompt": prompts[i % len(prompts)]} for i in range(STREAMS)]
        t0 = time.monotonic()
        opened = await open_streams(server.port, bodies)
        count = threads(server.proc.pid)
        try:
            await asyncio.gather(*(s.read_all() for s, _ in opened))
        finally:
            close_all(opened)
        print(f"\n{STREAMS} streams of 16 tokens: {time.monotonic() - t0:.2f} s, "
              f"{count} server threads")
        for (stream, _), body in zip(opened, bodies):
            assert stream.text() == expected[body["prompt"]], body["prompt"]
        assert count < THREAD_LIMIT, count
    asyncio.run(run())


def test_keep_alive_connection_streams_again(server):
    async def run():
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        body = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 8, "stream": True}
        texts = []
        for _ in range(2):
            writer.write(request_bytes(body))
            stream = Stream(reader)
            await stream.read_head()
            assert b"Connection: close" not in stream.head
            await stream.read_all()
            texts.append(stream.text())
        # Pipelined: two streams and a plain request written at once, answered in order on
        # the same connection (the bytes read ahead go along with the connection).
        writer.write(request_bytes(body) + request_bytes(body) +
                     request_bytes({**body, "stream": False}, close=True))
        for _ in range(2):
            stream = Stream(reader)
            await stream.read_head()
            await stream.read_all()
            texts.append(stream.text())
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" in head, head
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        assert json.loads(await reader.readexactly(length))["object"] == "text_completion"
        assert await reader.read() == b""  # closed as the last response said
        writer.close()
        assert all(t for t in texts), texts
    asyncio.run(asyncio.wait_for(run(), 60))


def test_connection_close_stream_closes_after_it(server):
    async def run():
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        body = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 4, "stream": True}
        writer.write(request_bytes(body, close=True))
        stream = Stream(reader)
        await stream.read_head()
        assert b"Connection: close" in stream.head
        await stream.read_all()
        assert await reader.read() == b""
        writer.close()
    asyncio.run(asyncio.wait_for(run(), 60))
