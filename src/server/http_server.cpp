#include "server/http_server.h"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "model/load.h"
#include "server/api_error.h"
#include "server/log.h"
#include "server/router.h"
#include "server/routes.h"

namespace vllm::server {
namespace {

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "";
  }
}

void configure(httplib::Server& svr, ServingContext& ctx) {
  const size_t threads = std::max(64, ctx.config.engine.max_num_seqs + 32);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(ctx.config.max_body_bytes);
  svr.set_keep_alive_max_count(1000);
  if (ctx.config.uds.empty()) svr.set_tcp_nodelay(true);
  // SO_REUSEADDR only: with SO_REUSEPORT a second server would share a taken port silently.
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  const size_t limit = ctx.config.max_body_bytes;
  svr.set_error_handler([limit, &ctx](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    set_request_id_header(ctx, req, res, ctx.new_request_id(""));
    std::string msg = reason_phrase(res.status);
    if (msg.empty()) msg = "HTTP error " + std::to_string(res.status);
    if (res.status == 404) msg = "Not Found: " + req.method + " " + req.path;
    if (res.status == 413) msg = "request body larger than " + std::to_string(limit) + " bytes";
    set_json(res, error_json(res.status, msg), res.status);
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    set_json(res, error_json(500, "internal server error"), 500);
  });
  svr.set_logger([&ctx](const httplib::Request& req, const httplib::Response& res) {
    if (!ctx.config.access_log || !log_enabled(LogLevel::kInfo)) return;
    log_info(req.remote_addr + ":" + std::to_string(req.remote_port) + " - \"" + req.method + " " +
             req.path + " " + req.version + "\" " + std::to_string(res.status) + " " +
             reason_phrase(res.status));
  });
}

// Binds host:port (port 0: any free one) or the Unix socket of --uds; returns where it
// listens ("http://host:port" or "unix:PATH"), nullopt after logging why it cannot.
std::optional<std::string> bind(httplib::Server& svr, const ServerConfig& cfg) {
  if (!cfg.uds.empty()) {
    // A socket file left by a server that died is replaced (as uvicorn does); any other file
    // is not ours to remove.
    struct stat st {};
    if (lstat(cfg.uds.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        log_error("--uds " + cfg.uds + ": the path exists and is not a socket");
        return std::nullopt;
      }
      unlink(cfg.uds.c_str());
    }
    svr.set_address_family(AF_UNIX);
    if (cfg.uds.size() >= sizeof(sockaddr_un{}.sun_path) || !svr.bind_to_port(cfg.uds, 80)) {
      log_error("--uds " + cfg.uds + ": cannot bind the Unix socket (too long a path, a "
                "missing directory or no permission)");
      return std::nullopt;
    }
    return "unix:" + cfg.uds;
  }
  const int port = cfg.port == 0 ? svr.bind_to_any_port(cfg.host)
                                 : (svr.bind_to_port(cfg.host, cfg.port) ? cfg.port : -1);
  if (port <= 0) {
    log_error("[Errno 98] error while attempting to bind on address ('" + cfg.host + "', " +
              std::to_string(cfg.port) + "): address already in use or not available");
    return std::nullopt;
  }
  return "http://" + cfg.host + ":" + std::to_string(port);
}

std::string load_chat_template(const ServerConfig& config, const Tokenizer& tok,
                               std::optional<ChatTemplate>& out) {
  const std::string& source = config.chat_template.empty() ? tok.chat_template().value_or("")
                                                           : config.chat_template;
  if (source.empty()) return "no chat template: /v1/chat/completions needs --chat-template";
  try {
    out = ChatTemplate::parse(source);
  } catch (const Error& e) {
    if (!config.chat_template.empty()) throw Error(std::string("--chat-template: ") + e.what());
    return std::string("the model's chat template cannot be used: ") + e.what();
  }
  return "";
}

// vLLM's periodic engine line: throughput since the last line, queue sizes, cache use.
class StatsLogger {
 public:
  explicit StatsLogger(ServingContext& ctx) : ctx_(ctx), last_(std::chrono::steady_clock::now()) {}
  void tick() {
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - last_).count();
    if (!ctx_.config.log_stats || dt < 10.0) return;
    const int64_t prompt = ctx_.metrics.prompt_tokens(), gen = ctx_.metrics.generation_tokens();
    const core::SchedulerStats s = ctx_.engine->stats();
    const bool idle = prompt == prompt_ && gen == gen_ && s.num_running == 0 && s.num_waiting == 0;
    if (!idle) {
      const double hit = s.prefix_cache_queries > queries_
          ? 100.0 * (s.prefix_cache_hits - hits_) / (s.prefix_cache_queries - queries_) : 0.0;
      char line[256];
      std::snprintf(line, sizeof line,
                    "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f "
                    "tokens/s, Running: %d reqs, Waiting: %d reqs, KV cache usage: %.1f%%, "
                    "Prefix cache hit rate: %.1f%%",
                    (prompt - prompt_) / dt, (gen - gen_) / dt, s.num_running, s.num_waiting,
                    100.0 * s.kv_cache_usage, hit);
      log_info(line);
    }
    last_ = now;
    prompt_ = prompt;
    gen_ = gen;
    queries_ = s.prefix_cache_queries;
    hits_ = s.prefix_cache_hits;
  }

 private:
  ServingContext& ctx_;
  std::chrono::steady_clock::time_point last_;
  int64_t prompt_ = 0, gen_ = 0, queries_ = 0, hits_ = 0;
};

// Drain: refuse new work, give in-flight requests the timeout, abort the rest, stop listening.
void drain(ServingContext& ctx, httplib::Server& svr, const sigset_t& signals) {
  ctx.draining = true;
  log_info("Shutting down: waiting for " + std::to_string(ctx.in_flight.load()) +
           " in-flight request(s), up to " + std::to_string(ctx.config.drain_timeout_s) + " s");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(ctx.config.drain_timeout_s);
  timespec tick{0, 100'000'000};
  while (ctx.in_flight > 0 && std::chrono::steady_clock::now() < deadline) {
    if (sigtimedwait(&signals, nullptr, &tick) > 0) {
      log_warning("second signal: aborting in-flight requests now");
      break;
    }
  }
  if (ctx.in_flight > 0) {
    log_warning("aborting " + std::to_string(ctx.in_flight.load()) + " unfinished request(s)");
    ctx.abort_all = true;
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ctx.in_flight > 0 && std::chrono::steady_clock::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  svr.stop();
}

}  // namespace

int run_server(ServerConfig config) {
  // Signals go to sigtimedwait below: block them before any thread exists so all inherit it.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  ServingContext ctx;
  ctx.config = std::move(config);
  const ServerConfig& cfg = ctx.config;
  log_info(std::string("vllm-cpp ") + VLLM_VERSION + " serving " + cfg.model_path + " as '" +
           ctx.default_model() + "'");
  const auto t0 = std::chrono::steady_clock::now();
  // A progress bar on a terminal; log files get only the summary line below.
  const bool tty = isatty(STDERR_FILENO);
  LoadedModel model = load_model(cfg.model_path, [tty](int done, int total) {
    if (!tty) return;
    constexpr int kWidth = 30;
    const int fill = done * kWidth / total;
    std::fprintf(stderr, "\rLoading weights [%s%s] %d/%d layers%s",
                 std::string(fill, '#').c_str(), std::string(kWidth - fill, ' ').c_str(), done,
                 total, done == total ? "\n" : "");
    std::fflush(stderr);
  }, cfg.device, cfg.engine.max_model_len);
  if (!model.tokenizer) throw Error(cfg.model_path + ": no tokenizer found");
  model.model->set_enforce_eager(cfg.enforce_eager);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto core = std::make_unique<EngineCore>(*model.model, model.tokenizer.get(), cfg.engine);
  char line[160];
  std::snprintf(line, sizeof line, "model loaded in %.2f s on %s: %s, vocab %d, max_model_len %d",
                load_s, cfg.device.str().c_str(), model.config().architecture.c_str(),
                model.config().vocab_size, core->max_model_len());
  log_info(line);
  if (!core->memory_summary().empty()) log_info(core->memory_summary());
  log_info(core->kv_capacity().summary);
  ctx.max_model_len = core->max_model_len();
  ctx.vocab_size = model.config().vocab_size;
  ctx.tokenizer = model.tokenizer.get();
  ctx.start_time = unix_time();
  if (std::string warn = load_chat_template(cfg, *model.tokenizer, ctx.chat_template); !warn.empty())
    log_warning(warn);
  AsyncEngine engine(std::move(core));
  ctx.engine = &engine;
  ctx.metrics.attach(engine);

  httplib::Server svr;
  configure(svr, ctx);
  add_routes(svr, ctx);
  const std::optional<std::string> where = bind(svr, cfg);
  if (!where) return 1;
  std::atomic<bool> listening{true};
  std::thread listener([&svr, &listening] {
    svr.listen_after_bind();
    listening = false;
  });
  log_info("Application startup complete. Listening on " + *where + " (Press CTRL+C to quit)");
  StatsLogger stats(ctx);
  timespec tick{0, 200'000'000};
  for (;;) {
    stats.tick();
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig > 0) {
      log_info(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM"));
      drain(ctx, svr, signals);
      break;
    }
    if (!listening) {
      log_error("the HTTP listener stopped unexpectedly");
      break;
    }
  }
  // Idle keep-alive connections hold httplib's workers for up to their 5 s timeout; nothing
  // is in flight any more, so after a short grace the process leaves without them.
  const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (listening && std::chrono::steady_clock::now() < grace)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!cfg.uds.empty()) unlink(cfg.uds.c_str());
  log_info("Shutdown complete.");
  if (listening) {
    std::fflush(nullptr);
    std::_Exit(0);
  }
  listener.join();
  return 0;
}

}  // namespace vllm::server
