// OpenAI request bodies -> what the engine needs, with vLLM's field names, defaults and checks
// (completions: prompt forms, echo, logprobs int; chat: messages rendered by the chat template,
// logprobs bool + top_logprobs). Every problem is an ApiError naming the field.
#pragma once
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/sampling_params.h"

namespace vllm::server {

struct ServingContext;
struct ChatOutputOptions;
using ojson = nlohmann::ordered_json;

struct Prompt {
  std::vector<int32_t> ids;
  std::string text;    // as given, or the decoded ids (for echo)
  int max_tokens = 0;  // resolved against max_model_len
};

struct StreamOptions {
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage_stats = false;
};

// What both endpoints report beyond text: vLLM's return_token_ids (prompt_token_ids and per
// choice token_ids) and return_tokens_as_token_ids (logprob tokens as "token_id:N").
struct TokenReporting {
  bool token_ids = false;
  bool tokens_as_ids = false;
};

struct CompletionRequest {
  std::string model;  // the served name to report
  std::vector<Prompt> prompts;
  SamplingParams params;
  StreamOptions stream;
  bool echo = false;
  bool discard_output = false;  // max_tokens = 0 with echo: generate one token, report none
  std::optional<int> logprobs;  // top alternatives per token, OpenAI completions format
  TokenReporting report;
  std::string request_id;  // vLLM's request_id (the response id), "" when not given
  int priority = 0;
};

struct ChatRequest {
  std::string model;
  Prompt prompt;  // the rendered conversation and its token ids
  SamplingParams params;
  StreamOptions stream;
  bool logprobs = false;
  int top_logprobs = 0;
  TokenReporting report;
  // vLLM's response role: "assistant" with a generation prompt, else the last message's role.
  std::string role = "assistant";
  std::string echo;  // echo: the last message's content when its role is `role`, else ""
  std::string request_id;
  int priority = 0;
  // Reasoning and tool-call parsing of the output (tools, tool_choice, the server's parsers).
  std::shared_ptr<const ChatOutputOptions> output;
};

// Parses a request body; throws ApiError 400 for malformed JSON or nesting deeper than 64.
ojson parse_body(const std::string& body);

CompletionRequest parse_completion_request(const ojson& body, const ServingContext& ctx);
ChatRequest parse_chat_request(const ojson& body, const ServingContext& ctx);

// Renders messages with the model's template (or `template_override`), for chat and /tokenize.
std::string render_chat(const ojson& body, const ServingContext& ctx);

// Typed field readers shared by the routes: absent or null -> nullopt, wrong type -> 400.
std::optional<bool> get_bool(const ojson& body, const char* field);
std::optional<int64_t> get_int(const ojson& body, const char* field);
std::optional<std::string> get_string(const ojson& body, const char* field);

}  // namespace vllm::server
