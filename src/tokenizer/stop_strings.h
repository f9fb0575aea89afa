// vLLM's stop strings over a completion's growing text: where a stop string ends the text, and
// how much of the text is final while a tail could still grow into one. Pure functions on the
// text, called by EngineCore each step and by tests/fuzz.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace vllm {

// Looks for each of `stops` in turn (their order, as vLLM does) in `text` from byte `from`; at
// the first found, cuts `text` after the stop (`include_stop`) or before it and returns it.
// nullptr when none is there.
const std::string* cut_at_stop_string(std::string& text, size_t from,
                                      const std::vector<std::string>& stops, bool include_stop);

// The end of the text that is final: all of it when `final`, else all but the last
// `max_stop` - 1 bytes (a stop string may still complete there), moved back so that no UTF-8
// character is split, and never before `emitted`.
size_t final_text_end(const std::string& text, size_t emitted, size_t max_stop, bool final);

}  // namespace vllm
