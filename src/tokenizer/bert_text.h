// BERT's text steps of tokenizer.json: BertNormalizer (clean_text, handle_chinese_chars,
// strip_accents, lowercase) and BertPreTokenizer (split on whitespace, isolate punctuation),
// character by character as tokenizers does, over tables probed from tokenizers itself
// (unicode_bert_data.inc, tools/make_bert_unicode_tables.py).
#pragma once
#include <memory>
#include <optional>

#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace vllm::tok {

struct BertNormalizerOptions {
  bool clean_text = true;            // drop control/format chars, NUL, U+FFFD; whitespace -> ' '
  bool handle_chinese_chars = true;  // a space on each side of every CJK ideograph
  std::optional<bool> strip_accents;  // NFD minus nonspacing marks; unset: follows lowercase
  bool lowercase = true;
};

std::unique_ptr<Normalizer> make_bert_normalizer(const BertNormalizerOptions& options);
std::unique_ptr<PreTokenizer> make_bert_pre_tokenizer();

}  // namespace vllm::tok
