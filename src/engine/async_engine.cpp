#include "engine/async_engine.h"

#include <algorithm>

#include "util/check.h"

namespace vllm {

AsyncEngine::AsyncEngine(std::unique_ptr<EngineCore> core)
    : core_(std::move(core)), stats_(core_->stats()), thread_([this] { loop(); }) {}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void AsyncEngine::add_request(const std::string& id, std::vector<int32_t> prompt,
                              SamplingParams params, Callback on_output, int priority) {
  core_->validate_request(prompt, params);  // reads only the configuration
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) throw EngineFailed(failure_);
    if (callbacks_.count(id)) throw Error("duplicate request id " + id);
    const int n = params.n;
    callbacks_[id] = {std::move(on_output), n};
    adds_.push_back({id, std::move(prompt), std::move(params), priority, StatsClock::now()});
  }
  wake_.notify_all();
}

bool AsyncEngine::abort(const std::string& id) {
  {
    std::lock_guard lock(mutex_);
    if (!callbacks_.count(id)) return false;
    aborts_.push_back(id);
    aborts_pending_.store(aborts_.size(), std::memory_order_release);
  }
  wake_.notify_all();
  return true;
}

std::string AsyncEngine::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

core::SchedulerStats AsyncEngine::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void AsyncEngine::set_stats_observer(StatsObserver observer) {
  std::lock_guard lock(mutex_);
  stats_observer_ = std::move(observer);
}

void AsyncEngine::loop() {
  for (;;) {
    std::vector<PendingAdd> adds;
    std::vector<std::string> aborts;
    bool stopping;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || busy_ || !adds_.empty() || !aborts_.empty(); });
      adds.swap(adds_);
      aborts.swap(aborts_);
      aborts_pending_.store(0, std::memory_order_release);
      stopping = stop_;
      if (stopping)
        for (const auto& [id, cb] : callbacks_) aborts.push_back(id);
    }
    std::vector<RequestOutput> outputs;
    for (PendingAdd& a : adds) {
      const int n = a.params.n;
      try {
        core_->add_request(a.id, std::move(a.prompt), std::move(a.params), a.priority, a.arrival);
      } catch (const Error&) {  // validated on the way in; finish it rather than lose it
        for (int i = 0; i < n; ++i) {
          RequestOutput out;
          out.request_id = a.id;
          out.index = i;
          out.finished = true;
          out.finish_reason = "abort";
          outputs.push_back(std::move(out));
        }
      }
    }
    for (const std::string& id : aborts) core_->abort_request(id);
    // A step whose requests have all been aborted since it began stops early (EngineCore::step).
    const auto leaving = [this](const std::string& id) {
      if (aborts_pending_.load(std::memory_order_acquire) == 0) return false;
      std::lock_guard lock(mutex_);
      return std::find(aborts_.begin(), aborts_.end(), id) != aborts_.end();
    };
    try {
      for (RequestOutput& o : core_->step(leaving)) outputs.push_back(std::move(o));
    } catch (const std::exception& e) {
      fail(e.what());
      return;
    }

    const IterationStats iteration = core_->take_iteration_stats();
    std::vector<std::pair<Callback, RequestOutput>> deliveries;
    StatsObserver observer;
    core::SchedulerStats stats;
    {
      std::lock_guard lock(mutex_);
      busy_ = core_->has_unfinished();
      stats_ = stats = core_->stats();
      observer = stats_observer_;
      for (RequestOutput& o : outputs) {
        auto it = callbacks_.find(o.request_id);
        if (it == callbacks_.end()) continue;
        deliveries.emplace_back(it->second.first, std::move(o));
        if (deliveries.back().second.finished && --it->second.second == 0) callbacks_.erase(it);
      }
    }
    if (observer) observer(iteration, stats);
    for (auto& [cb, out] : deliveries) cb(out);
    if (stopping) return;
  }
}

// Every live completion ends with an error output, those of requests still queued for the
// core too. The core is not stepped again, so its blocks are not given back.
void AsyncEngine::fail(const std::string& why) {
  std::vector<PendingAdd> adds;
  std::unordered_map<std::string, std::pair<Callback, int>> callbacks;
  {
    std::lock_guard lock(mutex_);
    failure_ = why;
    adds.swap(adds_);
    callbacks.swap(callbacks_);
    aborts_.clear();
    busy_ = false;
  }
  const auto error_output = [&](const std::string& id, int index) {
    RequestOutput out;
    out.request_id = id;
    out.index = index;
    out.finished = true;
    out.finish_reason = "error";
    out.error = "the engine failed: " + why;
    out.engine_failed = true;
    return out;
  };
  std::unordered_map<std::string, std::vector<RequestOutput>> outputs;
  for (const PendingAdd& a : adds)
    for (int i = 0; i < a.params.n; ++i) outputs[a.id].push_back(error_output(a.id, i));
  for (const auto& [id, cb] : callbacks) {
    if (outputs.count(id)) continue;
    std::vector<int> live = core_->live_completions(id);
    if (live.empty())  // refused by the core in this last round: as many as are counted live
      for (int i = 0; i < cb.second; ++i) live.push_back(i);
    for (int index : live) outputs[id].push_back(error_output(id, index));
  }
  for (auto& [id, outs] : outputs) {
    auto it = callbacks.find(id);
    if (it == callbacks.end()) continue;
    for (const RequestOutput& o : outs) it->second.first(o);
  }
}

}  // namespace vllm
