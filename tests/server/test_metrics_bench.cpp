// Prometheus rendering under vLLM's names, and the benchmark statistics (numpy's percentile,
// vLLM's TPOT and throughput definitions).
#include <gtest/gtest.h>

#include "server/bench_report.h"
#include "server/metrics.h"
#include "server/responses.h"

namespace vllm::server {
namespace {

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // upper bounds are inclusive (le)
  h.observe(0.5);
  h.observe(7.0);
  std::string out;
  h.render(out, "x", "m=\"a\"");
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"0.1\"} 2.0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"1.0\"} 3.0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"+Inf\"} 4.0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count{m=\"a\"} 4.0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum{m=\"a\"} 7.65\n"), std::string::npos) << out;
}

TEST(Metrics, VllmNamesAndLabels) {
  Metrics m;
  m.add_prompt_tokens(7);
  m.add_generation_tokens(3);
  m.observe_ttft(0.2);
  m.count_finished("length");
  core::SchedulerStats s;
  s.num_running = 2;
  s.kv_cache_usage = 0.25;
  const std::string text = m.render("my \"model\"", s);
  const std::string label = "{model_name=\"my \\\"model\\\"\"}";
  for (const std::string& line :
       {"vllm:num_requests_running" + label + " 2.0", "vllm:num_requests_waiting" + label + " 0.0",
        "vllm:kv_cache_usage_perc" + label + " 0.25", "vllm:prompt_tokens_total" + label + " 7.0",
        "vllm:generation_tokens_total" + label + " 3.0",
        "vllm:time_to_first_token_seconds_count" + label + " 1.0",
        "vllm:prefix_cache_queries_total" + label + " 0.0",
        "vllm:prefix_cache_hits_total" + label + " 0.0"})
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line;
  for (const char* type : {"# TYPE vllm:inter_token_latency_seconds histogram",
                           "# TYPE vllm:e2e_request_latency_seconds histogram",
                           "# TYPE vllm:num_requests_running gauge"})
    EXPECT_NE(text.find(type), std::string::npos) << type;
}

TEST(BenchReport, PercentileMatchesNumpy) {
  // numpy.percentile([1, 2, 3, 4], [50, 99]) == [2.5, 3.97]
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_NEAR(percentile({4, 1, 3, 2}, 99), 3.97, 1e-12);
  EXPECT_EQ(percentile({}, 99), 0);
}

TEST(BenchReport, VllmDefinitions) {
  RequestResult a;
  a.success = true;
  a.ttft = 0.1;
  a.latency = 0.5;
  a.itl = {0.1, 0.1, 0.2};
  a.prompt_len = 10;
  a.output_tokens = 5;  // TPOT = (0.5 - 0.1) / 4
  RequestResult b;
  b.error = "HTTP 500";
  const BenchSummary s = summarize({a, b}, 2.0, {99});
  EXPECT_EQ(s.completed, 1);
  EXPECT_EQ(s.failed, 1);
  EXPECT_DOUBLE_EQ(s.request_throughput, 0.5);
  EXPECT_DOUBLE_EQ(s.output_throughput, 2.5);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 7.5);
  EXPECT_NEAR(s.stats["mean_tpot_ms"].get<double>(), 100.0, 1e-9);
  EXPECT_NEAR(s.stats["median_itl_ms"].get<double>(), 100.0, 1e-9);
  EXPECT_NEAR(s.stats["mean_e2el_ms"].get<double>(), 500.0, 1e-9);
  const std::string table = format_table(s, {99}, 1.0 / 0.0, 4);
  EXPECT_NE(table.find("Mean TPOT (ms):"), std::string::npos);
  EXPECT_NE(table.find("P99 ITL (ms):"), std::string::npos);
}

TEST(Responses, StopReasonTypes) {
  SamplingParams p;
  p.stop = {"END"};
  RequestOutput o;
  EXPECT_TRUE(stop_reason_json(o, p).is_null());
  o.stop_reason = "END";
  EXPECT_EQ(stop_reason_json(o, p), "END");
  o.stop_reason = "42";  // a stop token id
  EXPECT_EQ(stop_reason_json(o, p), 42);
}

}  // namespace
}  // namespace vllm::server
