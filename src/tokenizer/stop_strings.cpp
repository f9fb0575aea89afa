#include "tokenizer/stop_strings.h"

namespace vllm {

const std::string* cut_at_stop_string(std::string& text, size_t from,
                                      const std::vector<std::string>& stops, bool include_stop) {
  for (const std::string& stop : stops) {
    const size_t pos = text.find(stop, from);
    if (pos == std::string::npos) continue;
    text.resize(include_stop ? pos + stop.size() : pos);
    return &stop;
  }
  return nullptr;
}

size_t final_text_end(const std::string& text, size_t emitted, size_t max_stop, bool final) {
  size_t end = text.size();
  if (!final && max_stop > 1) {
    end = text.size() >= max_stop - 1 ? text.size() - (max_stop - 1) : 0;
    while (end > emitted && end < text.size() && (text[end] & 0xC0) == 0x80) --end;
  }
  return end;
}

}  // namespace vllm
