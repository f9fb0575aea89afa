// Gemma-3-270M Q4_K_M against llama.cpp (fixtures/gemma3/llamacpp_greedy.json, made by
// tools/make_llamacpp_fixtures.py with llama.cpp's defaults: f16 K/V cache, no flash attention,
// 2 threads) under llama.cpp's own schedule: the prompt in one step, then one token per step.
// The model mixes five sliding-window layers (512 tokens) with one global layer, each kind with
// its own RoPE base, and its weights are Q5_0, Q8_0, Q4_K and Q6_K.
//
// As for SmolLM2, our CPU path reproduces llama.cpp's arithmetic: K-quant matmuls quantise the
// activations to Q8_K and follow the float order of the kernel llama.cpp picks for the call
// (runtime/cpu/kquant.h), GELU goes through f16 as ggml's table, q is scaled before attention
// as llama.cpp's Gemma-3 graph does, and the last layer's MLP sees only the rows that give
// logits. So the logits equal llama.cpp's to the last bit, in llama.cpp's shape-dependent
// order (CpuOrder::kLlamaCpp), which these tests set.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "llamacpp_fixture.h"
#include "model/load.h"
#include "runtime/cpu/isa.h"

using namespace vllm;

namespace {

const char* kGemma = "models/gemma-3-270m-q4_k_m.gguf";

nlohmann::json gemma_ref() {
  return nlohmann::json::parse(std::ifstream("fixtures/gemma3/llamacpp_greedy.json"));
}

}  // namespace

// At every step our 5 largest logits are llama.cpp's: same ids, same float bits.
TEST(Gemma3, StepLogitsEqualLlamaCpp) {
  if (!std::filesystem::exists(kGemma)) GTEST_SKIP() << kGemma << " absent (run scripts/test.sh)";
  if (cpu::detected_isa() == cpu::Isa::Scalar)
    GTEST_SKIP() << "scalar CPU build: not llama.cpp's summation order";
  LoadedModel m = load_model(kGemma);
  const nlohmann::json ref = gemma_ref();
  ASSERT_GE(ref["cases"].size(), 8u);
  llamacpp_check::LlamaCppOrder order;
  EXPECT_EQ(llamacpp_check::expect_step_logits_equal(*m.model, ref),
            64 * static_cast<int>(ref["cases"].size()));
}

// The bar: our own greedy continuations equal llama.cpp's (near ties aside).
TEST(Gemma3, FreeRunningGreedyMatchesLlamaCpp) {
  if (!std::filesystem::exists(kGemma)) GTEST_SKIP() << kGemma << " absent (run scripts/test.sh)";
  if (cpu::detected_isa() == cpu::Isa::Scalar)
    GTEST_SKIP() << "scalar CPU build: not llama.cpp's summation order";
  LoadedModel m = load_model(kGemma);
  const nlohmann::json ref = gemma_ref();
  ASSERT_GE(ref["cases"].size(), 8u);
  llamacpp_check::LlamaCppOrder order;
  EXPECT_GE(llamacpp_check::expect_free_running_matches(*m.model, ref), 8);
}

// The chat template's turn end stops generation (the GGUF names only <eos>).
TEST(Gemma3, EndOfTurnIsAStopToken) {
  if (!std::filesystem::exists(kGemma)) GTEST_SKIP() << kGemma << " absent (run scripts/test.sh)";
  LoadedModel m = load_model(kGemma);
  const auto& eos = m.config().eos_token_ids;
  const auto end_of_turn = m.tokenizer->encode("<end_of_turn>", false);
  ASSERT_EQ(end_of_turn.size(), 1u);
  EXPECT_NE(std::find(eos.begin(), eos.end(), end_of_turn[0]), eos.end());
  EXPECT_EQ(m.model->kv_cache_groups().size(), 6u);  // 3 global layers, 15 windowed: groups of 3
}
