#!/usr/bin/env python3
"""Random-weight mixture-of-experts GGUF files, their routed experts stored as Q4_K blocks
(random bytes with small scales: valid K-quant weights by construction), the rest f16 / f32.
Shapes of llama.cpp's `deepseek2` architecture:

- `lite`: DeepSeek-V2-Lite's layer and expert structure (27 layers, the first dense; 64 routed
  experts of which 6 are used, 2 shared; MLA without a q-LoRA; softmax routing) at reduced
  widths, about 210 MB;
- `v3`: DeepSeek-V3's kinds at 3 layers: a q-LoRA, YaRN RoPE scaling with its attention
  mscale, sigmoid routing with a score correction bias in 8 groups of which 4 are used,
  normalised and scaled weights; about 15 MB;

and `qwen3moe`, llama.cpp's Qwen3-MoE (GQA with per-head q/k norms, every layer 32 experts of
which 4 are used, softmax routing renormalised) at 4 layers, about 14 MB.

Deterministic on any machine: every tensor's bytes come from SHAKE-256 of (seed, shape, tensor
name) through integer and exact float arithmetic only, so a file (sha256 in its fixture
manifest) depends on nothing but this script and gguf-py's layout.

    .venv/bin/python tools/make_moe_gguf.py --shape lite models/deepseek2-lite-shape.gguf

With --reference DIR it also runs llama.cpp (llama-cpp-python, built here) over the file: for
each prompt its greedy continuation (with its top-2 gaps and each step's logits) and the logits
at every position of prompt + continuation in one step, into DIR/<shape>_logits.json + .bin,
the oracle of
tests/model/test_moe_gguf.cpp.
"""
import argparse
import hashlib
import json
import pathlib

import numpy as np
import gguf

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEED = 20261201
SHAPES = {
    "lite": dict(layers=27, dense_lead=1, hidden=256, dense_ff=512, heads=4, q_lora=0,
                 kv_lora=128, nope=64, rope=32, v_head=64, experts=64, used=6, shared=2,
                 expert_ff=256, sigmoid=False, groups=1, groups_used=1, norm=False, scale=1.0,
                 yarn=None),
    "qwen3moe": dict(arch="qwen3moe", layers=4, hidden=256, heads=4, kv_heads=2, head_dim=64,
                     experts=32, used=4, expert_ff=256),
    "v3": dict(layers=3, dense_lead=1, hidden=256, dense_ff=512, heads=4, q_lora=96,
               kv_lora=128, nope=64, rope=32, v_head=64, experts=64, used=6, shared=1,
               expert_ff=256, sigmoid=True, groups=8, groups_used=4, norm=True, scale=2.5,
               yarn=dict(factor=4.0, original_context=128, mscale_all_dim=1.0)),
}
CONTEXT = 512
TOLERANCE = ("tests/model/test_moe_gguf.cpp, per row of either schedule: max|diff|/max|logit| "
             "<= 5e-2 and top-1 equal where llama.cpp's top-2 gap >= 0.1 nat, unless a routing "
             "near tie (relative margin < 2e-3) at that row or an explained row before it "
             "accounts for the miss")

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


def deepseek2_metadata(w, c):
    w.add_feed_forward_length(c["dense_ff"])
    w.add_head_count_kv(1)
    w.add_rope_dimension_count(c["rope"])
    if c["yarn"]:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(c["yarn"]["factor"])
        w.add_rope_scaling_orig_ctx_len(c["yarn"]["original_context"])
        w.add_rope_scaling_yarn_log_mul(0.1 * c["yarn"]["mscale_all_dim"])
    if c["q_lora"]:
        w.add_q_lora_rank(c["q_lora"])
    w.add_kv_lora_rank(c["kv_lora"])
    w.add_key_length(c["kv_lora"] + c["rope"])
    w.add_value_length(c["kv_lora"])
    w.add_key_length_mla(c["nope"] + c["rope"])
    w.add_value_length_mla(c["v_head"])
    w.add_leading_dense_block_count(c["dense_lead"])
    w.add_expert_shared_count(c["shared"])
    w.add_expert_weights_scale(c["scale"])
    w.add_expert_weights_norm(c["norm"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if c["sigmoid"]
                             else gguf.ExpertGatingFuncType.SOFTMAX)
    if c["groups"] > 1:
        w.add_expert_group_count(c["groups"])
        w.add_expert_group_used_count(c["groups_used"])


def write(path, shape):
    c = SHAPES[shape]
    arch = c.get("arch", "deepseek2")
    tokens, merges, types = tiny_vocab()
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"{arch}-{shape}-random")
    w.add_block_count(c["layers"])
    w.add_context_length(CONTEXT)
    w.add_embedding_length(c["hidden"])
    w.add_head_count(c["heads"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_expert_count(c["experts"])
    w.add_expert_used_count(c["used"])
    w.add_expert_feed_forward_length(c["expert_ff"])
    if arch == "qwen3moe":
        w.add_head_count_kv(c["kv_heads"])
        w.add_key_length(c["head_dim"])
        w.add_value_length(c["head_dim"])
        w.add_feed_forward_length(c["expert_ff"] * c["used"])
    else:
        deepseek2_metadata(w, c)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)

    def f16(name, *dims, std=0.05):  # uniform with the given standard deviation
        a = std * np.sqrt(3.0)
        return uniform(name, dims, -a, a).astype(np.float16)

    def f32(name, *dims, std):
        a = std * np.sqrt(3.0)
        return uniform(name, dims, -a, a).astype(np.float32)

    def norm(name, n):
        return (1.0 + uniform(name, (n,), -0.17, 0.17)).astype(np.float32)

    q4k = gguf.GGMLQuantizationType.Q4_K

    def add(name, make, *args, **kw):
        key = f"{shape}:{name}"
        w.add_tensor(name, make(key, *args, **kw),
                     **({"raw_dtype": q4k} if make is q4_k_blocks else {}))

    hidden, heads = c["hidden"], c["heads"]
    add("token_embd.weight", f16, vocab, hidden, std=1.0)
    add("output_norm.weight", norm, hidden)
    add("output.weight", f16, vocab, hidden)
    for i in range(c["layers"]):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", norm, hidden)
        add(b + "ffn_norm.weight", norm, hidden)
        e, ff = c["experts"], c["expert_ff"]
        if arch == "qwen3moe":
            hd, kv = c["head_dim"], c["kv_heads"]
            add(b + "attn_q.weight", f16, heads * hd, hidden)
            add(b + "attn_k.weight", f16, kv * hd, hidden)
            add(b + "attn_v.weight", f16, kv * hd, hidden)
            add(b + "attn_q_norm.weight", norm, hd)
            add(b + "attn_k_norm.weight", norm, hd)
            add(b + "attn_output.weight", f16, hidden, heads * hd)
        else:
            qk = c["nope"] + c["rope"]
            if c["q_lora"]:
                add(b + "attn_q_a.weight", f16, c["q_lora"], hidden)
                add(b + "attn_q_a_norm.weight", norm, c["q_lora"])
                add(b + "attn_q_b.weight", f16, heads * qk, c["q_lora"], std=0.1)
            else:
                add(b + "attn_q.weight", f16, heads * qk, hidden)
            add(b + "attn_kv_a_mqa.weight", f16, c["kv_lora"] + c["rope"], hidden)
            add(b + "attn_kv_a_norm.weight", norm, c["kv_lora"])
            add(b + "attn_k_b.weight", f16, heads, c["kv_lora"], c["nope"], std=0.1)
            add(b + "attn_v_b.weight", f16, heads, c["v_head"], c["kv_lora"], std=0.1)
            add(b + "attn_output.weight", f16, hidden, heads * c["v_head"])
            if i < c["dense_lead"]:
                add(b + "ffn_gate.weight", f16, c["dense_ff"], hidden)
                add(b + "ffn_up.weight", f16, c["dense_ff"], hidden)
                add(b + "ffn_down.weight", f16, hidden, c["dense_ff"])
                continue
            sh = c["shared"] * ff
            if c["sigmoid"]:
                add(b + "exp_probs_b.bias", f32, e, std=0.05)
            add(b + "ffn_gate_shexp.weight", f16, sh, hidden)
            add(b + "ffn_up_shexp.weight", f16, sh, hidden)
            add(b + "ffn_down_shexp.weight", f16, hidden, sh)
        add(b + "ffn_gate_inp.weight", f32, e, hidden, std=0.1)
        add(b + "ffn_gate_exps.weight", q4_k_blocks, (e, ff, hidden))
        add(b + "ffn_up_exps.weight", q4_k_blocks, (e, ff, hidden))
        add(b + "ffn_down_exps.weight", q4_k_blocks, (e, hidden, ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reference(path, sha, out_dir, shape):
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=CONTEXT, n_batch=CONTEXT, logits_all=True,
                n_threads=2, verbose=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    cases, blobs, offset = [], [], 0
    for prompt in PROMPTS:
        llm.reset()
        seq, gaps, steps = list(prompt), [], []
        for _ in range(NEW_TOKENS):  # llama.cpp's schedule: the prompt, then a token per step
            llm.eval(seq[len(llm.eval_tokens):])
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            steps.append(row)
            top2 = np.sort(row)[-2:]
            gaps.append(float(top2[1] - top2[0]))
            seq.append(int(np.argmax(row)))
        llm.reset()
        llm.eval(seq)  # teacher-forced logits at every position, in one step
        logits = np.array(llm.scores[:len(seq)], dtype=np.float32)
        decode = np.stack(steps)
        cases.append({"prompt": str(prompt), "prompt_ids": prompt, "greedy_ids": seq[len(prompt):],
                      "top2_gap": gaps, "rows": len(seq), "offset": offset,
                      "step_offset": offset + logits.size})
        blobs += [logits.tobytes(), decode.tobytes()]
        offset += logits.size + decode.size
    (out_dir / f"{shape}_logits.bin").write_bytes(b"".join(blobs))
    manifest = {
        "tool": "llama-cpp-python", "version": llama_cpp.__version__,
        "model": f"tools/make_moe_gguf.py --shape {shape} (seed {SEED})",
        "gguf_sha256": sha,
        "gguf_py": "0.19.0 (tools/requirements.txt)",
        "cpu": llama_cpp.llama_print_system_info().decode().strip(),
        "tolerance": TOLERANCE,
        "vocab_size": len(tiny_vocab()[0]),
        "dtype": "float32 logits: at offset, every position of prompt + greedy in one step; at "
                 "step_offset, the last row of each step of the greedy run (prompt, then one "
                 "token per step)",
        "cases": cases,
    }
    (out_dir / f"{shape}_logits.json").write_text(json.dumps(manifest, indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="lite")
    ap.add_argument("--reference", help="directory for llama.cpp's logits fixture")
    args = ap.parse_args()
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    sha = write(path, args.shape)
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB, sha256 {sha}")
    if args.reference:
        reference(path, sha, pathlib.Path(args.reference), args.shape)


if __name__ == "__main__":
    main()
