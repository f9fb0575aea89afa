// Tokenizer encode and decode on real tokenizers (../shared/tokenizers: llama3 byte-level BPE,
// llama2 SentencePiece BPE with byte fallback, qwen3 with an NFC normalizer), loaded once.
// Input: byte 0 picks the tokenizer and the mode, the rest is text (encode) or ids (decode).
// Checks: ids are in the vocabulary, and for llama3 (no normalizer) valid UTF-8 text
// survives encode then decode unchanged.
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/unicode.h"

namespace {

struct Tokenizers {
  std::unique_ptr<vllm::Tokenizer> t[3] = {vllm::fuzz::load_shared_tokenizer("llama3"),
                                           vllm::fuzz::load_shared_tokenizer("llama2"),
                                           vllm::fuzz::load_shared_tokenizer("qwen3")};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Tokenizers toks;
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const vllm::Tokenizer& tok = *toks.t[(sel & 3) % 3];
  const bool decode_mode = sel & 4, flag = sel & 8;
  ++data, --size;
  if (decode_mode) {
    const std::vector<int32_t> ids =
        vllm::fuzz::fuzz_ids({reinterpret_cast<const char*>(data), size}, tok.vocab_size());
    (void)tok.decode(ids, flag);
    return 0;
  }
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tok.encode(text, flag);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size())
      vllm::fuzz::fail("encode gave id " + std::to_string(id) + " outside the vocabulary");
  const std::string back = tok.decode(ids, false);
  if ((sel & 3) == 0 && !flag && vllm::tok::utf8_is_valid(text) && back != text)
    vllm::fuzz::fail("llama3: decode(encode(text)) != text");
  return 0;
}
