// `vllm-cpp serve [MODEL]`: the OpenAI-compatible server, with vLLM's flags where they apply
// to this engine (CPU-only flags are accepted and explained, unsupported values refused).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/load.h"
#include "runtime/device.h"
#include "runtime/ops.h"
#include "runtime/thread_pool.h"
#include "server/http_server.h"
#include "server/log.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"
#include "util/check.h"

namespace vllm::cli {
namespace {

struct ServeArgs {
  std::string model, model_flag;
  server::ServerConfig config;
  std::vector<std::string> served_model_names;
  std::string kv_cache_memory, chat_template, dtype = "auto", log_level = "info", device = "cpu";
  std::string cpu_order = "batch-invariant";
  std::string quantization, kv_cache_dtype = "auto";
  double gpu_memory_utilization = -1;
  int tensor_parallel_size = 1;
  KernelOptions kernels;
  int threads = 0;
  int64_t seed = 0;
  bool enable_prefix_caching = false, no_prefix_caching = false;
};

// vLLM's --chat-template takes a file path or the template text itself.
std::string read_chat_template(const std::string& arg) {
  std::ifstream f(arg, std::ios::binary);
  if (f) {
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  if (arg.find("{{") != std::string::npos || arg.find("{%") != std::string::npos) return arg;
  throw Error("--chat-template: cannot read " + arg);
}

// "/api/" -> "/api"; "" and "/" -> "" (no prefix). A proxy prefix must be an absolute path.
std::string normalize_root_path(std::string p) {
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (!p.empty() && p.front() != '/') throw Error("--root-path must start with '/': " + p);
  for (char ch : p)
    if (ch == '?' || ch == '#' || ch == '{' || ch == '}' || ch == ' ' || ch < 0x20)
      throw Error("--root-path must be a plain URL path: " + p);
  return p;
}

int run_serve(ServeArgs& a) {
  server::set_log_level(a.log_level);
  set_kernel_options(a.kernels);
  if (!a.model.empty() && !a.model_flag.empty() && a.model != a.model_flag)
    throw Error("the model is given twice: " + a.model + " and --model " + a.model_flag);
  if (a.model.empty()) a.model = a.model_flag;
  if (a.threads > 0) set_num_threads(a.threads);
  server::ServerConfig& c = a.config;
  c.model_path = a.model.empty() ? default_model_path() : a.model;
  c.served_model_names = a.served_model_names;
  if (c.served_model_names.empty())
    c.served_model_names = {a.model.empty() ? "HuggingFaceTB/SmolLM2-135M-Instruct" : a.model};
  c.device = parse_device(a.device);
  c.dtype = parse_dtype(a.dtype);
  c.quantization = a.quantization;
  c.kv_cache_dtype = a.kv_cache_dtype;
  c.tensor_parallel_size = a.tensor_parallel_size;
  set_cpu_order(parse_cpu_order(a.cpu_order));
  if (!a.kv_cache_memory.empty()) c.engine.kv_cache_memory = parse_bytes(a.kv_cache_memory);
  if (c.device.kind == DeviceKind::Cuda) {
    if (a.kv_cache_memory.empty())
      c.engine.gpu_memory_utilization = a.gpu_memory_utilization >= 0 ? a.gpu_memory_utilization : 0.9;
  } else if (a.gpu_memory_utilization >= 0) {
    server::log_warning("--gpu-memory-utilization does not apply on CPU; the KV cache takes "
                        "--kv-cache-memory (" + std::to_string(c.engine.kv_cache_memory >> 20) +
                        " MiB)");
  }
  c.engine.enable_prefix_caching = !a.no_prefix_caching;
  c.engine.seed = static_cast<uint64_t>(a.seed);
  if (!a.chat_template.empty()) c.chat_template = read_chat_template(a.chat_template);
  // As vLLM: --api-key wins, else VLLM_API_KEY from the environment.
  if (c.api_key.empty())
    if (const char* env = std::getenv("VLLM_API_KEY"); env != nullptr) c.api_key = env;
  c.root_path = normalize_root_path(c.root_path);
  if (c.max_logprobs == -1 || c.max_logprobs > server::kEngineMaxLogprobs)
    server::log_warning("--max-logprobs " + std::to_string(c.max_logprobs) + ": the engine "
                        "computes at most " + std::to_string(server::kEngineMaxLogprobs) +
                        " logprobs per token, so requests are capped at that");
  return server::run_server(c);
}

}  // namespace

void add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  server::ServerConfig& c = a->config;
  CLI::App* cmd = app.add_subcommand("serve", "Start the OpenAI-compatible API server");
  cmd->add_option("model", a->model, "A .gguf file or a Hugging Face model directory "
                                     "(default: the embedded SmolLM2-135M-Instruct)");
  cmd->add_option("--model", a->model_flag, "Same as the positional MODEL");
  cmd->add_option("--host", c.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", c.port, "Port to listen on")->check(CLI::Range(0, 65535))->capture_default_str();
  // trigger_on_parse: each occurrence replaces the list, so the last one wins as in argparse.
  cmd->add_option("--served-model-name", a->served_model_names,
                  "Model name(s) clients use (default: MODEL)")->trigger_on_parse();
  cmd->add_option("--api-key", c.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (default: $VLLM_API_KEY)");
  cmd->add_option("--uds", c.uds, "Listen on this Unix domain socket instead of --host/--port");
  cmd->add_option("--root-path", c.root_path,
                  "URL prefix the server is mounted under behind a proxy (routes answer with "
                  "and without it)");
  cmd->add_option("--chat-template", a->chat_template, "Chat template file (or template text)");
  cmd->add_flag("--trust-request-chat-template", c.trust_request_chat_template,
                "Render a 'chat_template' sent in a request (refused with 400 otherwise)");
  cmd->add_option("--chat-template-max-steps", c.render_limits.max_steps,
                  "Interpreter steps one chat template render may take")
      ->check(CLI::Range(uint64_t{1000}, uint64_t{1} << 40))->capture_default_str();
  cmd->add_option("--chat-template-max-output-bytes", c.render_limits.max_output_bytes,
                  "Largest rendered prompt (and string built on the way) of one render")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 34))->capture_default_str();
  cmd->add_option_function<double>("--chat-template-timeout", [a](double s) {
        const auto ms = static_cast<int64_t>(s * 1000);
        a->config.render_limits.max_time = std::chrono::milliseconds(ms);
      }, "Seconds one chat template render may take (default 1)")->check(CLI::Range(0.001, 3600.0));
  cmd->add_option("--max-model-len", c.engine.max_model_len,
                  "Prompt + output tokens per request (default: the model's)")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--max-num-seqs", c.engine.max_num_seqs, "Requests running at once")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", c.engine.max_num_batched_tokens, "Token budget of one step")
      ->check(CLI::Range(1, 1 << 24))->capture_default_str();
  cmd->add_option("--kv-cache-memory", a->kv_cache_memory, "KV cache budget, e.g. 2GiB (default 1GiB)");
  cmd->add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                  "Fraction of GPU memory for weights, activations and KV cache (default 0.9; "
                  "CUDA only)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--device", a->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--runner", c.runner,
                  "auto (from the checkpoint), generate, or pooling (embedding models, or a "
                  "decoder pooled by its last token: POST /v1/embeddings and /pooling)")
      ->check(CLI::IsMember({"auto", "generate", "pooling"}))->capture_default_str();
  add_cpu_order_option(*cmd, a->cpu_order);
  cmd->add_flag("--enforce-eager", c.enforce_eager, "No CUDA graphs for decode steps");
  cmd->add_option("--block-size", c.engine.block_size)->check(CLI::IsMember({8, 16, 32, 64, 128}))
      ->capture_default_str();
  cmd->add_flag("--enable-prefix-caching", a->enable_prefix_caching, "On by default");
  cmd->add_flag("--no-enable-prefix-caching", a->no_prefix_caching, "Turn prefix caching off");
  cmd->add_flag("--disable-hybrid-kv-cache-manager", c.engine.disable_hybrid_kv_cache_manager,
                "Windowed layers keep every block, as global layers do");
  cmd->add_option("--seed", a->seed, "Base seed for requests without their own")->capture_default_str();
  add_dtype_option(*cmd, a->dtype);
  add_quantization_option(*cmd, a->quantization);
  add_kv_cache_dtype_option(*cmd, a->kv_cache_dtype);
  cmd->add_option("--tensor-parallel-size", a->tensor_parallel_size,
                  "Ranks the model is split over (Megatron-style): on the CPU each rank is a "
                  "thread with its share of the cores; on CUDA rank r uses GPU --device's "
                  "index + r, over NCCL");
  add_node_group_options(*cmd, c.nodes);  // node 0 serves HTTP; the others only its steps
  add_kernel_options(*cmd, a->kernels);
  cmd->add_option("--log-level", a->log_level, "debug, info, warning, error, critical")->capture_default_str();
  cmd->add_option("--threads,-t", a->threads, "CPU threads (default: all cores)")->check(CLI::Range(1, 1024));
  cmd->add_option_function<std::string>("--scheduling-policy", [a](const std::string& v) {
        a->config.engine.priority_policy = v == "priority";
      }, "fcfs (default) or priority (lower 'priority' values first)")
      ->check(CLI::IsMember({"fcfs", "priority"}));
  cmd->add_flag("--enable-prompt-tokens-details", c.enable_prompt_tokens_details,
                "Report usage.prompt_tokens_details.cached_tokens (prefix-cache hits)");
  cmd->add_flag("--enable-request-id-headers", c.enable_request_id_headers,
                "X-Request-Id on every response: the client's own, else the id the server made");
  cmd->add_option("--max-logprobs", c.max_logprobs,
                  "Most logprobs / top_logprobs / prompt_logprobs a request may ask for (-1: "
                  "no limit; the engine computes at most 20)")->check(CLI::Range(-1, 1 << 30))->capture_default_str();
  cmd->add_flag("--return-tokens-as-token-ids", c.return_tokens_as_token_ids,
                "Logprob tokens as 'token_id:N' unless a request says otherwise");
  cmd->add_flag("--enable-force-include-usage", c.enable_force_include_usage,
                "Every stream ends with a usage chunk, as if stream_options.include_usage");
  cmd->add_flag("--enable-server-load-tracking", c.enable_server_load_tracking,
                "GET /load reports the requests in flight (else 0)");
  cmd->add_flag("--enable-tokenizer-info-endpoint", c.enable_tokenizer_info_endpoint,
                "Serve GET /tokenizer_info (tokenizer class, special tokens, chat template)");
  cmd->add_flag("--no-webui", [a](int64_t) { a->config.webui = false; },
                "Do not serve the chat page at / (it answers 404)");
  cmd->add_flag("--enable-auto-tool-choice", c.enable_auto_tool_choice,
                "Let tool_choice 'auto' read tool calls from the output (needs "
                "--tool-call-parser)");
  cmd->add_option("--tool-call-parser", c.tool_call_parser,
                  "How tool calls are read from model output (tool_choice 'auto')")
      ->check(CLI::IsMember(server::tool_parser_names()));
  cmd->add_option("--reasoning-parser", c.reasoning_parser,
                  "Split think-tag reasoning into reasoning_content / reasoning")
      ->check(CLI::IsMember(server::ReasoningParser::names()));
  cmd->add_option_function<std::string>("--structured-outputs-config", [a](const std::string& v) {
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(v);
        } catch (const nlohmann::json::exception&) {
          throw CLI::ValidationError("--structured-outputs-config", "must be a JSON object");
        }
        if (!j.is_object())
          throw CLI::ValidationError("--structured-outputs-config", "must be a JSON object");
        for (const auto& [k, val] : j.items()) {
          if (k == "enable_in_reasoning" && val.is_boolean()) {
            a->config.structured_enable_in_reasoning = val.get<bool>();
          } else if (k == "backend" && val.is_string() &&
                     (val == "auto" || val == "xgrammar" || val == "guidance")) {
            // One grammar engine here; vLLM's backend names are accepted and mean it.
          } else {
            throw CLI::ValidationError("--structured-outputs-config",
                                       "'" + k + "' is not supported (only "
                                       "enable_in_reasoning and backend)");
          }
        }
      }, "JSON, as vLLM's: {\"enable_in_reasoning\": true} lets grammars constrain the "
         "reasoning too");
  cmd->add_option("--responses-store-max-count", c.responses_store_max_count,
                  "Most Responses API responses kept for GET and previous_response_id (oldest "
                  "evicted first)")->capture_default_str();
  cmd->add_option("--responses-store-max-bytes", c.responses_store_max_bytes,
                  "Most bytes of stored Responses API responses (oldest evicted first)")
      ->check(CLI::Range(0.0, 1e12))->capture_default_str();
  cmd->add_flag("--disable-log-stats", [a](int64_t) { a->config.log_stats = false; },
                "No periodic throughput lines");
  cmd->add_flag("--disable-uvicorn-access-log", [a](int64_t) { a->config.access_log = false; },
                "No line per HTTP request");
  cmd->add_flag("--disable-log-requests", [](int64_t) {},
                "Accepted for vLLM compatibility (requests are logged at --log-level debug)");
  cmd->add_option("--drain-timeout", c.drain_timeout_s,
                  "Seconds in-flight requests get after SIGTERM before they are aborted")
      ->check(CLI::Range(0, 3600))->capture_default_str();
  cmd->add_option("--max-request-body-bytes", c.max_body_bytes, "Larger bodies get 413")
      ->check(CLI::Range(1024.0, 1e10))->capture_default_str();
  server::ConnectionLimits& lim = c.connection_limits;
  cmd->add_option("--max-connections", lim.max_connections,
                  "Connections open at once; beyond it a new one gets a 503")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--request-head-timeout", lim.head_timeout_s,
                  "Seconds to read a request's line and headers once it starts")
      ->check(CLI::Range(1, 3600))->capture_default_str();
  cmd->add_option("--request-body-timeout", lim.body_timeout_s,
                  "Seconds to read a request's body after its headers")
      ->check(CLI::Range(1, 3600))->capture_default_str();
  cmd->add_option("--timeout-keep-alive", lim.keep_alive_timeout_s,
                  "Seconds an idle kept-alive connection waits for its next request")
      ->check(CLI::Range(1, 3600))->capture_default_str();
  cmd->add_option("--write-timeout", lim.write_timeout_s,
                  "Seconds a client may read nothing of a response before it is dropped")
      ->check(CLI::Range(1, 3600))->capture_default_str();
  cmd->callback([a] {
    if (a->config.enable_auto_tool_choice && a->config.tool_call_parser.empty())
      throw CLI::ValidationError("--enable-auto-tool-choice",
                                 "requires --tool-call-parser to be set");
    std::exit(run_guarded([&] { return run_serve(*a); }));
  });
}

}  // namespace vllm::cli
