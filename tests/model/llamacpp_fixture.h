// Shared by the llama.cpp comparison tests: a GGUF model's free-running greedy continuations
// against a fixture of tools/make_llamacpp_fixtures.py.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/generator.h"
#include "runtime/ops.h"

namespace vllm::llamacpp_check {

// llama.cpp's own CPU summation order (runtime/ops.h CpuOrder) for the scope of a test.
struct LlamaCppOrder {
  LlamaCppOrder() { set_cpu_order(CpuOrder::kLlamaCpp); }
  ~LlamaCppOrder() { set_cpu_order(CpuOrder::kBatchInvariant); }
};

// The bar: our own greedy continuations (llama.cpp's schedule: the prompt in one
// step, then one token per step) equal llama.cpp's; a first mismatch where llama.cpp's top-2
// gap is below near_tie nat counts as a near tie and ends that case. Returns the identical
// cases.
inline int expect_free_running_matches(const DecoderModel& model, const nlohmann::json& ref,
                                       double near_tie = 0.05) {
  Generator gen(model, 512);
  int exact = 0, near_ties = 0;
  for (const auto& c : ref["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = c["greedy_ids"].get<std::vector<int32_t>>();
    const auto gaps = c["top2_gap"].get<std::vector<double>>();
    GenerateOptions opts;
    opts.max_tokens = static_cast<int>(want.size());
    opts.ignore_eos = true;
    const auto got = gen.generate(prompt, opts);
    size_t i = 0;
    while (i < want.size() && i < got.size() && got[i] == want[i]) ++i;
    if (i == want.size()) {
      ++exact;
    } else if (gaps[i] < near_tie) {
      ++near_ties;
      std::printf("near tie: %s diverges at step %zu (llama.cpp top-2 gap %.4f)\n",
                  c["prompt"].dump().c_str(), i, gaps[i]);
    } else {
      ADD_FAILURE() << c["prompt"].dump() << " diverges at step " << i << " (llama.cpp top-2 gap "
                    << gaps[i] << ")";
    }
  }
  std::printf("free-running vs llama.cpp: %d of %zu identical, %d near ties\n", exact,
              ref["cases"].size(), near_ties);
  return exact;
}

// At every step of llama.cpp's schedule where our continuation still equals llama.cpp's, our
// logits of llama.cpp's top tokens equal its own to the last bit, and no other token of ours
// reaches its last top logit. Returns the steps compared.
inline int expect_step_logits_equal(const DecoderModel& model, const nlohmann::json& ref) {
  Generator gen(model, 512);
  gen.keep_logits = true;
  int steps = 0;
  for (const auto& c : ref["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = c["greedy_ids"].get<std::vector<int32_t>>();
    const auto top_ids = c["top_ids"].get<std::vector<std::vector<int32_t>>>();
    const auto top_logits = c["top_logits"].get<std::vector<std::vector<double>>>();
    GenerateOptions opts;
    opts.max_tokens = static_cast<int>(want.size());
    opts.ignore_eos = true;
    const auto got = gen.generate(prompt, opts);
    EXPECT_EQ(gen.step_logits.size(), want.size());
    for (size_t s = 0; s < want.size() && s < got.size() && got[s] == want[s]; ++s) {
      const std::vector<float>& row = gen.step_logits[s];
      for (size_t k = 0; k < top_ids[s].size(); ++k) {
        const float ours = row[static_cast<size_t>(top_ids[s][k])];
        EXPECT_EQ(ours, static_cast<float>(top_logits[s][k]))
            << c["prompt"].dump() << " step " << s << " token " << top_ids[s][k];
      }
      const float fifth = static_cast<float>(top_logits[s].back());
      EXPECT_EQ(std::count_if(row.begin(), row.end(), [&](float v) { return v >= fifth; }),
                static_cast<std::ptrdiff_t>(top_ids[s].size()))
          << c["prompt"].dump() << " step " << s;
      ++steps;
    }
  }
  return steps;
}

}  // namespace vllm::llamacpp_check
