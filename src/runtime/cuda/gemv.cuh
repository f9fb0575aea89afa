// The decode GEMV: out[M, N] = x[M, K] @ w[N, K]^T for a few rows of f32 x and f16/bf16 w
// (or FP8_E4M3 w in the GPU's layout, dtype.h),
// streaming the weights once at close to the memory bandwidth, with the decoder's fusions
// (MatmulFusion) applied on the way in and out.
#pragma once
#include <cuda_runtime.h>

#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace vllm::cuda {

// Whether launch_gemv takes these arguments (rows, dtypes, alignment, the staged x's size).
bool gemv_applies(const Tensor& x, const Tensor& w, const MatmulFusion& fusion);
void launch_gemv(const Tensor& x, const Tensor& w, Tensor& out, const MatmulFusion& fusion,
                 int multiprocessors, cudaStream_t stream);

}  // namespace vllm::cuda
