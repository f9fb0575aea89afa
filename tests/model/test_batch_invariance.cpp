// A token's logits do not depend on how its step was batched (issue: outputs independent of
// preemption, chunking and batch composition by default). On the two GGUF models, whose CPU
// arithmetic follows ggml's shape-dependent orders (f16 attention products, K-quant kernels),
// the same prompt is run: in one prefill step, in chunks, one token at a time, and beside
// another sequence in the same step; every logit must be bit-identical. The control runs the
// same comparison under llama.cpp's own order (CpuOrder::kLlamaCpp), which does depend on
// the step's shape, and expects a difference: a check that could not fail would pass there too.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "model/generator.h"
#include "model/load.h"
#include "runtime/ops.h"

using namespace vllm;

namespace {

// Token ids inside both vocabularies (SmolLM2's has 49,152 entries).
const std::vector<int32_t> kPrompt = {2, 818, 5279, 529, 7001, 563, 506, 5279, 529, 11, 1944,
                                      9744, 684, 506, 5442, 23676, 17, 29};

// The prompt prefilled in chunks of `chunk` tokens, then 5 greedy decode steps: the logits of
// the last prompt position and of each step (the steps read the chunked prefill's KV).
std::vector<float> chunked(const DecoderModel& model, int chunk) {
  const int vocab = model.config().vocab_size;
  std::vector<float> all;
  Generator gen(model, 256, 16);
  gen.keep_logits = true;
  GenerateOptions opts;
  opts.max_tokens = 6;
  opts.ignore_eos = true;
  opts.prefill_chunk = chunk;
  gen.generate(kPrompt, opts);
  for (const auto& row : gen.step_logits) all.insert(all.end(), row.begin(), row.end());
  EXPECT_EQ(all.size(), size_t(6) * vocab);
  return all;
}

// The last prompt position's logits when the prompt shares its step with another sequence.
std::vector<float> beside_another(const DecoderModel& model) {
  const int bs = 16;
  const int la = static_cast<int>(kPrompt.size());
  const std::vector<int32_t> other = {2, 100, 200, 300, 400, 500, 600, 700, 800};
  const int lb = static_cast<int>(other.size());
  KvCache cache = model.allocate_kv_cache(8, bs);
  ForwardBatch b;
  b.token_ids = other;
  b.token_ids.insert(b.token_ids.end(), kPrompt.begin(), kPrompt.end());
  for (int i = 0; i < lb; ++i) b.positions.push_back(i);
  for (int i = 0; i < la; ++i) b.positions.push_back(i);
  b.logits_indices = {lb + la - 1};
  // Sequence 0 (other) in block 3, sequence 1 (the prompt) in blocks 5 and 6.
  const std::vector<int32_t> table_b = {3, 0}, table_a = {5, 6};
  for (size_t g = 0; g < model.kv_cache_groups().size(); ++g) {
    std::vector<int32_t>& slots = b.slot_mappings.emplace_back();
    for (int i = 0; i < lb; ++i) slots.push_back(table_b[i / bs] * bs + i % bs);
    for (int i = 0; i < la; ++i) slots.push_back(table_a[i / bs] * bs + i % bs);
    AttentionMeta& a = b.attn.emplace_back();
    a.query_start_loc = {0, lb, lb + la};
    a.seq_lens = {lb, la};
    a.max_blocks_per_seq = 2;
    a.block_tables = {table_b[0], table_b[1], table_a[0], table_a[1]};
  }
  const Tensor logits = model.forward(b, cache);
  return {logits.data<float>(), logits.data<float>() + logits.numel()};
}

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

void expect_invariant(const std::string& path) {
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (run scripts/test.sh)";
  LoadedModel m = load_model(path);
  const size_t vocab = static_cast<size_t>(m.config().vocab_size);
  ASSERT_EQ(cpu_order(), CpuOrder::kBatchInvariant);  // the default
  const std::vector<float> one_step = chunked(*m.model, 512);
  for (int chunk : {5, 1}) {
    const std::vector<float> got = chunked(*m.model, chunk);
    EXPECT_TRUE(same_bits(got.data(), one_step.data(), one_step.size())) << "chunks of " << chunk;
  }
  const std::vector<float> batched = beside_another(*m.model);
  EXPECT_TRUE(same_bits(batched.data(), one_step.data(), vocab)) << "beside another sequence";

  // Control: llama.cpp's order changes with the step's shape, and the comparison sees it.
  set_cpu_order(CpuOrder::kLlamaCpp);
  const std::vector<float> ll_one = chunked(*m.model, 512), ll_tokens = chunked(*m.model, 1);
  set_cpu_order(CpuOrder::kBatchInvariant);
  EXPECT_FALSE(same_bits(ll_one.data(), ll_tokens.data(), ll_one.size()))
      << "llama.cpp's order gave the same bits in one step and token by token";
  // Token by token is a decode step each time: the same order in both modes.
  EXPECT_TRUE(same_bits(ll_tokens.data(), one_step.data(), one_step.size()));
}

}  // namespace

TEST(BatchInvariance, SmolLM2Q4_1) { expect_invariant("models/SmolLM2-135M-Instruct.Q4_1.gguf"); }

TEST(BatchInvariance, Gemma3KQuants) { expect_invariant("models/gemma-3-270m-q4_k_m.gguf"); }
