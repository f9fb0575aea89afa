#include "engine/async_engine.h"

namespace vllm {

AsyncEngine::AsyncEngine(std::unique_ptr<EngineCore> core)
    : core_(std::move(core)), thread_([this] { loop(); }) {}

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
  {
    std::lock_guard lock(mutex_);
    const int n = params.n;
    core_->add_request(id, std::move(prompt), std::move(params), priority);
    callbacks_[id] = {std::move(on_output), n};
  }
  wake_.notify_all();
}

bool AsyncEngine::abort(const std::string& id) {
  bool found;
  {
    std::lock_guard lock(mutex_);
    found = core_->abort_request(id);
  }
  wake_.notify_all();
  return found;
}

core::SchedulerStats AsyncEngine::stats() const {
  std::lock_guard lock(mutex_);
  return core_->stats();
}

void AsyncEngine::loop() {
  for (;;) {
    std::vector<RequestOutput> outputs;
    std::vector<std::pair<Callback, RequestOutput>> deliveries;
    bool stopping;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || core_->has_unfinished() || !callbacks_.empty(); });
      stopping = stop_;
      if (stopping)
        for (auto& [id, cb] : callbacks_) core_->abort_request(id);
      outputs = core_->step();
      for (RequestOutput& o : outputs) {
        auto it = callbacks_.find(o.request_id);
        if (it == callbacks_.end()) continue;
        deliveries.emplace_back(it->second.first, o);
        if (o.finished && --it->second.second == 0) callbacks_.erase(it);
      }
    }
    for (auto& [cb, out] : deliveries) cb(out);
    if (stopping) return;
  }
}

}  // namespace vllm
