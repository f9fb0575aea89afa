#!/usr/bin/env python3
"""Random-weight checkpoints shaped like Llama-3.2-1B, Llama-3.1-8B, Gemma-3-4B (text),
Qwen3-30B-A3B cut to 8 of its 48 layers (`qwen3-moe-8l`: 128 experts of 768, 8 used) and
DeepSeek-V2-Lite cut to 8 of its 27 layers (`deepseek-v2-lite-8l`: MLA with a latent of 512 + 64,
64 experts of 1,408 with 6 used and 2 shared, the first layer dense), for the CUDA benchmarks. Made with transformers on the GPU machine (no download: random init,
bf16), saved as safetensors + config.json, with the tokenizer files beside them when given, so
that the same directory is read by our loader and by transformers.

    python3 tools/make_gpu_bench_models.py --out /tmp/models [--tokenizer DIR] [--shapes 1b,8b]
    (shapes: 1b, 8b, gemma3-4b, qwen3-moe-8l, deepseek-v2-lite-8l, and the whole-depth
    qwen3-30b-a3b (48 layers, 30.4 B parameters) and deepseek-v2-lite (27 layers, 15.4 B))
"""
import argparse
import json
import os
import shutil
import time

import torch
from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, Gemma3ForCausalLM,
                          Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
LLAMA = dict(vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
             rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001)
# Gemma-3-4B's text tower: five sliding-window layers (1,024 tokens) to one global layer.
GEMMA3_4B = dict(
    vocab_size=262208, hidden_size=2560, intermediate_size=10240, num_hidden_layers=34,
    num_attention_heads=8, num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256,
    sliding_window=1024, max_position_embeddings=131072, rms_norm_eps=1e-6,
    rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
    bos_token_id=2, eos_token_id=1)
SHAPES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
               num_attention_heads=32, num_key_value_heads=8, head_dim=64,
               tie_word_embeddings=True, rope_scaling=dict(LLAMA3_ROPE, factor=32.0)),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, head_dim=128,
               tie_word_embeddings=False, rope_scaling=dict(LLAMA3_ROPE, factor=8.0)),
    "gemma3-4b": GEMMA3_4B,
    # Qwen3-30B-A3B's layer (vocabulary of the Llama-3 tokenizer the benchmarks carry).
    "qwen3-moe-8l": dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, num_hidden_layers=8,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, rope_theta=1000000.0,
        max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=128000, eos_token_id=128001),
    # DeepSeek-V2-Lite's layers (its config.json's values; the Llama-3 vocabulary).
    "deepseek-v2-lite-8l": dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16, q_lora_rank=None,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6, first_k_dense_replace=1,
        topk_method="greedy", n_group=1, topk_group=1, routed_scaling_factor=1.0,
        norm_topk_prob=False, max_position_embeddings=163840, rms_norm_eps=1e-6,
        rope_scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                      "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
        tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001),
}
SHAPES["qwen3-30b-a3b"] = dict(SHAPES["qwen3-moe-8l"], num_hidden_layers=48)
SHAPES["deepseek-v2-lite"] = dict(SHAPES["deepseek-v2-lite-8l"], num_hidden_layers=27)


# Shapes too large to build whole on an 80 GB GPU (the 30B is 61 GB of bf16, and transformers'
# init takes more: it ran out of an H100's memory): written tensor by tensor instead, norms 1
# and the rest N(0, initializer_range), as transformers initialises these models, in 5 GB
# shards with the index save_pretrained writes. (deepseek-v2-lite, 31 GB, is built whole as
# before; it was last made on an H200.)
STREAMED = {"qwen3-30b-a3b"}


def expert_shapes(key, shape, cfg):
    """A fused expert parameter (transformers 5 keeps `mlp.experts.gate_up_proj` and
    `mlp.experts.down_proj` as [E, ...] tensors) as the per-expert tensors save_pretrained
    writes; other keys as they are."""
    prefix, _, leaf = key.rpartition("mlp.experts.")
    if not prefix or leaf not in ("gate_up_proj", "down_proj") or len(shape) != 3:
        return [(key, shape)]
    f, h = cfg.moe_intermediate_size, cfg.hidden_size
    out = []
    for e in range(shape[0]):
        x = f"{prefix}mlp.experts.{e}."
        if leaf == "gate_up_proj":
            out += [(x + "gate_proj.weight", (f, h)), (x + "up_proj.weight", (f, h))]
        else:
            out.append((x + "down_proj.weight", (h, f)))
    return out


def save_streamed(cls, cfg, d):
    from safetensors.torch import save_file
    with torch.device("meta"):
        model = cls(cfg)
    shapes = []
    for k, v in model.state_dict().items():
        shapes += expert_shapes(k, tuple(v.shape), cfg)
    if getattr(cfg, "tie_word_embeddings", False):
        shapes = [(k, s) for k, s in shapes if k != "lm_head.weight"]
    del model
    os.makedirs(d, exist_ok=True)
    cfg.architectures = [cls.__name__]
    cfg.save_pretrained(d)
    parts, shard, size, total = [], {}, 0, 0

    def flush():
        parts.append(list(shard))
        save_file(shard, os.path.join(d, f"part-{len(parts)}.safetensors"),
                  metadata={"format": "pt"})
        shard.clear()

    for key, shape in shapes:
        if len(shape) == 1 and key.endswith("norm.weight"):
            t = torch.ones(shape, dtype=torch.bfloat16, device="cuda")
        else:
            t = torch.randn(shape, dtype=torch.bfloat16, device="cuda") * cfg.initializer_range
        shard[key] = t.cpu()
        size += t.numel() * 2
        total += t.numel()
        if size >= 5e9:
            flush()
            size = 0
    if shard:
        flush()
    weight_map = {}
    for i, keys in enumerate(parts):
        name = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
        os.rename(os.path.join(d, f"part-{i + 1}.safetensors"), os.path.join(d, name))
        weight_map.update({k: name for k in keys})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total * 2}, "weight_map": weight_map}, f)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", help="directory with tokenizer.json + tokenizer_config.json")
    ap.add_argument("--shapes", default="1b,8b")
    args = ap.parse_args()
    for name in args.shapes.split(","):
        t0 = time.time()
        torch.manual_seed(0)
        if name.startswith("gemma3"):
            cfg = Gemma3TextConfig(torch_dtype="bfloat16", **SHAPES[name])
            cls, d = Gemma3ForCausalLM, name
        elif name.startswith("deepseek-v2"):
            cfg = DeepseekV2Config(torch_dtype="bfloat16", **SHAPES[name])
            cls, d = DeepseekV2ForCausalLM, name
        elif name.startswith("qwen3"):
            cfg = Qwen3MoeConfig(torch_dtype="bfloat16", **SHAPES[name])
            cls, d = Qwen3MoeForCausalLM, name
        else:
            cfg = LlamaConfig(torch_dtype="bfloat16", **LLAMA, **SHAPES[name])
            cls, d = LlamaForCausalLM, "llama-" + name
        d = os.path.join(args.out, d)
        if name in STREAMED:
            params = save_streamed(cls, cfg, d)
        else:
            with torch.device("cuda"):
                model = cls(cfg).to(torch.bfloat16)
            model.save_pretrained(d, safe_serialization=True, max_shard_size="5GB")
            params = sum(p.numel() for p in model.parameters())
            del model
            torch.cuda.empty_cache()
        if args.tokenizer:
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(args.tokenizer, f), d)
        print(json.dumps({"shape": name, "dir": d, "params": params,
                          "seconds": round(time.time() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
