// Tokenizer encode and decode on real tokenizers (../shared/tokenizers: llama3 byte-level BPE,
// llama2 SentencePiece BPE with byte fallback, qwen3 with an NFC normalizer), loaded once.
// Input: byte 0 picks the tokenizer and the mode, the rest is text (encode) or ids (decode).
// Checks: ids are in the vocabulary, and for llama3 (no normalizer) valid UTF-8 text
// survives encode then decode unchanged.
#include <vector>

#include "fuzz_util.h"

namespace {

struct Tokenizers {
  std::unique_ptr<vllm::Tokenizer> t[3] = {vllm::fuzz::load_shared_tokenizer("llama3"),
                                           vllm::fuzz::load_shared_tokenizer("llama2"),
                                           vllm::fuzz::load_shared_tokenizer("qwen3")};
};

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n;
  }
  return true;
}

// Ids from bytes, 3 per id: mostly inside the vocabulary, sometimes negative or far outside.
std::vector<int32_t> fuzz_ids(const uint8_t* data, size_t size, int32_t vocab) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 3 <= size; i += 3) {
    const uint32_t v = data[i] | (data[i + 1] << 8) | (uint32_t(data[i + 2]) << 16);
    if (data[i + 2] == 0xFF)
      ids.push_back(data[i + 1] & 1 ? -1 - data[i] : INT32_MAX - data[i]);
    else
      ids.push_back(static_cast<int32_t>(v % uint32_t(vocab + 4)));
  }
  return ids;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Tokenizers toks;
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const vllm::Tokenizer& tok = *toks.t[(sel & 3) % 3];
  const bool decode_mode = sel & 4, flag = sel & 8;
  ++data, --size;
  if (decode_mode) {
    const std::vector<int32_t> ids = fuzz_ids(data, size, tok.vocab_size());
    (void)tok.decode(ids, flag);
    return 0;
  }
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tok.encode(text, flag);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size())
      vllm::fuzz::fail("encode gave id " + std::to_string(id) + " outside the vocabulary");
  const std::string back = tok.decode(ids, false);
  if ((sel & 3) == 0 && !flag && valid_utf8(text) && back != text)
    vllm::fuzz::fail("llama3: decode(encode(text)) != text");
  return 0;
}
