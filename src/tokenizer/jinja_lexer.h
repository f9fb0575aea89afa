// Splits template source into text and tag tokens exactly as jinja2's lexer does under HF's
// settings (trim_blocks, lstrip_blocks, one trailing newline dropped, newlines normalised).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::jinja {

enum class TokenKind { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Integer, Float,
                       Operator, Eof };

struct Token {
  TokenKind kind;
  std::string value;   // text for Data/Name/Operator, decoded contents for String
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0.0;
};

// Throws vllm::Error ("unsupported construct ... at line N") on malformed tags.
std::vector<Token> tokenize(std::string_view source);

}  // namespace vllm::jinja
