// bert_gemm's kernel for AVX2 + FMA (this file gets those flags): one panel per tile (a 16-wide
// vector is two registers).
#include <cstring>

#include "model/bert_gemm.h"

namespace vllm::bert_gemm::avx2 {
constexpr bool kWide = false;
#include "model/bert_gemm.inc"
}  // namespace vllm::bert_gemm::avx2
