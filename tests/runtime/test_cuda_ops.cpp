// Every op on CUDA against the CPU backend on the same random inputs (odd shapes, strided
// views), with the tolerance each op's arithmetic allows. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/backend.h"
#include "runtime/device.h"
#include "runtime/kernel_options.h"
#include "util/check.h"
#include "runtime/ops.h"

using namespace vllm;

namespace {

// scripts/gpu_check.sh runs these tests once per GEMV slicing, so that every slice count meets
// every shape: VLLM_TEST_GEMV_SLICES is this test binary's knob for it (the engine's is
// --gemv-slices), applied before any test runs.
const bool kGemvSlicesSet = [] {
  if (const char* e = std::getenv("VLLM_TEST_GEMV_SLICES")) {
    KernelOptions o = kernel_options();
    o.gemv_slices = std::atoi(e);
    set_kernel_options(o);
  }
  return true;
}();

const Device kGpu{DeviceKind::Cuda, 0};
std::mt19937 rng(4321);

Tensor randn(std::initializer_list<int64_t> shape, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::F32);
  std::normal_distribution<float> d(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// Host f32 tensor rounded to f16/bf16 storage.
Tensor to_half(const Tensor& t, DType dt) {
  Tensor h = Tensor::empty({t.size(0), t.size(1)}, dt);
  auto* p = static_cast<uint16_t*>(h.raw());
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = dt == DType::BF16 ? f32_to_bf16(t.data<float>()[i]) : f32_to_f16(t.data<float>()[i]);
  return h;
}

Tensor host(const Tensor& t) { return t.to(kCpu); }

// A host f16/bf16 matrix widened to f32: the reference weights for the GPU's GEMVs, which keep
// x in f32 (the CPU multiplies f16/bf16 weights by x rounded to their type, as ggml does).
Tensor widen(const Tensor& t) {
  if (t.dtype() == DType::F32) return t;
  Tensor f = Tensor::empty({t.size(0), t.size(1)}, DType::F32);
  const auto* p = static_cast<const uint16_t*>(t.raw());
  for (int64_t i = 0; i < t.numel(); ++i)
    f.data<float>()[i] = t.dtype() == DType::BF16 ? bf16_to_f32(p[i]) : f16_to_f32(p[i]);
  return f;
}

// ||a - b|| / ||b|| over all elements (both host, contiguous, f32).
double rel_err(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = double(a.data<float>()[i]) - b.data<float>()[i];
    if (std::isnan(a.data<float>()[i])) return INFINITY;
    num += d * d;
    den += double(b.data<float>()[i]) * b.data<float>()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  }
};

}  // namespace

TEST_F(CudaOps, MatmulMatchesCpu) {
  // f32 weights: a true f32 GEMM; f16/bf16 weights: up to 8 rows take the GEMV (x in f32,
  // against the f32 product of the same weights), more rows cuBLASLt with x rounded to the
  // weight's type on the GPU, so the bound is that rounding: ~2^-8 relative for bf16. K = 100 is not a multiple of 8: no GEMV.
  // K = 2056, 5000 and 14336 give the GEMV two and four warps per column, the last with two
  // rounds of loads per lane.
  const std::pair<DType, double> cases[] = {
      {DType::F32, 1e-6}, {DType::F16, 2e-3}, {DType::BF16, 1e-2}};
  for (auto [dt, tol] : cases)
    for (int64_t k : {136, 100, 2056, 5000, 14336})
    for (int64_t m : {1, 5, 8, 37, 300}) {
      Tensor x = randn({m, k});
      Tensor w32 = randn({70, k}, 0.1f);
      Tensor w = dt == DType::F32 ? w32 : to_half(w32, dt);
      Tensor ref = Tensor::empty({m, 70}, DType::F32);
      matmul(x, widen(w), ref);
      // Output into a strided slice of a wider buffer, as the fused projections do.
      Tensor wide = Tensor::empty({m, 90}, DType::F32, kGpu);
      Tensor out = wide.slice(1, 10, 70);
      matmul(x.to(kGpu), w.to(kGpu), out);
      Tensor got = Tensor::empty({m, 70}, DType::F32);
      Tensor whost = host(wide);
      for (int64_t r = 0; r < m; ++r)
        std::copy_n(whost.data<float>() + r * 90 + 10, 70, got.data<float>() + r * 70);
      EXPECT_LT(rel_err(got, ref), m <= 8 && k % 8 == 0 ? 1e-6 : tol)
          << dtype_name(dt) << " m=" << m << " k=" << k;
    }
}

namespace {

// [tokens, top_k] expert ids among experts 0 .. used - 1, distinct within each token, expert 0
// for every other token (so that it gets the most rows).
Tensor routed_ids(int64_t tokens, int top_k, int used) {
  Tensor ids = Tensor::empty({tokens, top_k}, DType::I32);
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < top_k; ++j)
      ids.data<int32_t>()[t * top_k + j] =
          j == 0 && t % 2 == 0 ? 0 : int32_t(1 + (t * 7 + j * 3) % (used - 1));
  for (int64_t t = 0; t < tokens; ++t) {  // make each token's experts distinct
    int32_t* row = ids.data<int32_t>() + t * top_k;
    for (int j = 1; j < top_k; ++j)
      while (std::find(row, row + j, row[j]) != row + j) row[j] = 1 + row[j] % (used - 1);
  }
  return ids;
}

// The largest relative error, over experts, of a grouped product `got` [S, n] (host) against
// the CPU's f32 product of each expert's rows of x [T, k] (token[r] for grouped row r, expert
// e's rows offsets[e] .. offsets[e + 1]) and its rows of w [E * n, k] f32.
double worst_expert_error(const Tensor& got, const Tensor& x, const Tensor& w,
                          const Tensor& token, const Tensor& offsets, int E) {
  const int64_t k = x.size(1), n = got.size(1);
  double worst = 0;
  for (int e = 0; e < E; ++e) {
    const int r0 = offsets.data<int32_t>()[e], r1 = offsets.data<int32_t>()[e + 1];
    if (r1 == r0) continue;
    Tensor xe = Tensor::empty({r1 - r0, k}, DType::F32);
    for (int r = r0; r < r1; ++r)
      std::copy_n(x.data<float>() + token.data<int32_t>()[r] * k, k,
                  xe.data<float>() + (r - r0) * k);
    Tensor ref = Tensor::empty({r1 - r0, n}, DType::F32);
    matmul(xe, w.narrow(e * n, n), ref);
    Tensor mine = Tensor::empty({r1 - r0, n}, DType::F32);
    std::copy_n(got.data<float>() + r0 * n, (r1 - r0) * n, mine.data<float>());
    worst = std::max(worst, rel_err(mine, ref));
  }
  return worst;
}

// Whether moe_matmul_silu of host x over w gives the bits of silu_and_mul over `product`, the
// plain moe_matmul of the same operands (on the GPU).
bool silu_fused_is_silu_of(const Tensor& product, const Tensor& x, const Tensor& w,
                           const MoePlan& plan) {
  const int64_t S = product.size(0), half = product.size(1) / 2;
  Tensor act = Tensor::empty({S, half}, DType::F32, kGpu);
  Tensor act_ref = Tensor::empty({S, half}, DType::F32, kGpu);
  silu_and_mul(product, act_ref);
  moe_matmul_silu(x.to(kGpu), plan.token, w, plan, act);
  const Tensor a1 = host(act), a2 = host(act_ref);
  return std::memcmp(a1.raw(), a2.raw(), size_t(S * half) * sizeof(float)) == 0;
}

}  // namespace

// The experts' grouped projection: experts averaging more than 8 rows take the tensor-core
// GEMM (x rounded to the weights' type; the reference rounds it the same way, so only the
// order of the f32 sums differs), fewer rows the GEMV (x in f32). The routing leaves some
// experts empty and gives expert 0 more than one 64-row tile; N = 200 leaves a partial column
// tile, K = 72 is no whole number of the GEMM's 64-wide steps (the GEMV takes it at any size).
TEST_F(CudaOps, MoeMatmulMatchesReference) {
  struct Case { int64_t tokens, k, n; int top_k; };
  // 1 to 3 tokens: the GEMV's one-, two- and four-row variants (decode).
  const Case cases[] = {{300, 256, 200, 4}, {197, 128, 384, 6}, {8, 256, 200, 2},
                        {300, 72, 64, 4},   {1, 256, 200, 6},   {2, 128, 96, 4},
                        {3, 72, 64, 2}};
  const int E = 16, used = 12;  // experts 12..15 get no rows
  for (DType dt : {DType::BF16, DType::F16})
    for (const Case& c : cases) {
      const int64_t S = c.tokens * c.top_k;
      const Tensor ids = routed_ids(c.tokens, c.top_k, used);
      Tensor x = randn({c.tokens, c.k});
      Tensor w32 = randn({E * c.n, c.k}, 0.1f);
      Tensor w = to_half(w32, dt);
      MoePlan plan;
      const Tensor gids = ids.to(kGpu);
      moe_align(gids, E, plan);
      Tensor out = Tensor::empty({S, c.n}, DType::F32, kGpu);
      Tensor wg = w.to(kGpu).reshape({E, c.n, c.k});
      moe_matmul(x.to(kGpu), plan.token, wg, plan, out);
      const Tensor got = host(out), token = host(plan.token), offsets = host(plan.offsets);
      const bool gemm = S > 8 * std::min<int64_t>(S, E) && c.k % 64 == 0;
      const Tensor xr = gemm ? widen(to_half(x, dt)) : x;
      for (int e = used; e < E; ++e)
        EXPECT_EQ(offsets.data<int32_t>()[e + 1], offsets.data<int32_t>()[e])
            << "expert " << e << " has no rows";
      EXPECT_LT(worst_expert_error(got, xr, widen(w), token, offsets, E), gemm ? 1e-5 : 1e-6)
          << dtype_name(dt) << " tokens=" << c.tokens << " k=" << c.k << " n=" << c.n;
      // Rows already in grouped order (the down projection's input): the same bits.
      Tensor xg = Tensor::empty({S, c.k}, DType::F32);
      for (int64_t r = 0; r < S; ++r)
        std::copy_n(x.data<float>() + token.data<int32_t>()[r] * c.k, c.k,
                    xg.data<float>() + r * c.k);
      Tensor out2 = Tensor::empty({S, c.n}, DType::F32, kGpu);
      moe_matmul(xg.to(kGpu), Tensor(), wg, plan, out2);
      const Tensor got2 = host(out2);
      EXPECT_EQ(0, std::memcmp(got.raw(), got2.raw(), size_t(S * c.n) * sizeof(float)))
          << "grouped rows in, " << dtype_name(dt) << " tokens=" << c.tokens;
      EXPECT_GT(offsets.data<int32_t>()[1] - offsets.data<int32_t>()[0], gemm ? 64 : 0);
      if (!gemm && c.tokens < 8) {  // the eight-row variant gives each row the same bits
        MoePlan wide = plan;
        wide.max_rows_per_expert = 8;
        Tensor out8 = Tensor::empty({S, c.n}, DType::F32, kGpu);
        moe_matmul(x.to(kGpu), wide.token, wg, wide, out8);
        const Tensor got8 = host(out8);
        EXPECT_EQ(0, std::memcmp(got.raw(), got8.raw(), size_t(S * c.n) * sizeof(float)))
            << "rows variant, " << dtype_name(dt) << " tokens=" << c.tokens;
      }
      // The activation fused into the product (the GEMV's epilogue; the GEMM runs the two ops):
      // the bits of silu_and_mul over the plain product.
      EXPECT_TRUE(silu_fused_is_silu_of(out, x, wg, plan))
          << "silu fused, " << dtype_name(dt) << " tokens=" << c.tokens << " n=" << c.n;
    }
}

namespace {

// e4m3 of v / s, back to f32 and times s: the value an FP8 quantizer with scale s keeps
// (clamped to +-448 first, as the kernels' saturating conversion).
float fp8_kept(float v, float s) {
  return fp8_e4m3_to_f32(f32_to_fp8_e4m3(std::clamp(v / s, -448.0f, 448.0f))) * s;
}

// E experts of [n, k] from w32 [E * n, k] on the GPU in dtype.h's GPU layout of FP8_E4M3
// (each expert's n x k e4m3 bytes, then its n f32 row scales), each half of an expert's rows
// with its own scale (gate and up, as --quantization fp8 quantizes them); deq gets the values
// kept.
Tensor gpu_fp8_experts(const Tensor& w32, int E, int64_t n, int64_t k, Tensor& deq) {
  Tensor out = Tensor::empty({E, n, k}, DType::FP8_E4M3);
  deq = Tensor::empty({E * n, k}, DType::F32);
  for (int e = 0; e < E; ++e) {
    auto* bytes = static_cast<uint8_t*>(out.raw()) + e * n * row_bytes(DType::FP8_E4M3, k);
    auto* scales = reinterpret_cast<float*>(bytes + n * k);
    for (int64_t r0 : {int64_t(0), n / 2}) {
      const float* w = w32.data<float>() + (e * n + r0) * k;
      float amax = 0;
      for (int64_t i = 0; i < n / 2 * k; ++i) amax = std::max(amax, std::fabs(w[i]));
      const float s = amax / 448.0f;
      for (int64_t i = 0; i < n / 2 * k; ++i) {
        bytes[r0 * k + i] = f32_to_fp8_e4m3(w[i] / s);
        deq.data<float>()[(e * n + r0) * k + i] = fp8_e4m3_to_f32(bytes[r0 * k + i]) * s;
      }
      std::fill_n(scales + r0, n / 2, s);
    }
  }
  Tensor g = Tensor::empty({E, n, k}, DType::FP8_E4M3, kGpu);  // FP8 has no Tensor::to
  backend_for(kGpu).copy(g.raw(), kGpu, out.raw(), kCpu, size_t(out.nbytes()));
  return g;
}

}  // namespace

// FP8 experts (--quantization fp8 or an FP8 checkpoint on a GPU). Steps of up to 4 tokens take
// the GEMV (x in f32): the CPU's f32 product of the dequantized weights, up to the order of the
// sums. More tokens with K a multiple of 128 are W8A8 on the e4m3 tensor cores: x quantized
// per token (amax / 448) as done here too; Hopper's FP8 MMAs accumulate with about 14 mantissa
// bits before f32 (DeepSeek-V3 report, sec. 3.3.2), so 1e-3. K = 160 takes the GEMV at any
// token count (its 8-row variant); 1, 2 and 3-4 tokens take the 1-, 2- and 4-row variants.
// Rows of x are quantized a warp a row up to K = 2048, a block a row beyond (K = 2560).
// Control: each path is farther than its bound from the other's reference (the W8A8 path's x
// really is e4m3, the GEMV's is not).
TEST_F(CudaOps, MoeMatmulFp8MatchesDequantizedWeights) {
  struct Case { int64_t tokens, k, n; int top_k; bool gemm; };
  const Case cases[] = {{300, 256, 200, 4, true}, {197, 128, 384, 6, true},
                        {300, 160, 64, 4, false}, {1, 256, 200, 6, false},
                        {3, 128, 96, 4, false},   {4, 2048, 1536, 8, false},
                        {5, 256, 200, 8, true},   {512, 2048, 1536, 8, true},
                        {40, 2560, 64, 4, true},  {2, 256, 200, 6, false}};
  const int E = 16, used = 12;
  for (const Case& c : cases) {
    const std::string what = "tokens=" + std::to_string(c.tokens) + " k=" +
                             std::to_string(c.k) + " n=" + std::to_string(c.n);
    const int64_t S = c.tokens * c.top_k;
    const Tensor ids = routed_ids(c.tokens, c.top_k, used);
    const Tensor x = randn({c.tokens, c.k});
    Tensor deq;
    const Tensor wg = gpu_fp8_experts(randn({E * c.n, c.k}, 0.1f), E, c.n, c.k, deq);
    MoePlan plan;
    moe_align(ids.to(kGpu), E, plan);
    Tensor out = Tensor::empty({S, c.n}, DType::F32, kGpu);
    moe_matmul(x.to(kGpu), plan.token, wg, plan, out);
    const Tensor got = host(out), token = host(plan.token), offsets = host(plan.offsets);
    Tensor xq = Tensor::empty({c.tokens, c.k}, DType::F32);  // per-token e4m3
    for (int64_t t = 0; t < c.tokens; ++t) {
      const float* xr = x.data<float>() + t * c.k;
      float amax = 0;
      for (int64_t i = 0; i < c.k; ++i) amax = std::max(amax, std::fabs(xr[i]));
      for (int64_t i = 0; i < c.k; ++i) xq.data<float>()[t * c.k + i] = fp8_kept(xr[i], amax / 448);
    }
    const auto worst_against = [&](const Tensor& xr) {
      return worst_expert_error(got, xr, deq, token, offsets, E);
    };
    const double bound = c.gemm ? 1e-3 : 1e-6;
    EXPECT_LT(worst_against(c.gemm ? xq : x), bound) << what;
    EXPECT_GT(worst_against(c.gemm ? x : xq), 10 * bound) << what << ": the other path ran";
    // The activation fused into the product: the bits of silu_and_mul over the plain product.
    EXPECT_TRUE(silu_fused_is_silu_of(out, x, wg, plan)) << "silu fused, " << what;
  }
}

// The plan by its definition: experts ascending, each expert's slots in slot order.
void expect_plan_is_the_sorted_slots(const Tensor& ids, int E, const MoePlan& plan,
                                     const std::string& what) {
  const int64_t S = ids.numel(), k = ids.size(1);
  std::vector<int64_t> order(S);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return ids.data<int32_t>()[a] < ids.data<int32_t>()[b];
  });
  const Tensor token = host(plan.token), position = host(plan.position),
               offsets = host(plan.offsets), active = host(plan.active);
  int mismatches = 0;
  for (int64_t r = 0; r < S; ++r) {
    mismatches += token.data<int32_t>()[r] != int32_t(order[r] / k);
    mismatches += position.data<int32_t>()[order[r]] != int32_t(r);
  }
  std::vector<int32_t> listed;
  for (int e = 0, off = 0; e <= E; ++e) {
    mismatches += offsets.data<int32_t>()[e] != off;
    if (e == E) break;
    const int n = int(std::count(ids.data<int32_t>(), ids.data<int32_t>() + S, e));
    if (n > 0) listed.push_back(e);
    off += n;
  }
  mismatches += active.data<int32_t>()[0] != int32_t(listed.size());
  for (size_t i = 0; i < listed.size(); ++i) mismatches += active.data<int32_t>()[1 + i] != listed[i];
  EXPECT_EQ(mismatches, 0) << what;
}

// Routing and grouping in one launch (decode steps of up to 32 tokens; one warp groups up to
// 32 slots) give the bits of the two separate ops; above 32 tokens the op falls back to them.
// The plans match their definition.
// Shapes: DeepSeek-V2-Lite (64 experts + 2 shared, softmax, top 6), Qwen3-MoE (128, top 8,
// normalized), DeepSeek-V3 (256 + 1 shared, sigmoid with bias, 8 groups keep 4, top-2 sums).
TEST_F(CudaOps, MoeRouteAlignMatchesSeparateOps) {
  struct Case { int E, shared, top_k, groups, topk_groups; bool sigmoid; };
  const Case cases[] = {{64, 2, 6, 1, 1, false}, {128, 0, 8, 1, 1, false},
                        {256, 1, 8, 8, 4, true}};
  for (const Case& c : cases)
    for (int64_t T : {1, 2, 4, 7, 32, 33, 300}) {  // up to 32 slots: the one-warp grouping
      const std::string what = "E=" + std::to_string(c.E) + " T=" + std::to_string(T);
      MoeRouting r;
      r.top_k = c.top_k;
      r.sigmoid = c.sigmoid;
      r.num_groups = c.groups;
      r.topk_groups = c.topk_groups;
      r.group_top2 = c.sigmoid;
      r.normalize = c.E == 128;
      r.scaling = c.sigmoid ? 2.5f : 1.0f;
      r.shared = c.shared;
      const Tensor scores = randn({T, c.E}).to(kGpu);
      const Tensor bias = c.sigmoid ? randn({c.E}, 0.1f).to(kGpu) : Tensor();
      const int width = c.top_k + c.shared, experts = c.E + c.shared;
      Tensor ids[2], weights[2], margins[2];
      MoePlan plans[2];
      for (int fused = 0; fused < 2; ++fused) {
        ids[fused] = Tensor::empty({T, width}, DType::I32, kGpu);
        weights[fused] = Tensor::empty({T, width}, DType::F32, kGpu);
        margins[fused] = Tensor::empty({T}, DType::F32, kGpu);
        if (fused) {
          moe_route_align(scores, bias, r, ids[1], weights[1], margins[1], experts, plans[1]);
        } else {
          moe_route(scores, bias, r, ids[0], weights[0], margins[0]);
          moe_align(ids[0], experts, plans[0]);
        }
      }
      const auto same = [&](const Tensor& a, const Tensor& b, const char* name) {
        const Tensor ha = host(a), hb = host(b);
        EXPECT_EQ(0, std::memcmp(ha.raw(), hb.raw(), size_t(ha.numel()) * 4)) << name << " " << what;
      };
      same(ids[0], ids[1], "ids");
      same(weights[0], weights[1], "weights");
      same(margins[0], margins[1], "margins");
      same(plans[0].token, plans[1].token, "token");
      same(plans[0].position, plans[1].position, "position");
      same(plans[0].offsets, plans[1].offsets, "offsets");
      // active: its count, then that many experts (the entries past them are not written).
      const Tensor a0 = host(plans[0].active), a1 = host(plans[1].active);
      const int listed = a0.data<int32_t>()[0];
      EXPECT_TRUE(std::equal(a0.data<int32_t>(), a0.data<int32_t>() + 1 + listed,
                             a1.data<int32_t>()))
          << "active " << what;
      expect_plan_is_the_sorted_slots(host(ids[1]), experts, plans[1], what);
      if (!c.sigmoid) {  // softmax, no groups, no bias: the top_k largest scores, best first
        const Tensor z = host(scores), chosen = host(ids[1]);
        for (int64_t t = 0; t < T; ++t) {
          std::vector<int> order(size_t(c.E));
          std::iota(order.begin(), order.end(), 0);
          const float* row = z.data<float>() + t * c.E;
          std::stable_sort(order.begin(), order.end(),
                           [&](int a, int b) { return row[a] > row[b]; });
          for (int j = 0; j < c.top_k; ++j)
            ASSERT_EQ(chosen.data<int32_t>()[t * width + j], order[size_t(j)])
                << what << " token " << t << " rank " << j;
        }
      }
    }
}

// The routing's top-k against its definition where scores tie and are NaN: the top_k largest
// (sigmoid keeps the order of the scores, integers -2..2 tie often), ties to the lower index,
// NaN below every number. Expert counts that take each width of the kernel's top-k (up to 64:
// rank counts; beyond: the search for the k-th key), all-equal scores, every k.
TEST_F(CudaOps, MoeRouteTopKTiesAndNaN) {
  std::uniform_int_distribution<int> value(-2, 2), percent(0, 99);
  for (int E : {20, 40, 64, 100, 128, 200, 256, 300, 512}) {
    for (int k : {1, 7, 8, 32}) {
      if (k > E) continue;
      const int64_t T = 4;
      Tensor z = Tensor::empty({T, E}, DType::F32);
      for (int64_t t = 0; t < T; ++t)
        for (int e = 0; e < E; ++e) {
          float v = t == 0 ? 1.0f : float(value(rng));  // token 0: all equal
          if (t == 3 && percent(rng) < 10) v = NAN;
          z.data<float>()[t * E + e] = v;
        }
      MoeRouting r;
      r.top_k = k;
      r.sigmoid = true;
      Tensor ids = Tensor::empty({T, k}, DType::I32, kGpu);
      Tensor weights = Tensor::empty({T, k}, DType::F32, kGpu);
      Tensor margins;
      moe_route(z.to(kGpu), Tensor(), r, ids, weights, margins);
      const Tensor got = host(ids);
      for (int64_t t = 0; t < T; ++t) {
        const float* row = z.data<float>() + t * E;
        const auto key = [&](int e) { return std::isnan(row[e]) ? -INFINITY : row[e]; };
        std::vector<int> order(static_cast<size_t>(E));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int a, int b) { return key(a) > key(b); });
        for (int j = 0; j < k; ++j)
          ASSERT_EQ(got.data<int32_t>()[t * k + j], order[size_t(j)])
              << "E=" << E << " k=" << k << " token " << t << " rank " << j;
      }
    }
  }
}

// The grouping over more experts than one block has threads (the prefix sums then run in
// chunks of experts) and more slots than one chunk: its definition.
TEST_F(CudaOps, MoeAlignManyExperts) {
  const int E = 1400, k = 3;
  const int64_t T = 700;
  Tensor ids = Tensor::empty({T, k}, DType::I32);
  std::uniform_int_distribution<int> pick(0, E - 1);
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      int32_t* row = ids.data<int32_t>() + t * k;
      do row[j] = t % 5 == 0 ? pick(rng) % 40 : pick(rng);  // some experts get many rows
      while (std::find(row, row + j, row[j]) != row + j);
    }
  MoePlan plan;
  moe_align(ids.to(kGpu), E, plan);
  expect_plan_is_the_sorted_slots(ids, E, plan, "E=1400");
}

// The weighted sum back into the tokens: experts in ascending order whatever order the router
// listed them in, then the extra rows (shared experts), then added to out (accumulate). H = 300
// leaves the second column block partial.
TEST_F(CudaOps, MoeCombineSumsInExpertOrder) {
  const int64_t T = 5, H = 300;
  const int k = 3, E = 8;
  const int32_t chosen[T][k] = {{5, 1, 3}, {0, 7, 2}, {2, 0, 1}, {6, 4, 5}, {1, 3, 7}};
  Tensor ids = Tensor::empty({T, k}, DType::I32);
  std::copy_n(&chosen[0][0], T * k, ids.data<int32_t>());
  Tensor weights = randn({T, k}), y = randn({T * k, H}), extra = randn({T, H}),
         base = randn({T, H});
  MoePlan plan;
  const Tensor gids = ids.to(kGpu);
  moe_align(gids, E, plan);
  const Tensor position = host(plan.position);
  for (bool with_extra : {false, true})
    for (bool accumulate : {false, true}) {
      Tensor ref = Tensor::empty({T, H}, DType::F32);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<int> order(k);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(),
                  [&](int a, int b) { return chosen[t][a] < chosen[t][b]; });
        for (int64_t c = 0; c < H; ++c) {
          float acc = 0.0f;
          for (int j : order)
            acc += weights.data<float>()[t * k + j] *
                   y.data<float>()[position.data<int32_t>()[t * k + j] * H + c];
          if (with_extra) acc += extra.data<float>()[t * H + c];
          ref.data<float>()[t * H + c] = accumulate ? base.data<float>()[t * H + c] + acc : acc;
        }
      }
      Tensor out = base.to(kGpu);
      moe_combine(y.to(kGpu), gids, weights.to(kGpu), plan, out,
                  with_extra ? extra.to(kGpu) : Tensor(), accumulate);
      EXPECT_LT(rel_err(host(out), ref), 1e-6) << "extra " << with_extra << " accumulate "
                                               << accumulate;
    }
}

TEST_F(CudaOps, FusedMatmulsMatchCpu) {
  // Up to 8 rows the GPU runs each fusion as one GEMV, x in f32; the reference is the CPU's
  // plain ops on the weights widened to f32: the norm scale is applied after the dot product instead of before, so the bound
  // is summation and rescaling order (1e-5); accumulation adds the same product (1e-6). More
  // rows: the GPU's plain ops, or cuBLASLt with beta = 1 for accumulation, x rounded to the
  // weight's type (bounds as in MatmulMatchesCpu). F = 71 leaves the last GEMV block half
  // used; K = 5000 gives the silu pairs several rounds of loads per lane.
  const int64_t F = 71;
  const std::pair<DType, double> cases[] = {{DType::F16, 2e-3}, {DType::BF16, 1e-2}};
  for (auto [dt, tol] : cases)
    for (int64_t k : {136, 2056, 5000})
      for (int64_t m : {1, 3, 8, 37}) {
        const bool gemv = m <= 8;
        Tensor x = randn({m, k}), g = randn({k}), res = randn({m, F});
        Tensor w = to_half(randn({F, k}, 0.1f), dt), w2 = to_half(randn({2 * F, k}, 0.1f), dt);
        Tensor xg = x.to(kGpu), gg = g.to(kGpu), wg = w.to(kGpu), w2g = w2.to(kGpu);
        Tensor normed = Tensor::empty({m, k}, DType::F32);
        Tensor normed_g = Tensor::empty({m, k}, DType::F32, kGpu);
        Tensor ref = Tensor::empty({m, F}, DType::F32), out = Tensor::empty({m, F}, DType::F32, kGpu);
        rms_norm_matmul(x, g, 1e-5f, widen(w), normed, ref);
        rms_norm_matmul(xg, gg, 1e-5f, wg, normed_g, out);
        EXPECT_LT(rel_err(host(out), ref), gemv ? 1e-5 : tol)
            << "norm " << dtype_name(dt) << " m=" << m << " k=" << k;
        // The same, keeping the normed rows (the GEMV's first block writes them): they are
        // rms_norm's up to the order of the sum of squares.
        Tensor kept = Tensor::empty({m, k}, DType::F32);  // NaN where nothing wrote
        std::fill_n(kept.data<float>(), m * k, std::nanf(""));
        Tensor kept_g = kept.to(kGpu);
        out = Tensor::empty({m, F}, DType::F32, kGpu);
        rms_norm_matmul_keep(xg, gg, 1e-5f, wg, kept_g, out);
        EXPECT_LT(rel_err(host(out), ref), gemv ? 1e-5 : tol)
            << "norm, kept " << dtype_name(dt) << " m=" << m << " k=" << k;
        EXPECT_LT(rel_err(host(kept_g), normed), 1e-6)
            << "normed rows " << dtype_name(dt) << " m=" << m << " k=" << k;
        Tensor gu = Tensor::empty({m, 2 * F}, DType::F32);
        Tensor gu_g = Tensor::empty({m, 2 * F}, DType::F32, kGpu);
        rms_norm_matmul_silu(x, g, 1e-5f, widen(w2), normed, gu, ref);
        rms_norm_matmul_silu(xg, gg, 1e-5f, w2g, normed_g, gu_g, out);
        EXPECT_LT(rel_err(host(out), ref), gemv ? 1e-5 : tol)
            << "norm+silu " << dtype_name(dt) << " m=" << m << " k=" << k;
        Tensor acc_g = res.to(kGpu), product = Tensor::empty({m, F}, DType::F32);
        Tensor product_g = Tensor::empty({m, F}, DType::F32, kGpu);
        matmul_add(x, widen(w), product, res);
        matmul_add(xg, wg, product_g, acc_g);
        EXPECT_LT(rel_err(host(acc_g), res), gemv ? 1e-6 : tol)
            << "accumulate " << dtype_name(dt) << " m=" << m << " k=" << k;
      }
}

TEST_F(CudaOps, NormedQkvRopeCacheMatchesCpu) {
  // Up to 8 rows with 16-bit weights and caches the GPU projects, rotates and caches in one
  // GEMV; the CPU runs rms_norm, matmul (weights widened to f32), rope and reshape_and_cache
  // into f32 caches. Bounds:
  // FusedMatmulsMatchCpu's 1e-5 for the projection (the rotation adds an ulp or two), plus the
  // cache type's rounding for the caches. 12 rows: the GPU's plain ops, x rounded for cuBLASLt.
  const int Hq = 4, Hkv = 2, D = 64;
  const int64_t width = (Hq + 2 * Hkv) * D, blocks = 4, bs = 4, row = Hkv * D;
  RopeParams p;
  p.head_dim = p.rotary_dim = D;
  p.mscale = 1.05f;
  for (int i = 0; i < D / 2; ++i) p.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / D));
  const std::pair<DType, double> cases[] = {{DType::F16, 0x1p-11}, {DType::BF16, 0x1p-8}};
  for (auto [dt, rounding] : cases)
    for (int64_t k : {136, 2056})
      for (int64_t m : {1, 3, 8, 12}) {
        const bool gemv = m <= 8;
        const double tol = gemv ? 1e-5 : (dt == DType::BF16 ? 1e-2 : 2e-3);
        Tensor x = randn({m, k}), g = randn({k});
        Tensor w = to_half(randn({width, k}, 0.1f), dt);
        Tensor pos = Tensor::empty({m}, DType::I32), slots = Tensor::empty({m}, DType::I32);
        for (int64_t t = 0; t < m; ++t) {
          pos.data<int32_t>()[t] = int32_t(7 * t + 3);
          slots.data<int32_t>()[t] = t == 1 ? -1 : int32_t(t);  // one padding row
        }
        Tensor normed = Tensor::empty({m, k}, DType::F32), qkv = Tensor::empty({m, width}, DType::F32);
        Tensor kc = Tensor::zeros({blocks, bs, Hkv, D}, DType::F32);
        Tensor vc = Tensor::zeros({blocks, bs, Hkv, D}, DType::F32);
        rms_norm_matmul_rope_cache(x, g, 1e-5f, widen(w), normed, qkv, Hq, pos, p, kc, vc, slots);
        Tensor normed_g = Tensor::empty({m, k}, DType::F32, kGpu);
        Tensor qkv_g = Tensor::empty({m, width}, DType::F32, kGpu);
        Tensor kc_g = Tensor::zeros({blocks, bs, Hkv, D}, dt).to(kGpu);
        Tensor vc_g = Tensor::zeros({blocks, bs, Hkv, D}, dt).to(kGpu);
        rms_norm_matmul_rope_cache(x.to(kGpu), g.to(kGpu), 1e-5f, w.to(kGpu), normed_g, qkv_g, Hq,
                                   pos.to(kGpu), p, kc_g, vc_g, slots.to(kGpu));
        const std::string what = std::string(dtype_name(dt)) + " m=" + std::to_string(m) +
                                 " k=" + std::to_string(k);
        EXPECT_LT(rel_err(host(qkv_g), qkv), tol) << what;
        Tensor kh = host(kc_g), vh = host(vc_g);
        Tensor got = Tensor::empty({2, blocks * bs * row}, DType::F32);
        Tensor want = Tensor::empty({2, blocks * bs * row}, DType::F32);
        for (int64_t i = 0; i < blocks * bs * row; ++i) {
          const auto* kp = static_cast<const uint16_t*>(kh.raw());
          const auto* vp = static_cast<const uint16_t*>(vh.raw());
          got.data<float>()[i] = dt == DType::F16 ? f16_to_f32(kp[i]) : bf16_to_f32(kp[i]);
          got.data<float>()[blocks * bs * row + i] =
              dt == DType::F16 ? f16_to_f32(vp[i]) : bf16_to_f32(vp[i]);
          want.data<float>()[i] = kc.data<float>()[i];
          want.data<float>()[blocks * bs * row + i] = vc.data<float>()[i];
        }
        EXPECT_LT(rel_err(got, want), tol + rounding) << "caches " << what;
      }
}

TEST_F(CudaOps, NormedQkvRopeCacheE4m3HoldsTheRotatedRowsRounded) {
  // The same projection into e4m3 caches (the GEMV's epilogue writes them for up to 8 rows;
  // 12 rows take the plain ops): every cached byte is the rotated k or v value that the call
  // also returns in qkv, clamped to +-448 and rounded to nearest even, as the CPU rounds it.
  // Weights of scale 10 put some values past 448, so the clamp is exercised.
  const int Hq = 4, Hkv = 2, D = 128;
  const int64_t width = (Hq + 2 * Hkv) * D, blocks = 3, bs = 4, row = Hkv * D;
  RopeParams p;
  p.head_dim = p.rotary_dim = D;
  for (int i = 0; i < D / 2; ++i) p.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / D));
  for (DType dt : {DType::BF16, DType::F16})
    for (int64_t m : {1, 3, 8, 12}) {
      const int64_t k = 520;
      Tensor x = randn({m, k}), g = randn({k});
      Tensor w = to_half(randn({width, k}, 10.0f), dt);
      Tensor pos = Tensor::empty({m}, DType::I32), slots = Tensor::empty({m}, DType::I32);
      for (int64_t t = 0; t < m; ++t) {
        pos.data<int32_t>()[t] = int32_t(5 * t + 1);
        slots.data<int32_t>()[t] = t == 1 ? -1 : int32_t(t);  // one padding row
      }
      Tensor normed_g = Tensor::empty({m, k}, DType::F32, kGpu);
      Tensor qkv_g = Tensor::empty({m, width}, DType::F32, kGpu);
      std::vector<uint8_t> canary(size_t(blocks * bs * row), 0x5a);
      Tensor kc = Tensor::empty({blocks, bs, Hkv, D}, DType::F8_E4M3);
      std::memcpy(kc.raw(), canary.data(), canary.size());
      Tensor kc_g = kc.to(kGpu), vc_g = kc.to(kGpu);
      rms_norm_matmul_rope_cache(x.to(kGpu), g.to(kGpu), 1e-5f, w.to(kGpu), normed_g, qkv_g, Hq,
                                 pos.to(kGpu), p, kc_g, vc_g, slots.to(kGpu));
      const Tensor qkv = host(qkv_g), kh = host(kc_g), vh = host(vc_g);
      const std::string what = std::string(dtype_name(dt)) + " m=" + std::to_string(m);
      int clamped = 0;
      for (int64_t t = 0; t < m; ++t) {
        const int32_t slot = slots.data<int32_t>()[t];
        if (slot < 0) continue;
        for (int kv = 0; kv < 2; ++kv)
          for (int64_t i = 0; i < row; ++i) {
            const float v = qkv.data<float>()[t * width + (Hq + kv * Hkv) * D + i];
            const auto* bytes = static_cast<const uint8_t*>((kv ? vh : kh).raw());
            clamped += std::fabs(v) > 448.0f;
            ASSERT_EQ(bytes[slot * row + i], f32_to_fp8_e4m3(std::clamp(v, -448.0f, 448.0f)))
                << what << " token " << t << (kv ? " v " : " k ") << i;
          }
      }
      EXPECT_GT(clamped, 0) << what << ": no element past e4m3's range";
      // The padding row's slot and the slots past the rows keep the canary.
      for (int kv = 0; kv < 2; ++kv) {
        const auto* bytes = static_cast<const uint8_t*>((kv ? vh : kh).raw());
        for (int64_t i = m * row; i < blocks * bs * row; ++i)
          ASSERT_EQ(bytes[i], 0x5a) << what << " byte " << i << " past the written slots";
        if (m > 1) {
          for (int64_t i = row; i < 2 * row; ++i)
            ASSERT_EQ(bytes[i], 0x5a) << what << " slot 1 (padding row) written";
        }
      }
    }
}

TEST_F(CudaOps, EmbeddingExact) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    Tensor t32 = randn({50, 72});
    Tensor table = dt == DType::F32 ? t32 : to_half(t32, dt);
    Tensor ids = Tensor::empty({5}, DType::I32);
    const int32_t v[] = {49, 0, 7, 7, 23};
    std::copy(v, v + 5, ids.data<int32_t>());
    Tensor ref = Tensor::empty({5, 72}, DType::F32);
    embedding(ids, table, ref);
    Tensor out = Tensor::empty({5, 72}, DType::F32, kGpu);
    embedding(ids.to(kGpu), table.to(kGpu), out);
    EXPECT_EQ(rel_err(host(out), ref), 0.0) << dtype_name(dt);
    // A vocab-parallel shard of rows [7, 30): ids 49 and 0 are outside it and get zero rows.
    Tensor shard_ref = Tensor::empty({5, 72}, DType::F32);
    embedding_rows(ids, table.narrow(7, 23), 7, shard_ref);
    Tensor shard = Tensor::empty({5, 72}, DType::F32, kGpu);
    fill(shard, 3.0f);
    embedding_rows(ids.to(kGpu), table.narrow(7, 23).to(kGpu), 7, shard);
    EXPECT_EQ(rel_err(host(shard), shard_ref), 0.0) << dtype_name(dt) << " shard";
    EXPECT_EQ(host(shard).data<float>()[0], 0.0f) << "id 49 is not in the shard";
  }
}

TEST_F(CudaOps, FillAndIndexAddScaledMatchCpu) {
  Tensor src = randn({6, 72});
  Tensor rows = Tensor::empty({6}, DType::I32), w = randn({6});
  const int32_t r[] = {9, 0, 4, 11, 2, 7};
  std::copy(r, r + 6, rows.data<int32_t>());
  Tensor ref = Tensor::empty({12, 72}, DType::F32);
  fill(ref, 0.25f);
  index_add_scaled(src, rows, w, ref);
  Tensor out = Tensor::empty({12, 72}, DType::F32, kGpu);
  fill(out, 0.25f);
  index_add_scaled(src.to(kGpu), rows.to(kGpu), w.to(kGpu), out);
  EXPECT_EQ(rel_err(host(out), ref), 0.0);
}

TEST_F(CudaOps, NormsAddsActivations) {
  const int64_t T = 7, D = 200;
  Tensor x = randn({T, D}), res = randn({T, D}), w = randn({D});
  // rms_norm [T, D]
  Tensor ref = Tensor::empty({T, D}, DType::F32), out = Tensor::empty({T, D}, DType::F32, kGpu);
  rms_norm(x, w, 1e-6f, ref);
  rms_norm(x.to(kGpu), w.to(kGpu), 1e-6f, out);
  EXPECT_LT(rel_err(host(out), ref), 1e-6);
  // Per-head norm on a strided view: the k part of a fused qkv row.
  Tensor qkv = randn({T, 3 * 48});
  Tensor k = qkv.slice(1, 48, 48).split_last(3);
  Tensor kw = randn({16});
  Tensor qkv_g = qkv.to(kGpu);
  Tensor k_g = qkv_g.slice(1, 48, 48).split_last(3);
  rms_norm(k, kw, 1e-5f, k);
  rms_norm(k_g, kw.to(kGpu), 1e-5f, k_g);
  EXPECT_LT(rel_err(host(qkv_g), qkv), 1e-6);
  // silu_and_mul, softmax, add, add_bias
  Tensor gu = randn({T, 2 * 333}), act = Tensor::empty({T, 333}, DType::F32);
  Tensor act_g = Tensor::empty({T, 333}, DType::F32, kGpu);
  silu_and_mul(gu, act);
  silu_and_mul(gu.to(kGpu), act_g);
  EXPECT_LT(rel_err(host(act_g), act), 1e-6);
  // More rows than one grid dimension holds (65,535): a MoE prefill of 8,192 tokens routed to
  // 8 experts each has 65,536.
  {
    Tensor many = randn({70000, 2 * 8}), many_act = Tensor::empty({70000, 8}, DType::F32);
    Tensor many_g = Tensor::empty({70000, 8}, DType::F32, kGpu);
    silu_and_mul(many, many_act);
    silu_and_mul(many.to(kGpu), many_g);
    EXPECT_LT(rel_err(host(many_g), many_act), 1e-6);
  }
  // gelu_tanh_and_mul (the CPU's is checked against transformers by the Gemma-3 fixture)
  gelu_tanh_and_mul(gu, act);
  gelu_tanh_and_mul(gu.to(kGpu), act_g);
  EXPECT_LT(rel_err(host(act_g), act), 1e-6);
  // The f16 variant (the CPU's is ggml's table, checked by the Gemma-3 llama.cpp fixture): the
  // same f16 roundings, so only tanhf's last bit may move a value by one f16 step.
  gelu_tanh_f16_and_mul(gu, act);
  gelu_tanh_f16_and_mul(gu.to(kGpu), act_g);
  EXPECT_LT(rel_err(host(act_g), act), 1e-3);
  // scale, in place on a strided view
  Tensor wide = randn({T, 2 * D});
  Tensor wide_g = wide.to(kGpu);
  Tensor half = wide.slice(1, D, D), half_g = wide_g.slice(1, D, D);
  scale(half, 0.3f);
  scale(half_g, 0.3f);
  EXPECT_EQ(rel_err(host(wide_g), wide), 0.0);
  Tensor logits = randn({T, 1001}, 4.0f), sm = Tensor::empty({T, 1001}, DType::F32);
  Tensor sm_g = Tensor::empty({T, 1001}, DType::F32, kGpu);
  softmax(logits, sm);
  softmax(logits.to(kGpu), sm_g);
  EXPECT_LT(rel_err(host(sm_g), sm), 1e-5);
  Tensor sum = Tensor::empty({T, D}, DType::F32), sum_g = Tensor::empty({T, D}, DType::F32, kGpu);
  add(x, res, sum);
  add(x.to(kGpu), res.to(kGpu), sum_g);
  EXPECT_EQ(rel_err(host(sum_g), sum), 0.0);
  Tensor bias = randn({D});
  Tensor xb = x.to(kGpu);
  add_bias(x, bias);
  add_bias(xb, bias.to(kGpu));
  EXPECT_EQ(rel_err(host(xb), x), 0.0);
}

TEST_F(CudaOps, RopeAllModes) {
  const int64_t T = 5, H = 3, D = 64;
  for (int mode = 0; mode < 3; ++mode) {
    RopeParams p;
    p.head_dim = D;
    p.rotary_dim = mode == 1 ? 32 : 64;  // partial rotation in GPT-J mode
    p.neox = mode != 1;
    p.mscale = mode == 0 ? 1.1f : 1.0f;
    for (int i = 0; i < p.rotary_dim / 2; ++i)
      p.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / p.rotary_dim));
    if (mode == 2) {  // ggml's chained theta with per-pair divisors (GGUF llama-3)
      p.ggml_theta = true;
      p.theta_scale = std::pow(500000.0f, -2.0f / p.rotary_dim);
      for (int i = 0; i < p.rotary_dim / 2; ++i) p.freq_factors.push_back(1.0f + 0.1f * i);
    }
    Tensor x = randn({T, H, D});
    Tensor pos = Tensor::empty({T}, DType::I32);
    const int32_t pv[] = {0, 1, 17, 4095, 120000};
    std::copy(pv, pv + T, pos.data<int32_t>());
    Tensor xg = x.to(kGpu);
    rope(x, pos, p);
    rope(xg, pos.to(kGpu), p);
    // sincosf and std::sin/cos each round within an ulp or two; angles reach 1.2e5 rad.
    EXPECT_LT(rel_err(host(xg), x), 1e-6) << "mode " << mode;
  }
}

TEST_F(CudaOps, RopeAndCacheMatchesCpu) {
  // One kernel rotates q and k and writes the rotated k and v into the caches; the CPU runs
  // rope then reshape_and_cache into an f32 cache. Bounds: rope's 1e-6 (RopeAllModes), plus
  // the cache type's rounding, 2^-11 for f16 and 2^-8 for bf16.
  const int64_t T = 5, Hq = 4, Hkv = 2, D = 64, blocks = 3, bs = 4, row = Hkv * D;
  RopeParams p;
  p.head_dim = p.rotary_dim = D;
  for (int i = 0; i < D / 2; ++i) p.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / D));
  Tensor qkv = randn({T, (Hq + 2 * Hkv) * D});
  Tensor pos = Tensor::empty({T}, DType::I32), slots = Tensor::empty({T}, DType::I32);
  const int32_t pv[] = {3, 4, 5, 900, 0}, sv[] = {0, 1, 2, -1, 11};
  std::copy(pv, pv + T, pos.data<int32_t>());
  std::copy(sv, sv + T, slots.data<int32_t>());
  const auto views = [&](Tensor& t) {
    return std::array<Tensor, 3>{t.slice(1, 0, (Hq + Hkv) * D).split_last(Hq + Hkv),
                                 t.slice(1, Hq * D, row).split_last(Hkv),
                                 t.slice(1, (Hq + Hkv) * D, row).split_last(Hkv)};
  };
  auto [qk, k, v] = views(qkv);
  Tensor kc = Tensor::empty({blocks, bs, Hkv, D}, DType::F32);
  Tensor vc = Tensor::empty({blocks, bs, Hkv, D}, DType::F32);
  const Tensor qkv_in = qkv.to(kGpu);  // before the CPU rotates qkv in place
  rope_and_cache(qk, pos, p, k, v, kc, vc, slots);
  const std::pair<DType, double> cases[] = {
      {DType::F32, 1e-6}, {DType::F16, 1e-6 + 0x1p-11}, {DType::BF16, 1e-6 + 0x1p-8}};
  for (const auto& [case_dt, tol] : cases) {
    const DType dt = case_dt;  // a lambda below captures it (clang 14: not a binding)
    Tensor g = host(qkv_in).to(kGpu);
    auto [qk_g, k_g, v_g] = views(g);
    Tensor kc_g = Tensor::empty({blocks, bs, Hkv, D}, dt, kGpu);
    Tensor vc_g = Tensor::empty({blocks, bs, Hkv, D}, dt, kGpu);
    rope_and_cache(qk_g, pos.to(kGpu), p, k_g, v_g, kc_g, vc_g, slots.to(kGpu));
    EXPECT_LT(rel_err(host(g), qkv), 1e-6) << dtype_name(dt);
    Tensor kh = host(kc_g), vh = host(vc_g);
    const auto at = [&](const Tensor& c, int64_t i) {
      if (dt == DType::F32) return c.data<float>()[i];
      const uint16_t b = static_cast<const uint16_t*>(c.raw())[i];
      return dt == DType::F16 ? f16_to_f32(b) : bf16_to_f32(b);
    };
    for (int64_t t = 0; t < T; ++t) {
      if (sv[t] < 0) continue;
      Tensor got = Tensor::empty({2, row}, DType::F32), want = Tensor::empty({2, row}, DType::F32);
      for (int64_t i = 0; i < row; ++i) {
        got.data<float>()[i] = at(kh, sv[t] * row + i);
        got.data<float>()[row + i] = at(vh, sv[t] * row + i);
        want.data<float>()[i] = kc.data<float>()[sv[t] * row + i];
        want.data<float>()[row + i] = vc.data<float>()[sv[t] * row + i];
      }
      EXPECT_LT(rel_err(got, want), tol) << dtype_name(dt) << " token " << t;
    }
  }
}

// The fused rotation into an e4m3 cache (--kv-cache-dtype fp8) stores, byte for byte, what
// the same kernel stores into an f32 cache, clamped to +-448 and rounded to nearest even (the
// CPU backend's conversion). Inputs scaled so that some elements pass 448.
TEST_F(CudaOps, RopeAndCacheE4m3HoldsTheF32CacheRounded) {
  const int64_t T = 5, Hq = 4, Hkv = 2, D = 128, blocks = 3, bs = 4, row = Hkv * D;
  RopeParams p;
  p.head_dim = p.rotary_dim = D;
  for (int i = 0; i < D / 2; ++i) p.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / D));
  const Tensor qkv = randn({T, (Hq + 2 * Hkv) * D}, 200.0f);
  Tensor pos = Tensor::empty({T}, DType::I32), slots = Tensor::empty({T}, DType::I32);
  const int32_t pv[] = {3, 4, 5, 900, 0}, sv[] = {0, 1, 2, -1, 11};
  std::copy(pv, pv + T, pos.data<int32_t>());
  std::copy(sv, sv + T, slots.data<int32_t>());
  std::array<Tensor, 2> k_caches, v_caches;
  const DType types[] = {DType::F32, DType::F8_E4M3};
  for (int c = 0; c < 2; ++c) {
    Tensor g = qkv.to(kGpu);
    Tensor qk = g.slice(1, 0, (Hq + Hkv) * D).split_last(Hq + Hkv);
    Tensor k = g.slice(1, Hq * D, row).split_last(Hkv);
    Tensor v = g.slice(1, (Hq + Hkv) * D, row).split_last(Hkv);
    Tensor kc = Tensor::empty({blocks, bs, Hkv, D}, types[c], kGpu);
    Tensor vc = Tensor::empty({blocks, bs, Hkv, D}, types[c], kGpu);
    rope_and_cache(qk, pos.to(kGpu), p, k, v, kc, vc, slots.to(kGpu));
    k_caches[c] = host(kc), v_caches[c] = host(vc);
  }
  int clamped = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (sv[t] < 0) continue;
    for (int64_t i = sv[t] * row; i < (sv[t] + 1) * row; ++i)
      for (int kv = 0; kv < 2; ++kv) {
        const float x = (kv ? v_caches : k_caches)[0].data<float>()[i];
        const uint8_t b = static_cast<const uint8_t*>((kv ? v_caches : k_caches)[1].raw())[i];
        clamped += std::fabs(x) > 448.0f;
        ASSERT_EQ(b, f32_to_fp8_e4m3(std::clamp(x, -448.0f, 448.0f))) << "token " << t << " " << i;
      }
  }
  EXPECT_GT(clamped, 0) << "no element past e4m3's range: the clamp went untested";
}

TEST_F(CudaOps, QkNormRopeAndCacheMatchesPlainOps) {
  // Qwen3's per-head q/k norms inside the rotation kernel, against the GPU's own plain ops
  // (rms_norm of the q heads and of the k heads, then rope_and_cache): the same bits where a
  // head has at most 128 lanes (rms_norm reduces such a row in one warp, in the fused kernel's
  // order), within 1e-6 at 256. And against the CPU's plain ops: within rope's 1e-6.
  const int64_t T = 5, Hq = 4, Hkv = 2, blocks = 3, bs = 4;
  for (int64_t D : {64, 128, 256}) {
    const int64_t row = Hkv * D;
    RopeParams p;
    p.head_dim = p.rotary_dim = int(D);
    for (int i = 0; i < D / 2; ++i) p.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / D));
    Tensor qkv = randn({T, (Hq + 2 * Hkv) * D}), qw = randn({D}), kw = randn({D});
    Tensor pos = Tensor::empty({T}, DType::I32), slots = Tensor::empty({T}, DType::I32);
    const int32_t pv[] = {3, 4, 5, 900, 0}, sv[] = {0, 1, 2, -1, 11};
    std::copy(pv, pv + T, pos.data<int32_t>());
    std::copy(sv, sv + T, slots.data<int32_t>());
    const auto views = [&](Tensor& t) {
      return std::array<Tensor, 3>{t.slice(1, 0, (Hq + Hkv) * D).split_last(Hq + Hkv),
                                   t.slice(1, Hq * D, row).split_last(Hkv),
                                   t.slice(1, (Hq + Hkv) * D, row).split_last(Hkv)};
    };
    const Tensor qkv_in = qkv.to(kGpu);
    const Tensor qw_g = qw.to(kGpu), kw_g = kw.to(kGpu), pos_g = pos.to(kGpu);
    const Tensor slots_g = slots.to(kGpu);
    const float eps = 1e-6f;
    // The CPU (plain ops).
    auto [qk, k, v] = views(qkv);
    Tensor kc = Tensor::zeros({blocks, bs, Hkv, D}, DType::F32);
    Tensor vc = Tensor::zeros({blocks, bs, Hkv, D}, DType::F32);
    qk_norm_rope_and_cache(qk, HeadNorms{&qw, &kw, eps, int(Hq)}, pos, p, k, v, kc, vc, slots);
    // The GPU, fused.
    Tensor fused = host(qkv_in).to(kGpu);
    auto [qk_f, k_f, v_f] = views(fused);
    Tensor kc_f = Tensor::zeros({blocks, bs, Hkv, D}, DType::F32).to(kGpu);
    Tensor vc_f = Tensor::zeros({blocks, bs, Hkv, D}, DType::F32).to(kGpu);
    qk_norm_rope_and_cache(qk_f, HeadNorms{&qw_g, &kw_g, eps, int(Hq)}, pos_g, p, k_f, v_f,
                           kc_f, vc_f, slots_g);
    // The GPU, plain ops.
    Tensor plain = host(qkv_in).to(kGpu);
    auto [qk_p, k_p, v_p] = views(plain);
    Tensor q_p = qk_p.slice(1, 0, Hq);
    rms_norm(q_p, qw_g, eps, q_p);
    rms_norm(k_p, kw_g, eps, k_p);
    Tensor kc_p = Tensor::zeros({blocks, bs, Hkv, D}, DType::F32).to(kGpu);
    Tensor vc_p = Tensor::zeros({blocks, bs, Hkv, D}, DType::F32).to(kGpu);
    rope_and_cache(qk_p, pos_g, p, k_p, v_p, kc_p, vc_p, slots_g);
    const Tensor f = host(fused), pl = host(plain), kf = host(kc_f), kp = host(kc_p);
    if (D <= 128) {
      EXPECT_EQ(0, std::memcmp(f.raw(), pl.raw(), size_t(f.nbytes()))) << "D=" << D;
      EXPECT_EQ(0, std::memcmp(kf.raw(), kp.raw(), size_t(kf.nbytes()))) << "D=" << D;
    } else {
      EXPECT_LT(rel_err(f, pl), 1e-6) << "D=" << D;
      EXPECT_LT(rel_err(kf, kp), 1e-6) << "D=" << D;
    }
    EXPECT_LT(rel_err(f, qkv), 1e-6) << "against the CPU, D=" << D;
    EXPECT_LT(rel_err(kf, kc), 1e-6) << "k cache against the CPU, D=" << D;
    EXPECT_LT(rel_err(host(vc_f), vc), 1e-7) << "v cache against the CPU, D=" << D;
  }
}

TEST_F(CudaOps, MlaRopeAndCacheMatchesPlainOps) {
  // MLA's latent norm, query and key rotations and cache write in one kernel, against the GPU's
  // own plain ops (rms_norm, copy_strided, rope twice, reshape_and_cache): the same bits, the
  // cache row's padding lanes (a canary) untouched; and the rotations against the CPU within
  // rope's 1e-6. DeepSeek's widths (16 heads, latent 512 + 64 rotary lanes in a 640-lane row),
  // then a narrow latent whose norm takes one warp.
  struct Case { int64_t heads, lat, nope, rot, width; };
  const int64_t T = 5, blocks = 3, bs = 4;
  const uint16_t canary = 0x7fc1;  // a bf16 NaN
  for (const Case& c : {Case{16, 512, 128, 64, 640}, Case{2, 96, 16, 32, 136}}) {
    const int64_t qw = c.heads * (c.nope + c.rot), cols = qw + c.lat + c.rot;
    RopeParams p;
    p.head_dim = p.rotary_dim = int(c.rot);
    p.mscale = 1.07f;
    for (int i = 0; i < c.rot / 2; ++i)
      p.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / float(c.rot)));
    Tensor qkv = randn({T, cols}), norm = randn({c.lat});
    Tensor pos = Tensor::empty({T}, DType::I32), slots = Tensor::empty({T}, DType::I32);
    const int32_t pv[] = {3, 4, 5, 900, 0}, sv[] = {0, 1, 2, -1, 11};
    std::copy(pv, pv + T, pos.data<int32_t>());
    std::copy(sv, sv + T, slots.data<int32_t>());
    Tensor cache0 = Tensor::empty({blocks, bs, 1, c.width}, DType::BF16);
    std::fill_n(static_cast<uint16_t*>(cache0.raw()), cache0.numel(), canary);
    struct Run { Tensor qkv, q_latent, cache; };
    const auto run = [&](Device d, bool fused) {
      Run r{qkv.to(d), Tensor::zeros({T, c.heads, c.lat + c.rot}, DType::F32).to(d),
            d == kCpu ? Tensor::zeros({blocks, bs, 1, c.width}, DType::F32) : cache0.to(d)};
      Tensor latent = r.qkv.slice(1, qw, c.lat);
      Tensor k_pe = r.qkv.slice(1, qw + c.lat, c.rot).split_last(1);
      const Tensor q_pe_in = r.qkv.slice(1, 0, qw).split_last(c.heads).slice(2, c.nope, c.rot);
      Tensor q_pe = r.q_latent.slice(2, c.lat, c.rot);
      Tensor c_lanes = r.cache.slice(3, 0, c.lat), pe_lanes = r.cache.slice(3, c.lat, c.rot);
      const Tensor g = norm.to(d), ps = pos.to(d), ss = slots.to(d);
      if (fused) {
        mla_rope_and_cache(latent, g, 1e-6f, q_pe_in, q_pe, k_pe, ps, p, c_lanes, pe_lanes, ss);
      } else {
        rms_norm(latent, g, 1e-6f, latent);
        copy_strided(q_pe_in, q_pe);
        rope(q_pe, ps, p);
        rope(k_pe, ps, p);
        reshape_and_cache(latent.split_last(1), k_pe, c_lanes, pe_lanes, ss);
      }
      return Run{host(r.qkv), host(r.q_latent), host(r.cache)};
    };
    const Run fused = run(kGpu, true), plain = run(kGpu, false), cpu = run(kCpu, true);
    const std::string what = "heads=" + std::to_string(c.heads) + " lat=" + std::to_string(c.lat);
    EXPECT_EQ(0, std::memcmp(fused.qkv.raw(), plain.qkv.raw(), size_t(fused.qkv.nbytes()))) << what;
    EXPECT_EQ(0, std::memcmp(fused.q_latent.raw(), plain.q_latent.raw(),
                             size_t(fused.q_latent.nbytes()))) << what;
    EXPECT_EQ(0, std::memcmp(fused.cache.raw(), plain.cache.raw(), size_t(fused.cache.nbytes())))
        << what;
    const auto* bits = static_cast<const uint16_t*>(fused.cache.raw());
    int64_t written = 0, canaries = 0;
    for (int64_t slot = 0; slot < blocks * bs; ++slot)
      for (int64_t i = 0; i < c.width; ++i) {
        const uint16_t b = bits[slot * c.width + i];
        if (i >= c.lat + c.rot) canaries += b == canary;
        else written += b != canary;
      }
    EXPECT_EQ(canaries, blocks * bs * (c.width - c.lat - c.rot)) << "padding lanes, " << what;
    EXPECT_EQ(written, 4 * (c.lat + c.rot)) << "the four real slots' lanes, " << what;
    EXPECT_LT(rel_err(fused.qkv, cpu.qkv), 1e-6) << what;
    EXPECT_LT(rel_err(fused.q_latent, cpu.q_latent), 1e-6) << what;
  }
}

TEST_F(CudaOps, ReshapeAndCacheAllDtypes) {
  const int64_t T = 6, Hkv = 2, D = 24, blocks = 5, bs = 4;
  Tensor k = randn({T, Hkv, D}), v = randn({T, Hkv, D});
  Tensor slots = Tensor::empty({T}, DType::I32);
  const int32_t sv[] = {19, 0, -1, 7, 8, 3};  // -1: padding, skipped
  std::copy(sv, sv + T, slots.data<int32_t>());
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    Tensor kc = Tensor::empty({blocks, bs, Hkv, D}, dt, kGpu);
    Tensor vc = Tensor::empty({blocks, bs, Hkv, D}, dt, kGpu);
    reshape_and_cache(k.to(kGpu), v.to(kGpu), kc, vc, slots.to(kGpu));
    Tensor kh = host(kc), vh = host(vc);
    for (int64_t t = 0; t < T; ++t) {
      if (sv[t] < 0) continue;
      for (int64_t i = 0; i < Hkv * D; ++i) {
        const float kr = k.data<float>()[t * Hkv * D + i], vr = v.data<float>()[t * Hkv * D + i];
        const int64_t at = sv[t] * Hkv * D + i;
        float kg, vg;
        if (dt == DType::F32) {
          kg = kh.data<float>()[at], vg = vh.data<float>()[at];
        } else {
          const auto* kp = static_cast<const uint16_t*>(kh.raw());
          const auto* vp = static_cast<const uint16_t*>(vh.raw());
          kg = dt == DType::F16 ? f16_to_f32(kp[at]) : bf16_to_f32(kp[at]);
          vg = dt == DType::F16 ? f16_to_f32(vp[at]) : bf16_to_f32(vp[at]);
          const float kx = dt == DType::F16 ? f16_to_f32(f32_to_f16(kr)) : bf16_to_f32(f32_to_bf16(kr));
          const float vx = dt == DType::F16 ? f16_to_f32(f32_to_f16(vr)) : bf16_to_f32(f32_to_bf16(vr));
          ASSERT_EQ(kg, kx);
          ASSERT_EQ(vg, vx);
          continue;
        }
        ASSERT_EQ(kg, kr);
        ASSERT_EQ(vg, vr);
      }
    }
  }
}

namespace {

// Sequences of the given context and query lengths over a paged cache of num_blocks blocks of
// bs slots, in shuffled blocks.
AttentionMeta paged_meta(const std::vector<int>& ctx, const std::vector<int>& qlen, int64_t bs,
                         int64_t num_blocks) {
  AttentionMeta meta;
  meta.max_blocks_per_seq =
      static_cast<int>((*std::max_element(ctx.begin(), ctx.end()) + bs - 1) / bs);
  meta.query_start_loc = {0};
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (size_t s = 0; s < ctx.size(); ++s) {
    const int64_t used = (ctx[s] + bs - 1) / bs;
    for (int j = 0; j < meta.max_blocks_per_seq; ++j)
      meta.block_tables.push_back(j < used ? ids[next++] : 0);
    meta.seq_lens.push_back(ctx[s]);
    meta.query_start_loc.push_back(meta.query_start_loc.back() + qlen[s]);
  }
  return meta;
}

// The cache slots of sequence s's positions (host i32).
Tensor seq_slots(const AttentionMeta& meta, size_t s, int64_t bs) {
  const int ctx = meta.seq_lens[s];
  Tensor slots = Tensor::empty({ctx}, DType::I32);
  const int32_t* table = meta.block_tables.data() + s * meta.max_blocks_per_seq;
  for (int p = 0; p < ctx; ++p) slots.data<int32_t>()[p] = table[p / bs] * bs + p % bs;
  return slots;
}

// meta with the device copies the CUDA kernels read.
AttentionMeta on_gpu(const AttentionMeta& meta) {
  auto upload = [](const std::vector<int32_t>& v) {
    return Tensor::from_blob(const_cast<int32_t*>(v.data()), std::vector<int64_t>{int64_t(v.size())},
                             DType::I32, nullptr)
        .to(kGpu);
  };
  AttentionMeta gm = meta;
  gm.device_query_start_loc = upload(meta.query_start_loc);
  gm.device_seq_lens = upload(meta.seq_lens);
  gm.device_block_tables = upload(meta.block_tables);
  return gm;
}

}  // namespace

// A mixed batch (full prefill, decode, chunked prefill, one long decode that takes the
// split-KV path), GQA, with and without a sliding window.
TEST_F(CudaOps, PagedAttentionMatchesCpu) {
  const int64_t Hq = 8, Hkv = 2, bs = 16;
  const std::vector<int> ctx = {33, 1, 70, 3000};
  const std::vector<int> qlen = {33, 1, 5, 1};
  int64_t num_blocks = 3;
  for (int c : ctx) num_blocks += (c + bs - 1) / bs;
  for (int64_t D : {16, 64, 128}) {
    for (int window : {0, 40}) {
      // CPU f32 cache and GPU f32 cache filled from the same K/V.
      Tensor kc = Tensor::empty({num_blocks, bs, Hkv, D}, DType::F32);
      Tensor vc = Tensor::empty({num_blocks, bs, Hkv, D}, DType::F32);
      Tensor kc_g = Tensor::empty({num_blocks, bs, Hkv, D}, DType::F32, kGpu);
      Tensor vc_g = Tensor::empty({num_blocks, bs, Hkv, D}, DType::F32, kGpu);
      const AttentionMeta meta = paged_meta(ctx, qlen, bs, num_blocks);
      for (size_t s = 0; s < ctx.size(); ++s) {
        Tensor k = randn({ctx[s], Hkv, D}), v = randn({ctx[s], Hkv, D});
        const Tensor slots = seq_slots(meta, s, bs);
        reshape_and_cache(k, v, kc, vc, slots);
        reshape_and_cache(k.to(kGpu), v.to(kGpu), kc_g, vc_g, slots.to(kGpu));
      }
      const int64_t T = meta.query_start_loc.back();
      Tensor q = randn({T, Hq, D});
      const float scale = 1.0f / std::sqrt(float(D));
      Tensor ref = Tensor::empty({T, Hq, D}, DType::F32);
      paged_attention(q, kc, vc, meta, scale, window, ref);
      Tensor out = Tensor::empty({T, Hq, D}, DType::F32, kGpu);
      paged_attention(q.to(kGpu), kc_g, vc_g, on_gpu(meta), scale, window, out);
      EXPECT_LT(rel_err(host(out), ref), 1e-5) << "D=" << D << " window=" << window;
    }
  }
}

// MLA's latent cache: one row [c | k_pe | padding] per token, written through lane views; the
// query [W_UK^T q_nope | q_pe] attends with the whole row as key and c as value. Head counts
// that fill one, two and a partial head group of the kernel's blocks; a long decode that splits
// the keys; windows. The padding lanes hold NaN on both sides, so a kernel reading them fails.
TEST_F(CudaOps, MlaAttentionMatchesCpu) {
  const int64_t bs = 16;
  const std::vector<int> ctx = {33, 1, 70, 3000};
  const std::vector<int> qlen = {33, 1, 5, 1};
  int64_t num_blocks = 3;
  for (int c : ctx) num_blocks += (c + bs - 1) / bs;
  struct Shape { int64_t lat, rot, width, heads; };
  for (const Shape& sh : {Shape{48, 16, 80, 4}, Shape{512, 64, 576, 16}, Shape{64, 32, 128, 20}}) {
    const int64_t dk = sh.lat + sh.rot;
    Tensor nan_rows = Tensor::empty({num_blocks, bs, 1, sh.width}, DType::F32);
    std::fill(nan_rows.data<float>(), nan_rows.data<float>() + nan_rows.numel(), NAN);
    Tensor row = nan_rows, row_g = nan_rows.to(kGpu);
    Tensor c_lanes = row.slice(3, 0, sh.lat), pe_lanes = row.slice(3, sh.lat, sh.rot);
    Tensor c_lanes_g = row_g.slice(3, 0, sh.lat), pe_lanes_g = row_g.slice(3, sh.lat, sh.rot);
    const AttentionMeta meta = paged_meta(ctx, qlen, bs, num_blocks);
    for (size_t s = 0; s < ctx.size(); ++s) {
      // c and k_pe as the model has them: column ranges of one wider row per token.
      Tensor kv = randn({ctx[s], sh.lat + sh.rot + 8});
      Tensor c = kv.slice(1, 0, sh.lat).split_last(1), pe = kv.slice(1, sh.lat, sh.rot).split_last(1);
      Tensor kv_g = kv.to(kGpu);
      const Tensor slots = seq_slots(meta, s, bs);
      reshape_and_cache(c, pe, c_lanes, pe_lanes, slots);
      reshape_and_cache(kv_g.slice(1, 0, sh.lat).split_last(1),
                        kv_g.slice(1, sh.lat, sh.rot).split_last(1), c_lanes_g, pe_lanes_g,
                        slots.to(kGpu));
    }
    const int64_t T = meta.query_start_loc.back();
    Tensor q_wide = randn({T, sh.heads, dk + 4});
    Tensor q = q_wide.slice(2, 0, dk), q_g = q_wide.to(kGpu).slice(2, 0, dk);
    const float scale = 1.0f / std::sqrt(float(dk));
    for (int window : {0, 40, 1000}) {
      Tensor ref = Tensor::empty({T, sh.heads, sh.lat}, DType::F32);
      paged_attention(q, row.slice(3, 0, dk), c_lanes, meta, scale, window, ref);
      Tensor out = Tensor::empty({T, sh.heads, sh.lat}, DType::F32, kGpu);
      paged_attention(q_g, row_g.slice(3, 0, dk), c_lanes_g, on_gpu(meta), scale, window, out);
      EXPECT_LT(rel_err(host(out), ref), 1e-5)
          << "lat=" << sh.lat << " rot=" << sh.rot << " heads=" << sh.heads << " window=" << window;
    }
    // The cache writes: every lane the CPU wrote, the GPU wrote the same; padding untouched.
    Tensor back = host(row_g);
    for (int64_t i = 0; i < back.numel(); ++i) {
      const float a = back.data<float>()[i], b = row.data<float>()[i];
      ASSERT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << "cache element " << i;
    }
  }
}

// The same over a 16-bit latent cache at DeepSeek's widths (latent 512 + rotary 64), which takes
// the tensor-core kernel (mla_decode.cu): one and a partial head group, a row padded past its
// 576 lanes with NaN, a long decode that splits the keys, windows. The reference is the CPU
// kernel over an f32 copy of the very cache the GPU reads; bars as for the 16-bit GQA kernel
// below (q and the softmax weights are rounded to the cache's type).
TEST_F(CudaOps, MlaAttention16BitCacheMatchesCpu) {
  const int64_t lat = 512, rot = 64, dk = lat + rot;
  const std::vector<int> ctx = {33, 1, 70, 3000, 129};
  const std::vector<int> qlen = {33, 1, 5, 1, 1};
  // Pages of 16 and of 24 tokens: the kernel's page lookup has a path for powers of two.
  for (const int64_t bs : {int64_t(16), int64_t(24)}) {
    int64_t num_blocks = 3;
    for (int c : ctx) num_blocks += (c + bs - 1) / bs;
    for (DType dt : {DType::BF16, DType::F16}) {
      const double l2_bar = dt == DType::BF16 ? 1e-2 : 2e-3;
      const double max_bar = dt == DType::BF16 ? 3e-2 : 6e-3;
      const uint16_t nan16 = dt == DType::BF16 ? 0x7FC0 : 0x7E00;
      for (auto [width, heads] : {std::pair<int64_t, int64_t>{576, 16}, {640, 20}}) {
        Tensor nan_rows = Tensor::empty({num_blocks, bs, 1, width}, dt);
        std::fill_n(static_cast<uint16_t*>(nan_rows.raw()), nan_rows.numel(), nan16);
        Tensor row_g = nan_rows.to(kGpu);
        Tensor c_lanes_g = row_g.slice(3, 0, lat), pe_lanes_g = row_g.slice(3, lat, rot);
        const AttentionMeta meta = paged_meta(ctx, qlen, bs, num_blocks);
        for (size_t s = 0; s < ctx.size(); ++s) {
          Tensor kv_g = randn({ctx[s], dk + 8}).to(kGpu);
          reshape_and_cache(kv_g.slice(1, 0, lat).split_last(1),
                            kv_g.slice(1, lat, rot).split_last(1), c_lanes_g, pe_lanes_g,
                            seq_slots(meta, s, bs).to(kGpu));
        }
        Tensor back = host(row_g), row = Tensor::empty({num_blocks, bs, 1, width}, DType::F32);
        const auto* p = static_cast<const uint16_t*>(back.raw());
        for (int64_t i = 0; i < row.numel(); ++i)
          row.data<float>()[i] = dt == DType::BF16 ? bf16_to_f32(p[i]) : f16_to_f32(p[i]);
        const int64_t T = meta.query_start_loc.back();
        Tensor q_wide = randn({T, heads, dk + 4});
        Tensor q = q_wide.slice(2, 0, dk), q_g = q_wide.to(kGpu).slice(2, 0, dk);
        const float scale = 1.0f / std::sqrt(float(dk));
        for (int window : {0, 40, 1000}) {
          Tensor ref = Tensor::empty({T, heads, lat}, DType::F32);
          paged_attention(q, row.slice(3, 0, dk), row.slice(3, 0, lat), meta, scale, window, ref);
          Tensor out = Tensor::empty({T, heads, lat}, DType::F32, kGpu);
          paged_attention(q_g, row_g.slice(3, 0, dk), c_lanes_g, on_gpu(meta), scale, window, out);
          Tensor got = host(out);
          double max_diff = 0, max_ref = 0;
          for (int64_t i = 0; i < got.numel(); ++i) {
            ASSERT_TRUE(std::isfinite(got.data<float>()[i])) << "output element " << i;
            const double d = std::fabs(got.data<float>()[i] - ref.data<float>()[i]);
            max_diff = std::max(max_diff, d);
            max_ref = std::max(max_ref, double(std::fabs(ref.data<float>()[i])));
          }
          const double l2 = rel_err(got, ref);
          std::printf("MLA %s bs=%ld width=%ld heads=%ld window=%d: ||diff||/||ref|| = %.2e, "
                      "max|diff|/max|ref| = %.2e\n", std::string(dtype_name(dt)).c_str(),
                      long(bs), long(width), long(heads), window, l2, max_diff / max_ref);
          EXPECT_LT(l2, l2_bar) << dtype_name(dt) << " bs=" << bs << " width=" << width
                                << " window=" << window;
          EXPECT_LT(max_diff / max_ref, max_bar) << dtype_name(dt) << " bs=" << bs
                                                 << " width=" << width << " window=" << window;
        }
      }
    }
  }
}

// One matmul per head: the one-launch kernel (up to 8 tokens, x kept in f32) and the per-head
// loop beyond (cuBLASLt, which takes x rounded to bf16 for bf16 weights: so does the reference
// there), over strided views of x and out, f32 and bf16 weights (the CPU given them in f32).
TEST_F(CudaOps, MatmulHeadsMatchesCpu) {
  const int64_t H = 5, N = 72;
  // Row lengths and x's layout: K = 40 from lane 2 of rows of 46 (not 16-byte aligned: a lane
  // per element); 128 and 96 from aligned rows (16-byte loads, 16 and 8 lanes a row for bf16).
  struct Case { int64_t K, pad, off; };
  for (const Case& c : {Case{40, 6, 2}, Case{128, 4, 0}, Case{96, 8, 4}}) {
    const int64_t K = c.K;
    for (DType dt : {DType::F32, DType::BF16}) {
      Tensor w32 = randn({H * N, K});
      Tensor w_host = dt == DType::F32 ? w32 : to_half(w32, dt);
      Tensor w_ref = widen(w_host).reshape({H, N, K});
      Tensor w_g = w_host.to(kGpu).reshape({H, N, K});
      for (int64_t T : {1, 3, 8, 20}) {
        Tensor xw = randn({T, H, K + c.pad});
        Tensor xr = Tensor::empty({T, H, K + c.pad}, DType::F32);
        for (int64_t i = 0; i < xw.numel(); ++i) {
          const float v = xw.data<float>()[i];
          xr.data<float>()[i] = dt == DType::BF16 && T > 8 ? bf16_to_f32(f32_to_bf16(v)) : v;
        }
        Tensor x = xr.slice(2, c.off, K);
        Tensor ref_wide = Tensor::empty({T, H + 1, N}, DType::F32);
        Tensor ref = ref_wide.slice(1, 1, H);
        matmul_heads(x, w_ref, ref);
        Tensor out_wide = Tensor::empty({T, H + 1, N}, DType::F32, kGpu);
        Tensor out = out_wide.slice(1, 1, H);
        matmul_heads(xw.to(kGpu).slice(2, c.off, K), w_g, out);
        Tensor got = host(out_wide), want = ref_wide;
        double num = 0, den = 0;
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 1; h <= H; ++h)
            for (int64_t n = 0; n < N; ++n) {
              const int64_t i = (t * (H + 1) + h) * N + n;
              num += std::pow(double(got.data<float>()[i]) - want.data<float>()[i], 2);
              den += std::pow(double(want.data<float>()[i]), 2);
            }
        EXPECT_LT(std::sqrt(num / den), 1e-5) << dtype_name(dt) << " K=" << K << " T=" << T;
      }
    }
  }
}

// dst[t, h, :] = src[t, h, :] between views of wider tensors; the rest of dst untouched.
TEST_F(CudaOps, CopyStridedCopiesLanes) {
  Tensor src = randn({7, 4, 40});
  Tensor before = randn({7, 6, 50}), dst_g = before.to(kGpu);
  Tensor view_g = dst_g.slice(1, 1, 4).slice(2, 10, 27);
  copy_strided(src.to(kGpu).slice(2, 3, 27), view_g);
  Tensor got = host(dst_g);
  for (int64_t t = 0; t < 7; ++t)
    for (int64_t h = 0; h < 6; ++h)
      for (int64_t d = 0; d < 50; ++d) {
        const int64_t i = (t * 6 + h) * 50 + d;
        const bool copied = h >= 1 && h < 5 && d >= 10 && d < 37;
        const float want = copied ? src.data<float>()[(t * 4 + h - 1) * 40 + d - 10 + 3]
                                  : before.data<float>()[i];
        ASSERT_EQ(got.data<float>()[i], want) << t << "," << h << "," << d;
      }
}

// Every step over a bf16/f16 cache takes the tensor-core kernel (head_dim 64, 128; other
// sizes the per-token kernel). The reference is the CPU kernel over an f32 copy of the very
// cache the GPU reads, so the error left is the kernel's: q and the softmax weights rounded to the 16-bit type (unit roundoff
// 2^-9 for bf16, 2^-12 for f16, each stage adding about one). Bars, as ||diff|| / ||ref||
// and as max |diff| / max |ref|: bf16 1e-2 and 3e-2, f16 2e-3 and 6e-3.
namespace {

void check_16bit_attention(const std::vector<int>& ctx, const std::vector<int>& qlen,
                           const std::string& batch) {
  const int64_t bs = 16;
  int64_t num_blocks = 2;
  for (int c : ctx) num_blocks += (c + bs - 1) / bs;
  for (DType dt : {DType::BF16, DType::F16}) {
    const double l2_bar = dt == DType::BF16 ? 1e-2 : 2e-3;
    const double max_bar = dt == DType::BF16 ? 3e-2 : 6e-3;
    double worst_l2 = 0, worst_max = 0;
    for (auto [Hq, heads_kv] : {std::pair<int64_t, int64_t>{8, 2}, {4, 4}, {12, 1}}) {
      const int64_t Hkv = heads_kv;  // a lambda below captures it (clang 14: not a binding)
      for (int64_t D : {64, 128, 96}) {
        const AttentionMeta meta = paged_meta(ctx, qlen, bs, num_blocks);
        Tensor kc_g = Tensor::empty({num_blocks, bs, Hkv, D}, dt, kGpu);
        Tensor vc_g = Tensor::empty({num_blocks, bs, Hkv, D}, dt, kGpu);
        for (size_t s = 0; s < ctx.size(); ++s)
          reshape_and_cache(randn({ctx[s], Hkv, D}).to(kGpu), randn({ctx[s], Hkv, D}).to(kGpu),
                            kc_g, vc_g, seq_slots(meta, s, bs).to(kGpu));
        // The f32 copy of the 16-bit cache for the CPU.
        auto widen = [&](const Tensor& g) {
          Tensor h = host(g), f = Tensor::empty({num_blocks, bs, Hkv, D}, DType::F32);
          const auto* p = static_cast<const uint16_t*>(h.raw());
          for (int64_t i = 0; i < f.numel(); ++i)
            f.data<float>()[i] = dt == DType::BF16 ? bf16_to_f32(p[i]) : f16_to_f32(p[i]);
          return f;
        };
        Tensor kc = widen(kc_g), vc = widen(vc_g);
        const AttentionMeta gm = on_gpu(meta);
        const int64_t T = meta.query_start_loc.back();
        // q as the model passes it: a view into a fused qkv row.
        Tensor qkv = randn({T, (Hq + 2 * Hkv) * D});
        Tensor q = qkv.split_last(Hq + 2 * Hkv).slice(1, 0, Hq);
        Tensor qkv_g = qkv.to(kGpu);
        const float scale = 1.0f / std::sqrt(float(D));
        for (int window : {0, 40, 300}) {
          Tensor ref = Tensor::empty({T, Hq, D}, DType::F32);
          paged_attention(q, kc, vc, meta, scale, window, ref);
          Tensor out = Tensor::empty({T, Hq, D}, DType::F32, kGpu);
          paged_attention(qkv_g.split_last(Hq + 2 * Hkv).slice(1, 0, Hq), kc_g, vc_g, gm, scale,
                          window, out);
          Tensor got = host(out);
          double max_diff = 0, max_ref = 0;
          for (int64_t i = 0; i < got.numel(); ++i) {
            const double d = std::fabs(got.data<float>()[i] - ref.data<float>()[i]);
            max_diff = std::max(max_diff, d);
            max_ref = std::max(max_ref, double(std::fabs(ref.data<float>()[i])));
          }
          const std::string what = batch + " " + std::string(dtype_name(dt)) + " Hq=" + std::to_string(Hq) +
                                   " Hkv=" + std::to_string(Hkv) + " D=" + std::to_string(D) +
                                   " window=" + std::to_string(window);
          const double l2 = rel_err(got, ref);
          EXPECT_LT(l2, l2_bar) << what;
          EXPECT_LT(max_diff / max_ref, max_bar) << what;
          worst_l2 = std::max(worst_l2, l2);
          worst_max = std::max(worst_max, max_diff / max_ref);
        }
      }
    }
    std::printf("%s %s: worst ||diff||/||ref|| = %.2e (bar %.0e), max|diff|/max|ref| = %.2e (bar %.0e)\n",
                batch.c_str(), std::string(dtype_name(dt)).c_str(), worst_l2, l2_bar, worst_max, max_bar);
  }
}

}  // namespace

TEST_F(CudaOps, PagedAttention16BitCacheMatchesCpu) {
  // Whole prompts, chunks after cached blocks, decodes and sub-tile lengths in one step.
  check_16bit_attention({33, 1, 70, 1000, 200, 129}, {33, 1, 5, 300, 200, 1}, "mixed");
  // A decode step wide enough (sequences x KV heads >= multiprocessors) for the tensor cores.
  std::vector<int> ctx(300), qlen(300, 1);
  std::uniform_int_distribution<int> len(1, 700);
  for (int& c : ctx) c = len(rng);
  check_16bit_attention(ctx, qlen, "decode");
  // Few sequences over long contexts: the keys split over blocks (split-KV), in decode and in
  // a short chunk whose rows sit at different positions.
  check_16bit_attention({3000, 1, 700}, {1, 1, 1}, "split decode");
  check_16bit_attention({2000}, {3}, "split chunk");
}

// The e4m3 cache (--kv-cache-dtype fp8): reshape_and_cache stores the CPU backend's bytes (each
// element clamped to +-448, rounded to nearest even), and attention over it is, bit for bit,
// attention over a cache of the type the kernel widens e4m3 to, holding the same values: f16
// for the tensor-core kernel (head_dim 64, 128), f32 for the per-token kernel (others). Whole
// prompts, chunks, decodes and a split-KV decode in one step, GQA, with and without a window.
TEST_F(CudaOps, PagedAttentionE4m3CacheIsTheWidenedCache) {
  const int64_t bs = 16;
  const std::vector<int> ctx = {33, 1, 70, 1000, 200, 129, 3000};
  const std::vector<int> qlen = {33, 1, 5, 300, 200, 1, 1};
  int64_t num_blocks = 2;
  for (int c : ctx) num_blocks += (c + bs - 1) / bs;
  for (auto [Hq, heads_kv] : {std::pair<int64_t, int64_t>{8, 2}, {12, 1}}) {
    const int64_t Hkv = heads_kv;
    for (int64_t D : {64, 128, 96}) {
      const std::string what = "Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) +
                               " D=" + std::to_string(D);
      const AttentionMeta meta = paged_meta(ctx, qlen, bs, num_blocks);
      const std::vector<int64_t> shape = {num_blocks, bs, Hkv, D};
      Tensor kc8 = Tensor::empty(shape, DType::F8_E4M3), vc8 = Tensor::empty(shape, DType::F8_E4M3);
      Tensor kc8_g = Tensor::empty(shape, DType::F8_E4M3, kGpu);
      Tensor vc8_g = Tensor::empty(shape, DType::F8_E4M3, kGpu);
      for (size_t s = 0; s < ctx.size(); ++s) {
        Tensor k = randn({ctx[s], Hkv, D}, 4.0f), v = randn({ctx[s], Hkv, D}, 4.0f);
        k.data<float>()[0] = 1000.0f, v.data<float>()[1] = -600.0f;  // clamped to +-448
        const Tensor slots = seq_slots(meta, s, bs);
        reshape_and_cache(k, v, kc8, vc8, slots);
        reshape_and_cache(k.to(kGpu), v.to(kGpu), kc8_g, vc8_g, slots.to(kGpu));
      }
      // The written slots hold the CPU's bytes; the widened copy holds their values.
      const bool tensor_cores = D == 64 || D == 128;
      const DType wide = tensor_cores ? DType::F16 : DType::F32;
      Tensor kw = Tensor::empty(shape, wide), vw = Tensor::empty(shape, wide);
      const Tensor k8 = host(kc8_g), v8 = host(vc8_g);
      const int64_t slot_elems = Hkv * D;
      for (auto [gpu, cpu, w] : {std::tuple{&k8, &kc8, &kw}, std::tuple{&v8, &vc8, &vw}}) {
        const auto* g = static_cast<const uint8_t*>(gpu->raw());
        const auto* c = static_cast<const uint8_t*>(cpu->raw());
        for (size_t s = 0; s < ctx.size(); ++s) {
          const Tensor slots = seq_slots(meta, s, bs);
          for (int p = 0; p < ctx[s]; ++p) {
            const int64_t at = int64_t(slots.data<int32_t>()[p]) * slot_elems;
            ASSERT_EQ(std::memcmp(g + at, c + at, size_t(slot_elems)), 0) << what << " seq " << s;
          }
        }
        for (int64_t i = 0; i < w->numel(); ++i) {
          const float x = fp8_e4m3_to_f32(g[i]);
          if (wide == DType::F16) static_cast<uint16_t*>(w->raw())[i] = f32_to_f16(x);
          else w->data<float>()[i] = x;
        }
      }
      const Tensor kw_g = kw.to(kGpu), vw_g = vw.to(kGpu);
      const AttentionMeta gm = on_gpu(meta);
      const int64_t T = meta.query_start_loc.back();
      const Tensor q = randn({T, Hq, D}).to(kGpu);
      const float scale = 1.0f / std::sqrt(float(D));
      for (int window : {0, 40}) {
        Tensor a = Tensor::empty({T, Hq, D}, DType::F32, kGpu);
        Tensor b = Tensor::empty({T, Hq, D}, DType::F32, kGpu);
        paged_attention(q, kc8_g, vc8_g, gm, scale, window, a);
        paged_attention(q, kw_g, vw_g, gm, scale, window, b);
        const Tensor ah = host(a), bh = host(b);
        EXPECT_EQ(std::memcmp(ah.raw(), bh.raw(), size_t(ah.nbytes())), 0)
            << what << " window=" << window << ": ||diff|| / ||ref|| = " << rel_err(ah, bh);
      }
    }
  }
}

// sample_rows against its definition (runtime/ops.h), computed here in double: the top_k
// largest logits (ties to the lower index), then the shortest head of those by descending
// probability whose mass reaches top_p, then probability >= min_p x the largest; the token is
// where u x (kept mass) falls in the kept tokens' cumulative mass in index order. 400 values
// of u per parameter set; a draw within 1e-6 of the mass of a boundary may go either way and
// is not compared (the kernel sums in 2^-40 fixed point).
TEST_F(CudaOps, SampleRowsMatchesDefinition) {
  struct Case { float temperature, top_p, min_p; int top_k; };
  const Case cases[] = {{0.7f, 1.0f, 0.0f, 50}, {1.0f, 0.9f, 0.0f, 0},   {1.3f, 0.8f, 0.05f, 100},
                        {1.0f, 1.0f, 0.0f, 0},  {0.0f, 0.5f, 0.0f, 10}, {1.0f, 0.3f, 0.0f, 1},
                        {0.5f, 0.95f, 0.1f, 0}, {2.0f, 1.0f, 0.0f, 40000}};
  const int64_t V = 50000;
  const int draws = 400;
  for (const Case& c : cases) {
    Tensor row = randn({1, V}, 3.0f);
    const float* l = row.data<float>();
    Tensor logits = Tensor::empty({draws, V}, DType::F32);
    Tensor params = Tensor::empty({draws, 4}, DType::F32);
    Tensor top_k = Tensor::empty({draws}, DType::I32);
    for (int d = 0; d < draws; ++d) {
      std::copy_n(l, V, logits.data<float>() + d * V);
      const float u = (d + 0.5f) / draws;
      const float p[4] = {c.temperature, c.top_p, c.min_p, u};
      std::copy_n(p, 4, params.data<float>() + d * 4);
      top_k.data<int32_t>()[d] = c.top_k;
    }
    Tensor out = Tensor::empty({draws}, DType::I32, kGpu);
    sample_rows(logits.to(kGpu), params.to(kGpu), top_k.to(kGpu), out);
    Tensor got = host(out);
    Tensor again = Tensor::empty({draws}, DType::I32, kGpu);
    sample_rows(logits.to(kGpu), params.to(kGpu), top_k.to(kGpu), again);
    Tensor got2 = host(again);

    // The definition.
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    std::vector<char> kept(V, 0);
    if (c.temperature < 1e-5f || c.top_k == 1) {
      kept[order[0]] = 1;
    } else {
      const int k = c.top_k > 0 ? std::min<int64_t>(c.top_k, V) : V;
      const double mx = l[order[0]];
      std::vector<double> prob(k);
      double z = 0;
      for (int i = 0; i < k; ++i) z += prob[i] = std::exp((l[order[i]] - mx) / c.temperature);
      int keep = k;
      if (c.top_p < 1.0f) {
        double cum = 0;
        for (int i = 0; i < k; ++i)
          if ((cum += prob[i] / z) >= c.top_p) { keep = i + 1; break; }
      }
      for (int i = 0; i < keep; ++i) kept[order[i]] = prob[i] >= c.min_p * prob[0];
    }
    std::vector<double> weight(V, 0.0);
    double total = 0;
    for (int64_t i = 0; i < V; ++i)
      if (kept[i]) total += weight[i] = c.temperature < 1e-5f ? 1.0 : std::exp((l[i] - l[order[0]]) / c.temperature);
    int compared = 0;
    for (int d = 0; d < draws; ++d) {
      EXPECT_EQ(got.data<int32_t>()[d], got2.data<int32_t>()[d]) << "not deterministic";
      const double target = (d + 0.5) / draws * total;
      double cum = 0;
      int32_t want = -1;
      bool near_boundary = false;
      for (int64_t i = 0; i < V && want < 0; ++i) {
        if (!kept[i]) continue;
        cum += weight[i];
        near_boundary |= std::fabs(cum - target) < 1e-6 * total;
        if (target < cum) want = static_cast<int32_t>(i);
      }
      if (near_boundary) continue;
      ++compared;
      EXPECT_EQ(got.data<int32_t>()[d], want)
          << "T=" << c.temperature << " top_p=" << c.top_p << " min_p=" << c.min_p
          << " top_k=" << c.top_k << " u=" << (d + 0.5) / draws;
    }
    EXPECT_GT(compared, draws * 9 / 10);
  }
}

TEST_F(CudaOps, ArgmaxRowsMatchesCpu) {
  Tensor x = randn({9, 50000});
  x.data<float>()[3 * 50000 + 7] = 100.0f;  // a tie: the first index wins
  x.data<float>()[3 * 50000 + 49999] = 100.0f;
  Tensor ref = Tensor::empty({9}, DType::I32), out = Tensor::empty({9}, DType::I32, kGpu);
  argmax_rows(x, ref);
  argmax_rows(x.to(kGpu), out);
  Tensor got = host(out);
  for (int r = 0; r < 9; ++r) EXPECT_EQ(got.data<int32_t>()[r], ref.data<int32_t>()[r]);
  EXPECT_EQ(got.data<int32_t>()[3], 7);
}

TEST(CudaDevice, ParseDeviceNames) {
  EXPECT_EQ(parse_device("cpu"), kCpu);
  EXPECT_THROW(parse_device("gpu"), Error);
  EXPECT_THROW(parse_device("cuda:x"), Error);
  EXPECT_THROW(parse_device("cuda:99"), Error);
  if (cuda_device_count() > 0) EXPECT_EQ(parse_device("cuda"), kGpu);
  else EXPECT_THROW(parse_device("cuda"), Error);
}

// Host-to-device copies of 1 MiB and more go through the backend's pinned buffers (16 MiB
// each, four in turn, so the 80 MiB copy reuses them): sizes on both sides of those bounds,
// from an unaligned source that is overwritten as soon as copy() returns (it must have been
// read by then), several copies in flight before one read back, and the buffers freed and made
// again in between.
TEST_F(CudaOps, LargeUploadsArriveWhole) {
  Backend& be = backend_for(kGpu);
  const std::vector<size_t> sizes = {(size_t(1) << 20) - 1, size_t(1) << 20,
                                     (size_t(16) << 20) + 3, (size_t(80) << 20) + 12345,
                                     size_t(3) << 20};
  std::vector<std::vector<uint8_t>> expected;
  std::vector<void*> device;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i == 3) be.release_cached_memory();
    std::vector<uint8_t> src(sizes[i] + 1);
    uint32_t h = 2166136261u + uint32_t(i);
    for (uint8_t& b : src) b = uint8_t((h = h * 16777619u + 1u) >> 24);
    expected.emplace_back(src.begin() + 1, src.end());
    device.push_back(be.alloc(sizes[i]));
    be.copy(device.back(), kGpu, src.data() + 1, kCpu, sizes[i]);
    std::fill(src.begin(), src.end(), uint8_t(0xA5));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> got(sizes[i]);
    be.copy(got.data(), kCpu, device[i], kGpu, sizes[i]);
    size_t bad = 0;
    for (size_t j = 0; j < sizes[i]; ++j) bad += got[j] != expected[i][j];
    EXPECT_EQ(bad, 0u) << sizes[i] << " bytes";
    be.free(device[i]);
  }
}

// Each op captured into a CUDA graph (over step-arena memory) and replayed gives what the
// same op gives eagerly: nothing depends on host state read at launch time.
TEST_F(CudaOps, GraphReplayMatchesEager) {
  Backend& be = backend_for(kGpu);
  ASSERT_TRUE(be.supports_graphs());
  const int64_t D = 64, Hq = 4, Hkv = 2, hd = 16, blocks = 8, bs = 4;
  Tensor x = randn({1, D}).to(kGpu), w = randn({D}).to(kGpu), res = randn({1, D}).to(kGpu);
  Tensor wf = to_half(randn({96, D}, 0.1f), DType::BF16).to(kGpu);  // the decode GEMV
  Tensor kc = Tensor::empty({blocks, bs, Hkv, hd}, DType::F32, kGpu);
  Tensor vc = Tensor::empty({blocks, bs, Hkv, hd}, DType::F32, kGpu);
  Tensor kv_host = randn({blocks * bs, 2 * Hkv * hd});
  Tensor kv = kv_host.to(kGpu);
  Tensor all_slots = Tensor::empty({blocks * bs}, DType::I32);
  for (int i = 0; i < blocks * bs; ++i) all_slots.data<int32_t>()[i] = i;
  reshape_and_cache(kv.slice(1, 0, Hkv * hd).split_last(Hkv),
                    kv.slice(1, Hkv * hd, Hkv * hd).split_last(Hkv), kc, vc, all_slots.to(kGpu));
  Tensor pos = Tensor::empty({1}, DType::I32);
  pos.data<int32_t>()[0] = 9;
  Tensor pos_g = pos.to(kGpu);
  AttentionMeta meta;
  meta.query_start_loc = {0, 1};
  meta.seq_lens = {10};
  meta.block_tables = {5, 2, 7, 0};
  meta.max_blocks_per_seq = 4;
  auto dev_i32 = [](std::vector<int32_t>& v) {
    return Tensor::from_blob(v.data(), std::vector<int64_t>{int64_t(v.size())}, DType::I32, nullptr).to(kGpu);
  };
  meta.device_query_start_loc = dev_i32(meta.query_start_loc);
  meta.device_seq_lens = dev_i32(meta.seq_lens);
  meta.device_block_tables = dev_i32(meta.block_tables);
  RopeParams rp;
  rp.head_dim = hd;
  rp.rotary_dim = hd;
  for (int i = 0; i < hd / 2; ++i) rp.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / hd));

  // The step: residual add, norm and projection, rotary, attention, argmax. Returns the
  // tensors to compare; allocations come from the arena when one is active.
  auto step = [&](Tensor& xs, Tensor& rs) {
    add(rs, xs, rs);
    Tensor h = Tensor::empty({1, D}, DType::F32, kGpu);
    Tensor qkv = Tensor::empty({1, 96}, DType::F32, kGpu);
    rms_norm_matmul(rs, w, 1e-5f, wf, h, qkv);
    Tensor qk = qkv.slice(1, 0, 96).split_last(6);
    rope(qk, pos_g, rp);
    Tensor q = qkv.slice(1, 0, 64).split_last(Hq);
    Tensor o = Tensor::empty({1, Hq, hd}, DType::F32, kGpu);
    paged_attention(q, kc, vc, meta, 0.25f, 0, o);
    Tensor ids = Tensor::empty({1}, DType::I32, kGpu);
    argmax_rows(qkv, ids);
    return std::vector<Tensor>{qkv, o, ids};  // h: scratch the fused kernel leaves unwritten
  };
  Tensor x1 = x.to(kCpu).to(kGpu), r1 = res.to(kCpu).to(kGpu);
  std::vector<Tensor> eager = step(x1, r1);
  std::vector<Tensor> eager_host;
  for (auto& t : eager) eager_host.push_back(host(t));

  Tensor x2 = x.to(kCpu).to(kGpu), r2 = res.to(kCpu).to(kGpu);
  be.begin_arena(size_t(64) << 20);
  be.begin_capture();
  std::vector<Tensor> captured = step(x2, r2);
  std::shared_ptr<void> graph = be.end_capture();
  be.end_arena();
  be.replay(graph);
  for (size_t i = 0; i < captured.size(); ++i) {
    Tensor got = host(captured[i]);
    ASSERT_EQ(got.nbytes(), eager_host[i].nbytes());
    EXPECT_EQ(std::memcmp(got.raw(), eager_host[i].raw(), size_t(got.nbytes())), 0)
        << "output " << i << " differs after replay";
  }
  EXPECT_EQ(rel_err(host(r2), host(r1)), 0.0) << "residual";
}
