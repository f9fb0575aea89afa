// Helpers shared by the completions and chat request parsers (not for routes).
#pragma once
#include <initializer_list>
#include <optional>
#include <vector>

#include "server/protocol.h"
#include "structured/matcher.h"

namespace vllm::server::detail {

void require_object(const ojson& body);
// Logs vLLM's warning for fields the endpoint does not know (they are ignored, as in vLLM).
void warn_unknown_fields(const ojson& body, bool chat);
// suffix, unknown response_format types, best_of != n: 400 rather than ignored.
void reject_unsupported(const ojson& body);
// The structured-output constraint of a request (response_format, structured_outputs,
// guided_*) compiled through the server's grammar cache; nullptr when there is none. A schema
// or grammar that does not compile is a 400 naming the field and the reason.
std::shared_ptr<const structured::CompiledGrammar> output_grammar(const ojson& body,
                                                                  const ServingContext& ctx);
// tools, tool_choice, parallel_tool_calls, include_reasoning and the server's parsers -> how
// the output is read, as vLLM's checks allow; tool_choice "required" or a named function
// also sets the grammar of `params` (the tool's JSON schema). Throws ApiError 400.
std::shared_ptr<const ChatOutputOptions> chat_output_options(const ojson& body,
                                                             const ServingContext& ctx,
                                                             SamplingParams& params);
// SamplingParams from the body's vLLM fields, minus `skip`; n checked against the server cap.
SamplingParams sampling_params(const ojson& body, const ServingContext& ctx,
                               std::initializer_list<const char*> skip);
// With --enable-force-include-usage a stream reports usage as if include_usage were set.
StreamOptions stream_options(const ojson& body, const ServingContext& ctx);
// return_tokens_as_token_ids defaults to --return-tokens-as-token-ids.
TokenReporting token_reporting(const ojson& body, const ServingContext& ctx);
// vLLM's --max-logprobs check of the resolved sampling and prompt logprobs (-1: the vocab).
void check_logprobs(const SamplingParams& params, const ServingContext& ctx);
// priority, refused (as vLLM does) unless the server schedules by priority.
int read_priority(const ojson& body, const ServingContext& ctx);
// vLLM's truncate_prompt_tokens (-1: all the room `max_tokens` leaves) and truncation_side
// ("left", the default, keeps the last tokens; "right" the first). Applied before the
// context-length check; a cut prompt's text becomes its decoded ids (for echo).
void truncate_prompts(const ojson& body, std::vector<Prompt>& prompts, const ServingContext& ctx,
                      std::optional<int64_t> max_tokens, const char* max_tokens_field);
// vLLM's context-length rules: the prompt must leave room; an absent max_tokens means "the
// rest of the context".
int resolve_max_tokens(std::optional<int64_t> requested, size_t prompt_len, int max_model_len,
                       const char* field, const char* prompt_field);

}  // namespace vllm::server::detail
