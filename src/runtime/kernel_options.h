// Kernel choices for A/B measurements, profiling and tests: the defaults are what the engine
// runs; the command line can change them (cli: --cpu-isa, --no-cuda-fusion, --no-cuda-pdl,
// --gemv-slices, --fp8-gemv-tensor-cores, --cuda-repeat-kernel) before the first kernel
// runs. No environment variable changes a kernel.
#pragma once
#include <string>

namespace vllm {

struct KernelOptions {
  // The widest CPU kernels used: "auto" (what the CPU has), "avx512vnni", "avx2" or "scalar".
  // Read once, at the first CPU kernel.
  std::string cpu_isa = "auto";
  bool cuda_fusion = true;  // decode's fused kernels (norm into GEMV, SiLU pairs, residual adds)
  bool cuda_pdl = true;     // programmatic dependent launch (Hopper and newer)
  int gemv_slices = 0;      // 0: chosen per shape; 1, 2, 4 or 8: the GEMV's K split forced
  // FP8 weights' GEMV (up to 8 rows) on the tensor cores (f16 MMA of e4m3 pairs against x as
  // two f16 terms) instead of the CUDA cores. Off: slower so far (docs/benchmarks.md).
  bool fp8_gemv_tensor_cores = false;
  // Profiling: every launch of a kernel whose name contains this runs twice (its cost in the
  // step is the difference); empty: none.
  std::string cuda_repeat_kernel;
};

// Throws vllm::Error naming the option for a value outside its choices.
void set_kernel_options(const KernelOptions& options);
const KernelOptions& kernel_options();

}  // namespace vllm
