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
    for (RequestOutput& o : core_->step(leaving)) outputs.push_back(std::move(o));

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

}  // namespace vllm
