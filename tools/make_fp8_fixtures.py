#!/usr/bin/env python3
"""Writes fixtures/fp8/: FP8 checkpoints of the tiny models, each beside the f32 checkpoint of
the same weights dequantized, and the float8 e4m3fn conversion table, with ml_dtypes (the
NumPy float8 types of JAX) as the oracle for the conversions.

    pip install numpy ml_dtypes; python3 tools/make_fp8_fixtures.py   (from the repo root)

Each model directory is a quantized copy of fixtures/tiny/<base> (made by
tools/make_tiny_fixtures.py from transformers): every linear weight of the decoder layers
(`*_proj.weight`, MLA's `kv_a_proj_with_mqa` too; not embeddings, norms, routers or the LM head)
becomes F8_E4M3 with its scales, in one of the layouts FP8 checkpoints ship:
  llama_tensor     quant_method fp8, one f32 scale a tensor (0-d `weight_scale`), static
                   activations (0-d `input_scale`), as vLLM's FP8 checkpoints; the recipe is
                   vLLM's dynamic per-tensor one: scale = amax / 448, q = fp8(clip(w / scale)).
  llama_channel    compressed-tensors float-quantized, channel strategy: one bf16 scale a row
                   (`weight_scale` [N, 1]), as the RedHatAI FP8-dynamic checkpoints.
  llama_block      quant_method fp8 with weight_block_size [128, 128] (`weight_scale_inv`
                   [ceil(N/128), ceil(K/128)] f32), as DeepSeek-V3 and Qwen3-FP8 ship.
  deepseek_v3_block the DeepSeek-V3 tiny model (MLA, q-LoRA, experts) with [16, 32] blocks.
<name>/dequantized/ holds the same model with every FP8 weight replaced by its f32
dequantization, q.astype(float32) * scale (each product rounded once to f32): the engine must
give bit-identical logits on the two. llama_tensor/dequantized is also what --quantization fp8
must make of fixtures/tiny/llama.
"""
import importlib.metadata
import json
import os
import re
import shutil
import struct

import ml_dtypes
import numpy as np

OUT = "fixtures/fp8"
TINY = "fixtures/tiny"
FP8 = ml_dtypes.float8_e4m3fn
FP8_MAX = np.float32(448.0)
LINEAR = re.compile(r"model\.layers\.\d+\..*_proj(_with_mqa)?\.weight")

DTYPES = {"F32": np.float32, "BF16": ml_dtypes.bfloat16, "F8_E4M3": FP8}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    names = {np.dtype(np.float32): "F32", np.dtype(ml_dtypes.bfloat16): "BF16",
             np.dtype(FP8): "F8_E4M3"}
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        raw = a.tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def to_fp8(x):
    """f32 -> e4m3fn after clipping to the finite range (NaN-free for finite x)."""
    return np.clip(x, -FP8_MAX, FP8_MAX).astype(FP8)


def per_tensor(w):
    amax = np.float32(np.abs(w).max())
    scale = np.float32(amax / FP8_MAX) if amax > 0 else np.float32(1.0)
    q = to_fp8(w / scale)
    return q, {"weight_scale": np.array(scale, dtype=np.float32)}, q.astype(np.float32) * scale


def per_channel(w):
    amax = np.abs(w).max(axis=1, keepdims=True).astype(np.float32)
    scale = np.where(amax > 0, amax / FP8_MAX, np.float32(1.0)).astype(ml_dtypes.bfloat16)
    s32 = scale.astype(np.float32)
    q = to_fp8(w / s32)
    return q, {"weight_scale": scale}, q.astype(np.float32) * s32


def per_block(w, br, bc):
    n, k = w.shape
    rows, cols = -(-n // br), -(-k // bc)
    scale = np.ones((rows, cols), dtype=np.float32)
    for i in range(rows):
        for j in range(cols):
            amax = np.float32(np.abs(w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]).max())
            if amax > 0:
                scale[i, j] = amax / FP8_MAX
    full = np.repeat(np.repeat(scale, br, axis=0), bc, axis=1)[:n, :k]
    q = to_fp8(w / full)
    return q, {"weight_scale_inv": scale}, q.astype(np.float32) * full


VARIANTS = {
    "llama_tensor": ("llama", per_tensor, {
        "quant_method": "fp8", "activation_scheme": "static"}),
    "llama_channel": ("llama", per_channel, {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "quantization_status": "compressed", "ignore": ["lm_head"],
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                        "symmetric": True, "dynamic": False},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                  "symmetric": True, "dynamic": True}}}}),
    "llama_block": ("llama", lambda w: per_block(w, 128, 128), {
        "quant_method": "fp8", "activation_scheme": "dynamic",
        "weight_block_size": [128, 128]}),
    "deepseek_v3_block": ("deepseek_v3", lambda w: per_block(w, 16, 32), {
        "quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [16, 32]}),
}


def conversion_table():
    """All 256 e4m3fn values as f32 bits, and f32 -> e4m3fn for edge and random inputs."""
    to_f32 = np.arange(256, dtype=np.uint8).view(FP8).astype(np.float32).view(np.uint32)
    finite = np.arange(256, dtype=np.uint8).view(FP8).astype(np.float32)
    finite = np.unique(finite[np.isfinite(finite)])
    mids = (finite[:-1].astype(np.float64) + finite[1:]) / 2
    xs = [finite, mids.astype(np.float32)]
    for m in (mids.astype(np.float32),):  # one ulp each side of every halfway point
        xs += [np.nextafter(m, np.float32(np.inf)), np.nextafter(m, np.float32(-np.inf))]
    rng = np.random.default_rng(20261204)
    xs.append(rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32).view(np.float32))
    xs.append((rng.standard_normal(1000) * 100).astype(np.float32))
    xs.append(np.array([448, 464, 465, 479.9, 480, 1e30, np.inf, -np.inf, np.nan, 2**-9,
                        2**-10, 1.5 * 2**-10, 2**-11, 1e-30, 0.0, -0.0, 2**-6, 0.9999 * 2**-6],
                       dtype=np.float32))
    x = np.concatenate([a.astype(np.float32) for a in xs])
    x = np.concatenate([x, -x])
    q = x.astype(FP8).view(np.uint8)
    return {"to_f32_bits": [int(v) for v in to_f32],
            "from_f32": [[int(b), int(v)] for b, v in zip(x.view(np.uint32), q)]}


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(f"{OUT}/conversions.json", "w") as f:
        json.dump(conversion_table(), f, separators=(",", ":"))
    for name, (base, quantize, qconfig) in VARIANTS.items():
        src = f"{TINY}/{base}"
        weights = read_safetensors(f"{src}/model.safetensors")
        fp8, deq = {}, {}
        for t, w in weights.items():
            if LINEAR.fullmatch(t) and w.ndim == 2:
                q, scales, d = quantize(w.astype(np.float32))
                fp8[t] = q
                for suffix, s in scales.items():
                    fp8[t[:-len("weight")] + suffix] = s
                if qconfig.get("activation_scheme") == "static":
                    fp8[t[:-len("weight")] + "input_scale"] = np.array(1.0, dtype=np.float32)
                deq[t] = d.astype(np.float32)
            else:
                fp8[t] = deq[t] = w
        for d, tensors, with_q in ((f"{OUT}/{name}", fp8, True),
                                   (f"{OUT}/{name}/dequantized", deq, False)):
            os.makedirs(d, exist_ok=True)
            config = json.load(open(f"{src}/config.json"))
            if with_q:
                config["quantization_config"] = qconfig
            with open(f"{d}/config.json", "w") as f:
                json.dump(config, f, indent=1)
            shutil.copy(f"{src}/generation_config.json", d)
            if os.path.exists(f"{src}/tokenizer.json"):  # lets `serve` start (ids in, ids out)
                shutil.copy(f"{src}/tokenizer.json", d)
            write_safetensors(f"{d}/model.safetensors", tensors)
        print(name, "ok")
    manifest = {
        "tool": "ml_dtypes (float8_e4m3fn casts) + numpy",
        "ml_dtypes_version": importlib.metadata.version("ml_dtypes"),
        "numpy_version": np.__version__,
        "base": "fixtures/tiny (transformers, f32)",
        "dtype": "float8_e4m3fn weights with f32 scales (bf16 for llama_channel); f32 elsewhere",
        "tolerance": 0,
        "bar": "conversions bit-exact; logits of each FP8 checkpoint bit-identical to its "
               "dequantized f32 checkpoint (CPU, and CUDA with --dtype float32); "
               "--quantization fp8 of fixtures/tiny/llama bit-identical to "
               "llama_tensor/dequantized",
        "models": {n: v[0] for n, v in VARIANTS.items()},
    }
    with open(f"{OUT}/manifest.json", "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
