#include "runtime/kernel_options.h"

#include "util/check.h"

namespace vllm {
namespace {

KernelOptions& options() {
  static KernelOptions o;
  return o;
}

}  // namespace

void set_kernel_options(const KernelOptions& o) {
  if (o.cpu_isa != "auto" && o.cpu_isa != "avx512vnni" && o.cpu_isa != "avx2" &&
      o.cpu_isa != "scalar")
    throw Error("--cpu-isa " + o.cpu_isa + ": expected auto, avx512vnni, avx2 or scalar");
  if (o.gemv_slices != 0 && o.gemv_slices != 1 && o.gemv_slices != 2 && o.gemv_slices != 4 &&
      o.gemv_slices != 8)
    throw Error("--gemv-slices " + std::to_string(o.gemv_slices) + ": expected 0 (per shape), 1, "
                "2, 4 or 8");
  options() = o;
}

const KernelOptions& kernel_options() { return options(); }

}  // namespace vllm
