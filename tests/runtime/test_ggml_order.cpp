// The ggml-order kernels (src/runtime/cpu/ggml_order.h): every ISA build this CPU can run
// gives the scalar build's bits, and each computes what it names (dot products, exp, SwiGLU)
// to within float rounding. Bit-equality with llama.cpp itself is tested on the model
// (tests/model/test_smollm2_llamacpp.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "runtime/cpu/ggml_order.h"
#include "runtime/cpu/isa.h"
#include "runtime/dtype.h"

using namespace vllm;
using namespace vllm::cpu;

namespace {

struct Build {
  const char* name;
  decltype(&ggml_order::scalar::dot_rows) dot_rows;
  decltype(&ggml_order::scalar::exp_sum16) exp_sum16;
  decltype(&ggml_order::scalar::accumulate_values) accumulate_values;
  decltype(&ggml_order::scalar::reduce_values) reduce_values;
  decltype(&ggml_order::scalar::swiglu) swiglu;
};

// The scalar build first, then the SIMD builds this CPU supports.
std::vector<Build> builds() {
  namespace g = ggml_order;
  std::vector<Build> b = {{"scalar", g::scalar::dot_rows, g::scalar::exp_sum16,
                           g::scalar::accumulate_values, g::scalar::reduce_values,
                           g::scalar::swiglu}};
  if (detected_isa() != Isa::Scalar)
    b.push_back({"avx2", g::avx2::dot_rows, g::avx2::exp_sum16, g::avx2::accumulate_values,
                 g::avx2::reduce_values, g::avx2::swiglu});
  if (detected_isa() == Isa::Avx512Vnni)
    b.push_back({"avx512", g::avx512::dot_rows, g::avx512::exp_sum16,
                 g::avx512::accumulate_values, g::avx512::reduce_values, g::avx512::swiglu});
  return b;
}

std::vector<float> randf(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// f16 values and their exact f32 copies.
std::vector<uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_f16(v[i]);
  return h;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// sum_i a[i] * b[i * b_step] in double, and the sum of the terms' magnitudes (for the bound).
std::pair<double, double> exact_dot(const float* a, const uint16_t* b, int64_t b_step,
                                    int64_t n) {
  double sum = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double t = double(a[i]) * f16_to_f32(b[i * b_step]);
    sum += t;
    mag += std::fabs(t);
  }
  return {sum, mag};
}

}  // namespace

TEST(GgmlOrder, DotRowsSameBitsOnEveryBuildAndCloseToExact) {
  const auto all = builds();
  for (int64_t n : {16, 64, 80, 100, 128, 256}) {
    const int64_t rows = 37, stride = n + 8;
    std::vector<float> q = randf(n, 1.0f, 1);
    for (float& x : q) x = f16_to_f32(f32_to_f16(x));
    const std::vector<uint16_t> k = to_f16(randf(rows * stride, 2.0f, 2));
    for (auto order : {ggml_order::Order::Single, ggml_order::Order::Batched}) {
      std::vector<float> want(rows);
      all[0].dot_rows(q.data(), k.data(), stride, rows, n, order, want.data());
      for (int64_t r = 0; r < rows; ++r) {
        const auto [exact, mag] = exact_dot(q.data(), k.data() + r * stride, 1, n);
        EXPECT_NEAR(want[r], exact, 1e-6 * mag) << "n " << n << " row " << r;
      }
      for (size_t b = 1; b < all.size(); ++b) {
        std::vector<float> got(rows);
        all[b].dot_rows(q.data(), k.data(), stride, rows, n, order, got.data());
        for (int64_t r = 0; r < rows; ++r)
          EXPECT_TRUE(same_bits(got[r], want[r]))
              << all[b].name << " n " << n << " row " << r << ": " << got[r] << " vs " << want[r];
      }
    }
  }
}

TEST(GgmlOrder, ExpSameBitsOnEveryBuildAndCloseToExp) {
  const auto all = builds();
  // Softmax inputs: 0 down to far below the float range (subnormal and zero results), -inf
  // for masked keys, and a few positive values.
  std::vector<float> x = {0.0f, -0.0f, -1e-8f, -0.5f, -1.0f, -3.7f, -10.0f, -50.0f, -87.0f,
                          -88.7f, -95.0f, -100.0f, -103.9f, -120.0f, -150.0f, -INFINITY,
                          0.25f, 1.0f, 5.5f, 20.0f, 60.0f, 88.0f, 89.0f, 200.0f};
  const std::vector<float> more = randf(160, 8.0f, 3);
  x.insert(x.end(), more.begin(), more.end());
  x.resize((x.size() + 15) / 16 * 16, -2.0f);
  for (size_t c = 0; c < x.size(); c += 16) {
    float want[16];
    const double sum = all[0].exp_sum16(&x[c], 0.0f, want);
    double exact_sum = 0;
    for (int l = 0; l < 16; ++l) {
      const double e = std::exp(double(x[c + l]));
      exact_sum += e;
      if (e < 1e-37) {  // subnormal or zero: within one subnormal step
        EXPECT_NEAR(want[l], e, 1.5e-45) << x[c + l];
      } else if (e > 3.4028234e38) {  // past the float range
        EXPECT_EQ(want[l], INFINITY) << x[c + l];
      } else {
        EXPECT_NEAR(want[l], e, 4e-7 * e) << x[c + l];
      }
    }
    if (exact_sum < 3e38) {
      EXPECT_NEAR(sum, exact_sum, 1e-6 * exact_sum);
    }
    for (size_t b = 1; b < all.size(); ++b) {
      float got[16];
      const double got_sum = all[b].exp_sum16(&x[c], 0.0f, got);
      EXPECT_EQ(std::memcmp(&got_sum, &sum, sizeof sum), 0) << all[b].name;
      for (int l = 0; l < 16; ++l)
        EXPECT_TRUE(same_bits(got[l], want[l])) << all[b].name << " exp(" << x[c + l] << ")";
    }
  }
}

TEST(GgmlOrder, WeightedValuesSameBitsOnEveryBuildAndCloseToExact) {
  const auto all = builds();
  for (int slots : {16, 64}) {
    for (int64_t n : {64, 72, 128}) {
      const int64_t keys = 150, stride = n + 4, first = 5;
      std::vector<float> p = randf(keys, 0.1f, 4);
      for (float& w : p) w = f16_to_f32(f32_to_f16(std::fabs(w)));
      const std::vector<uint16_t> v = to_f16(randf(keys * stride, 1.0f, 5));
      auto run = [&](const Build& b) {
        std::vector<float> acc(static_cast<size_t>(slots * n), 0.0f), out(n);
        // Two calls, as two cache blocks arrive.
        b.accumulate_values(p.data(), v.data(), stride, 61, n, first, slots, acc.data());
        b.accumulate_values(p.data() + 61, v.data() + 61 * stride, stride, keys - 61, n,
                            first + 61, slots, acc.data());
        b.reduce_values(acc.data(), slots, n, out.data());
        return out;
      };
      const std::vector<float> want = run(all[0]);
      for (int64_t d = 0; d < n; ++d) {
        const auto [exact, mag] = exact_dot(p.data(), v.data() + d, stride, keys);
        EXPECT_NEAR(want[d], exact, 1e-6 * mag) << "slots " << slots << " n " << n << " d " << d;
      }
      for (size_t b = 1; b < all.size(); ++b) {
        const std::vector<float> got = run(all[b]);
        for (int64_t d = 0; d < n; ++d)
          EXPECT_TRUE(same_bits(got[d], want[d]))
              << all[b].name << " slots " << slots << " d " << d;
      }
    }
  }
}

TEST(GgmlOrder, SwigluSameBitsOnEveryBuildAndCloseToExact) {
  const auto all = builds();
  const int64_t n = 1536 + 7;  // a tail past the last 16-lane piece
  const std::vector<float> x = randf(n, 3.0f, 6), g = randf(n, 1.0f, 7);
  std::vector<float> want(n);
  all[0].swiglu(x.data(), g.data(), want.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double e = double(x[i]) / (1.0 + std::exp(-double(x[i]))) * g[i];
    EXPECT_NEAR(want[i], e, 1e-6 * std::fabs(e) + 1e-30) << x[i];
  }
  for (size_t b = 1; b < all.size(); ++b) {
    std::vector<float> got(n);
    all[b].swiglu(x.data(), g.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_TRUE(same_bits(got[i], want[i])) << all[b].name << " x " << x[i];
  }
}
