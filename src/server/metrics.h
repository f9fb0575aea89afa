// Prometheus metrics under vLLM's names (vllm:num_requests_running, vllm:kv_cache_usage_perc,
// token counters, TTFT / inter-token / end-to-end latency histograms), all labelled model_name.
// Thread-safe: the engine thread records, /metrics renders.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/scheduler.h"

namespace vllm::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Appends _bucket/_sum/_count lines; `labels` is the rendered label set without braces.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void add_prompt_tokens(int n) { prompt_tokens_ += n; }
  void add_generation_tokens(int n) { generation_tokens_ += n; }
  void observe_ttft(double s) { ttft_.observe(s); }
  void observe_inter_token(double s) { itl_.observe(s); }
  void observe_e2e(double s) { e2e_.observe(s); }
  void count_finished(const std::string& reason);

  int64_t prompt_tokens() const { return prompt_tokens_.load(); }
  int64_t generation_tokens() const { return generation_tokens_.load(); }

  std::string render(const std::string& model_name, const core::SchedulerStats& stats) const;

 private:
  std::atomic<int64_t> prompt_tokens_{0};
  std::atomic<int64_t> generation_tokens_{0};
  Histogram ttft_, itl_, e2e_;
  mutable std::mutex mutex_;  // guards finished_
  std::map<std::string, int64_t> finished_;  // finish reason -> count
};

}  // namespace vllm::server
