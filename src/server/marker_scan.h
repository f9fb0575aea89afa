// Small text scans shared by the streaming parsers of model output (tool calls, reasoning),
// which must hold back a tail that may be the start of a marker until the next delta decides.
#pragma once
#include <algorithm>
#include <cstddef>
#include <string_view>

namespace vllm::server {

// JSON's whitespace (and what the tool-call formats allow between their markers).
inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// How many trailing bytes of `t` could be the start of `marker` (kept back while streaming).
inline size_t held_back(std::string_view t, std::string_view marker) {
  for (size_t n = std::min(t.size(), marker.size() - 1); n > 0; --n)
    if (t.substr(t.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace vllm::server
