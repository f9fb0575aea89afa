// Last-token pooling of SmolLM2-135M-Instruct Q4_1 (LastTokenPooling, vLLM's --runner pooling on
// a decoder) against llama.cpp's LLAMA_POOLING_TYPE_LAST embeddings of the same file
// (fixtures/embeddings/smollm2_last.json, tools/make_last_token_pooling_fixture.py): the ids
// llama.cpp fed its model, each sequence alone, compared raw and L2-normalised.
//
// In llama.cpp's CPU order (--cpu-order llamacpp) a prompt-sized step repeats llama.cpp's
// arithmetic, so the vectors are expected to be bit-equal; in our default order (every row in
// the decode order) the attention sums differ in order, and the bound is the manifest's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "embedding_fixture.h"
#include "llamacpp_fixture.h"
#include "model/last_token_pooling.h"
#include "model/load.h"
#include "runtime/cpu/isa.h"

namespace vllm {
namespace {

constexpr const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

nlohmann::json fixture(const std::string& name) {
  return nlohmann::json::parse(std::ifstream("fixtures/embeddings/" + name));
}

struct Diff {
  double cosine = 1, max_abs = 0, max_ref = 0;
};

Diff compare(const float* got, const std::vector<float>& ref) {
  double dot = 0, g2 = 0, r2 = 0;
  Diff d;
  for (size_t i = 0; i < ref.size(); ++i) {
    dot += double(got[i]) * ref[i];
    g2 += double(got[i]) * got[i];
    r2 += double(ref[i]) * ref[i];
    d.max_abs = std::max(d.max_abs, std::abs(double(got[i]) - ref[i]));
    d.max_ref = std::max(d.max_ref, std::abs(double(ref[i])));
  }
  d.cosine = dot / std::sqrt(g2 * r2);
  return d;
}

class LastTokenPoolingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::filesystem::exists(kModel)) loaded_ = new LoadedModel(load_model(kModel));
  }
  static void TearDownTestSuite() {
    delete loaded_;
    loaded_ = nullptr;
  }
  void SetUp() override {
    if (!loaded_) GTEST_SKIP() << kModel << " absent (run scripts/setup.sh)";
  }
  // Our vectors of every fixture case against llama.cpp's, raw and normalised; the worst
  // figures are printed.
  static void expect_matches(double cosine_min, double max_abs, double max_abs_normalized) {
    const LastTokenPooling pooling(*loaded_->model);
    const auto cases = fixture("smollm2_last.json").at("cases");
    ASSERT_GE(cases.size(), 20u);
    std::vector<std::vector<int32_t>> seqs;
    for (const auto& c : cases) seqs.push_back(c.at("ids").get<std::vector<int32_t>>());
    const std::vector<float> got = pooling.embed(seqs);
    const int64_t h = pooling.hidden_size();
    Diff worst{1, 0, 0};
    double worst_normalized = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      std::vector<float> ref = decode_f32_base64(cases[i].at("embedding").get<std::string>());
      ASSERT_EQ(static_cast<int64_t>(ref.size()), h);
      const float* v = got.data() + i * h;
      const Diff d = compare(v, ref);
      std::vector<float> ours(v, v + h);
      l2_normalize(ours.data(), h);
      l2_normalize(ref.data(), h);
      const Diff dn = compare(ours.data(), ref);
      EXPECT_GE(d.cosine, cosine_min) << "case " << i;
      EXPECT_LE(d.max_abs, max_abs) << "case " << i << " (largest |value| " << d.max_ref << ")";
      EXPECT_LE(dn.max_abs, max_abs_normalized) << "case " << i << " normalised";
      worst.cosine = std::min(worst.cosine, d.cosine);
      worst.max_abs = std::max(worst.max_abs, d.max_abs);
      worst.max_ref = std::max(worst.max_ref, d.max_ref);
      worst_normalized = std::max(worst_normalized, dn.max_abs);
    }
    std::printf("%zu cases: min cosine %.9f, max |diff| %.3g (largest |value| %.3g), "
                "normalised max |diff| %.3g\n",
                cases.size(), worst.cosine, worst.max_abs, worst.max_ref, worst_normalized);
  }
  static LoadedModel* loaded_;
};
LoadedModel* LastTokenPoolingTest::loaded_ = nullptr;

TEST_F(LastTokenPoolingTest, DefaultOrderMatchesLlamaCpp) {
  const auto tol = fixture("manifest.json").at("tolerance_last_token");
  expect_matches(tol.at("cosine_min").get<double>(), tol.at("max_abs").get<double>(),
                 tol.at("max_abs_normalized").get<double>());
}

TEST_F(LastTokenPoolingTest, LlamaCppOrderIsBitExact) {
  if (cpu::detected_isa() == cpu::Isa::Scalar)
    GTEST_SKIP() << "the scalar fallback does not sum int8 blocks in llama.cpp's AVX order";
  const llamacpp_check::LlamaCppOrder order;
  expect_matches(1.0 - 1e-12, 0.0, 0.0);
}

TEST_F(LastTokenPoolingTest, VectorsDoNotDependOnTheBatch) {
  const LastTokenPooling pooling(*loaded_->model);
  const std::vector<std::vector<int32_t>> seqs = {{1, 2, 3, 4}, {5}, {6, 7, 8}};
  const std::vector<float> together = pooling.embed(seqs);
  const int64_t h = pooling.hidden_size();
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::vector<float> alone = pooling.embed({seqs[i]});
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), together.begin() + i * h)) << i;
  }
}

}  // namespace
}  // namespace vllm
