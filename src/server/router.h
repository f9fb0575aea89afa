// The route table: every path the server answers, with its method and handler. The HTTP server
// registers exactly these routes and /openapi.json is generated from the same table, so the
// document cannot drift from what is served.
#pragma once
#include <vector>

#include "server/protocol.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace vllm::server {

struct ServingContext;
struct ServerConfig;

using Handler = void (*)(ServingContext&, const httplib::Request&, httplib::Response&);

struct Route {
  const char* method;  // "GET" or "POST"
  const char* path;    // OpenAPI form; a "{name}" segment matches the rest of the path
  Handler handler;
  const char* summary;
  bool json_body = false;              // a JSON body: other Content-Types get 400, as vLLM
  bool refuse_while_draining = false;  // new work gets 503 during shutdown
  bool (*enabled)(const ServerConfig&) = nullptr;  // null: always served
  // Which models answer it; others get vLLM's 400 "The model does not support <api> API".
  enum class Needs { kAny, kGeneration, kPooling };
  Needs needs = Needs::kAny;
  const char* api = nullptr;
  // Anthropic's routes answer errors in Anthropic's shape and take the key as x-api-key too.
  enum class Dialect { kOpenAI, kAnthropic };
  Dialect dialect = Dialect::kOpenAI;
};

// The routes this configuration serves (disabled ones are absent: 404).
std::vector<Route> served_routes(const ServerConfig& config);

// Registers every served route under "/" and, with --root-path, under the prefix too; other
// methods on a known path get 405. Every answer goes through one error boundary.
void add_routes(httplib::Server& svr, ServingContext& ctx);

// OpenAPI 3 document of served_routes(): paths, methods, summaries, JSON request bodies.
ojson openapi_document(const ServingContext& ctx);

// vLLM's request id header (--enable-request-id-headers): the client's X-Request-Id echoed,
// else `made_id` (the id the server made for this request). No-op when the flag is off.
void set_request_id_header(const ServingContext& ctx, const httplib::Request& req,
                           httplib::Response& res, const std::string& made_id);

}  // namespace vllm::server
