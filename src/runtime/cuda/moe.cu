// Mixture-of-experts ops on the device (runtime/ops.h): routing (one warp per token), the
// grouping of routed rows by expert (one block), a grouped GEMV over the experts that have
// rows (weights read once per 8 rows of an expert), and the weighted sum back into tokens.
// Nothing goes to the host, so a decode step of a MoE model can be captured as a graph.
#include <climits>
#include <type_traits>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/ops.h"

namespace vllm::cuda {
namespace {

constexpr int kMaxGroups = 32;   // router groups, one per lane
constexpr int kMaxTopK = 32;
constexpr int kAlignThreads = 1024;
constexpr int kAlignChunk = 4096;  // expert ids staged in shared memory at a time

struct RouteArgs {
  const float* scores;
  const float* bias;  // or null
  int experts, top_k, groups, topk_groups;
  bool sigmoid, group_top2, normalize;
  float scaling;
  int32_t* ids;
  float* weights;
  float* margins;  // or null
};

// The best (value, index) over the warp, ties to the lower index, in every lane.
__device__ __forceinline__ void warp_argmax(float& v, int& i) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
  }
}

// The best of key[0 .. n) not yet taken (lanes stride over it), in every lane; index INT_MAX
// when every entry is taken.
__device__ __forceinline__ void warp_best(const float* key, const bool* taken, int n, float& v,
                                          int& i) {
  v = -INFINITY, i = INT_MAX;
  for (int e = threadIdx.x; e < n; e += 32)
    if (!taken[e] && (key[e] > v || i == INT_MAX)) v = key[e], i = e;
  warp_argmax(v, i);
}

// One warp per token, the host routing's arithmetic (model/decoder.cpp route()).
__global__ void moe_route_kernel(const RouteArgs a) {
  pdl_begin();
  extern __shared__ float smem[];
  float* p = smem;                   // [E] scores
  float* choice = smem + a.experts;  // [E] scores + bias, -inf outside the kept groups
  bool* taken = reinterpret_cast<bool*>(choice + a.experts);  // [E]
  __shared__ float group[kMaxGroups];
  __shared__ bool group_taken[kMaxGroups];
  __shared__ int order[kMaxTopK];
  const int E = a.experts, lane = threadIdx.x;
  const int64_t t = blockIdx.x;
  const float* z = a.scores + t * E;
  if (a.sigmoid) {
    for (int e = lane; e < E; e += 32) p[e] = 1.0f / (1.0f + expf(-z[e]));
  } else {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, z[e]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += (p[e] = expf(z[e] - mx));
    sum = warp_sum(sum);
    for (int e = lane; e < E; e += 32) p[e] /= sum;
  }
  for (int e = lane; e < E; e += 32) {
    choice[e] = a.bias ? p[e] + a.bias[e] : p[e];
    taken[e] = false;
  }
  __syncwarp();
  float margin = INFINITY;
  float v;
  int i;
  if (a.groups > 1) {
    const int per_group = E / a.groups;
    if (lane < a.groups) {
      const float* c = choice + lane * per_group;
      float best = -INFINITY, second = -INFINITY;
      for (int j = 0; j < per_group; ++j) {
        if (c[j] > best) second = best, best = c[j];
        else if (c[j] > second) second = c[j];
      }
      group[lane] = a.group_top2 ? best + second : best;
      group_taken[lane] = false;
    }
    __syncwarp();
    float kept = 0.0f;
    for (int r = 0; r < a.topk_groups; ++r) {
      warp_best(group, group_taken, a.groups, v, i);
      kept = v;
      if (lane == 0) group_taken[i] = true;
      __syncwarp();
    }
    if (a.topk_groups < a.groups) {
      warp_best(group, group_taken, a.groups, v, i);
      margin = fminf(margin, (kept - v) / fabsf(kept));
    }
    for (int e = lane; e < E; e += 32)
      if (!group_taken[e / per_group]) choice[e] = -INFINITY;
    __syncwarp();
  }
  float kept = 0.0f, sum = 0.0f;
  for (int r = 0; r < a.top_k; ++r) {
    warp_best(choice, taken, E, v, i);
    kept = v;
    sum += p[i];
    if (lane == 0) taken[i] = true, order[r] = i;
    __syncwarp();
  }
  if (a.top_k < E) {
    warp_best(choice, taken, E, v, i);
    margin = fminf(margin, (kept - v) / fabsf(kept));
  }
  const float norm = a.normalize ? 1.0f / sum : 1.0f;
  for (int r = lane; r < a.top_k; r += 32) {
    a.ids[t * a.top_k + r] = order[r];
    a.weights[t * a.top_k + r] = p[order[r]] * norm * a.scaling;
  }
  if (a.margins && lane == 0) a.margins[t] = margin;
}

// One block: thread e counts expert e's slots, then (after the offsets) places them in slot
// order, so each expert's rows keep their tokens' order.
__global__ void __launch_bounds__(kAlignThreads)
moe_align_kernel(const int32_t* __restrict__ ids, int64_t slots, int top_k, int experts,
                 int32_t* __restrict__ token, int32_t* __restrict__ position,
                 int32_t* __restrict__ offsets, int32_t* __restrict__ active) {
  pdl_begin();
  __shared__ int32_t chunk[kAlignChunk];
  __shared__ int32_t count[kAlignThreads];
  const int e = threadIdx.x;
  for (int pass = 0; pass < 2; ++pass) {
    int32_t c = 0, row = 0;
    if (pass == 1 && e < experts) row = offsets[e];
    for (int64_t base = 0; base < slots; base += kAlignChunk) {
      const int n = int(min(int64_t(kAlignChunk), slots - base));
      __syncthreads();
      for (int j = threadIdx.x; j < n; j += blockDim.x) chunk[j] = ids[base + j];
      __syncthreads();
      if (e >= experts) continue;
      for (int j = 0; j < n; ++j) {
        if (chunk[j] != e) continue;
        if (pass == 0) {
          ++c;
        } else {
          token[row] = int32_t((base + j) / top_k);
          position[base + j] = row++;
        }
      }
    }
    if (pass == 0) {
      if (e < experts) count[e] = c;
      __syncthreads();
      if (threadIdx.x == 0) {
        int32_t off = 0, n = 0;
        for (int x = 0; x < experts; ++x) {
          offsets[x] = off;
          off += count[x];
          if (count[x] > 0) active[1 + n++] = x;
        }
        offsets[experts] = off;
        active[0] = n;
      }
      __syncthreads();  // offsets, before the second pass reads them
    }
  }
}

constexpr int kGemvRows = 8;
constexpr int kGemvWarps = 8;
constexpr int kGemvColumnsPerWarp = 4;
constexpr int kGemvColumns = kGemvWarps * kGemvColumnsPerWarp;  // per block

// 16 bytes of weights as floats (8 of a 16-bit type, 4 of f32).
template <typename W>
__device__ __forceinline__ void unpack_piece(const uint4& u, float (&f)[16 / sizeof(W)]) {
  if constexpr (std::is_same_v<W, float>) {
    f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z),
    f[3] = __uint_as_float(u.w);
  } else {
    const W* h = reinterpret_cast<const W*>(&u);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = to_float(h[j]);
  }
}

// Block (x, y): kGemvColumns output columns of the y-th expert that has rows, over all its
// rows, 8 at a time. Each warp takes 4 columns together, each lane 16 bytes of each column's
// weights per step (4 loads in flight per step, 2 steps unrolled: decode's short columns are
// latency-bound otherwise), the rows' dot products kept in registers.
template <typename W>
__global__ void __launch_bounds__(kGemvWarps * 32)
moe_gemv_kernel(const float* __restrict__ x, int64_t ldx, const int32_t* __restrict__ rows,
                const W* __restrict__ w, int64_t n, int64_t k, const int32_t* __restrict__ offsets,
                const int32_t* __restrict__ active, float* __restrict__ out) {
  pdl_begin();
  constexpr int kPer = 16 / sizeof(W);
  constexpr int C = kGemvColumnsPerWarp;
  if (int(blockIdx.y) >= active[0]) return;
  const int e = active[1 + blockIdx.y];
  const int r0 = offsets[e], r1 = offsets[e + 1];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t first = int64_t(blockIdx.x) * kGemvColumns + warp * C;
  if (first >= n) return;
  const int cols = int(min(int64_t(C), n - first));
  // Columns past the end read the last one again and are not written.
  const uint4* wc[C];
#pragma unroll
  for (int c = 0; c < C; ++c)
    wc[c] = reinterpret_cast<const uint4*>(w + (int64_t(e) * n + first + min(c, cols - 1)) * k);
  const int pieces = int(k / kPer);
  for (int m0 = r0; m0 < r1; m0 += kGemvRows) {
    const int m = min(kGemvRows, r1 - m0);
    const float* xr[kGemvRows];
#pragma unroll
    for (int i = 0; i < kGemvRows; ++i)
      xr[i] = x + int64_t(rows ? rows[m0 + min(i, m - 1)] : m0 + min(i, m - 1)) * ldx;
    float acc[C][kGemvRows] = {};
#pragma unroll 2
    for (int p = lane; p < pieces; p += 32) {
      uint4 u[C];
#pragma unroll
      for (int c = 0; c < C; ++c) u[c] = __ldg(wc[c] + p);
#pragma unroll
      for (int i = 0; i < kGemvRows; ++i) {
        if (i >= m) break;
        const float* xp = xr[i] + int64_t(p) * kPer;
        float xv[kPer];
#pragma unroll
        for (int j = 0; j < kPer; j += 4) {
          const float4 v = __ldg(reinterpret_cast<const float4*>(xp + j));
          xv[j] = v.x, xv[j + 1] = v.y, xv[j + 2] = v.z, xv[j + 3] = v.w;
        }
#pragma unroll
        for (int c = 0; c < C; ++c) {
          float f[kPer];
          unpack_piece<W>(u[c], f);
          float d = 0.0f;
#pragma unroll
          for (int j = 0; j < kPer; ++j) d += f[j] * xv[j];
          acc[c][i] += d;
        }
      }
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int i = 0; i < kGemvRows; ++i) {
        if (i >= m) break;
        const float s = warp_sum(acc[c][i]);
        if (lane == 0 && c < cols) out[int64_t(m0 + i) * n + first + c] = s;
      }
    }
  }
}

// Block (t, y): 256 columns of token t (one per thread, so that the loads of a token's rows
// are in flight together): its experts' rows, weighted, summed in ascending expert order.
__global__ void moe_combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ ids,
                                   const float* __restrict__ weights,
                                   const int32_t* __restrict__ position, int top_k, int64_t h,
                                   float* __restrict__ out) {
  pdl_begin();
  __shared__ int32_t row[kMaxTopK];
  __shared__ float wt[kMaxTopK];
  const int64_t t = blockIdx.x;
  // Thread j < top_k places choice j at its rank among the token's experts (ids distinct).
  if (threadIdx.x < top_k) {
    const int j = threadIdx.x;
    const int32_t id = ids[t * top_k + j];
    int rank = 0;
    for (int i = 0; i < top_k; ++i) rank += ids[t * top_k + i] < id;
    row[rank] = position[t * top_k + j];
    wt[rank] = weights[t * top_k + j];
  }
  __syncthreads();
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= h) return;
  float acc = 0.0f;
  for (int j = 0; j < top_k; ++j) acc += wt[j] * y[int64_t(row[j]) * h + c];
  out[t * h + c] = acc;
}

}  // namespace

void CudaBackend::moe_route(const Tensor& scores, const Tensor& bias, const MoeRouting& r,
                            Tensor& ids, Tensor& weights, Tensor& margins) {
  const int64_t T = scores.size(0);
  const int E = int(scores.size(1));
  VLLM_CHECK(r.num_groups <= kMaxGroups && r.top_k <= kMaxTopK, "moe_route on CUDA: at most ",
             kMaxGroups, " groups and top_k ", kMaxTopK);
  if (T == 0) return;
  RouteArgs a{scores.data<float>(), bias.defined() ? bias.data<float>() : nullptr, E, r.top_k,
              r.num_groups, r.topk_groups, r.sigmoid, r.group_top2, r.normalize, r.scaling,
              ids.data<int32_t>(), weights.data<float>(),
              margins.defined() ? margins.data<float>() : nullptr};
  const size_t smem = size_t(E) * (2 * sizeof(float) + sizeof(bool));
  VLLM_CHECK(smem <= 48 * 1024, "moe_route on CUDA: ", E, " experts is too many");
  launch(moe_route_kernel, dim3(unsigned(T)), dim3(32), smem, stream_, a);
}

void CudaBackend::moe_align(const Tensor& ids, int num_experts, MoePlan& plan) {
  VLLM_CHECK(num_experts <= kAlignThreads, "moe_align on CUDA: at most ", kAlignThreads,
             " experts");
  const int threads = (num_experts + 31) / 32 * 32;
  launch(moe_align_kernel, dim3(1), dim3(threads), 0, stream_, ids.data<int32_t>(), ids.numel(),
         int(ids.size(1)), num_experts, plan.token.data<int32_t>(),
         plan.position.data<int32_t>(), plan.offsets.data<int32_t>(),
         plan.active.data<int32_t>());
}

void CudaBackend::moe_matmul(const Tensor& x, const Tensor& rows, const Tensor& w,
                             const MoePlan& plan, Tensor& out) {
  const int64_t S = out.size(0), n = w.size(1), k = w.size(2);
  if (S == 0) return;
  const int64_t per = 16 / dtype_info(w.dtype()).block_bytes;
  VLLM_CHECK(k % per == 0 && x.stride_bytes(0) % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(x.data<float>()) % 16 == 0,
             "moe_matmul on CUDA: rows of ", k, " must be whole 16-byte pieces, aligned");
  // At most S experts have rows: blocks beyond the active count return at once.
  const dim3 grid(unsigned((n + kGemvColumns - 1) / kGemvColumns),
                  unsigned(std::min<int64_t>(S, w.size(0))));
  const int32_t* r = rows.defined() ? rows.data<int32_t>() : nullptr;
  dispatch_float_type(w.dtype(), [&](auto* tag) {
    using W = std::remove_pointer_t<decltype(tag)>;
    launch(moe_gemv_kernel<W>, grid, dim3(kGemvWarps * 32), 0, stream_, x.data<float>(),
           x.stride_bytes(0) / int64_t(sizeof(float)), r, w.data<W>(), n, k,
           plan.offsets.data<int32_t>(), plan.active.data<int32_t>(), out.data<float>());
  });
}

void CudaBackend::moe_combine(const Tensor& y, const Tensor& ids, const Tensor& weights,
                              const MoePlan& plan, Tensor& out) {
  const int64_t T = out.size(0), h = out.size(1);
  const int top_k = int(ids.size(1));
  VLLM_CHECK(top_k <= kMaxTopK, "moe_combine on CUDA: top_k ", top_k);
  if (T == 0) return;
  launch(moe_combine_kernel, dim3(unsigned(T), unsigned((h + 255) / 256)), dim3(256), 0, stream_,
         y.data<float>(), ids.data<int32_t>(), weights.data<float>(),
         plan.position.data<int32_t>(), top_k, h, out.data<float>());
}

}  // namespace vllm::cuda
