// Regex front end: a practical subset of Python / Rust regex syntax (literals, classes with
// ranges and negation, escapes \d \w \s \D \W \S \n \t \xHH \uHHHH, '.', groups (, (?:,
// alternation, ? * + {m} {m,} {m,n} and their lazy forms, ^ and $ at the ends) to a grammar
// symbol matching the whole text. Code points, not bytes: '.' and negated classes match UTF-8.
// \d \w \s are Unicode, as in Rust's regex. Anything else is an Error naming the construct.
#pragma once
#include <string_view>

#include "structured/grammar.h"

namespace vllm::structured {

Symbol regex_to_grammar(GrammarBuilder& g, std::string_view pattern);

}  // namespace vllm::structured
