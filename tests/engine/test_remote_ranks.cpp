// The wire form of a scheduler step, which node 0 sends the other nodes of a tensor-parallel
// group (engine/remote_ranks.h): every field comes back, and a cut message is an error.
#include <gtest/gtest.h>

#include "engine/remote_ranks.h"

using namespace vllm;

TEST(RemoteRanks, AStepSurvivesTheWireAndACutOneIsAnError) {
  core::SchedulerOutput out;
  core::ScheduledRequest& a = out.scheduled.emplace_back();
  a.request_id = "running-1";
  a.kind = core::ScheduledKind::kRunning;
  a.num_computed_tokens = 37;
  a.num_scheduled_tokens = 1;
  a.token_ids = {1234};
  a.new_block_ids = {{9}, {}};
  a.num_null_blocks = {0, 2};
  a.sample = true;
  core::ScheduledRequest& b = out.scheduled.emplace_back();
  b.request_id = "new-\xe2\x82\xac";
  b.kind = core::ScheduledKind::kNew;
  b.num_scheduled_tokens = 3;
  b.token_ids = {5, -1, 70000};
  b.block_ids = {{1, 2, 3}, {4}};
  out.total_num_scheduled_tokens = 4;
  out.preempted_req_ids = {"p"};
  out.finished_req_ids = {"f1", "f2"};

  const std::string wire = encode_step(out);
  const core::SchedulerOutput back = decode_step(wire);
  ASSERT_EQ(back.scheduled.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto &x = out.scheduled[i], &y = back.scheduled[i];
    EXPECT_EQ(y.request_id, x.request_id);
    EXPECT_EQ(y.kind, x.kind);
    EXPECT_EQ(y.num_computed_tokens, x.num_computed_tokens);
    EXPECT_EQ(y.num_scheduled_tokens, x.num_scheduled_tokens);
    EXPECT_EQ(y.token_ids, x.token_ids);
    EXPECT_EQ(y.block_ids, x.block_ids);
    EXPECT_EQ(y.new_block_ids, x.new_block_ids);
    EXPECT_EQ(y.num_null_blocks, x.num_null_blocks);
    EXPECT_EQ(y.sample, x.sample);
  }
  EXPECT_EQ(back.total_num_scheduled_tokens, 4);
  EXPECT_EQ(back.preempted_req_ids, out.preempted_req_ids);
  EXPECT_EQ(back.finished_req_ids, out.finished_req_ids);
  for (size_t cut = 0; cut < wire.size(); ++cut)
    EXPECT_THROW(decode_step(wire.substr(0, cut)), Error) << "cut at " << cut;
  EXPECT_THROW(decode_step(wire + "x"), Error);
}
