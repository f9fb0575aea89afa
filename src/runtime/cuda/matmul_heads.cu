// One matmul per head in one launch, for decode-sized steps: out[t, h, n] = x[t, h, :] .
// w[h, n, :] for up to kMaxTokens tokens, x kept in f32 as the decode GEMV keeps it. MLA folds
// W_UK into the query and applies W_UV to the attention output this way (16 to 128 heads:
// without it, two launches per head and layer). Wider steps take one matmul per head
// (Backend's loop).
//
// Where the rows allow 16-byte loads, a group of lanes (32, or fewer for short rows: W_UK's
// are 128 lanes, 16 pieces) computes one output row n of one head for every token, each lane
// reading 16 bytes of weights at a time; otherwise a warp takes a row one element a lane.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_backend.h"

namespace vllm::cuda {
namespace {

constexpr int kMaxTokens = 8;
constexpr int kWarps = 8;

template <typename W>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_heads_kernel(const float* __restrict__ x, int64_t xt, int64_t xh,
                        const W* __restrict__ w, float* __restrict__ out, int64_t ot, int64_t oh,
                        int tokens, int n_rows, int k) {
  pdl_begin();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = blockIdx.y, n = blockIdx.x * kWarps + warp;
  if (n >= n_rows) return;
  const W* wr = w + (int64_t(h) * n_rows + n) * k;
  float acc[kMaxTokens] = {};
  for (int i = lane; i < k; i += 32) {
    const float wv = to_float(wr[i]);
#pragma unroll
    for (int t = 0; t < kMaxTokens; ++t)
      if (t < tokens) acc[t] += wv * x[t * xt + h * xh + i];
  }
#pragma unroll
  for (int t = 0; t < kMaxTokens; ++t) {
    if (t >= tokens) break;
    const float s = warp_sum(acc[t]);
    if (lane == 0) out[t * ot + h * oh + n] = s;
  }
}

// `group` lanes per output row (a power of two up to 32), 32 / group rows per warp.
template <typename W>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_heads_vec_kernel(const float* __restrict__ x, int64_t xt, int64_t xh,
                            const W* __restrict__ w, float* __restrict__ out, int64_t ot,
                            int64_t oh, int tokens, int n_rows, int k, int group) {
  constexpr int kPer = 16 / sizeof(W);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % group;
  const int h = blockIdx.y;
  const int n = (blockIdx.x * kWarps + warp) * (32 / group) + lane / group;
  // Lanes past the last row compute the last row again (every lane takes part in the sums).
  const uint4* wr =
      reinterpret_cast<const uint4*>(w + (int64_t(h) * n_rows + min(n, n_rows - 1)) * k);
  float acc[kMaxTokens] = {};
  const int pieces = k / kPer;
  // A lane's first two pieces load before the wait: the weights depend on no earlier kernel,
  // so their latency hides behind the previous kernel's end (W_UK's rows are one piece a
  // lane, W_UV's two).
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const uint4 early0 = sub < pieces ? __ldg(wr + sub) : zero;
  const uint4 early1 = sub + group < pieces ? __ldg(wr + sub + group) : zero;
  pdl_begin();
#pragma unroll 2
  for (int p = sub, i = 0; p < pieces; p += group, ++i) {
    float f[kPer];
    unpack_piece<W>(i == 0 ? early0 : i == 1 ? early1 : __ldg(wr + p), f);
#pragma unroll
    for (int t = 0; t < kMaxTokens; ++t) {
      if (t >= tokens) break;
      const float* xp = x + t * xt + h * xh + p * kPer;
      float d = 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; j += 4) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(xp + j));
        d += f[j] * v.x + f[j + 1] * v.y + f[j + 2] * v.z + f[j + 3] * v.w;
      }
      acc[t] += d;
    }
  }
#pragma unroll
  for (int t = 0; t < kMaxTokens; ++t) {
    if (t >= tokens) break;
    float s = acc[t];
    for (int off = group / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (sub == 0 && n < n_rows) out[t * ot + h * oh + n] = s;
  }
}

}  // namespace

void CudaBackend::matmul_heads(const Tensor& x, const Tensor& w, Tensor& out) {
  const int64_t tokens = x.size(0), heads = w.size(0), n = w.size(1), k = w.size(2);
  if (tokens == 0) return;
  if (tokens > kMaxTokens || heads > 65535 || n > INT32_MAX / 2 || k > INT32_MAX / 2) {
    Backend::matmul_heads(x, w, out);
    return;
  }
  dispatch_float_type(w.dtype(), [&](auto* tag) {
    using W = std::remove_pointer_t<decltype(tag)>;
    const int64_t per = 16 / int64_t(sizeof(W));
    if (k % per == 0 && row_stride(x) % 4 == 0 && row_stride(x, 1) % 4 == 0 && aligned16(x) &&
        aligned16(w)) {
      int group = 32;
      while (group > 1 && group > k / per) group /= 2;
      const int64_t rows_per_block = int64_t(kWarps) * (32 / group);
      launch(matmul_heads_vec_kernel<W>,
             dim3(static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block),
                  static_cast<unsigned>(heads)),
             kWarps * 32, 0, stream_, x.data<float>(), row_stride(x), row_stride(x, 1),
             w.data<W>(), out.data<float>(), row_stride(out), row_stride(out, 1),
             static_cast<int>(tokens), static_cast<int>(n), static_cast<int>(k), group);
      return;
    }
    const dim3 grid(static_cast<unsigned>((n + kWarps - 1) / kWarps), static_cast<unsigned>(heads));
    launch(matmul_heads_kernel<W>, grid, kWarps * 32, 0, stream_, x.data<float>(),
        row_stride(x), row_stride(x, 1), w.data<W>(), out.data<float>(), row_stride(out),
        row_stride(out, 1), static_cast<int>(tokens), static_cast<int>(n), static_cast<int>(k));
  });
}

}  // namespace vllm::cuda
