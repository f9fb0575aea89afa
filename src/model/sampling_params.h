// SamplingParams: the per-request generation controls, with vLLM's field names and defaults.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace vllm {
namespace structured {
struct CompiledGrammar;
}

struct SamplingParams {
  int n = 1;
  float temperature = 1.0f;  // < 1e-5: greedy
  float top_p = 1.0f;
  int top_k = 0;  // 0 or -1: off
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;
  int max_tokens = 16;
  int min_tokens = 0;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  std::vector<std::vector<int32_t>> bad_words_ids;  // tokenized bad words
  std::map<int32_t, float> logit_bias;
  std::vector<int32_t> allowed_token_ids;  // empty: all
  std::optional<int> logprobs;             // top logprobs per generated token
  std::optional<int> prompt_logprobs;
  bool skip_special_tokens = true;
  // Structured output: the grammar every completion must follow (compiled by the frontend,
  // shared); each sequence keeps its own matcher in the model runner.
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  // Non-empty: the grammar starts after the output contains this text (a reasoning parser's
  // end tag), or after the token grammar_after_token; the text before it is free.
  std::string grammar_after;
  int32_t grammar_after_token = -1;

  bool greedy() const { return temperature < 1e-5f; }
  // Nothing edits or reports the distribution beyond temperature, top-k, top-p and min-p:
  // the token can be drawn where the logits are (on the GPU: runtime/ops.h sample_rows).
  bool plain() const {
    return presence_penalty == 0.0f && frequency_penalty == 0.0f && repetition_penalty == 1.0f &&
           min_tokens == 0 && bad_words_ids.empty() && logit_bias.empty() &&
           allowed_token_ids.empty() && !logprobs && !prompt_logprobs && !grammar;
  }
  bool plain_greedy() const { return greedy() && plain(); }
};

}  // namespace vllm
