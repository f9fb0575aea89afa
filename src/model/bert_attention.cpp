// bert_attention: the portable kernel and the parallel loop over (sequence, head) units with the
// kernel of the CPU's ISA.
#include "model/bert_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/isa.h"
#include "runtime/thread_pool.h"

namespace vllm::bert_attention {
namespace portable {
#include "model/bert_attention.inc"
}  // namespace portable

namespace {

HeadFn kernel() {
  switch (cpu::detected_isa()) {
    case cpu::Isa::Avx512Vnni: return avx512::head;
    case cpu::Isa::Avx2: return avx2::head;
    case cpu::Isa::Scalar: break;
  }
  return portable::head;
}

}  // namespace

void attention(const Tensor& qkv, const std::vector<int32_t>& starts, int num_heads, Tensor& out) {
  const int64_t H = out.size(1), d = H / num_heads;
  const int64_t num_seqs = static_cast<int64_t>(starts.size()) - 1;
  const int64_t ld = qkv.stride_bytes(0) / 4, ldo = out.stride_bytes(0) / 4;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const HeadFn run = kernel();
  cpu_pool().parallel_for(num_seqs * num_heads, [&](int64_t u0, int64_t u1) {
    std::vector<float> scratch;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t s = u / num_heads, h = u % num_heads;
      const int64_t begin = starts[s], len = starts[s + 1] - begin;
      scratch.resize(static_cast<size_t>((len + 15) / 16 * 16 * (d + 1)));
      const float* base = reinterpret_cast<const float*>(qkv.row(begin)) + h * d;
      run(base, base + H, base + 2 * H, ld, len, d, scale,
          reinterpret_cast<float*>(out.row(begin)) + h * d, ldo, scratch.data());
    }
  });
}

}  // namespace vllm::bert_attention
