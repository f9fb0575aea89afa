// The OpenAI Responses API (/v1/responses) on the chat path: a request becomes the chat body it
// means (instructions, the chained conversation, input items, flattened tools, text.format)
// and goes through parse_chat_request, so the chat template, grammars, tool and reasoning
// parsers are the ones chat completions use. Fields with no effect here are 400s naming them.
#pragma once
#include <string>

#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/protocol.h"

namespace vllm::server {

struct ServingContext;

struct ResponsesRequest {
  ojson body;            // as sent: the settings the response object echoes
  ChatRequest chat;      // the equivalent chat request (rendered prompt, sampling, parsers)
  ojson conversation;    // this turn's messages without instructions, chained turns first
  bool store = true;
  bool stream = false;
};

// vLLM's 404 for an id the store does not hold, saying why that can be.
ApiError response_not_found(const std::string& id, const char* param);

ResponsesRequest parse_responses_request(const ojson& body, const ServingContext& ctx);

// The response object with the request's settings echoed, `output` empty, `usage` null.
ojson response_skeleton(const ResponsesRequest& r, const std::string& id, int64_t created_at,
                        const char* status);

// Output items (reasoning, message, function_call) of a finished message, as OpenAI writes
// them; `incomplete`: the message item's status when the output hit max_output_tokens.
ojson output_items(ServingContext& ctx, const ChatMessageOut& m, bool incomplete);

// The messages a chained request starts from: the turn's conversation, then its output
// (message text and function calls as one assistant message; reasoning is not replayed).
ojson conversation_after(const ojson& conversation, const ojson& output);

}  // namespace vllm::server
