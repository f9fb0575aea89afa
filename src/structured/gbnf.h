// GBNF / EBNF front end (llama.cpp's grammar format): `name ::= alternatives` rules, "string"
// and [class] terminals (code points, escapes \n \t \r \\ \" \xHH \uHHHH), '.', groups,
// * + ? {m} {m,} {m,n}, # comments; the start rule is `root`. Errors name the line.
#pragma once
#include <string_view>

#include "structured/grammar.h"

namespace vllm::structured {

Symbol gbnf_to_grammar(GrammarBuilder& g, std::string_view text);

}  // namespace vllm::structured
