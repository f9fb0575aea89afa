// EngineCore end to end on real models: batch invariance, memory pressure with preemption,
// seeded sampling, prefix caching, aborts, stop strings.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "engine/async_engine.h"
#include "engine/engine_core.h"
#include "model/generator.h"
#include "model/load.h"
#include "runtime/device.h"
#include "util/check.h"
#include "../model/windowed_mla_fixture.h"

using namespace vllm;

namespace {

const char* kSmol = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct Done {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text, finish_reason;
};

// Runs every request to completion; returns results by "id/index".
std::map<std::string, Done> run_all(EngineCore& core) {
  std::map<std::string, Done> done;
  for (int guard = 0; core.has_unfinished(); ++guard) {
    EXPECT_LT(guard, 100000) << "engine does not finish";
    for (const RequestOutput& o : core.step()) {
      Done& d = done[o.request_id + "/" + std::to_string(o.index)];
      d.tokens.insert(d.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      for (const auto& lp : o.logprobs) d.logprobs.push_back(lp.chosen.logprob);
      d.text += o.text_delta;
      if (o.finished) d.finish_reason = o.finish_reason;
    }
  }
  return done;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

std::vector<std::vector<int32_t>> random_prompts(int count, int min_len, int max_len, int vocab,
                                                 unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(min_len, max_len), tok(3, vocab - 1);
  std::vector<std::vector<int32_t>> out(count);
  for (auto& p : out) {
    p.resize(len(rng));
    for (auto& t : p) t = tok(rng);
  }
  return out;
}

}  // namespace

// 64 concurrent greedy requests of mixed lengths give the tokens (and the logprobs, bit for
// bit) of the same requests run one at a time: every kernel computes each row on its own.
TEST(EngineCore, BatchInvarianceSmolLM2) {
  if (!std::filesystem::exists(kSmol)) GTEST_SKIP() << kSmol << " absent";
  LoadedModel m = load_model(kSmol);
  auto prompts = random_prompts(64, 3, 60, 49152, 7);
  SamplingParams p = greedy(8);
  p.logprobs = 0;
  EngineConfig cfg;
  cfg.max_model_len = 256;
  cfg.max_num_batched_tokens = 512;  // forces chunked prefill next to decodes
  EngineCore batched(*m.model, m.tokenizer.get(), cfg);
  for (size_t i = 0; i < prompts.size(); ++i) batched.add_request(std::to_string(i), prompts[i], p);
  auto together = run_all(batched);
  ASSERT_EQ(together.size(), 64u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineCore alone(*m.model, m.tokenizer.get(), cfg);
    alone.add_request("x", prompts[i], p);
    auto single = run_all(alone);
    const Done& a = single["x/0"];
    const Done& b = together[std::to_string(i) + "/0"];
    EXPECT_EQ(a.tokens, b.tokens) << "request " << i;
    EXPECT_EQ(a.logprobs, b.logprobs) << "request " << i << " logprobs differ in the last bits";
    EXPECT_EQ(b.tokens.size(), 8u);
  }
}

// Under KV pressure, requests preempted and recomputed (their prompt and tokens prefilled
// again, in other chunks and batches) give the tokens and logprobs, bit for bit, of the same
// requests run one at a time: on the CPU every token takes one summation order, whatever its
// step (runtime/ops.h CpuOrder). SmolLM2's f16 cache takes ggml's attention order, the one
// that used to differ between a prefill and a decode step.
TEST(EngineCore, PreemptedGreedyEqualsOneAtATimeSmolLM2) {
  if (!std::filesystem::exists(kSmol)) GTEST_SKIP() << kSmol << " absent";
  LoadedModel m = load_model(kSmol);
  auto prompts = random_prompts(32, 20, 60, 49152, 23);
  SamplingParams p = greedy(24);
  p.logprobs = 0;
  EngineConfig tight;
  tight.max_model_len = 128;
  tight.block_size = 16;
  tight.kv_cache_memory = 400 * m.model->kv_bytes_per_token();  // ~5 requests of 84 tokens
  EngineCore batched(*m.model, m.tokenizer.get(), tight);
  for (size_t i = 0; i < prompts.size(); ++i) batched.add_request(std::to_string(i), prompts[i], p);
  auto together = run_all(batched);
  EXPECT_GT(batched.stats().num_preemptions, 0) << "the tight cache should have preempted";
  EngineConfig roomy;
  roomy.max_model_len = 128;
  int same = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineCore alone(*m.model, m.tokenizer.get(), roomy);
    alone.add_request("x", prompts[i], p);
    auto single = run_all(alone);
    const Done& a = single["x/0"];
    const Done& b = together[std::to_string(i) + "/0"];
    EXPECT_EQ(a.tokens, b.tokens) << "request " << i;
    EXPECT_EQ(a.logprobs, b.logprobs) << "request " << i;
    same += a.tokens == b.tokens && a.logprobs == b.logprobs;
  }
  EXPECT_EQ(same, 32);
}

class TinyEngine : public ::testing::Test {
 protected:
  void SetUp() override { m_ = load_model("fixtures/tiny/llama"); }
  EngineCore make(EngineConfig cfg) { return EngineCore(*m_.model, nullptr, cfg); }
  LoadedModel m_;
};

// With KV room for only a few requests, 32 requests still complete with the outputs they
// have without pressure (preemption by recompute), and every block comes back.
TEST_F(TinyEngine, PressurePreemptsAndRecomputes) {
  auto prompts = random_prompts(32, 5, 40, 384, 11);
  SamplingParams p = greedy(24);
  EngineConfig roomy;
  roomy.max_model_len = 128;
  EngineConfig tight = roomy;
  tight.block_size = 4;
  tight.kv_cache_memory = 140 * m_.model->kv_bytes_per_token();  // ~2 requests of 64
  EngineCore a(*m_.model, nullptr, roomy), b(*m_.model, nullptr, tight);
  for (size_t i = 0; i < prompts.size(); ++i) {
    a.add_request(std::to_string(i), prompts[i], p);
    b.add_request(std::to_string(i), prompts[i], p);
  }
  auto ra = run_all(a), rb = run_all(b);
  ASSERT_EQ(ra.size(), 32u);
  ASSERT_EQ(rb.size(), 32u);
  for (const auto& [id, d] : ra) EXPECT_EQ(d.tokens, rb[id].tokens) << id;
  EXPECT_GT(b.stats().num_preemptions, 0) << "the tight cache should have preempted";
  EXPECT_EQ(b.stats().kv_cache_usage, 0.0);
  EXPECT_EQ(a.stats().kv_cache_usage, 0.0);
}

// Prompt logprobs of a prompt whose blocks are already in the prefix cache: every position is
// computed (the request does not read the cache, as vLLM's), so the answer equals the one
// without a cache hit; and the request's own blocks still serve the next request.
TEST_F(TinyEngine, PromptLogprobsIgnoreCacheHits) {
  auto prompts = random_prompts(1, 40, 40, 384, 5);
  EngineConfig cfg;
  cfg.max_model_len = 128;
  cfg.block_size = 4;
  SamplingParams p = greedy(2);
  p.prompt_logprobs = 1;
  const auto prompt_lps = [&](EngineCore& core, const std::string& id) {
    core.add_request(id, prompts[0], p);
    std::vector<float> lps;
    size_t entries = 0;
    for (int guard = 0; core.has_unfinished() && guard < 1000; ++guard)
      for (const RequestOutput& o : core.step())
        for (const auto& e : o.prompt_logprobs) {
          ++entries;
          if (e) lps.push_back(e->chosen.logprob);
        }
    EXPECT_EQ(entries, prompts[0].size()) << id;  // the first entry is null
    return lps;
  };
  EngineCore core = make(cfg);
  const auto first = prompt_lps(core, "a");
  const int64_t hits = core.stats().prefix_cache_hits;
  const auto second = prompt_lps(core, "b");
  EXPECT_EQ(second.size(), prompts[0].size() - 1);
  EXPECT_EQ(first, second);
  EXPECT_EQ(core.stats().prefix_cache_hits, hits) << "a prompt-logprobs request read the cache";
  SamplingParams plain = greedy(2);
  core.add_request("c", prompts[0], plain);
  run_all(core);
  EXPECT_GE(core.stats().prefix_cache_hits - hits, 36) << "the cached blocks were not reused";
}

TEST_F(TinyEngine, SeededSamplingAloneAndInBatch) {
  auto prompts = random_prompts(8, 4, 20, 384, 3);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.max_tokens = 16;
  p.ignore_eos = true;
  EngineCore batch = make({});
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams q = p;
    q.seed = 100 + i;
    batch.add_request(std::to_string(i), prompts[i], q);
  }
  auto together = run_all(batch);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams q = p;
    q.seed = 100 + i;
    EngineCore alone = make({});
    alone.add_request("x", prompts[i], q);
    EXPECT_EQ(run_all(alone)["x/0"].tokens, together[std::to_string(i) + "/0"].tokens) << i;
  }
  // n = 2 with a seed: two different completions, each reproducible.
  SamplingParams q = p;
  q.seed = 5;
  q.n = 2;
  EngineCore c1 = make({}), c2 = make({});
  c1.add_request("r", prompts[0], q);
  c2.add_request("r", prompts[0], q);
  auto r1 = run_all(c1), r2 = run_all(c2);
  EXPECT_EQ(r1["r/0"].tokens, r2["r/0"].tokens);
  EXPECT_EQ(r1["r/1"].tokens, r2["r/1"].tokens);
  EXPECT_NE(r1["r/0"].tokens, r1["r/1"].tokens);
}

// A second request sharing a 512-token prefix computes only its new tokens.
TEST_F(TinyEngine, PrefixCachingReusesSharedPrefix) {
  EngineConfig cfg;
  cfg.max_model_len = 512 + 64;
  EngineCore core = make(cfg);
  auto prefix = random_prompts(1, 512, 512, 384, 5)[0];
  auto first = prefix, second = prefix;
  first.push_back(7);
  second.insert(second.end(), {9, 10, 11});
  core.add_request("a", first, greedy(4));
  run_all(core);
  const auto before = core.stats();
  core.add_request("b", second, greedy(4));
  auto out = run_all(core);
  const auto after = core.stats();
  EXPECT_EQ(after.prefix_cache_hits - before.prefix_cache_hits, 512);
  EXPECT_EQ(after.prefix_cache_queries - before.prefix_cache_queries, 515);
  // The cached prefix gives the same continuation as a cold engine.
  EngineCore cold = make(cfg);
  cold.add_request("b", second, greedy(4));
  EXPECT_EQ(run_all(cold)["b/0"].tokens, out["b/0"].tokens);
}

// A step whose requests are all leaving stops between layers: no tokens, and the blocks
// cached for it at schedule time (their KV half written) are never hit afterwards; the same
// prompt then computes from scratch and gets a cold engine's tokens. The control, a step that
// ran, is hit by the same prompt. A step with one request staying runs whole.
TEST_F(TinyEngine, CancelledStepLeavesNoCachedBlocks) {
  EngineConfig cfg;
  cfg.max_model_len = 256;
  const auto prompt = random_prompts(1, 64, 64, 384, 21)[0];
  const std::function<bool(const std::string&)> leaving_a = [](const std::string& id) {
    return id == "a";
  };
  const auto second_run = [&](bool cancel) {
    EngineCore core = make(cfg);
    core.add_request("a", prompt, greedy(4));
    for (const auto& o : core.step(cancel ? leaving_a : std::function<bool(const std::string&)>()))
      EXPECT_EQ(o.new_token_ids.empty(), cancel);
    EXPECT_TRUE(core.abort_request("a"));
    run_all(core);
    EXPECT_EQ(core.stats().kv_cache_usage, 0.0);
    const auto before = core.stats();
    core.add_request("b", prompt, greedy(4));
    auto out = run_all(core);
    return std::make_pair(core.stats().prefix_cache_hits - before.prefix_cache_hits,
                          out["b/0"].tokens);
  };
  EngineCore cold = make(cfg);
  cold.add_request("b", prompt, greedy(4));
  const auto want = run_all(cold)["b/0"].tokens;
  const auto [hits_cancelled, tokens_cancelled] = second_run(true);
  EXPECT_EQ(hits_cancelled, 0);
  EXPECT_EQ(tokens_cancelled, want);
  const auto [hits_ran, tokens_ran] = second_run(false);
  EXPECT_GT(hits_ran, 0) << "control: a step that ran leaves its blocks cached";
  EXPECT_EQ(tokens_ran, want);

  EngineCore core = make(cfg);
  core.add_request("a", prompt, greedy(2));
  core.add_request("c", prompt, greedy(2));
  int tokens = 0;
  for (const auto& o : core.step(leaving_a)) tokens += static_cast<int>(o.new_token_ids.size());
  EXPECT_EQ(tokens, 2) << "c stays, so the step runs for both";
}

TEST_F(TinyEngine, AbortFreesBlocksAtAnyPoint) {
  EngineConfig cfg;
  cfg.max_num_seqs = 2;  // so some requests are still waiting
  EngineCore core = make(cfg);
  auto prompts = random_prompts(6, 10, 30, 384, 9);
  for (size_t i = 0; i < prompts.size(); ++i) core.add_request(std::to_string(i), prompts[i], greedy(50));
  int aborted = 0;
  for (int step = 0; core.has_unfinished(); ++step) {
    for (const auto& o : core.step())
      if (o.finished) aborted += o.finish_reason == "abort";
    if (step == 3) {
      EXPECT_TRUE(core.abort_request("0"));  // running
      EXPECT_TRUE(core.abort_request("5"));  // waiting
      EXPECT_FALSE(core.abort_request("nope"));
    }
  }
  EXPECT_EQ(aborted, 2);
  EXPECT_EQ(core.stats().kv_cache_usage, 0.0);
}

// An id is free again once its request finished, while the next step still reports the old
// request in finished_req_ids: that report must not drop the new request's runner state.
TEST_F(TinyEngine, ReusesTheIdOfAFinishedRequest) {
  EngineCore core = make({});
  core.add_request("a", {5, 6, 7}, greedy(3));
  auto first = run_all(core);
  core.add_request("a", {5, 6, 7}, greedy(3));
  auto second = run_all(core);
  EXPECT_EQ(second["a/0"].tokens.size(), 3u);
  EXPECT_EQ(first["a/0"].tokens, second["a/0"].tokens);
}

TEST_F(TinyEngine, RejectsBadRequests) {
  EngineConfig cfg;
  cfg.max_model_len = 64;
  EngineCore core = make(cfg);
  EXPECT_THROW(core.add_request("a", {}, greedy(4)), Error);
  EXPECT_THROW(core.add_request("a", std::vector<int32_t>(64, 5), greedy(1)), Error);
  EXPECT_THROW(core.add_request("a", {5, 6}, greedy(63)), Error);  // max_tokens past the limit
  EXPECT_THROW(core.add_request("a", {5, 384}, greedy(4)), Error);  // outside the vocab
  SamplingParams p = greedy(4);
  p.top_p = 0;
  EXPECT_THROW(core.add_request("a", {5}, p), Error);
  core.add_request("a", {5}, greedy(4));
  EXPECT_THROW(core.add_request("a", {5}, greedy(4)), Error);  // duplicate id
  run_all(core);
}

TEST(AsyncEngine, StreamsAndFinishesEveryRequest) {
  LoadedModel m = load_model("fixtures/tiny/llama");
  AsyncEngine engine(std::make_unique<EngineCore>(*m.model, nullptr, EngineConfig{}));
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0, tokens = 0;
  for (int i = 0; i < 16; ++i)
    engine.add_request(std::to_string(i), {3, 4, 5, 6}, greedy(10), [&](const RequestOutput& o) {
      std::lock_guard lock(mu);
      tokens += static_cast<int>(o.new_token_ids.size());
      if (o.finished) {
        ++finished;
        cv.notify_all();
      }
    });
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return finished == 16; }));
  EXPECT_EQ(tokens, 160);
}

// A rank that fails mid-step (issue 20): rank 1 of a mixture-of-experts model split over two
// CPU ranks throws in layer 2's routing (through the routing observer, a test hook), while
// rank 0 goes on to the collective after the experts. The group is aborted, so rank 0 stops
// there instead of waiting for rank 1 forever; the step ends with an error naming rank 1, and
// so does every later step.
namespace {
LoadedModel moe_split_failing_on_rank_1() {
  LoadedModel split = load_model("fixtures/tiny/qwen3_moe", {}, kCpu, 0, 2);
  split.other_ranks.at(0)->set_routing_observer([](int layer, int64_t, float) {
    if (layer == 2) throw Error("injected failure");
  });
  return split;
}
}  // namespace

TEST(TensorParallelEngine, AFailingRankEndsTheStepNamingItNotAHang) {
  const LoadedModel split = moe_split_failing_on_rank_1();
  EngineConfig cfg;
  cfg.max_model_len = 64;
  EngineCore core(split.ranks(), nullptr, cfg);
  core.add_request("a", {3, 4, 5, 6}, greedy(4));
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      core.step();
      ADD_FAILURE() << "the step should have failed (attempt " << attempt << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tensor-parallel rank 1 failed: injected failure"),
                std::string::npos) << e.what();
    }
  }
}

// The engine thread's side: the failed step ends every request with an error output marked
// as the engine's (the server answers 500 and shuts down), and later requests are refused.
TEST(AsyncEngine, AFailedStepEndsEveryRequestWithAnError) {
  const LoadedModel split = moe_split_failing_on_rank_1();
  EngineConfig cfg;
  cfg.max_model_len = 64;
  AsyncEngine engine(std::make_unique<EngineCore>(split.ranks(), nullptr, cfg));
  std::mutex mu;
  std::condition_variable cv;
  std::vector<RequestOutput> finals;
  for (int i = 0; i < 3; ++i) {
    SamplingParams p = greedy(8);
    p.n = i == 2 ? 2 : 1;
    engine.add_request(std::to_string(i), {3, 4, 5, 6}, p, [&](const RequestOutput& o) {
      std::lock_guard lock(mu);
      if (o.finished) finals.push_back(o);
      cv.notify_all();
    });
  }
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return finals.size() == 4; }))
      << finals.size() << " of 4 completions finished";
  for (const RequestOutput& o : finals) {
    EXPECT_EQ(o.finish_reason, "error") << o.request_id;
    EXPECT_TRUE(o.engine_failed) << o.request_id;
    EXPECT_NE(o.error.find("tensor-parallel rank 1 failed"), std::string::npos) << o.error;
  }
  lock.unlock();
  EXPECT_NE(engine.failure().find("injected failure"), std::string::npos) << engine.failure();
  EXPECT_THROW(engine.add_request("late", {3, 4}, greedy(2), [](const RequestOutput&) {}),
               EngineFailed);
}

// prompt_logprobs are log_softmax of the model's logits at each prompt position, evaluated at
// the next prompt token; checked against a direct forward of the whole prompt.
TEST_F(TinyEngine, PromptLogprobsMatchDirectForward) {
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 250, 8, 41};
  SamplingParams p = greedy(1);
  p.prompt_logprobs = 2;
  EngineConfig cfg;
  cfg.max_num_batched_tokens = 3;  // the prompt arrives in chunks
  cfg.max_model_len = 64;
  EngineCore core = make(cfg);
  core.add_request("a", prompt, p);
  std::vector<std::optional<StepLogprobs>> got;
  while (core.has_unfinished())
    for (const auto& o : core.step())
      if (!o.prompt_logprobs.empty()) got = o.prompt_logprobs;
  ASSERT_EQ(got.size(), prompt.size());
  EXPECT_FALSE(got[0].has_value());

  const int n = static_cast<int>(prompt.size()), vocab = m_.config().vocab_size;
  const Tensor logits = m_.model->score(prompt);
  for (int i = 1; i < n; ++i) {
    std::span<const float> row(logits.data<float>() + (i - 1) * vocab, vocab);
    const TokenLogprob want = logprob_of(row, prompt[i]);
    ASSERT_TRUE(got[i].has_value());
    EXPECT_EQ(got[i]->chosen.token, prompt[i]);
    EXPECT_NEAR(got[i]->chosen.logprob, want.logprob, 1e-4) << i;
    EXPECT_EQ(got[i]->chosen.rank, want.rank);
    EXPECT_EQ(got[i]->top.size(), 2u);
  }
}

// Stop strings on real text: the stream never shows the stop string, deltas add up to the
// final text, and the request ends with finish_reason "stop" and the string as stop_reason.
TEST(EngineCoreText, StopStringsStreamCleanly) {
  if (!std::filesystem::exists(kSmol)) GTEST_SKIP() << kSmol << " absent";
  LoadedModel m = load_model(kSmol);
  EngineCore core(*m.model, m.tokenizer.get(), EngineConfig{});
  SamplingParams p = greedy(64);
  p.ignore_eos = false;
  p.stop = {"Paris"};
  core.add_request("a", m.tokenizer->encode("The capital of France is", true), p);
  std::string text;
  std::string reason, stop;
  std::vector<int32_t> ids;
  while (core.has_unfinished())
    for (const auto& o : core.step()) {
      text += o.text_delta;
      ids.insert(ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      EXPECT_EQ(text.find("Paris"), std::string::npos);
      if (o.finished) {
        reason = o.finish_reason;
        stop = o.stop_reason.value_or("");
      }
    }
  EXPECT_EQ(reason, "stop");
  EXPECT_EQ(stop, "Paris");
  EXPECT_EQ(text, " ");  // greedy continuation is " Paris."; the stop string is cut
  EXPECT_EQ(m.tokenizer->decode(ids, true), " Paris");
}

namespace {
const std::vector<int32_t> kWindowPrompt = {5, 9, 200, 31, 77, 12, 140, 3, 66, 90, 18, 250};

// The single-sequence driver's greedy continuation (it keeps every block): the reference for
// an engine that releases blocks behind windows.
std::vector<int32_t> full_cache_greedy(const DecoderModel& model, int n) {
  Generator gen(model, 256);
  GenerateOptions opts;
  opts.max_tokens = n;
  opts.ignore_eos = true;
  return gen.generate(kWindowPrompt, opts);
}

EngineConfig four_token_blocks() {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 128;
  return cfg;
}
}  // namespace

// Mistral (every layer windowed, window 8): the engine releases blocks behind the window and
// still produces the tokens of the full-cache single-sequence driver.
TEST(SlidingWindowEngine, ReleasesBlocksAndMatchesFullCache) {
  LoadedModel m = load_model("fixtures/tiny/mistral");
  ASSERT_EQ(m.config().layers.at(0).sliding_window, 8);
  const EngineConfig cfg = four_token_blocks();
  EngineCore core(*m.model, nullptr, cfg);
  core.add_request("a", kWindowPrompt, greedy(100));
  std::vector<int32_t> got;
  double peak_usage = 0;
  while (core.has_unfinished()) {
    for (const auto& o : core.step()) got.insert(got.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    peak_usage = std::max(peak_usage, core.stats().kv_cache_usage);
  }
  EXPECT_EQ(got, full_cache_greedy(*m.model, 100));
  // 112 tokens in blocks of 4 would hold 28 blocks with full attention; the window keeps ~4.
  const int usable = core.kv_capacity().num_tokens / cfg.block_size;
  EXPECT_LE(peak_usage * usable, 6.0) << "blocks behind the window were not released";
  EXPECT_EQ(core.stats().kv_cache_usage, 0.0);
}

// A hybrid model (window 8) decoding kWindowPrompt for 100 tokens on 4-token blocks: the
// windowed groups hold at most window / block_size + 1 blocks per sequence however long it
// grows, the global group holds them all, the tokens are the full-cache driver's, and every
// block comes back.
namespace {
void expect_windowed_groups_hold_only_the_window(const DecoderModel& model) {
  const auto& groups = model.kv_cache_groups();
  const EngineConfig cfg = four_token_blocks();
  EngineCore core(model, nullptr, cfg);
  core.add_request("a", kWindowPrompt, greedy(100));
  std::vector<int32_t> got;
  int most_windowed = 0, most_global = 0;
  while (core.has_unfinished()) {
    for (const auto& o : core.step()) got.insert(got.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    const auto tables = core.kv_cache_manager().get_block_ids("a");
    for (size_t g = 0; g < tables.size(); ++g) {
      const int live = static_cast<int>(std::count_if(
          tables[g].begin(), tables[g].end(), [](int id) { return id != core::kNullBlockId; }));
      int& most = groups[g].sliding_window ? most_windowed : most_global;
      most = std::max(most, live);
    }
  }
  EXPECT_EQ(got, full_cache_greedy(model, 100));
  EXPECT_LE(most_windowed, 8 / cfg.block_size + 1);
  EXPECT_EQ(most_global, 28);  // 112 tokens in blocks of 4
  EXPECT_EQ(core.stats().kv_cache_usage, 0.0);
}
}  // namespace

// Gemma-3 (sliding, global, sliding; window 8): one KV cache group per layer kind.
TEST(HybridEngine, WindowedGroupsHoldOnlyTheWindow) {
  LoadedModel m = load_model("fixtures/tiny/gemma3");
  const auto& groups = m.model->kv_cache_groups();
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].sliding_window, 0);
  EXPECT_EQ(groups[0].layers, std::vector<int>{1});
  EXPECT_EQ(groups[1].sliding_window, 8);
  expect_windowed_groups_hold_only_the_window(*m.model);
}

// MLA with sliding-window layers (full, sliding, sliding; window 8; rows padded to 48 lanes):
// the same, and a token costs one 48-lane latent row per layer instead of per-head K and V.
TEST(HybridEngine, WindowedMlaGroupsHoldOnlyTheWindow) {
  LoadedModel m = load_model(testing_mla::windowed_mla_model(
      "engine", {"full_attention", "sliding_attention", "sliding_attention"}, 8, 48));
  ASSERT_EQ(m.model->kv_cache_groups().size(), 3u);
  EXPECT_EQ(m.model->kv_bytes_per_layer_token(), 48 * 4);  // f32 latent row, no V
  expect_windowed_groups_hold_only_the_window(*m.model);
}

// Prefix caching across the groups of a hybrid model: a second request with the same long
// prefix hits in every group (the windowed ones need only the window before the hit point)
// and still gives the tokens of a run without the cache.
TEST(HybridEngine, PrefixCacheHitsAcrossGroups) {
  LoadedModel m = load_model("fixtures/tiny/gemma3");
  std::vector<int32_t> prefix;
  for (int i = 0; i < 40; ++i) prefix.push_back(3 + (i * 37) % 380);
  std::vector<int32_t> second = prefix;
  second.insert(second.end(), {7, 8, 9});
  const EngineConfig cfg = four_token_blocks();
  std::vector<int32_t> want;
  {
    EngineConfig no_cache = cfg;
    no_cache.enable_prefix_caching = false;
    EngineCore ref(*m.model, nullptr, no_cache);
    ref.add_request("b", second, greedy(20));
    want = run_all(ref)["b/0"].tokens;
  }
  EngineCore core(*m.model, nullptr, cfg);
  core.add_request("a", prefix, greedy(4));
  run_all(core);
  const int64_t hits_before = core.stats().prefix_cache_hits;
  core.add_request("b", second, greedy(20));
  EXPECT_EQ(run_all(core)["b/0"].tokens, want);
  EXPECT_GE(core.stats().prefix_cache_hits - hits_before, 40);  // the prefix's 10 blocks
}

// `fixture` (an f32 tiny checkpoint: f32 weights and KV, so CPU and GPU agree to ~1e-6) on
// CUDA, with decode graphs and eager, gives the CPU's greedy tokens for `prompts` under the
// memory pressure of a cache of `kv_tokens` tokens per group: chunked prefill, preemption,
// padded graph replays.
namespace {
void expect_cuda_matches_cpu(const std::string& fixture,
                             const std::vector<std::vector<int32_t>>& prompts, int kv_tokens,
                             int max_num_batched_tokens) {
  LoadedModel cpu = load_model(fixture);
  SamplingParams p = greedy(40);
  EngineConfig cfg;
  cfg.max_model_len = 128;
  cfg.block_size = 4;
  cfg.max_num_batched_tokens = max_num_batched_tokens;
  cfg.kv_cache_memory = kv_tokens * cpu.model->kv_bytes_per_token();
  EngineCore ref(*cpu.model, nullptr, cfg);
  for (size_t i = 0; i < prompts.size(); ++i) ref.add_request(std::to_string(i), prompts[i], p);
  const auto want = run_all(ref);
  for (bool eager : {false, true}) {
    LoadedModel gpu = load_model(fixture, {}, Device{DeviceKind::Cuda, 0});
    gpu.model->set_enforce_eager(eager);
    EngineCore core(*gpu.model, nullptr, cfg);
    for (size_t i = 0; i < prompts.size(); ++i) core.add_request(std::to_string(i), prompts[i], p);
    const auto got = run_all(core);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [id, d] : want) EXPECT_EQ(got.at(id).tokens, d.tokens) << id << " eager=" << eager;
    EXPECT_GT(core.stats().num_preemptions, 0) << "the tight cache should have preempted";
    EXPECT_EQ(core.stats().kv_cache_usage, 0.0);
  }
}
}  // namespace

// Llama: 13 concurrent requests of mixed lengths (13 decode rows run as a graph of 16), the
// GPU argmax, and the eager path for comparison.
TEST(CudaEngine, GreedyMatchesCpuWithGraphsAndPressure) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  expect_cuda_matches_cpu("fixtures/tiny/llama", random_prompts(13, 3, 70, 384, 21), 300, 64);
}

// Gemma-3: three KV cache groups (one global, two windowed) through the per-group block
// tables of the eager path and of the padded decode graphs.
TEST(CudaEngine, HybridGroupsMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  expect_cuda_matches_cpu("fixtures/tiny/gemma3", random_prompts(9, 3, 60, 384, 5), 400, 48);
}

// Tensor parallel on CUDA (issue 20): one GPU a rank over NCCL, through the executor with decode
// graphs (each rank captures its own, NCCL's kernels inside) and eager; 14 concurrent greedy
// requests under a tight cache give the CPU's tokens (f32 weights and KV), every KV block
// comes back, and with --gpu-memory-utilization every rank runs the profile at once. On one
// GPU both ranks share it (set_cuda_backends_per_gpu), meeting through the host, eager only.
TEST(CudaTensorParallelEngine, GreedyMatchesCpuWithGraphsAndPressure) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  set_cuda_backends_per_gpu(cuda_device_count() >= 2 ? 1 : 2);
  struct Restore {
    ~Restore() { set_cuda_backends_per_gpu(1); }
  } restore;
  for (const std::string fixture : {"fixtures/tiny/qwen3", "fixtures/tiny/qwen3_moe"}) {
    const auto prompts = random_prompts(14, 3, 70, 384, 9);
    LoadedModel cpu = load_model(fixture);
    EngineConfig cfg;
    cfg.max_model_len = 128;
    cfg.block_size = 4;
    cfg.max_num_batched_tokens = 64;
    cfg.kv_cache_memory = 300 * cpu.model->kv_bytes_per_token();
    EngineCore ref(*cpu.model, nullptr, cfg);
    for (size_t i = 0; i < prompts.size(); ++i)
      ref.add_request(std::to_string(i), prompts[i], greedy(40));
    const auto want = run_all(ref);
    for (bool eager : {false, true}) {
      LoadedModel split = load_model(fixture, {}, Device{DeviceKind::Cuda, 0}, 0, 2);
      split.set_enforce_eager(eager);
      EngineConfig c = cfg;
      c.kv_cache_memory = 300 * split.model->kv_bytes_per_token();  // per rank
      EngineCore core(split.ranks(), nullptr, c);
      for (size_t i = 0; i < prompts.size(); ++i)
        core.add_request(std::to_string(i), prompts[i], greedy(40));
      const auto got = run_all(core);
      ASSERT_EQ(got.size(), want.size());
      for (const auto& [id, d] : want)
        EXPECT_EQ(got.at(id).tokens, d.tokens) << fixture << " " << id << " eager=" << eager;
      EXPECT_GT(core.stats().num_preemptions, 0) << "the tight cache should have preempted";
      EXPECT_EQ(core.stats().kv_cache_usage, 0.0);
    }
    LoadedModel split = load_model(fixture, {}, Device{DeviceKind::Cuda, 0}, 0, 2);
    EngineConfig profiled = cfg;
    profiled.gpu_memory_utilization = 0.3;
    EngineCore core(split.ranks(), nullptr, profiled);
    EXPECT_NE(core.memory_summary().find("tightest rank"), std::string::npos)
        << core.memory_summary();
    for (size_t i = 0; i < 4; ++i) core.add_request(std::to_string(i), prompts[i], greedy(40));
    const auto got = run_all(core);
    for (size_t i = 0; i < 4; ++i)
      EXPECT_EQ(got.at(std::to_string(i) + "/0").tokens, want.at(std::to_string(i) + "/0").tokens)
          << fixture << " profiled, request " << i;
  }
}

// The GPU budget from a profile run, as vLLM's: dummy steps measure the activations at the
// token budget and the decode graphs' arena; a bigger token budget measures more; and real
// steps at the budget and at several graph buckets then fit in what was measured (a step
// arena overrun throws).
TEST(CudaEngine, ProfiledMemoryHoldsTheSteps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  LoadedModel gpu = load_model("fixtures/tiny/llama", {}, Device{DeviceKind::Cuda, 0});
  const DecoderModel::StepMemory small = gpu.model->profile_step_memory(64, 8, 128, 4);
  const DecoderModel::StepMemory big = gpu.model->profile_step_memory(1024, 8, 128, 4);
  EXPECT_GT(small.activation_bytes, 0);
  EXPECT_GT(small.graph_arena_bytes, 0);
  EXPECT_GT(big.activation_bytes, small.activation_bytes);
  EXPECT_EQ(big.graph_arena_bytes, small.graph_arena_bytes);  // decode steps: same buckets
  const DeviceInfo info = cuda_device_info(0);
  EngineConfig cfg;
  cfg.max_model_len = 128;
  cfg.block_size = 4;
  cfg.max_num_batched_tokens = 256;
  // About 1 GiB above what is in use now, so the KV cache stays small.
  cfg.gpu_memory_utilization =
      double(info.total_bytes - info.free_bytes + (int64_t(1) << 30)) / double(info.total_bytes);
  EngineCore core(*gpu.model, nullptr, cfg);
  EXPECT_NE(core.memory_summary().find("measured"), std::string::npos) << core.memory_summary();
  EXPECT_GT(core.config().kv_cache_memory, 0);
  EXPECT_LT(core.config().kv_cache_memory, int64_t(1) << 30);
  const auto prompts = random_prompts(40, 20, 90, 384, 9);
  for (size_t i = 0; i < prompts.size(); ++i)
    core.add_request(std::to_string(i), prompts[i], greedy(12));
  const auto got = run_all(core);
  ASSERT_EQ(got.size(), prompts.size());
  for (const auto& [id, d] : got) EXPECT_EQ(d.tokens.size(), 12u) << id;
}

// Sampling on the GPU (runtime/ops.h sample_rows): a seeded request with temperature, top-k
// and top-p draws the same tokens alone and in a batch beside greedy requests, other sampled
// requests and one whose logprobs send its row to the host sampler; and it does sample (its
// tokens are not the greedy ones).
TEST(CudaEngine, SeededSamplingSameAloneOrBatched) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  LoadedModel gpu = load_model("fixtures/tiny/llama", {}, Device{DeviceKind::Cuda, 0});
  auto prompts = random_prompts(8, 3, 40, 384, 33);
  SamplingParams sampled = greedy(24);
  sampled.temperature = 0.8f;
  sampled.top_k = 20;
  sampled.top_p = 0.9f;
  sampled.seed = 7;
  EngineConfig cfg;
  cfg.max_model_len = 128;
  cfg.block_size = 4;
  cfg.kv_cache_memory = 2000 * gpu.model->kv_bytes_per_token();
  const auto run = [&](const std::vector<std::pair<std::vector<int32_t>, SamplingParams>>& reqs) {
    EngineCore core(*gpu.model, nullptr, cfg);
    for (size_t i = 0; i < reqs.size(); ++i) core.add_request(std::to_string(i), reqs[i].first, reqs[i].second);
    return run_all(core);
  };
  const auto alone = run({{prompts[0], sampled}});
  std::vector<std::pair<std::vector<int32_t>, SamplingParams>> batch = {{prompts[0], sampled}};
  for (size_t i = 1; i < prompts.size(); ++i) {
    SamplingParams p = i % 3 == 0 ? greedy(24) : sampled;
    p.seed = 100 + i;
    if (i == 4) p.logprobs = 2;  // the host sampler's path
    batch.emplace_back(prompts[i], p);
  }
  const auto together = run(batch);
  EXPECT_EQ(together.at("0/0").tokens, alone.at("0/0").tokens);
  EXPECT_EQ(together.at("0/0").tokens.size(), 24u);
  const auto greedy_run = run({{prompts[0], greedy(24)}});
  EXPECT_NE(greedy_run.at("0/0").tokens, alone.at("0/0").tokens) << "temperature 0.8 gave the greedy tokens";
}

// Tensor parallel through the executor (ranks as threads): 24 concurrent greedy requests, with
// preemption under a tight cache, give transformers' greedy tokens where the fixture has them
// and otherwise TP=1's tokens, with every KV block back at the end.
TEST(TensorParallelEngine, GreedyTokensOfOneRankUnderPressure) {
  const std::string dir = "fixtures/tiny/qwen3";
  const LoadedModel one = load_model(dir), split = load_model(dir, {}, kCpu, 0, 2);
  const nlohmann::json ref = nlohmann::json::parse(std::ifstream(dir + "/reference.json"));
  auto prompts = random_prompts(24, 5, 40, 384, 5);
  std::vector<std::vector<int32_t>> greedy_ref;
  for (const auto& p : ref["prompts"]) {
    prompts.push_back(p["prompt_ids"].get<std::vector<int32_t>>());
    greedy_ref.push_back(p["greedy_ids"].get<std::vector<int32_t>>());
  }
  EngineConfig roomy;
  roomy.max_model_len = 128;
  EngineConfig tight = roomy;
  tight.block_size = 4;
  tight.kv_cache_memory = 160 * split.model->kv_bytes_per_token();  // per rank
  EngineCore a(*one.model, nullptr, roomy), b(split.ranks(), nullptr, tight);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int n = i < 24 ? 20 : static_cast<int>(greedy_ref[i - 24].size());
    a.add_request(std::to_string(i), prompts[i], greedy(n));
    b.add_request(std::to_string(i), prompts[i], greedy(n));
  }
  auto ra = run_all(a), rb = run_all(b);
  ASSERT_EQ(rb.size(), prompts.size());
  for (const auto& [id, d] : ra) EXPECT_EQ(d.tokens, rb[id].tokens) << id;
  for (size_t k = 0; k < greedy_ref.size(); ++k)
    EXPECT_EQ(rb[std::to_string(24 + k) + "/0"].tokens, greedy_ref[k]) << "reference prompt " << k;
  EXPECT_GT(b.stats().num_preemptions, 0) << "the tight cache should have preempted";
  EXPECT_EQ(b.stats().kv_cache_usage, 0.0);
}
