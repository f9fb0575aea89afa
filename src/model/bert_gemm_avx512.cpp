// bert_gemm's kernel for AVX-512 (this file gets the AVX-512 flags): two panels per tile.
#include <cstring>

#include "model/bert_gemm.h"

namespace vllm::bert_gemm::avx512 {
constexpr bool kWide = true;
#include "model/bert_gemm.inc"
}  // namespace vllm::bert_gemm::avx512
