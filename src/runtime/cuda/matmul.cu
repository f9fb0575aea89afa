// out[M, N] = x[M, K] @ w[N, K]^T. Few rows (decode) with f16/bf16 weights: our own GEMV
// (gemv.cu), which streams the weights once and reads x in f32 as it is. Otherwise
// cuBLASLt: f32 weights run a true f32 GEMM (no TF32) so that f32 checkpoints match their
// reference; f16/bf16 weights take x rounded to the weight's type and accumulate in f32.
// cuBLASLt plans (descriptors + algorithm) are cached per shape.
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

template <typename T>
__global__ void convert_rows(const float* __restrict__ x, int64_t x_stride, T* __restrict__ y,
                             int64_t rows, int64_t cols) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_float<T>(x[(i / cols) * x_stride + i % cols]);
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

// The GEMV covers every fusion; cuBLASLt covers accumulation (beta = 1).
bool CudaBackend::matmul_fused(const Tensor& x, const Tensor& w, Tensor& out,
                               const MatmulFusion& f) {
  if (!fusion_enabled()) return false;
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
  if (f.norm_weight || f.silu_and_mul || f.rope_cache) return false;
  gemm(x, w, out, f.accumulate ? 1.0f : 0.0f);
  return true;
}

// out = x @ w^T + beta * out through cuBLASLt.
void CudaBackend::gemm(const Tensor& x, const Tensor& w, Tensor& out, float beta) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  if (m == 0 || n == 0) return;
  const DType wt = w.dtype();
  (void)cuda_type(wt);
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
  const float alpha = 1.0f;
  VLLM_LT_CHECK(lt().cublasLtMatmul(lt_, plan.desc, &alpha, w.raw(), plan.a, b, plan.b, &beta,
                               out.raw(), plan.c, out.raw(), plan.c, &plan.algo, workspace_,
                               workspace_bytes_, stream_));
}

}  // namespace vllm::cuda
