#!/usr/bin/env python3
"""llguidance's side of the structured-output benchmark: on the walks of a fixture made by
tools/make_grammar_fixtures.py (same grammars, same SmolLM2 tokenizer), the time to compile each
grammar (LLMatcher construction, including the schema / regex / Lark front end) and the time of
every mask (compute_bitmask) along the recorded tokens. Our side: build-cpu/test_structured
--gtest_filter=MaskOracle* prints the same figures for the same walks.

    .venv/bin/python tools/bench_grammar.py [--walks tests/structured/data/grammar_walks.json]
"""
import argparse
import json
import os
import sys
import time

import llguidance
from llguidance import LLMatcher, LLTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_grammar_fixtures import GgufTokens, ll_grammar  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--walks", default="tests/structured/data/grammar_walks.json")
    args = ap.parse_args()
    fixture = json.load(open(args.walks))
    g = GgufTokens(args.gguf)
    t0 = time.perf_counter()
    tok = LLTokenizer(llguidance.TokenizerWrapper(g), n_vocab=len(g.tokens), eos_token=g.eos_token_id)
    tok_ms = (time.perf_counter() - t0) * 1e3
    compile_ms, mask_ms = [], []
    for case in fixture["cases"]:
        for i, w in enumerate(case["walks"]):
            t0 = time.perf_counter()
            m = LLMatcher(tok, ll_grammar(case["kind"], case["text"]), log_level=0)
            if i == 0:
                compile_ms.append((time.perf_counter() - t0) * 1e3)
            for k in range(len(w["masks"])):
                t0 = time.perf_counter()
                m.compute_bitmask()
                mask_ms.append((time.perf_counter() - t0) * 1e3)
                if k < len(w["tokens"]):
                    m.consume_token(w["tokens"][k])
    mask_ms.sort()
    compile_ms.sort()
    pct = lambda q: mask_ms[min(len(mask_ms) - 1, int(q * len(mask_ms)))]
    print(f"llguidance {fixture['manifest']['version']}: {len(compile_ms)} grammars, "
          f"{len(mask_ms)} masks; tokenizer {tok_ms:.1f} ms; compile mean "
          f"{sum(compile_ms) / len(compile_ms):.3f} ms, median {compile_ms[len(compile_ms) // 2]:.3f} ms, "
          f"max {compile_ms[-1]:.3f} ms; mask mean "
          f"{sum(mask_ms) / len(mask_ms):.4f} ms, p50 {pct(0.5):.4f} ms, p99 {pct(0.99):.3f} ms, "
          f"max {mask_ms[-1]:.3f} ms")


if __name__ == "__main__":
    main()
