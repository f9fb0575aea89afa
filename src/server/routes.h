// Route handlers. Each reads the request and fills the response, throwing ApiError for a
// client-visible failure; the HTTP layer (http_server.cpp) turns those into error JSON.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "server/generation.h"
#include "server/protocol.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace vllm::server {

struct ServingContext;

void handle_completions(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_chat_completions(ServingContext& ctx, const httplib::Request& req,
                             httplib::Response& res);
void handle_models(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_tokenize(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_metrics(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_version(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
// vLLM's /v1/chat/completions/batch: "messages" is a list of conversations; one response with
// choice i for conversation i (no streaming, n = 1).
void handle_chat_completions_batch(ServingContext& ctx, const httplib::Request& req,
                                   httplib::Response& res);
// GET /v1/models/{model}: one card, or 404 for a name not served.
void handle_model(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
// /health and /ping: 200 with an empty body while serving, 503 while shutting down.
void handle_health(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
// GET /load: {"server_load": requests in flight} (0 without --enable-server-load-tracking).
void handle_load(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_tokenizer_info(ServingContext& ctx, const httplib::Request& req,
                           httplib::Response& res);
// POST /invocations: a body with "messages" goes to chat, one with "prompt" to completions.
void handle_invocations(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
// GET /: the chat page (server/chat_page.h); absent with --no-webui.
void handle_chat_page(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_openapi(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
// The OpenAI Responses API (server/responses_api.h): create, retrieve a stored response, and
// cancel (vLLM's rule: background responses only, so here always a 400 or 404).
void handle_responses_create(ServingContext& ctx, const httplib::Request& req,
                             httplib::Response& res);
void handle_responses_retrieve(ServingContext& ctx, const httplib::Request& req,
                               httplib::Response& res);
void handle_responses_cancel(ServingContext& ctx, const httplib::Request& req,
                             httplib::Response& res);
// POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API
// (server/anthropic_messages.h).
void handle_messages(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_count_tokens(ServingContext& ctx, const httplib::Request& req,
                         httplib::Response& res);
// POST /v1/embeddings (an embedding model only): vLLM's embedding request (server/embeddings.h).
void handle_embeddings(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
// POST /pooling (a pooling model only): vLLM's PoolingCompletionRequest, task "embed".
void handle_pooling(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);

// Queues every prompt (with its resolved max_tokens) as one Generation; engine rejections
// become ApiError 400.
std::shared_ptr<Generation> start_generation(ServingContext& ctx, const std::string& id,
                                             const std::vector<Prompt>& prompts,
                                             const SamplingParams& params, int priority);
// vLLM's response id: prefix + the X-Request-Id header, else the body's request_id, else a
// fresh id. Engine requests keep their own unique ids.
std::string response_id(ServingContext& ctx, const httplib::Request& req,
                        const std::string& request_id, const char* prefix);
void set_json(httplib::Response& res, const ojson& body, int status = 200);
// Compact JSON text; invalid UTF-8 (never expected) becomes U+FFFD instead of an exception.
std::string to_text(const ojson& body);
int64_t unix_time();

}  // namespace vllm::server
