// Pieces of OpenAI response bodies shared by completions and chat: usage, stop_reason, and
// logprobs in both formats (completions: tokens/token_logprobs/top_logprobs/text_offset;
// chat: content [{token, logprob, bytes, top_logprobs}]), plus vLLM's prompt_logprobs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "server/protocol.h"

namespace vllm::server {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  ojson to_json() const;
};

// vLLM's stop_reason: the stop string, the stop token id as a number, or null (EOS, length).
ojson stop_reason_json(const RequestOutput& out, const SamplingParams& params);

// Completions-format logprobs, built token by token; text_offset counts characters of the
// token strings from `initial_offset`, as vLLM does.
class CompletionLogprobs {
 public:
  CompletionLogprobs(const Tokenizer& tokenizer, size_t initial_offset = 0);
  void add(const StepLogprobs& lp, int num_top);
  void add_prompt(int32_t token, const std::optional<StepLogprobs>& lp, int num_top);
  bool empty() const { return tokens_.empty(); }
  // The JSON of the tokens added since the last take(); the offset keeps running.
  ojson take();

 private:
  void push(int32_t token, std::optional<double> logprob, ojson top);
  const Tokenizer& tok_;
  size_t offset_;
  ojson tokens_, token_logprobs_, top_logprobs_, text_offset_;
};

// Chat-format entries for `steps`, each with its `num_top` best alternatives.
ojson chat_logprobs_content(const std::vector<StepLogprobs>& steps, const Tokenizer& tokenizer,
                            int num_top);
// vLLM's prompt_logprobs: per prompt token null or {"<id>": {logprob, rank, decoded_token}}.
ojson prompt_logprobs_json(const std::vector<std::optional<StepLogprobs>>& lps,
                           const Tokenizer& tokenizer);

std::string token_text(const Tokenizer& tokenizer, int32_t token);

}  // namespace vllm::server
