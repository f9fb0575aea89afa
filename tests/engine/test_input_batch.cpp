// InputBatch (the runner's persistent batch): rows condense on removal, running requests left
// out of a step are parked and come back, lost steps are caught, sliding-window nulls land; and
// a fuzz run against the real Scheduler where every row's tables must equal the
// KvCacheManager's and the forward batch must equal one built from scratch from those tables.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "core/scheduler.h"
#include "engine/input_batch.h"
#include "util/check.h"

using namespace vllm;
using namespace vllm::core;

namespace {

using Tables = std::vector<std::vector<int>>;
using I32 = std::vector<int32_t>;

std::vector<int> tokens_at(int first, int n) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back(100 + first + i);
  return t;
}

ScheduledRequest fresh(const std::string& id, int first, int n, Tables tables, bool sample) {
  ScheduledRequest s;
  s.request_id = id;
  s.kind = first == 0 ? ScheduledKind::kNew : ScheduledKind::kResumed;
  s.num_computed_tokens = first;
  s.num_scheduled_tokens = n;
  s.token_ids = tokens_at(first, n);
  s.block_ids = std::move(tables);
  s.sample = sample;
  return s;
}

ScheduledRequest running(const std::string& id, int first, int n, Tables new_ids,
                         std::vector<int> nulls = {}) {
  ScheduledRequest s;
  s.request_id = id;
  s.kind = ScheduledKind::kRunning;
  s.num_computed_tokens = first;
  s.num_scheduled_tokens = n;
  s.token_ids = tokens_at(first, n);
  s.new_block_ids = std::move(new_ids);
  s.num_null_blocks = std::move(nulls);
  s.sample = true;
  return s;
}

SchedulerOutput output(std::vector<ScheduledRequest> scheduled,
                       std::vector<std::string> finished = {},
                       std::vector<std::string> preempted = {}) {
  SchedulerOutput out;
  out.scheduled = std::move(scheduled);
  out.finished_req_ids = std::move(finished);
  out.preempted_req_ids = std::move(preempted);
  return out;
}

}  // namespace

TEST(InputBatch, RowsPersistAndCondenseOnRemoval) {
  InputBatch ib(1, 4);
  const ForwardBatch& b1 = ib.prepare(output({fresh("a", 0, 6, {{1, 2}}, false),
                                              fresh("b", 0, 3, {{3}}, true),
                                              fresh("c", 0, 5, {{4, 5}}, true)}));
  ASSERT_EQ(ib.num_rows(), 3);
  EXPECT_EQ(b1.attn[0].max_blocks_per_seq, 2);
  EXPECT_EQ(b1.attn[0].block_tables, (I32{1, 2, 3, 0, 4, 5}));
  EXPECT_EQ(b1.attn[0].seq_lens, (I32{6, 3, 5}));
  EXPECT_EQ(b1.attn[0].query_start_loc, (I32{0, 6, 9, 14}));
  EXPECT_EQ(b1.slot_mappings[0], (I32{4, 5, 6, 7, 8, 9, 12, 13, 14, 16, 17, 18, 19, 20}));
  EXPECT_EQ(b1.logits_indices, (I32{8, 13}));  // "a" is mid-prefill: no logits
  EXPECT_EQ(ib.first_logits_row(1), 0);
  EXPECT_EQ(ib.first_logits_row(2), 1);

  // "b" finished: the last row ("c") moves into its row. "a" grows past the width (2 -> 4).
  const ForwardBatch& b2 = ib.prepare(output(
      {running("a", 6, 3, {{6}}), running("c", 5, 1, {{}})}, /*finished=*/{"b"}));
  ASSERT_EQ(ib.num_rows(), 2);
  EXPECT_EQ(ib.request_id(0), "a");
  EXPECT_EQ(ib.request_id(1), "c");
  EXPECT_EQ(b2.attn[0].max_blocks_per_seq, 4);
  EXPECT_EQ(b2.attn[0].block_tables, (I32{1, 2, 6, 0, 4, 5, 0, 0}));
  EXPECT_EQ(b2.attn[0].seq_lens, (I32{9, 6}));
  EXPECT_EQ(b2.token_ids, (I32{106, 107, 108, 105}));
  EXPECT_EQ(b2.positions, (I32{6, 7, 8, 5}));
  EXPECT_EQ(b2.slot_mappings[0], (I32{10, 11, 24, 21}));
  EXPECT_EQ(b2.logits_indices, (I32{2, 3}));

  // Rows keep their place whatever the scheduled order; scheduled_index maps back.
  const ForwardBatch& b3 = ib.prepare(output({running("c", 6, 1, {{}}), running("a", 9, 1, {{}}),
                                              fresh("d", 0, 2, {{7}}, true)}));
  ASSERT_EQ(ib.num_rows(), 3);
  EXPECT_EQ(ib.scheduled_index(0), 1);  // "a"
  EXPECT_EQ(ib.scheduled_index(1), 0);  // "c"
  EXPECT_EQ(ib.scheduled_index(2), 2);  // "d"
  EXPECT_EQ(b3.token_ids, (I32{109, 106, 100, 101}));
  EXPECT_EQ(b3.attn[0].block_tables, (I32{1, 2, 6, 0, 4, 5, 0, 0, 7, 0, 0, 0}));

  // Preempting the first row moves the last ("d") there, its zero padding with it.
  ib.prepare(output({running("c", 7, 1, {{}}), running("d", 2, 1, {{}})}, {}, {"a"}));
  EXPECT_EQ(ib.request_id(0), "d");
  EXPECT_EQ(ib.batch().attn[0].block_tables, (I32{7, 0, 0, 0, 4, 5, 0, 0}));
  EXPECT_EQ(ib.block_ids("a"), Tables{});
}

// The persistent batch holds only the requests of the step: one left out is parked with its
// tables and position, and continues from them when scheduled again.
TEST(InputBatch, ParksRunningRequestsLeftOutOfAStep) {
  InputBatch ib(1, 4);
  ib.prepare(output({fresh("a", 0, 4, {{1}}, true), fresh("b", 0, 6, {{2, 3}}, true)}));
  const ForwardBatch& b2 = ib.prepare(output({running("a", 4, 1, {{4}})}));
  EXPECT_EQ(ib.num_rows(), 1);
  EXPECT_EQ(ib.num_parked(), 1);
  EXPECT_EQ(ib.block_ids("b"), (Tables{{2, 3}}));
  EXPECT_EQ(b2.attn[0].block_tables, (I32{1, 4}));
  EXPECT_EQ(b2.attn[0].seq_lens, (I32{5}));

  const ForwardBatch& b3 =
      ib.prepare(output({running("a", 5, 1, {{}}), running("b", 6, 3, {{5}})}));
  EXPECT_EQ(ib.num_parked(), 0);
  EXPECT_EQ(ib.request_id(1), "b");
  EXPECT_EQ(ib.block_ids("b"), (Tables{{2, 3, 5}}));
  EXPECT_EQ(b3.attn[0].seq_lens, (I32{6, 9}));
  EXPECT_EQ(b3.slot_mappings[0], (I32{17, 14, 15, 20}));

  // Parked, then preempted or finished: forgotten without coming back.
  ib.prepare(output({running("a", 6, 1, {{}})}));
  ASSERT_EQ(ib.num_parked(), 1);
  ib.prepare(output({}, {}, /*preempted=*/{"b"}));  // and "a" is left out
  EXPECT_EQ(ib.num_rows(), 0);
  EXPECT_EQ(ib.block_ids("b"), Tables{});
  EXPECT_EQ(ib.block_ids("a"), (Tables{{1, 4}}));
  ib.prepare(output({}, /*finished=*/{"a"}));
  EXPECT_EQ(ib.num_parked(), 0);
  EXPECT_EQ(ib.block_ids("a"), Tables{});
}

TEST(InputBatch, SlidingWindowNullsAndSecondGroup) {
  InputBatch ib(2, 4);
  // A prefix hit in the window group starts with a null block.
  ib.prepare(output({fresh("a", 8, 2, {{1, 2, 3}, {0, 4, 5}}, true)}));
  ib.prepare(output({running("a", 10, 3, {{6}, {7}}, {0, 2})}));
  EXPECT_EQ(ib.block_ids("a"), (Tables{{1, 2, 3, 6}, {0, 0, 5, 7}}));
  EXPECT_EQ(ib.batch().attn[0].block_tables, (I32{1, 2, 3, 6}));
  EXPECT_EQ(ib.batch().attn[1].block_tables, (I32{0, 0, 5, 7}));
  EXPECT_EQ(ib.batch().slot_mappings[0], (I32{14, 15, 24}));  // positions 10-12
  EXPECT_EQ(ib.batch().slot_mappings[1], (I32{22, 23, 28}));
  ib.prepare(output({running("a", 13, 1, {{}, {}}, {0, 3})}));
  EXPECT_EQ(ib.block_ids("a"), (Tables{{1, 2, 3, 6}, {0, 0, 0, 7}}));
}

TEST(InputBatch, CatchesLostStepsAndUnknownRequests) {
  {
    InputBatch ib(1, 4);
    ib.prepare(output({fresh("a", 0, 4, {{1}}, true)}));
    // As if the step that computed position 4 never reached the runner.
    EXPECT_THROW(ib.prepare(output({running("a", 5, 1, {{}})})), Error);
  }
  {
    InputBatch ib(1, 4);
    EXPECT_THROW(ib.prepare(output({running("x", 4, 1, {{}})})), Error);
  }
  {
    InputBatch ib(1, 4);
    ib.prepare(output({fresh("a", 0, 4, {{1}}, true)}));
    // Position 4 needs a second block that the edits do not bring.
    EXPECT_THROW(ib.prepare(output({running("a", 4, 1, {{}})})), Error);
  }
  {
    InputBatch ib(1, 4);
    EXPECT_THROW(ib.prepare(output({fresh("a", 0, 4, {{1}, {2}}, true)})), Error);
  }
}
