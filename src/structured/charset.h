// Code point sets as grammar symbols: a set of Unicode scalar values becomes a rule matching
// exactly their UTF-8 encodings (byte-class sequences), shared by the regex and JSON front ends.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "structured/grammar.h"

namespace vllm::structured {

using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Sorted, merged, surrogates removed.
CodepointRanges normalize(CodepointRanges r);
CodepointRanges complement(const CodepointRanges& r);
// One code point of the set, UTF-8 encoded. An empty set is an error naming `what`.
Symbol codepoints(GrammarBuilder& g, const CodepointRanges& r, const std::string& what);
std::string utf8_encode(uint32_t cp);
// The Unicode classes of Rust's regex (llguidance's): 'd' \p{Nd}; 's' White_Space; 'w'
// Alphabetic, marks, Nd, Pc and Join_Control. Computed once per process.
const CodepointRanges& unicode_class(char which);

}  // namespace vllm::structured
