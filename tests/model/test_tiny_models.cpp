// The shared decoder against transformers on tiny random-weight checkpoints of every
// supported architecture (fixtures/tiny, made by tools/make_tiny_fixtures.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/generator.h"
#include "model/load.h"
#include "runtime/device.h"
#include "util/check.h"
#include "tiny_fixture.h"

using namespace vllm;
using namespace vllm::testing_tiny;

namespace {

// (architecture, device): every architecture on the CPU and, where present, on CUDA, where
// the f32 checkpoints keep f32 weights and an f32 KV cache, so the same bar applies.
class TinyModel : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    if (std::get<1>(GetParam()) == "cuda" && cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device in this process";
  }
};

}  // namespace

TEST_P(TinyModel, MatchesTransformers) {
  const std::string arch = std::get<0>(GetParam());
  const std::string dir = kDir + arch;
  nlohmann::json ref = nlohmann::json::parse(std::ifstream(dir + "/reference.json"));
  LoadedModel m = load_model(dir, {}, parse_device(std::get<1>(GetParam())));
  const int vocab = m.config().vocab_size;
  EXPECT_EQ(m.config().architecture, ref["arch"].get<std::string>());
  double worst = 0;
  // Mixtures of experts: the closest routing choice met (relative margin between the last
  // expert kept and the first left out), so that a near tie behind a miss is visible.
  float closest = INFINITY;
  m.model->set_routing_observer([&](int, int64_t, float mg) { closest = std::min(closest, mg); });

  for (const auto& p : ref["prompts"]) {
    const auto prompt = p["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy = p["greedy_ids"].get<std::vector<int32_t>>();
    const int64_t rows = p["logits_shape"][0].get<int64_t>();
    const auto expected = read_f32(dir + "/" + p["logits_file"].get<std::string>(), rows * vocab);

    // Prefill of prompt + reference continuation in one pass: logits at every position.
    {
      std::vector<int32_t> seq = prompt;
      seq.insert(seq.end(), greedy.begin(), greedy.end());
      const int n = static_cast<int>(seq.size());
      const Tensor logits = m.model->score(seq);
      const double err = rel_error(logits.data<float>(), expected.data(), n, vocab);
      worst = std::max(worst, err);
      EXPECT_LE(err, kBar) << arch << " prefill, prompt of " << prompt.size();
    }

    // Incremental decoding: the greedy tokens and each step's logits.
    Generator gen(*m.model, 256, 4);
    gen.keep_logits = true;
    GenerateOptions opts;
    opts.max_tokens = static_cast<int>(greedy.size());
    opts.ignore_eos = true;
    opts.prefill_chunk = 5;  // several chunks for the longer prompts
    const auto out = gen.generate(prompt, opts);
    EXPECT_EQ(out, greedy) << arch << " greedy, prompt of " << prompt.size();
    for (size_t s = 0; s < gen.step_logits.size(); ++s) {
      const size_t row = prompt.size() - 1 + s;
      const double err = rel_error(gen.step_logits[s].data(), expected.data() + row * vocab, 1, vocab);
      worst = std::max(worst, err);
      ASSERT_LE(err, kBar) << arch << " decode step " << s;
    }
  }
  std::printf("%s: worst max|diff|/max|logit| = %.2e (bar %.0e)", arch.c_str(), worst, kBar);
  if (std::isfinite(closest)) std::printf("; closest routing choice: margin %.1e", closest);
  std::printf("\n");
}

INSTANTIATE_TEST_SUITE_P(
    Archs, TinyModel,
    ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "mistral", "llama_yarn",
                                         "gemma3", "phi3", "olmo2", "granite", "qwen2_swa"),
                       ::testing::Values("cpu", "cuda")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// Mixtures of experts: routed on the host on the CPU, on the device on CUDA.
INSTANTIATE_TEST_SUITE_P(
    MoeArchs, TinyModel,
    ::testing::Combine(::testing::Values("qwen3_moe"), ::testing::Values("cpu", "cuda")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });
INSTANTIATE_TEST_SUITE_P(
    MlaArchs, TinyModel,
    ::testing::Combine(::testing::Values("deepseek_v2", "deepseek_v3"),
                       ::testing::Values("cpu", "cuda")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// LongRoPE (Phi-3): the context the engine serves picks the factors. Served within the
// original 64 tokens the model is the one checked against transformers above (short
// factors); served longer, every token rotates by the long factors, so the logits move.
TEST(TinyModelLongRope, ServedContextPicksTheFactors) {
  const std::vector<int32_t> prompt = {5, 17, 29, 3, 11};
  const auto logits = [&](int served) {
    LoadedModel m = load_model(kDir + "phi3", {}, kCpu, served);
    return m.model->score(prompt);
  };
  const Tensor model_own = logits(0), within = logits(64), longer = logits(128);
  const int64_t n = model_own.numel();
  EXPECT_EQ(std::memcmp(model_own.data<float>(), within.data<float>(), n * sizeof(float)), 0);
  double moved = 0;
  for (int64_t i = 0; i < n; ++i)
    moved = std::max(moved, double(std::fabs(longer.data<float>()[i] - within.data<float>()[i])));
  EXPECT_GT(moved, 1e-3) << "served at 128 tokens, the long factors should change the logits";
}

// Mixtures of experts on CUDA run steps of more than DecoderModel's kMoeGemvTokens (64)
// tokens through one GEMM per expert instead of the grouped GEMV the shorter steps (and the
// checks against transformers above) take: a 150-token prompt there against the CPU, whose
// logits are the ones checked against transformers.
TEST(TinyMoeLongStep, CudaMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  for (const std::string arch : {"qwen3_moe", "deepseek_v2", "deepseek_v3"}) {
    LoadedModel cpu = load_model(kDir + arch, {}, kCpu);
    LoadedModel gpu = load_model(kDir + arch, {}, parse_device("cuda"));
    std::vector<int32_t> seq(150);
    for (size_t i = 0; i < seq.size(); ++i)
      seq[i] = static_cast<int32_t>((i * 37 + 11) % cpu.config().vocab_size);
    const Tensor a = cpu.model->score(seq), b = gpu.model->score(seq);
    const double err = rel_error(b.data<float>(), a.data<float>(), int64_t(seq.size()),
                                 cpu.config().vocab_size);
    EXPECT_LE(err, kBar) << arch;
    std::printf("%s, 150-token step: CUDA against CPU %.2e (bar %.0e)\n", arch.c_str(), err, kBar);
  }
}

// MLA on CUDA splits a step: sequences with few query rows take the paged kernel (which skips
// the others), those with 16 or more mla_prefill_attention's GEMMs. Two steps of three
// sequences (short, long, short; then a decode, a 20-token chunk over 40 cached rows, a decode)
// on CUDA against the CPU, every row's logits.
TEST(TinyMlaMixedSteps, CudaMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  const int bs = 16;
  struct Seq { int start, len; std::vector<int32_t> table; };
  // Step 1: lengths 3, 40, 5 from position 0; step 2: 1, 20, 1 more.
  const std::vector<std::vector<Seq>> steps = {
      {{0, 3, {0, 0, 0, 0}}, {0, 40, {1, 2, 3, 4}}, {0, 5, {5, 0, 0, 0}}},
      {{3, 1, {0, 0, 0, 0}}, {40, 20, {1, 2, 3, 4}}, {5, 1, {5, 0, 0, 0}}}};
  for (const std::string arch : {"deepseek_v2", "deepseek_v3"}) {
    LoadedModel cpu = load_model(kDir + arch, {}, kCpu);
    LoadedModel gpu = load_model(kDir + arch, {}, parse_device("cuda"));
    const int vocab = cpu.config().vocab_size;
    KvCache cpu_cache = cpu.model->allocate_kv_cache(8, bs);
    KvCache gpu_cache = gpu.model->allocate_kv_cache(8, bs);
    for (size_t step = 0; step < steps.size(); ++step) {
      ForwardBatch b;
      for (size_t g = 0; g < cpu.model->kv_cache_groups().size(); ++g) {
        b.slot_mappings.emplace_back();
        AttentionMeta& a = b.attn.emplace_back();
        a.query_start_loc = {0};
        a.max_blocks_per_seq = 4;
      }
      for (const Seq& s : steps[step]) {
        for (int i = 0; i < s.len; ++i) {
          const int pos = s.start + i;
          b.token_ids.push_back(static_cast<int32_t>((pos * 31 + s.table[0] * 7 + 3) % vocab));
          b.positions.push_back(pos);
          b.logits_indices.push_back(static_cast<int>(b.token_ids.size()) - 1);
          for (auto& slots : b.slot_mappings) slots.push_back(s.table[pos / bs] * bs + pos % bs);
        }
        for (AttentionMeta& a : b.attn) {
          a.query_start_loc.push_back(a.query_start_loc.back() + s.len);
          a.seq_lens.push_back(s.start + s.len);
          a.block_tables.insert(a.block_tables.end(), s.table.begin(), s.table.end());
        }
      }
      const Tensor want = cpu.model->forward(b, cpu_cache);
      const Tensor got = gpu.model->forward(b, gpu_cache).to(kCpu);
      const double err = rel_error(got.data<float>(), want.data<float>(),
                                   int64_t(b.token_ids.size()), vocab);
      EXPECT_LE(err, kBar) << arch << " step " << step;
      std::printf("%s, mixed step %zu: CUDA against CPU %.2e (bar %.0e)\n", arch.c_str(), step,
                  err, kBar);
    }
  }
}

// --dtype on CUDA: the f32 checkpoints loaded as bf16 and f16 (weights, and so the KV cache),
// a dense, a mixture-of-experts and an MLA architecture (their experts are stacked and MLA's
// absorbed W_UK / W_UV placed by separate paths). Against transformers' f32 logits the error
// is the weights' rounding: bars of about ten unit roundoffs u (bf16 2^-8, f16 2^-11) on
// max|diff| / max|logit| per row. That it exceeds the f32 bar shows the weights were converted.
// A mixture of experts may leave the bar where a routing choice was within a few roundoffs of
// a tie in f32 (the closest margins of these fixtures are 1e-3 to 1e-2): the rounding can flip
// that token's experts, and with them its row and every later one. So past the bar, the test
// requires such a near tie (margin <= 4u) at or before the first row past it, and says so;
// the rows before that one are within the bar by construction.
TEST(TinyModelDtype, CudaComputesInTheRequestedType) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  for (const std::string arch : {"llama", "qwen3_moe", "deepseek_v2"}) {
    const std::string dir = kDir + arch;
    nlohmann::json ref = nlohmann::json::parse(std::ifstream(dir + "/reference.json"));
    const auto& p = ref["prompts"][0];
    std::vector<int32_t> seq = p["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy = p["greedy_ids"].get<std::vector<int32_t>>();
    seq.insert(seq.end(), greedy.begin(), greedy.end());
    const int64_t n = int64_t(seq.size());
    // Each token's closest routing choice over the layers, in f32 on the CPU (which matches
    // transformers' choices: TinyModel.MatchesTransformers).
    std::vector<float> margin(seq.size(), INFINITY);
    {
      LoadedModel f32 = load_model(dir, {}, kCpu);
      f32.model->set_routing_observer(
          [&](int, int64_t t, float mg) { margin[size_t(t)] = std::min(margin[size_t(t)], mg); });
      f32.model->score(seq);
    }
    for (DType dt : {DType::BF16, DType::F16}) {
      LoadedModel m = load_model(dir, {}, parse_device("cuda"), 0, 1, dt);
      EXPECT_EQ(m.model->kv_dtype(), dt) << arch;
      const int vocab = m.config().vocab_size;
      const auto expected = read_f32(dir + "/" + p["logits_file"].get<std::string>(),
                                     size_t(seq.size()) * vocab);
      const Tensor logits = m.model->score(seq);
      const float* got = logits.data<float>();
      const double err = rel_error(got, expected.data(), n, vocab);
      const double unit = dt == DType::BF16 ? 0x1p-8 : 0x1p-11;
      const double bar = dt == DType::BF16 ? 4e-2 : 5e-3;
      const std::string what = arch + " as " + std::string(dtype_name(dt));
      EXPECT_GT(err, kBar) << what << ": no rounding seen";
      int64_t first = n;  // the first row past the bar
      for (int64_t r = 0; r < n && first == n; ++r)
        if (rel_error(got + r * vocab, expected.data() + r * vocab, 1, vocab) > bar) first = r;
      std::printf("%s on CUDA: max|diff|/max|logit| = %.2e (bar %.0e)", what.c_str(), err, bar);
      if (first < n) {
        const float tie = *std::min_element(margin.begin(), margin.begin() + first + 1);
        EXPECT_LE(tie, 4 * unit) << what << ": row " << first << " of " << n
                                 << " is past the bar with no routing near tie before it";
        std::printf("; from row %lld of %lld, after a routing near tie (margin %.1e = %.1f u); "
                    "rows before it %.2e",
                    static_cast<long long>(first), static_cast<long long>(n), tie, tie / unit,
                    first > 0 ? rel_error(got, expected.data(), first, vocab) : 0.0);
      }
      std::printf("\n");
    }
  }
}

// --dtype names as vLLM spells them, and the CPU refusing anything but auto.
TEST(TinyModelDtype, ParsedAndRefusedOnTheCpu) {
  EXPECT_FALSE(parse_dtype("auto").has_value());
  EXPECT_EQ(parse_dtype("bfloat16"), DType::BF16);
  EXPECT_EQ(parse_dtype("half"), DType::F16);
  EXPECT_EQ(parse_dtype("float16"), DType::F16);
  EXPECT_EQ(parse_dtype("float"), DType::F32);
  EXPECT_THROW(parse_dtype("int8"), Error);
  try {
    load_model(kDir + "llama", {}, kCpu, 0, 1, DType::BF16);
    ADD_FAILURE() << "the CPU took --dtype bfloat16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dtype"), std::string::npos) << e.what();
  }
}
