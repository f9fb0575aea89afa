// bert_gemm: packing, the portable kernel, and the parallel loop over (panel pair, row chunk)
// tasks with the kernel of the CPU's ISA.
#include "model/bert_gemm.h"

#include <cstring>

#include "runtime/cpu/isa.h"
#include "runtime/thread_pool.h"
#include "util/check.h"

namespace vllm::bert_gemm {
namespace portable {
constexpr bool kWide = false;
#include "model/bert_gemm.inc"
}  // namespace portable

namespace {

float element(const Tensor& w, int64_t row, int64_t col) {
  const char* r = w.row(row);
  switch (w.dtype()) {
    case DType::F32: return reinterpret_cast<const float*>(r)[col];
    case DType::F16: return f16_to_f32(reinterpret_cast<const uint16_t*>(r)[col]);
    case DType::BF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(r)[col]);
    default: throw Error("bert_gemm: weights must be f32, f16 or bf16");
  }
}

BlockFn kernel() {
  switch (cpu::detected_isa()) {
    case cpu::Isa::Avx512Vnni: return avx512::run_block;
    case cpu::Isa::Avx2: return avx2::run_block;
    case cpu::Isa::Scalar: break;
  }
  return portable::run_block;
}

constexpr int64_t kRowChunk = 48;  // rows per task: a multiple of the kernels' 6-row tiles

}  // namespace

PackedLinear pack(const Tensor& w, const std::vector<float>& bias) {
  VLLM_CHECK(w.ndim() == 2 && bias.size() == static_cast<size_t>(w.size(0)), "pack of ",
             w.shape_str(), " with ", bias.size(), " biases");
  PackedLinear p;
  p.n = w.size(0);
  p.k = w.size(1);
  const int64_t num_panels = (p.n + kPanel - 1) / kPanel;
  p.panels.assign(static_cast<size_t>(num_panels * p.k * kPanel), 0.0f);
  p.bias.assign(static_cast<size_t>(num_panels * kPanel), 0.0f);
  for (int64_t n = 0; n < p.n; ++n) {
    float* dst = p.panels.data() + (n / kPanel) * p.k * kPanel + n % kPanel;
    for (int64_t k = 0; k < p.k; ++k) dst[k * kPanel] = element(w, n, k);
    p.bias[n] = bias[n];
  }
  return p;
}

void linear(const Tensor& x, const PackedLinear& w, Tensor& out) {
  VLLM_CHECK(x.dtype() == DType::F32 && out.dtype() == DType::F32 && x.ndim() == 2 &&
                 out.ndim() == 2 && x.size(1) == w.k && out.size(1) == w.n &&
                 out.size(0) == x.size(0),
             "linear of ", x.shape_str(), " to ", out.shape_str(), " with [", w.n, ", ", w.k, "]");
  const int64_t m = x.size(0);
  if (m == 0) return;
  const int64_t num_panels = (w.n + kPanel - 1) / kPanel;
  const int64_t pairs = (num_panels + 1) / 2, chunks = (m + kRowChunk - 1) / kRowChunk;
  const int64_t ldx = x.stride_bytes(0) / 4, ldo = out.stride_bytes(0) / 4;
  const BlockFn run = kernel();
  cpu_pool().parallel_for(pairs * chunks, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pair = t % pairs, r0 = (t / pairs) * kRowChunk;
      const int64_t panel = pair * 2;
      const int count = panel + 1 < num_panels ? 2 : 1;
      run(reinterpret_cast<const float*>(x.row(r0)), ldx, std::min(kRowChunk, m - r0),
          w.panels.data() + panel * w.k * kPanel, count, w.k, w.bias.data() + panel * kPanel,
          reinterpret_cast<float*>(out.row(r0)) + panel * kPanel, ldo, w.n - panel * kPanel);
    }
  });
}

}  // namespace vllm::bert_gemm
