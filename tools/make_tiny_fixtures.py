#!/usr/bin/env python3
"""Tiny random-weight checkpoints of each supported architecture, with reference outputs
from Hugging Face transformers (f32, eager attention).

Run where torch + transformers are installed (the GPU machine; CPU works too):
    python3 tools/make_tiny_fixtures.py OUT_DIR
For each architecture, OUT_DIR/<name>/ holds the checkpoint (config.json,
generation_config.json, model.safetensors) and reference.json: per prompt, the prompt ids,
32 greedy tokens, and logits (f32, little-endian) of every position of prompt + generation in
logits_<i>.bin, shape [len(prompt) + 32, vocab]. The manifest records tool versions and the bar.
"""
import json
import os
import sys

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
}

PROMPT_LENS = [1, 7, 19]
NEW_TOKENS = 32


def main(out_dir):
    torch.manual_seed(0)
    manifest = {
        "tool": "transformers", "transformers_version": transformers.__version__,
        "torch_version": torch.__version__, "dtype": "float32", "attn_implementation": "eager",
        "bar": "max|logit diff| / max|logit| <= 1e-4 per position; greedy tokens identical",
        "models": {},
    }
    for name, (cfg_cls, extra) in ARCHS.items():
        cfg = getattr(transformers, cfg_cls)(**COMMON, **extra)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                                 torch_dtype=torch.float32)
        with torch.no_grad():
            for p in model.parameters():  # std 0.02 makes near-uniform logits; widen them
                p.normal_(0.0, 0.15) if p.dim() > 1 else p.uniform_(0.5, 1.5)
            for n, p in model.named_parameters():
                if n.endswith(".bias"):
                    p.normal_(0.0, 0.1)
        model.eval()
        d = os.path.join(out_dir, name)
        model.save_pretrained(d, safe_serialization=True)
        gen = torch.Generator().manual_seed(len(name))
        ref = {"arch": model.config.architectures[0], "prompts": []}
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
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
