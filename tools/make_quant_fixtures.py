#!/usr/bin/env python3
"""Writes fixtures/quant/: a small GGUF with one tensor of each supported type, and the
reference f32 values `gguf.quants.dequantize` gives for each (the oracle for our dequantiser).

Types gguf.quants can quantize are quantized from random floats; for the K-quants, whose
quantizers it lacks, random block bytes are used with their f16 scales set to small finite
values. Run from the repo root: python3 tools/make_quant_fixtures.py
"""
import importlib.metadata
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

OUT = "fixtures/quant"
SEED = 20240601
# name, type, row-major shape (outermost first), how the data is made
TENSORS = [
    ("t.f32", T.F32, (2, 3, 40), "floats"),
    ("t.f16", T.F16, (3, 40), "floats"),
    ("t.bf16", T.BF16, (3, 40), "floats"),
    ("t.q8_0", T.Q8_0, (5, 96), "floats"),
    ("t.q4_0", T.Q4_0, (5, 96), "floats"),
    ("t.q4_1", T.Q4_1, (5, 96), "floats"),
    ("t.q4_k", T.Q4_K, (3, 512), "blocks"),
    ("t.q5_k", T.Q5_K, (3, 512), "blocks"),
    ("t.q6_k", T.Q6_K, (3, 512), "blocks"),
    ("t.q5_0", T.Q5_0, (5, 96), "floats"),
]
# Byte offsets of the f16 scales inside one block of each K-quant (GGUF block layouts).
F16_FIELDS = {T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,)}
# Plain types convert exactly. Block types: 1e-6 of the tensor's largest value, room for an
# FMA-contracting compiler; with the default build they match bit for bit.
EXACT = {"kind": "max_abs_diff_over_max_abs_ref", "value": 0.0}
TOLERANCE = {"kind": "max_abs_diff_over_max_abs_ref", "value": 1e-6}


def random_blocks(rng, qtype, shape):
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    n_blocks = rows * cols // block_size
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        scale = (rng.uniform(1e-3, 1e-1, n_blocks) * rng.choice([-1, 1], n_blocks))
        raw[:, off:off + 2] = scale.astype("<f2").view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(rows, cols // block_size * block_bytes)


def make_raw(rng, qtype, shape, how):
    if how == "blocks":
        return random_blocks(rng, qtype, shape)
    x = rng.standard_normal(shape).astype(np.float32) * 2.0
    if qtype == T.F32:
        return x
    if qtype == T.F16:
        return x.astype(np.float16)
    return quantize(x, qtype)  # uint8 bytes, shape (..., row bytes); BF16 included


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(SEED)
    writer = gguf.GGUFWriter(os.path.join(OUT, "quant.gguf"), arch="fixture")
    writer.add_string("fixture.tool", "tools/make_quant_fixtures.py")
    entries = []
    for name, qtype, shape, how in TENSORS:
        raw = make_raw(rng, qtype, shape, how)
        plain = qtype in (T.F32, T.F16)
        writer.add_tensor(name, raw, raw_dtype=None if plain else qtype)
        as_bytes = np.ascontiguousarray(raw).view(np.uint8)
        ref = dequantize(as_bytes, qtype) if not plain else raw.astype(np.float32)
        ref = np.ascontiguousarray(ref, dtype="<f4").reshape(shape)
        ref_file = name.replace(".", "_") + ".f32"
        ref.tofile(os.path.join(OUT, ref_file))
        entries.append({"name": name, "dtype": qtype.name, "shape": list(shape),
                        "data": how, "reference": ref_file, "tolerance": EXACT if qtype in (T.F32, T.F16, T.BF16) else TOLERANCE})
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    manifest = {
        "tool": "tools/make_quant_fixtures.py",
        "oracle": "gguf.quants.dequantize",
        "gguf_version": importlib.metadata.version("gguf"),
        "numpy_version": np.__version__,
        "python_version": sys.version.split()[0],
        "seed": SEED,
        "gguf_file": "quant.gguf",
        "reference_format": "raw little-endian f32, row-major, shape as listed",
        "tolerance_note": "pass if max|ours - ref| <= value * max|ref| over the tensor",
        "tensors": entries,
    }
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
