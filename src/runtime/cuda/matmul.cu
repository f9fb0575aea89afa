// out[M, N] = x[M, K] @ w[N, K]^T. Few rows (decode) with f16/bf16 weights: our own GEMV,
// which streams the weights once with 16-byte loads and reads x in f32 as it is. Otherwise
// cuBLASLt: f32 weights run a true f32 GEMM (no TF32) so that f32 checkpoints match their
// reference; f16/bf16 weights take x rounded to the weight's type and accumulate in f32.
// cuBLASLt plans (descriptors + algorithm) are cached per shape.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_backend.h"

namespace vllm::cuda {
namespace {

#define VLLM_LT_CHECK(expr)                                                       \
  do {                                                                            \
    const cublasStatus_t vllm_st_ = (expr);                                       \
    VLLM_CHECK(vllm_st_ == CUBLAS_STATUS_SUCCESS, #expr, " failed: status ", int(vllm_st_)); \
  } while (0)

template <typename T>
__global__ void convert_rows(const float* __restrict__ x, int64_t x_stride, T* __restrict__ y,
                             int64_t rows, int64_t cols) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_float<T>(x[(i / cols) * x_stride + i % cols]);
}

constexpr int kGemvMaxRows = 8;
constexpr int kGemvWarps = 4;  // warps per block
constexpr int kGemvUnroll = 8;  // 16-byte weight loads in flight per lane

__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8], const __nv_bfloat16*) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x, f[2 * i + 1] = v.y;
  }
}
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8], const __half*) {
  const auto* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __half22float2(h[i]);
    f[2 * i] = v.x, f[2 * i + 1] = v.y;
  }
}

// Each output column n takes WPC warps of a block (a block covers kGemvWarps / WPC columns):
// their lanes stride over K in 8-element (16-byte) pieces of w[n], each multiplied into all
// M rows of x, and a warp then block reduction gives out[:, n]. WPC is chosen so that a lane
// has about one round of kGemvUnroll loads: a row read in several dependent rounds would
// wait out the memory latency once per round. The first round is issued before pdl_wait():
// weights depend on no earlier kernel, so they stream in while the previous kernel finishes.
template <typename W, int M, int WPC>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(const float* __restrict__ x, int64_t ldx, const W* __restrict__ w, int64_t k,
                int64_t n, float* __restrict__ out, int64_t ldo) {
  constexpr int kStride = 32 * WPC;  // lanes sharing one column
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int part = (warp % WPC) * 32 + lane;
  const int64_t col = int64_t(blockIdx.x) * (kGemvWarps / WPC) + warp / WPC;
  const int64_t pieces = col < n ? k / 8 : 0;
  const uint4* wrow = reinterpret_cast<const uint4*>(w + (col < n ? col : 0) * k);
  uint4 wv[kGemvUnroll];
  const auto load_round = [&](int64_t p0) {
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const int64_t p = p0 + u * kStride;
      wv[u] = p < pieces ? __ldg(wrow + p) : make_uint4(0, 0, 0, 0);
    }
  };
  load_round(part);
  pdl_begin();
  float acc[M] = {};
  for (int64_t p0 = part; p0 < pieces; p0 += kStride * kGemvUnroll) {
    if (p0 != part) load_round(p0);
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const int64_t p = p0 + u * kStride;
      if (p >= pieces) break;
      float wf[8];
      unpack8(wv[u], wf, static_cast<const W*>(nullptr));
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float4* xp = reinterpret_cast<const float4*>(x + m * ldx + p * 8);
        const float4 a = __ldg(xp), b = __ldg(xp + 1);
        acc[m] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x +
                  wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = warp_sum(acc[m]);
  if constexpr (WPC > 1) {
    __shared__ float partial[kGemvWarps][M];
    if (lane == 0)
#pragma unroll
      for (int m = 0; m < M; ++m) partial[warp][m] = acc[m];
    __syncthreads();
    if (warp % WPC != 0) return;
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int i = 1; i < WPC; ++i) acc[m] += partial[warp + i][m];
  }
  if (col >= n || lane != 0) return;
#pragma unroll
  for (int m = 0; m < M; ++m) out[m * ldo + col] = acc[m];
}

template <typename W, int WPC>
void launch_gemv_split(const Tensor& x, const Tensor& w, Tensor& out, cudaStream_t stream) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  constexpr int kCols = kGemvWarps / WPC;
  const auto grid = static_cast<unsigned>((n + kCols - 1) / kCols);
  const float* xp = x.data<float>();
  const W* wp = w.data<W>();
  float* op = out.data<float>();
  const int64_t ldx = row_stride(x), ldo = row_stride(out);
  switch (m) {
#define VLLM_GEMV_CASE(M)                                                                      \
  case M:                                                                                      \
    launch(gemv_kernel<W, M, WPC>, grid, kGemvWarps * 32, 0, stream, xp, ldx, wp, k, n, op, ldo); \
    break;
    VLLM_GEMV_CASE(1) VLLM_GEMV_CASE(2) VLLM_GEMV_CASE(3) VLLM_GEMV_CASE(4)
    VLLM_GEMV_CASE(5) VLLM_GEMV_CASE(6) VLLM_GEMV_CASE(7) VLLM_GEMV_CASE(8)
#undef VLLM_GEMV_CASE
    default: VLLM_CHECK(false, "gemv rows ", m);
  }
}

template <typename W>
void launch_gemv(const Tensor& x, const Tensor& w, Tensor& out, cudaStream_t stream) {
  const int64_t rounds = (w.size(1) / 8 + 32 * kGemvUnroll - 1) / (32 * kGemvUnroll);
  if (rounds <= 1) launch_gemv_split<W, 1>(x, w, out, stream);
  else if (rounds == 2) launch_gemv_split<W, 2>(x, w, out, stream);
  else launch_gemv_split<W, 4>(x, w, out, stream);
}

// The GEMV needs 16-byte aligned rows of x and w.
bool gemv_applies(const Tensor& x, const Tensor& w) {
  const DType dt = w.dtype();
  return x.size(0) <= kGemvMaxRows && (dt == DType::BF16 || dt == DType::F16) &&
         x.size(1) % 8 == 0 && row_stride(x) % 4 == 0 &&
         reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w.raw()) % 16 == 0;
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
const CudaBackend::GemmPlan& CudaBackend::gemm_plan(const GemmKey& key) {
  std::lock_guard<std::mutex> lock(plans_mutex_);
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const auto [m, n, k, dt, ldb, ldc] = key;
  const cudaDataType_t ab = cuda_type(static_cast<DType>(dt));
  auto plan = std::make_shared<GemmPlan>();
  VLLM_LT_CHECK(lt().cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T;
  VLLM_LT_CHECK(lt().cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                               sizeof(trans_a)));
  VLLM_LT_CHECK(lt().cublasLtMatrixLayoutCreate(&plan->a, ab, k, n, k));
  VLLM_LT_CHECK(lt().cublasLtMatrixLayoutCreate(&plan->b, ab, k, m, ldb));
  VLLM_LT_CHECK(lt().cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_32F, n, m, ldc));
  cublasLtMatmulPreference_t pref;
  VLLM_LT_CHECK(lt().cublasLtMatmulPreferenceCreate(&pref));
  VLLM_LT_CHECK(lt().cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = lt().cublasLtMatmulAlgoGetHeuristic(
      lt_, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &found);
  lt().cublasLtMatmulPreferenceDestroy(pref);
  VLLM_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0, "cuBLASLt has no algorithm for ", m, "x",
             n, "x", k, " in ", dtype_name(static_cast<DType>(dt)));
  plan->algo = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void CudaBackend::matmul(const Tensor& x, const Tensor& w, Tensor& out) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  if (m == 0 || n == 0) return;
  VLLM_CHECK(w.is_contiguous(), "CUDA matmul weights must be contiguous");
  const DType wt = w.dtype();
  (void)cuda_type(wt);
  if (gemv_applies(x, w)) {
    if (wt == DType::BF16) launch_gemv<__nv_bfloat16>(x, w, out, stream_);
    else launch_gemv<__half>(x, w, out, stream_);
    return;
  }
  const void* b = x.raw();
  int64_t ldb = row_stride(x);
  Tensor converted;
  if (wt != DType::F32) {
    converted = Tensor::empty({m, k}, wt, device());
    const auto grid = static_cast<unsigned>(std::min<int64_t>((m * k + 255) / 256, 4096));
    dispatch_float_type(wt, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      launch(convert_rows<T>, grid, 256, 0, stream_, x.data<float>(), ldb, converted.data<T>(), m,
          k);
    });
    b = converted.raw();
    ldb = k;
  }
  const GemmPlan& plan = gemm_plan({m, n, k, static_cast<int>(wt), ldb, row_stride(out)});
  const float alpha = 1.0f, beta = 0.0f;
  VLLM_LT_CHECK(lt().cublasLtMatmul(lt_, plan.desc, &alpha, w.raw(), plan.a, b, plan.b, &beta,
                               out.raw(), plan.c, out.raw(), plan.c, &plan.algo, workspace_,
                               workspace_bytes_, stream_));
}

}  // namespace vllm::cuda
