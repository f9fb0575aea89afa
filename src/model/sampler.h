// Token sampling from one row of logits: greedy, or temperature with top-k / top-p / min-p
// under a per-request seeded generator.
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <span>

namespace vllm {

struct SamplingOptions {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;
  float min_p = 0.0f;
  std::optional<uint64_t> seed;
};

// The index of the largest logit (the lowest index among equals).
int32_t argmax(std::span<const float> logits);
int32_t sample_token(std::span<const float> logits, const SamplingOptions& opts,
                     std::mt19937_64& rng);

}  // namespace vllm
