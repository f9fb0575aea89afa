// Structural tags (vLLM's response_format / structured_outputs `structural_tag`, the form with
// `structures` and `triggers`, as xgrammar compiles it): free text until a trigger string
// appears; a trigger commits the output to one of the structures whose `begin` starts with it:
// the rest of `begin`, JSON matching the structure's `schema`, then `end`; then free text again.
// Free text is any valid UTF-8 that does not contain a trigger; it may contain a trigger's
// proper prefix (an Aho-Corasick automaton over the triggers tracks how much of one is
// pending, so nothing commits before a whole trigger is there). The output may end wherever
// free text may end, not inside a structure.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar.h"
#include "structured/json_schema.h"

namespace vllm::structured {

struct TagStructure {
  std::string begin;
  std::string schema;  // JSON Schema text
  std::string end;
};

// Throws vllm::Error naming what is wrong (no triggers, an empty trigger, a begin that starts
// with no trigger, a schema that does not compile).
Symbol structural_tag_grammar(GrammarBuilder& g, const std::vector<TagStructure>& structures,
                              const std::vector<std::string>& triggers,
                              const JsonOptions& options = {});

// The same from JSON text: {"structures": [{"begin", "schema", "end"}], "triggers": [...]}
// (vLLM's legacy structural tag), or xgrammar's newer {"format": ...} form where it says the
// same thing: a "triggered_tags" format of "tag"s with "json_schema" content, at_least_one and
// stop_after_first false. Any other format is an Error naming what is not supported.
Symbol structural_tag_to_grammar(GrammarBuilder& g, std::string_view tag_json,
                                 const JsonOptions& options = {});

}  // namespace vllm::structured
