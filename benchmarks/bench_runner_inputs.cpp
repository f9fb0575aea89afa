// Host time of the model runner's batch preparation per decode step (no model): the persistent
// InputBatch against rebuilding the batch and copying every block table each step, as the
// runner and scheduler did before (commit 01a8e1a); and the whole host step around it.
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>

#include "decode_fixture.h"
#include "engine/input_batch.h"

using namespace vllm;
using namespace vllm::core;

namespace {

using Tables = std::vector<std::vector<int>>;
constexpr int kBlockSize = 16;
constexpr int kMaxModelLen = 4096;

enum Mode { kPersistent = 0, kRebuild = 1 };

// Requests with `context`-token prompts, all decoding (prefills run untimed), and the
// persistent batch already holding them when it is the mode measured.
struct DecodeSetup {
  std::unique_ptr<Scheduler> scheduler;
  InputBatch batch{1, kBlockSize};
  DecodeSetup(int num_requests, int context, Mode mode)
      : scheduler(bench::make_decode_scheduler(num_requests, context, kMaxModelLen,
                                               kMaxModelLen - context, true)) {
    bench::run_prefills(*scheduler, num_requests, [&](const SchedulerOutput& out) {
      if (mode == kPersistent) batch.prepare(out);
    });
  }
};

// The runner's batch construction of commit 01a8e1a (ModelRunner::execute without the model
// and the sampler), over the whole tables its scheduler attached to every request.
void build_from_scratch(const SchedulerOutput& out, const std::vector<Tables>& tables,
                        ForwardBatch& b) {
  b.attn.resize(1);
  b.slot_mappings.resize(1);
  int max_blocks = 0;
  for (const auto& t : tables) max_blocks = std::max<int>(max_blocks, t[0].size());
  b.attn[0].max_blocks_per_seq = std::max(1, max_blocks);
  b.attn[0].query_start_loc.push_back(0);
  for (size_t k = 0; k < out.scheduled.size(); ++k) {
    const auto& s = out.scheduled[k];
    const auto& table = tables[k][0];
    const int start = static_cast<int>(b.token_ids.size());
    for (int i = 0; i < s.num_scheduled_tokens; ++i) {
      const int pos = s.num_computed_tokens + i;
      b.token_ids.push_back(s.token_ids[i]);
      b.positions.push_back(pos);
      b.slot_mappings[0].push_back(table[pos / kBlockSize] * kBlockSize + pos % kBlockSize);
    }
    b.attn[0].query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.attn[0].seq_lens.push_back(s.num_computed_tokens + s.num_scheduled_tokens);
    b.attn[0].block_tables.insert(b.attn[0].block_tables.end(), table.begin(), table.end());
    b.attn[0].block_tables.resize(
        b.attn[0].block_tables.size() + (b.attn[0].max_blocks_per_seq - table.size()), 0);
    if (s.sample) b.logits_indices.push_back(start + s.num_scheduled_tokens - 1);
  }
}

// What the scheduler of commit 01a8e1a copied into its output: every whole table.
std::vector<Tables> whole_tables(Scheduler& s, const SchedulerOutput& out) {
  std::vector<Tables> tables;
  tables.reserve(out.scheduled.size());
  for (const auto& r : out.scheduled)
    tables.push_back(s.kv_cache_manager().get_block_ids(r.request_id));
  return tables;
}

// The runner's preparation of one step: InputBatch::prepare, or the old construction over
// the tables the scheduler copied out.
void prepare_inputs(Mode mode, const SchedulerOutput& out, const std::vector<Tables>& tables,
                    InputBatch& ib) {
  if (mode == kPersistent) {
    benchmark::DoNotOptimize(ib.prepare(out).attn[0].block_tables.data());
  } else {
    ForwardBatch b;  // the old runner built a fresh one each step
    build_from_scratch(out, tables, b);
    benchmark::DoNotOptimize(b.attn[0].block_tables.data());
  }
}

// Only the runner's preparation is timed (manual time), not the table copies it reads.
void BM_RunnerInputs(benchmark::State& state) {
  const int num_requests = static_cast<int>(state.range(0));
  const int context = static_cast<int>(state.range(1));
  const Mode mode = static_cast<Mode>(state.range(2));
  DecodeSetup setup(num_requests, context, mode);
  Scheduler* s = setup.scheduler.get();
  InputBatch& ib = setup.batch;
  bench::Sampled sampled;
  int64_t tokens = 0;
  for (auto _ : state) {
    SchedulerOutput out;
    if (!vllm::bench::schedule_all(*s, num_requests, state, out)) break;
    std::vector<Tables> tables;
    if (mode == kRebuild) tables = whole_tables(*s, out);
    const auto t0 = std::chrono::steady_clock::now();
    prepare_inputs(mode, out, tables, ib);
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    bench::sample_all(out, tokens, sampled);
    s->update_from_output(sampled);
  }
  state.SetLabel(mode == kPersistent ? "persistent" : "rebuild");
}

// The whole host step without model and sampler: schedule(), the runner's preparation (with
// the old scheduler's table copies in rebuild mode), update_from_output().
void BM_EngineHostStep(benchmark::State& state) {
  const int num_requests = static_cast<int>(state.range(0));
  const int context = static_cast<int>(state.range(1));
  const Mode mode = static_cast<Mode>(state.range(2));
  DecodeSetup setup(num_requests, context, mode);
  Scheduler* s = setup.scheduler.get();
  InputBatch& ib = setup.batch;
  bench::Sampled sampled;
  int64_t tokens = 0;
  for (auto _ : state) {
    SchedulerOutput out;
    if (!vllm::bench::schedule_all(*s, num_requests, state, out)) break;
    prepare_inputs(mode, out, mode == kRebuild ? whole_tables(*s, out) : std::vector<Tables>{},
                   ib);
    bench::sample_all(out, tokens, sampled);
    benchmark::DoNotOptimize(s->update_from_output(sampled));
  }
  state.SetLabel(mode == kPersistent ? "persistent" : "rebuild");
}

}  // namespace

// Args: running requests, context tokens at the first timed step, mode. 1,000 decode steps per
// run keep every request below max_model_len (4096), so each step schedules all of them.
BENCHMARK(BM_RunnerInputs)
    ->ArgsProduct({{256}, {500, 2000}, {kPersistent, kRebuild}})
    ->UseManualTime()->Iterations(1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EngineHostStep)
    ->ArgsProduct({{256}, {500, 2000}, {kPersistent, kRebuild}})
    ->Iterations(1000)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
