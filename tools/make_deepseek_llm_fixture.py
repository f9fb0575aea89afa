#!/usr/bin/env python3
"""llama.cpp's tokenization under tokenizer.ggml.pre = "deepseek-llm" (DeepSeek-LLM and
DeepSeek-V2 GGUF files), as an oracle for tests/tokenizer: a vocabulary-only GGUF is written
from ../shared/tokenizers/deepseek_v3/tokenizer.json (byte-level BPE: its tokens, merges and
added tokens; only the pre-tokenizer name differs from that file's own), loaded by
llama-cpp-python, and every entry of fixtures/tokenizer/corpus.jsonl is tokenized and
tokenized with it, and so are random strings of the characters its patterns tell apart. Writes
fixtures/tokenizer/deepseek_llm_gguf.jsonl (the line format of fixtures/tokenizer/manifest.json),
deepseek_llm_probe.jsonl ({t, n} per line) and llamacpp_manifest.json.

    .venv/bin/python tools/make_deepseek_llm_fixture.py [--tokenizer DIR] [--out DIR]
"""
import argparse
import hashlib
import json
import os
import random
import tempfile

import gguf
import llama_cpp
from llama_cpp import Llama

CONTROL, USER_DEFINED, NORMAL = 3, 4, 1
PROBES = 600
PROBE_CHARS = (["\u2008", "\u2009", "\u2028", "\u1680", "\u2007", "\u3000", "\u00a0",
                "\u0085", "\u202f", "\u205f", "\u200a", "\u2000", " ", "\t", "\n", "\r"]
               + ["a", "Z", "\u3002", "\u3001", "\uff01", "\u4f60", "\uac00", "1", "\u0663",
                  "-", "'", "\u00e9", "\u03a9", "\U00010400", "\u2013", "x"])


def write_vocab_gguf(tokenizer_json, path):
    with open(tokenizer_json, encoding="utf-8") as f:
        j = json.load(f)
    by_id = {i: (t, NORMAL) for t, i in j["model"]["vocab"].items()}
    for a in j["added_tokens"]:
        by_id[a["id"]] = (a["content"], CONTROL if a["special"] else USER_DEFINED)
    ids = sorted(by_id)
    assert ids == list(range(len(ids))), "ids must be contiguous"
    merges = [m if isinstance(m, str) else m[0] + " " + m[1] for m in j["model"]["merges"]]
    w = gguf.GGUFWriter(path, "llama")
    # Shape keys llama.cpp reads even for a vocabulary-only load.
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("deepseek-llm")
    w.add_token_list([by_id[i][0] for i in ids])
    w.add_token_types([by_id[i][1] for i in ids])
    w.add_token_merges(merges)
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default="../shared/tokenizers/deepseek_v3")
    ap.add_argument("--out", default="fixtures/tokenizer")
    args = ap.parse_args()
    with open(os.path.join(args.out, "corpus.jsonl"), "rb") as f:
        corpus = [json.loads(line) for line in f]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "deepseek_llm_vocab.gguf")
        write_vocab_gguf(os.path.join(args.tokenizer, "tokenizer.json"), path)
        llm = Llama(model_path=path, vocab_only=True, verbose=False)
        lines = [json.dumps({"prefix": [], "suffix": [], "prefix_text": "", "suffix_text": ""})]
        for entry in corpus:
            text = entry["t"] if "t" in entry else bytes.fromhex(entry["x"]).decode("utf-8", "replace")
            ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
            lines.append(json.dumps({"n": ids}))
        # Strings mixing the characters the pre-tokenizer's classes and whitespace handling
        # tell apart (llama.cpp replaces non-ASCII whitespace by \v before matching).
        rng = random.Random(0)
        probe = []
        for _ in range(PROBES):
            t = "".join(rng.choice(PROBE_CHARS) for _ in range(rng.randint(1, 8)))
            probe.append(json.dumps({"t": t, "n": llm.tokenize(t.encode("utf-8"), add_bos=False,
                                                               special=True)}))
    out = os.path.join(args.out, "deepseek_llm_gguf.jsonl")
    data = ("\n".join(lines) + "\n").encode("utf-8")
    with open(out, "wb") as f:
        f.write(data)
    probe_data = ("\n".join(probe) + "\n").encode("utf-8")
    with open(os.path.join(args.out, "deepseek_llm_probe.jsonl"), "wb") as f:
        f.write(probe_data)
    manifest = {
        "tool": "llama-cpp-python (llama.cpp)",
        "version": llama_cpp.__version__,
        "tolerance": "exact",
        "generator": "tools/make_deepseek_llm_fixture.py",
        "fixtures": {
            "deepseek_llm_gguf": {
                "file": "deepseek_llm_gguf.jsonl",
                "source": "deepseek_v3/tokenizer.json written as a vocabulary-only GGUF with "
                          "tokenizer.ggml.pre = deepseek-llm",
                "reference": "n = Llama(vocab_only=True).tokenize(text, add_bos=False, "
                             "special=True) (special tokens in the text are matched, as Hugging "
                             "Face tokenizers and vLLM do). Decodes are not llama.cpp's (its "
                             "detokenize renders some tokens, e.g. id 48402, 33 spaces, as empty "
                             "text): d is omitted, so the test expects the text back, as the "
                             "deepseek_v3 fixture's Hugging Face decodes of this vocabulary give",
                "sha256": hashlib.sha256(data).hexdigest(),
            },
            "deepseek_llm_probe": {
                "file": "deepseek_llm_probe.jsonl",
                "source": "the same GGUF",
                "reference": f"{PROBES} random strings of 1-8 characters from PROBE_CHARS "
                             "(random.Random(0)); n as above",
                "sha256": hashlib.sha256(probe_data).hexdigest(),
            },
        },
    }
    with open(os.path.join(args.out, "llamacpp_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"{len(corpus)} entries -> {out}")


if __name__ == "__main__":
    main()
