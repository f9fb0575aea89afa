// One matmul per head in one launch, for decode-sized steps: out[t, h, n] = x[t, h, :] .
// w[h, n, :] for up to kMaxTokens tokens, x kept in f32 as the decode GEMV keeps it. A warp
// computes one output row n of one head for every token of the step. MLA folds W_UK into the
// query and applies W_UV to the attention output this way (16 to 128 heads: without it, two
// launches per head and layer). Wider steps take one matmul per head (Backend's loop).
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

}  // namespace

void CudaBackend::matmul_heads(const Tensor& x, const Tensor& w, Tensor& out) {
  const int64_t tokens = x.size(0), heads = w.size(0), n = w.size(1), k = w.size(2);
  if (tokens == 0) return;
  if (tokens > kMaxTokens || heads > 65535 || n > INT32_MAX / 2 || k > INT32_MAX / 2) {
    Backend::matmul_heads(x, w, out);
    return;
  }
  const dim3 grid(static_cast<unsigned>((n + kWarps - 1) / kWarps), static_cast<unsigned>(heads));
  dispatch_float_type(w.dtype(), [&](auto* tag) {
    using W = std::remove_pointer_t<decltype(tag)>;
    launch(matmul_heads_kernel<W>, grid, kWarps * 32, 0, stream_, x.data<float>(),
        row_stride(x), row_stride(x, 1), w.data<W>(), out.data<float>(), row_stride(out),
        row_stride(out, 1), static_cast<int>(tokens), static_cast<int>(n), static_cast<int>(k));
  });
}

}  // namespace vllm::cuda
