// Random workloads (shared prefixes, aborts, EOS, preemption under a tiny pool) against a
// simulated KV cache: every step writes each scheduled token's KV, a hash of its whole prefix,
// through the slot_mapping, then checks that every position a scheduled token attends to holds
// the right prefix. Block ref counts must match the block tables after every step. The block
// tables used are rebuilt only from the scheduler's outputs (whole tables for new and resumed
// requests, edits for running ones), as a model runner does, and must equal the manager's.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "core/scheduler.h"
#include "random_requests.h"

using namespace vllm::core;

namespace {

uint64_t prefix_content(std::span<const int> tokens, int pos) {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i <= pos; ++i) h = (h ^ static_cast<uint64_t>(tokens[i] + 1)) * 0x100000001b3ULL;
  return h;
}

struct FuzzCase {
  const char* name;
  int block_size;
  int num_blocks;
  int budget;
  int max_num_seqs;
  bool hybrid;
  SchedulingPolicy policy;
  bool chunked;
  int long_prefill_token_threshold = 0;
};

using Tables = std::vector<std::vector<int>>;

// Applies one step's block-table edits to the tables a runner holds.
void apply_tables(const SchedulerOutput& out, int num_groups, std::map<std::string, Tables>& held) {
  for (const auto& id : out.finished_req_ids) held.erase(id);
  for (const auto& id : out.preempted_req_ids) ASSERT_EQ(held.erase(id), 1u) << id;
  for (const ScheduledRequest& sr : out.scheduled) {
    if (sr.kind != ScheduledKind::kRunning) {
      ASSERT_EQ(held.count(sr.request_id), 0u) << "new or resumed twice: " << sr.request_id;
      ASSERT_TRUE(sr.new_block_ids.empty());
      ASSERT_EQ(static_cast<int>(sr.block_ids.size()), num_groups);
      held[sr.request_id] = sr.block_ids;
      continue;
    }
    ASSERT_TRUE(held.count(sr.request_id)) << "running but never sent whole: " << sr.request_id;
    ASSERT_TRUE(sr.block_ids.empty());
    ASSERT_EQ(static_cast<int>(sr.new_block_ids.size()), num_groups);
    Tables& t = held[sr.request_id];
    for (int g = 0; g < num_groups; ++g) {
      t[g].insert(t[g].end(), sr.new_block_ids[g].begin(), sr.new_block_ids[g].end());
      if (sr.num_null_blocks.empty()) continue;
      ASSERT_LE(sr.num_null_blocks[g], static_cast<int>(t[g].size()));
      std::fill(t[g].begin(), t[g].begin() + sr.num_null_blocks[g], kNullBlockId);
    }
  }
}

struct FuzzTotals {
  SchedulerStats stats;
  int64_t nulled = 0;  // scheduled requests reporting sliding-window nulls
};

void run_fuzz(const FuzzCase& fc, uint32_t seed, FuzzTotals* totals) {
  SCOPED_TRACE(std::string(fc.name) + " seed " + std::to_string(seed));
  const int max_model_len = 40;
  SchedulerConfig sc;
  sc.max_num_batched_tokens = fc.chunked ? fc.budget : std::max(fc.budget, max_model_len);
  sc.max_model_len = max_model_len;
  sc.max_num_seqs = fc.max_num_seqs;
  sc.policy = fc.policy;
  sc.enable_chunked_prefill = fc.chunked;
  sc.long_prefill_token_threshold = fc.long_prefill_token_threshold;
  KvCacheConfig kc;
  kc.block_size = fc.block_size;
  kc.num_blocks = fc.num_blocks;
  if (fc.hybrid) {
    KvCacheGroupSpec sw;
    sw.policy = KvPolicy::kSlidingWindow;
    sw.sliding_window = 6;
    kc.groups = {KvCacheGroupSpec{}, sw};
  }
  Scheduler s(sc, kc);
  const int G = static_cast<int>(kc.groups.size());
  std::vector<std::vector<uint64_t>> kv(G, std::vector<uint64_t>(fc.num_blocks * fc.block_size));

  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::set<std::string> live;
  std::map<std::string, Tables> held;  // as a runner holds them
  int next_id = 0, finished = 0;
  for (int iter = 0; iter < 400 || s.has_unfinished(); ++iter) {
    ASSERT_LT(iter, 5000) << "no progress";
    if (iter < 400) {
      vllm::core::fuzz::maybe_add(uni, s, live, next_id, 30, true);
      if (const auto id = vllm::core::fuzz::pick_abort(uni, live)) {
        ASSERT_TRUE(s.abort_request(*id));
      }
    }

    SchedulerOutput out = s.schedule();
    ASSERT_LE(out.total_num_scheduled_tokens, sc.max_num_batched_tokens);
    ASSERT_LE(s.num_running(), sc.max_num_seqs);
    apply_tables(out, G, held);
    if (::testing::Test::HasFatalFailure()) return;
    // Every held table belongs to a running request and equals the manager's, scheduled or not.
    ASSERT_EQ(static_cast<int>(held.size()), s.num_running());
    for (const auto& [id, tables] : held) {
      const Request* r = s.get_request(id);
      ASSERT_TRUE(r && r->status == RequestStatus::kRunning) << id;
      ASSERT_EQ(tables, s.kv_cache_manager().get_block_ids(id)) << id;
    }
    for (const ScheduledRequest& sr : out.scheduled)
      for (int n : sr.num_null_blocks) totals->nulled += n > 0;
    // Write every scheduled token's KV first (all layers write before attending) ...
    for (const ScheduledRequest& sr : out.scheduled) {
      const Request* r = s.get_request(sr.request_id);
      ASSERT_NE(r, nullptr);
      auto toks = r->all_token_ids();
      ASSERT_EQ(sr.token_ids, std::vector<int>(toks.begin() + sr.num_computed_tokens,
                                               toks.begin() + sr.num_computed_tokens +
                                                   sr.num_scheduled_tokens));
      for (int g = 0; g < G; ++g) {
        auto slots = compute_slot_mapping(held.at(sr.request_id)[g], sr.num_computed_tokens,
                                          sr.num_scheduled_tokens, fc.block_size);
        for (int i = 0; i < sr.num_scheduled_tokens; ++i) {
          ASSERT_GE(slots[i], fc.block_size) << "write into the null block";
          kv[g][slots[i]] = prefix_content(toks, sr.num_computed_tokens + i);
        }
      }
    }
    // ... then check everything each request attends to.
    for (const ScheduledRequest& sr : out.scheduled) {
      auto toks = s.get_request(sr.request_id)->all_token_ids();
      const int end = sr.num_computed_tokens + sr.num_scheduled_tokens;
      for (int g = 0; g < G; ++g) {
        const int lo = g == 0 ? 0 : std::max(0, sr.num_computed_tokens - 6 + 1);
        for (int p = lo; p < end; ++p) {
          const int block = held.at(sr.request_id)[g][p / fc.block_size];
          ASSERT_NE(block, kNullBlockId) << sr.request_id << " group " << g << " pos " << p;
          ASSERT_EQ(kv[g][block * fc.block_size + p % fc.block_size], prefix_content(toks, p))
              << sr.request_id << " group " << g << " pos " << p;
        }
      }
    }
    std::unordered_map<std::string, std::vector<int>> sampled;
    for (const ScheduledRequest& sr : out.scheduled)
      if (sr.sample) sampled[sr.request_id] = {uni(0, 6)};
    UpdateResult u = s.update_from_output(sampled);
    for (const auto& f : u.finished) {
      ASSERT_TRUE(live.erase(f.request_id));
      ++finished;
    }
    // Ref counts equal block-table references of live requests.
    std::map<int, int> refs;
    for (const auto& id : live)
      for (const auto& table : s.kv_cache_manager().get_block_ids(id))
        for (int b : table)
          if (b != kNullBlockId) ++refs[b];
    const BlockPool& pool = s.kv_cache_manager().block_pool();
    int num_free = 0;
    for (int b = 1; b < pool.num_blocks(); ++b) {
      ASSERT_EQ(pool.ref_cnt(b), refs[b]) << "block " << b;
      num_free += refs[b] == 0;
    }
    ASSERT_EQ(pool.get_num_free_blocks(), num_free);
  }
  EXPECT_TRUE(live.empty());
  EXPECT_GT(finished, 50);
  const BlockPool& pool = s.kv_cache_manager().block_pool();
  EXPECT_EQ(pool.get_num_free_blocks(), pool.num_usable_blocks());
  totals->stats = s.stats();
}

}  // namespace

TEST(SchedulerFuzz, SimulatedKvStaysConsistent) {
  const FuzzCase cases[] = {
      {"full", 4, 14, 16, 8, false, SchedulingPolicy::kFcfs, true},
      {"full-priority", 4, 14, 16, 8, false, SchedulingPolicy::kPriority, true},
      {"full-no-chunk", 4, 14, 16, 8, false, SchedulingPolicy::kFcfs, false},
      {"hybrid", 4, 24, 16, 8, true, SchedulingPolicy::kFcfs, true},
      {"hybrid-priority", 2, 40, 12, 6, true, SchedulingPolicy::kPriority, true},
      {"full-prio-chunks", 4, 14, 24, 8, false, SchedulingPolicy::kPriority, true, 8},
      {"hybrid-prio-chunks", 2, 40, 24, 6, true, SchedulingPolicy::kPriority, true, 6},
  };
  for (const FuzzCase& fc : cases) {
    int64_t preemptions = 0, hits = 0, nulled = 0;
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      FuzzTotals t;
      run_fuzz(fc, seed, &t);
      preemptions += t.stats.num_preemptions;
      hits += t.stats.prefix_cache_hits;
      nulled += t.nulled;
    }
    // The workload must exercise every path, or it checks little.
    EXPECT_GT(preemptions, 0) << fc.name;
    EXPECT_GT(hits, 0) << fc.name;
    if (fc.hybrid) {
      EXPECT_GT(nulled, 0) << fc.name;
    }
    std::printf("%-18s preemptions %lld, prefix hit tokens %lld, requests with nulls %lld\n",
                fc.name, static_cast<long long>(preemptions), static_cast<long long>(hits),
                static_cast<long long>(nulled));
  }
}
