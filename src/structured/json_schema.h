// JSON Schema front end: a schema (JSON text, key order kept) to a grammar symbol matching the
// JSON texts it accepts, with llguidance's default layout: any JSON whitespace between tokens,
// none before the value or after it; object properties in the schema's order. Supported: type
// (one or a list), properties, required, additionalProperties, enum, const, anyOf, oneOf (as
// anyOf), allOf of one schema, items, prefixItems, minItems, maxItems, minLength, maxLength,
// pattern, format (date, time, date-time, uuid, email), integer bounds, number minimum 0,
// $ref to #, #/$defs/... and #/definitions/.... Anything else that constrains is an Error
// naming the keyword.
#pragma once
#include <string>
#include <string_view>

#include "structured/grammar.h"

namespace vllm::structured {

// vLLM's structured_outputs options for JSON.
struct JsonOptions {
  bool any_whitespace = true;          // false: compact JSON, no whitespace at all
  std::string whitespace_pattern;      // non-empty: a regex matched at most once where
                                       // whitespace may go (instead of any whitespace)
  bool additional_properties = true;   // the default of additionalProperties when absent
};

Symbol json_schema_to_grammar(GrammarBuilder& g, std::string_view schema_json,
                              const JsonOptions& options = {});
// Any JSON object (response_format json_object).
Symbol json_object_grammar(GrammarBuilder& g, const JsonOptions& options = {});

}  // namespace vllm::structured
