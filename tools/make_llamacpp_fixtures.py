#!/usr/bin/env python3
"""Reference greedy continuations of a GGUF model from llama.cpp (llama-cpp-python), with
llama.cpp's own top-2 logit gap at every step for the near-tie rule, and its TOP_LOGITS largest
logits at every step (ids and float32 values, exactly as llama.cpp produced them) for the
bit-exact comparison. The prompt ids are llama.cpp's tokenization (with BOS where the file
asks for it).

    .venv/bin/pip install llama-cpp-python==0.3.36   # builds llama.cpp from source
    .venv/bin/python tools/make_llamacpp_fixtures.py models/SmolLM2-135M-Instruct.Q4_1.gguf \
        fixtures/smollm2 smollm2
    .venv/bin/python tools/make_llamacpp_fixtures.py models/gemma-3-270m-q4_k_m.gguf \
        fixtures/gemma3 gemma3
"""
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

NEW_TOKENS = 64
TOP_LOGITS = 5
# Plain prompts and chat-formatted ones (the model's own template, rendered by hand).
SMOLLM2_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The three primary colors are",
    "Water boils at 100 degrees Celsius. At the top of a mountain, it",
    "Q: What is 12 times 7?\nA:",
    "<|im_start|>user\nWhat is the tallest mountain in the world?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWrite a haiku about autumn leaves.<|im_end|>\n<|im_start|>assistant\n",
    "In 1969, Neil Armstrong",
    "Here is a list of fruits: apple, banana,",
]
GEMMA3_PROMPTS = SMOLLM2_PROMPTS[:6] + [
    "<start_of_turn>user\nWhat is the tallest mountain in the world?<end_of_turn>\n"
    "<start_of_turn>model\n",
    "<start_of_turn>user\nYou are a helpful assistant.\n\nWrite a haiku about autumn leaves."
    "<end_of_turn>\n<start_of_turn>model\n",
    "In 1969, Neil Armstrong",
    "Here is a list of fruits: apple, banana,",
]
PROMPTS = {"smollm2": SMOLLM2_PROMPTS, "gemma3": GEMMA3_PROMPTS}


def cpu_model():
    """The CPU the fixture was made on: llama.cpp's kernels, and so its bits, depend on it."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return "unknown"
    name = next((l.split(":", 1)[1].strip() for l in lines if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in lines if l.startswith("flags")), [])
    simd = [f for f in flags if f.startswith(("avx", "amx", "fma", "f16c"))]
    return name + " (" + " ".join(sorted(simd)) + ")"


def main(model_path, out_dir, prompt_set):
    # llama.cpp's defaults: f16 K/V cache (ggml type 1), flash attention off.
    llm = Llama(model_path=model_path, n_ctx=512, n_threads=2, logits_all=True, verbose=False,
                type_k=1, type_v=1, flash_attn=False, seed=0)
    cases = []
    add_bos = bool(llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true")
    for prompt in PROMPTS[prompt_set]:
        ids = llm.tokenize(prompt.encode(), add_bos=add_bos, special=True)
        llm.reset()
        llm.eval(ids)
        out, gaps, top_ids, top_logits = [], [], [], []
        for _ in range(NEW_TOKENS):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            logits = row.astype(np.float64)
            top2 = np.sort(np.partition(logits, -2)[-2:])
            tok = int(np.argmax(logits))
            out.append(tok)
            gaps.append(round(float(top2[1] - top2[0]), 5))
            best = np.argsort(-row, kind="stable")[:TOP_LOGITS]
            top_ids.append([int(i) for i in best])
            top_logits.append([float(row[i]) for i in best])  # float32 -> double: exact
            llm.eval([tok])  # no EOS stop: the comparison covers all 64 steps
        cases.append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": out,
                      "top2_gap": gaps, "top_ids": top_ids, "top_logits": top_logits})
        print(repr(prompt[:40]), "->", repr(llm.detokenize(out).decode(errors="replace")[:60]))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "llamacpp_greedy.json"), "w") as f:
        manifest = {
            "tool": "llama-cpp-python", "version": llama_cpp.__version__,
            "model": os.path.basename(model_path), "dtype": "the file's weights, llama.cpp "
            "CPU defaults (f16 KV cache, flash_attn off), 2 threads, built with -march=native "
            "on an AVX-512 CPU",
            "cpu": cpu_model(),
            "tolerance": "greedy ids identical; a first mismatch at a step whose llama.cpp "
                         "top-2 gap is < 0.05 nat counts as a near tie, and comparison stops "
                         "there. top_logits: equal to the last bit (0 ulp)",
        }
        # One case per line: readable diffs, a fraction of the size of an indented dump.
        f.write('{"manifest": ' + json.dumps(manifest, indent=1) + ',\n "cases": [\n')
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "smollm2")
