// JSON <-> engine types with vLLM's field names: SamplingParams from a request object, and
// logprobs to JSON. Type and range errors name the field (vllm::Error).
#pragma once
#include <cctype>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/engine_core.h"
#include "tokenizer/tokenizer.h"

namespace vllm {

// Reads vLLM's SamplingParams fields from `j` (unknown fields ignored); starts from `base`.
SamplingParams sampling_params_from_json(const nlohmann::json& j, const Tokenizer* tokenizer,
                                         SamplingParams base = {});
// A prompt given as text (tokenized with special tokens, as vLLM does) or as token ids.
std::vector<int32_t> prompt_from_json(const nlohmann::json& prompt, const Tokenizer* tokenizer);

// A boolean as pydantic reads one in lax mode: true/false, 0/1, or a string such as "true",
// "False", "yes", "off", "1" (any case). nullopt for anything else.
template <typename Json>
std::optional<bool> lax_bool(const Json& v) {
  if (v.is_boolean()) return v.template get<bool>();
  if (v.is_number_integer()) {
    const auto i = v.template get<int64_t>();
    if (i == 0 || i == 1) return i == 1;
    return std::nullopt;
  }
  if (!v.is_string()) return std::nullopt;
  std::string s = v.template get<std::string>();
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* t : {"1", "on", "t", "true", "y", "yes"})
    if (s == t) return true;
  for (const char* f : {"0", "off", "f", "false", "n", "no"})
    if (s == f) return false;
  return std::nullopt;
}

nlohmann::json logprobs_to_json(const StepLogprobs& lp, const Tokenizer* tokenizer);

}  // namespace vllm
