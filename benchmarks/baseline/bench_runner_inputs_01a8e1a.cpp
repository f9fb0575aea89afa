// The "before" of benchmarks/bench_runner_inputs.cpp: the same loops against commit 01a8e1a,
// whose Scheduler copied every whole block table into its output and whose runner rebuilt the
// batch from them each step. Not part of the build (the API it uses is gone); to run it:
//   mkdir /tmp/before && git archive 01a8e1a src | tar -x -C /tmp/before
//   g++ -std=c++20 -O3 -DNDEBUG -I/tmp/before/src benchmarks/baseline/bench_runner_inputs_01a8e1a.cpp \
//       /tmp/before/src/core/*.cpp /tmp/before/src/util/check.cpp -lbenchmark -lpthread \
//       -o /tmp/before/bench_runner_inputs_01a8e1a
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/scheduler.h"
#include "model/forward_batch.h"

using namespace vllm;
using namespace vllm::core;

namespace {

constexpr int kBlockSize = 16;
constexpr int kMaxModelLen = 4096;

std::unique_ptr<Scheduler> make_scheduler(int num_requests, int context) {
  SchedulerConfig sc;
  sc.max_num_seqs = num_requests;
  sc.max_num_batched_tokens = 8192;
  sc.max_model_len = kMaxModelLen;
  KvCacheConfig kv;
  kv.block_size = kBlockSize;
  kv.num_blocks = 1 + num_requests * (kMaxModelLen / kBlockSize);
  kv.groups = {KvCacheGroupSpec{AttentionKind::kFullAttention, 0, 30, 512}};
  auto s = std::make_unique<Scheduler>(sc, kv);
  for (int i = 0; i < num_requests; ++i) {
    std::vector<int> prompt(context);
    for (int j = 0; j < context; ++j) prompt[j] = (i * 7919 + j * 31) % 32000;
    Request r(std::to_string(i), prompt);
    r.max_tokens = kMaxModelLen - context;
    r.ignore_eos = true;
    s->add_request(std::move(r));
  }
  return s;
}

void warm_up(Scheduler& s, int num_requests) {
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
    if (all_decode && static_cast<int>(out.scheduled.size()) == num_requests) return;
  }
}

// ModelRunner::execute of 01a8e1a up to the forward, prompt logprobs left out.
void build_from_scratch(const SchedulerOutput& out, ForwardBatch& b) {
  int max_blocks = 0;
  for (const auto& s : out.scheduled) max_blocks = std::max<int>(max_blocks, s.block_ids[0].size());
  b.attn.max_blocks_per_seq = std::max(1, max_blocks);
  b.attn.query_start_loc.push_back(0);
  for (const auto& s : out.scheduled) {
    const auto& table = s.block_ids[0];
    const int start = static_cast<int>(b.token_ids.size());
    for (int i = 0; i < s.num_scheduled_tokens; ++i) {
      const int pos = s.num_computed_tokens + i;
      b.token_ids.push_back(s.token_ids[i]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(table[pos / kBlockSize] * kBlockSize + pos % kBlockSize);
    }
    b.attn.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.attn.seq_lens.push_back(s.num_computed_tokens + s.num_scheduled_tokens);
    b.attn.block_tables.insert(b.attn.block_tables.end(), table.begin(), table.end());
    b.attn.block_tables.resize(b.attn.block_tables.size() + (b.attn.max_blocks_per_seq - table.size()), 0);
    if (s.sample) b.logits_indices.push_back(start + s.num_scheduled_tokens - 1);
  }
}

void sample_all(const SchedulerOutput& out, int64_t& tokens,
                std::unordered_map<std::string, std::vector<int>>& sampled) {
  sampled.clear();
  for (const auto& r : out.scheduled) sampled[r.request_id] = {static_cast<int>(tokens++ % 1000)};
}

void BM_RunnerInputs(benchmark::State& state) {
  const int num_requests = static_cast<int>(state.range(0));
  auto s = make_scheduler(num_requests, static_cast<int>(state.range(1)));
  warm_up(*s, num_requests);
  std::unordered_map<std::string, std::vector<int>> sampled;
  int64_t tokens = 0;
  for (auto _ : state) {
    SchedulerOutput out = s->schedule();
    if (static_cast<int>(out.scheduled.size()) != num_requests) {
      state.SkipWithError("a request left the batch");
      break;
    }
    const auto t0 = std::chrono::steady_clock::now();
    {
      ForwardBatch b;
      build_from_scratch(out, b);
      benchmark::DoNotOptimize(b.attn.block_tables.data());
    }
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    sample_all(out, tokens, sampled);
    s->update_from_output(sampled);
  }
  state.SetLabel("01a8e1a");
}

void BM_EngineHostStep(benchmark::State& state) {
  const int num_requests = static_cast<int>(state.range(0));
  auto s = make_scheduler(num_requests, static_cast<int>(state.range(1)));
  warm_up(*s, num_requests);
  std::unordered_map<std::string, std::vector<int>> sampled;
  int64_t tokens = 0;
  for (auto _ : state) {
    SchedulerOutput out = s->schedule();
    if (static_cast<int>(out.scheduled.size()) != num_requests) {
      state.SkipWithError("a request left the batch");
      break;
    }
    {
      ForwardBatch b;
      build_from_scratch(out, b);
      benchmark::DoNotOptimize(b.attn.block_tables.data());
    }
    sample_all(out, tokens, sampled);
    benchmark::DoNotOptimize(s->update_from_output(sampled));
  }
  state.SetLabel("01a8e1a");
}

}  // namespace

BENCHMARK(BM_RunnerInputs)->ArgsProduct({{256}, {500, 2000}})
    ->UseManualTime()->Iterations(1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EngineHostStep)->ArgsProduct({{256}, {500, 2000}})
    ->Iterations(1000)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
