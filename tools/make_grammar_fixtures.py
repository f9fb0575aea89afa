#!/usr/bin/env python3
"""Structured-output mask oracle: random walks through each grammar of tools/grammar_cases.py
with llguidance (PyPI) on SmolLM2's tokenizer, recording the allowed-token set before every
token. tests/structured/test_mask_oracle.cpp replays the walks and requires identical sets.

    .venv/bin/python tools/make_grammar_fixtures.py [--walks 10] [--steps 32]
        [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf] [--out tests/structured/data/grammar_walks.json]
    .venv/bin/python tools/make_grammar_fixtures.py --chains 100 --steps 32 \
        --out tests/structured/data/grammar_chains.json

The first form stores every walk's tokens and every mask (a failing step is named). The second
stores, per walk, only the number of masks and a hash chained over them: the walk's tokens come
from a splitmix64 stream (seeded per walk) over the ascending allowed ids, so the C++ test
retraces the same walk from its own masks, as long as they are llguidance's.

Sets are stored as "size:hash" (hash: the sum mod 2^64 of splitmix64's finalizer of every id)
to keep the fixture small. The tokenizer is the GGUF's vocabulary: token bytes by the GPT-2 byte alphabet,
control tokens (and bos/eos/unk/pad) special, EOS = tokenizer.ggml.eos_token_id, encoding by
the `tokenizers` pipeline tools/make_tokenizer_fixtures.py builds from the same GGUF; llguidance
allows EOS exactly where the grammar accepts, as the engine does.
"""
import argparse
import json
import os
import random
import sys

import numpy as np

import llguidance
from llguidance import LLMatcher, LLTokenizer
from llguidance.gbnf_to_lark import gbnf_to_lark

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grammar_cases import cases  # noqa: E402


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class GgufTokens:
    """What llguidance's TokenizerWrapper reads: token bytes, specials, eos/bos, an encoder."""

    def __init__(self, path):
        from gguf import GGUFReader
        r = GGUFReader(path)
        get = lambda k: r.fields[k].contents() if k in r.fields else None
        toks = get("tokenizer.ggml.tokens")
        types = get("tokenizer.ggml.token_type")
        self.eos_token_id = get("tokenizer.ggml.eos_token_id")
        self.bos_token_id = get("tokenizer.ggml.bos_token_id")
        named = {get("tokenizer.ggml." + k) for k in ("bos_token_id", "eos_token_id",
                 "unknown_token_id", "padding_token_id")} - {None}
        dec = byte_decoder()
        self.special_token_ids = [i for i, t in enumerate(types) if t == 3 or i in named]
        self.tokens = []
        for i, t in enumerate(toks):
            if i in self.special_token_ids:
                self.tokens.append(t.encode())
            else:
                self.tokens.append(bytes(dec[c] for c in t))
        from make_tokenizer_fixtures import load_gguf_gpt2
        self._hf = load_gguf_gpt2(path)[0]

    def __call__(self, s):
        # llguidance tokenizes the bytes a grammar forces (it then allows only the first token
        # when there are two or more): the real tokenizer, as tools/make_tokenizer_fixtures.py
        # builds SmolLM2's from the GGUF.
        if isinstance(s, bytes):
            s = s.decode("utf-8", errors="replace")
        return self._hf.encode(s, add_special_tokens=False).ids


def set_hash(ids):
    """Sum mod 2^64 of splitmix64's finalizer of each id: order-free, numpy-fast."""
    z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return f"{int(z.sum(dtype=np.uint64)):016x}"


def lark_literal(s):
    return json.dumps(s)


def rx(s):
    """s as a literal in llguidance's regex syntax (every character escaped by code point)."""
    return "".join(f"\\x{{{ord(c):x}}}" for c in s)


def structural_tag_lark(text):
    """vLLM's legacy structural tag in llguidance's Lark: free text (no trigger in it), or a
    segment: free text up to the first trigger to complete, the rest of a structure's begin,
    %json of its schema, its end; segments repeat. The first-trigger rule is the regex
    intersection: text ending in trigger t with no trigger ending before its last byte."""
    tag = json.loads(text)
    any_trigger = "(" + "|".join(rx(t) for t in tag["triggers"]) + ")"
    lines, items = [], []
    for i, st in enumerate(tag["structures"]):
        alts = []
        for t in tag["triggers"]:
            if st["begin"].startswith(t):
                rest = st["begin"][len(t):]
                alts.append(f"(/(?s:.)*{rx(t)}/ & ~/(?s:.)*{any_trigger}(?s:.)+/)" +
                            (f" {lark_literal(rest)}" if rest else ""))
        lines.append(f"SEG{i}: " + " | ".join(alts))
        schema = st.get("schema") or {}
        items.append(f"SEG{i} %json {json.dumps(schema)} {lark_literal(st['end'])}")
    lines.append(f"TEXT: /(?s:.)+/ & ~/(?s:.)*{any_trigger}(?s:.)*/")
    return "start: item* TEXT?\nitem: " + " | ".join(items) + "\n" + "\n".join(lines) + "\n"


def ll_grammar(kind, text):
    if kind == "regex":
        return LLMatcher.grammar_from_regex(text)
    if kind == "json_schema":
        return LLMatcher.grammar_from_json_schema(text)
    if kind == "json_object":
        return LLMatcher.grammar_from_json_schema('{"type": "object"}')
    if kind == "choice":
        return LLMatcher.grammar_from_lark("start: " + " | ".join(lark_literal(c) for c in json.loads(text)))
    if kind == "grammar":
        return LLMatcher.grammar_from_lark(gbnf_to_lark(text))
    if kind == "structural_tag":
        return LLMatcher.grammar_from_lark(structural_tag_lark(text))
    raise ValueError(kind)


def allowed(matcher, n_vocab):
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    return np.nonzero(bits[:n_vocab])[0]


def walk(tok, grammar, eos, n_vocab, rng, max_steps):
    m = LLMatcher(tok, grammar, log_level=0)
    if m.is_error():
        raise RuntimeError(m.get_error())
    tokens, masks = [], []
    for _ in range(max_steps):
        ids = allowed(m, n_vocab)
        masks.append(f"{len(ids)}:{set_hash(ids)}")
        if len(ids) == 0:
            break
        others = ids[ids != eos]
        if len(others) < len(ids) and (len(others) == 0 or rng.random() < 0.2):
            tokens.append(eos)
            break
        t = int(others[rng.randrange(len(others))])
        assert m.consume_token(t), m.get_error()
        tokens.append(t)
    return {"tokens": tokens, "masks": masks}


MASK64 = (1 << 64) - 1


def splitmix64(x):
    """One output of splitmix64 from state x: (new state, value). Shared with the C++ test."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return x, z ^ (z >> 31)


def chain_walk(tok, grammar, eos, n_vocab, seed, max_steps):
    """A walk whose token choices come from a splitmix64 stream seeded by `seed` over the
    ascending allowed ids, so the C++ test can retrace it from its own masks; returns the
    number of masks and a hash chained over every mask's size and set hash."""
    m = LLMatcher(tok, grammar, log_level=0)
    if m.is_error():
        raise RuntimeError(m.get_error())
    state, chain, steps = seed, 0, 0
    for _ in range(max_steps):
        ids = allowed(m, n_vocab)
        steps += 1
        chain = splitmix64(chain ^ int(set_hash(ids), 16) ^ (len(ids) << 40))[1]
        if len(ids) == 0:
            break
        others = ids[ids != eos]
        state, r = splitmix64(state)
        if len(others) < len(ids) and (len(others) == 0 or (r >> 11) * 2.0 ** -53 < 0.2):
            break
        state, r = splitmix64(state)
        t = int(others[r % len(others)])
        assert m.consume_token(t), m.get_error()
    return [steps, f"{chain:016x}"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default="tests/structured/data/grammar_walks.json")
    ap.add_argument("--walks", type=int, default=10)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--chains", type=int, default=0,
                    help="instead: this many seeded walks per grammar, one chained hash each")
    args = ap.parse_args()
    g = GgufTokens(args.gguf)
    n_vocab = len(g.tokens)
    tok = LLTokenizer(llguidance.TokenizerWrapper(g), n_vocab=n_vocab, eos_token=g.eos_token_id)
    rng = random.Random(args.seed)
    out_cases = []
    for name, kind, text in cases():
        if args.only and name not in args.only.split(","):
            continue
        grammar = ll_grammar(kind, text)
        if args.chains:
            chains = [chain_walk(tok, grammar, g.eos_token_id, n_vocab,
                                 (args.seed << 32) ^ (len(out_cases) << 16) ^ i, args.steps)
                      for i in range(args.chains)]
            out_cases.append({"name": name, "kind": kind, "text": text, "chains": chains})
            print(name, sum(c[0] for c in chains), "masks", file=sys.stderr)
            continue
        walks = [walk(tok, grammar, g.eos_token_id, n_vocab, rng, args.steps) for _ in range(args.walks)]
        out_cases.append({"name": name, "kind": kind, "text": text, "walks": walks})
        print(name, sum(len(w["tokens"]) for w in walks), "tokens", file=sys.stderr)
    manifest = {
        "tool": "llguidance", "version": llguidance.__version__ if hasattr(llguidance, "__version__") else
        __import__("importlib.metadata").metadata.version("llguidance"),
        "tokenizer": os.path.basename(args.gguf), "eos": g.eos_token_id, "n_vocab": n_vocab,
        "walks_per_case": args.chains or args.walks, "max_steps": args.steps, "seed": args.seed,
        "walk_seed": "(seed << 32) ^ (case index << 16) ^ walk index" if args.chains else None,
        "mask": "size:sum(splitmix64_finalizer(id)) mod 2^64", "tolerance": "identical sets",
        "command": "tools/make_grammar_fixtures.py " + " ".join(sys.argv[1:]),
    }
    with open(args.out, "w") as f:
        json.dump({"manifest": manifest, "cases": out_cases}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
