// Shared by the llama.cpp comparison tests: a GGUF model's free-running greedy continuations
// against a fixture of tools/make_llamacpp_fixtures.py.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/generator.h"

namespace vllm::llamacpp_check {

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

}  // namespace vllm::llamacpp_check
