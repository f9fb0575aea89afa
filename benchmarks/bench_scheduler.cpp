// Host time of one engine step's bookkeeping (Scheduler::schedule + update_from_output, with
// the KvCacheManager underneath) at a given number of running requests in decode.
#include <benchmark/benchmark.h>

#include <string>
#include <unordered_map>

#include "core/scheduler.h"

using namespace vllm::core;

static void BM_SchedulerDecodeStep(benchmark::State& state) {
  const int num_requests = static_cast<int>(state.range(0));
  const bool caching = state.range(1) != 0;
  SchedulerConfig sc;
  sc.max_num_seqs = num_requests;
  sc.max_num_batched_tokens = 8192;
  sc.max_model_len = 4096;
  KvCacheConfig kv;
  kv.block_size = 16;
  kv.enable_prefix_caching = caching;
  kv.num_blocks = 1 + num_requests * (4096 / 16);  // never preempts
  kv.groups = {KvCacheGroupSpec{AttentionKind::kFullAttention, 0, 30, 512}};
  Scheduler s(sc, kv);
  for (int i = 0; i < num_requests; ++i) {
    std::vector<int> prompt(512);
    for (int j = 0; j < 512; ++j) prompt[j] = (i * 7919 + j * 31) % 32000;
    Request r(std::to_string(i), prompt);
    r.max_tokens = 1 << 20;
    r.ignore_eos = true;
    s.add_request(std::move(r));
  }
  // Run the prefills out of the timed region.
  std::unordered_map<std::string, std::vector<int>> sampled;
  while (true) {
    SchedulerOutput out = s.schedule();
    sampled.clear();
    bool all_decode = true;
    for (const auto& r : out.scheduled) {
      if (r.sample) sampled[r.request_id] = {1};
      all_decode &= r.num_scheduled_tokens == 1;
    }
    s.update_from_output(sampled);
    if (all_decode && static_cast<int>(out.scheduled.size()) == num_requests) break;
  }
  int64_t tokens = 0;
  for (auto _ : state) {
    SchedulerOutput out = s.schedule();
    if (static_cast<int>(out.scheduled.size()) != num_requests) {
      state.SkipWithError("a request left the batch");
      break;
    }
    sampled.clear();
    for (const auto& r : out.scheduled) sampled[r.request_id] = {static_cast<int>(tokens++ % 1000)};
    benchmark::DoNotOptimize(s.update_from_output(sampled));
  }
  state.counters["requests"] = num_requests;
}
// 2,000 steps per run: the requests (512-token prompts) stay below max_model_len = 4096, so
// every timed step schedules all of them.
BENCHMARK(BM_SchedulerDecodeStep)
    ->Args({1, 1})->Args({32, 1})->Args({256, 1})->Args({256, 0})
    ->Iterations(2000)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
