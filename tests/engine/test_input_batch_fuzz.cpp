// InputBatch against the real Scheduler: random workloads (shared prefixes, EOS, aborts,
// preemption under a tight pool, sliding windows, a hybrid of two groups, dropped samples that
// leave a request out of later steps). After every step each row's tables must equal the
// KvCacheManager's, and the forward batch must equal, row by row, one built from scratch from
// those tables (what the runner did before it kept a persistent batch).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <set>

#include "core/scheduler.h"
#include "engine/input_batch.h"
#include "../core/random_requests.h"

using namespace vllm;
using namespace vllm::core;

namespace {

enum class Groups { kFull, kWindow, kHybrid };

struct FuzzCase {
  const char* name;
  int block_size;
  int num_blocks;
  int budget;
  int max_num_seqs;
  Groups groups;
  SchedulingPolicy policy;
  int long_prefill_token_threshold = 0;
};

struct Totals {
  int64_t steps_with_parked = 0;
  int64_t preemptions = 0;
  int64_t width_max = 0;
};

// The rows of the forward batch against the scheduler's output and the manager's tables.
void check_batch(Scheduler& s, const SchedulerOutput& out, const InputBatch& ib,
                 const ForwardBatch& b, int block_size) {
  const int rows = ib.num_rows();
  ASSERT_EQ(rows, static_cast<int>(out.scheduled.size()));
  const int groups = s.kv_cache_manager().num_groups();
  ASSERT_EQ(b.num_groups(), groups);
  ASSERT_EQ(b.slot_mappings.size(), static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g) {
    ASSERT_EQ(b.attn[g].block_tables.size(), static_cast<size_t>(rows) * b.attn[g].max_blocks_per_seq);
    ASSERT_EQ(b.attn[g].seq_lens, b.attn[0].seq_lens);
    ASSERT_EQ(b.attn[g].query_start_loc, b.attn[0].query_start_loc);
    ASSERT_EQ(b.slot_mappings[g].size(), b.token_ids.size());
  }
  ASSERT_EQ(b.attn[0].seq_lens.size(), static_cast<size_t>(rows));
  ASSERT_EQ(b.attn[0].query_start_loc.size(), static_cast<size_t>(rows) + 1);
  ASSERT_EQ(b.attn[0].query_start_loc[rows], out.total_num_scheduled_tokens);
  std::set<int> seen;
  int num_sampled = 0;
  for (int row = 0; row < rows; ++row) {
    const int k = ib.scheduled_index(row);
    ASSERT_TRUE(seen.insert(k).second) << "two rows for scheduled request " << k;
    const ScheduledRequest& sr = out.scheduled[k];
    ASSERT_EQ(ib.request_id(row), sr.request_id);
    // Kept from edits only, the tables equal the manager's in every group.
    const auto tables = s.kv_cache_manager().get_block_ids(sr.request_id);
    ASSERT_EQ(ib.block_ids(sr.request_id), tables) << sr.request_id;
    const int q0 = b.attn[0].query_start_loc[row], q1 = b.attn[0].query_start_loc[row + 1];
    ASSERT_EQ(q1 - q0, sr.num_scheduled_tokens);
    ASSERT_EQ(b.attn[0].seq_lens[row], sr.num_computed_tokens + sr.num_scheduled_tokens);
    for (int i = 0; i < sr.num_scheduled_tokens; ++i) {
      ASSERT_EQ(b.token_ids[q0 + i], sr.token_ids[i]);
      ASSERT_EQ(b.positions[q0 + i], sr.num_computed_tokens + i);
    }
    for (int g = 0; g < groups; ++g) {  // each group's table row and slots
      const auto& t = tables[g];
      const int width = b.attn[g].max_blocks_per_seq;
      ASSERT_LE(static_cast<int>(t.size()), width);
      std::vector<int32_t> padded(t.begin(), t.end());
      padded.resize(width, kNullBlockId);
      ASSERT_EQ(std::vector<int32_t>(b.attn[g].block_tables.begin() + int64_t(row) * width,
                                     b.attn[g].block_tables.begin() + int64_t(row + 1) * width),
                padded)
          << sr.request_id << " group " << g;
      const auto slots = compute_slot_mapping(t, sr.num_computed_tokens, sr.num_scheduled_tokens,
                                              block_size);
      for (int i = 0; i < sr.num_scheduled_tokens; ++i)
        ASSERT_EQ(b.slot_mappings[g][q0 + i], slots[i]) << "group " << g;
    }
    if (sr.sample) {
      ++num_sampled;
      ASSERT_EQ(b.logits_indices.at(ib.first_logits_row(row)), q1 - 1);
    }
  }
  ASSERT_EQ(static_cast<int>(b.logits_indices.size()), num_sampled);
}

void run_fuzz(const FuzzCase& fc, uint32_t seed, Totals* totals) {
  SCOPED_TRACE(std::string(fc.name) + " seed " + std::to_string(seed));
  SchedulerConfig sc;
  sc.max_num_batched_tokens = fc.budget;
  sc.max_model_len = 40;
  sc.max_num_seqs = fc.max_num_seqs;
  sc.policy = fc.policy;
  sc.long_prefill_token_threshold = fc.long_prefill_token_threshold;
  KvCacheConfig kc;
  kc.block_size = fc.block_size;
  kc.num_blocks = fc.num_blocks;
  KvCacheGroupSpec window;
  window.policy = KvPolicy::kSlidingWindow;
  window.sliding_window = 6;
  if (fc.groups == Groups::kWindow) kc.groups = {window};
  if (fc.groups == Groups::kHybrid) kc.groups = {KvCacheGroupSpec{}, window};
  Scheduler s(sc, kc);
  InputBatch ib(static_cast<int>(kc.groups.size()), fc.block_size);

  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::set<std::string> live, stuck;
  int next_id = 0;
  for (int iter = 0; iter < 300 || s.has_unfinished(); ++iter) {
    ASSERT_LT(iter, 5000) << "no progress";
    if (iter < 300) {
      vllm::core::fuzz::maybe_add(uni, s, live, next_id, 24, false);
      if (const auto id = vllm::core::fuzz::pick_abort(uni, live)) {
        ASSERT_TRUE(s.abort_request(*id));
        stuck.erase(*id);
      }
    }
    if (iter >= 300) {  // a request whose sample was dropped never runs again by itself
      for (const auto& id : stuck) {
        ASSERT_TRUE(s.abort_request(id));
        live.erase(id);
      }
      stuck.clear();
    }

    const SchedulerOutput out = s.schedule();
    const ForwardBatch& b = ib.prepare(out);
    check_batch(s, out, ib, b, fc.block_size);
    if (::testing::Test::HasFatalFailure()) return;
    // Parked requests keep the manager's tables too.
    for (const auto& id : stuck) {
      const Request* r = s.get_request(id);
      if (r && r->status == RequestStatus::kRunning) {
        ASSERT_EQ(ib.block_ids(id), s.kv_cache_manager().get_block_ids(id)) << id;
      }
    }
    totals->steps_with_parked += ib.num_parked() > 0;
    totals->width_max = std::max<int64_t>(totals->width_max, b.attn[0].max_blocks_per_seq);

    std::unordered_map<std::string, std::vector<int>> sampled;
    for (const ScheduledRequest& sr : out.scheduled) {
      if (!sr.sample) continue;
      // Without its token a request stays running but has nothing to compute: the scheduler
      // leaves it out of every step (until preemption makes it recompute and sample again).
      if (iter < 300 && uni(0, 40) == 0) {
        stuck.insert(sr.request_id);
        continue;
      }
      sampled[sr.request_id] = {uni(0, 6)};
    }
    for (const auto& f : s.update_from_output(sampled).finished) {
      ASSERT_TRUE(live.erase(f.request_id));
      stuck.erase(f.request_id);
    }
  }
  // The last finished ids reach the batch with the next step.
  ib.prepare(s.schedule());
  EXPECT_EQ(ib.num_rows(), 0);
  EXPECT_EQ(ib.num_parked(), 0);
  EXPECT_TRUE(live.empty());
  totals->preemptions += s.stats().num_preemptions;
}

}  // namespace

TEST(InputBatchFuzz, TablesAndBatchMatchTheScheduler) {
  const FuzzCase cases[] = {
      {"full", 4, 14, 16, 8, Groups::kFull, SchedulingPolicy::kFcfs},
      {"full-priority", 2, 30, 24, 8, Groups::kFull, SchedulingPolicy::kPriority, 8},
      {"window", 4, 14, 16, 8, Groups::kWindow, SchedulingPolicy::kFcfs},
      {"hybrid", 4, 24, 16, 8, Groups::kHybrid, SchedulingPolicy::kFcfs},
      {"hybrid-priority", 2, 40, 12, 6, Groups::kHybrid, SchedulingPolicy::kPriority, 6},
  };
  for (const FuzzCase& fc : cases) {
    Totals t;
    for (uint32_t seed = 1; seed <= 5; ++seed) run_fuzz(fc, seed, &t);
    EXPECT_GT(t.preemptions, 0) << fc.name;
    EXPECT_GT(t.steps_with_parked, 0) << fc.name;
    std::printf("%-16s preemptions %lld, steps with parked requests %lld, widest table %lld\n",
                fc.name, static_cast<long long>(t.preemptions),
                static_cast<long long>(t.steps_with_parked), static_cast<long long>(t.width_max));
  }
}
