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

std::string label(const char* name, const std::string& value) {
  return std::string(",") + name + "=\"" + escape_label(value) + "\"";
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name + "{" + labels + "} " + num(v) + "\n";
}

// vLLM's bucket families (vllm/v1/metrics/buckets.py).
const std::vector<double> kRequestLatency = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
                                             20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
                                             960.0, 1920.0, 7680.0};
const std::vector<double> kTimeToFirstToken = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                               0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                                               40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kInterTokenLatency = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                                                10.0, 20.0, 40.0, 80.0};
const std::vector<double> kIterationTokens = {1, 8, 16, 32, 64, 128, 256, 512, 1024,
                                              2048, 4096, 8192, 16384};
const std::vector<double> kParamsN = {1, 2, 5, 10, 20};
const std::vector<double> kNumPreemptions = {1, 2, 3, 4, 5, 10, 20};

struct HistSpec {
  const char* name;
  const char* help;
  const std::vector<double>* buckets;  // null: the 1-2-5 series up to max_model_len
};

// In Metrics::Hist order.
const HistSpec kHist[Metrics::kNumHist] = {
    {"vllm:request_prompt_tokens", "Number of prefill tokens processed.", nullptr},
    {"vllm:request_generation_tokens", "Number of generation tokens processed.", nullptr},
    {"vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
     &kIterationTokens},
    {"vllm:request_max_num_generation_tokens",
     "Histogram of maximum number of requested generation tokens.", nullptr},
    {"vllm:request_params_n", "Histogram of the n request parameter.", &kParamsN},
    {"vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", nullptr},
    {"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
     &kTimeToFirstToken},
    {"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
     &kInterTokenLatency},
    {"vllm:request_time_per_output_token_seconds",
     "Histogram of time_per_output_token_seconds per request.", &kInterTokenLatency},
    {"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
     &kRequestLatency},
    {"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
     &kRequestLatency},
    {"vllm:request_inference_time_seconds",
     "Histogram of time spent in RUNNING phase for request.", &kRequestLatency},
    {"vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
     &kRequestLatency},
    {"vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
     &kRequestLatency},
    {"vllm:request_num_preemptions", "Histogram of the number of times a request was preempted.",
     &kNumPreemptions},
    {"vllm:request_prefill_kv_computed_tokens",
     "Histogram of new KV tokens computed during prefill (excluding cached tokens).", nullptr},
};

std::string py_bool(bool b) { return b ? "True" : "False"; }

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    sample(out, name + "_bucket", labels + ",le=\"" + le + "\"", static_cast<double>(cum));
  }
  sample(out, name + "_sum", labels, sum_);
  sample(out, name + "_count", labels, static_cast<double>(count_));
}

std::vector<double> buckets_1_2_5(int max_value) {
  std::vector<double> b;
  for (int64_t scale = 1;; scale *= 10)
    for (int m : {1, 2, 5}) {
      if (m * scale > max_value) return b;
      b.push_back(static_cast<double>(m * scale));
    }
}

Metrics::Metrics() {
  for (int i = 0; i < kNumHist; ++i)
    hist_[i] = Histogram(kHist[i].buckets ? *kHist[i].buckets : buckets_1_2_5(0));
}

void Metrics::attach(AsyncEngine& engine) {
  const EngineCore& core = engine.core();
  const EngineConfig& c = core.config();
  {
    std::lock_guard lock(mutex_);
    for (int i = 0; i < kNumHist; ++i)
      if (!kHist[i].buckets) hist_[i] = Histogram(buckets_1_2_5(core.max_model_len()));
    // CacheConfig's fields that we have, in its order, with Python's str() of the value.
    cache_config_ = {
        {"block_size", std::to_string(c.block_size)},
        {"gpu_memory_utilization", num(c.gpu_memory_utilization)},
        {"cache_dtype", "auto"},
        {"enable_prefix_caching", py_bool(c.enable_prefix_caching)},
        {"num_gpu_blocks", std::to_string(core.kv_cache_manager().config().num_blocks)},
        {"kv_cache_memory_bytes", std::to_string(c.kv_cache_memory)},
    };
  }
  engine.set_stats_observer(
      [this](const IterationStats& it, const core::SchedulerStats&) { record(it); });
}

void Metrics::record(const IterationStats& it) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += it.num_prompt_tokens;
  cached_prompt_tokens_ += it.num_cached_prompt_tokens;
  generation_tokens_ += it.num_generation_tokens;
  if (it.stepped) hist_[kIterationTokens].observe(it.num_scheduled_tokens);
  for (int n : it.n_params) hist_[kParamsN].observe(n);
  for (int m : it.max_num_generation_tokens) hist_[kMaxNumGenerationTokens].observe(m);
  for (double s : it.time_to_first_tokens) hist_[kTtft].observe(s);
  for (double s : it.inter_token_latencies) hist_[kInterToken].observe(s);
  for (const FinishedRequestStats& f : it.finished) {
    ++finished_[f.finish_reason];
    hist_[kE2e].observe(f.e2e_latency);
    hist_[kQueue].observe(f.queued_time);
    hist_[kPrefill].observe(f.prefill_time);
    hist_[kInference].observe(f.inference_time);
    hist_[kDecode].observe(f.decode_time);
    hist_[kNumPreemptions].observe(f.num_preemptions);
    hist_[kPrefillKvComputed].observe(f.num_prompt_tokens - std::max(f.num_cached_tokens, 0));
    hist_[kPromptTokens].observe(f.num_prompt_tokens);
    hist_[kGenerationTokens].observe(f.num_generation_tokens);
    hist_[kTimePerOutputToken].observe(f.mean_time_per_output_token);
    if (f.max_tokens_param > 0) hist_[kParamsMaxTokens].observe(f.max_tokens_param);
  }
}

int64_t Metrics::prompt_tokens() const {
  std::lock_guard lock(mutex_);
  return prompt_tokens_;
}

int64_t Metrics::generation_tokens() const {
  std::lock_guard lock(mutex_);
  return generation_tokens_;
}

std::string Metrics::render(const std::string& model_name, const core::SchedulerStats& s) const {
  const std::string model = "model_name=\"" + escape_label(model_name) + "\"";
  const std::string labels = model + ",engine=\"0\"";
  std::string out;
  // One sample per value of one extra label; the others are 0 (features we do not have).
  using Values = std::vector<std::pair<std::string, double>>;
  auto family = [&](const std::string& name, const char* type, const char* help,
                    const char* extra = nullptr, const Values& values = {}) {
    header(out, name, type, help);
    for (const auto& [v, x] : values) sample(out, name, labels + label(extra, v), x);
  };
  auto single = [&](const std::string& name, const char* type, const char* help, double v) {
    header(out, name, type, help);
    sample(out, name, labels, v);
  };
  const double hits = static_cast<double>(s.prefix_cache_hits);
  std::lock_guard lock(mutex_);
  single("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
         s.num_running);
  single("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         s.num_waiting);
  // Nothing defers a request here (no LoRA budget, no KV transfer): all wait for capacity.
  family("vllm:num_requests_waiting_by_reason", "gauge",
         "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
         "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV "
         "transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
         "reason", {{"capacity", s.num_waiting}, {"deferred", 0}});
  family("vllm:engine_sleep_state", "gauge",
         "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
         "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
         "sleep_state", {{"awake", 1}, {"weights_offloaded", 0}, {"discard_all", 0}});
  single("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
         s.kv_cache_usage);
  single("vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.",
         static_cast<double>(s.prefix_cache_queries));
  single("vllm:prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.", hits);
  single("vllm:external_prefix_cache_queries_total", "counter",
         "External prefix cache queries from KV connector cross-instance cache sharing, in "
         "terms of number of queried tokens.", 0);
  single("vllm:external_prefix_cache_hits_total", "counter",
         "External prefix cache hits from KV connector cross-instance cache sharing, in terms "
         "of number of cached tokens.", 0);
  single("vllm:mm_cache_queries_total", "counter",
         "Multi-modal cache queries, in terms of number of queried items.", 0);
  single("vllm:mm_cache_hits_total", "counter",
         "Multi-modal cache hits, in terms of number of cached items.", 0);
  single("vllm:num_preemptions_total", "counter",
         "Cumulative number of preemption from the engine.",
         static_cast<double>(s.num_preemptions));
  single("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         static_cast<double>(prompt_tokens_));
  family("vllm:prompt_tokens_by_source_total", "counter", "Number of prompt tokens by source.",
         "source",
         {{"local_compute", static_cast<double>(prompt_tokens_ - cached_prompt_tokens_)},
          {"local_cache_hit", static_cast<double>(cached_prompt_tokens_)},
          {"external_kv_transfer", 0}});
  single("vllm:prompt_tokens_cached_total", "counter",
         "Number of cached prompt tokens (local + external).",
         static_cast<double>(cached_prompt_tokens_));
  family("vllm:prompt_tokens_cached_by_source_total", "counter",
         "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
         "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
         "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
         "vllm:external_prefix_cache_hits.",
         "source",
         {{"device", hits}, {"host", 0}, {"p2p", 0}, {"disk", 0}, {"external_unspecified", 0}});
  single("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         static_cast<double>(generation_tokens_));
  Values success;
  for (const char* reason : {"stop", "length", "abort", "error", "repetition"}) {
    auto it = finished_.find(reason);
    success.emplace_back(reason, it == finished_.end() ? 0.0 : static_cast<double>(it->second));
  }
  family("vllm:request_success_total", "counter", "Count of successfully processed requests.",
         "finished_reason", success);
  // No queue limits here (vLLM's --max-num-queued-reqs/-tokens): nothing is ever rejected.
  header(out, "vllm:admission_rejections_total", "counter",
         "Number of admission attempts rejected by a queue limit, by reason.");
  for (const char* reason : {"max_num_queued_reqs", "max_num_queued_tokens"})
    sample(out, "vllm:admission_rejections_total", model + label("reason", reason), 0);
  for (int i = 0; i < kNumHist; ++i) {
    header(out, kHist[i].name, "histogram", kHist[i].help);
    hist_[i].render(out, kHist[i].name, labels);
  }
  if (!cache_config_.empty()) {
    std::string info;
    for (const auto& [k, v] : cache_config_) info += (info.empty() ? "" : ",") + k + "=\"" +
                                                     escape_label(v) + "\"";
    header(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
    sample(out, "vllm:cache_config_info", info + ",engine=\"0\"", 1);
  }
  return out;
}

}  // namespace vllm::server
