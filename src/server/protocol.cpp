// Request parsing shared by the routes, and /v1/completions bodies.
#include "server/protocol.h"

#include <cmath>

#include "engine/params_json.h"
#include "server/api_error.h"
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
  } catch (const ojson::parse_error& e) {
    throw bad_request(std::string("invalid JSON in the request body: ") + e.what());
  }
}

std::optional<bool> get_bool(const ojson& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) throw bad_request(std::string("'") + field + "' must be a boolean", field);
  return it->get<bool>();
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

void reject_unsupported(const ojson& body) {
  for (const char* f : {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                        "structured_outputs", "suffix", "prompt_embeds"}) {
    auto it = body.find(f);
    if (it != body.end() && !it->is_null())
      throw bad_request(std::string("'") + f + "' is not supported by this server", f);
  }
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string())
      throw bad_request("'response_format' must be an object with a 'type'", "response_format");
    if ((*it)["type"] != "text")
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
  return p;
}

StreamOptions stream_options(const ojson& body) {
  StreamOptions s;
  s.stream = get_bool(body, "stream").value_or(false);
  auto it = body.find("stream_options");
  if (it == body.end() || it->is_null()) return s;
  if (!it->is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
  if (!s.stream)
    throw bad_request("Stream options can only be defined when `stream=True`.", "stream_options");
  s.include_usage = get_bool(*it, "include_usage").value_or(false);
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
  detail::reject_unsupported(body);
  CompletionRequest r;
  r.model = ctx.resolve_model(get_string(body, "model").value_or(""));
  r.stream = detail::stream_options(body);
  r.echo = get_bool(body, "echo").value_or(false);
  r.priority = static_cast<int>(get_int(body, "priority").value_or(0));
  r.params = detail::sampling_params(body, ctx, {"prompt", "max_tokens", "logprobs", "echo",
                                                 "stream", "stream_options", "model"});
  if (auto lp = get_int(body, "logprobs")) {
    if (*lp < 0 || *lp > 20) throw bad_request("'logprobs' must be in [0, 20]", "logprobs");
    r.logprobs = static_cast<int>(*lp);
    r.params.logprobs = r.logprobs;
  }
  if (r.stream.stream && r.params.prompt_logprobs)
    throw bad_request("'prompt_logprobs' is not available when streaming", "prompt_logprobs");
  if (r.echo && r.logprobs) r.params.prompt_logprobs = *r.logprobs;
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
  for (Prompt& p : r.prompts)
    p.max_tokens = detail::resolve_max_tokens(max_tokens, p.ids.size(), ctx.max_model_len,
                                              "max_tokens", "prompt");
  return r;
}

}  // namespace vllm::server
