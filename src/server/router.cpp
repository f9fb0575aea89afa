#include "server/router.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/log.h"
#include "server/routes.h"
#include "server/serving.h"

namespace vllm::server {
namespace {

bool tokenizer_info_on(const ServerConfig& c) { return c.enable_tokenizer_info_endpoint; }
bool webui_on(const ServerConfig& c) { return c.webui; }
constexpr Route::Needs kGen = Route::Needs::kGeneration;
constexpr Route::Dialect kAnthropic = Route::Dialect::kAnthropic;

const std::vector<Route>& route_table() {
  static const std::vector<Route> table = {
      {"POST", "/v1/completions", handle_completions, "Create a completion", true, true,
       nullptr, kGen, "Completions"},
      {"POST", "/v1/chat/completions", handle_chat_completions, "Create a chat completion",
       true, true, nullptr, kGen, "Chat Completions"},
      {"POST", "/v1/chat/completions/batch", handle_chat_completions_batch,
       "Chat completions for a list of conversations, one choice each", true, true, nullptr,
       kGen, "Chat Completions"},
      {"POST", "/v1/messages", handle_messages, "Create a message (Anthropic Messages API)",
       true, true, nullptr, kGen, "Messages", kAnthropic},
      {"POST", "/v1/messages/count_tokens", handle_count_tokens,
       "Count the tokens of a message request (Anthropic Messages API)", true, true, nullptr,
       kGen, "Messages", kAnthropic},
      {"POST", "/v1/responses", handle_responses_create,
       "Create a model response (OpenAI Responses API)", true, true, nullptr, kGen, "Responses"},
      {"GET", "/v1/responses/{response_id}", handle_responses_retrieve, "A stored response",
       false, false, nullptr, kGen, "Responses"},
      {"POST", "/v1/responses/{response_id}/cancel", handle_responses_cancel,
       "Cancel a background response (none run here: 400 for a stored one, else 404)", false,
       false, nullptr, kGen, "Responses"},
      {"POST", "/v1/embeddings", handle_embeddings, "Create embeddings (embedding models)", true,
       true, nullptr, Route::Needs::kPooling, "Embeddings"},
      {"POST", "/pooling", handle_pooling, "Pooled vectors of the inputs (pooling models)",
       true, true, nullptr, Route::Needs::kPooling, "Pooling"},
      {"GET", "/v1/models", handle_models, "List the served models"},
      {"GET", "/v1/models/{model}", handle_model, "The card of one served model"},
      {"POST", "/tokenize", handle_tokenize, "Tokenize a prompt or chat messages", true, true},
      {"POST", "/detokenize", handle_detokenize, "Token ids to text", true, true},
      {"POST", "/invocations", handle_invocations,
       "SageMaker: a chat or completion request, routed by its body", true, true},
      {"GET", "/health", handle_health, "200 while serving, 503 while shutting down"},
      {"GET", "/ping", handle_health, "SageMaker health check"},
      {"POST", "/ping", handle_health, "SageMaker health check"},
      {"GET", "/load", handle_load, "Requests in flight (--enable-server-load-tracking)"},
      {"GET", "/tokenizer_info", handle_tokenizer_info, "Tokenizer class, special tokens, "
       "chat template", false, false, tokenizer_info_on},
      {"GET", "/version", handle_version, "Server version"},
      {"GET", "/metrics", handle_metrics, "Prometheus metrics"},
      {"GET", "/openapi.json", handle_openapi, "This document"},
      {"GET", "/", handle_chat_page, "The chat page (HTML; --no-webui turns it off)", false,
       false, webui_on},
  };
  return table;
}

// `path` as an httplib pattern (a regex matched against the whole path): literal characters
// escaped, a "{name}" segment matching the rest of the path (model ids contain '/').
std::string path_regex(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    const char ch = path[i];
    if (ch == '{') {
      i = path.find('}', i);
      out += "(.+)";
      continue;
    }
    if (std::string_view(".^$|()[]{}*+?\\").find(ch) != std::string_view::npos) out += '\\';
    out += ch;
  }
  return out;
}

// The path relative to --root-path: "/api/v1/models" -> "/v1/models".
std::string_view local_path(const ServerConfig& c, std::string_view path) {
  const std::string& root = c.root_path;
  if (!root.empty() && path.substr(0, root.size()) == root &&
      (path.size() == root.size() || path[root.size()] == '/'))
    path.remove_prefix(root.size());
  return path;
}

// Anthropic's clients send the key as x-api-key. vLLM (0.26) checks only the Bearer header
// (its issue 51572); taking both on Anthropic's routes lets those clients in unchanged.
bool authorized(const ServingContext& ctx, const Route& route, const httplib::Request& req) {
  if (ctx.config.api_key.empty() || local_path(ctx.config, req.path).substr(0, 3) != "/v1")
    return true;
  if (route.dialect == Route::Dialect::kAnthropic &&
      req.get_header_value("x-api-key") == ctx.config.api_key)
    return true;
  return req.get_header_value("Authorization") == "Bearer " + ctx.config.api_key;
}

// vLLM's validate_json_request: the media type must be application/json (parameters such as
// charset allowed); anything else is a 400 before the body is read. Older vLLM releases
// answered 415 (an HTTPException); vLLM now raises a RequestValidationError, which its handler
// answers with 400 "Bad Request" and this message (vllm/entrypoints/serve/utils), so 400 here.
void require_json_content_type(const httplib::Request& req) {
  std::string type = req.get_header_value("Content-Type");
  type = type.substr(0, type.find(';'));
  std::transform(type.begin(), type.end(), type.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  type.erase(std::remove_if(type.begin(), type.end(), [](unsigned char ch) { return std::isspace(ch); }),
             type.end());
  if (type != "application/json")
    throw bad_request("Unsupported Media Type: Only 'application/json' is allowed");
}

void set_error(httplib::Response& res, const Route& route, int status,
               const std::string& message, const std::optional<std::string>& param = {}) {
  if (route.dialect == Route::Dialect::kAnthropic)
    set_json(res, anthropic_error_json(status, message), status);
  else
    set_json(res, error_json(status, message, param), status);
}

// The one error boundary: every failure of a handler becomes error JSON (OpenAI's shape, or
// Anthropic's on its routes).
httplib::Server::Handler wrap(ServingContext& ctx, const Route& route) {
  return [&ctx, route](const httplib::Request& req, httplib::Response& res) {
    try {
      if (!authorized(ctx, route, req)) throw ApiError(401, "Unauthorized");
      if (route.json_body) require_json_content_type(req);
      if (route.refuse_while_draining && ctx.draining)
        throw ApiError(503, "The server is shutting down.");
      if (route.needs != Route::Needs::kAny &&
          (route.needs == Route::Needs::kPooling) != (ctx.pooling != nullptr))
        throw bad_request(std::string("The model does not support ") + route.api + " API");
      route.handler(ctx, req, res);
    } catch (const ApiError& e) {
      set_error(res, route, e.status(), e.what(), e.param());
    } catch (const nlohmann::json::exception& e) {
      set_error(res, route, 400, std::string("invalid request: ") + e.what());
    } catch (const std::exception& e) {
      log_error(std::string("internal error on ") + req.path + ": " + e.what());
      set_error(res, route, 500, std::string("internal server error: ") + e.what());
    }
    if (!res.has_header("X-Request-Id"))
      set_request_id_header(ctx, req, res, ctx.new_request_id(""));
  };
}

}  // namespace

std::vector<Route> served_routes(const ServerConfig& config) {
  std::vector<Route> out;
  for (const Route& r : route_table())
    if (r.enabled == nullptr || r.enabled(config)) out.push_back(r);
  return out;
}

void set_request_id_header(const ServingContext& ctx, const httplib::Request& req,
                           httplib::Response& res, const std::string& made_id) {
  if (!ctx.config.enable_request_id_headers) return;
  const std::string sent = req.get_header_value("X-Request-Id");
  res.set_header("X-Request-Id", sent.empty() ? made_id : sent);
}

void add_routes(httplib::Server& svr, ServingContext& ctx) {
  std::vector<std::string> prefixes = {""};
  if (!ctx.config.root_path.empty()) prefixes.push_back(ctx.config.root_path);
  const std::vector<Route> routes = served_routes(ctx.config);
  auto not_allowed = [&ctx](const httplib::Request& req, httplib::Response& res) {
    set_json(res, error_json(405, "Method Not Allowed"), 405);
    set_request_id_header(ctx, req, res, ctx.new_request_id(""));
  };
  for (const std::string& prefix : prefixes) {
    std::set<std::pair<std::string, std::string>> registered;  // (method, path)
    for (const Route& r : routes) {
      const std::string pattern = path_regex(prefix + r.path);
      if (std::string_view(r.method) == "GET") svr.Get(pattern, wrap(ctx, r));
      else svr.Post(pattern, wrap(ctx, r));
      registered.insert({r.method, r.path});
    }
    for (const Route& r : routes) {
      const std::string pattern = path_regex(prefix + r.path);
      for (const char* method : {"GET", "POST"}) {
        if (!registered.insert({method, r.path}).second) continue;
        if (std::string_view(method) == "GET") svr.Get(pattern, not_allowed);
        else svr.Post(pattern, not_allowed);
      }
    }
  }
}

ojson openapi_document(const ServingContext& ctx) {
  ojson paths = ojson::object();
  for (const Route& r : served_routes(ctx.config)) {
    std::string method = r.method;
    std::transform(method.begin(), method.end(), method.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    std::string op_id = method;
    for (const char* p = r.path; *p; ++p) op_id += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
    ojson op = {{"summary", r.summary}, {"operationId", op_id}};
    const ojson json_object = {{"application/json", {{"schema", {{"type", "object"}}}}}};
    const std::string path = r.path;
    if (auto open = path.find('{'); open != std::string::npos) {
      const std::string name = path.substr(open + 1, path.find('}', open) - open - 1);
      op["parameters"] = ojson::array({{{"name", name},
                                        {"in", "path"},
                                        {"required", true},
                                        {"schema", {{"type", "string"}}}}});
    }
    if (r.json_body)
      op["requestBody"] = {{"required", true}, {"content", json_object}};
    op["responses"] = {{"200", {{"description", "Successful Response"}}},
                       {"default", {{"description", "OpenAI-style error JSON"},
                                    {"content", json_object}}}};
    paths[path][method] = std::move(op);
  }
  ojson doc = {{"openapi", "3.1.0"},
               {"info", {{"title", "vllm-cpp"}, {"version", VLLM_VERSION}}}};
  if (!ctx.config.root_path.empty())
    doc["servers"] = ojson::array({{{"url", ctx.config.root_path}}});
  doc["paths"] = std::move(paths);
  return doc;
}

}  // namespace vllm::server
