// The small routes: /v1/models(/{model}), /tokenize, /detokenize, /metrics, /version, /health,
// /ping, /load, /tokenizer_info, /invocations, /openapi.json; and the helpers every route uses
// to queue generations and write JSON.
#include <httplib.h>

#include <chrono>

#include "server/api_error.h"
#include "server/chat_page.h"
#include "server/log.h"
#include "server/router.h"
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

namespace {

ojson model_card(ServingContext& ctx, const std::string& name) {
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
  return {{"id", name},
          {"object", "model"},
          {"created", ctx.start_time},
          {"owned_by", "vllm"},
          {"root", ctx.config.model_path},
          {"parent", nullptr},
          {"max_model_len", ctx.max_model_len},
          {"permission", ojson::array({std::move(permission)})}};
}

}  // namespace

void handle_models(ServingContext& ctx, const httplib::Request&, httplib::Response& res) {
  ojson data = ojson::array();
  for (const std::string& name : ctx.config.served_model_names) data.push_back(model_card(ctx, name));
  set_json(res, {{"object", "list"}, {"data", std::move(data)}});
}

void handle_model(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
  for (const std::string& served : ctx.config.served_model_names)
    if (served == name) return set_json(res, model_card(ctx, name));
  throw ApiError(404, "The model `" + name + "` does not exist.", "model");
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
  core::SchedulerStats stats = ctx.engine ? ctx.engine->stats() : core::SchedulerStats{};
  if (ctx.pooling) stats.num_running = static_cast<int>(ctx.pooling->num_unfinished());
  res.set_content(ctx.metrics.render(ctx.default_model(), stats),
                  "text/plain; version=0.0.4; charset=utf-8");
}

void handle_version(ServingContext&, const httplib::Request&, httplib::Response& res) {
  set_json(res, {{"version", VLLM_VERSION}});
}

void handle_chat_page(ServingContext&, const httplib::Request&, httplib::Response& res) {
  const std::string_view page = chat_page_html();
  res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-cache");
}

void handle_health(ServingContext& ctx, const httplib::Request&, httplib::Response& res) {
  if (ctx.draining) throw ApiError(503, "The server is shutting down.");
  res.status = 200;
}

void handle_load(ServingContext& ctx, const httplib::Request&, httplib::Response& res) {
  const int load = ctx.config.enable_server_load_tracking ? ctx.in_flight.load() : 0;
  set_json(res, {{"server_load", load}});
}

// vLLM's /tokenizer_info: the tokenizer's configuration as transformers would report it.
void handle_tokenizer_info(ServingContext& ctx, const httplib::Request&, httplib::Response& res) {
  const Tokenizer& tok = *ctx.tokenizer;
  auto token_or_null = [&](std::optional<int32_t> id) {
    return id ? ojson(tok.id_to_token(*id)) : ojson(nullptr);
  };
  ojson added = ojson::object();
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (tok.is_special(id))
      added[std::to_string(id)] = {{"content", tok.id_to_token(id)}, {"special", true}};
  const std::string& source = ctx.config.chat_template.empty()
                                  ? tok.chat_template().value_or("") : ctx.config.chat_template;
  set_json(res, {{"tokenizer_class", "PreTrainedTokenizerFast"},
                 {"bos_token", token_or_null(tok.bos_id())},
                 {"bos_token_id", tok.bos_id() ? ojson(*tok.bos_id()) : ojson(nullptr)},
                 {"eos_token", token_or_null(tok.eos_id())},
                 {"eos_token_id", tok.eos_id() ? ojson(*tok.eos_id()) : ojson(nullptr)},
                 {"vocab_size", tok.vocab_size()},
                 {"model_max_length", ctx.max_model_len},
                 {"added_tokens_decoder", std::move(added)},
                 {"chat_template", source.empty() ? ojson(nullptr) : ojson(source)}});
}

// vLLM's SageMaker entry point: the first request type the body fits, chat before completions;
// an embedding model takes embedding requests.
void handle_invocations(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const ojson body = parse_body(req.body);
  if (ctx.pooling != nullptr) {
    if (body.is_object() && body.contains("input")) return handle_embeddings(ctx, req, res);
    throw bad_request("Cannot find suitable handler for request. Expected one of: "
                      "['EmbeddingCompletionRequest']");
  }
  if (body.is_object() && body.contains("messages")) return handle_chat_completions(ctx, req, res);
  if (body.is_object() && body.contains("prompt")) return handle_completions(ctx, req, res);
  throw bad_request("Cannot find suitable handler for request. Expected one of: "
                    "['ChatCompletionRequest', 'CompletionRequest']");
}

void handle_openapi(ServingContext& ctx, const httplib::Request&, httplib::Response& res) {
  set_json(res, openapi_document(ctx));
}

}  // namespace vllm::server
