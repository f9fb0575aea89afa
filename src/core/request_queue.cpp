#include "core/request_queue.h"

#include <algorithm>

namespace vllm::core {
namespace {

bool before(const Request* a, const Request* b) {
  if (a->priority != b->priority) return a->priority < b->priority;
  return a->arrival_seq < b->arrival_seq;
}

}  // namespace

void RequestQueue::insert_by_priority(Request* request) {
  queue_.insert(std::upper_bound(queue_.begin(), queue_.end(), request, before), request);
}

void RequestQueue::add(Request* request) {
  if (policy_ == SchedulingPolicy::kPriority) insert_by_priority(request);
  else queue_.push_back(request);
}

void RequestQueue::prepend(Request* request) {
  // Under PRIORITY a preempted request keeps its place by key, as in vLLM's heap.
  if (policy_ == SchedulingPolicy::kPriority) insert_by_priority(request);
  else queue_.push_front(request);
}

bool RequestQueue::remove(const Request* request) {
  auto it = std::find(queue_.begin(), queue_.end(), request);
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

}  // namespace vllm::core
