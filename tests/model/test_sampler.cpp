// Sampler semantics on hand-made logits: each control changes exactly what it should.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "model/sampler.h"

using namespace vllm;

namespace {

std::vector<float> logits() { return {1.0f, 3.0f, 2.5f, -1.0f, 0.5f, 2.9f}; }

SampleResult once(SamplingParams p, std::vector<float> l = logits(), std::vector<int32_t> prompt = {},
                  std::vector<int32_t> eos = {}) {
  SamplerState st(p, prompt, 1);
  return sample(l, p, st, eos);
}

// One draw from `l` (a copy: the sampler uses its row as scratch).
SampleResult draw(const SamplingParams& p, SamplerState& st, std::vector<float> l = logits(),
                  const std::vector<int32_t>& eos = {}) {
  return sample(l, p, st, eos);
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

}  // namespace

TEST(Sampler, GreedyAndTopKOne) {
  EXPECT_EQ(once(greedy()).token, 1);
  SamplingParams p;
  p.top_k = 1;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(once(p).token, 1);
}

TEST(Sampler, AllowedIdsMaskRandomSamplingAndKeepTheHostPath) {
  // vLLM masks every other id before sampling: the two least likely ids are all that can come,
  // with top-k, top-p, min-p and penalties too, in proportion to their own probabilities.
  SamplingParams p;
  p.allowed_token_ids = {0, 3};
  EXPECT_FALSE(p.plain());  // the GPU's plain sampler would not see the mask
  std::map<int32_t, int> seen;
  SamplerState st(p, std::vector<int32_t>{}, 7);
  for (int i = 0; i < 400; ++i) ++seen[draw(p, st).token];
  ASSERT_EQ(seen.size(), 2u);
  // exp(1) / (exp(1) + exp(-1)) = 0.88 of the draws are id 0.
  EXPECT_NEAR(seen[0] / 400.0, 0.881, 0.05);
  p.top_k = 1;
  p.top_p = 0.5f;
  p.min_p = 0.2f;
  p.presence_penalty = 1.0f;
  SamplerState st2(p, std::vector<int32_t>{}, 7);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(draw(p, st2).token, 0);
  p = greedy();
  p.allowed_token_ids = {4};
  p.logit_bias = {{1, 100.0f}};  // a bias cannot bring back a masked id
  EXPECT_EQ(once(p).token, 4);
}

TEST(Sampler, AllowedIdsBiasAndBadWords) {
  SamplingParams p = greedy();
  p.allowed_token_ids = {3, 4};
  EXPECT_EQ(once(p).token, 4);
  p = greedy();
  p.logit_bias = {{3, 10.0f}};
  EXPECT_EQ(once(p).token, 3);
  p = greedy();
  p.bad_words_ids = {{1}};
  EXPECT_EQ(once(p).token, 5);
  // A two-token bad word only bites after its first token.
  p.bad_words_ids = {{4, 5}};
  SamplerState st(p, std::vector<int32_t>{}, 1);
  std::vector<float> l = logits();
  l[1] = -5;  // make 5 the greedy choice
  EXPECT_EQ(draw(p, st, l).token, 5);  // no prefix yet
  st.append(4);
  EXPECT_EQ(draw(p, st, l).token, 2);
}

TEST(Sampler, MinTokensMasksEosAndStopIds) {
  SamplingParams p = greedy();
  p.min_tokens = 2;
  p.stop_token_ids = {5};
  const std::vector<int32_t> eos = {1};
  SamplerState st(p, std::vector<int32_t>{}, 1);
  EXPECT_EQ(draw(p, st, logits(), eos).token, 2);  // 1 (eos) and 5 (stop) masked
  EXPECT_EQ(draw(p, st, logits(), eos).token, 2);
  EXPECT_EQ(draw(p, st, logits(), eos).token, 1);  // two outputs exist now
}

TEST(Sampler, Penalties) {
  SamplingParams p = greedy();
  p.repetition_penalty = 2.0f;  // token 1 (in the prompt): 3.0 -> 1.5
  EXPECT_EQ(once(p, logits(), {1}).token, 5);
  p = greedy();
  p.presence_penalty = 0.05f;
  p.frequency_penalty = 0.1f;
  SamplerState st(p, std::vector<int32_t>{}, 1);
  st.append(1);  // 3.0 - 0.1 - 0.05 = 2.85 < 2.9
  EXPECT_EQ(draw(p, st).token, 5);
}

TEST(Sampler, SeededSamplingIsReproducibleAndFollowsTheDistribution) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  auto run = [&](int n) {
    SamplerState st(p, std::vector<int32_t>{}, 0);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(draw(p, st).token);
    return out;
  };
  const auto a = run(4000), b = run(4000);
  EXPECT_EQ(a, b);
  std::map<int32_t, int> counts;
  for (int32_t t : a) counts[t]++;
  const auto l = logits();
  double z = 0;
  for (float v : l) z += std::exp(v);
  for (int t = 0; t < 6; ++t)
    EXPECT_NEAR(counts[t] / 4000.0, std::exp(l[t]) / z, 0.03) << t;
}

TEST(Sampler, TopPAndMinPTruncate) {
  SamplingParams p;
  p.top_p = 0.5f;  // softmax: token 1 ~0.33, 5 ~0.30: the nucleus is {1, 5}
  p.seed = 3;
  SamplerState st(p, std::vector<int32_t>{}, 0);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = draw(p, st).token;
    EXPECT_TRUE(t == 1 || t == 5) << t;
  }
  SamplingParams q;
  q.min_p = 0.5f;  // keeps tokens with p >= 0.5 * p(top): 1, 5, 2
  q.seed = 4;
  SamplerState s2(q, std::vector<int32_t>{}, 0);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = draw(q, s2).token;
    EXPECT_TRUE(t == 1 || t == 5 || t == 2) << t;
  }
}

TEST(Sampler, LogprobsAreOfTheRawDistribution) {
  SamplingParams p = greedy();
  p.logprobs = 3;
  p.logit_bias = {{3, 10.0f}};  // changes the choice, not the reported distribution
  const SampleResult r = once(p);
  ASSERT_TRUE(r.chosen);
  EXPECT_EQ(r.token, 3);
  const auto l = logits();
  double z = 0;
  for (float v : l) z += std::exp(v);
  EXPECT_NEAR(r.chosen->logprob, l[3] - std::log(z), 1e-5);
  EXPECT_EQ(r.chosen->rank, 6);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 5);
  EXPECT_EQ(r.top[2].token, 2);
  EXPECT_NEAR(r.top[0].logprob, l[1] - std::log(z), 1e-5);
}
