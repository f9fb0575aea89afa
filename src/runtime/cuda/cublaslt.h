// cuBLASLt, opened with dlopen when the first CUDA backend starts: linked normally, its
// ~200 MiB library would be mapped and relocated at start-up by every run, CPU-only ones too.
// Call through lt() (e.g. lt().cublasLtMatmul(...)); the signatures are the header's own.
#pragma once
#include <cublasLt.h>

namespace vllm::cuda {

struct CublasLt {
#define VLLM_LT_FN(name) decltype(&::name) name = nullptr;
  VLLM_LT_FN(cublasLtCreate)
  VLLM_LT_FN(cublasLtDestroy)
  VLLM_LT_FN(cublasLtMatmul)
  VLLM_LT_FN(cublasLtMatmulAlgoGetHeuristic)
  VLLM_LT_FN(cublasLtMatmulDescCreate)
  VLLM_LT_FN(cublasLtMatmulDescDestroy)
  VLLM_LT_FN(cublasLtMatmulDescSetAttribute)
  VLLM_LT_FN(cublasLtMatmulPreferenceCreate)
  VLLM_LT_FN(cublasLtMatmulPreferenceDestroy)
  VLLM_LT_FN(cublasLtMatmulPreferenceSetAttribute)
  VLLM_LT_FN(cublasLtMatrixLayoutCreate)
  VLLM_LT_FN(cublasLtMatrixLayoutDestroy)
#undef VLLM_LT_FN
};

// Loads the library on first use; throws vllm::Error naming what is missing.
const CublasLt& lt();

}  // namespace vllm::cuda
