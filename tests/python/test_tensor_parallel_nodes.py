"""Tensor parallel across processes on the CPU, black-box: `vllm-cpp serve` started three times
with --nnodes 3 and each --node-rank (torchrun's flags), SmolLM2 split over 3 ranks, one per
process, meeting over TCP on 127.0.0.1. Node 0 serves; the others run its steps. The socket
collectives add in the thread collectives' order, so the answers are those of the same split
inside one process, bit for bit. A node that dies ends the server with an error naming it (not
a hang); a node whose flags differ is refused at start-up, naming the flag."""
import concurrent.futures
import json
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import requests

from test_server import MODEL_NAME, ServerProcess, free_port
from test_tensor_parallel_serve import PROMPTS, greedy

COMMON = ["--max-model-len", "2048", "--kv-cache-memory", "512MiB", "--seed", "0",
          "--tensor-parallel-size", "3", "--nnodes", "3"]


class Node:
    """A node other than 0: `serve` with its --node-rank (its --port is never opened)."""

    def __init__(self, binary, model, rank, port, *extra):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self.proc = subprocess.Popen(
            [binary, "serve", model, "--port", str(free_port()), *COMMON, "--node-rank", str(rank),
             "--master-port", str(port), *extra], stdout=self.log, stderr=subprocess.STDOUT)

    def output(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def wait(self, timeout=60):
        return self.proc.wait(timeout)


def start_group(binary, model):
    port = free_port()
    nodes = [Node(binary, model, k, port) for k in (1, 2)]
    head = ServerProcess(binary, model, *COMMON[4:], "--node-rank", "0", "--master-port",
                         str(port)).wait_ready()
    return head, nodes


def test_three_processes_answer_as_one_process_split_three_ways(binary, model):
    one = ServerProcess(binary, model, "--seed", "0", "--tensor-parallel-size", "3").wait_ready()
    want = [greedy(one.url, p) for p in PROMPTS]
    assert one.stop() == 0
    head, nodes = start_group(binary, model)
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        got = list(pool.map(lambda p: greedy(head.url, p), PROMPTS))
    # Logprobs to the last bit too: the same token ids and the same top-5 sets per step.
    body = {"model": MODEL_NAME, "prompt": PROMPTS[0], "max_tokens": 8, "temperature": 0,
            "logprobs": 5}
    exact = requests.post(head.url + "/v1/completions", json=body, timeout=120).json()
    assert head.stop() == 0
    for n in nodes:
        assert n.wait() == 0, n.output()
        assert "joined the tensor-parallel group" in n.output()
    assert got == want
    one = ServerProcess(binary, model, "--seed", "0", "--tensor-parallel-size", "3").wait_ready()
    ref = requests.post(one.url + "/v1/completions", json=body, timeout=120).json()
    assert one.stop() == 0
    assert exact["choices"][0]["logprobs"] == ref["choices"][0]["logprobs"]


def test_a_node_that_dies_ends_the_server_naming_it(binary, model):
    head, nodes = start_group(binary, model)
    body = {"model": MODEL_NAME, "prompt": "Count to a thousand:", "max_tokens": 1500,
            "temperature": 0, "ignore_eos": True}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        reply = pool.submit(requests.post, head.url + "/v1/completions", json=body, timeout=120)
        time.sleep(1.0)
        nodes[1].proc.kill()  # node 2, mid-generation
        r = reply.result()
    assert r.status_code == 500, r.text
    assert "node 2 (rank 2)" in r.json()["error"]["message"], r.text
    assert head.proc.wait(60) == 1
    assert "the engine failed, shutting down" in head.output()
    assert "node 2 (rank 2)" in head.output()
    assert nodes[0].wait() == 1, nodes[0].output()
    nodes[1].wait()


def test_sigterm_ends_a_node_and_node_0_fails_naming_it(binary, model):
    head, nodes = start_group(binary, model)
    nodes[0].proc.send_signal(signal.SIGTERM)
    assert nodes[0].wait(10) == -signal.SIGTERM
    # Node 0 shuts down without waiting for a request to find the group broken.
    assert head.proc.wait(30) == 1
    assert "shutting down: tensor-parallel node 1 (rank 1) is gone" in head.output()
    assert nodes[1].wait(60) == 1, nodes[1].output()


def test_a_node_with_other_flags_is_refused_naming_the_flag(binary, model):
    port = free_port()
    node = Node(binary, model, 1, port, "--kv-cache-dtype", "fp8")
    head = subprocess.run([binary, "serve", model, "--port", str(free_port()), *COMMON,
                           "--node-rank", "0", "--master-port", str(port)],
                          capture_output=True, text=True, timeout=120)
    assert head.returncode == 1
    assert "--kv-cache-dtype differs: node 1 has fp8, node 0 has auto" in head.stderr, head.stderr
    assert node.wait() == 1
    assert "refused this node: --kv-cache-dtype differs" in node.output(), node.output()


def test_a_size_that_does_not_split_over_the_nodes_is_an_error(binary, model):
    r = subprocess.run([binary, "serve", model, "--port", str(free_port()),
                        "--tensor-parallel-size", "3", "--nnodes", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "--tensor-parallel-size 3 does not split evenly over --nnodes 2" in r.stderr, r.stderr


def test_two_nodes_of_two_ranks_give_one_process_batch_output(binary, tmp_path):
    """`generate --input/--output` over two processes holding two ranks each (node 0's second
    rank reaches rank 0 over a socket too), on the tiny Llama fixture (4 heads, 2 KV heads, so
    KV heads are replicated): greedy with logprobs, prompt_logprobs and a seeded sample give the
    output file of the same split inside one process, byte for byte."""
    model = str(Path(__file__).resolve().parents[2] / "fixtures" / "tiny" / "llama")
    lines = [{"prompt": list(range(1 + i, 30 + 5 * i)), "max_tokens": 24, "temperature": 0,
              "logprobs": 3} for i in range(6)]
    lines.append({"prompt": [5, 6, 7, 8], "max_tokens": 24, "temperature": 0.9, "seed": 11,
                  "prompt_logprobs": 2})
    prompts = tmp_path / "in.jsonl"
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    common = [binary, "generate", "-m", model, "--input", str(prompts), "--kv-cache-memory",
              "64MiB", "--tensor-parallel-size", "4"]
    one = subprocess.run([*common, "--output", str(tmp_path / "one.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    port = str(free_port())
    node1 = subprocess.Popen([*common, "--output", str(tmp_path / "unused.jsonl"), "--nnodes", "2",
                              "--node-rank", "1", "--master-port", port],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    head = subprocess.run([*common, "--output", str(tmp_path / "two.jsonl"), "--nnodes", "2",
                           "--node-rank", "0", "--master-port", port],
                          capture_output=True, text=True, timeout=120)
    assert head.returncode == 0, head.stderr
    assert node1.wait(60) == 0, node1.stderr.read()
    assert "node 1 (ranks 2-3): joined" in node1.stderr.read()
    assert not (tmp_path / "unused.jsonl").exists()  # only node 0 writes --output
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
