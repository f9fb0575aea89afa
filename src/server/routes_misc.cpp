// The small routes: /v1/models, /tokenize, /detokenize, /metrics, /version; and the helpers
// every route uses to queue generations and write JSON.
#include <httplib.h>

#include <chrono>

#include "server/api_error.h"
#include "server/log.h"
#include "server/routes.h"
#include "server/serving.h"

namespace vllm::server {

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string to_text(const ojson& body) {
  return body.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string response_id(ServingContext& ctx, const httplib::Request& req,
                        const std::string& request_id, const char* prefix) {
  if (req.has_header("X-Request-Id")) return prefix + req.get_header_value("X-Request-Id");
  if (!request_id.empty()) return prefix + request_id;
  return ctx.new_request_id(prefix);
}

void set_json(httplib::Response& res, const ojson& body, int status) {
  res.status = status;
  res.set_content(to_text(body), "application/json");
}

std::shared_ptr<Generation> start_generation(ServingContext& ctx, const std::string& id,
                                             const std::vector<Prompt>& prompts,
                                             const SamplingParams& params, int priority) {
  auto gen = std::make_shared<Generation>(ctx, id);
  if (log_enabled(LogLevel::kDebug)) {
    size_t tokens = 0;
    for (const Prompt& p : prompts) tokens += p.ids.size();
    log(LogLevel::kDebug, "Received request " + id + ": " + std::to_string(prompts.size()) +
                              " prompt(s), " + std::to_string(tokens) + " tokens, n=" +
                              std::to_string(params.n) + ", temperature=" +
                              std::to_string(params.temperature));
  }
  for (const Prompt& p : prompts) {
    SamplingParams sp = params;
    sp.max_tokens = p.max_tokens;
    try {
      gen->add(p.ids, sp, priority);
    } catch (const Error& e) {
      throw bad_request(e.what());
    }
  }
  return gen;
}

void handle_models(ServingContext& ctx, const httplib::Request&, httplib::Response& res) {
  ojson data = ojson::array();
  for (const std::string& name : ctx.config.served_model_names) {
    ojson permission = {{"id", ctx.new_request_id("modelperm-")},
                        {"object", "model_permission"},
                        {"created", ctx.start_time},
                        {"allow_create_engine", false},
                        {"allow_sampling", true},
                        {"allow_logprobs", true},
                        {"allow_search_indices", false},
                        {"allow_view", true},
                        {"allow_fine_tuning", false},
                        {"organization", "*"},
                        {"group", nullptr},
                        {"is_blocking", false}};
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", ctx.start_time},
                    {"owned_by", "vllm"},
                    {"root", ctx.config.model_path},
                    {"parent", nullptr},
                    {"max_model_len", ctx.max_model_len},
                    {"permission", ojson::array({std::move(permission)})}});
  }
  set_json(res, {{"object", "list"}, {"data", std::move(data)}});
}

void handle_tokenize(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const ojson body = parse_body(req.body);
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  ctx.resolve_model(get_string(body, "model").value_or(""));
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    const std::string text = render_chat(body, ctx);
    ids = ctx.tokenizer->encode(text, get_bool(body, "add_special_tokens").value_or(false));
  } else {
    auto prompt = get_string(body, "prompt");
    if (!prompt) throw bad_request("'prompt' (a string) or 'messages' is required", "prompt");
    ids = ctx.tokenizer->encode(*prompt, get_bool(body, "add_special_tokens").value_or(true));
  }
  ojson token_strs = nullptr;
  if (get_bool(body, "return_token_strs").value_or(false)) {
    token_strs = ojson::array();
    for (int32_t t : ids) token_strs.push_back(ctx.tokenizer->id_to_token(t));
  }
  set_json(res, {{"count", ids.size()},
                 {"max_model_len", ctx.max_model_len},
                 {"tokens", ids},
                 {"token_strs", std::move(token_strs)}});
}

void handle_detokenize(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const ojson body = parse_body(req.body);
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  ctx.resolve_model(get_string(body, "model").value_or(""));
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array())
    throw bad_request("'tokens' must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const auto& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.vocab_size)
      throw bad_request("'tokens' holds an invalid token id", "tokens");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  set_json(res, {{"prompt", ctx.tokenizer->decode(ids, false)}});
}

void handle_metrics(ServingContext& ctx, const httplib::Request&, httplib::Response& res) {
  res.status = 200;
  res.set_content(ctx.metrics.render(ctx.default_model(), ctx.engine->stats()),
                  "text/plain; version=0.0.4; charset=utf-8");
}

void handle_version(ServingContext&, const httplib::Request&, httplib::Response& res) {
  set_json(res, {{"version", VLLM_VERSION}});
}

}  // namespace vllm::server
