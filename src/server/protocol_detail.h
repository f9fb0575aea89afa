// Helpers shared by the completions and chat request parsers (not for routes).
#pragma once
#include <initializer_list>

#include "server/protocol.h"

namespace vllm::server::detail {

void require_object(const ojson& body);
// guided decoding, suffix, non-text response_format, best_of != n: 400 rather than ignored.
void reject_unsupported(const ojson& body);
// SamplingParams from the body's vLLM fields, minus `skip`; n checked against the server cap.
SamplingParams sampling_params(const ojson& body, const ServingContext& ctx,
                               std::initializer_list<const char*> skip);
StreamOptions stream_options(const ojson& body);
// vLLM's context-length rules: the prompt must leave room; an absent max_tokens means "the
// rest of the context".
int resolve_max_tokens(std::optional<int64_t> requested, size_t prompt_len, int max_model_len,
                       const char* field, const char* prompt_field);

}  // namespace vllm::server::detail
