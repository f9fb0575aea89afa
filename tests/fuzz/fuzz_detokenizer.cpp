// The streaming detokenizer and the stop-string logic of EngineCore::step, as one request's
// tokens arrive in steps of varying size. Input: byte 0 flags (tokenizer, skip_special_tokens,
// include_stop_str_in_output, context length, step sizes), then stop strings separated by
// 0x01 up to a NUL, then ids (3 bytes each, as fuzz_tokenizer). Checks:
// - the deltas put together are the final text, each delta valid UTF-8;
// - without a stop: the text holds no stop, and without context it is decode(ids) (the
//   detokenizer's contract);
// - with one stop string: the text ends at it (or just before it) and holds no other copy.
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer/unicode.h"

namespace {

struct Tokenizers {
  std::unique_ptr<vllm::Tokenizer> t[2] = {vllm::fuzz::load_shared_tokenizer("llama3"),
                                           vllm::fuzz::load_shared_tokenizer("llama2")};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using vllm::fuzz::fail;
  static Tokenizers toks;
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const vllm::Tokenizer& tok = *toks.t[flags & 1];
  const bool skip_special = flags & 2, include_stop = flags & 4;
  const size_t num_context = (flags >> 3) & 3;
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto [stop_part, id_part] = vllm::fuzz::split(in, '\0');
  std::vector<std::string> stops;
  for (std::string_view rest = stop_part; !rest.empty() && stops.size() < 4;) {
    const auto [s, tail] = vllm::fuzz::split(rest, '\x01');
    // The server refuses empty stop strings, and JSON strings are valid UTF-8.
    if (!s.empty() && vllm::tok::utf8_is_valid(s)) stops.emplace_back(s);
    if (tail.data() == nullptr || tail.empty()) break;
    rest = tail;
  }
  size_t max_stop = 0;
  for (const auto& s : stops) max_stop = std::max(max_stop, s.size());

  std::vector<int32_t> all = vllm::fuzz::fuzz_ids(id_part, tok.vocab_size());
  const size_t nctx = std::min(num_context * 3, all.size());
  const std::vector<int32_t> context(all.begin(), all.begin() + nctx);
  const std::vector<int32_t> ids(all.begin() + nctx, all.end());

  vllm::IncrementalDetokenizer detok(tok, skip_special, context);
  std::string text, deltas;
  size_t emitted = 0, i = 0, step = 0;
  const std::string* stop = nullptr;
  bool done = ids.empty();
  while (!done || i == 0) {
    // Steps of 1 to 4 tokens, in a pattern set by the flags (one token per step is decode;
    // more is the first step after a prefill or speculative tokens).
    const size_t n = flags & 0x80 ? 1 + ((flags >> 5) + step++) % 4 : 1;
    for (size_t k = 0; k < n && i < ids.size(); ++k) text += detok.push(ids[i++]);
    done = i >= ids.size();
    if (done) text += detok.finish();
    if ((stop = vllm::cut_at_stop_string(text, emitted, stops, include_stop))) done = true;
    if (text.size() < emitted) fail("the text shrank below what was emitted");
    const size_t end = vllm::final_text_end(text, emitted, max_stop, done);
    if (end > text.size()) fail("final_text_end past the text");
    if (end > emitted) {
      const std::string delta = text.substr(emitted, end - emitted);
      if (!vllm::tok::utf8_is_valid(delta)) {
        std::string hex;
        for (unsigned char c : delta) hex += std::to_string(c) + " ";
        fail("a delta is not valid UTF-8: " + hex + " (text " + std::to_string(text.size()) +
             " bytes, emitted " + std::to_string(emitted) + ", end " + std::to_string(end) + ")");
      }
      deltas += delta;
      emitted = end;
    }
    if (ids.empty()) break;
  }
  if (deltas != text) fail("the deltas are not the final text");
  if (!stop) {
    // Context ids may change the text (a SentencePiece leading space survives): compare
    // without them.
    if (context.empty() && text != tok.decode(ids, skip_special))
      fail("streamed text != decode(ids)");
    for (const auto& s : stops)
      if (text.find(s) != std::string::npos) fail("the text holds a stop string: " + s);
  } else if (stops.size() == 1) {
    const size_t first = text.find(*stop);
    if (include_stop ? first != text.size() - stop->size() : first != std::string::npos)
      fail("the text does not end at its stop string");
  }
  return 0;
}
