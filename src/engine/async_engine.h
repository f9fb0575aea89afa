// AsyncEngine: runs EngineCore::step() on its own thread. Any thread may add or abort
// requests; each request's outputs arrive through its callback on the engine thread, the
// last one with finished = true (also after an abort).
#pragma once
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "engine/engine_core.h"

namespace vllm {

class AsyncEngine {
 public:
  using Callback = std::function<void(const RequestOutput&)>;

  explicit AsyncEngine(std::unique_ptr<EngineCore> core);
  ~AsyncEngine();  // aborts what is left, then stops the thread

  // Throws vllm::Error for an invalid request (nothing is queued then).
  void add_request(const std::string& id, std::vector<int32_t> prompt, SamplingParams params,
                   Callback on_output, int priority = 0);
  bool abort(const std::string& id);
  core::SchedulerStats stats() const;
  const EngineCore& core() const { return *core_; }

 private:
  void loop();

  std::unique_ptr<EngineCore> core_;
  mutable std::mutex mutex_;  // guards core_ and callbacks_
  std::condition_variable wake_;
  std::unordered_map<std::string, std::pair<Callback, int>> callbacks_;  // id -> (cb, live n)
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace vllm
