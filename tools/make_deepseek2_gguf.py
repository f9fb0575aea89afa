#!/usr/bin/env python3
"""A random-weight GGUF of llama.cpp's `deepseek2` architecture with DeepSeek-V2-Lite's layer
and expert structure (27 layers, the first dense; 64 routed experts of which 6 are used, 2
shared; MLA without a q-LoRA) at reduced widths, its routed experts stored as Q4_K blocks
(random bytes with small scales: valid K-quant weights by construction), the rest f16 / f32.
Deterministic on any machine: every tensor's bytes come from SHAKE-256 of (seed, tensor name)
through integer and exact float arithmetic only, so the file (sha256 in the fixture manifest)
depends on nothing but this script and gguf-py's layout.

    .venv/bin/python tools/make_deepseek2_gguf.py models/deepseek2-lite-shape.gguf

With --reference DIR it also runs llama.cpp (llama-cpp-python, built here) over the file:
for each prompt its greedy continuation and the logits at every position of prompt +
continuation (teacher-forced), into DIR/llamacpp_logits.json + .bin, the oracle of
tests/model/test_deepseek2_gguf.cpp.
"""
import argparse
import hashlib
import json
import pathlib

import numpy as np
import gguf

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEED = 20261201
LAYERS, DENSE_LEAD = 27, 1
HIDDEN, DENSE_FF = 256, 512
HEADS, KV_LORA, NOPE, ROPE, V_HEAD = 4, 128, 64, 32, 64
EXPERTS, USED, SHARED, EXPERT_FF = 64, 6, 2, 256
ROUTED_SCALE = 1.0
CONTEXT = 512
QK_K, Q4_K_BYTES = 256, 144
PROMPTS = [[1, 17, 250, 33, 90, 5, 144], [1, 300, 301, 302], [1, 7, 7, 7, 42, 101, 99, 12, 64, 3]]
NEW_TOKENS = 16


def tiny_vocab():
    """The tiny checkpoints' byte-level BPE (fixtures/tiny/deepseek_v2/tokenizer.json) as a GGUF
    gpt2 vocabulary; the tests send token ids, so its content does not matter."""
    tj = json.loads((ROOT / "fixtures/tiny/deepseek_v2/tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    types = [gguf.TokenType.CONTROL if i < 3 else gguf.TokenType.NORMAL for i in range(len(tokens))]
    return tokens, merges, types


def random_bytes(name, n):
    return np.frombuffer(hashlib.shake_256(f"{SEED}:{name}".encode()).digest(n), dtype=np.uint8)


def uniform(name, shape, lo, hi):
    """Uniform values on [lo, hi) from 16-bit integers (exact arithmetic), float64."""
    k = random_bytes(name, 2 * int(np.prod(shape))).view("<u2").astype(np.float64)
    return (lo + (hi - lo) * (k / 65536.0)).reshape(shape)


def q4_k_blocks(name, shape):
    """Random Q4_K rows of a (..., rows, cols) weight: random 4-bit values and 6-bit scales."""
    *lead, rows, cols = shape
    blocks = cols // QK_K
    raw = random_bytes(name, int(np.prod(lead)) * rows * blocks * Q4_K_BYTES).copy()
    raw = raw.reshape(*lead, rows, blocks, Q4_K_BYTES)
    # w = d * scale * q - dmin * min with q in 0..15 and 6-bit scale and min: dmin = 7.5 d
    # centres the weights on 0 (std about 250 d).
    d64 = uniform(name + ":d", (*lead, rows, blocks), 1.5e-4, 2.5e-4)
    d = d64.astype(np.float16)
    dmin = (d64 * 7.5 * uniform(name + ":dmin", d64.shape, 0.95, 1.05)).astype(np.float16)
    raw[..., 0:2] = d.view(np.uint8).reshape(*d.shape, 2)
    raw[..., 2:4] = dmin.view(np.uint8).reshape(*dmin.shape, 2)
    return raw.reshape(*lead, rows, blocks * Q4_K_BYTES)


def write(path):
    tokens, merges, types = tiny_vocab()
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "deepseek2")
    w.add_name("deepseek2-lite-shape-random")
    w.add_block_count(LAYERS)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(DENSE_FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(ROPE)
    w.add_kv_lora_rank(KV_LORA)
    w.add_key_length(KV_LORA + ROPE)
    w.add_value_length(KV_LORA)
    w.add_key_length_mla(NOPE + ROPE)
    w.add_value_length_mla(V_HEAD)
    w.add_leading_dense_block_count(DENSE_LEAD)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(USED)
    w.add_expert_shared_count(SHARED)
    w.add_expert_feed_forward_length(EXPERT_FF)
    w.add_expert_weights_scale(ROUTED_SCALE)
    w.add_expert_weights_norm(False)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)

    def f16(name, *shape, std=0.05):  # uniform with the given standard deviation
        a = std * np.sqrt(3.0)
        return uniform(name, shape, -a, a).astype(np.float16)

    def f32(name, *shape, std):
        a = std * np.sqrt(3.0)
        return uniform(name, shape, -a, a).astype(np.float32)

    def norm(name, n):
        return (1.0 + uniform(name, (n,), -0.17, 0.17)).astype(np.float32)

    def add(name, make, *args, **kw):
        w.add_tensor(name, make(name, *args, **kw), **({"raw_dtype": q4k} if make is q4_k_blocks else {}))

    q4k = gguf.GGMLQuantizationType.Q4_K
    add("token_embd.weight", f16, vocab, HIDDEN, std=1.0)
    add("output_norm.weight", norm, HIDDEN)
    add("output.weight", f16, vocab, HIDDEN)
    for i in range(LAYERS):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", norm, HIDDEN)
        add(b + "attn_q.weight", f16, HEADS * (NOPE + ROPE), HIDDEN)
        add(b + "attn_kv_a_mqa.weight", f16, KV_LORA + ROPE, HIDDEN)
        add(b + "attn_kv_a_norm.weight", norm, KV_LORA)
        add(b + "attn_k_b.weight", f16, HEADS, KV_LORA, NOPE, std=0.1)
        add(b + "attn_v_b.weight", f16, HEADS, V_HEAD, KV_LORA, std=0.1)
        add(b + "attn_output.weight", f16, HIDDEN, HEADS * V_HEAD)
        add(b + "ffn_norm.weight", norm, HIDDEN)
        if i < DENSE_LEAD:
            add(b + "ffn_gate.weight", f16, DENSE_FF, HIDDEN)
            add(b + "ffn_up.weight", f16, DENSE_FF, HIDDEN)
            add(b + "ffn_down.weight", f16, HIDDEN, DENSE_FF)
            continue
        add(b + "ffn_gate_inp.weight", f32, EXPERTS, HIDDEN, std=0.1)
        add(b + "ffn_gate_exps.weight", q4_k_blocks, (EXPERTS, EXPERT_FF, HIDDEN))
        add(b + "ffn_up_exps.weight", q4_k_blocks, (EXPERTS, EXPERT_FF, HIDDEN))
        add(b + "ffn_down_exps.weight", q4_k_blocks, (EXPERTS, HIDDEN, EXPERT_FF))
        add(b + "ffn_gate_shexp.weight", f16, SHARED * EXPERT_FF, HIDDEN)
        add(b + "ffn_up_shexp.weight", f16, SHARED * EXPERT_FF, HIDDEN)
        add(b + "ffn_down_shexp.weight", f16, HIDDEN, SHARED * EXPERT_FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reference(path, sha, out_dir):
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=CONTEXT, n_batch=CONTEXT, logits_all=True,
                n_threads=2, verbose=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    cases, blobs, offset = [], [], 0
    for prompt in PROMPTS:
        llm.reset()
        seq, gaps = list(prompt), []
        for _ in range(NEW_TOKENS):  # llama.cpp's schedule: the prompt, then a token per step
            llm.eval(seq[len(llm.eval_tokens):])
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            top2 = np.sort(row)[-2:]
            gaps.append(float(top2[1] - top2[0]))
            seq.append(int(np.argmax(row)))
        llm.reset()
        llm.eval(seq)  # teacher-forced logits at every position, in one step
        logits = np.array(llm.scores[:len(seq)], dtype=np.float32)
        cases.append({"prompt": str(prompt), "prompt_ids": prompt, "greedy_ids": seq[len(prompt):],
                      "top2_gap": gaps, "rows": len(seq), "offset": offset})
        blobs.append(logits.tobytes())
        offset += logits.size
    (out_dir / "llamacpp_logits.bin").write_bytes(b"".join(blobs))
    manifest = {
        "tool": "llama-cpp-python", "version": llama_cpp.__version__,
        "model": "tools/make_deepseek2_gguf.py (seed %d)" % SEED, "gguf_sha256": sha,
        "gguf_py": "0.19.0 (tools/requirements.txt)",
        "cpu": llama_cpp.llama_print_system_info().decode().strip(),
        "tolerance": "tests/model/test_deepseek2_gguf.cpp: top-1 equal where llama.cpp's top-2 "
                     "gap >= 0.1 nat, free-running greedy equal up to such a near tie, "
                     "max|diff|/max|logit| <= 5e-2 (routing flips; see the test)",
        "vocab_size": len(tiny_vocab()[0]), "dtype": "float32 logits, all positions of one step",
        "cases": cases,
    }
    (out_dir / "llamacpp_logits.json").write_text(json.dumps(manifest, indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--reference", help="directory for llama.cpp's logits fixture")
    args = ap.parse_args()
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    sha = write(path)
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB, sha256 {sha}")
    if args.reference:
        reference(path, sha, pathlib.Path(args.reference))


if __name__ == "__main__":
    main()
