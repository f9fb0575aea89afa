// Scheduler: chunked prefill under the token budget, FCFS and priority order, max_num_seqs,
// preemption by recompute with exact block ids, aborts, stop conditions, prefix-cache counts.
#include <gtest/gtest.h>

#include <functional>

#include "core/scheduler.h"
#include "util/check.h"

using namespace vllm;
using namespace vllm::core;

namespace {

using Tables = std::vector<std::vector<int>>;

Request make(const std::string& id, int num_tokens, int value = 1, int max_tokens = 16) {
  Request r(id, std::vector<int>(num_tokens, value));
  r.max_tokens = max_tokens;
  return r;
}

SchedulerConfig sched_config(int budget, int max_model_len, int max_num_seqs = 64) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_model_len = max_model_len;
  c.max_num_seqs = max_num_seqs;
  return c;
}

KvCacheConfig kv_config(int block_size, int num_blocks) {
  KvCacheConfig c;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  return c;
}

struct Step {
  SchedulerOutput out;
  UpdateResult update;
  std::vector<std::string> ids() const {
    std::vector<std::string> v;
    for (const auto& s : out.scheduled) v.push_back(s.request_id);
    return v;
  }
  const ScheduledRequest& at(const std::string& id) const {
    for (const auto& s : out.scheduled)
      if (s.request_id == id) return s;
    throw std::runtime_error("not scheduled: " + id);
  }
};

// One engine step with a fake model: every request that samples gets next(id).
Step step(Scheduler& s, const std::function<int(const std::string&)>& next = nullptr) {
  Step st;
  st.out = s.schedule();
  std::unordered_map<std::string, std::vector<int>> sampled;
  for (const auto& r : st.out.scheduled)
    if (r.sample) sampled[r.request_id] = {next ? next(r.request_id) : 7};
  st.update = s.update_from_output(sampled);
  return st;
}

}  // namespace

TEST(Scheduler, ChunkedPrefillSplitsALongPromptUnderTheTokenBudget) {
  Scheduler s(sched_config(64, 1024), kv_config(16, 101));
  s.add_request(make("a", 150));
  Step s1 = step(s);
  ASSERT_EQ(s1.ids(), std::vector<std::string>{"a"});
  const ScheduledRequest& a1 = s1.at("a");
  EXPECT_EQ(a1.kind, ScheduledKind::kNew);
  EXPECT_EQ(a1.num_computed_tokens, 0);
  EXPECT_EQ(a1.num_scheduled_tokens, 64);
  EXPECT_EQ(a1.token_ids.size(), 64u);
  EXPECT_EQ(a1.block_ids, (Tables{{1, 2, 3, 4}}));
  EXPECT_FALSE(a1.sample);
  EXPECT_TRUE(s1.update.outputs.empty());

  s.add_request(make("b", 100, 2));
  Step s2 = step(s);  // "a" uses the whole budget
  ASSERT_EQ(s2.ids(), std::vector<std::string>{"a"});
  EXPECT_EQ(s2.at("a").kind, ScheduledKind::kRunning);
  EXPECT_EQ(s2.at("a").num_computed_tokens, 64);
  // A running request carries only the blocks appended this step, not its whole table.
  EXPECT_TRUE(s2.at("a").block_ids.empty());
  EXPECT_EQ(s2.at("a").new_block_ids, (Tables{{5, 6, 7, 8}}));

  Step s3 = step(s);  // last chunk of "a" (22), then the first of "b" (42)
  ASSERT_EQ(s3.ids(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s3.at("a").num_scheduled_tokens, 22);
  EXPECT_TRUE(s3.at("a").sample);
  EXPECT_EQ(s3.at("a").new_block_ids, (Tables{{9, 10}}));
  EXPECT_EQ(s3.at("b").num_scheduled_tokens, 42);
  EXPECT_EQ(s3.at("b").kind, ScheduledKind::kNew);
  EXPECT_EQ(s3.at("b").block_ids, (Tables{{11, 12, 13}}));
  EXPECT_TRUE(s3.at("b").new_block_ids.empty());
  EXPECT_EQ(s3.out.total_num_scheduled_tokens, 64);
  ASSERT_EQ(s3.update.outputs.size(), 1u);
  EXPECT_EQ(s3.update.outputs[0].new_token_ids, std::vector<int>{7});

  Step s4 = step(s);  // decode of "a" first, the rest of "b" after
  EXPECT_EQ(s4.at("a").num_scheduled_tokens, 1);
  EXPECT_EQ(s4.at("a").num_computed_tokens, 150);
  EXPECT_EQ(s4.at("a").token_ids, std::vector<int>{7});
  EXPECT_EQ(s4.at("a").new_block_ids, (Tables{{}}));  // position 150 fits block 10
  EXPECT_EQ(s4.at("b").num_computed_tokens, 42);
  EXPECT_EQ(s4.at("b").num_scheduled_tokens, 58);
  EXPECT_TRUE(s4.at("b").sample);
  EXPECT_EQ(s4.at("b").kind, ScheduledKind::kRunning);
  EXPECT_EQ(s4.at("b").new_block_ids, (Tables{{14, 15, 16, 17}}));
  EXPECT_TRUE(s4.at("b").num_null_blocks.empty());  // no sliding window
}

TEST(Scheduler, LongPrefillThresholdCapsEachRequest) {
  SchedulerConfig c = sched_config(64, 1024);
  c.long_prefill_token_threshold = 32;
  Scheduler s(c, kv_config(16, 101));
  s.add_request(make("a", 100));
  s.add_request(make("b", 100, 2));
  for (int i = 0; i < 3; ++i) {
    Step st = step(s);
    EXPECT_EQ(st.at("a").num_scheduled_tokens, 32);
    EXPECT_EQ(st.at("b").num_scheduled_tokens, 32);
  }
  Step st = step(s);
  EXPECT_EQ(st.at("a").num_scheduled_tokens, 4);
  EXPECT_EQ(st.at("b").num_scheduled_tokens, 4);
}

TEST(Scheduler, WithoutChunkedPrefillAPromptWaitsForRoom) {
  SchedulerConfig c = sched_config(64, 64);
  c.enable_chunked_prefill = false;
  Scheduler s(c, kv_config(16, 101));
  s.add_request(make("a", 50));
  s.add_request(make("b", 30, 2));
  EXPECT_EQ(step(s).ids(), std::vector<std::string>{"a"});
  Step st = step(s);
  EXPECT_EQ(st.ids(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(st.at("b").num_scheduled_tokens, 30);
  c.max_num_batched_tokens = 32;
  EXPECT_THROW(Scheduler(c, kv_config(16, 101)), Error);
}

TEST(Scheduler, FcfsAndPriorityOrder) {
  for (SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kPriority}) {
    SchedulerConfig c = sched_config(64, 128, /*max_num_seqs=*/1);
    c.policy = policy;
    Scheduler s(c, kv_config(16, 101));
    const int priorities[] = {2, 0, 1, 0};
    const char* ids[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; ++i) {
      Request r = make(ids[i], 4, i, /*max_tokens=*/1);
      r.priority = priorities[i];
      s.add_request(std::move(r));
    }
    std::vector<std::string> order;
    while (s.has_unfinished()) {
      Step st = step(s);
      ASSERT_EQ(st.out.scheduled.size(), 1u);
      order.push_back(st.out.scheduled[0].request_id);
    }
    if (policy == SchedulingPolicy::kFcfs)
      EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c", "d"}));
    else  // by priority, then arrival
      EXPECT_EQ(order, (std::vector<std::string>{"b", "d", "c", "a"}));
  }
}

TEST(Scheduler, MaxNumSeqsCapsRunningRequests) {
  Scheduler s(sched_config(256, 128, /*max_num_seqs=*/2), kv_config(16, 101));
  const char* ids[] = {"r0", "r1", "r2", "r3", "r4"};
  for (int i = 0; i < 5; ++i) s.add_request(make(ids[i], 4, i, 3));
  EXPECT_EQ(step(s).ids(), (std::vector<std::string>{"r0", "r1"}));
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 3);
  step(s);
  Step s3 = step(s);
  ASSERT_EQ(s3.update.finished.size(), 2u);
  EXPECT_EQ(s3.update.finished[0].status, RequestStatus::kFinishedLength);
  Step s4 = step(s);
  EXPECT_EQ(s4.ids(), (std::vector<std::string>{"r2", "r3"}));
  EXPECT_EQ(s4.out.finished_req_ids, (std::vector<std::string>{"r0", "r1"}));
  EXPECT_EQ(s4.at("r2").kind, ScheduledKind::kNew);
}

// 6 usable blocks of 16 and two 40-token prompts: both fit until the first needs a 4th block.
TEST(Scheduler, PreemptsTheLastRunningRequestAndResumesIt) {
  Scheduler s(sched_config(256, 96), kv_config(16, 7));
  s.add_request(make("r1", 40, 1, 20));
  s.add_request(make("r2", 40, 2, 20));
  Step s1 = step(s);
  EXPECT_EQ(s1.at("r1").block_ids, (Tables{{1, 2, 3}}));
  EXPECT_EQ(s1.at("r2").block_ids, (Tables{{4, 5, 6}}));
  for (int i = 2; i <= 9; ++i) EXPECT_EQ(step(s).ids().size(), 2u) << i;

  // Step 10: r1 computes position 48 and needs a 4th block; r2 (last) is preempted, its
  // blocks freed tail first, and r1 takes r2's tail block 6.
  Step s10 = step(s);
  EXPECT_EQ(s10.out.preempted_req_ids, std::vector<std::string>{"r2"});
  ASSERT_EQ(s10.ids(), std::vector<std::string>{"r1"});
  EXPECT_EQ(s10.at("r1").new_block_ids, (Tables{{6}}));
  const Request* r2 = s.get_request("r2");
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->status, RequestStatus::kPreempted);
  EXPECT_EQ(r2->num_computed_tokens, 0);
  EXPECT_EQ(r2->num_preemptions, 1);
  EXPECT_EQ(r2->num_tokens(), 49);
  EXPECT_EQ(s.kv_cache_manager().block_pool().free_block_ids(), (std::vector<int>{5, 4}));

  // r1 runs alone to max_tokens; r2 does not fit meanwhile.
  for (int i = 11; i <= 19; ++i) EXPECT_EQ(step(s).ids(), std::vector<std::string>{"r1"}) << i;
  Step s20 = step(s);
  ASSERT_EQ(s20.update.finished.size(), 1u);
  EXPECT_EQ(s20.update.finished[0].request_id, "r1");
  EXPECT_EQ(s.num_waiting(), 1);

  // r2 resumes: its first two blocks are still cached (4, 5); block 6 was reused by r1.
  Step s21 = step(s);
  const ScheduledRequest& res = s21.at("r2");
  EXPECT_EQ(res.kind, ScheduledKind::kResumed);
  EXPECT_EQ(res.num_computed_tokens, 32);
  EXPECT_EQ(res.num_scheduled_tokens, 17);
  std::vector<int> expect(8, 2);
  expect.insert(expect.end(), 9, 7);
  EXPECT_EQ(res.token_ids, expect);
  EXPECT_EQ(res.block_ids, (Tables{{4, 5, 6, 3}}));
  EXPECT_TRUE(res.sample);

  int steps = 21, outputs = 0;
  std::vector<int> tokens;
  for (const auto& u : s21.update.outputs) outputs += u.new_token_ids.size();
  while (s.has_unfinished()) {
    Step st = step(s);
    ++steps;
    for (const auto& u : st.update.outputs)
      if (u.request_id == "r2") outputs += u.new_token_ids.size();
  }
  EXPECT_EQ(steps, 31);
  EXPECT_EQ(outputs, 11);  // 9 before preemption + 11 after = max_tokens
  EXPECT_EQ(s.stats().num_preemptions, 1);
  EXPECT_EQ(s.kv_cache_manager().block_pool().get_num_free_blocks(), 6);
}

// Under PRIORITY the victim is the lowest-priority request even when it was already
// scheduled earlier in the step: its tokens go back to the budget.
TEST(Scheduler, PriorityPreemptsTheLowestPriorityRequest) {
  SchedulerConfig c = sched_config(256, 96);
  c.policy = SchedulingPolicy::kPriority;
  Scheduler s(c, kv_config(16, 7));
  Request low = make("low", 40, 1, 30);
  low.priority = 5;
  s.add_request(std::move(low));
  EXPECT_EQ(step(s).at("low").block_ids, (Tables{{1, 2, 3}}));
  Request high = make("high", 47, 2, 30);
  high.priority = 0;
  s.add_request(std::move(high));
  Step s2 = step(s);
  EXPECT_EQ(s2.ids(), (std::vector<std::string>{"low", "high"}));
  EXPECT_EQ(s2.at("high").block_ids, (Tables{{4, 5, 6}}));
  EXPECT_EQ(step(s).ids().size(), 2u);
  Step s4 = step(s);
  EXPECT_EQ(s4.out.preempted_req_ids, std::vector<std::string>{"low"});
  ASSERT_EQ(s4.ids(), std::vector<std::string>{"high"});
  EXPECT_EQ(s4.at("high").num_computed_tokens, 48);
  EXPECT_EQ(s4.at("high").new_block_ids, (Tables{{3}}));
  EXPECT_EQ(s4.out.total_num_scheduled_tokens, 1);
  EXPECT_EQ(s.get_request("low")->status, RequestStatus::kPreempted);
}

TEST(Scheduler, AbortWaitingAndRunningRequestsReturnsEveryBlock) {
  Scheduler s(sched_config(256, 160, /*max_num_seqs=*/2), kv_config(16, 11));
  s.add_request(make("a", 40));
  s.add_request(make("b", 40, 2));
  s.add_request(make("c", 20, 3));
  SchedulerOutput out = s.schedule();
  EXPECT_EQ(out.scheduled.size(), 2u);
  EXPECT_TRUE(s.abort_request("c"));  // waiting
  EXPECT_EQ(s.num_waiting(), 0);
  EXPECT_TRUE(s.abort_request("b"));  // running, mid-step
  EXPECT_EQ(s.get_request("b"), nullptr);
  EXPECT_EQ(s.kv_cache_manager().block_pool().get_num_free_blocks(), 7);
  // The step that would have written b's blocks 4 and 5 may not run: they are not cached.
  EXPECT_FALSE(s.kv_cache_manager().block_pool().block_hash(4).has_value());
  EXPECT_TRUE(s.kv_cache_manager().block_pool().block_hash(1).has_value());
  UpdateResult u = s.update_from_output({{"a", {7}}, {"b", {7}}});
  ASSERT_EQ(u.outputs.size(), 1u);
  EXPECT_EQ(u.outputs[0].request_id, "a");
  Step st = step(s);
  EXPECT_EQ(st.out.finished_req_ids, (std::vector<std::string>{"c", "b"}));
  EXPECT_TRUE(s.abort_request("a"));
  EXPECT_FALSE(s.abort_request("a"));
  EXPECT_FALSE(s.abort_request("nope"));
  EXPECT_FALSE(s.has_unfinished());
  const BlockPool& pool = s.kv_cache_manager().block_pool();
  EXPECT_EQ(pool.get_num_free_blocks(), pool.num_usable_blocks());
  EXPECT_EQ(pool.free_block_ids().size(), 10u);
  EXPECT_DOUBLE_EQ(s.stats().kv_cache_usage, 0.0);
}

namespace {

struct ScriptRun {
  std::vector<int> tokens;
  RequestStatus status = RequestStatus::kRunning;
  std::optional<int> stop_token_id;
};

// Runs one request to the end with the model sampling script[k] as its k-th output token.
ScriptRun run_script(Request r, const std::vector<int>& script, int max_model_len = 1024) {
  Scheduler s(sched_config(256, max_model_len), kv_config(16, 101));
  const std::string id = r.request_id();
  s.add_request(std::move(r));
  ScriptRun run;
  for (int guard = 0; s.has_unfinished() && guard < 100; ++guard) {
    Step st = step(s, [&](const std::string&) { return script.at(run.tokens.size()); });
    for (const auto& u : st.update.outputs) {
      run.tokens.insert(run.tokens.end(), u.new_token_ids.begin(), u.new_token_ids.end());
      run.status = u.status;
      run.stop_token_id = u.stop_token_id;
    }
  }
  return run;
}

}  // namespace

TEST(Scheduler, StopConditions) {
  const std::vector<int> script{5, 6, 2, 9, 2, 8, 8, 8, 8, 8};
  Request eos = make("x", 4, 1, 8);
  eos.eos_token_ids = {2};
  ScriptRun r = run_script(eos, script);
  EXPECT_EQ(r.tokens, (std::vector<int>{5, 6, 2}));
  EXPECT_EQ(r.status, RequestStatus::kFinishedStopped);
  EXPECT_EQ(r.stop_token_id, std::nullopt);

  Request ignore = eos;
  ignore.ignore_eos = true;
  ignore.max_tokens = 5;
  r = run_script(ignore, script);
  EXPECT_EQ(r.tokens, (std::vector<int>{5, 6, 2, 9, 2}));
  EXPECT_EQ(r.status, RequestStatus::kFinishedLength);

  Request min_tokens = eos;
  min_tokens.min_tokens = 4;  // the EOS at output 3 does not count
  r = run_script(min_tokens, script);
  EXPECT_EQ(r.tokens, (std::vector<int>{5, 6, 2, 9, 2}));
  EXPECT_EQ(r.status, RequestStatus::kFinishedStopped);

  Request stop_ids = ignore;
  stop_ids.stop_token_ids = {9};  // stop ids apply even with ignore_eos
  r = run_script(stop_ids, script);
  EXPECT_EQ(r.tokens, (std::vector<int>{5, 6, 2, 9}));
  EXPECT_EQ(r.status, RequestStatus::kFinishedStopped);
  EXPECT_EQ(r.stop_token_id, 9);

  r = run_script(make("x", 4, 1, 3), script);
  EXPECT_EQ(r.tokens, (std::vector<int>{5, 6, 2}));
  EXPECT_EQ(r.status, RequestStatus::kFinishedLength);

  r = run_script(make("x", 10, 1, 100), script, /*max_model_len=*/12);
  EXPECT_EQ(r.tokens, (std::vector<int>{5, 6}));
  EXPECT_EQ(r.status, RequestStatus::kFinishedLength);
}

TEST(Scheduler, SeveralSampledTokensAreCutAtTheStopToken) {
  Scheduler s(sched_config(256, 1024), kv_config(16, 101));
  Request r = make("x", 4);
  r.eos_token_ids = {2};
  s.add_request(std::move(r));
  s.schedule();
  UpdateResult u = s.update_from_output({{"x", {5, 2, 6}}});
  ASSERT_EQ(u.outputs.size(), 1u);
  EXPECT_EQ(u.outputs[0].new_token_ids, (std::vector<int>{5, 2}));
  EXPECT_EQ(u.outputs[0].status, RequestStatus::kFinishedStopped);
  ASSERT_EQ(u.finished.size(), 1u);
  EXPECT_STREQ(finish_reason(u.finished[0].status), "stop");
}

TEST(Scheduler, FinishRequestForStopStrings) {
  Scheduler s(sched_config(256, 1024), kv_config(16, 101));
  s.add_request(make("x", 4));
  step(s);
  EXPECT_THROW(s.finish_request("x", RequestStatus::kRunning), Error);
  EXPECT_TRUE(s.finish_request("x", RequestStatus::kFinishedStopped));
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.schedule().finished_req_ids, std::vector<std::string>{"x"});
}

TEST(Scheduler, SharedPrefixIsReportedAsCachedTokens) {
  for (int bs : {16, 48}) {
    Scheduler s(sched_config(4096, 1024), kv_config(bs, 101));
    std::vector<int> prefix(512, 7);
    std::vector<int> pa = prefix, pb = prefix;
    pa.insert(pa.end(), 10, 1);
    pb.insert(pb.end(), 20, 2);
    s.add_request(Request("a", pa));
    step(s);
    s.add_request(Request("b", pb));
    Step st = step(s);
    const int expected = 512 - 512 % bs;  // 512 for 16, 480 for 48
    for (const auto& u : st.update.outputs) {
      if (u.request_id == "b") {
        EXPECT_EQ(u.num_cached_tokens, expected) << bs;
      }
    }
    EXPECT_EQ(s.get_request("b")->num_cached_tokens, expected);
    EXPECT_EQ(st.at("b").num_computed_tokens, expected);
    EXPECT_EQ(st.at("b").num_scheduled_tokens, 532 - expected);
    EXPECT_EQ(s.stats().prefix_cache_hits, expected);
    EXPECT_EQ(s.stats().prefix_cache_queries, 522 + 532);
  }
}

TEST(Scheduler, RejectsBadRequestsAndTooSmallKvCache) {
  Scheduler s(sched_config(256, 64), kv_config(16, 11));
  s.add_request(make("a", 4));
  EXPECT_THROW(s.add_request(make("a", 4)), Error);
  EXPECT_THROW(s.add_request(make("e", 0)), Error);
  EXPECT_THROW(s.add_request(make("long", 64)), Error);
  Request bad = make("m", 4, 1, 2);
  bad.min_tokens = 3;
  EXPECT_THROW(s.add_request(bad), Error);
  EXPECT_EQ(s.kv_capacity().num_tokens, 160);
  // 10 blocks of 16 cannot hold one 256-token request.
  try {
    Scheduler tiny(sched_config(256, 256), kv_config(16, 11));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("estimated maximum model length is 160"),
              std::string::npos)
        << e.what();
  }
}

// A request preempted in the step that scheduled it never computes that step's tokens, so the
// blocks cached at allocation must not stay in the prefix cache.
TEST(Scheduler, PreemptedInTheSameStepLeavesNoUncomputedBlocksCached) {
  SchedulerConfig c = sched_config(256, 128);
  c.policy = SchedulingPolicy::kPriority;
  c.long_prefill_token_threshold = 32;
  Scheduler s(c, kv_config(16, 9));  // 8 usable blocks
  Request low = make("low", 100, 1, 5);
  low.priority = 5;
  s.add_request(std::move(low));
  EXPECT_EQ(step(s).at("low").block_ids, (Tables{{1, 2}}));
  Request high = make("high", 32, 2, 3);
  high.priority = 0;
  s.add_request(std::move(high));
  Step s2 = step(s);
  EXPECT_EQ(s2.at("low").new_block_ids, (Tables{{3, 4}}));
  EXPECT_EQ(s2.at("high").block_ids, (Tables{{5, 6}}));
  // Step 3: "low" takes blocks 7 and 8 for [64, 96), then "high" needs a block and preempts
  // it. Block 8 goes to "high"; block 7 is free but must not keep low's hash.
  Step s3 = step(s);
  EXPECT_EQ(s3.out.preempted_req_ids, std::vector<std::string>{"low"});
  EXPECT_EQ(s3.at("high").new_block_ids, (Tables{{8}}));
  const BlockPool& pool = s.kv_cache_manager().block_pool();
  EXPECT_FALSE(pool.block_hash(7).has_value());
  EXPECT_TRUE(pool.block_hash(4).has_value());
  step(s);  // "high" finishes
  EXPECT_EQ(s.num_running(), 0);
  Step s5 = step(s);
  EXPECT_EQ(s5.at("low").kind, ScheduledKind::kResumed);
  EXPECT_EQ(s5.at("low").num_computed_tokens, 64);
  EXPECT_EQ(s5.at("low").block_ids, (Tables{{1, 2, 3, 4, 7, 8}}));
}

// A sliding-window group nulls blocks behind the window at the front of the table; a running
// request reports that as num_null_blocks next to its appended blocks, and the two edits applied
// to the table of the previous step give the manager's table exactly.
TEST(Scheduler, SlidingWindowRunningRequestsReportNulledBlocks) {
  KvCacheConfig kv = kv_config(4, 17);  // blocks 1..16
  kv.groups = {KvCacheGroupSpec{KvPolicy::kSlidingWindow, 8, 1, {64}}};
  Scheduler s(sched_config(256, 64), kv);
  s.add_request(make("a", 10, 1, 30));
  Step s1 = step(s);
  EXPECT_EQ(s1.at("a").block_ids, (Tables{{1, 2, 3}}));
  EXPECT_EQ(s1.at("a").num_null_blocks, std::vector<int>{0});
  Tables table = s1.at("a").block_ids;
  std::vector<Tables> news;
  std::vector<int> nulls;
  while (s.has_unfinished()) {
    Step st = step(s);
    const ScheduledRequest& a = st.at("a");
    ASSERT_EQ(a.kind, ScheduledKind::kRunning);
    ASSERT_EQ(a.new_block_ids.size(), 1u);
    ASSERT_EQ(a.num_null_blocks.size(), 1u);
    table[0].insert(table[0].end(), a.new_block_ids[0].begin(), a.new_block_ids[0].end());
    std::fill(table[0].begin(), table[0].begin() + a.num_null_blocks[0], kNullBlockId);
    if (s.has_unfinished()) {  // the last step finishes "a" and frees its blocks
      ASSERT_EQ(table, s.kv_cache_manager().get_block_ids("a"));
    }
    news.push_back(a.new_block_ids);
    nulls.push_back(a.num_null_blocks[0]);
  }
  // Step k computes position 9 + k. Position 11 is the first whose window (4..11) leaves block
  // 0 behind; position 12 needs a 4th block: the head of the free queue (4), not the block 1
  // just freed (tail).
  ASSERT_GE(news.size(), 8u);
  EXPECT_EQ(nulls[0], 0);  // position 10: window 3..10
  EXPECT_EQ(nulls[1], 1);
  EXPECT_EQ(news[1], (Tables{{}}));
  EXPECT_EQ(news[2], (Tables{{4}}));
  EXPECT_EQ(nulls[2], 1);
  EXPECT_EQ(nulls[5], 2);  // position 15: window 8..15
  EXPECT_EQ(news[6], (Tables{{5}}));
  EXPECT_EQ(table[0].size(), 10u);  // 39 tokens
  EXPECT_EQ(nulls.back(), 7);  // position 38: window 31..38
}
