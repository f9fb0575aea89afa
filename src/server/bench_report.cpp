#include "server/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

namespace vllm::server {
namespace {

// "p99" / "P99.9" (snprintf: GCC 12 misreads "literal" + std::string as an overlapping memcpy).
std::string pct_label(double p, const char* prefix) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%g", prefix, p);
  return buf;
}

void add_stats(nlohmann::json& out, const char* name, const std::vector<double>& seconds,
               const std::vector<double>& percentiles) {
  std::vector<double> ms;
  ms.reserve(seconds.size());
  for (double s : seconds) ms.push_back(s * 1000.0);
  double mean = 0, sd = 0;
  if (!ms.empty()) {
    mean = std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
    for (double v : ms) sd += (v - mean) * (v - mean);
    sd = std::sqrt(sd / ms.size());
  }
  auto key = [name](const std::string& prefix) {
    std::string k = prefix;
    k.append("_").append(name).append("_ms");
    return k;
  };
  out[key("mean")] = mean;
  out[key("median")] = percentile(ms, 50);
  out[key("std")] = sd;
  for (double p : percentiles) out[key(pct_label(p, "p"))] = percentile(ms, p);
}

void line(std::string& out, const std::string& label, double v, bool integer = false) {
  char buf[128];
  if (integer) std::snprintf(buf, sizeof buf, "%-40s %-10.0f\n", label.c_str(), v);
  else std::snprintf(buf, sizeof buf, "%-40s %-10.2f\n", label.c_str(), v);
  out += buf;
}

std::string banner(const std::string& title, char fill) {
  const int width = 50, pad = std::max(0, width - static_cast<int>(title.size()));
  return std::string(pad / 2, fill) + title + std::string(pad - pad / 2, fill) + "\n";
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - lo);
}

BenchSummary summarize(const std::vector<RequestResult>& results, double duration_s,
                       const std::vector<double>& percentiles) {
  BenchSummary s;
  s.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els;
  std::map<long, int> tokens_per_second;  // whole seconds since start -> output tokens
  std::vector<std::pair<double, int>> edges;  // request start/end, for peak concurrency
  for (const RequestResult& r : results) {
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input += r.prompt_len;
    s.total_output += r.output_tokens;
    ttfts.push_back(r.ttft);
    e2els.push_back(r.latency);
    if (r.output_tokens > 1) tpots.push_back((r.latency - r.ttft) / (r.output_tokens - 1));
    itls.insert(itls.end(), r.itl.begin(), r.itl.end());
    double t = r.start + r.ttft;
    ++tokens_per_second[static_cast<long>(t)];
    for (double d : r.itl) ++tokens_per_second[static_cast<long>(t += d)];
    edges.emplace_back(r.start, 1);
    edges.emplace_back(r.start + r.latency, -1);
  }
  if (duration_s > 0) {
    s.request_throughput = s.completed / duration_s;
    s.output_throughput = s.total_output / duration_s;
    s.total_token_throughput = (s.total_input + s.total_output) / duration_s;
  }
  for (const auto& [sec, n] : tokens_per_second) s.max_output_tokens_per_s = std::max<double>(s.max_output_tokens_per_s, n);
  std::sort(edges.begin(), edges.end());
  int live = 0;
  for (const auto& [t, d] : edges) s.max_concurrent_requests = std::max(s.max_concurrent_requests, live += d);
  s.stats = nlohmann::json::object();
  add_stats(s.stats, "ttft", ttfts, percentiles);
  add_stats(s.stats, "tpot", tpots, percentiles);
  add_stats(s.stats, "itl", itls, percentiles);
  add_stats(s.stats, "e2el", e2els, percentiles);
  return s;
}

std::string format_table(const BenchSummary& s, const std::vector<double>& percentiles,
                         double request_rate, int max_concurrency) {
  std::string out = banner(" Serving Benchmark Result ", '=');
  line(out, "Successful requests:", s.completed, true);
  if (s.failed) line(out, "Failed requests:", s.failed, true);
  char rate[96];
  if (std::isinf(request_rate))
    std::snprintf(rate, sizeof rate, "%-40s %s\n", "Request rate configured (RPS):", "inf");
  else
    std::snprintf(rate, sizeof rate, "%-40s %-10.2f\n", "Request rate configured (RPS):", request_rate);
  out += rate;
  if (max_concurrency > 0) line(out, "Maximum request concurrency:", max_concurrency, true);
  line(out, "Benchmark duration (s):", s.duration_s);
  line(out, "Total input tokens:", static_cast<double>(s.total_input), true);
  line(out, "Total generated tokens:", static_cast<double>(s.total_output), true);
  line(out, "Request throughput (req/s):", s.request_throughput);
  line(out, "Output token throughput (tok/s):", s.output_throughput);
  line(out, "Peak output token throughput (tok/s):", s.max_output_tokens_per_s);
  line(out, "Peak concurrent requests:", s.max_concurrent_requests, true);
  line(out, "Total Token throughput (tok/s):", s.total_token_throughput);
  const struct { const char* key; const char* title; const char* name; } sections[] = {
      {"ttft", "Time to First Token", "TTFT"},
      {"tpot", "Time per Output Token (excl. 1st token)", "TPOT"},
      {"itl", "Inter-token Latency", "ITL"},
      {"e2el", "End-to-end Latency", "E2EL"}};
  for (const auto& sec : sections) {
    out += banner(sec.title, '-');
    auto stat = [&](const char* prefix, const std::string& key_prefix) {
      char label[96];
      std::snprintf(label, sizeof label, "%s %s (ms):", prefix, sec.name);
      line(out, label, s.stats[key_prefix + "_" + sec.key + "_ms"].get<double>());
    };
    stat("Mean", "mean");
    stat("Median", "median");
    for (double p : percentiles) stat(pct_label(p, "P").c_str(), pct_label(p, "p"));
  }
  out += std::string(50, '=') + "\n";
  return out;
}

nlohmann::json result_json(const BenchSummary& s, const std::vector<RequestResult>& results) {
  nlohmann::json j = {{"duration", s.duration_s},
                      {"completed", s.completed},
                      {"failed", s.failed},
                      {"total_input_tokens", s.total_input},
                      {"total_output_tokens", s.total_output},
                      {"request_throughput", s.request_throughput},
                      {"output_throughput", s.output_throughput},
                      {"total_token_throughput", s.total_token_throughput},
                      {"max_output_tokens_per_s", s.max_output_tokens_per_s},
                      {"max_concurrent_requests", s.max_concurrent_requests}};
  nlohmann::json input_lens = nlohmann::json::array(), output_lens = nlohmann::json::array(),
                 ttfts = nlohmann::json::array(), itls = nlohmann::json::array(),
                 texts = nlohmann::json::array(), errors = nlohmann::json::array();
  for (const RequestResult& r : results) {
    input_lens.push_back(r.prompt_len);
    output_lens.push_back(r.output_tokens);
    ttfts.push_back(r.ttft);
    itls.push_back(r.itl);
    texts.push_back(r.generated_text);
    errors.push_back(r.error);
  }
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::move(output_lens);
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  j["generated_texts"] = std::move(texts);
  j["errors"] = std::move(errors);
  j.update(s.stats);
  return j;
}

}  // namespace vllm::server
