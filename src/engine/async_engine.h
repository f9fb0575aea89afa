// AsyncEngine: runs EngineCore::step() on its own thread. Any thread may add or abort
// requests; each request's outputs arrive through its callback on the engine thread, the
// last one with finished = true (also after an abort). Only the engine thread touches the
// EngineCore: adds and aborts wait in a queue it takes between steps, so a caller never waits
// for a step (a lock held across steps starved callers under continuous decoding).
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_core.h"

namespace vllm {

// What add_request throws once a step has failed (AsyncEngine::failure).
class EngineFailed : public Error {
 public:
  explicit EngineFailed(const std::string& why) : Error("the engine failed: " + why) {}
};

class AsyncEngine {
 public:
  using Callback = std::function<void(const RequestOutput&)>;
  // Called on the engine thread after each step, before that step's outputs are delivered.
  using StatsObserver = std::function<void(const IterationStats&, const core::SchedulerStats&)>;

  explicit AsyncEngine(std::unique_ptr<EngineCore> core);
  ~AsyncEngine();  // aborts what is left, then stops the thread

  // Throws vllm::Error for an invalid request or an id still in use (nothing is queued then).
  void add_request(const std::string& id, std::vector<int32_t> prompt, SamplingParams params,
                   Callback on_output, int priority = 0);
  // Queues an abort; false if no live request has this id.
  bool abort(const std::string& id);
  // As of the last finished step.
  core::SchedulerStats stats() const;
  void set_stats_observer(StatsObserver observer);
  // The configuration and capacity (fixed at start); not the per-step state.
  const EngineCore& core() const { return *core_; }
  // Empty while the engine runs. A step that throws (a CUDA error, a tensor-parallel rank that
  // failed) ends the engine: every live request gets a final output with finish_reason
  // "error" and engine_failed set, later add_request calls throw EngineFailed, and this says
  // why. The server then shuts down.
  std::string failure() const;

 private:
  struct PendingAdd {
    std::string id;
    std::vector<int32_t> prompt;
    SamplingParams params;
    int priority = 0;
    StatsClock::time_point arrival;
  };
  void loop();
  void fail(const std::string& why);

  std::unique_ptr<EngineCore> core_;  // engine thread only, after construction
  mutable std::mutex mutex_;          // guards everything below
  std::condition_variable wake_;
  std::vector<PendingAdd> adds_;
  std::vector<std::string> aborts_;
  std::atomic<size_t> aborts_pending_{0};  // aborts_.size(), read without the lock
  std::unordered_map<std::string, std::pair<Callback, int>> callbacks_;  // id -> (cb, live n)
  core::SchedulerStats stats_;
  StatsObserver stats_observer_;
  bool busy_ = false;  // the core had unfinished requests after the last step
  bool stop_ = false;
  std::string failure_;
  std::thread thread_;
};

}  // namespace vllm
