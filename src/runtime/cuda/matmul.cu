// out[M, N] = x[M, K] @ w[N, K]^T. Few rows (decode) with f16/bf16 weights: our own GEMV
// (gemv.cu), which streams the weights once and reads x in f32 as it is. Otherwise
// cuBLASLt: f32 weights run a true f32 GEMM (no TF32) so that f32 checkpoints match their
// reference; f16/bf16 weights take x rounded to the weight's type and accumulate in f32. On
// that path the fusions are split around the GEMM: the norm is applied while rounding x, the
// silu pairs are read from a product kept in the weight's type, the rotation and cache write
// run after it. cuBLASLt plans (descriptors + algorithm) are cached per shape. FP8 weights
// (dtype.h's GPU layout) go to the GEMV where it applies (x in f32); larger products are W8A8:
// x quantized to e4m3 per token (amax / 448, after the norm where one is fused), cuBLASLt's
// FP8 GEMM of the bytes into f32, then both scales applied per element by one epilogue kernel
// (cuBLASLt 13.1 refuses outer-vector scale modes on the H200: CUBLAS_STATUS_INVALID_VALUE).
// Where cuBLASLt has no FP8 algorithm for a shape, a bf16 copy of the weights is used instead.
#include <cuda_fp8.h>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/gemv.cuh"
#include "runtime/ops.h"

namespace vllm::cuda {
namespace {

#define VLLM_LT_CHECK(expr)                                                       \
  do {                                                                            \
    const cublasStatus_t vllm_st_ = (expr);                                       \
    VLLM_CHECK(vllm_st_ == CUBLAS_STATUS_SUCCESS, #expr, " failed: status ", int(vllm_st_)); \
  } while (0)

// y[r, :] = x[r, :] in T, one block per row (grid-strided); with a norm weight g the row is
// RMS-normed on the way: x * rsqrt(mean(x^2) + eps) * g. Four elements at a time where the
// caller found the rows aligned for it (vec4), one at a time otherwise.
template <typename T, bool kNorm>
__global__ void convert_rows(const float* __restrict__ x, int64_t x_stride,
                             const float* __restrict__ g, float eps, T* __restrict__ y,
                             int64_t rows, int64_t cols, bool vec4) {
  pdl_begin();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * x_stride;
    T* yr = y + r * cols;
    float scale = 1.0f;
    if constexpr (kNorm) {
      float ss = 0.0f;
      if (vec4) {
        for (int64_t i = 4 * threadIdx.x; i < cols; i += 4 * blockDim.x) {
          const float4 v = load4(xr + i);
          ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
      } else {
        for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) ss += xr[i] * xr[i];
      }
      scale = rsqrtf(block_sum(ss) / float(cols) + eps);
    }
    if (vec4) {
      for (int64_t i = 4 * threadIdx.x; i < cols; i += 4 * blockDim.x) {
        float4 v = load4(xr + i);
        if constexpr (kNorm) {
          const float4 w = load4(g + i);
          v = make_float4(v.x * scale * w.x, v.y * scale * w.y, v.z * scale * w.z,
                          v.w * scale * w.w);
        }
        store4(yr + i, v);
      }
    } else {
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        yr[i] = from_float<T>(kNorm ? xr[i] * scale * g[i] : xr[i]);
    }
    if constexpr (kNorm) __syncthreads();  // block_sum's shared slots, before the next row
  }
}

// y[r, :] = bf16(e4m3(w[r, :]) * scale[r]) over the FP8 device layout, 16 weights a thread.
__global__ void dequantize_fp8_rows(const uint8_t* __restrict__ w, int64_t n, int64_t k,
                                    __nv_bfloat16* __restrict__ y) {
  pdl_begin();
  const float* scale = reinterpret_cast<const float*>(w + n * k);
  const int64_t pieces = n * k / 16;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pieces;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 u = reinterpret_cast<const uint4*>(w)[i];
    const float s = scale[i * 16 / k];
    const auto* b = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
    uint4 out[2];
    auto* h = reinterpret_cast<__nv_bfloat162*>(out);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 v = e4m3x2_to_float2(b[j]);
      h[j] = __floats2bfloat162_rn(v.x * s, v.y * s);
    }
    reinterpret_cast<uint4*>(y)[2 * i] = out[0];
    reinterpret_cast<uint4*>(y)[2 * i + 1] = out[1];
  }
}

// Per-tensor FP8 weight quantization at load, in two kernels: each block's max |w| over its
// stride of the n values (NaN skipped by fmaxf, as std::max skips it on the host), then every
// block takes the max of those, s = amax / 448 (1 for all zeros) and e4m3(w / s) clamped to
// +-448 (std::clamp's comparisons) and rounded to nearest even: written as bytes with s in the
// scale slot of each row, or (round_weight_fp8) as e4m3 * s in w's own type, in place.
template <typename T>
__global__ void absmax_partials(const T* __restrict__ w, int64_t n, float* __restrict__ partial) {
  pdl_begin();
  float m = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(to_float(w[i])));
  m = block_max(m);
  if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

__device__ __forceinline__ float fp8_tensor_scale(const float* __restrict__ partial, int parts) {
  float m = 0.0f;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) m = fmaxf(m, partial[i]);
  const float amax = block_max(m);
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

__device__ __forceinline__ __nv_fp8_e4m3 fp8_of(float v) {
  return __nv_fp8_e4m3(v < -448.0f ? -448.0f : (448.0f < v ? 448.0f : v));  // nearest even
}

template <typename T>
__global__ void quantize_weight_fp8(const T* __restrict__ w, int64_t rows, int64_t k,
                                    const float* __restrict__ partial, int parts,
                                    __nv_fp8_e4m3* __restrict__ q, float* __restrict__ scale_out) {
  pdl_begin();
  const float scale = fp8_tensor_scale(partial, parts);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * k; i += stride)
    q[i] = fp8_of(to_float(w[i]) / scale);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += stride)
    scale_out[r] = scale;
}

template <typename T>
__global__ void round_weight_fp8(T* w, int64_t n, const float* __restrict__ partial, int parts) {
  pdl_begin();
  const float scale = fp8_tensor_scale(partial, parts);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    w[i] = from_float<T>(static_cast<float>(fp8_of(to_float(w[i]) / scale)) * scale);
}

// out[r, c] = p[r, c] * row_scale[r] * col_scale[c] (or +=), p a packed [rows, cols] f32
// product of e4m3 bytes, out f32 with row stride ldo (may be p itself, ldo = cols).
__global__ void scale_fp8_product(const float* p, const float* __restrict__ row_scale,
                                  const float* __restrict__ col_scale, int64_t rows,
                                  int64_t cols, float* out, int64_t ldo, bool accumulate) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    float& o = out[r * ldo + c];
    const float v = p[i] * row_scale[r] * col_scale[c];
    o = accumulate ? o + v : v;
  }
}

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default:
      throw Error("matmul weights of type " + std::string(dtype_name(dt)) +
                  " are not supported on CUDA (load them as f16/bf16)");
  }
}

}  // namespace

struct CudaBackend::GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~GemmPlan() {
    if (a) lt().cublasLtMatrixLayoutDestroy(a);
    if (b) lt().cublasLtMatrixLayoutDestroy(b);
    if (c) lt().cublasLtMatrixLayoutDestroy(c);
    if (desc) lt().cublasLtMatmulDescDestroy(desc);
  }
};

// Column-major view: out^T [N, M] = op(w)[N, K] * x^T [K, M], w stored [N, K] row-major, i.e.
// a K x N column-major matrix used transposed.
std::shared_ptr<const CudaBackend::GemmPlan> CudaBackend::gemm_plan(const GemmKey& key) {
  std::lock_guard<std::mutex> lock(plans_mutex_);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  if (plans_.size() >= kMaxGemmPlans) plans_.clear();
  const auto [m, n, k, dt, ldb, ldc, out_dt] = key;
  const bool fp8 = static_cast<DType>(dt) == DType::FP8_E4M3;
  const cudaDataType_t ab = fp8 ? CUDA_R_8F_E4M3 : cuda_type(static_cast<DType>(dt));
  auto plan = std::make_shared<GemmPlan>();
  VLLM_LT_CHECK(lt().cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T;
  VLLM_LT_CHECK(lt().cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                               sizeof(trans_a)));
  VLLM_LT_CHECK(lt().cublasLtMatrixLayoutCreate(&plan->a, ab, k, n, k));
  VLLM_LT_CHECK(lt().cublasLtMatrixLayoutCreate(&plan->b, ab, k, m, ldb));
  VLLM_LT_CHECK(lt().cublasLtMatrixLayoutCreate(&plan->c, cuda_type(static_cast<DType>(out_dt)),
                                                 n, m, ldc));
  cublasLtMatmulPreference_t pref;
  VLLM_LT_CHECK(lt().cublasLtMatmulPreferenceCreate(&pref));
  VLLM_LT_CHECK(lt().cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = lt().cublasLtMatmulAlgoGetHeuristic(
      lt_, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &found);
  lt().cublasLtMatmulPreferenceDestroy(pref);
  if (fp8 && (st != CUBLAS_STATUS_SUCCESS || found == 0)) {  // matmul_fp8 falls back
    plans_.emplace(key, nullptr);
    return nullptr;
  }
  VLLM_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0, "cuBLASLt has no algorithm for ", m, "x",
             n, "x", k, " in ", dtype_name(static_cast<DType>(dt)));
  plan->algo = result.algo;
  return plans_.emplace(key, std::move(plan)).first->second;
}

// The GEMV covers every fusion; cuBLASLt covers accumulation (beta = 1).
bool CudaBackend::matmul_fused(const Tensor& x, const Tensor& w, Tensor& out,
                               const MatmulFusion& f) {
  if (!fusion_enabled()) return false;
  if (f.rope_cache &&
      !(f.rope_cache->k_cache->is_contiguous() && f.rope_cache->v_cache->is_contiguous()))
    return false;  // lane views of a wider cache row (MLA) take the plain ops
  return run_matmul(x, w, out, f);
}

void CudaBackend::matmul(const Tensor& x, const Tensor& w, Tensor& out) {
  run_matmul(x, w, out, {});
}

bool CudaBackend::run_matmul(const Tensor& x, const Tensor& w, Tensor& out,
                             const MatmulFusion& f) {
  VLLM_CHECK(w.is_contiguous(), "CUDA matmul weights must be contiguous");
  if (gemv_applies(x, w, f)) {
    launch_gemv(x, w, out, f, multiprocessors_, stream_);
    return true;
  }
  const bool fused = f.norm_weight || f.silu_and_mul || f.rope_cache;
  if (w.dtype() == DType::FP8_E4M3 && (!fused || !(gemv_applies(x, w, {}) || f.normed_out)))
    return matmul_fp8(x, w, out, f);
  if (!fused) {
    gemm(x, w, out, f.accumulate ? 1.0f : 0.0f);
    return true;
  }
  // cuBLASLt with 16-bit weights takes x as a 16-bit copy: the norm is applied while making it,
  // and the silu pairs are read from a 16-bit product. f32 weights take the plain ops, and so do
  // products the plain GEMV takes (x kept in f32) when the fused one does not apply.
  if (w.dtype() == DType::F32 || gemv_applies(x, w, {}) || f.normed_out) return false;
  const Tensor xin = f.norm_weight ? to_weight_type(x, w.dtype(), f.norm_weight, f.eps) : x;
  if (f.silu_and_mul) {
    Tensor gate_up = Tensor::empty({x.size(0), w.size(0)}, w.dtype(), device());
    gemm(xin, w, gate_up, 0.0f);
    silu_and_mul(gate_up, out);
    return true;
  }
  gemm(xin, w, out, f.accumulate ? 1.0f : 0.0f);
  if (f.rope_cache) rope_cache_after(out, *f.rope_cache);
  return true;
}

void CudaBackend::rope_cache_after(Tensor& qkv, const RopeCacheFusion& rc) {
  QkvHeads h = split_qkv(qkv, rc.q_heads, static_cast<int>(rc.k_cache->size(2)),
                         static_cast<int>(rc.k_cache->size(3)));
  if (!rope_and_cache(h.qk, *rc.positions, *rc.params, h.k, h.v, *rc.k_cache, *rc.v_cache,
                      *rc.slot_mapping, nullptr)) {
    rope(h.qk, *rc.positions, *rc.params);
    reshape_and_cache(h.k, h.v, *rc.k_cache, *rc.v_cache, *rc.slot_mapping);
  }
}

bool CudaBackend::matmul_fp8(const Tensor& x, const Tensor& w, Tensor& out,
                             const MatmulFusion& f) {
  const int64_t m = x.size(0), n = w.size(0), k = w.size(1);
  if (m == 0 || n == 0) return true;
  const std::shared_ptr<const GemmPlan> plan = gemm_plan(
      {m, n, k, static_cast<int>(DType::FP8_E4M3), k, n, static_cast<int>(DType::F32)});
  if (!plan) return run_matmul(x, dequantize_fp8(w), out, f);
  Tensor xq = Tensor::empty({m, k}, DType::F8_E4M3, device());
  Tensor xs = Tensor::empty({m}, DType::F32, device());
  const auto grid = static_cast<unsigned>(std::min<int64_t>(m, 65535));
  const auto* all_rows = static_cast<const int32_t*>(nullptr);
  if (f.norm_weight)
    launch(quantize_rows_fp8_kernel<true>, grid, 256, 0, stream_, x.data<float>(),
           row_stride(x), all_rows, f.norm_weight->data<float>(), f.eps,
           xq.data<__nv_fp8_e4m3>(), xs.data<float>(), m, k);
  else
    launch(quantize_rows_fp8_kernel<false>, grid, 256, 0, stream_, x.data<float>(),
           row_stride(x), all_rows, static_cast<const float*>(nullptr), 0.0f,
           xq.data<__nv_fp8_e4m3>(), xs.data<float>(), m, k);
  // The unscaled product (sums of e4m3 products: far inside f32's range), then the scales.
  Tensor product = Tensor::empty({m, n}, DType::F32, device());
  const float alpha = 1.0f, beta = 0.0f;
  VLLM_LT_CHECK(lt().cublasLtMatmul(lt_, plan->desc, &alpha, w.raw(), plan->a, xq.raw(), plan->b,
                                    &beta, product.raw(), plan->c, product.raw(), plan->c,
                                    &plan->algo, workspace_, workspace_bytes_, stream_));
  const float* w_scale = reinterpret_cast<const float*>(w.data<uint8_t>() + n * k);  // dtype.h
  const auto blocks = static_cast<unsigned>(
      std::min<int64_t>((m * n + 255) / 256, int64_t(multiprocessors_) * 8));
  if (f.silu_and_mul) {
    launch(scale_fp8_product, blocks, 256, 0, stream_, product.data<float>(),
           xs.data<float>(), w_scale, m, n, product.data<float>(), n, false);
    silu_and_mul(product, out);
    return true;
  }
  launch(scale_fp8_product, blocks, 256, 0, stream_, product.data<float>(), xs.data<float>(),
         w_scale, m, n, out.data<float>(), row_stride(out), f.accumulate);
  if (f.rope_cache) rope_cache_after(out, *f.rope_cache);
  return true;
}

int CudaBackend::fp8_absmax_blocks(int64_t n) const {
  return static_cast<int>(std::min<int64_t>((n + 255) / 256, int64_t(multiprocessors_) * 4));
}

void CudaBackend::quantize_fp8_weight(const Tensor& w, Tensor& dst, int64_t row0) {
  const int64_t rows = w.size(0), k = w.size(1), total = dst.size(0);
  if (rows == 0) return;
  const int parts = fp8_absmax_blocks(rows * k);
  Tensor partial = Tensor::empty({parts}, DType::F32, device());
  auto* q = reinterpret_cast<__nv_fp8_e4m3*>(dst.data<uint8_t>() + row0 * k);
  float* scales = reinterpret_cast<float*>(dst.data<uint8_t>() + total * k) + row0;  // dtype.h
  dispatch_float_type(w.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    launch(absmax_partials<T>, static_cast<unsigned>(parts), 256, 0, stream_, w.data<T>(),
           rows * k, partial.data<float>());
    launch(quantize_weight_fp8<T>, static_cast<unsigned>(parts), 256, 0, stream_, w.data<T>(),
           rows, k, static_cast<const float*>(partial.data<float>()), parts, q, scales);
  });
}

void CudaBackend::round_fp8_per_tensor(Tensor& w) {
  const int64_t n = w.numel();
  if (n == 0) return;
  const int parts = fp8_absmax_blocks(n);
  Tensor partial = Tensor::empty({parts}, DType::F32, device());
  dispatch_float_type(w.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    launch(absmax_partials<T>, static_cast<unsigned>(parts), 256, 0, stream_,
           static_cast<const T*>(w.data<T>()), n, partial.data<float>());
    launch(round_weight_fp8<T>, static_cast<unsigned>(parts), 256, 0, stream_, w.data<T>(), n,
           static_cast<const float*>(partial.data<float>()), parts);
  });
}

Tensor CudaBackend::dequantize_fp8(const Tensor& w) {
  VLLM_CHECK(w.ndim() == 2 && w.is_contiguous() && w.size(1) % 16 == 0, "FP8 weight ",
             w.shape_str());
  const int64_t n = w.size(0), k = w.size(1);
  Tensor y = Tensor::empty({n, k}, DType::BF16, device());
  const int64_t pieces = n * k / 16;
  if (pieces == 0) return y;
  const auto grid = static_cast<unsigned>(std::min<int64_t>((pieces + 255) / 256,
                                                            int64_t(multiprocessors_) * 16));
  launch(dequantize_fp8_rows, grid, 256, 0, stream_, w.data<uint8_t>(), n, k,
         y.data<__nv_bfloat16>());
  return y;
}

Tensor CudaBackend::to_weight_type(const Tensor& x, DType type, const Tensor* norm_weight,
                                   float eps) {
  const int64_t m = x.size(0), k = x.size(1), ldx = row_stride(x);
  Tensor y = Tensor::empty({m, k}, type, device());
  if (m == 0) return y;
  const bool vec4 =
      k % 4 == 0 && ldx % 4 == 0 && aligned16(x) && (!norm_weight || aligned16(*norm_weight));
  const auto grid = static_cast<unsigned>(std::min<int64_t>(m, 65535));
  const float* g = norm_weight ? norm_weight->data<float>() : nullptr;
  dispatch_float_type(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (norm_weight)
      launch(convert_rows<T, true>, grid, row_threads(k / 4), 0, stream_, x.data<float>(), ldx, g,
          eps, y.data<T>(), m, k, vec4);
    else
      launch(convert_rows<T, false>, grid, row_threads(k / 4), 0, stream_, x.data<float>(), ldx,
          g, eps, y.data<T>(), m, k, vec4);
  });
  return y;
}

// out = x @ w^T + beta * out through cuBLASLt. x in f32 is first rounded to w's type (when that
// is 16-bit); out is f32 or w's type.
void CudaBackend::gemm(const Tensor& x, const Tensor& w, Tensor& out, float beta) {
  const int64_t m = x.size(0), n = w.size(0);
  if (m == 0 || n == 0) return;
  const DType wt = w.dtype();
  (void)cuda_type(wt);
  VLLM_CHECK(out.dtype() == DType::F32 || out.dtype() == wt, "gemm output ",
             dtype_name(out.dtype()));
  const Tensor b = x.dtype() == wt ? x : to_weight_type(x, wt, nullptr, 0.0f);
  const int64_t k = b.size(1);
  const std::shared_ptr<const GemmPlan> plan =
      gemm_plan({m, n, k, static_cast<int>(wt), row_stride(b), row_stride(out),
                 static_cast<int>(out.dtype())});
  const float alpha = 1.0f;
  VLLM_LT_CHECK(lt().cublasLtMatmul(lt_, plan->desc, &alpha, w.raw(), plan->a, b.raw(), plan->b,
                                    &beta, out.raw(), plan->c, out.raw(), plan->c, &plan->algo,
                                    workspace_, workspace_bytes_, stream_));
}

}  // namespace vllm::cuda
