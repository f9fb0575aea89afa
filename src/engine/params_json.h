// JSON <-> engine types with vLLM's field names: SamplingParams from a request object, and
// logprobs to JSON. Type and range errors name the field (vllm::Error).
#pragma once
#include <nlohmann/json.hpp>

#include "engine/engine_core.h"
#include "tokenizer/tokenizer.h"

namespace vllm {

// Reads vLLM's SamplingParams fields from `j` (unknown fields ignored); starts from `base`.
SamplingParams sampling_params_from_json(const nlohmann::json& j, const Tokenizer* tokenizer,
                                         SamplingParams base = {});
// A prompt given as text (tokenized with special tokens, as vLLM does) or as token ids.
std::vector<int32_t> prompt_from_json(const nlohmann::json& prompt, const Tokenizer* tokenizer);

nlohmann::json logprobs_to_json(const StepLogprobs& lp, const Tokenizer* tokenizer);

}  // namespace vllm
