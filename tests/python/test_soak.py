"""A short soak (issue #21 item 7): tools/soak.py with 16 clients for 15 s against a fresh
server, 30% of the streams hanging up and 30% of the non-streaming requests abandoned: no
errors, gauges back to 0 within a second of the last client, every KV block returned, no
generation once the clients are gone, bounded RSS drift. The long runs are in
docs/reliability.md."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from test_server import ServerProcess

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Set by scripts/test.sh's ThreadSanitizer stage: the server is TSan-built, and a race stops
# it (its exit status fails the fixture). TSan's slowdown and shadow memory would make the
# settle time and the RSS drift measure TSan, so those two checks are left out there.
UNDER_TSAN = os.environ.get("VLLM_CPP_SANITIZER") == "thread"


@pytest.fixture(scope="module")
def server(binary):
    # The CPU KV pool is left untouched until used, and the block pool hands out every block
    # once before reusing any, so RSS grows as a fresh pool is first written: with the suite's
    # 512 MiB pool a 15 s soak never gets through it and that first touch reads as drift. A
    # 64 MiB pool (2,896 tokens, the last --kv-cache-memory wins) is mostly cycled through
    # in the warm-up, so the drift left is what the run itself keeps.
    srv = ServerProcess(binary, "--kv-cache-memory", "64MiB").wait_ready()
    yield srv
    assert srv.stop() == 0


def test_short_soak(server, tmp_path):
    out = tmp_path / "soak.json"
    # Under TSan every step is many times slower: a longer run of shorter answers.
    run = (["--settle", "30", "--duration", "40", "--max-tokens", "16"] if UNDER_TSAN
           else ["--pid", str(server.proc.pid), "--duration", "15"])
    r = subprocess.run([sys.executable, str(ROOT / "tools/soak.py"), "--port", str(server.port),
                        *run, "--clients", "16", "--warmup", "5",
                        "--disconnect", "0.3", "--abandon", "0.3", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr + "\n" + server.output()[-3000:]
    summary = json.loads(out.read_text())
    assert summary["requests"]["completed"] > 0
    assert summary["requests"]["stream_disconnected"] + summary["requests"]["abandoned"] > 0
    assert all(summary["checks"].values())
