// RequestQueue: the scheduler's waiting queue in scheduling order. FCFS: arrival order, with
// preempted requests put back at the front; PRIORITY: (priority, arrival_seq) ascending.
#pragma once
#include <cstddef>
#include <deque>

#include "core/request.h"

namespace vllm::core {

enum class SchedulingPolicy { kFcfs, kPriority };

class RequestQueue {
 public:
  explicit RequestQueue(SchedulingPolicy policy) : policy_(policy) {}

  void add(Request* request);      // a new arrival
  void prepend(Request* request);  // a preempted request, scheduled again before new arrivals
  Request* peek() const { return queue_.front(); }
  void pop() { queue_.pop_front(); }
  bool remove(const Request* request);  // false if absent
  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  auto begin() const { return queue_.begin(); }
  auto end() const { return queue_.end(); }

 private:
  void insert_by_priority(Request* request);

  SchedulingPolicy policy_;
  std::deque<Request*> queue_;
};

}  // namespace vllm::core
