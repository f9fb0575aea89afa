#include "runtime/cuda/cublaslt.h"

#include <cublas_api.h>

#include "runtime/cuda/dynamic_library.h"

#define VLLM_STR2(x) #x
#define VLLM_STR(x) VLLM_STR2(x)

namespace vllm::cuda {

const CublasLt& lt() {
  static const CublasLt table = [] {
    const DynamicLibrary lib({"libcublasLt.so." VLLM_STR(CUBLAS_VER_MAJOR), "libcublasLt.so"},
                             "cuBLASLt (CUDA " VLLM_STR(CUBLAS_VER_MAJOR) ")");
    CublasLt t;
#define VLLM_LT_BIND(name) lib.bind(t.name, #name);
    VLLM_LT_BIND(cublasLtCreate)
    VLLM_LT_BIND(cublasLtDestroy)
    VLLM_LT_BIND(cublasLtMatmul)
    VLLM_LT_BIND(cublasLtMatmulAlgoGetHeuristic)
    VLLM_LT_BIND(cublasLtMatmulDescCreate)
    VLLM_LT_BIND(cublasLtMatmulDescDestroy)
    VLLM_LT_BIND(cublasLtMatmulDescSetAttribute)
    VLLM_LT_BIND(cublasLtMatmulPreferenceCreate)
    VLLM_LT_BIND(cublasLtMatmulPreferenceDestroy)
    VLLM_LT_BIND(cublasLtMatmulPreferenceSetAttribute)
    VLLM_LT_BIND(cublasLtMatrixLayoutCreate)
    VLLM_LT_BIND(cublasLtMatrixLayoutDestroy)
#undef VLLM_LT_BIND
    return t;
  }();
  return table;
}

}  // namespace vllm::cuda
