// One HTTP request's engine requests (one per prompt, each with n completions) and the queue
// their outputs arrive on from the engine thread. Destroying a Generation aborts whatever is
// unfinished, so a client that goes away frees its KV blocks.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace vllm::server {

struct ServingContext;

// The client socket of the HTTP request this thread serves (-1: none). The server sets it
// around each request; a Generation made meanwhile aborts itself once that client is gone.
void set_current_client_socket(int fd);
// True once the peer has closed (or reset) the connection.
bool client_disconnected(int fd);

struct TaggedOutput {
  int prompt_index = 0;
  RequestOutput out;
};

class Generation {
 public:
  Generation(ServingContext& ctx, std::string base_id);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Queues one prompt (its prompt_index is the number of earlier add() calls). Throws
  // vllm::Error, as the engine does, for invalid input.
  void add(std::vector<int32_t> prompt, const SamplingParams& params, int priority);
  // The outputs that arrived, waiting up to `timeout` for at least one; empty on timeout.
  // Aborts everything when the server's drain timeout has passed.
  std::vector<TaggedOutput> next(std::chrono::milliseconds timeout);
  // Every completion has delivered its finished output and next() has returned it.
  bool done() const { return consumed_finished_ == total_completions_; }
  void abort();
  // Aborts everything once the server's drain timeout has passed (next() checks it too).
  void abort_if_draining();
  // Called on the engine's thread, under the queue's lock, whenever outputs arrive (nullptr:
  // none). It must not block nor call this Generation; once set_listener returns, a listener
  // it replaced is no longer running. The stream pump is woken this way instead of polling.
  void set_listener(std::function<void()> listener);
  const std::string& id() const { return base_id_; }

 private:
  struct Shared;  // queue and timing state, shared with the engine callbacks
  ServingContext& ctx_;
  std::string base_id_;
  std::shared_ptr<Shared> shared_;
  std::vector<std::string> engine_ids_;
  int total_completions_ = 0;
  int consumed_finished_ = 0;
  bool aborted_ = false;
  int client_socket_ = -1;
};

}  // namespace vllm::server
