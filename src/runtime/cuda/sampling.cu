// Sampling on the GPU, one block per row of logits, so that only token ids leave the device:
// greedy (temperature 0 or top-k 1), else temperature with top-k, top-p and min-p, and an
// inverse-CDF draw at the caller's uniform u over the kept tokens in index order.
//
// Thresholds are exact keys found by radix select over the logits' order-preserving bit
// patterns (four 8-bit digits): top-k by counts, top-p by sums of the tempered weights
// exp((l - max) / T). The weights are summed in 2^-40 fixed point, whose integer additions
// do not depend on order, so a row gives the same token on every run. Kept: every token at
// or above both thresholds (ties at a threshold are all kept) whose weight is >= min_p.
#include <cstdint>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_backend.h"

namespace vllm::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kBins = 256;
constexpr double kFixedOne = 1099511627776.0;  // 2^40

// Unsigned keys in the order of the floats; NaN sorts below everything.
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v != v) return 0;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ uint64_t fixed_weight(float logit, float max, float inv_t) {
  return static_cast<uint64_t>(expf((logit - max) * inv_t) * kFixedOne);
}

// Inclusive sum over the block (kThreads), deterministic; `total` gets the block's sum.
__device__ uint64_t block_inclusive_scan(uint64_t v, uint64_t& total) {
  __shared__ uint64_t warp_totals[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  __syncthreads();
  if (lane == 31) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    uint64_t w = warp_totals[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const uint64_t n = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += n;
    }
    warp_totals[lane] = w;
  }
  __syncthreads();
  total = warp_totals[kThreads / 32 - 1];
  return v + (warp > 0 ? warp_totals[warp - 1] : 0);
}

// The key of the element where a descending walk over the row reaches `target`: the key t
// with mass(> t) < target <= mass(>= t), where an element's mass is 1 (by_weight false) or
// its fixed-point weight, counting only elements with key >= floor_key.
__device__ uint32_t radix_select(const float* row, int64_t n, uint64_t target, bool by_weight,
                                 uint32_t floor_key, float max, float inv_t) {
  __shared__ uint64_t hist[kBins];  // mass per digit value at this level
  __shared__ uint32_t chosen;
  __shared__ uint64_t above;
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) hist[b] = 0;
    if (threadIdx.x == 0) chosen = 0, above = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = order_key(row[i]);
      if ((key & mask) != prefix || key < floor_key) continue;
      atomicAdd(reinterpret_cast<unsigned long long*>(&hist[(key >> shift) & 0xff]),
                static_cast<unsigned long long>(by_weight ? fixed_weight(row[i], max, inv_t) : 1));
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // suffix sums over the bins: one warp, eight bins a lane
      const int lane = threadIdx.x;
      uint64_t local[8], run = 0;
#pragma unroll
      for (int j = 7; j >= 0; --j) local[j] = run += hist[lane * 8 + j];
      uint64_t incl = run;  // then the mass of the lanes >= this one
      for (int o = 1; o < 32; o <<= 1) {
        const uint64_t v = __shfl_down_sync(0xffffffffu, incl, o);
        if (lane + o < 32) incl += v;
      }
      const uint64_t after = incl - run;  // mass of the digits above this lane's bins
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint64_t at_or_above = local[j] + after;
        const uint64_t strictly_above = j < 7 ? local[j + 1] + after : after;
        if (strictly_above < target && target <= at_or_above)
          chosen = lane * 8 + j, above = strictly_above;
      }
    }
    __syncthreads();
    target -= above;
    prefix |= chosen << shift;
    mask |= 0xffu << shift;
    __syncthreads();
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* __restrict__ logits, int64_t ls, int64_t n,
                  const float* __restrict__ params, const int32_t* __restrict__ top_k,
                  int32_t* __restrict__ out) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const float* row = logits + r * ls;
  const float temperature = params[r * 4], top_p = params[r * 4 + 1], min_p = params[r * 4 + 2],
              u = params[r * 4 + 3];
  const int k = top_k[r];

  // The largest logit and its first index.
  __shared__ float s_max;
  __shared__ int32_t s_arg;
  {
    float bv = -INFINITY;
    int32_t bi = INT32_MAX;
    for (int64_t i = threadIdx.x; i < n; i += kThreads)
      argmax_pick(bv, bi, row[i], static_cast<int32_t>(i));
    block_argmax(bv, bi);
    if (threadIdx.x == 0) s_max = bv, s_arg = bi == INT32_MAX ? 0 : bi;
    __syncthreads();
  }
  if (temperature < 1e-5f || k == 1 || s_max == -INFINITY) {
    if (threadIdx.x == 0) out[r] = s_arg;
    return;
  }
  const float max = s_max, inv_t = 1.0f / temperature;

  uint32_t floor_key = 0;
  if (k > 0 && k < n) floor_key = radix_select(row, n, uint64_t(k), false, 0, max, inv_t);
  if (top_p < 1.0f) {
    uint64_t mass = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads)
      if (order_key(row[i]) >= floor_key) mass += fixed_weight(row[i], max, inv_t);
    uint64_t total;
    block_inclusive_scan(mass, total);
    const auto target = static_cast<uint64_t>(ceil(double(top_p) * double(total)));
    floor_key = radix_select(row, n, target > 0 ? target : 1, true, floor_key, max, inv_t);
  }

  // Kept weights over contiguous chunks, their scan, and the draw inside one chunk.
  const auto kept_weight = [&](int64_t i) -> uint64_t {
    if (order_key(row[i]) < floor_key) return 0;
    const float e = expf((row[i] - max) * inv_t);
    return e >= min_p ? static_cast<uint64_t>(e * kFixedOne) : 0;
  };
  const int64_t chunk = (n + kThreads - 1) / kThreads;
  const int64_t begin = threadIdx.x * chunk, end = begin + chunk < n ? begin + chunk : n;
  uint64_t mine = 0;
  for (int64_t i = begin; i < end; ++i) mine += kept_weight(i);
  uint64_t total;
  const uint64_t upto = block_inclusive_scan(mine, total);
  if (total == 0) {  // cannot happen (the largest logit is always kept), but never no answer
    if (threadIdx.x == 0) out[r] = s_arg;
    return;
  }
  const auto target = static_cast<uint64_t>(double(u) * double(total));  // in [0, total)
  const uint64_t before = upto - mine;
  if (mine == 0 || target < before || target >= upto) return;
  uint64_t cum = before;
  for (int64_t i = begin; i < end; ++i) {
    cum += kept_weight(i);
    if (target < cum) {
      out[r] = static_cast<int32_t>(i);
      return;
    }
  }
}

}  // namespace

void CudaBackend::sample_rows(const Tensor& logits, const Tensor& params, const Tensor& top_k,
                              Tensor& out) {
  const int64_t rows = logits.size(0);
  if (rows == 0) return;
  launch(sample_kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream_,
         logits.data<float>(), row_stride(logits), logits.size(1), params.data<float>(),
         top_k.data<int32_t>(), out.data<int32_t>());
}

}  // namespace vllm::cuda
