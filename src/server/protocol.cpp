// Request parsing shared by the routes, and /v1/completions bodies.
#include "server/protocol.h"

#include <cmath>

#include "engine/params_json.h"
#include "server/api_error.h"
#include "server/log.h"
#include "server/protocol_detail.h"
#include "server/serving.h"

namespace vllm::server {

using nlohmann::json;

ojson parse_body(const std::string& body) {
  constexpr int kMaxDepth = 64;
  auto limit_depth = [](int depth, ojson::parse_event_t, ojson&) {
    if (depth > kMaxDepth)
      throw bad_request("the request JSON nests deeper than " + std::to_string(kMaxDepth));
    return true;
  };
  try {
    return ojson::parse(body, limit_depth);
  } catch (const ojson::exception& e) {
    // parse_error, and out_of_range for a number beyond a double (1e400).
    throw bad_request(std::string("invalid JSON in the request body: ") + e.what());
  }
}

std::optional<bool> get_bool(const ojson& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  // pydantic's lax mode: "true", "False", "yes", 0 and 1 are booleans too.
  if (auto v = lax_bool(*it)) return v;
  throw bad_request(std::string("'") + field + "' must be a boolean", field);
}

std::optional<int64_t> get_int(const ojson& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) {  // pydantic accepts 16.0 for an int field
    const double v = it->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) return static_cast<int64_t>(v);
  }
  throw bad_request(std::string("'") + field + "' must be an integer", field);
}

std::optional<std::string> get_string(const ojson& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) throw bad_request(std::string("'") + field + "' must be a string", field);
  return it->get<std::string>();
}

namespace detail {

void require_object(const ojson& body) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
}

namespace {

// vLLM's request fields for both endpoints (protocol.py), each handled below or refused.
constexpr const char* kSharedFields[] = {
    "model", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
    "presence_penalty", "response_format", "seed", "stop", "stream", "stream_options",
    "temperature", "top_p", "user", "best_of", "use_beam_search", "top_k", "min_p",
    "repetition_penalty", "length_penalty", "stop_token_ids", "include_stop_str_in_output",
    "ignore_eos", "min_tokens", "skip_special_tokens", "spaces_between_special_tokens",
    "truncate_prompt_tokens", "truncation_side", "allowed_token_ids", "prompt_logprobs",
    "bad_words", "echo", "add_special_tokens", "structured_outputs", "guided_json",
    "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend",
    "guided_whitespace_pattern", "structural_tag", "priority", "request_id",
    "logits_processors", "return_tokens_as_token_ids", "return_token_ids", "cache_salt",
    "kv_transfer_params", "vllm_xargs"};
constexpr const char* kCompletionFields[] = {"prompt", "suffix", "prompt_embeds"};
constexpr const char* kChatFields[] = {
    "messages", "top_logprobs", "max_completion_tokens", "tools", "tool_choice",
    "reasoning_effort", "include_reasoning", "parallel_tool_calls", "add_generation_prompt",
    "continue_final_message", "documents", "chat_template", "chat_template_kwargs",
    "mm_processor_kwargs"};

bool set(const ojson& body, const char* field) {
  auto it = body.find(field);
  return it != body.end() && !it->is_null();
}

// Set and not an empty list or object.
bool non_empty(const ojson& body, const char* field) {
  return set(body, field) && !((body[field].is_array() || body[field].is_object()) &&
                               body[field].empty());
}

}  // namespace

void warn_unknown_fields(const ojson& body, bool chat) {
  std::string unknown;
  for (const auto& [k, v] : body.items()) {
    bool known = false;
    for (const char* f : kSharedFields) known = known || k == f;
    if (chat)
      for (const char* f : kChatFields) known = known || k == f;
    else
      for (const char* f : kCompletionFields) known = known || k == f;
    if (!known) unknown += (unknown.empty() ? "'" : ", '") + k + "'";
  }
  if (!unknown.empty())
    log_warning("The following fields were present in the request but ignored: {" + unknown +
                "}");
}

void reject_unsupported(const ojson& body) {
  // Suffixes, prompt embeddings, prefix-cache salts, KV transfer, extension arguments,
  // per-request logits processors and multimodal inputs do nothing here: a 400 rather than
  // silence. (Structured outputs, structural_tag included: output_grammar.)
  for (const char* f : {"suffix", "prompt_embeds", "cache_salt", "kv_transfer_params"}) {
    if (set(body, f))
      throw bad_request(std::string("'") + f + "' is not supported by this server", f);
  }
  for (const char* f : {"logits_processors", "vllm_xargs", "mm_processor_kwargs"}) {
    if (non_empty(body, f))
      throw bad_request(std::string("'") + f + "' is not supported by this server", f);
  }
  // Fields with no effect here, as in vLLM (fast tokenizers), still get their types
  // checked (include_reasoning and parallel_tool_calls: chat_output_options).
  for (const char* f : {"spaces_between_special_tokens", "include_reasoning",
                        "parallel_tool_calls"})
    get_bool(body, f);
  if (set(body, "length_penalty") && !body["length_penalty"].is_number())
    throw bad_request("'length_penalty' must be a number", "length_penalty");
  get_string(body, "user");
  get_string(body, "request_id");
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string())
      throw bad_request("'response_format' must be an object with a 'type'", "response_format");
    const std::string type = (*it)["type"].get<std::string>();
    if (type != "text" && type != "json_object" && type != "json_schema" &&
        type != "structural_tag")
      throw bad_request("response_format type '" + (*it)["type"].get<std::string>() +
                            "' is not supported by this server", "response_format");
  }
  if (get_bool(body, "use_beam_search").value_or(false))
    throw bad_request("beam search is not supported by this server", "use_beam_search");
  if (auto n = get_int(body, "best_of"); n && *n != get_int(body, "n").value_or(1))
    throw bad_request("'best_of' other than n is not supported", "best_of");
}

SamplingParams sampling_params(const ojson& body, const ServingContext& ctx,
                               std::initializer_list<const char*> skip) {
  json sub = json::object();
  for (const auto& [k, v] : body.items()) {
    bool skipped = false;
    for (const char* s : skip) skipped = skipped || k == s;
    if (!skipped) sub[k] = json::parse(v.dump());
  }
  SamplingParams p;
  try {
    p = sampling_params_from_json(sub, ctx.tokenizer);
  } catch (const Error& e) {
    // params_json names the field first: "'temperature' must be a number".
    const std::string msg = e.what();
    std::optional<std::string> param;
    if (msg.size() > 2 && msg[0] == '\'') param = msg.substr(1, msg.find('\'', 1) - 1);
    throw bad_request(msg, param);
  }
  if (p.n < 1 || p.n > ctx.config.max_n)
    throw bad_request("'n' must be in [1, " + std::to_string(ctx.config.max_n) + "]", "n");
  p.grammar = output_grammar(body, ctx);
  return p;
}

TokenReporting token_reporting(const ojson& body, const ServingContext& ctx) {
  return {get_bool(body, "return_token_ids").value_or(false),
          get_bool(body, "return_tokens_as_token_ids")
              .value_or(ctx.config.return_tokens_as_token_ids)};
}

void check_logprobs(const SamplingParams& params, const ServingContext& ctx) {
  const int limit = ctx.config.max_logprobs;
  const int64_t max = limit == -1 || limit > kEngineMaxLogprobs ? kEngineMaxLogprobs : limit;
  auto check = [&](const std::optional<int>& requested, const char* what, const char* field) {
    if (!requested) return;
    const int64_t n = *requested == -1 ? ctx.vocab_size : *requested;  // -1: every token
    if (n > max)
      throw bad_request(std::string("Requested ") + what + " logprobs of " + std::to_string(n) +
                            ", which is greater than max allowed: " + std::to_string(max),
                        field);
  };
  check(params.logprobs, "sample", "logprobs");
  check(params.prompt_logprobs, "prompt", "prompt_logprobs");
}

int read_priority(const ojson& body, const ServingContext& ctx) {
  const int64_t priority = get_int(body, "priority").value_or(0);
  if (priority != 0 && !ctx.config.engine.priority_policy)
    throw bad_request("Got priority " + std::to_string(priority) +
                          " but Priority scheduling is not enabled.", "priority");
  if (priority < std::numeric_limits<int>::min() || priority > std::numeric_limits<int>::max())
    throw bad_request("'priority' is out of range", "priority");
  return static_cast<int>(priority);
}

void truncate_prompts(const ojson& body, std::vector<Prompt>& prompts, const ServingContext& ctx,
                      std::optional<int64_t> max_tokens, const char* max_tokens_field) {
  const auto side = get_string(body, "truncation_side");
  if (side && *side != "left" && *side != "right")
    throw bad_request("'truncation_side' must be 'left' or 'right'", "truncation_side");
  auto keep = get_int(body, "truncate_prompt_tokens");
  if (!keep) return;
  if (*keep < -1)
    throw bad_request("'truncate_prompt_tokens' must be at least -1", "truncate_prompt_tokens");
  const int64_t max_input = ctx.max_model_len - std::max<int64_t>(max_tokens.value_or(0), 0);
  if (*keep == -1) keep = max_input;
  if (*keep == 0)
    throw bad_request("truncate_prompt_tokens=0 leaves an empty prompt", "truncate_prompt_tokens");
  if (*keep > max_input)
    throw bad_request("truncate_prompt_tokens=" + std::to_string(*keep) +
                          " cannot be greater than max_model_len - " + max_tokens_field +
                          " = " + std::to_string(max_input) +
                          ". Please request a smaller truncation size.",
                      "truncate_prompt_tokens");
  for (Prompt& p : prompts) {
    if (static_cast<int64_t>(p.ids.size()) <= *keep) continue;
    const auto n = static_cast<ptrdiff_t>(*keep);
    if (side.value_or("left") == "left") p.ids.erase(p.ids.begin(), p.ids.end() - n);
    else p.ids.resize(static_cast<size_t>(n));
    p.text = ctx.tokenizer->decode(p.ids, false);
  }
}

StreamOptions stream_options(const ojson& body, const ServingContext& ctx) {
  StreamOptions s;
  s.stream = get_bool(body, "stream").value_or(false);
  s.include_usage = s.stream && ctx.config.enable_force_include_usage;
  auto it = body.find("stream_options");
  if (it == body.end() || it->is_null()) return s;
  if (!it->is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
  if (!s.stream)
    throw bad_request("Stream options can only be defined when `stream=True`.", "stream_options");
  s.include_usage = get_bool(*it, "include_usage").value_or(false) || s.include_usage;
  s.continuous_usage_stats = get_bool(*it, "continuous_usage_stats").value_or(false);
  return s;
}

int resolve_max_tokens(std::optional<int64_t> requested, size_t prompt_len, int max_model_len,
                       const char* field, const char* prompt_field) {
  const int64_t len = static_cast<int64_t>(prompt_len);
  if (len >= max_model_len)
    throw bad_request("This model's maximum context length is " + std::to_string(max_model_len) +
                          " tokens. However, your request has " + std::to_string(len) +
                          " input tokens. Please reduce the length of the input.",
                      prompt_field);
  const int64_t room = max_model_len - len;
  if (!requested) return static_cast<int>(room);
  if (*requested < 1) throw bad_request(std::string("'") + field + "' must be at least 1", field);
  if (*requested > room)
    throw bad_request("'" + std::string(field) + "' is too large: " +
                          std::to_string(*requested) + ". This model's maximum context length is " +
                          std::to_string(max_model_len) + " tokens and your request has " +
                          std::to_string(len) + " input tokens (" + std::to_string(*requested) +
                          " > " + std::to_string(max_model_len) + " - " + std::to_string(len) + ").",
                      field);
  return static_cast<int>(*requested);
}

}  // namespace detail

namespace {

std::vector<int32_t> token_ids(const ojson& v) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const auto& x : v) {
    if (!x.is_number_integer()) throw bad_request("'prompt' must hold token ids", "prompt");
    const int64_t t = x.get<int64_t>();
    if (t < 0 || t > std::numeric_limits<int32_t>::max())
      throw bad_request("'prompt' holds an invalid token id " + std::to_string(t), "prompt");
    ids.push_back(static_cast<int32_t>(t));
  }
  return ids;
}

std::vector<Prompt> read_prompts(const ojson& body, const ServingContext& ctx) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw bad_request("'prompt' is required", "prompt");
  const bool special = get_bool(body, "add_special_tokens").value_or(true);
  auto from_text = [&](const std::string& s) {
    return Prompt{ctx.tokenizer->encode(s, special), s};
  };
  auto from_ids = [&](const ojson& v) {
    Prompt p{token_ids(v), ""};
    p.text = ctx.tokenizer->decode(p.ids, false);
    return p;
  };
  std::vector<Prompt> out;
  if (it->is_string()) {
    out.push_back(from_text(it->get<std::string>()));
  } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
    out.push_back(from_ids(*it));
  } else if (it->is_array() && !it->empty()) {
    for (const auto& p : *it) {
      if (p.is_string()) out.push_back(from_text(p.get<std::string>()));
      else if (p.is_array()) out.push_back(from_ids(p));
      else throw bad_request("'prompt' must be a string, token ids or a list of them", "prompt");
    }
  } else if (it->is_array()) {
    throw bad_request("'prompt' must not be empty", "prompt");
  } else {
    throw bad_request("'prompt' must be a string, token ids or a list of them", "prompt");
  }
  for (const Prompt& p : out)
    if (p.ids.empty()) throw bad_request("the prompt must not be empty", "prompt");
  return out;
}

}  // namespace

CompletionRequest parse_completion_request(const ojson& body, const ServingContext& ctx) {
  detail::require_object(body);
  detail::warn_unknown_fields(body, false);
  detail::reject_unsupported(body);
  CompletionRequest r;
  r.model = ctx.resolve_model(get_string(body, "model").value_or(""));
  r.stream = detail::stream_options(body, ctx);
  r.echo = get_bool(body, "echo").value_or(false);
  r.report = detail::token_reporting(body, ctx);
  r.priority = detail::read_priority(body, ctx);
  r.request_id = get_string(body, "request_id").value_or("");
  r.params = detail::sampling_params(body, ctx, {"prompt", "max_tokens", "logprobs", "echo",
                                                 "stream", "stream_options", "model"});
  if (auto lp = get_int(body, "logprobs")) {
    if (*lp < 0) throw bad_request("'logprobs' must be a non-negative integer", "logprobs");
    r.logprobs = static_cast<int>(*lp);
    r.params.logprobs = r.logprobs;
  }
  if (r.stream.stream && r.params.prompt_logprobs)
    throw bad_request("'prompt_logprobs' is not available when streaming", "prompt_logprobs");
  if (r.echo && r.logprobs) r.params.prompt_logprobs = *r.logprobs;
  detail::check_logprobs(r.params, ctx);
  r.prompts = read_prompts(body, ctx);
  if (static_cast<int64_t>(r.prompts.size()) * r.params.n > ctx.config.max_n * 8)
    throw bad_request("too many prompts x n in one request", "prompt");
  // vLLM's default is 16; null means "up to max_model_len".
  auto max_tokens = body.contains("max_tokens") ? get_int(body, "max_tokens")
                                                : std::optional<int64_t>(16);
  if (max_tokens && *max_tokens == 0 && r.echo) {
    r.discard_output = true;
    max_tokens = 1;
  }
  detail::truncate_prompts(body, r.prompts, ctx, max_tokens, "max_tokens");
  for (Prompt& p : r.prompts)
    p.max_tokens = detail::resolve_max_tokens(max_tokens, p.ids.size(), ctx.max_model_len,
                                              "max_tokens", "prompt");
  return r;
}

}  // namespace vllm::server
