// vLLM's `bench serve` metrics from per-request results: throughput, and TTFT, TPOT
// (excluding the first token), ITL and E2EL as mean/median/std/percentiles in ms; printed
// in vLLM's table and saved in its result JSON keys.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/bench_client.h"

namespace vllm::server {

struct BenchSummary {
  int completed = 0;
  int failed = 0;
  double duration_s = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  double request_throughput = 0;
  double output_throughput = 0;
  double total_token_throughput = 0;
  double max_output_tokens_per_s = 0;
  int max_concurrent_requests = 0;
  nlohmann::json stats;  // mean_ttft_ms, median_ttft_ms, std_ttft_ms, p99_ttft_ms, ...
};

BenchSummary summarize(const std::vector<RequestResult>& results, double duration_s,
                       const std::vector<double>& percentiles);
// numpy.percentile's linear interpolation; 0 for an empty sample.
double percentile(std::vector<double> values, double p);
std::string format_table(const BenchSummary& s, const std::vector<double>& percentiles,
                         double request_rate, int max_concurrency);
// The summary plus per-request lists (input_lens, output_lens, ttfts, itls, errors ...).
nlohmann::json result_json(const BenchSummary& s, const std::vector<RequestResult>& results);

}  // namespace vllm::server
