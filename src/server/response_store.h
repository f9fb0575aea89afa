// Stored Responses API responses (store: true), in memory under two bounds: a count and a byte
// total. The oldest response is evicted first; a response larger than the byte cap on its own
// is not kept. Thread-safe: handlers on many HTTP threads put and get.
#pragma once
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "server/protocol.h"

namespace vllm::server {

struct StoredResponse {
  ojson response;  // the response object as GET /v1/responses/{id} returns it
  // The conversation it ended: its input messages (without instructions) and its output as
  // assistant / tool-call messages, ready to start a chained request's conversation.
  ojson messages;
};

class ResponseStore {
 public:
  ResponseStore(size_t max_count, size_t max_bytes)
      : max_count_(max_count), max_bytes_(max_bytes) {}
  // Keeps `entry` under `id`, evicting the oldest entries past either bound. False when the
  // entry alone exceeds the byte cap (or the count cap is 0): nothing is kept.
  bool put(const std::string& id, StoredResponse entry);
  std::optional<StoredResponse> get(const std::string& id) const;
  size_t size() const;

 private:
  struct Slot {
    StoredResponse entry;
    size_t bytes = 0;
    std::list<std::string>::iterator order;
  };
  size_t max_count_;
  size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<std::string> order_;  // oldest first
  std::unordered_map<std::string, Slot> slots_;
  size_t bytes_ = 0;
};

}  // namespace vllm::server
