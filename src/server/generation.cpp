#include "server/generation.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "server/api_error.h"
#include "server/serving.h"

namespace vllm::server {

namespace {
thread_local int current_client_socket = -1;
}  // namespace

void set_current_client_socket(int fd) { current_client_socket = fd; }

bool client_disconnected(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  // Readable: either the peer's FIN (recv sees 0 bytes) or a pipelined next request.
  char byte;
  return recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

struct Generation::Shared {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<TaggedOutput> queue;
  std::function<void()> listener;
};

Generation::Generation(ServingContext& ctx, std::string base_id)
    : ctx_(ctx),
      base_id_(std::move(base_id)),
      shared_(std::make_shared<Shared>()),
      client_socket_(current_client_socket) {
  ++ctx_.in_flight;
}

Generation::~Generation() {
  set_listener(nullptr);
  abort();
  --ctx_.in_flight;
}

void Generation::add(std::vector<int32_t> prompt, const SamplingParams& params, int priority) {
  const int prompt_index = static_cast<int>(engine_ids_.size());
  const std::string id = base_id_ + "-" + std::to_string(prompt_index);
  std::shared_ptr<Shared> shared = shared_;
  auto on_output = [shared, prompt_index](const RequestOutput& out) {
    {
      std::lock_guard lock(shared->mutex);
      shared->queue.push_back({prompt_index, out});
      if (shared->listener) shared->listener();
    }
    shared->ready.notify_all();
  };
  try {
    ctx_.engine->add_request(id, std::move(prompt), params, std::move(on_output), priority);
  } catch (const EngineFailed& e) {
    throw ApiError(500, e.what());
  }
  engine_ids_.push_back(id);
  total_completions_ += params.n;
}

std::vector<TaggedOutput> Generation::next(std::chrono::milliseconds timeout) {
  abort_if_draining();
  std::vector<TaggedOutput> outs;
  {
    std::unique_lock lock(shared_->mutex);
    // At most 100 ms: a long step (or a queue) sends nothing for a while, and a client that
    // left is noticed only here.
    shared_->ready.wait_for(lock, std::min(timeout, std::chrono::milliseconds(100)),
                            [&] { return !shared_->queue.empty(); });
    outs.assign(std::make_move_iterator(shared_->queue.begin()),
                std::make_move_iterator(shared_->queue.end()));
    shared_->queue.clear();
  }
  for (const auto& o : outs)
    if (o.out.finished) ++consumed_finished_;
  // A completion that failed on the request's own input fails the whole request; the rest
  // is aborted (here, so that a stream's Generation, kept by the pump, stops too).
  for (const auto& o : outs)
    if (o.out.finished && o.out.finish_reason == "error") {
      abort();
      throw ApiError(o.out.engine_failed ? 500 : 400, o.out.error);
    }
  // Checked after every engine step's outputs: a client that went away stops its requests
  // (their final "abort" outputs then arrive like any other).
  if (!aborted_ && client_socket_ >= 0 && client_disconnected(client_socket_)) abort();
  return outs;
}

void Generation::abort_if_draining() {
  if (ctx_.abort_all && !aborted_) abort();
}

void Generation::set_listener(std::function<void()> listener) {
  std::lock_guard lock(shared_->mutex);
  shared_->listener = std::move(listener);
}

void Generation::abort() {
  if (aborted_ || done()) return;
  aborted_ = true;
  // Finished requests are unknown to the engine by now: abort() is then a no-op.
  for (const std::string& id : engine_ids_) ctx_.engine->abort(id);
}

}  // namespace vllm::server
