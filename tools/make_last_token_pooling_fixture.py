#!/usr/bin/env python3
"""Reference last-token pooled vectors of a GGUF decoder from llama.cpp (llama-cpp-python):
the final-norm hidden state of each text's last token, as vLLM's `--runner pooling` pools a
generative checkpoint. Vectors are stored as llama.cpp returned them (not normalised), so a
test can check both `normalize: true` (L2 of these) and `normalize: false`.

    .venv/bin/python tools/make_last_token_pooling_fixture.py \
        models/SmolLM2-135M-Instruct.Q4_1.gguf fixtures/embeddings smollm2_last.json

Each text is embedded alone (one sequence per decode), so no vector depends on its batch.
The ids are what llama.cpp's embed() fed the model: llm.tokenize(text) with its defaults
(BOS where the file's tokenizer.ggml.add_bos_token asks for it, special tokens as text).
"""
import base64
import hashlib
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

N_CTX = 1024

LONG = (
    "The history of computing is a story of abstraction. Early machines were programmed by "
    "rewiring plugboards; later, stored programs let the same hardware run any algorithm its "
    "memory could hold. Assemblers gave names to instructions, compilers turned formulas into "
    "machine code, and operating systems hid the details of disks, terminals and memory behind "
    "files and processes. Each layer made the one below it invisible to most programmers, and "
    "each brought its own costs in speed and predictability. Today a single request to a web "
    "service may pass through a browser, a network stack, a load balancer, a container runtime, "
    "an interpreter and a database, every one of them built on the abstractions before it. "
)

TEXTS = [
    "Hello, world!",
    "The capital of France is Paris.",
    "A quick brown fox jumps over the lazy dog.",
    "What is the tallest mountain in the world?",
    "Embeddings map text to vectors.",
    "def add(a, b):\n    return a + b\n",
    "  leading and trailing spaces  ",
    "1234567890 + 987654321 = ?",
    "x",
    "The weather today is sunny with a light breeze from the west.",
    "Machine learning models are trained on large datasets.",
    "<|im_start|>user\nHi there<|im_end|>",
    "Café au lait, naïve façade, jalapeño, Zürich.",
    "Привет, как дела? Это тест на русском языке.",
    "東京は日本の首都です。",
    "我喜欢在周末读书和散步。",
    "Emoji test: 🚀🔥👍 and a smiley 😊.",
    "Ελληνικά: γειά σου κόσμε",
    "مرحبا بالعالم",
    "Mixed: naïve résumé — “quotes” and ‘apostrophes’ … done.",
    LONG,
    LONG * 3,
    "Tabs\tand\nnewlines\n\nin\ttext.",
    "SELECT name, age FROM users WHERE age > 30 ORDER BY name;",
]


def b64(v):
    return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()


def main(model_path, out_dir, name):
    llm = Llama(model_path=model_path, embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_LAST,
                n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=2, verbose=False, seed=0)
    cases = []
    for text in TEXTS:
        ids = llm.tokenize(text.encode("utf-8"))  # what embed() tokenizes: its defaults
        assert len(ids) <= N_CTX, (len(ids), text[:40])
        vec = np.asarray(llm.embed(text, normalize=False), dtype=np.float32)
        assert vec.ndim == 1 and vec.size == llm.n_embd(), vec.shape
        cases.append({"text": text, "ids": [int(i) for i in ids], "embedding": b64(vec)})
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    with open(path, "w") as f:
        json.dump({"cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    print(f"{path}: {len(cases)} vectors of {llm.n_embd()}, sha256 {digest}")
    print("add_bos_token:", llm.metadata.get("tokenizer.ggml.add_bos_token"),
          "lengths:", [len(c["ids"]) for c in cases])


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
