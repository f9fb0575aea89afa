#include "server/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "engine/remote_ranks.h"
#include "model/bert.h"
#include "model/load.h"
#include "server/api_error.h"
#include "server/embeddings.h"
#include "server/generation.h"
#include "server/http_framing.h"
#include "server/log.h"
#include "server/router.h"
#include "server/routes.h"
#include "server/stream_pump.h"

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

// The framing error of the request this thread is reading, for the pre-routing handler.
thread_local std::string current_framing_error;

// Milliseconds left until `deadline` (0 when passed), capped at `cap_ms`.
int ms_until(std::chrono::steady_clock::time_point deadline, int cap_ms) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, cap_ms));
}

// One connection's socket as httplib's Stream, with a read deadline per request and a read
// buffer that keeps pipelined bytes from one request to the next.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(int sock, int read_ms, int write_ms)
      : sock_(sock), read_ms_(read_ms), write_ms_(write_ms) {}
  void set_deadline(std::chrono::steady_clock::duration d) {
    deadline_ = std::chrono::steady_clock::now() + d;
  }
  bool has_buffered() const { return pos_ < len_; }
  // Keeps the bytes read from now on (the request head) until take_head().
  void record_head() {
    head_.clear();
    recording_ = true;
  }
  std::string take_head() {
    recording_ = false;
    return std::move(head_);
  }

  bool is_readable() const override {
    return has_buffered() || wait(POLLIN, ms_until(deadline_, read_ms_));
  }
  bool is_writable() const override {
    return wait(POLLOUT, write_ms_) && !client_disconnected(sock_);
  }
  ssize_t read(char* ptr, size_t size) override {
    if (!has_buffered()) {
      if (!wait(POLLIN, ms_until(deadline_, read_ms_))) return -1;
      const ssize_t n = recv(sock_, buf_, sizeof buf_, 0);
      if (n <= 0) return n;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, len_ - pos_);
    std::memcpy(ptr, buf_ + pos_, n);
    if (recording_) {
      if (head_.size() + n > kMaxHeadBytes) return -1;
      head_.append(ptr, n);
    }
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!wait(POLLOUT, write_ms_)) return -1;
    return send(sock_, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(getsockname, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  bool wait(short events, int ms) const {
    pollfd p{sock_, events, 0};
    int r;
    while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR) {}
    return r > 0;
  }
  void address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    char text[INET6_ADDRSTRLEN] = "";
    if (get(sock_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return;
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<sockaddr_in*>(&a);
      inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      port = ntohs(v6->sin6_port);
    }
    ip = text;
  }

  int sock_;
  int read_ms_, write_ms_;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::now();
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
  bool recording_ = false;
  std::string head_;
};

// httplib's ThreadPool has a fixed size: connections beyond it wait, unanswered, behind slow
// ones. This pool starts a thread whenever no idle one can take a job (idle ones leave after
// a minute), so every accepted connection is served at once; Server caps their number.
class ElasticPool {
 public:
  // False once shut down: the job is not run.
  bool submit(std::function<void()> fn) {
    std::lock_guard lock(mutex_);
    if (stop_) return false;
    jobs_.push_back(std::move(fn));
    if (jobs_.size() > idle_) {
      ++threads_;
      std::thread([this] { work(); }).detach();
    }
    wake_.notify_one();
    return true;
  }
  // Runs the jobs queued, then waits for every thread to leave.
  void shutdown() {
    std::unique_lock lock(mutex_);
    stop_ = true;
    wake_.notify_all();
    gone_.wait(lock, [this] { return threads_ == 0; });
  }

 private:
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ++idle_;
      const bool woken = wake_.wait_for(lock, std::chrono::seconds(60),
                                        [this] { return stop_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) {
        if (stop_ || !woken) break;
        continue;
      }
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
    if (--threads_ == 0) gone_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable wake_, gone_;
  std::deque<std::function<void()>> jobs_;
  size_t idle_ = 0, threads_ = 0;
  bool stop_ = false;
};

// httplib owns (and deletes) the task queue it serves connections on: this one lends it the
// server's pool, which the stream pump also gives connections back to.
class PoolRef : public httplib::TaskQueue {
 public:
  explicit PoolRef(ElasticPool& pool) : pool_(pool) {}
  void enqueue(std::function<void()> fn) override { pool_.submit(std::move(fn)); }
  void shutdown() override { pool_.shutdown(); }

 private:
  ElasticPool& pool_;
};

// One client connection: its stream (whose read buffer keeps pipelined bytes) and how many
// more requests it may make. It moves from a pool thread to the stream pump and back.
struct Connection {
  Connection(int sock, int read_ms, int write_ms, size_t left)
      : strm(sock, read_ms, write_ms), left(left) {}
  DeadlineStream strm;
  size_t left;
};

int to_ms(time_t s, time_t us) { return static_cast<int>(s * 1000 + us / 1000); }

// httplib's Server with our connection loop: deadlines for each request's head and body (a
// client trickling bytes slower loses its connection instead of holding a worker), a cap on
// connections (503 beyond it; a connection holds a thread while it reads a request or runs a
// handler, none while it streams or waits after a stream), the full listen backlog, the
// connection's socket published to the handler's thread so generations can see their client
// leave, and server-sent-event streams handed to the stream pump so they hold no thread.
class Server : public httplib::Server {
 public:
  explicit Server(const ConnectionLimits& limits)
      : limits_(limits), pump_(limits.write_timeout_s * 1000) {
    new_task_queue = [this] { return new PoolRef(pool_); };
    set_keep_alive_timeout(limits.keep_alive_timeout_s);
    set_write_timeout(limits.write_timeout_s, 0);
  }
  // httplib listens with a backlog of 5: listen() again with the system's maximum.
  void widen_backlog() {
    int backlog = SOMAXCONN;
    std::ifstream("/proc/sys/net/core/somaxconn") >> backlog;
    ::listen(svr_sock_, backlog);
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    if (++connections_ > limits_.max_connections) {
      static const std::string k503 = [] {
        const std::string body = error_json(503, "too many connections").dump();
        return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
               "Connection: close\r\nContent-Length: " + std::to_string(body.size()) +
               "\r\n\r\n" + body;
      }();
      send(sock, k503.data(), k503.size(), MSG_NOSIGNAL);
      close_connection(sock);
      return false;
    }
    serve(std::make_shared<Connection>(sock, to_ms(read_timeout_sec_, read_timeout_usec_),
                                       to_ms(write_timeout_sec_, write_timeout_usec_),
                                       keep_alive_max_count_));
    return true;
  }

  void close_connection(int sock) {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    --connections_;
  }

  // Serves `conn`'s requests until it closes, or until a response streams: the pump then
  // owns the connection and gives it back to serve() on a pool thread after the stream.
  void serve(std::shared_ptr<Connection> conn) {
    DeadlineStream& strm = conn->strm;
    const int sock = strm.socket();
    while (conn->left > 0 && svr_sock_ != INVALID_SOCKET) {
      const bool last = conn->left-- == 1;
      // Idle between requests: the keep-alive timeout, then the head's deadline.
      strm.set_deadline(std::chrono::seconds(keep_alive_timeout_sec_));
      if (!strm.is_readable()) break;
      strm.set_deadline(std::chrono::seconds(limits_.head_timeout_s));
      strm.record_head();
      bool closed = false, head_ok = false;
      set_current_client_socket(sock);
      // Called once the head is read: checks it (the pre-routing handler answers a 400).
      const bool ok = process_request(strm, last, closed, [&](httplib::Request& req) {
        current_framing_error = framing_error(strm.take_head(), req);
        head_ok = current_framing_error.empty();
        strm.set_deadline(std::chrono::seconds(limits_.body_timeout_s));
      });
      set_current_client_socket(-1);
      current_framing_error.clear();
      if (std::shared_ptr<PumpedStream> stream = take_handed_off_stream()) {
        // The response head said "Connection: close" exactly when `last` or `closed`.
        const bool keep_alive = !last && !closed;
        pump_.add(sock, std::move(stream), [this, conn, keep_alive](bool ended) {
          if (ended && keep_alive) await_request(conn);
          else close_connection(conn->strm.socket());
        });
        return;
      }
      // After a head that was refused or could not be read, where the next request starts
      // is unknown: close.
      if (!ok || closed || !head_ok) break;
    }
    close_connection(sock);
  }

  // After a stream, the connection waits for its next request in the pump (pipelined bytes
  // already read: none), then goes back to serve() on a pool thread.
  void await_request(std::shared_ptr<Connection> conn) {
    const int sock = conn->strm.socket();
    auto resume = [this, conn](bool readable) {
      if (!(readable && pool_.submit([this, conn] { serve(conn); })))
        close_connection(conn->strm.socket());
    };
    if (conn->strm.has_buffered())
      resume(true);
    else
      pump_.await_request(sock, std::chrono::seconds(keep_alive_timeout_sec_), resume);
  }

  const ConnectionLimits limits_;
  std::atomic<int> connections_{0};
  ElasticPool pool_;
  StreamPump pump_;  // destroyed first: it closes the connections it still streams on
};

void configure(httplib::Server& svr, ServingContext& ctx) {
  svr.set_payload_max_length(ctx.config.max_body_bytes);
  svr.set_keep_alive_max_count(1000);
  if (ctx.config.uds.empty()) svr.set_tcp_nodelay(true);
  // SO_REUSEADDR only: with SO_REUSEPORT a second server would share a taken port silently.
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  svr.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (current_framing_error.empty()) return httplib::Server::HandlerResponse::Unhandled;
    set_request_id_header(ctx, req, res, ctx.new_request_id(""));
    set_json(res, error_json(400, current_framing_error), 400);
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
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
    if (!ctx_.config.log_stats || dt < 10.0 || ctx_.engine == nullptr) return;
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

// Serves ctx's routes until SIGTERM/SIGINT (then drains) or the listener fails.
int serve(ServingContext& ctx, const sigset_t& signals) {
  const ServerConfig& cfg = ctx.config;
  Server svr(cfg.connection_limits);
  configure(svr, ctx);
  add_routes(svr, ctx);
  const std::optional<std::string> where = bind(svr, cfg);
  if (!where) return 1;
  svr.widen_backlog();
  std::atomic<bool> listening{true};
  std::thread listener([&svr, &listening] {
    svr.listen_after_bind();
    listening = false;
  });
  log_info("Application startup complete. Listening on " + *where + " (Press CTRL+C to quit)");
  StatsLogger stats(ctx);
  bool engine_failed = false;
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
    // The engine's requests have had their errors; a broken node group fails the next step.
    std::string failure = ctx.engine ? ctx.engine->failure() : std::string();
    if (failure.empty() && ctx.nodes) failure = ctx.nodes->failure();
    if (!failure.empty()) {
      log_error("the engine failed, shutting down: " + failure);
      engine_failed = true;
      drain(ctx, svr, signals);
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
    std::_Exit(engine_failed ? 1 : 0);
  }
  listener.join();
  return engine_failed ? 1 : 0;
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
  const bool bert = is_bert_model(cfg.model_path);
  if (cfg.runner == "generate" && bert)
    throw Error(cfg.model_path + " is an embedding model (BertModel): it has no generate runner "
                "(use --runner pooling or auto)");
  if ((bert || cfg.runner == "pooling") && cfg.nodes.nnodes != 1)
    throw Error("--nnodes " + std::to_string(cfg.nodes.nnodes) +
                ": pooling models run in one process (use 1)");
  if (bert && cfg.tensor_parallel_size != 1)
    throw Error("--tensor-parallel-size " + std::to_string(cfg.tensor_parallel_size) +
                ": embedding models run on one rank (use 1)");
  if ((bert || cfg.runner == "pooling") && cfg.dtype)
    throw Error("--dtype: pooling models run on the CPU in the checkpoint's types (use auto)");
  if ((bert || cfg.runner == "pooling") && !cfg.quantization.empty() &&
      cfg.quantization != "none")
    throw Error("--quantization: pooling models run in the checkpoint's types (leave it unset)");
  if (bert || cfg.runner == "pooling") {  // a pooling model: no generation engine
    const PoolingRuntime pooling = start_pooling(ctx, bert);
    return serve(ctx, signals);
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Tensor parallel across processes: node 0 serves; the others run its steps on their ranks.
  std::unique_ptr<NodeGroup> group;
  if (cfg.nodes.nnodes > 1) {
    log_info("tensor-parallel node " + std::to_string(cfg.nodes.node_rank) + " of " +
             std::to_string(cfg.nodes.nnodes) + ": " +
             (cfg.nodes.node_rank == 0 ? "waiting for the other nodes on " : "joining ") +
             cfg.nodes.master_addr + ":" + std::to_string(cfg.nodes.master_port));
    group = std::make_unique<NodeGroup>(
        cfg.nodes, cfg.tensor_parallel_size,
        node_settings({cfg.model_path, cfg.device, cfg.dtype, cfg.quantization,
                       cfg.kv_cache_dtype, cfg.enforce_eager, cfg.engine.max_model_len}));
  }
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
  }, cfg.device, cfg.engine.max_model_len, cfg.tensor_parallel_size, cfg.dtype,
     cfg.quantization, group.get());
  model.set_enforce_eager(cfg.enforce_eager);
  model.set_kv_cache_dtype(cfg.kv_cache_dtype);
  if (group && !group->head()) {
    // A node that only runs steps has no drain to do: SIGINT and SIGTERM end it at once, as
    // their default action (node 0 then sees it go and fails the group, naming it).
    pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
    return run_worker_node(*group, model.ranks());
  }
  if (!model.tokenizer) throw Error(cfg.model_path + ": no tokenizer found");
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::unique_ptr<RemoteRanks> remote;
  if (group) remote = std::make_unique<RemoteRanks>(*group, model.ranks());
  auto core = std::make_unique<EngineCore>(model.ranks(), model.tokenizer.get(), cfg.engine,
                                           remote.get());
  char line[320];
  std::snprintf(line, sizeof line,
                "model loaded in %.2f s on %s: %s, vocab %d, max_model_len %d, weights %s, "
                "KV cache %s",
                load_s, cfg.device.str().c_str(), model.config().architecture.c_str(),
                model.config().vocab_size, core->max_model_len(), model.weights.c_str(),
                std::string(dtype_name(model.model->kv_dtype())).c_str());
  log_info(line);
  if (!core->memory_summary().empty()) log_info(core->memory_summary());
  log_info(core->kv_capacity().summary);
  ctx.max_model_len = core->max_model_len();
  ctx.vocab_size = model.config().vocab_size;
  ctx.tokenizer = model.tokenizer.get();
  ctx.grammars = std::make_unique<structured::GrammarCache>(structured::TokenVocab::from_tokenizer(
      *model.tokenizer, model.config().eos_token_ids, model.config().vocab_size));
  ctx.responses = std::make_unique<ResponseStore>(cfg.responses_store_max_count,
                                                  cfg.responses_store_max_bytes);
  ctx.start_time = unix_time();
  if (std::string warn = load_chat_template(cfg, *model.tokenizer, ctx.chat_template); !warn.empty())
    log_warning(warn);
  AsyncEngine engine(std::move(core));
  ctx.engine = &engine;
  ctx.nodes = remote.get();
  ctx.metrics.attach(engine);
  return serve(ctx, signals);
}

}  // namespace vllm::server
