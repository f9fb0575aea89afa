// Shared set-up of the host-time benchmarks: a Scheduler whose requests all decode together,
// reached by running their prefills outside the timed region.
#pragma once
#include <benchmark/benchmark.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/scheduler.h"

namespace vllm::bench {

using Sampled = std::unordered_map<std::string, std::vector<int>>;

// num_requests requests with distinct prompts of prompt_len tokens; the pool holds every one
// at max_model_len, so no step preempts.
inline std::unique_ptr<core::Scheduler> make_decode_scheduler(int num_requests, int prompt_len,
                                                              int max_model_len, int max_tokens,
                                                              bool prefix_caching) {
  core::SchedulerConfig sc;
  sc.max_num_seqs = num_requests;
  sc.max_num_batched_tokens = 8192;
  sc.max_model_len = max_model_len;
  core::KvCacheConfig kv;
  kv.block_size = 16;
  kv.enable_prefix_caching = prefix_caching;
  kv.num_blocks = 1 + num_requests * (max_model_len / kv.block_size);
  kv.groups = {core::KvCacheGroupSpec{core::KvPolicy::kFull, 0, 30, {512}}};
  auto s = std::make_unique<core::Scheduler>(sc, kv);
  for (int i = 0; i < num_requests; ++i) {
    std::vector<int> prompt(prompt_len);
    for (int j = 0; j < prompt_len; ++j) prompt[j] = (i * 7919 + j * 31) % 32000;
    core::Request r(std::to_string(i), prompt);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    s->add_request(std::move(r));
  }
  return s;
}

// Steps (each output seen by on_step first) until every request decodes one token per step.
inline void run_prefills(core::Scheduler& s, int num_requests,
                         const std::function<void(const core::SchedulerOutput&)>& on_step = {}) {
  Sampled sampled;
  while (true) {
    core::SchedulerOutput out = s.schedule();
    if (on_step) on_step(out);
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

// One timed decode step's schedule into `out`; false, with the run marked failed, when not
// every request was scheduled (the figures would then describe a smaller batch).
inline bool schedule_all(core::Scheduler& s, int num_requests, benchmark::State& state,
                         core::SchedulerOutput& out) {
  out = s.schedule();
  if (static_cast<int>(out.scheduled.size()) == num_requests) return true;
  state.SkipWithError("a request left the batch");
  return false;
}

// One token for every scheduled request, from a running counter.
inline void sample_all(const core::SchedulerOutput& out, int64_t& tokens, Sampled& sampled) {
  sampled.clear();
  for (const auto& r : out.scheduled) sampled[r.request_id] = {static_cast<int>(tokens++ % 1000)};
}

}  // namespace vllm::bench
