#!/usr/bin/env python3
"""Byte-exact tokenizer oracles for tests/tokenizer: a deterministic corpus plus, per tokenizer,
the ids and decodes produced by Hugging Face `tokenizers` (see fixtures/tokenizer/manifest.json).

Usage (from the repo root):
  python3 tools/make_tokenizer_fixtures.py --crosscheck-python PY
    --tokenizers DIR  tokenizer folders (default ../shared/tokenizers: llama2 llama3 qwen3 gemma3 deepseek_v3)
    --gguf FILE       SmolLM2 GGUF (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
    --out DIR         default fixtures/tokenizer
    --crosscheck-python PY  a Python with transformers 4.x and gguf (no torch needed), for the
                      llama2_gguf fixture and the SmolLM2 cross-check; without it both keep their
                      previous state
  python3 tools/make_tokenizer_fixtures.py --write-unicode-tables src/tokenizer

Reference rules (documented in the manifest):
  * ids come from `tokenizers.Tokenizer.from_file(tokenizer.json)`, with the one change
    transformers 4.x makes on load: for tokenizer classes that rebuild their post-processor
    (Llama, CodeLlama, Gemma, GPTNeoX, Cohere) the post-processor becomes
    TemplateProcessing(bos? $A eos?) from tokenizer_config add_bos_token/add_eos_token.
  * decodes are `Tokenizer.decode` (no clean_up_tokenization_spaces, as vLLM streams).
  * invalid UTF-8 input: a Python str cannot hold it, so the reference encodes
    bytes.decode("utf-8", "replace") (each maximal ill-formed subpart -> U+FFFD); the C++
    tokenizer applies the same replacement to raw bytes.
  * SmolLM2 GGUF: a `tokenizers` pipeline built from the GGUF's tokenizer.ggml.* data the way
    the real SmolLM2 tokenizer.json is built (Digits(individual) + ByteLevel), honouring
    add_bos_token/add_eos_token; transformers' own GGUF loader is compared with it
    (gguf_crosscheck in the manifest).
  * SentencePiece GGUF: transformers 4.x loading a llama-type GGUF written from llama2's
    tokenizer.json (llama2_gguf).
  * *_variant: shared tokenizer.json files with components swapped, for options they lack.
"""
import argparse
import hashlib
import json
import os
import random
import sys

import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

HF_NAMES = ["llama2", "llama3", "qwen3", "gemma3", "deepseek_v3"]
# transformers 4.x classes whose __init__ calls update_post_processor(), with their defaults.
REBUILDS_POST_PROCESSOR = {
    "LlamaTokenizer": (True, False), "LlamaTokenizerFast": (True, False),
    "CodeLlamaTokenizer": (True, False), "CodeLlamaTokenizerFast": (True, False),
    "GemmaTokenizer": (True, False), "GemmaTokenizerFast": (True, False),
    "CohereTokenizer": (True, False), "CohereTokenizerFast": (True, False),
    "GPTNeoXTokenizer": (False, False), "GPTNeoXTokenizerFast": (False, False),
}

# ----------------------------------------------------------------------------------------------
# Corpus
# ----------------------------------------------------------------------------------------------
PHRASES = [
    "The quick brown fox jumps over the lazy dog.", "Hello, world!", "I'm sure it's fine; you'll see.",
    "They've said we'd go, but I'd rather not.", "DON'T SHOUT! WE'LL HEAR YOU'RE THERE.",
    "e.g. i.e. etc. Mr. Smith vs. Dr. Jones", "naïve café résumé coöperate façade jalapeño",
    "Straße, Größe, Fußgänger", "Ελληνικά: Καλημέρα κόσμε", "Русский: Съешь же ещё этих мягких французских булок",
    "Українська: Гей, хлопці", "中文：我能吞下玻璃而不伤身体。", "日本語：私はガラスを食べられます。それは私を傷つけません。",
    "カタカナとひらがなと漢字", "한국어: 나는 유리를 먹을 수 있어요. 그래도 아프지 않아요", "العربية: أنا قادر على أكل الزجاج و هذا لا يؤلمني.",
    "עברית: אני יכול לאכול זכוכית וזה לא מזיק לי.", "हिन्दी: मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती.",
    "ไทย: ฉันกินกระจกได้ แต่มันไม่ทำให้ฉันเจ็บ", "Tiếng Việt: Tôi có thể ăn thủy tinh mà không hại gì.",
    "বাংলা: আমি কাঁচ খেতে পারি", "தமிழ்: நான் கண்ணாடி சாப்பிடுவேன்", "ქართული: მინას ვჭამ",
    "Հայերեն: Կրնամ ապակի ուտել", "አማርኛ: ብርጭቆ መብላት እችላለሁ", "ᚠᛇᚻ᛫ᛒᛦᚦ᛫ᚠᚱᚩᚠᚢᚱ", "Türkçe: Cam yiyebilirim, bana zararı dokunmaz.",
    "Polski: Mogę jeść szkło i mi nie szkodzi.", "Čeština: Mohu jíst sklo, neublíží mi.", "Ærøskøbing Ålborg Øresund",
    "emoji 😀😃😄 👍🏽 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇺🇸🇯🇵 ✌🏿 🧑🏻‍🤝‍🧑🏿", "math: ∀x∈ℝ, ∃y: x² + y² ≥ 0 → √(x²) = |x| ∑∫∂∇",
    "currency $100 €200 £300 ¥400 ₹500 ₿0.001", "quotes “double” ‘single’ «guillemets» „low“ — dash – en-dash … ellipsis",
    "full-width ＡＢＣ１２３！？ half-width ｶﾀｶﾅ", "ligatures ﬁ ﬂ ﬀ ﬃ and compatibility ² ½ ™ ℌ",
    "zero width:\u200bhere\u200cthere\u200djoin\u2060word\ufeffbom", "bidi \u202eevil\u202c text \u200fRLM\u200eLRM",
    "tabs\tand\tvertical\x0btabs\x0cform feeds", "control \x00 \x01 \x1f \x7f chars", "nbsp\u00a0thin\u2009ideographic\u3000space",
    "line\u2028separator\u2029paragraph\u0085nel", "ogham\u1680space and narrow\u202fnbsp and \u205fmath space",
]
CODE = [
    "def foo(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "const f = async (a, b) => { await g(a?.b ?? c); };", "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "<html><body><div class=\"x\">Hi &amp; bye</div></body></html>", "{\"key\": [1, 2.5, -3e10, true, null], \"s\": \"\\u00e9\"}",
    "if __name__ == '__main__':\n    main()", "x = [i**2 for i in range(10) if i % 2 == 0]  # squares",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }", "    indented\n        more\n            most\n",
    "a\r\nb\r\n\r\nc\rd", "path/to/file.txt C:\\Windows\\System32 ~/.bashrc", "https://example.com/a?b=c&d=e#f",
    "user@example.com +1-555-0100 192.168.0.1 ::1 0xDEADBEEF 0b1010 1e-9", "$ ls -la | grep '^d' > out.txt 2>&1",
    "```python\nprint('hi')\n```", "// TODO: fix\n/* block */\n-- sql comment\n# shell", "a+=1;b-=2;c*=3;d/=4;e%=5;f**=6;g//=7",
    "   leading and trailing   ", "\n\nnewlines first", "trailing newlines\n\n\n",
]
SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>", "<pad>", "<bos>", "<eos>",
    "<start_of_turn>", "<end_of_turn>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
    "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<image_soft_token>", "<start_of_image>", "<mask>", "[INST]", "[/INST]", "<<SYS>>", "<0x41>", "<0xE2>",
    "<|reserved_special_token_5|>", "<unused0>", "<|im_start", "|im_end|>", "<s", "s>", "< s>", "<|im_start|", "<｜",
]
WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one "
         "had by word but not what all were we when your can said there use an each which she do how their "
         "if will up other about out many then them these so some her would make like him into time has look "
         "two more write go see number no way could people my than first water been call who oil its now find "
         "long down day did get come made may part tokenizer encode decode byte-level merges vocabulary").split()
NUMBERS = ["0", "7", "42", "123", "1234", "12345", "123456789", "3.14159", "-273.15", "1,000,000", "1e10",
           "2024-01-31", "12:34:56", "v1.2.3", "10%", "1/2", "007", "٠١٢٣٤٥", "१२३", "①②③", "Ⅻ", "½¾"]
SEPARATORS = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "", "    ", "\n\n\n", " \t "]
# Ranges for random code point strings: ASCII, Latin-1, combining marks, Greek, Cyrillic, Hebrew, Arabic,
# Devanagari, Thai, Hangul jamo and syllables, CJK, kana, emoji, modifiers, variation selectors, symbols.
CP_RANGES = [(0x20, 0x7e), (0xa0, 0xff), (0x100, 0x17f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff),
             (0x590, 0x5ff), (0x600, 0x6ff), (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0xac00, 0xd7a3),
             (0x4e00, 0x9fa5), (0x3040, 0x30ff), (0x1f300, 0x1f64f), (0x1f3fb, 0x1f3ff), (0xfe00, 0xfe0f),
             (0x2000, 0x206f), (0x2190, 0x22ff), (0xff00, 0xffef), (0x1e00, 0x1eff), (0x1d400, 0x1d4ff),
             (0x20000, 0x2000f), (0xe000, 0xe00f), (0x10ffff - 3, 0x10ffff)]
NFC_CASES = [
    "e\u0301", "E\u0301\u0327", "a\u0308\u0304", "o\u0302\u0303", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af",
    "\u212b", "\u2126 ohm", "A\u030a", "\u0041\u0328\u0301", "q\u0307\u0323", "\u0344", "\u0958\u0959", "\u2add\u0338",
    "\u00c5\u0301", "Vie\u0302\u0323t Nam", "\u1e9b\u0323", "\u0f73\u0f75", "\u30ab\u3099\u30cf\u309a", "\uac00\u11a8",
    "\u0915\u093c", "\u05e9\u05c1\u05bc", "\u0627\u0653", "i\u0307\u0301", "\u00e9\u0301\u0301", "\ufb01\u0301",
]
INVALID = [
    b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc2", b"\xc2A", b"\xe2\x82", b"\xe2\x82A", b"\xe2\x28\xa1",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x9f\x98", b"\xf0\x9f\x98 ok", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
    b"\xf8\x88\x80\x80\x80", b"\xfe\xff", b"\xff", b"abc\xffdef", b"caf\xe9", b"\xe0\x80\x80", b"\xf0\x80\x80\x80",
    b"<|im_start|>\xff<|im_end|>", b"<s>\xc3</s>", b"\xc3\xa9\xc3", b"\xe6\x97\xa5\xe6\x9c", b"\x80\x80\x80\x80",
    b"1\xff2\xfe3", b"  \xa0  ", b"\xef\xbb\xbf\xef\xbb", b"\xe2\x80\x8b\xe2\x80",
]


def _rand_cp_string(rng, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(CP_RANGES)
        c = rng.randint(lo, hi)
        if 0xd800 <= c <= 0xdfff:
            continue
        out.append(chr(c))
    return "".join(out)


def _fragment(rng):
    kind = rng.randrange(10)
    if kind < 3:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))
    if kind == 3:
        return rng.choice(NUMBERS)
    if kind == 4:
        return rng.choice(SPECIALS)
    if kind == 5:
        p = rng.choice(PHRASES)
        a = rng.randrange(len(p))
        return p[a:a + rng.randint(1, 40)]
    if kind == 6:
        return rng.choice(CODE)[: rng.randint(1, 60)]
    if kind == 7:
        return _rand_cp_string(rng, rng.randint(1, 8))
    if kind == 8:
        return rng.choice(NFC_CASES)
    w = rng.choice(WORDS)
    return rng.choice([w.upper(), w.capitalize(), w + "'s", w + "'LL", w + "n't", "'" + w + "'"])


def build_corpus():
    """Returns a list of byte strings; deterministic for a given script version."""
    rng = random.Random(20250131)
    texts = [""]
    texts += PHRASES + CODE + SPECIALS + NUMBERS + NFC_CASES
    texts += [" " + s for s in SPECIALS[:20]] + [s + " " for s in SPECIALS[:20]]
    texts += ["a" + s + "b" for s in SPECIALS[:20]] + [s + s for s in SPECIALS[:10]]
    texts += ["<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
              "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]", "<bos><start_of_turn>user\nhi<end_of_turn>\n",
              "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
              "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>\n</think>"]
    # Whitespace, newline and digit runs of many lengths.
    for n in [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 257]:
        texts += [" " * n, "\n" * n, "\t" * n, "x" + " " * n + "y", "a" + "\n" * n + "b", " \n" * n,
                  "1234567890"[: n % 10 + 1] * (n // 10 + 1), "9" * n, "\r\n" * n, "\u3000" * n]
    for spec in VARIANTS.values():
        for a in spec["added"]:
            c = a["content"]
            texts += [c, " " + c, c + " ", "  " + c + "  x", "a" + c + "b", c + c, "x " + c + " y",
                      "\t" + c + "\n", c.upper(), c.replace(" ", "  ")]
    texts += ["'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'d", "'ſ", "'K", "'\u212a", "x's y'S z'Ll", "'''", "don't"]
    for _ in range(1400):
        parts = [_fragment(rng) for _ in range(rng.randint(1, 6))]
        s = parts[0]
        for p in parts[1:]:
            s += rng.choice(SEPARATORS) + p
        texts.append(s)
    for _ in range(300):
        texts.append(_rand_cp_string(rng, rng.randint(1, 30)))
    long_text = " ".join(PHRASES + CODE) * 3
    texts += [long_text, long_text.replace(" ", "  "), " ".join(NUMBERS) * 40, "word " * 800,
              "".join(SPECIALS) * 5, "🙂" * 300, "中文" * 500, "a\u0301" * 200]
    seen, corpus = set(), []
    for t in texts:
        b = t.encode("utf-8")
        if b not in seen:
            seen.add(b)
            corpus.append(b)
    for b in INVALID:
        for v in (b, b"x" + b + b"y", b" " + b):
            if v not in seen:
                seen.add(v)
                corpus.append(v)
    return corpus


# ----------------------------------------------------------------------------------------------
# Reference tokenizers
# ----------------------------------------------------------------------------------------------
def _config_token(v):
    return v.get("content") if isinstance(v, dict) else v


def load_hf(folder):
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    cfg = json.load(open(cfg_path, encoding="utf-8")) if os.path.exists(cfg_path) else {}
    note = "tokenizer.json as is"
    cls = cfg.get("tokenizer_class")
    if cls in REBUILDS_POST_PROCESSOR:
        add_bos = cfg.get("add_bos_token", REBUILDS_POST_PROCESSOR[cls][0])
        add_eos = cfg.get("add_eos_token", REBUILDS_POST_PROCESSOR[cls][1])
        bos, eos = _config_token(cfg.get("bos_token")), _config_token(cfg.get("eos_token"))
        tok.post_processor = _template(tok, bos if add_bos else None, eos if add_eos else None)
        note = f"post-processor rebuilt as transformers {cls} does (add_bos={add_bos}, add_eos={add_eos})"
    return tok, note


def _template(tok, bos, eos):
    single = ([f"{bos}:0"] if bos else []) + ["$A:0"] + ([f"{eos}:0"] if eos else [])
    pair = single + ([f"{bos}:1"] if bos else []) + ["$B:1"] + ([f"{eos}:1"] if eos else [])
    special = [(t, tok.token_to_id(t)) for t in dict.fromkeys([x for x in (bos, eos) if x])]
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=special)


# Synthetic variants: a shared tokenizer.json with some components replaced and added tokens
# appended (ids follow the existing ones), covering options the real files do not use. The C++
# test applies the same patch (stored in the fixture's first line) to the same base file.
VARIANTS = {
    "llama2_variant": {
        "base": "llama2",
        "patch": {
            "normalizer": None,
            "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                              "split": True},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}},
                                          {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                               "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                        {"Sequence": {"id": "B", "type_id": 1}}],
                               "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                                  "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
        },
        "added": [
            {"content": "<mask>", "special": True, "lstrip": True, "rstrip": False, "single_word": False,
             "normalized": False},
            {"content": "<sep>", "special": True, "lstrip": False, "rstrip": True, "single_word": False,
             "normalized": False},
            {"content": "xqzw", "special": False, "lstrip": False, "rstrip": False, "single_word": True,
             "normalized": False},
            {"content": "hello world", "special": False, "lstrip": False, "rstrip": False,
             "single_word": False, "normalized": True},
            {"content": "\u00fcn\u00ef", "special": False, "lstrip": True, "rstrip": True,
             "single_word": False, "normalized": False},
            # Already in the model vocabulary: keeps its vocabulary id (so it comes last).
            {"content": "word", "special": False, "lstrip": False, "rstrip": False, "single_word": True,
             "normalized": False},
        ],
    },
    "qwen3_variant": {
        "base": "qwen3",
        "patch": {
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Strip", "strip_left": True, "strip_right": True},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
                {"type": "Replace", "pattern": {"String": "\t"}, "content": "    "},
                {"type": "NFC"}]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": False},
                {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithNext", "invert": False},
                {"type": "Split", "pattern": {"Regex": "[,;]"}, "behavior": "Removed", "invert": False},
                {"type": "Split", "pattern": {"Regex": "[!?]"}, "behavior": "Contiguous", "invert": False},
                {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "MergedWithPrevious", "invert": False},
                {"type": "Split", "pattern": {"Regex": "[aeiou]+"}, "behavior": "Isolated", "invert": True},
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]},
            "post_processor": {"type": "RobertaProcessing", "sep": ["<|im_end|>", 151645],
                               "cls": ["<|im_start|>", 151644], "trim_offsets": True, "add_prefix_space": True},
        },
        "added": [
            {"content": "Tok En", "special": False, "lstrip": False, "rstrip": False, "single_word": False,
             "normalized": True},
            {"content": "<rs>", "special": True, "lstrip": True, "rstrip": True, "single_word": False,
             "normalized": False},
            {"content": "don", "special": False, "lstrip": False, "rstrip": False, "single_word": True,
             "normalized": True},
        ],
    },
}


def load_variant(tokenizers_dir, spec):
    d = json.load(open(os.path.join(tokenizers_dir, spec["base"], "tokenizer.json"), encoding="utf-8"))
    d.update(spec["patch"])
    next_id = max(max(d["model"]["vocab"].values()), max(a["id"] for a in d["added_tokens"])) + 1
    for k, a in enumerate(spec["added"]):
        d["added_tokens"].append(dict(a, id=next_id + k))
    tok = Tokenizer.from_str(json.dumps(d))
    for a in d["added_tokens"][-len(spec["added"]):]:
        assert tok.token_to_id(a["content"]) in (a["id"], d["model"]["vocab"].get(a["content"])), a
    return tok, f"{spec['base']}/tokenizer.json patched as in this file's first line (no tokenizer_config)"


def read_gguf_vocab(path):
    from gguf import GGUFReader
    r = GGUFReader(path)
    get = lambda k: r.fields[k].contents() if k in r.fields else None
    return {k: get("tokenizer.ggml." + k) for k in
            ["model", "pre", "tokens", "token_type", "merges", "bos_token_id", "eos_token_id",
             "unknown_token_id", "padding_token_id", "add_bos_token", "add_eos_token"]}


def load_gguf_gpt2(path):
    v = read_gguf_vocab(path)
    assert v["model"] == "gpt2" and v["pre"] == "smollm", (v["model"], v["pre"])
    vocab = {t: i for i, t in enumerate(v["tokens"])}
    merges = [tuple(m.split(" ")) for m in v["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    types = v["token_type"]
    # Special: control tokens and bos/eos/unk/pad, as transformers registers them from a GGUF.
    named = {v[k] for k in ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id")
             if v[k] is not None}
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for i, (t, ty) in enumerate(zip(v["tokens"], types)) if ty == 3 or i in named])
    user = [AddedToken(t, special=False, normalized=False) for t, ty in zip(v["tokens"], types) if ty == 4]
    if user:
        tok.add_tokens(user)
    bos = v["tokens"][v["bos_token_id"]] if v["add_bos_token"] and v["bos_token_id"] is not None else None
    eos = v["tokens"][v["eos_token_id"]] if v["add_eos_token"] and v["eos_token_id"] is not None else None
    tok.post_processor = _template(tok, bos, eos)
    return tok, (f"built from GGUF data like SmolLM2's tokenizer.json: Digits(individual)+ByteLevel, "
                 f"add_bos={bool(v['add_bos_token'])}, add_eos={bool(v['add_eos_token'])}")


def as_text(b):
    return b.decode("utf-8", "replace")


def special_ids(tok):
    return sorted(i for i, a in tok.get_added_tokens_decoder().items() if a.special)


def random_id_sequences(tok, corpus, rng, count=400):
    vocab = tok.get_vocab(with_added_tokens=True)
    size = max(vocab.values()) + 1
    specials = special_ids(tok) or [0]
    inv = {i: t for t, i in vocab.items()}
    bytes_like = [i for t, i in vocab.items() if len(t) == 6 and t.startswith("<0x") and t.endswith(">")]
    bytes_like += [i for t, i in vocab.items() if len(t) == 1 and 0xa1 <= ord(t) <= 0x143 and ord(t) not in range(0xad, 0xae)]
    bytes_like.sort()  # get_vocab() order varies between runs
    seqs = []
    for _ in range(count):
        ids = []
        for _ in range(rng.randint(1, 16)):
            k = rng.randrange(10)
            if k < 4:
                ids.append(rng.randrange(size))
            elif k < 6:
                ids.append(rng.choice(specials))
            elif k < 8 and bytes_like:
                ids.append(rng.choice(bytes_like))
            else:
                enc = tok.encode(as_text(rng.choice(corpus)), add_special_tokens=False).ids
                if enc:
                    a = rng.randrange(len(enc))
                    ids.extend(enc[a:a + rng.randint(1, 4)])
        seqs.append([i for i in ids if i in inv])
    return seqs


def records(tok, corpus, rng, subset=None):
    """One json line per corpus entry, then per random id sequence. Omitted fields mean:
    'i' (corpus index) only when a subset is written; 'a' == prefix + n + suffix (header), 'd' == text, 's' == 'd' and 'da' == prefix_text + d + suffix_text
    ('da': 1 stands for prefix_text + " " + d + suffix_text)."""
    probe_a = tok.encode("hello", add_special_tokens=True).ids
    probe_n = tok.encode("hello", add_special_tokens=False).ids
    i = next(i for i in range(len(probe_a) - len(probe_n) + 1) if probe_a[i:i + len(probe_n)] == probe_n)
    prefix, suffix = probe_a[:i], probe_a[i + len(probe_n):]
    prefix_text = tok.decode(prefix, skip_special_tokens=False)
    suffix_text = tok.decode(suffix, skip_special_tokens=False)
    head = {"prefix": prefix, "suffix": suffix, "prefix_text": prefix_text, "suffix_text": suffix_text}
    lines = []
    for index, b in enumerate(corpus):
        if subset is not None and index not in subset:
            continue
        text = as_text(b)
        n = tok.encode(text, add_special_tokens=False).ids
        a = tok.encode(text, add_special_tokens=True).ids
        d = tok.decode(n, skip_special_tokens=False)
        s = tok.decode(a, skip_special_tokens=True)
        da = tok.decode(a, skip_special_tokens=False)
        rec = {"n": n} if subset is None else {"i": index, "n": n}
        if a != prefix + n + suffix:
            rec["a"] = a
        if d != text:
            rec["d"] = d
        if s != d:
            rec["s"] = s
        if da == prefix_text + " " + d + suffix_text:
            rec["da"] = 1
        elif da != prefix_text + d + suffix_text:
            rec["da"] = da
        lines.append(rec)
    for ids in random_id_sequences(tok, corpus, rng):
        lines.append({"r": ids, "d": tok.decode(ids, skip_special_tokens=False),
                      "s": tok.decode(ids, skip_special_tokens=True)})
    return head, lines


def _json_line(rec):
    """Compact JSON, UTF-8 kept, but with the characters some line readers split on escaped."""
    s = json.dumps(rec, ensure_ascii=False, separators=(",", ":"))
    return s.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\x85", "\\u0085") + "\n"


def write_jsonl(path, head, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(_json_line(head))
        for rec in lines:
            f.write(_json_line(rec))


def write_corpus(path, corpus):
    """One line per entry: {"t": text} when valid UTF-8, else {"x": hex of the raw bytes}."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for b in corpus:
            try:
                rec = {"t": b.decode("utf-8")}
            except UnicodeDecodeError:
                rec = {"x": b.hex()}
            f.write(_json_line(rec))


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


# ----------------------------------------------------------------------------------------------
# transformers' GGUF loader, as a cross-check of the GGUF reference
# ----------------------------------------------------------------------------------------------
def llama_gguf_from_hf(folder):
    """tokenizer.ggml.* data for a SentencePiece ("llama") GGUF made from an HF llama tokenizer.json:
    tokens by id; types 3 (control) for special added tokens, 6 for <0xAB>, 2 for <unk>, 1 else;
    scores -id for normal tokens, 0 for the rest (SentencePiece scores fall with the merge rank).
    tests/tokenizer applies the same rule to the same file."""
    d = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8"))
    vocab = d["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    special = {a["content"] for a in d["added_tokens"] if a["special"]}
    types, scores = [], []
    for i, t in enumerate(tokens):
        ty = 3 if t in special and t != "<unk>" else 2 if t == "<unk>" else \
            6 if len(t) == 6 and t.startswith("<0x") and t.endswith(">") else 1
        types.append(ty)
        scores.append(float(-i) if ty == 1 else 0.0)
    return {"tokens": tokens, "types": types, "scores": scores, "bos": vocab["<s>"], "eos": vocab["</s>"],
            "unk": vocab["<unk>"]}


def write_llama_gguf(path, v):
    from gguf import GGUFWriter
    w = GGUFWriter(path, "llama")
    w.add_context_length(4096)
    w.add_block_count(1)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(v["tokens"])
    w.add_token_scores(v["scores"])
    w.add_token_types(v["types"])
    w.add_bos_token_id(v["bos"])
    w.add_eos_token_id(v["eos"])
    w.add_unk_token_id(v["unk"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_corpus(path):
    out = []
    for line in open(path, encoding="utf-8"):
        rec = json.loads(line)
        out.append(rec["t"].encode("utf-8") if "t" in rec else bytes.fromhex(rec["x"]))
    return out


def transformers_gguf_records(gguf_path, corpus_path, name, out_path):
    """Runs under a Python with transformers 4.x: fixture records from the tokenizer transformers
    builds for a GGUF (its backend, so decodes carry no clean_up_tokenization_spaces)."""
    import transformers
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers import AutoTokenizer
    gguf_utils.is_torch_available = lambda: True  # metadata-only load; torch is not needed
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(gguf_path)),
                                        gguf_file=os.path.basename(gguf_path)).backend_tokenizer
    head, lines = records(tok, read_corpus(corpus_path), random.Random(name))
    head["transformers"] = transformers.__version__
    head["tokenizers"] = tokenizers.__version__
    write_jsonl(out_path, head, lines)


def llama_gguf_fixture(python, tokenizers_dir, corpus_path, out_path):
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        gguf_path = os.path.join(tmp, "llama2-vocab.gguf")
        write_llama_gguf(gguf_path, llama_gguf_from_hf(os.path.join(tokenizers_dir, "llama2")))
        run_transformers_records(python, gguf_path, corpus_path, "llama2_gguf", out_path)
    head = json.loads(open(out_path, encoding="utf-8").readline())
    return f"transformers {head['transformers']} (tokenizers {head['tokenizers']}) loading a llama GGUF " \
           f"made from llama2/tokenizer.json (types and scores: see llama_gguf_from_hf)"


def run_transformers_records(python, gguf_path, corpus_path, name, out_path):
    import subprocess
    r = subprocess.run([python, os.path.abspath(__file__), "--gguf-records", out_path, "--gguf", gguf_path,
                        "--corpus", corpus_path, "--name", name], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1:])


def crosscheck_gguf(python, ref_path, gguf_path, corpus_path):
    """Compares our GGUF reference records with transformers' for the same GGUF."""
    tmp = ref_path + ".transformers"
    try:
        run_transformers_records(python, gguf_path, corpus_path, "crosscheck", tmp)
    except RuntimeError as e:
        return {"status": "skipped", "reason": str(e)}
    texts = [as_text(b) for b in read_corpus(corpus_path)]
    (ref_head, *ref), (tf_head, *tf) = [[json.loads(l) for l in open(p, encoding="utf-8")] for p in (ref_path, tmp)]
    os.remove(tmp)

    def expand(head, rec, text):
        n = rec["n"]
        d = rec.get("d", text)
        return {"ids_without_special": n, "ids_with_special": rec.get("a", head["prefix"] + n + head["suffix"]),
                "decode": d, "decode_skip_special": rec.get("s", d)}
    diff = dict.fromkeys(["ids_without_special", "ids_with_special", "decode", "decode_skip_special"], 0)
    examples = []
    for text, r, t in zip(texts, ref, tf):
        x, y = expand(ref_head, r, text), expand(tf_head, t, text)
        for key in diff:
            if x[key] != y[key]:
                diff[key] += 1
                if key == "ids_without_special" and len(examples) < 5:
                    examples.append(text)
    return {"status": "compared", "transformers": tf_head["transformers"], "rows": len(texts),
            "mismatches": diff, "examples": examples,
            "known_causes": "transformers' GGUF converter uses ByteLevel(use_regex) without Digits(individual) "
                            "and always adds BOS (it ignores tokenizer.ggml.add_bos_token)"}


def _ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def _onig_class(pattern, cps):
    """Code points that a one-character Oniguruma class matches, as tokenizers' Split sees them."""
    from tokenizers import Regex
    split = pre_tokenizers.Split(Regex(pattern), "removed")
    out = set()
    for i in range(0, len(cps), 4096):
        chunk = cps[i:i + 4096]
        kept = [False] * len(chunk)
        for _, (a, b) in split.pre_tokenize_str("".join(map(chr, chunk))):
            kept[a:b] = [True] * (b - a)
        out.update(c for c, k in zip(chunk, kept) if not k)
    return out


def _rust_numeric(cps):
    """Code points Digits(individual_digits) isolates (Rust char::is_numeric)."""
    digits = pre_tokenizers.Digits(individual_digits=True)
    out = set()
    for i in range(0, len(cps), 4096):
        chunk = cps[i:i + 4096]
        for _, (a, b) in digits.pre_tokenize_str("x" + "x".join(map(chr, chunk)) + "x"):
            if b - a == 1 and a % 2 == 1:
                out.add(chunk[(a - 1) // 2])
    return out


def write_unicode_tables(src_dir):
    """Writes src/tokenizer/unicode_nfc_data.inc and unicode_class_data.inc: the Unicode data as
    tokenizers applies it, which is not Python's (or PCRE2's) Unicode version: NFC from an older
    table, regex classes from Oniguruma's newer one, Digits from Rust's."""
    import unicodedata
    from tokenizers import normalizers
    nfc, nfd = normalizers.NFC(), normalizers.NFD()
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    stamp = (f"// Generated by tools/make_tokenizer_fixtures.py --write-unicode-tables from Python "
             f"{sys.version.split()[0]} unicodedata (Unicode {unicodedata.unidata_version}) and tokenizers "
             f"{tokenizers.__version__}. Do not edit.\n")

    def hf_knows_ccc(c, k):
        if k > 1:  # a lower class after it must move in front
            return nfd.normalize_str("a" + chr(c) + "\u0334") == "a\u0334" + chr(c)
        return nfd.normalize_str("a\u0301" + chr(c)) == "a" + chr(c) + "\u0301"

    ccc, decomp = [], []
    for cp in cps:
        c = chr(cp)
        if 0xAC00 <= cp <= 0xD7A3:
            continue  # Hangul syllables are algorithmic
        d = unicodedata.decomposition(c)
        canonical = bool(d) and not d.startswith("<")
        k = unicodedata.combining(c)
        if k and (canonical or hf_knows_ccc(cp, k)):
            if ccc and ccc[-1][1] == cp - 1 and ccc[-1][2] == k:
                ccc[-1][1] = cp
            else:
                ccc.append([cp, cp, k])
        if canonical and nfd.normalize_str(c) != c:
            parts = [int(x, 16) for x in d.split()]
            decomp.append((cp, parts[0], parts[1] if len(parts) > 1 else 0, int(nfc.normalize_str(c) != c)))
    with open(os.path.join(src_dir, "unicode_nfc_data.inc"), "w", encoding="utf-8", newline="\n") as f:
        f.write(stamp)
        f.write("// Only what tokenizers' NFC knows. kCombiningClass: {first, last, ccc}; kDecomposition: "
                "{cp, first, second (0: singleton), excluded from composition}.\n")
        f.write("static constexpr CccRange kCombiningClass[] = {\n")
        for i in range(0, len(ccc), 6):
            f.write("  " + " ".join("{0x%X,0x%X,%d}," % tuple(r) for r in ccc[i:i + 6]) + "\n")
        f.write("};\nstatic constexpr Decomposition kDecomposition[] = {\n")
        for i in range(0, len(decomp), 5):
            f.write("  " + " ".join("{0x%X,0x%X,0x%X,%d}," % r for r in decomp[i:i + 5]) + "\n")
        f.write("};\n")

    # Regex classes: Oniguruma's sets minus what PCRE2 (Unicode as in Python here) already has.
    def py_class(letter):
        return {c for c in cps if unicodedata.category(chr(c))[0] == letter}
    classes = [("Space", _onig_class(r"\s", cps), None)]
    for letter in "LNPSM":
        classes.append((letter, _onig_class(r"\p{%s}" % letter, cps), py_class(letter)))
    classes.append(("RustNumeric", _rust_numeric(cps), py_class("N")))
    with open(os.path.join(src_dir, "unicode_class_data.inc"), "w", encoding="utf-8", newline="\n") as f:
        f.write(stamp)
        f.write("// Regex classes as tokenizers matches them. kSpace: all of \\s; the others: code points to add "
                "to PCRE2's \\p{X} (whose Unicode is older), as {first, last} ranges.\n")
        for name, onig, base in classes:
            if base is not None and base - onig:
                raise SystemExit(f"{name}: PCRE2's class has code points tokenizers' lacks")
            rs = _ranges(onig if base is None else onig - base)
            f.write(f"static constexpr CodeRange k{name}{'' if base is None else 'Extra'}[] = {{\n")
            for i in range(0, len(rs), 6):
                f.write("  " + " ".join("{0x%X,0x%X}," % tuple(r) for r in rs[i:i + 6]) + "\n")
            f.write("};\n")


# ----------------------------------------------------------------------------------------------
# Every code point through the regex pre-tokenizers and NFC (Oniguruma and the Unicode tables of
# tokenizers vs PCRE2 and ours)
# ----------------------------------------------------------------------------------------------
def probe_text(c):
    """A short string that puts code point c next to letters, digits, spaces, newlines, an
    apostrophe, combining marks and itself."""
    return "a" + c + "1" + c + c + " " + c + "\u0301\n" + c + "'" + c + "\u0327"


def unicode_probe(pipelines):
    """pipelines: name -> tokenizers.Tokenizer. Writes, per pipeline, the piece lengths (in bytes)
    of normalize + pre_tokenize over probe_text(c) as run-length ranges over c, and the NFC of
    probe_text(c) wherever it differs."""
    from tokenizers import normalizers
    nfc = normalizers.NFC()
    out = {"probe": "a{c}1{c}{c} {c}\u0301\\n{c}'{c}\u0327", "nfc": [], "pre_tokenizers": {}}
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    for cp in cps:
        t = probe_text(chr(cp))
        n = nfc.normalize_str(t)
        if n != t:
            out["nfc"].append([cp, n])
    for name, tok in pipelines.items():
        sigs, index, ranges, last = [], {}, [], None
        normalizer, pre = tok.normalizer, tok.pre_tokenizer
        assert "ByteLevel" in json.dumps(json.loads(tok.to_str())["pre_tokenizer"])  # 1 char per byte
        for cp in cps:
            t = probe_text(chr(cp))
            if normalizer is not None:
                t = normalizer.normalize_str(t)
            sig = tuple(len(p) for p, _ in pre.pre_tokenize_str(t))
            if sig not in index:
                index[sig] = len(sigs)
                sigs.append(list(sig))
            if index[sig] != last:
                ranges.append([cp, index[sig]])
                last = index[sig]
        out["pre_tokenizers"][name] = {"signatures": sigs, "ranges": ranges}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers", default="../shared/tokenizers")
    ap.add_argument("--gguf", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default="fixtures/tokenizer")
    ap.add_argument("--crosscheck-python", default="",
                    help="a Python with transformers 4.x + gguf for the GGUF cross-check")
    ap.add_argument("--corpus", default="")
    ap.add_argument("--gguf-records", default="")
    ap.add_argument("--name", default="")
    ap.add_argument("--write-unicode-tables", default="",
                    help="write unicode_nfc_data.inc and unicode_class_data.inc into this folder and exit")
    args = ap.parse_args()
    if args.write_unicode_tables:
        return write_unicode_tables(args.write_unicode_tables)
    if args.gguf_records:
        return transformers_gguf_records(args.gguf, args.corpus, args.name, args.gguf_records)

    os.makedirs(args.out, exist_ok=True)
    corpus = build_corpus()
    corpus_path = os.path.join(args.out, "corpus.jsonl")
    write_corpus(corpus_path, corpus)
    manifest = {
        "tool": "huggingface tokenizers", "version": tokenizers.__version__, "tolerance": "exact",
        "generator": "tools/make_tokenizer_fixtures.py",
        "corpus": {"file": "corpus.jsonl", "count": len(corpus),
                   "invalid_utf8": sum(1 for b in corpus if _invalid(b)), "sha256": sha256(corpus_path)},
        "invalid_utf8_policy": "input bytes are decoded with Python's bytes.decode('utf-8', 'replace') "
                               "(maximal ill-formed subpart -> U+FFFD) before encoding",
        "decode": "tokenizers Tokenizer.decode; no clean_up_tokenization_spaces",
        "line_format": "first line {prefix, suffix, prefix_text, suffix_text}; then per corpus entry "
                       "{i?, n, a?, d?, s?, da?} (i: corpus index, present when only a subset is listed); "
                       "then {r, d, s} random id sequences. n=encode(add_special_tokens=False), "
                       "a=encode(add_special_tokens=True) (omitted: prefix+n+suffix), d=decode(n, skip=False) "
                       "(omitted: the text), s=decode(a, skip=True) (omitted: d), da=decode(a, skip=False) "
                       "(omitted: prefix_text+d+suffix_text; 1: prefix_text+' '+d+suffix_text)",
        "tokenizers": {},
    }
    sources = [(n, lambda n=n: load_hf(os.path.join(args.tokenizers, n)),
                f"{n}/tokenizer.json") for n in HF_NAMES]
    sources += [(n, lambda spec=spec: load_variant(args.tokenizers, spec), f"{spec['base']}/tokenizer.json + patch")
                for n, spec in VARIANTS.items()]
    sources.append(("smollm2_gguf", lambda: load_gguf_gpt2(args.gguf), os.path.basename(args.gguf)))
    loaded = {}
    for name, loader, source in sources:
        try:
            tok, note = loader()
        except Exception as e:  # a missing input is reported, not fatal
            print(f"skip {name}: {e}", file=sys.stderr)
            continue
        subset = None
        if name in VARIANTS:  # every third string and those with the variant's added tokens
            contents = [a["content"] for a in VARIANTS[name]["added"]]
            subset = {i for i, b in enumerate(corpus)
                      if i % 3 == 0 or any(c.encode("utf-8") in b or c.upper().encode("utf-8") in b
                                           for c in contents)}
        head, lines = records(tok, corpus, random.Random(name), subset)
        if name in VARIANTS:
            head["variant"] = VARIANTS[name]
        path = os.path.join(args.out, f"{name}.jsonl")
        write_jsonl(path, head, lines)
        entry = {"file": f"{name}.jsonl", "source": source, "reference": note, "sha256": sha256(path)}
        if name == "smollm2_gguf":
            entry["gguf_crosscheck"] = (crosscheck_gguf(args.crosscheck_python, path, args.gguf, corpus_path)
                                        if args.crosscheck_python
                                        else {"status": "skipped", "reason": "no --crosscheck-python"})
        manifest["tokenizers"][name] = entry
        loaded[name] = tok
        print(f"{name}: {len(lines)} lines, {os.path.getsize(path)} bytes", file=sys.stderr)
    path = os.path.join(args.out, "llama2_gguf.jsonl")
    try:
        if not args.crosscheck_python:
            raise RuntimeError("needs --crosscheck-python (transformers 4.x)")
        note = llama_gguf_fixture(args.crosscheck_python, args.tokenizers, corpus_path, path)
        manifest["tokenizers"]["llama2_gguf"] = {"file": "llama2_gguf.jsonl", "source": "llama2/tokenizer.json "
                                                 "as a llama GGUF", "reference": note, "sha256": sha256(path)}
        print(f"llama2_gguf: {os.path.getsize(path)} bytes", file=sys.stderr)
    except Exception as e:  # keep the previous file and manifest entry
        print(f"llama2_gguf not regenerated: {e}", file=sys.stderr)
        old = os.path.join(args.out, "manifest.json")
        if os.path.exists(old) and "llama2_gguf" in json.load(open(old))["tokenizers"]:
            manifest["tokenizers"]["llama2_gguf"] = json.load(open(old))["tokenizers"]["llama2_gguf"]
    probes = {n: t for n, t in loaded.items() if n in ("llama3", "qwen3", "deepseek_v3", "smollm2_gguf")}
    if probes:
        path = os.path.join(args.out, "unicode_probe.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(unicode_probe(probes), f, ensure_ascii=True, separators=(",", ":"))
        manifest["unicode_probe"] = {"file": "unicode_probe.json", "pipelines": sorted(probes),
                                     "sha256": sha256(path),
                                     "what": "normalizer + pre_tokenizer piece lengths over probe(c) for "
                                             "every code point c, run-length encoded; NFC(probe(c)) where "
                                             "it differs from probe(c)"}
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")


def _invalid(b):
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


if __name__ == "__main__":
    main()
