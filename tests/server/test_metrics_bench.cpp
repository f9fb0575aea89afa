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

TEST(Metrics, Buckets125AsVllm) {
  EXPECT_EQ(buckets_1_2_5(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(buckets_1_2_5(2048), (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000,
                                                      2000}));
  EXPECT_TRUE(buckets_1_2_5(0).empty());
}

TEST(Metrics, FinishedStatsAsVllmPhases) {
  using namespace std::chrono_literals;
  RequestTimes t;
  const StatsClock::time_point t0{};
  t.arrival = t0 + 1s;
  t.queued = t0 + 2s;
  t.scheduled = t0 + 5s;
  t.first_token = t0 + 7s;
  t.last_token = t0 + 11s;
  t.num_generation_tokens = 5;
  const FinishedRequestStats f = finished_stats(t, "length", 9, 4, 5, t0 + 12s);
  EXPECT_DOUBLE_EQ(f.e2e_latency, 11);
  EXPECT_DOUBLE_EQ(f.queued_time, 3);
  EXPECT_DOUBLE_EQ(f.prefill_time, 2);
  EXPECT_DOUBLE_EQ(f.decode_time, 4);
  EXPECT_DOUBLE_EQ(f.inference_time, 6);
  EXPECT_DOUBLE_EQ(f.mean_time_per_output_token, 1);  // 4 s over the 4 tokens after the first
  // Aborted while waiting: all of it was queueing.
  RequestTimes w;
  w.arrival = t0 + 1s;
  w.queued = t0 + 1s;
  const FinishedRequestStats g = finished_stats(w, "abort", 9, 0, 5, t0 + 4s);
  EXPECT_DOUBLE_EQ(g.queued_time, 3);
  EXPECT_DOUBLE_EQ(g.prefill_time, 0);
  EXPECT_DOUBLE_EQ(g.decode_time, 0);
  EXPECT_EQ(g.num_generation_tokens, 0);
}

TEST(Metrics, VllmNamesAndLabels) {
  Metrics m;
  IterationStats it;
  it.stepped = true;
  it.num_scheduled_tokens = 10;
  it.num_prompt_tokens = 7;
  it.num_cached_prompt_tokens = 3;
  it.num_generation_tokens = 3;
  it.time_to_first_tokens = {0.2};
  it.n_params = {1};
  it.max_num_generation_tokens = {3};
  FinishedRequestStats f;
  f.finish_reason = "length";
  f.e2e_latency = 0.4;
  f.num_prompt_tokens = 7;
  f.num_cached_tokens = 3;
  f.num_generation_tokens = 3;
  f.max_tokens_param = 3;
  it.finished = {f};
  m.record(it);
  EXPECT_EQ(m.prompt_tokens(), 7);
  EXPECT_EQ(m.generation_tokens(), 3);
  core::SchedulerStats s;
  s.num_running = 2;
  s.num_waiting = 4;
  s.kv_cache_usage = 0.25;
  const std::string text = m.render("my \"model\"", s);
  const std::string l = "{model_name=\"my \\\"model\\\"\",engine=\"0\"";
  for (const std::string& line :
       {"vllm:num_requests_running" + l + "} 2.0", "vllm:num_requests_waiting" + l + "} 4.0",
        "vllm:num_requests_waiting_by_reason" + l + ",reason=\"capacity\"} 4.0",
        "vllm:num_requests_waiting_by_reason" + l + ",reason=\"deferred\"} 0.0",
        "vllm:kv_cache_usage_perc" + l + "} 0.25", "vllm:prompt_tokens_total" + l + "} 7.0",
        "vllm:prompt_tokens_by_source_total" + l + ",source=\"local_compute\"} 4.0",
        "vllm:prompt_tokens_by_source_total" + l + ",source=\"local_cache_hit\"} 3.0",
        "vllm:generation_tokens_total" + l + "} 3.0",
        "vllm:request_success_total" + l + ",finished_reason=\"length\"} 1.0",
        "vllm:time_to_first_token_seconds_count" + l + "} 1.0",
        "vllm:iteration_tokens_total_bucket" + l + ",le=\"8.0\"} 0.0",
        "vllm:iteration_tokens_total_bucket" + l + ",le=\"16.0\"} 1.0",
        "vllm:request_prefill_kv_computed_tokens_sum" + l + "} 4.0",
        "vllm:e2e_request_latency_seconds_bucket" + l + ",le=\"0.5\"} 1.0",
        "vllm:request_params_n_count" + l + "} 1.0"})
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
