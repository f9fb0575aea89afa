#include "runtime/cuda/cublaslt.h"

#include <cublas_api.h>
#include <dlfcn.h>

#include <string>

#include "util/check.h"

#define VLLM_STR2(x) #x
#define VLLM_STR(x) VLLM_STR2(x)

namespace vllm::cuda {

const CublasLt& lt() {
  static const CublasLt table = [] {
    void* lib = nullptr;
    std::string errors;
    for (const char* name : {"libcublasLt.so." VLLM_STR(CUBLAS_VER_MAJOR), "libcublasLt.so"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      errors += std::string(errors.empty() ? "" : "; ") + dlerror();
    }
    if (!lib) throw Error("cannot load cuBLASLt (CUDA " VLLM_STR(CUBLAS_VER_MAJOR) "): " + errors);
    CublasLt t;
    auto bind = [&](auto& fn, const char* sym) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, sym));
      if (!fn) throw Error(std::string("cuBLASLt has no symbol ") + sym);
    };
#define VLLM_LT_BIND(name) bind(t.name, #name);
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
