// Tensor parallelism on the CPU (ranks are threads joined by thread communicators): the tiny
// random-weight checkpoints split over 2 and 4 ranks against transformers' logits (the same
// bar as one rank) and against the unsplit model, and the configurations that cannot split;
// on CUDA (one GPU a rank, over NCCL) where there are GPUs enough.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "model/load.h"
#include "model/tensor_parallel.h"
#include "runtime/device.h"
#include "runtime/thread_pool.h"
#include "util/check.h"
#include "tiny_fixture.h"

using namespace vllm;
using namespace vllm::testing_tiny;

namespace {

constexpr double kTransformersBar = kBar;  // the fixtures' bar (manifest.json)
constexpr double kOneRankBar = 1e-5;       // issue 20: against TP=1, where sums reorder

int64_t argmax(const float* row, int64_t n) {
  return std::max_element(row, row + n) - row;
}

// Every rank scores `tokens` at once, each on its own thread and pool (they meet in the
// collectives); the logits of each rank, rank 0 first.
std::vector<Tensor> score_all_ranks(const LoadedModel& m, const std::vector<int32_t>& tokens) {
  const auto ranks = m.ranks();
  std::vector<Tensor> out(ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] {
      ThreadPool pool(1);
      ScopedCpuPool scoped(pool);
      out[r] = ranks[r]->score(tokens);
    });
  for (auto& t : threads) t.join();
  return out;
}

// The worst logit errors of a split model over the fixture's reference prompts (each with its
// greedy continuation), against transformers and against the unsplit model `one`, printed. On
// the way it expects every rank to hold the same gathered logits, bit for bit, each position's
// top token to be the reference's next token, and the logits within the fixtures' bar of
// transformers. `what` names the run in failure messages.
struct SplitErrors {
  double against_reference = 0, against_one = 0;
};
SplitErrors score_split(const std::string& dir, const LoadedModel& one, const LoadedModel& split,
                        const std::string& what) {
  const nlohmann::json ref = nlohmann::json::parse(std::ifstream(dir + "/reference.json"));
  const int64_t vocab = one.config().vocab_size;
  SplitErrors worst;
  for (const auto& p : ref["prompts"]) {
    std::vector<int32_t> seq = p["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy = p["greedy_ids"].get<std::vector<int32_t>>();
    seq.insert(seq.end(), greedy.begin(), greedy.end());
    const int64_t n = static_cast<int64_t>(seq.size());
    const auto expected =
        read_f32(dir + "/" + p["logits_file"].get<std::string>(), size_t(n * vocab));
    const Tensor whole = one.model->score(seq);
    const std::vector<Tensor> ranks = score_all_ranks(split, seq);
    const float* ours = ranks[0].data<float>();
    for (size_t r = 1; r < ranks.size(); ++r)
      EXPECT_EQ(0, std::memcmp(ours, ranks[r].data<float>(), size_t(n * vocab) * sizeof(float)))
          << what << ": rank " << r << " holds other logits than rank 0";
    const size_t prompt_len = seq.size() - greedy.size();
    for (size_t s = 0; s + 1 < greedy.size(); ++s)
      EXPECT_EQ(argmax(ours + (prompt_len - 1 + s) * vocab, vocab), greedy[s])
          << what << ", greedy step " << s;
    worst.against_reference =
        std::max(worst.against_reference, rel_error(ours, expected.data(), n, vocab));
    worst.against_one = std::max(worst.against_one, rel_error(ours, whole.data<float>(), n, vocab));
  }
  EXPECT_LE(worst.against_reference, kTransformersBar) << what << " against transformers";
  std::printf("%s: against transformers %.2e, against one rank %.2e\n", what.c_str(),
              worst.against_reference, worst.against_one);
  return worst;
}

class TensorParallel : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

std::string arch_and_size(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return std::get<0>(info.param) + "_tp" + std::to_string(std::get<1>(info.param));
}

}  // namespace

TEST_P(TensorParallel, MatchesTransformersAndOneRank) {
  const auto [arch, tp] = GetParam();
  const std::string dir = kDir + arch;
  const LoadedModel one = load_model(dir);
  const LoadedModel split = load_model(dir, {}, kCpu, 0, tp);
  ASSERT_EQ(split.ranks().size(), size_t(tp));
  EXPECT_EQ(split.config().num_heads * tp, one.config().num_heads);
  const std::string what = arch + " TP=" + std::to_string(tp);
  EXPECT_LE(score_split(dir, one, split, what).against_one, kOneRankBar) << what << " against TP=1";
}

INSTANTIATE_TEST_SUITE_P(
    Archs, TensorParallel,
    ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "mistral", "llama_yarn",
                                         "gemma3", "granite", "qwen2_swa", "qwen3_moe",
                                         "deepseek_v2", "deepseek_v3"),
                       ::testing::Values(2, 4)),
    arch_and_size);

// Tensor parallelism on CUDA (issue 20): rank r on GPU r, the ranks joined over NCCL, with the
// f32 checkpoints kept in f32 as the one-GPU tests do. Each rank's gathered logits are the same
// bits, within the fixtures' bar of transformers, with transformers' greedy continuation at
// every position; the distance to one GPU is printed (the GEMMs' shapes differ, so cuBLASLt
// may sum in another order). With fewer GPUs than ranks the ranks share them (a backend each,
// set_cuda_backends_per_gpu) and meet through the host instead of NCCL: the sharded kernels
// are the same. Skipped without a GPU.
class CudaTensorParallel : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Ranks beyond the GPUs present share them for the life of a test.
struct SharedGpus {
  explicit SharedGpus(int ranks) {
    const int gpus = cuda_device_count();
    set_cuda_backends_per_gpu((ranks + gpus - 1) / gpus);
  }
  ~SharedGpus() { set_cuda_backends_per_gpu(1); }
};

TEST_P(CudaTensorParallel, MatchesTransformersOnEveryRank) {
  const auto [arch, tp] = GetParam();
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  const SharedGpus shared(tp);
  const std::string dir = kDir + arch;
  const Device gpu0{DeviceKind::Cuda, 0};
  const LoadedModel one = load_model(dir, {}, gpu0);
  const LoadedModel split = load_model(dir, {}, gpu0, 0, tp);
  ASSERT_EQ(split.ranks().size(), size_t(tp));
  for (int r = 0; r < tp; ++r)
    EXPECT_EQ(split.ranks()[size_t(r)]->device(), (Device{DeviceKind::Cuda, r}));
  const std::string what = arch + " TP=" + std::to_string(tp) + " on CUDA (" +
                           (tp <= cuda_device_count() ? "NCCL" : "ranks sharing GPUs") + ")";
  score_split(dir, one, split, what);  // one GPU's logits may differ in summation order
}

INSTANTIATE_TEST_SUITE_P(
    Archs, CudaTensorParallel,
    ::testing::Combine(::testing::Values("llama", "qwen3", "gemma3", "qwen2_swa", "qwen3_moe",
                                         "deepseek_v2", "deepseek_v3"),
                       ::testing::Values(2, 4)),
    arch_and_size);

TEST(TensorParallelConfig, SharesSplitEvenlyAndCoverEverything) {
  int64_t next = 0;
  for (int r = 0; r < 3; ++r) {
    const Share s = share_of(10, {r, 3});
    EXPECT_EQ(s.begin, next);
    EXPECT_EQ(s.length, r == 0 ? 4 : 3);
    next += s.length;
  }
  EXPECT_EQ(next, 10);
}

TEST(TensorParallelConfig, KvHeadsReplicateBelowTheRankCount) {
  ModelConfig c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.intermediate_size = 64;
  c.layers.resize(1);
  const ModelConfig s = shard_config(c, {3, 4});
  EXPECT_EQ(s.num_heads, 2);
  EXPECT_EQ(s.num_kv_heads, 1);
  EXPECT_EQ(s.intermediate_size, 16);
}

// More CUDA ranks than GPUs is a start-up error naming what is missing (runs without a GPU).
TEST(TensorParallelConfig, MoreCudaRanksThanGpusIsAnError) {
  const int tp = std::max(2, cuda_device_count() + 1);
  try {
    load_model(kDir + "llama", {}, Device{DeviceKind::Cuda, 0}, 0, tp);
    ADD_FAILURE() << "TP=" << tp << " loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device(s) are present"), std::string::npos)
        << e.what();
  }
}

// What cannot be split is an error that names the field, never a silently wrong model.
TEST(TensorParallelConfig, UnsplittableModelsAreErrorsNamingTheField) {
  const auto message = [](const std::string& dir, int tp) -> std::string {
    try {
      load_model(kDir + dir, {}, kCpu, 0, tp);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message("llama", 3).find("num_attention_heads"), std::string::npos);
  EXPECT_NE(message("olmo2", 2).find("q/k norm over the whole projection"), std::string::npos);
  EXPECT_NE(message("phi3", 2).find("qkv_proj"), std::string::npos);
  EXPECT_NE(message("llama", 0).find("at least 1"), std::string::npos);
}

// SmolLM2-135M Q4_1 (9 heads, 3 KV heads, tied embeddings) over 3 ranks: the same greedy
// token at every position as one rank. The logits are not within the f32 bar of the tiny
// checkpoints, and cannot be: activations are quantized to int8 (Q8_1 blocks) before every
// matmul, so a reordered sum that moves a value across a rounding boundary changes one int8
// step. Measured: the residual stream agrees to ~1e-7 through layer 10 and jumps to ~4e-4 in
// layer 11 for a single token (one such flip); the logits end ~4e-2 apart (printed).
TEST(TensorParallelSmolLM2, ThreeRanksGiveOneRanksGreedyTokens) {
  const std::string path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  const LoadedModel one = load_model(path), split = load_model(path, {}, kCpu, 0, 3);
  const std::vector<int32_t> seq = {504, 3575, 282, 4649, 314, 7042, 30, 378, 1187, 2012, 253};
  const Tensor whole = one.model->score(seq);
  const std::vector<Tensor> ranks = score_all_ranks(split, seq);
  const int64_t vocab = one.config().vocab_size, n = int64_t(seq.size());
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(argmax(ranks[0].data<float>() + i * vocab, vocab),
              argmax(whole.data<float>() + i * vocab, vocab)) << "position " << i;
  std::printf("SmolLM2 TP=3 against TP=1: max|diff|/max|logit| %.2e\n",
              rel_error(ranks[0].data<float>(), whole.data<float>(), n, vocab));
}
