// Host time of one engine step's bookkeeping (Scheduler::schedule + update_from_output, with
// the KvCacheManager underneath) at a given number of running requests in decode.
#include <benchmark/benchmark.h>

#include "decode_fixture.h"

using namespace vllm::core;

static void BM_SchedulerDecodeStep(benchmark::State& state) {
  const int num_requests = static_cast<int>(state.range(0));
  const bool caching = state.range(1) != 0;
  auto s = vllm::bench::make_decode_scheduler(num_requests, 512, 4096, 1 << 20, caching);
  vllm::bench::run_prefills(*s, num_requests);
  vllm::bench::Sampled sampled;
  int64_t tokens = 0;
  for (auto _ : state) {
    SchedulerOutput out;
    if (!vllm::bench::schedule_all(*s, num_requests, state, out)) break;
    vllm::bench::sample_all(out, tokens, sampled);
    benchmark::DoNotOptimize(s->update_from_output(sampled));
  }
  state.counters["requests"] = num_requests;
}
// 2,000 steps per run: the requests (512-token prompts) stay below max_model_len = 4096, so
// every timed step schedules all of them.
BENCHMARK(BM_SchedulerDecodeStep)
    ->Args({1, 1})->Args({32, 1})->Args({256, 1})->Args({256, 0})
    ->Iterations(2000)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
