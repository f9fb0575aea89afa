// Each op against a plain reference written here in the most direct form, on random inputs
// with odd shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "runtime/cpu/isa.h"
#include "runtime/cpu/kquant.h"
#include "runtime/cpu/quant.h"
#include "runtime/ops.h"
#include "runtime/thread_pool.h"
#include "util/check.h"

using namespace vllm;

namespace {

std::mt19937 gen(1234);

Tensor gauss(std::initializer_list<int64_t> shape, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::F32);
  std::normal_distribution<float> d(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(gen);
  return t;
}

float max_abs_diff(const float* a, const float* b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Random but valid K-quant blocks: random bytes, with the f16 super-block scales replaced by
// small finite values (the layouts place them differently per type).
Tensor random_kquant(const Tensor& w, DType type) {
  const int64_t n = w.size(0), k = w.size(1);
  Tensor q = Tensor::empty({n, k}, type);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  auto* p = static_cast<uint8_t*>(q.raw());
  for (int64_t i = 0; i < q.nbytes(); ++i) p[i] = static_cast<uint8_t>(byte(gen));
  const DTypeInfo& info = dtype_info(type);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < k / info.block_size; ++b) {
      char* blk = q.row(r) + b * info.block_bytes;
      if (type == DType::Q6_K) {
        reinterpret_cast<BlockQ6_K*>(blk)->d = f32_to_f16(scale(gen));
      } else if (type == DType::Q5_0) {
        reinterpret_cast<BlockQ5_0*>(blk)->d = f32_to_f16(scale(gen) * 4);
      } else {  // Q4_K and Q5_K start with d, dmin
        reinterpret_cast<uint16_t*>(blk)[0] = f32_to_f16(scale(gen));
        reinterpret_cast<uint16_t*>(blk)[1] = f32_to_f16(scale(gen));
      }
    }
  return q;
}

// Quantise a random f32 [n, k] matrix to `type` (via the reference quantisers).
Tensor quantize(const Tensor& w, DType type) {
  const int64_t n = w.size(0), k = w.size(1);
  // Types without a quantiser here: random blocks (their dequantiser is checked against
  // gguf-py's in quant_oracle_test).
  if (type == DType::Q4_K || type == DType::Q5_K || type == DType::Q6_K || type == DType::Q5_0)
    return random_kquant(w, type);
  Tensor q = Tensor::empty({n, k}, type);
  for (int64_t r = 0; r < n; ++r) {
    const float* src = w.data<float>() + r * k;
    switch (type) {
      case DType::Q8_0: cpu::quantize_row_q8_0(src, reinterpret_cast<BlockQ8_0*>(q.row(r)), k); break;
      case DType::Q4_0: cpu::quantize_row_q4_0(src, reinterpret_cast<BlockQ4_0*>(q.row(r)), k); break;
      case DType::Q4_1: cpu::quantize_row_q4_1(src, reinterpret_cast<BlockQ4_1*>(q.row(r)), k); break;
      case DType::F16:
        for (int64_t i = 0; i < k; ++i) reinterpret_cast<uint16_t*>(q.row(r))[i] = f32_to_f16(src[i]);
        break;
      case DType::BF16:
        for (int64_t i = 0; i < k; ++i) reinterpret_cast<uint16_t*>(q.row(r))[i] = f32_to_bf16(src[i]);
        break;
      default: ADD_FAILURE() << "no quantiser";
    }
  }
  return q;
}

}  // namespace

TEST(Dtype, HalfConversionsRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  // Ties go to even: 1 + 2^-8 (half-way between two bf16 values) rounds down.
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
}

// matmul with each weight type against a double-precision reference on the dequantized
// weights; int8 paths also quantise activations, so their bound is looser.
class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, MatchesReference) {
  const DType type = GetParam();
  const bool k_quant = dtype_info(type).block_size == kQKK;
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 37, k_quant ? 256 : 64},
                         {7, 100, k_quant ? 512 : 96},
                         {33, 19, 256}}) {
    Tensor x = gauss({M, K});
    Tensor wf = gauss({N, K}, 0.5f);
    Tensor w = type == DType::F32 ? wf : quantize(wf, type);
    std::vector<float> wd(N * K);
    for (int64_t r = 0; r < N; ++r) cpu::dequantize_row(type, w.row(r), wd.data() + r * K, K);
    Tensor out = Tensor::empty({M, N}, DType::F32);
    matmul(x, w, out);
    // Activations are quantised to int8 for the block types (per 32 values, or per 256 as
    // Q8_K for the K-quants); KQuantDot below checks the K-quant sums without that error.
    // f16 / bf16 weights multiply activations rounded to their own type (as ggml and torch).
    const bool int8 = type != DType::F32 && type != DType::F16 && type != DType::BF16;
    auto activation = [&](int64_t i) {
      const float v = x.data<float>()[i];
      if (type == DType::F16) return double(f16_to_f32(f32_to_f16(v)));
      if (type == DType::BF16) return double(bf16_to_f32(f32_to_bf16(v)));
      return double(v);
    };
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          ref += activation(m * K + k) * wd[n * K + k];
          mag += std::fabs(activation(m * K + k) * wd[n * K + k]);
        }
        const double tol = int8 ? 0.01 * mag + 1e-3 : 1e-5 * mag + 1e-5;
        ASSERT_NEAR(out.data<float>()[m * N + n], ref, tol) << M << "x" << N << "x" << K;
      }
  }
}

// matmul_add adds each product into out inside the matmul's tiles: the same values, bit for
// bit, as matmul into a scratch followed by add (the CPU promises its arithmetic is unchanged
// by the fusion). Sizes cover partial tiles (N = 37) and the M > 1 tile loop.
TEST_P(MatmulTest, AccumulateEqualsMatmulThenAdd) {
  const DType type = GetParam();
  const bool k_quant = dtype_info(type).block_size == kQKK;
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 37, k_quant ? 256 : 64},
                         {33, 19, 256}}) {
    Tensor x = gauss({M, K}), residual = gauss({M, N});
    Tensor wf = gauss({N, K}, 0.5f);
    Tensor w = type == DType::F32 ? wf : quantize(wf, type);
    Tensor product = Tensor::empty({M, N}, DType::F32), want = Tensor::empty({M, N}, DType::F32);
    matmul(x, w, product);
    add(residual, product, want);
    Tensor scratch = Tensor::empty({M, N}, DType::F32);
    matmul_add(x, w, scratch, residual);
    for (int64_t i = 0; i < M * N; ++i)
      ASSERT_EQ(residual.data<float>()[i], want.data<float>()[i]) << M << "x" << N << "x" << K;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulTest,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                           DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q5_K,
                                           DType::Q6_K, DType::Q5_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Every compiled ISA variant of the int8 block dot gives the scalar result (same integer
// sums; only the float accumulation order differs).
TEST(QuantDot, IsaVariantsAgreeWithScalar) {
  const int64_t K = 32 * 37;
  Tensor wf = gauss({1, K}), xf = gauss({1, K});
  std::vector<cpu::BlockQ8_1> a(K / 32);
  cpu::quantize_row_q8_1(xf.data<float>(), a.data(), K);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0}) {
    Tensor w = quantize(wf, t);
    const float ref = cpu::qdot_scalar(t)(w.raw(), a.data(), K / 32);
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
      EXPECT_NEAR(cpu::avx2::qdot(t)(w.raw(), a.data(), K / 32), ref, 1e-3 * std::fabs(ref) + 1e-3);
    }
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl")) {
      EXPECT_NEAR(cpu::avx512::qdot(t)(w.raw(), a.data(), K / 32), ref, 1e-3 * std::fabs(ref) + 1e-3);
    }
  }
}

// Each of llama.cpp's K-quant kernel orders (runtime/cpu/kquant.h) sums the same integers:
// against the product of the dequantised weights and the dequantised Q8_K activations in
// double, only float rounding is left. (Which order gives llama.cpp's bits is checked by the
// Gemma-3 fixture, tests/model/test_gemma3_llamacpp.cpp.)
TEST(KQuantDot, EveryOrderEqualsDequantisedProduct) {
  const int64_t K = 256 * 5;
  Tensor xf = gauss({1, K}, 2.0f);
  xf.data<float>()[300] = 0.0f;
  std::fill(xf.data<float>() + 512, xf.data<float>() + 768, 0.0f);  // an all-zero super-block
  std::vector<cpu::BlockQ8_K> a(K / 256);
  cpu::quantize_row_q8_k(xf.data<float>(), a.data(), K);
  std::vector<double> xq(K);
  for (int64_t i = 0; i < K; ++i) {
    const cpu::BlockQ8_K& b = a[i / 256];
    xq[i] = double(b.d) * b.qs[i % 256];
    EXPECT_LE(std::fabs(xq[i] - xf.data<float>()[i]), std::fabs(b.d) * 0.5 + 1e-7) << i;
  }
  for (int j = 0; j < 16; ++j) {  // the 16-value sums the kernels use for mins and offsets
    int s = 0;
    for (int e = 0; e < 16; ++e) s += a[1].qs[16 * j + e];
    EXPECT_EQ(a[1].bsums[j], s);
  }
  Tensor wf = gauss({3, K});
  std::vector<float> wd(K);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    Tensor w = quantize(wf, t);
    for (int64_t r = 0; r < 3; ++r) {
      cpu::dequantize_row(t, w.row(r), wd.data(), K);
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < K; ++i) {
        ref += wd[i] * xq[i];
        mag += std::fabs(wd[i] * xq[i]);
      }
      for (cpu::KOrder o : {cpu::KOrder::kVecDot, cpu::KOrder::kRepackGemv,
                            cpu::KOrder::kRepackGemm, cpu::KOrder::kTiled}) {
        if (t != DType::Q4_K && (o == cpu::KOrder::kRepackGemv || o == cpu::KOrder::kRepackGemm))
          continue;  // only Q4_K is repacked
        EXPECT_NEAR(cpu::dot_kquant(t, o, w.row(r), a.data(), K / 256), ref, 1e-6 * mag)
            << dtype_name(t) << " order " << int(o) << " row " << r;
      }
    }
  }
  // llama.cpp's choice: Q4_K with rows in eights is repacked (gemm for rows in fours, gemv for
  // the rest); other K-quants go tiled from 8 activation rows, vec_dot below.
  EXPECT_EQ(cpu::kquant_order(DType::Q4_K, 640, 6, 3), cpu::KOrder::kRepackGemm);
  EXPECT_EQ(cpu::kquant_order(DType::Q4_K, 640, 6, 4), cpu::KOrder::kRepackGemv);
  EXPECT_EQ(cpu::kquant_order(DType::Q4_K, 100, 6, 0), cpu::KOrder::kVecDot);
  EXPECT_EQ(cpu::kquant_order(DType::Q6_K, 640, 8, 0), cpu::KOrder::kTiled);
  EXPECT_EQ(cpu::kquant_order(DType::Q6_K, 640, 7, 0), cpu::KOrder::kVecDot);
}

TEST(QuantDot, SimdActivationQuantiserMatchesScalar) {
  Tensor x = gauss({1, 32 * 41}, 3.0f);
  x.data<float>()[5] = 0.5f * 127.0f / 127.0f;  // exact halves exercise round-to-even
  std::fill(x.data<float>() + 64, x.data<float>() + 96, 0.0f);  // an all-zero block
  std::vector<cpu::BlockQ8_1> ref(41), got(41);
  cpu::quantize_row_q8_1(x.data<float>(), ref.data(), 32 * 41);
  cpu::quantize_row_q8_1_fast(x.data<float>(), got.data(), 32 * 41);
  for (int b = 0; b < 41; ++b) {
    EXPECT_EQ(ref[b].d, got[b].d) << b;
    EXPECT_EQ(ref[b].s, got[b].s) << b;
    for (int j = 0; j < 32; ++j) ASSERT_EQ(ref[b].qs[j], got[b].qs[j]) << b << ":" << j;
  }
}

TEST(Ops, RmsNorm) {
  const int64_t T = 5, D = 77;
  Tensor x = gauss({T, D}), w = gauss({D});
  Tensor out = Tensor::empty({T, D}, DType::F32);
  rms_norm(x, w, 1e-5f, out);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += double(x.data<float>()[t * D + i]) * x.data<float>()[t * D + i];
    const double inv = 1.0 / std::sqrt(ss / D + 1e-5);
    for (int64_t i = 0; i < D; ++i)
      ASSERT_NEAR(out.data<float>()[t * D + i], x.data<float>()[t * D + i] * inv * w.data<float>()[i], 1e-5);
  }
}

TEST(Ops, RmsNormPerHead) {
  Tensor x = gauss({3, 4, 16}), w = gauss({16});
  Tensor out = Tensor::empty({3, 4, 16}, DType::F32);
  rms_norm(x, w, 1e-6f, out);
  Tensor flat = x.reshape({12, 16});
  Tensor ref = Tensor::empty({12, 16}, DType::F32);
  rms_norm(flat, w, 1e-6f, ref);
  EXPECT_EQ(max_abs_diff(out.data<float>(), ref.data<float>(), 12 * 16), 0.0f);
}

TEST(Ops, EmbeddingGathersRows) {
  Tensor table = gauss({11, 64});
  Tensor q = quantize(table, DType::Q8_0);
  Tensor ids = Tensor::empty({4}, DType::I32);
  const int32_t idv[] = {3, 0, 10, 3};
  std::copy(idv, idv + 4, ids.data<int32_t>());
  Tensor out = Tensor::empty({4, 64}, DType::F32);
  embedding(ids, q, out);
  for (int i = 0; i < 4; ++i) {
    std::vector<float> row(64);
    cpu::dequantize_row(DType::Q8_0, q.row(idv[i]), row.data(), 64);
    EXPECT_EQ(max_abs_diff(out.data<float>() + i * 64, row.data(), 64), 0.0f);
  }
  ids.data<int32_t>()[1] = 11;
  EXPECT_THROW(embedding(ids, q, out), Error);
}

// A vocab-parallel shard holds rows [4, 9) of the table: the ids among them get their rows,
// the others zeros, and the shards' outputs add up to the whole embedding.
TEST(Ops, EmbeddingRowsOfAShardAddUpToTheWhole) {
  Tensor table = quantize(gauss({11, 64}), DType::Q8_0);
  Tensor ids = Tensor::empty({6}, DType::I32);
  const int32_t idv[] = {3, 4, 8, 9, 10, 4};
  std::copy(idv, idv + 6, ids.data<int32_t>());
  Tensor whole = Tensor::empty({6, 64}, DType::F32);
  embedding(ids, table, whole);
  Tensor sum = Tensor::empty({6, 64}, DType::F32);
  fill(sum, 0.0f);
  for (const auto& [first, rows] : {std::pair{0, 4}, {4, 5}, {9, 2}}) {
    Tensor out = Tensor::empty({6, 64}, DType::F32);
    fill(out, 7.0f);  // every row is written
    embedding_rows(ids, table.narrow(first, rows), first, out);
    for (int i = 0; i < 6; ++i) {
      const bool mine = idv[i] >= first && idv[i] < first + rows;
      for (int j = 0; j < 64; ++j)
        ASSERT_EQ(out.data<float>()[i * 64 + j], mine ? whole.data<float>()[i * 64 + j] : 0.0f)
            << "shard at " << first << ", id " << idv[i] << ", lane " << j;
    }
    add(sum, out, sum);
  }
  EXPECT_EQ(max_abs_diff(sum.data<float>(), whole.data<float>(), 6 * 64), 0.0f);
}

// A mixture-of-experts layer's scatter: each source row, weighted, added into its own row in
// order; the other rows keep what fill gave them; a row outside out is refused.
TEST(Ops, FillAndIndexAddScaled) {
  Tensor out = Tensor::empty({5, 3}, DType::F32);
  fill(out, 0.5f);
  Tensor src = Tensor::empty({2, 3}, DType::F32);
  const float sv[] = {1, 2, 3, 4, 5, 6};
  std::copy(sv, sv + 6, src.data<float>());
  Tensor rows = Tensor::empty({2}, DType::I32), w = Tensor::empty({2}, DType::F32);
  rows.data<int32_t>()[0] = 3;
  rows.data<int32_t>()[1] = 1;
  w.data<float>()[0] = 2.0f;
  w.data<float>()[1] = -1.0f;
  index_add_scaled(src, rows, w, out);
  const float want[] = {0.5f, 0.5f, 0.5f, -3.5f, -4.5f, -5.5f,
                        0.5f, 0.5f, 0.5f, 2.5f,  4.5f,  6.5f, 0.5f, 0.5f, 0.5f};
  for (int i = 0; i < 15; ++i) EXPECT_EQ(out.data<float>()[i], want[i]) << i;
  rows.data<int32_t>()[1] = 5;
  EXPECT_THROW(index_add_scaled(src, rows, w, out), Error);
}

TEST(Ops, RopeNeoxAndGptj) {
  const int64_t T = 3, H = 2, D = 12;
  for (bool neox : {true, false}) {
    RopeParams p;
    p.head_dim = D;
    p.rotary_dim = 8;  // partial rotation: the last 4 dims pass through
    p.neox = neox;
    p.mscale = 1.25f;
    for (int i = 0; i < 4; ++i) p.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / 8));
    Tensor x = gauss({T, H, D});
    std::vector<float> orig(x.data<float>(), x.data<float>() + T * H * D);
    Tensor pos = Tensor::empty({T}, DType::I32);
    pos.data<int32_t>()[0] = 0;
    pos.data<int32_t>()[1] = 5;
    pos.data<int32_t>()[2] = 1000;
    rope(x, pos, p);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float* o = orig.data() + (t * H + h) * D;
        const float* r = x.data<float>() + (t * H + h) * D;
        for (int i = 0; i < 4; ++i) {
          const int a = neox ? i : 2 * i, b = neox ? i + 4 : 2 * i + 1;
          const double th = double(pos.data<int32_t>()[t]) * p.inv_freq[i];
          EXPECT_NEAR(r[a], 1.25 * (o[a] * std::cos(th) - o[b] * std::sin(th)), 2e-4);
          EXPECT_NEAR(r[b], 1.25 * (o[b] * std::cos(th) + o[a] * std::sin(th)), 2e-4);
        }
        for (int i = 8; i < D; ++i) EXPECT_EQ(r[i], o[i]);
      }
  }
}

TEST(Ops, SiluAndMulSoftmaxAddBias) {
  Tensor gu = gauss({3, 2 * 45});
  Tensor out = Tensor::empty({3, 45}, DType::F32);
  silu_and_mul(gu, out);
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < 45; ++i) {
      const double g = gu.data<float>()[t * 90 + i], u = gu.data<float>()[t * 90 + 45 + i];
      EXPECT_NEAR(out.data<float>()[t * 45 + i], g / (1 + std::exp(-g)) * u, 1e-5);
    }
  Tensor x = gauss({4, 33}, 5.0f);
  Tensor sm = Tensor::empty({4, 33}, DType::F32);
  softmax(x, sm);
  for (int r = 0; r < 4; ++r) {
    double mx = -1e30, sum = 0;
    for (int i = 0; i < 33; ++i) mx = std::max(mx, double(x.data<float>()[r * 33 + i]));
    for (int i = 0; i < 33; ++i) sum += std::exp(x.data<float>()[r * 33 + i] - mx);
    for (int i = 0; i < 33; ++i)
      EXPECT_NEAR(sm.data<float>()[r * 33 + i], std::exp(x.data<float>()[r * 33 + i] - mx) / sum, 1e-6);
  }
  Tensor b = gauss({33});
  std::vector<float> before(x.data<float>(), x.data<float>() + 4 * 33);
  add_bias(x, b);
  for (int i = 0; i < 4 * 33; ++i) EXPECT_EQ(x.data<float>()[i], before[i] + b.data<float>()[i % 33]);
}

// Attention of several sequences at different offsets in one batch, GQA, with and without a
// sliding window, against dense attention over each sequence's full K/V history.
TEST(Ops, PagedAttentionMixedBatch) {
  const int64_t Hq = 6, Hkv = 2, D = 20, block = 4, num_blocks = 32;
  const std::vector<int> ctx = {9, 1, 14};    // context length of each sequence
  const std::vector<int> qlen = {9, 1, 3};    // new tokens: full prefill, decode, chunk
  for (int window : {0, 5}) {
    Tensor kc = Tensor::zeros({num_blocks, block, Hkv, D}, DType::F32);
    Tensor vc = Tensor::zeros({num_blocks, block, Hkv, D}, DType::F32);
    AttentionMeta meta;
    meta.max_blocks_per_seq = 4;
    meta.query_start_loc = {0};
    std::vector<std::vector<float>> K, V;  // dense history per sequence [ctx, Hkv, D]
    int next_block = num_blocks - 1;
    for (size_t s = 0; s < ctx.size(); ++s) {
      for (int j = 0; j < meta.max_blocks_per_seq; ++j) meta.block_tables.push_back(next_block--);
      meta.seq_lens.push_back(ctx[s]);
      meta.query_start_loc.push_back(meta.query_start_loc.back() + qlen[s]);
      Tensor k = gauss({ctx[s], Hkv, D}), v = gauss({ctx[s], Hkv, D});
      K.emplace_back(k.data<float>(), k.data<float>() + k.numel());
      V.emplace_back(v.data<float>(), v.data<float>() + v.numel());
      Tensor slots = Tensor::empty({ctx[s]}, DType::I32);
      for (int p = 0; p < ctx[s]; ++p)
        slots.data<int32_t>()[p] = meta.block_tables[s * 4 + p / block] * block + p % block;
      reshape_and_cache(k, v, kc, vc, slots);
    }
    const int64_t T = meta.query_start_loc.back();
    Tensor q = gauss({T, Hq, D});
    Tensor out = Tensor::empty({T, Hq, D}, DType::F32);
    const float scale = 0.3f;
    paged_attention(q, kc, vc, meta, scale, window, out);
    for (size_t s = 0; s < ctx.size(); ++s)
      for (int i = 0; i < qlen[s]; ++i) {
        const int64_t t = meta.query_start_loc[s] + i;
        const int p = ctx[s] - qlen[s] + i;
        for (int64_t h = 0; h < Hq; ++h) {
          const int64_t kh = h / (Hq / Hkv);
          std::vector<double> w;
          double mx = -1e30;
          const int first = window ? std::max(0, p - window + 1) : 0;
          for (int j = first; j <= p; ++j) {
            double sc = 0;
            for (int d = 0; d < D; ++d)
              sc += double(q.data<float>()[(t * Hq + h) * D + d]) * K[s][(j * Hkv + kh) * D + d];
            w.push_back(sc * scale);
            mx = std::max(mx, w.back());
          }
          double sum = 0;
          for (double& x : w) sum += (x = std::exp(x - mx));
          for (int d = 0; d < D; ++d) {
            double ref = 0;
            for (int j = first; j <= p; ++j) ref += w[j - first] / sum * V[s][(j * Hkv + kh) * D + d];
            ASSERT_NEAR(out.data<float>()[(t * Hq + h) * D + d], ref, 1e-5)
                << "seq " << s << " tok " << i << " head " << h << " window " << window;
          }
        }
      }
  }
}

TEST(Ops, FrontEndRejectsBadShapes) {
  Tensor x = gauss({2, 8}), w = gauss({3, 9});
  Tensor out = Tensor::empty({2, 3}, DType::F32);
  EXPECT_THROW(matmul(x, w, out), Error);
  Tensor wq = quantize(gauss({3, 64}), DType::Q8_0);
  Tensor bad = Tensor::empty({2, 4}, DType::F32);
  EXPECT_THROW(matmul(gauss({2, 64}), wq, bad), Error);  // out has the wrong width
  EXPECT_THROW(Tensor::empty({2, 33}, DType::Q4_0), Error);  // not block aligned
}

TEST(ThreadPool, ParallelForCoversRangeOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<int> hits(1001, 0);
    for (int rep = 0; rep < 50; ++rep)
      pool.parallel_for(1001, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
    for (int h : hits) ASSERT_EQ(h, 50);
  }
}
