// bert_gemm::linear against a double-precision x @ W^T + b on shapes that leave partial tiles
// and panels, for f32 and bf16 weights; and each row's result is the same bits whatever the
// number of rows computed with it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "model/bert_gemm.h"

namespace vllm {
namespace {

Tensor random_matrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  Tensor t = Tensor::empty({rows, cols}, DType::F32);
  for (int64_t i = 0; i < rows * cols; ++i) t.data<float>()[i] = d(rng);
  return t;
}

class BertGemm : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(BertGemm, MatchesDoubleReference) {
  const auto [m, n, k] = GetParam();
  std::mt19937 rng(m * 1000 + n * 10 + k);
  const Tensor x = random_matrix(m, k, rng), w = random_matrix(n, k, rng);
  std::vector<float> bias(n);
  for (int i = 0; i < n; ++i) bias[i] = 0.01f * static_cast<float>(i % 7) - 0.03f;
  const auto packed = bert_gemm::pack(w, bias);
  Tensor out = Tensor::empty({m, n}, DType::F32);
  bert_gemm::linear(x, packed, out);
  double worst = 0;
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) {
      double ref = bias[c];
      for (int i = 0; i < k; ++i)
        ref += double(x.data<float>()[r * k + i]) * w.data<float>()[c * k + i];
      worst = std::max(worst, std::fabs(ref - out.data<float>()[r * n + c]));
    }
  EXPECT_LT(worst, 1e-5 * std::sqrt(double(k))) << m << "x" << n << "x" << k;

  // Row r alone, or in the middle of a strided view, gives the same bits.
  for (int r : {0, m / 2, m - 1}) {
    Tensor one = Tensor::empty({1, n}, DType::F32);
    bert_gemm::linear(x.narrow(r, 1), packed, one);
    EXPECT_EQ(0, std::memcmp(one.data<float>(), out.data<float>() + r * n, n * sizeof(float)));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BertGemm,
                         ::testing::Values(std::make_tuple(1, 16, 8), std::make_tuple(7, 37, 19),
                                           std::make_tuple(13, 384, 384),
                                           std::make_tuple(50, 48, 100),
                                           std::make_tuple(97, 1536, 64)));

TEST(BertGemmPack, Bf16WeightsAreWidenedExactly) {
  Tensor w = Tensor::empty({3, 2}, DType::BF16);
  const float values[6] = {1.5f, -2.0f, 0.25f, 3.0f, -0.125f, 8.0f};  // exact in bf16
  for (int i = 0; i < 6; ++i) w.data<uint16_t>()[i] = f32_to_bf16(values[i]);
  const auto packed = bert_gemm::pack(w, {1.0f, 2.0f, 3.0f});
  Tensor x = Tensor::empty({1, 2}, DType::F32);
  x.data<float>()[0] = 2.0f;
  x.data<float>()[1] = 1.0f;
  Tensor out = Tensor::empty({1, 3}, DType::F32);
  bert_gemm::linear(x, packed, out);
  EXPECT_EQ(out.data<float>()[0], 1.0f + 3.0f - 2.0f);
  EXPECT_EQ(out.data<float>()[1], 2.0f + 0.5f + 3.0f);
  EXPECT_EQ(out.data<float>()[2], 3.0f - 0.25f + 8.0f);
}

}  // namespace
}  // namespace vllm
