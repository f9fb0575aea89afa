// Token sampling from one row of logits with vLLM's SamplingParams: allowed ids, logit bias,
// bad words, min_tokens, repetition/presence/frequency penalties, then greedy or temperature
// with top-k / top-p / min-p under the request's own seeded generator (so a request samples
// the same tokens alone or in any batch). Logprobs are of the raw model distribution.
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/sampling_params.h"

namespace vllm {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  int rank = 0;  // 1 = most likely
};

struct SampleResult {
  int32_t token = 0;
  std::optional<TokenLogprob> chosen;  // with logprobs
  std::vector<TokenLogprob> top;       // the top `logprobs` tokens
};

// What the sampler needs to remember about one sequence between steps.
class SamplerState {
 public:
  SamplerState(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t seed);
  void append(int32_t token);  // a token generated (or forced) for this sequence
  // The draw a non-greedy sample makes, for a sampler elsewhere (runtime/ops.h sample_rows):
  // uniform in [0, 1) from this sequence's generator.
  double draw_uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
  const std::vector<int32_t>& output() const { return output_; }

 private:
  friend SampleResult sample(std::span<float>, const SamplingParams&, SamplerState&,
                             std::span<const int32_t>, std::span<const uint32_t>);
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int> output_counts_;
  std::vector<int32_t> prompt_;  // sorted, unique (repetition penalty)
  std::vector<int32_t> output_;
};

// Samples one token; `logits` (one row, vocab wide) is used as scratch and modified.
// eos_ids are masked until min_tokens outputs exist. allowed_mask (bit t of word t / 32: token
// t may follow; empty: no mask) is a grammar's, applied after every other edit so that nothing
// re-enables a token; if it leaves no finite logit, its first allowed token is taken.
SampleResult sample(std::span<float> logits, const SamplingParams& params, SamplerState& state,
                    std::span<const int32_t> eos_ids,
                    std::span<const uint32_t> allowed_mask = {});

// The index of the largest logit (the lowest index among equals).
int32_t argmax(std::span<const float> logits);
// log_softmax of `logits` at the given tokens, plus the top-k; used for prompt logprobs too.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int k);
TokenLogprob logprob_of(std::span<const float> logits, int32_t token);

}  // namespace vllm
