"""Writes a small byte-level BPE tokenizer.json (HF `tokenizers`) of exactly the tiny
checkpoints' vocabulary size (384) into fixtures/tiny/<arch>/, so that `vllm-cpp serve` can
start on those random-weight models. The vocabulary carries no meaning: the tests send token
ids and compare token ids with transformers' (reference.json); text only has to round-trip.

    .venv/bin/python tools/make_tiny_tokenizer.py deepseek_v2 deepseek_v3 qwen3_moe
"""
import json
import pathlib
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORPUS = [
    "Once upon a time there was a tiny model with random weights.",
    "The quick brown fox jumps over the lazy dog, again and again.",
    "Multi-head latent attention caches one row per token.",
    "Experts are chosen by a router; the best ones run for each token.",
] * 8


def build(vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    if tok.get_vocab_size() != vocab_size:
        raise SystemExit(f"trained {tok.get_vocab_size()} tokens, wanted {vocab_size}")
    return tok


def main(archs):
    for arch in archs:
        d = ROOT / "fixtures" / "tiny" / arch
        vocab = json.loads((d / "config.json").read_text())["vocab_size"]
        build(vocab).save(str(d / "tokenizer.json"))
        print(f"{d / 'tokenizer.json'}: {vocab} tokens")


if __name__ == "__main__":
    main(sys.argv[1:] or ["deepseek_v2", "deepseek_v3", "qwen3_moe"])
