// Pieces of OpenAI response bodies shared by completions and chat: usage, stop_reason, and
// logprobs in both formats (completions: tokens/token_logprobs/top_logprobs/text_offset;
// chat: content [{token, logprob, bytes, top_logprobs}]), plus vLLM's prompt_logprobs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "server/chat_output.h"
#include "server/protocol.h"

namespace vllm::server {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // prompt_tokens_details.cached_tokens: vLLM's, with --enable-prompt-tokens-details and a
  // prefix-cache hit (else the details are null).
  std::optional<int64_t> cached_tokens;
  ojson to_json() const;
};

// The assistant message of a chat choice: content, tool_calls, and the reasoning under both
// of vLLM's names (reasoning_content, older; reasoning, newer).
ojson chat_message_json(const std::string& role, const ChatMessageOut& m);

// One choice of a chat.completion body (chat completions and their batch endpoint): the
// message and what vLLM reports beside it. logprobs / token_ids are null when not asked for.
ojson chat_choice_json(size_t index, ojson message, const ojson* logprobs,
                       const ojson& finish_reason, const ojson& stop_reason,
                       const std::vector<int32_t>* token_ids);

// vLLM's stop_reason: the stop string, the stop token id as a number, or null (EOS, length).
ojson stop_reason_json(const RequestOutput& out, const SamplingParams& params);

// Completions-format logprobs, built token by token; text_offset counts characters of the
// token strings from `initial_offset`, as vLLM does.
class CompletionLogprobs {
 public:
  // tokens_as_ids: return_tokens_as_token_ids, tokens written "token_id:N".
  CompletionLogprobs(const Tokenizer& tokenizer, bool tokens_as_ids = false,
                     size_t initial_offset = 0);
  void add(const StepLogprobs& lp, int num_top);
  void add_prompt(int32_t token, const std::optional<StepLogprobs>& lp, int num_top);
  bool empty() const { return tokens_.empty(); }
  // The JSON of the tokens added since the last take(); the offset keeps running.
  ojson take();

 private:
  void push(int32_t token, std::optional<double> logprob, ojson top);
  std::string text(int32_t token) const;
  const Tokenizer& tok_;
  bool tokens_as_ids_;
  size_t offset_;
  ojson tokens_, token_logprobs_, top_logprobs_, text_offset_;
};

// Chat-format entries for `steps`, each with its `num_top` best alternatives.
ojson chat_logprobs_content(const std::vector<StepLogprobs>& steps, const Tokenizer& tokenizer,
                            int num_top, bool tokens_as_ids = false);
// vLLM's prompt_logprobs: per prompt token null or {"<id>": {logprob, rank, decoded_token}}.
ojson prompt_logprobs_json(const std::vector<std::optional<StepLogprobs>>& lps,
                           const Tokenizer& tokenizer);

// The token's text, or "token_id:N" when `as_id` (vLLM's return_tokens_as_token_ids).
std::string token_text(const Tokenizer& tokenizer, int32_t token, bool as_id = false);

}  // namespace vllm::server
