// What every route handler shares: the server's configuration, the engine (generative or
// pooling: exactly one is set), the tokenizer and chat template, metrics, and the drain state.
// Created once by run_server().
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "runtime/dtype.h"
#include "engine/pooling_engine.h"
#include "engine/remote_ranks.h"
#include "runtime/node_group.h"
#include "server/metrics.h"
#include "server/response_store.h"
#include "structured/compiler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vllm::server {

// The most logprobs per token the engine computes (EngineCore refuses more); --max-logprobs
// above it (or -1) is capped to it.
inline constexpr int kEngineMaxLogprobs = 20;

// How long and how many: what a client may hold of the HTTP layer.
struct ConnectionLimits {
  int max_connections = 4096;   // open at once; beyond it a new connection gets a 503 and closed
  int head_timeout_s = 10;      // to read a request's line and headers, once its first byte came
  int body_timeout_s = 60;      // then to read its body
  int keep_alive_timeout_s = 5;  // idle between a connection's requests
  int write_timeout_s = 5;      // a client that reads nothing for this long is dropped
};

struct ServerConfig {
  std::string model_path;                      // as given (a .gguf file or a HF directory)
  std::string runner = "auto";                 // vLLM's --runner: auto, generate or pooling
  Device device;                               // where the weights, KV cache and kernels live
  bool enforce_eager = false;                  // no CUDA graphs
  std::optional<DType> dtype;                 // --dtype (unset: auto)
  std::string quantization;                   // --quantization ("", none or fp8)
  std::string kv_cache_dtype = "auto";        // --kv-cache-dtype (auto, fp8, fp8_e4m3)
  int tensor_parallel_size = 1;               // ranks, each a thread with its own shard
  NodeGroupConfig nodes;                      // ranks spread over processes (--nnodes ...)
  std::vector<std::string> served_model_names;  // the first one is the default
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;               // empty: no auth
  std::string chat_template;         // template source overriding the tokenizer's
  bool trust_request_chat_template = false;  // else a request's own template gets 400
  RenderLimits render_limits;        // every chat template render, server or request template
  size_t max_body_bytes = size_t(32) << 20;
  ConnectionLimits connection_limits;
  int drain_timeout_s = 30;          // SIGTERM: time in-flight requests get before an abort
  int max_n = 128;                   // cap on n and on choices of one request
  bool access_log = true;            // one line per HTTP request (uvicorn's)
  bool log_stats = true;             // throughput and cache lines every 10 s while busy
  bool enable_prompt_tokens_details = false;  // usage.prompt_tokens_details.cached_tokens
  std::string uds;                   // non-empty: listen on this Unix socket, not host:port
  std::string root_path;             // "/prefix": routes answer under it as well as without
  bool enable_request_id_headers = false;  // X-Request-Id on every response
  int max_logprobs = 20;             // cap on logprobs / top_logprobs / prompt_logprobs; -1: vocab
  bool return_tokens_as_token_ids = false;  // default of the request field of that name
  bool enable_force_include_usage = false;  // streams end with usage as if include_usage
  bool enable_server_load_tracking = false;  // GET /load counts requests in flight
  bool enable_tokenizer_info_endpoint = false;  // GET /tokenizer_info (else 404)
  bool webui = true;                     // GET / serves the chat page (--no-webui: 404)
  bool enable_auto_tool_choice = false;  // tool_choice "auto" (needs tool_call_parser)
  std::string tool_call_parser;          // --tool-call-parser: how "auto" reads calls
  std::string reasoning_parser;          // --reasoning-parser: think-tag splitting
  // --structured-outputs-config enable_in_reasoning: grammars also constrain the reasoning
  // (else, as vLLM, they start after the reasoning parser's end tag).
  bool structured_enable_in_reasoning = false;
  // Responses API store (store: true): the most responses kept, and their total JSON bytes;
  // past either bound the oldest are evicted.
  size_t responses_store_max_count = 1000;
  size_t responses_store_max_bytes = size_t(64) << 20;
  EngineConfig engine;
};

struct ServingContext {
  ServerConfig config;
  AsyncEngine* engine = nullptr;     // a generative model (else null)
  const RemoteRanks* nodes = nullptr;  // node 0 of a group spanning processes (else null)
  PoolingEngine* pooling = nullptr;  // an embedding model (else null)
  const Tokenizer* tokenizer = nullptr;
  std::optional<ChatTemplate> chat_template;
  int max_model_len = 0;
  int vocab_size = 0;
  // Compiled structured-output grammars for the served tokenizer (null: none available).
  std::unique_ptr<structured::GrammarCache> grammars;
  std::unique_ptr<ResponseStore> responses;  // generative models only
  int64_t start_time = 0;  // unix seconds, for "created" of /v1/models
  Metrics metrics;
  std::atomic<bool> draining{false};   // new generation requests get 503
  std::atomic<bool> abort_all{false};  // drain timed out: live requests abort themselves
  std::atomic<int> in_flight{0};       // generation requests not yet finished

  const std::string& default_model() const { return config.served_model_names.front(); }
  // Throws ApiError 404 when `name` is set and not served; returns the name to report.
  std::string resolve_model(const std::string& name) const;
  // "cmpl-<32 hex>" style ids, unique within the process.
  std::string new_request_id(const char* prefix);

 private:
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace vllm::server
