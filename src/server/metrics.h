// Prometheus metrics under vLLM's family names, types, labels (model_name, engine) and buckets
// (fixtures/vllm_metrics/families.json), fed by the engine's per-step IterationStats and the
// scheduler's state. Thread-safe: the engine thread records, /metrics renders.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/scheduler.h"
#include "engine/async_engine.h"
#include "engine/request_stats.h"

namespace vllm::server {

// Counts per bucket; upper bounds inclusive (Prometheus' le). A plain value: Metrics locks.
class Histogram {
 public:
  Histogram() = default;
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Appends _bucket/_sum/_count lines; `labels` is the rendered label set without braces.
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_ = {0};  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_value.
std::vector<double> buckets_1_2_5(int max_value);

class Metrics {
 public:
  Metrics();
  // Records every step of `engine` from now on; takes the token-count buckets (up to
  // max_model_len) and the cache_config_info labels from its configuration.
  void attach(AsyncEngine& engine);
  void record(const IterationStats& it);

  int64_t prompt_tokens() const;
  int64_t generation_tokens() const;

  std::string render(const std::string& model_name, const core::SchedulerStats& stats) const;

  enum Hist {
    kPromptTokens, kGenerationTokens, kIterationTokens, kMaxNumGenerationTokens, kParamsN,
    kParamsMaxTokens, kTtft, kInterToken, kTimePerOutputToken, kE2e, kQueue, kInference,
    kPrefill, kDecode, kNumPreemptions, kPrefillKvComputed, kNumHist
  };

 private:
  mutable std::mutex mutex_;  // guards everything below
  int64_t prompt_tokens_ = 0, cached_prompt_tokens_ = 0, generation_tokens_ = 0;
  std::map<std::string, int64_t> finished_;  // finish reason -> completions
  std::array<Histogram, kNumHist> hist_;
  std::vector<std::pair<std::string, std::string>> cache_config_;  // cache_config_info labels
};

}  // namespace vllm::server
