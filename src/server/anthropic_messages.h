// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) served through the
// chat path, as vLLM serves it: the body becomes a /v1/chat/completions body (system first,
// tool_use -> assistant tool_calls, tool_result -> tool messages) that the chat template
// renders and the chat output pipeline (reasoning, tool parsers, tool grammars) reads back.
#pragma once
#include <string>

#include "server/protocol.h"

namespace vllm::server {

// A /v1/messages body (count = false) or a count_tokens body (count = true) -> the equivalent
// chat completions body. Every field is honoured or a 400 that names it.
ojson chat_body_from_anthropic(const ojson& body, bool count, const ServingContext& ctx);

// Anthropic's error body: {"type": "error", "error": {"type": "invalid_request_error", ...}}.
ojson anthropic_error_json(int status, const std::string& message);

}  // namespace vllm::server
