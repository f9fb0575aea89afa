#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace vllm::server {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  std::string s = buf;
  // Prometheus clients read "1" and "1.0" alike; vLLM prints floats, keep that look.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name + "{" + labels + "} " + num(v) + "\n";
}

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                          0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                                          40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
                                         1920.0, 7680.0};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard lock(mutex_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  std::lock_guard lock(mutex_);
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    sample(out, name + "_bucket", labels + ",le=\"" + le + "\"", static_cast<double>(cum));
  }
  sample(out, name + "_sum", labels, sum_);
  sample(out, name + "_count", labels, static_cast<double>(count_));
}

Metrics::Metrics() : ttft_(kTtftBuckets), itl_(kItlBuckets), e2e_(kE2eBuckets) {}

void Metrics::count_finished(const std::string& reason) {
  std::lock_guard lock(mutex_);
  ++finished_[reason];
}

std::string Metrics::render(const std::string& model_name, const core::SchedulerStats& s) const {
  const std::string labels = "model_name=\"" + escape_label(model_name) + "\"";
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    header(out, name, "gauge", help);
    sample(out, name, labels, v);
  };
  auto counter = [&](const std::string& name, const char* help, double v) {
    header(out, name, "counter", help);
    sample(out, name, labels, v);
  };
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        s.num_running);
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        s.num_waiting);
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        s.kv_cache_usage);
  counter("vllm:prefix_cache_queries_total",
          "Prefix cache queries, in terms of number of queried tokens.",
          static_cast<double>(s.prefix_cache_queries));
  counter("vllm:prefix_cache_hits_total",
          "Prefix cache hits, in terms of number of cached tokens.",
          static_cast<double>(s.prefix_cache_hits));
  counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
          static_cast<double>(s.num_preemptions));
  counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
          static_cast<double>(prompt_tokens_.load()));
  counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
          static_cast<double>(generation_tokens_.load()));
  header(out, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
  {
    std::lock_guard lock(mutex_);
    for (const char* reason : {"stop", "length", "abort"}) {
      auto it = finished_.find(reason);
      sample(out, "vllm:request_success_total",
             labels + ",finished_reason=\"" + reason + "\"",
             it == finished_.end() ? 0.0 : static_cast<double>(it->second));
    }
  }
  header(out, "vllm:time_to_first_token_seconds", "histogram",
         "Histogram of time to first token in seconds.");
  ttft_.render(out, "vllm:time_to_first_token_seconds", labels);
  header(out, "vllm:inter_token_latency_seconds", "histogram",
         "Histogram of inter-token latency in seconds.");
  itl_.render(out, "vllm:inter_token_latency_seconds", labels);
  header(out, "vllm:e2e_request_latency_seconds", "histogram",
         "Histogram of e2e request latency in seconds.");
  e2e_.render(out, "vllm:e2e_request_latency_seconds", labels);
  return out;
}

}  // namespace vllm::server
