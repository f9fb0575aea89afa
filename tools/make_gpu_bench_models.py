#!/usr/bin/env python3
"""Random-weight Llama checkpoints shaped like Llama-3.2-1B and Llama-3.1-8B, for the CUDA
benchmarks. Made with transformers on the GPU machine (no download: random init, bf16), saved
as safetensors + config.json, with the Llama-3 tokenizer files beside them when given, so that
the same directory is read by our loader and by transformers.

    python3 tools/make_gpu_bench_models.py --out /tmp/models [--tokenizer DIR] [--shapes 1b,8b]
"""
import argparse
import json
import os
import shutil
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
SHAPES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
               num_attention_heads=32, num_key_value_heads=8, head_dim=64,
               tie_word_embeddings=True, rope_scaling=dict(LLAMA3_ROPE, factor=32.0)),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, head_dim=128,
               tie_word_embeddings=False, rope_scaling=dict(LLAMA3_ROPE, factor=8.0)),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", help="directory with tokenizer.json + tokenizer_config.json")
    ap.add_argument("--shapes", default="1b,8b")
    args = ap.parse_args()
    for name in args.shapes.split(","):
        t0 = time.time()
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
                          rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001,
                          torch_dtype="bfloat16", **SHAPES[name])
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg).to(torch.bfloat16)
        d = os.path.join(args.out, "llama-" + name)
        model.save_pretrained(d, safe_serialization=True, max_shard_size="5GB")
        if args.tokenizer:
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(args.tokenizer, f), d)
        params = sum(p.numel() for p in model.parameters())
        print(json.dumps({"shape": name, "dir": d, "params": params,
                          "seconds": round(time.time() - t0, 1)}), flush=True)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
