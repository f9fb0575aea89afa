#!/usr/bin/env python3
"""Tiny random-weight checkpoints of each supported architecture, with reference outputs
from Hugging Face transformers (f32, eager attention).

Run where torch + transformers are installed (the GPU machine; CPU works too):
    python3 tools/make_tiny_fixtures.py OUT_DIR [NAME ...]   (names: only those models)
For each architecture, OUT_DIR/<name>/ holds the checkpoint (config.json,
generation_config.json, model.safetensors) and reference.json: per prompt, the prompt ids,
32 greedy tokens, and logits (f32, little-endian) of every position of prompt + generation in
logits_<i>.bin, shape [len(prompt) + 32, vocab]. The manifest records tool versions and the bar.
"""
import json
import os
import sys
import zlib

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

VOCAB = 384
COMMON = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, torch_dtype="float32",
)

ARCHS = {
    # Llama-3 style rope scaling and tied embeddings.
    "llama": ("LlamaConfig", dict(
        rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    # Biases on q/k/v.
    "qwen2": ("Qwen2Config", dict(rope_theta=1000000.0, tie_word_embeddings=False)),
    # Per-head q/k RMSNorm, explicit head_dim different from hidden/heads, linear scaling.
    "qwen3": ("Qwen3Config", dict(head_dim=24, rope_theta=1000000.0, tie_word_embeddings=False,
                                   rope_scaling={"rope_type": "linear", "factor": 2.0})),
    # Sliding window shorter than the sequences, so the window matters.
    "mistral": ("MistralConfig", dict(sliding_window=8, rope_theta=10000.0,
                                       tie_word_embeddings=False)),
    # YaRN scaling on a Llama layout.
    "llama_yarn": ("LlamaConfig", dict(
        rope_theta=10000.0, tie_word_embeddings=False,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128})),
    # Gemma-3: sliding and global layers with their own RoPE (transformers 5's per-type
    # rope_parameters), sandwich norms with (1 + w), GELU-tanh, embedding scale,
    # query_pre_attn_scalar unlike head_dim, per-head q/k norm, tied embeddings.
    "gemma3": ("Gemma3TextConfig", dict(
        head_dim=16, query_pre_attn_scalar=24, sliding_window=8,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)),
    # Phi-3: fused qkv and gate/up weights, partial rotary, LongRoPE (short factors: the
    # context does not pass the original one) with its attention factor, a window.
    "phi3": ("Phi3Config", dict(
        partial_rotary_factor=0.75, sliding_window=16, tie_word_embeddings=False, pad_token_id=0,
        max_position_embeddings=64, original_max_position_embeddings=64,
        rope_scaling={"rope_type": "longrope", "attention_factor": 1.2,
                      "short_factor": [1.0, 1.1, 1.3, 1.7, 2.2, 3.0],
                      "long_factor": [1.5, 2.0, 3.0, 4.5, 6.0, 8.0],
                      "original_max_position_embeddings": 64})),
    # OLMo-2: norms after attention and MLP, q/k norm over the whole projections.
    "olmo2": ("Olmo2Config", dict(rope_theta=500000.0, tie_word_embeddings=False)),
    # Granite: embedding, attention, residual and logits multipliers.
    "granite": ("GraniteConfig", dict(
        rope_theta=10000.0, tie_word_embeddings=False, embedding_multiplier=6.0,
        attention_multiplier=0.1, residual_multiplier=0.3, logits_scaling=4.0)),
    # Qwen2 windowing only the layers from max_window_layers on.
    "qwen2_swa": ("Qwen2Config", dict(rope_theta=1000000.0, tie_word_embeddings=False,
                                       use_sliding_window=True, sliding_window=8,
                                       max_window_layers=1)),
    # Qwen3-MoE: 8 experts, 2 active, renormalised top-k; layer 1 dense (mlp_only_layers).
    "qwen3_moe": ("Qwen3MoeConfig", dict(
        head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
        rope_theta=1000000.0, tie_word_embeddings=False)),
    # DeepSeek-V2 (Lite-like: no q-LoRA): MLA (as many KV heads as query heads), softmax router with group-limited greedy
    # top-k, a shared expert, the first layer dense, a routed scaling factor, YaRN.
    "deepseek_v2": ("DeepseekV2Config", dict(
        num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
        v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        moe_intermediate_size=32, first_k_dense_replace=1, topk_method="group_limited_greedy",
        n_group=4, topk_group=2, routed_scaling_factor=1.5, norm_topk_prob=False,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                      "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
        tie_word_embeddings=False)),
    # DeepSeek-V3: MLA with the q-LoRA branch, sigmoid router with a score correction bias
    # and group-limited top-k, renormalised, scaled, a shared expert, YaRN with mscale terms.
    "deepseek_v3": ("DeepseekV3Config", dict(
        num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=32,
        first_k_dense_replace=1, n_group=4, topk_group=2, routed_scaling_factor=2.5,
        norm_topk_prob=True,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                      "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        tie_word_embeddings=False)),
}

PROMPT_LENS = [1, 7, 19]
NEW_TOKENS = 32


def longrope_long_tables(model):
    """transformers' own LongRoPE inv_freq and attention factor past the original context."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    inv_freq, attention = ROPE_INIT_FUNCTIONS["longrope"](model.config, "cpu", seq_len=10**6)
    return {"inv_freq": inv_freq.float().tolist(), "attention_factor": float(attention)}


def main(out_dir, only=None):
    manifest = {
        "tool": "transformers", "transformers_version": transformers.__version__,
        "torch_version": torch.__version__, "dtype": "float32", "attn_implementation": "eager",
        "bar": "max|logit diff| / max|logit| <= 1e-4 per position; greedy tokens identical",
        "models": {},
    }
    for name, (cfg_cls, extra) in ARCHS.items():
        if only and name not in only:
            continue
        torch.manual_seed(zlib.crc32(name.encode()))  # each model from its own seed
        cfg = getattr(transformers, cfg_cls)(**{**COMMON, **extra})
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                                 torch_dtype=torch.float32)
        with torch.no_grad():
            for p in model.parameters():  # std 0.02 makes near-uniform logits; widen them
                p.normal_(0.0, 0.15) if p.dim() > 1 else p.uniform_(0.5, 1.5)
            for n, p in model.named_parameters():
                if n.endswith(".bias"):
                    p.normal_(0.0, 0.1)
            # Router score corrections (DeepSeek-V3) start at zero, a bias a reader could
            # ignore unnoticed: make them matter.
            for n, b in list(model.named_buffers()) + list(model.named_parameters()):
                if n.endswith("e_score_correction_bias"):
                    b.uniform_(-0.3, 0.3)
        model.eval()
        d = os.path.join(out_dir, name)
        model.save_pretrained(d, safe_serialization=True)
        gen = torch.Generator().manual_seed(len(name))
        ref = {"arch": model.config.architectures[0], "prompts": []}
        if name == "phi3":
            ref["longrope_long"] = longrope_long_tables(model)
        for i, plen in enumerate(PROMPT_LENS):
            prompt = torch.randint(3, VOCAB, (1, plen), generator=gen)
            with torch.no_grad():
                seq = prompt
                for _ in range(NEW_TOKENS):  # plain greedy, no EOS stop
                    logits = model(seq).logits[0, -1]
                    seq = torch.cat([seq, logits.argmax().view(1, 1)], dim=1)
                full = model(seq).logits[0].float().numpy()
            fname = f"logits_{i}.bin"
            full.astype("<f4").tofile(os.path.join(d, fname))
            ref["prompts"].append({
                "prompt_ids": prompt[0].tolist(),
                "greedy_ids": seq[0, plen:].tolist(),
                "logits_file": fname, "logits_shape": list(full.shape),
            })
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f, indent=1)
        manifest["models"][name] = ref["arch"]
        print(name, ref["arch"], "ok", flush=True)
    path = os.path.join(out_dir, "manifest.json")
    if only and os.path.exists(path):  # keep the other models' entries
        with open(path) as f:
            old = json.load(f)
        manifest["models"] = {**old.get("models", {}), **manifest["models"]}
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], set(sys.argv[2:]) or None)
